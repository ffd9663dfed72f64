"""The BI views (src/logmetrics/tables/sql/) run on Spark SQL over the tables as written, and
give the figures worked out by hand (weekly figures from added counts, week-over-week changes,
the 90 days); `logmetrics views` creates the same views over a path warehouse."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType
from pyspark.testing import assertDataFrameEqual

from logmetrics.config import OutputConfig
from logmetrics.errors import InputError
from logmetrics.tables.catalog import (
    ALERTS_TABLE,
    CROWDING_TABLE,
    DAILY_TABLE,
    DATA_QUALITY_TABLE,
    JOB_RUNS_TABLE,
    K_SWEEP_TABLE,
    REDUNDANCY_COST_TABLE,
    RunStamp,
    Table,
    append,
    table_location,
    with_run_stamp,
)
from logmetrics.tables.views import create_views, view_statements

RUN_FIELDS = {"cluster_table_version", "run_id", "computed_at"}
VIEWS = [
    "data_quality_outcomes",
    "job_runs_last_status",
    "redundancy_cost_latest_90_days",
    "unique_clusters_alert_culprits",
    "unique_clusters_k_sweep_latest_90_days",
    "unique_clusters_latest_90_days",
    "unique_clusters_weekly",
]
SQL = Path(__file__).resolve().parents[1] / "src" / "logmetrics" / "tables" / "sql"
MONDAY = dt.date(2026, 11, 2)
LATEST = MONDAY + dt.timedelta(days=13)  # the newest published date, 2026-11-15
# Days at the 90-day view's edge: 89 days before the newest date is in it, 90 and 91 are not.
EDGE = {n: LATEST - dt.timedelta(days=n) for n in (89, 90, 91)}


def _daily_row(
    day: dt.date, histogram: list[int], missing: int, segment: str = "all"
) -> dict[str, Any]:
    queries = sum(histogram)
    return {
        "metric_date": day,
        "k": len(histogram) - 1,
        "segment": segment,
        "segment_value": segment if segment == "all" else "web",
        "queries": queries,
        "empty_queries": histogram[0],
        "histogram": histogram,
        "threshold": 1,
        "results": 2 * queries,
        "missing_cluster_results": missing,
        "dq_passed": True,
        "rows_read": queries,
        "duplicate_rows": 0,
        "quarantined_rows": 0,
        "quarantined_entries": 0,
    }


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A path warehouse holding unique_clusters_daily (two full ISO weeks and three old days,
    at the 90-day view's edge) and, by hand, the other tables the views read (OTHER_TABLES)."""
    root = tmp_path_factory.mktemp("bi")
    rows = [_daily_row(old, [0, 1, 0], 0) for old in EDGE.values()]
    for i in range(7):  # week 1: 0, 1, 2, 2 clusters; 1 missing of 8 results, every day
        rows.append(_daily_row(MONDAY + dt.timedelta(days=i), [1, 1, 2], 1))
    for i in range(7, 14):  # week 2: 1, 1, 2, 2 clusters; nothing missing
        rows.append(_daily_row(MONDAY + dt.timedelta(days=i), [0, 2, 2], 0))
    rows.append(_daily_row(MONDAY + dt.timedelta(days=8), [0, 1, 0], 0, segment="surface"))
    output = OutputConfig(warehouse=str(root / "warehouse"))
    fields = [f for f in DAILY_TABLE.schema.fields if f.name not in RUN_FIELDS]
    df = spark.createDataFrame(
        [tuple(r.get(f.name) for f in fields) for r in rows], StructType(fields)
    )
    stamp = RunStamp("test", dt.datetime(2026, 11, 16, tzinfo=dt.UTC), None)
    append(spark, with_run_stamp(df, stamp), output, DAILY_TABLE)  # a new table: no replace
    for table, table_rows in OTHER_TABLES.items():
        _write(spark, str(root / "warehouse"), table, table_rows)
    return root / "warehouse"


def _write(spark: SparkSession, warehouse: str, table: Table, rows: list[dict[str, Any]]) -> None:
    """`rows` as a Delta table of `table`'s schema; a column a row leaves out is null, and the
    run's columns are filled in."""
    stamp = {"run_id": "test", "computed_at": dt.datetime(2026, 11, 16), "cluster_table_version": 3}
    values = [tuple({**stamp, **row}.get(f.name) for f in table.schema.fields) for row in rows]
    df = spark.createDataFrame(values, table.schema)
    df.write.format("delta").save(table_location(warehouse, table))


# The other tables the views read, by hand. Days: the 8th of the two weeks (the segment row's
# day), the 9th and the 10th.
DAY8, DAY9, DAY10 = (MONDAY + dt.timedelta(days=n) for n in (8, 9, 10))
OLD = EDGE[90]  # 90 days before the newest date: outside every "latest 90 days" view


def _alert(day: dt.date, segment: str, value: str, statistic: str, status: str) -> dict[str, Any]:
    return {
        "metric_date": day, "k": 2, "segment": segment, "segment_value": value,
        "statistic": statistic, "value": 1.0, "baseline_mean": 1.5, "baseline_sd": 0.1,
        "baseline_days": 4, "queries": 4, "delta": -0.5, "limit": 0.25, "min_effect": 0.2,
        "status": status, "cluster_table_changed": False,
    }  # fmt: skip


def _culprit(
    day: dt.date, k: int, segment: str, rank: int, cluster: str | None, chunk: str | None = None
) -> dict[str, Any]:
    slots = 100 - rank
    return {
        "metric_date": day, "k": k, "segment": segment,
        "segment_value": "all" if segment == "all" else "web", "rank": rank,
        "cluster_id": cluster, "chunk_id": chunk, "redundant_slots": slots,
        "requests_affected": rank, "share_of_redundant_slots": 0.1, "cluster_size": 2,
        "example_request_ids": ["r1"], "redundant_tokens": 510 * slots,
        "redundant_usd": 510 * slots * 3e-6,
    }  # fmt: skip


def _sweep(day: dt.date, k: int, queries: int, total: int, segment: str = "all") -> dict[str, Any]:
    return {
        "metric_date": day, "k": k, "segment": segment,
        "segment_value": "all" if segment == "all" else "web", "queries": queries,
        "unique_clusters_total": total, "mean_unique_clusters": total / queries,
        "distinct_fraction": total / queries / k, "marginal_rate": -1.0,  # not read
    }  # fmt: skip


def _cost(day: dt.date, k: int, segment: str = "all") -> dict[str, Any]:
    return {
        "metric_date": day, "k": k, "segment": segment,
        "segment_value": "all" if segment == "all" else "web", "queries": 4, "slots": 4 * k,
        "redundant_slots": k, "redundant_tokens": 510 * k, "redundant_usd": 510 * k * 3e-6,
        "tokens_per_slot": 510, "usd_per_million_input_tokens": 3.0,
    }  # fmt: skip


def _check(day: dt.date, check: str, success: bool | None, severity: str) -> dict[str, Any]:
    return {
        "metric_date": day, "check": check, "success": success, "observed_value": 1.0,
        "threshold": 0.0, "severity": severity, "checked_at": dt.datetime(2026, 11, 16),
        "details": "{}",
    }  # fmt: skip


def _ledger(
    day: dt.date, run: str, status: str, started: int, finished: int | None
) -> dict[str, Any]:
    at = dt.datetime(2026, 11, 16)
    return {
        "run_id": run, "metric_date": day, "status": status,
        "started_at": at + dt.timedelta(hours=started),
        "finished_at": None if finished is None else at + dt.timedelta(hours=finished),
        "inputs_fingerprint": "i", "config_fingerprint": "c", "code_version": "0",
    }  # fmt: skip


SHARE = "share_at_or_below_threshold"
OTHER_TABLES: dict[Table, list[dict[str, Any]]] = {
    ALERTS_TABLE: [
        _alert(DAY8, "all", "all", "mean", "alert"),
        _alert(DAY8, "all", "all", SHARE, "ok"),
        _alert(DAY9, "surface", "web", "mean", "improvement"),
        _alert(DAY10, "all", "all", "mean", "alert"),  # no crowding row that day
    ],
    CROWDING_TABLE: [
        _culprit(DAY8, 2, "all", 1, "kb-a"),
        _culprit(DAY8, 2, "all", 2, None, "chunk-x"),
        *[_culprit(DAY8, 2, "all", rank, f"c{rank}") for rank in range(3, 7)],  # 6: not shown
        _culprit(DAY8, 1, "all", 1, "other-k"),  # not the alert's k
        _culprit(DAY8, 2, "surface", 1, "segment"),  # not the alert's segment row
        _culprit(DAY9, 2, "surface", 1, "improved"),  # an improvement has no culprits
    ],
    K_SWEEP_TABLE: [
        *[_sweep(DAY8, k, 2, total) for k, total in ((1, 2), (2, 3), (3, 4))],
        *[_sweep(DAY9, k, 6, total) for k, total in ((1, 6), (2, 12), (3, 15))],
        *[_sweep(OLD, k, 100, 100) for k in (1, 2, 3)],  # outside the 90 days
        _sweep(DAY8, 2, 4, 6, "surface"),  # k = 1 missing: no marginal rate
    ],
    REDUNDANCY_COST_TABLE: [
        _cost(DAY8, 1),  # the daily table has k = 2 only
        _cost(DAY8, 2),
        _cost(DAY8, 2, "surface"),
        _cost(DAY9, 2),
        _cost(OLD, 2),  # outside the 90 days
    ],
    DATA_QUALITY_TABLE: [
        _check(DAY8, "missing_cluster_rate", True, "blocking"),
        _check(DAY8, "malformed_rate", False, "blocking"),
        _check(DAY8, "unique_cluster_chunk_ids", False, "warning"),
        _check(DAY8, "volume", None, "warning"),
    ],
    JOB_RUNS_TABLE: [
        # DAY8: published by r1; r2 started it later and has not finished (or was killed).
        _ledger(DAY8, "r1", "started", 0, None),
        _ledger(DAY8, "r1", "published", 0, 1),
        _ledger(DAY8, "r2", "started", 2, None),
        # DAY9: held by r1, then r2 failed on it.
        _ledger(DAY9, "r1", "started", 0, None),
        _ledger(DAY9, "r1", "held", 0, 1),
        _ledger(DAY9, "r2", "started", 2, None),
        _ledger(DAY9, "r2", "failed", 2, 3),
        # DAY10: started by r3, nothing since.
        _ledger(DAY10, "r3", "started", 4, None),
    ],
}


@pytest.fixture(scope="module")
def schema(spark: SparkSession, warehouse: Path) -> Iterator[str]:
    """A catalog schema holding those tables, and the views created by spark-sql's
    templating."""
    root = warehouse.parent
    name = f"bi_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {name} LOCATION '{root / 'db'}'")
    for table in [DAILY_TABLE, *OTHER_TABLES]:
        location = table_location(str(warehouse), table)
        spark.sql(f"CREATE TABLE {name}.{table.name} USING DELTA LOCATION '{location}'")
    spark.conf.set("schema", name)
    for view in sorted(SQL.glob("*.sql")):
        spark.sql(view.read_text())
    yield name
    spark.sql(f"DROP DATABASE {name} CASCADE")
    spark.conf.unset("schema")


def test_weekly_figures_and_week_over_week_change(spark: SparkSession, schema: str) -> None:
    rows = {
        (r.week_start, r.segment): r.asDict()
        for r in spark.table(f"{schema}.unique_clusters_weekly").collect()
    }
    week1, week2 = MONDAY, MONDAY + dt.timedelta(days=7)
    first, second = rows[(week1, "all")], rows[(week2, "all")]
    assert (first["days"], first["queries"], second["days"], second["queries"]) == (7, 28, 7, 28)
    # Week 1: 5 clusters over 4 queries a day; 2 of 4 queries at or below 1; 1 of 8 missing.
    assert first["mean_unique_clusters"] == pytest.approx(35 / 28)
    assert first["share_at_or_below_threshold"] == pytest.approx(14 / 28)
    assert first["missing_cluster_rate"] == pytest.approx(7 / 56)
    assert first["previous_queries"] is None and first["mean_unique_clusters_change"] is None
    # Week 2: 6 clusters over 4 queries a day; the change is against week 1.
    assert second["mean_unique_clusters"] == pytest.approx(42 / 28)
    assert second["mean_unique_clusters_change"] == pytest.approx(42 / 28 - 35 / 28)
    assert second["share_at_or_below_threshold_change"] == pytest.approx(0.0)
    assert second["queries_change_ratio"] == pytest.approx(0.0)
    assert second["previous_missing_cluster_rate"] == pytest.approx(7 / 56)
    # The segment row stands alone: one day, one query with one cluster.
    web = rows[(week2, "surface")]
    assert (web["segment_value"], web["days"], web["queries"]) == ("web", 1, 1)
    assert web["mean_unique_clusters"] == pytest.approx(1.0)


def test_latest_90_days_counts_back_from_the_newest_date(spark: SparkSession, schema: str) -> None:
    """The newest date and the 89 before it: a view that kept 91 days (`>=`) or 89 fails."""
    view = spark.table(f"{schema}.unique_clusters_latest_90_days")
    dates = {r.metric_date for r in view.select("metric_date").distinct().collect()}
    assert dates == {EDGE[89]} | {MONDAY + dt.timedelta(days=i) for i in range(14)}
    assert view.where("segment = 'all'").count() == 15
    assert view.where("segment = 'surface'").count() == 1


@pytest.mark.slow
def test_logmetrics_views_over_a_path_warehouse_give_the_same_rows(
    spark: SparkSession, schema: str, warehouse: Path
) -> None:
    """`logmetrics views` with output.warehouse: the views read delta.`<path>` and land in the
    session's current schema; their rows are those of the views spark-sql's templating made."""
    current = spark.catalog.currentDatabase()
    scratch = f"bi_paths_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {scratch} LOCATION '{warehouse.parent / 'paths_db'}'")
    spark.catalog.setCurrentDatabase(scratch)
    try:
        created, left_out = create_views(spark, OutputConfig(warehouse=str(warehouse)))
        assert created == [f"`{view}`" for view in VIEWS] and left_out == []
        for view in VIEWS:
            assertDataFrameEqual(spark.table(f"{scratch}.{view}"), spark.table(f"{schema}.{view}"))
        text = spark.sql(f"SHOW CREATE TABLE {scratch}.unique_clusters_weekly").first()[0]
        assert f"delta.`{warehouse / 'unique_clusters_daily'}`" in text
    finally:
        spark.catalog.setCurrentDatabase(current)
        spark.sql(f"DROP DATABASE {scratch} CASCADE")


def test_every_view_file_names_a_view_and_only_schema_references() -> None:
    statements = view_statements(OutputConfig(catalog="main", schema="bi"))
    assert [name for name, _ in statements] == [
        f"`main`.`bi`.`{path.stem}`" for path in sorted(SQL.glob("*.sql"))
    ]
    for _, statement in statements:
        assert "${" not in statement
        assert re.search(r"FROM `main`\.`bi`\.`[a-z_0-9]+`", statement)


def test_a_view_over_a_table_not_written_is_left_out_saying_so(
    spark: SparkSession, warehouse: Path, tmp_path: Path
) -> None:
    """A warehouse with the daily table only (crowding, quality and alerts off, say): the two
    views over it are created, every other one is left out, naming the table it lacks."""
    only_daily = tmp_path / "warehouse"
    shutil.copytree(warehouse / DAILY_TABLE.name, only_daily / DAILY_TABLE.name)
    current = spark.catalog.currentDatabase()
    scratch = f"bi_daily_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {scratch} LOCATION '{tmp_path / 'db'}'")
    spark.catalog.setCurrentDatabase(scratch)
    try:
        created, left_out = create_views(spark, OutputConfig(warehouse=str(only_daily)))
    finally:
        spark.catalog.setCurrentDatabase(current)
        spark.sql(f"DROP DATABASE {scratch} CASCADE")
    assert created == ["`unique_clusters_latest_90_days`", "`unique_clusters_weekly`"]
    assert left_out == [
        "`data_quality_outcomes`: not created, data_quality is not written yet",
        "`job_runs_last_status`: not created, job_runs is not written yet",
        "`redundancy_cost_latest_90_days`: not created, redundancy_cost_daily is not written yet",
        "`unique_clusters_alert_culprits`: not created, unique_clusters_crowding, "
        "unique_clusters_alerts is not written yet",
        "`unique_clusters_k_sweep_latest_90_days`: not created, unique_clusters_k_sweep is not "
        "written yet",
    ]


def test_no_views_before_the_daily_table_exists(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no views: unique_clusters_daily is not written yet"):
        create_views(spark, OutputConfig(warehouse=str(tmp_path / "empty")))


def _rows(
    spark: SparkSession, schema: str, view: str, columns: str, order: str
) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in spark.sql(f"SELECT {columns} FROM {schema}.{view} ORDER BY {order}").collect()
    ]


def test_alert_culprits_are_each_alerts_top_5_keys_of_its_row(
    spark: SparkSession, schema: str
) -> None:
    """DAY8's alert (all traffic, k=2, the mean): its crowding keys of ranks 1 to 5, a chunk
    without a cluster named as one, with their slots, tokens and dollars; not its rank 6, nor
    the keys of another k or segment row, nor the ok share row's, nor the improvement's.
    DAY10's alert, without crowding rows, keeps one row with no culprit."""
    rows = _rows(
        spark, schema, "unique_clusters_alert_culprits",
        "metric_date, segment_label, k, statistic, delta, rank, culprit, redundant_slots, "
        "redundant_tokens, round(redundant_usd, 6)",
        "metric_date, rank",
    )  # fmt: skip
    alert = (DAY8, "all traffic", 2, "mean", -0.5)
    assert rows == [
        (*alert, 1, "cluster kb-a", 99, 50490, 0.15147),
        (*alert, 2, "chunk chunk-x", 98, 49980, 0.14994),
        (*alert, 3, "cluster c3", 97, 49470, 0.14841),
        (*alert, 4, "cluster c4", 96, 48960, 0.14688),
        (*alert, 5, "cluster c5", 95, 48450, 0.14535),
        (DAY10, "all traffic", 2, "mean", -0.5, None, None, None, None, None),
    ]


def test_data_quality_outcomes_say_passed_warned_blocked_or_not_judged(
    spark: SparkSession, schema: str
) -> None:
    rows = _rows(spark, schema, "data_quality_outcomes", "`check`, outcome", "`check`")
    assert rows == [
        ("malformed_rate", "blocked"),
        ("missing_cluster_rate", "passed"),
        ("unique_cluster_chunk_ids", "warned"),
        ("volume", "not judged"),
    ]


def test_the_ledgers_last_status_is_the_latest_finished_row_of_each_day(
    spark: SparkSession, schema: str
) -> None:
    """A finished row outranks a later start (DAY8: published, though r2 began it again); the
    latest finished row wins (DAY9: r2 failed after r1 held it); a day no run finished shows
    its start (DAY10). The same order as the runs' own reading, flows.ledger.previous_runs."""
    rows = _rows(
        spark, schema, "job_runs_last_status", "metric_date, status, run_id", "metric_date"
    )
    assert rows == [(DAY8, "published", "r1"), (DAY9, "failed", "r2"), (DAY10, "started", "r3")]


def test_k_sweep_over_90_days_adds_totals_before_dividing(spark: SparkSession, schema: str) -> None:
    """All traffic, DAY8 (2 queries; totals 2, 3, 4) and DAY9 (6 queries; 6, 12, 15), the old
    day left out: means 8/8, 15/8, 19/8, not the means of the daily means (1, 1.75, 2.25); the
    segment row lacks k=1, so its k=2 has no marginal rate."""
    rows = _rows(
        spark, schema, "unique_clusters_k_sweep_latest_90_days",
        "segment_label, k, days, queries, mean_unique_clusters, distinct_fraction, marginal_rate",
        "segment, k",
    )  # fmt: skip
    assert rows == [
        ("all traffic", 1, 2, 8, 1.0, 1.0, 1.0),
        ("all traffic", 2, 2, 8, 1.875, 0.9375, 0.875),
        ("all traffic", 3, 2, 8, 2.375, pytest.approx(2.375 / 3), 0.5),
        ("surface=web", 2, 1, 4, 1.5, 0.75, None),
    ]


def test_redundancy_cost_is_at_the_measured_ks_over_90_days(
    spark: SparkSession, schema: str
) -> None:
    """The daily table measured k=2 only: k=1's cost row is left out, as is the old day's."""
    rows = _rows(
        spark, schema, "redundancy_cost_latest_90_days",
        "metric_date, segment_label, k, redundant_slots, redundant_tokens", "metric_date, segment",
    )  # fmt: skip
    assert rows == [
        (DAY8, "all traffic", 2, 2, 1020),
        (DAY8, "surface=web", 2, 2, 1020),
        (DAY9, "all traffic", 2, 2, 1020),
    ]
