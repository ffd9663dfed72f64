"""The BI views (src/logmetrics/tables/sql/) run on Spark SQL over the tables as written, and
give the figures worked out by hand (weekly figures from added counts, week-over-week changes,
the 90 days); `logmetrics views` creates the same views over a path warehouse."""

from __future__ import annotations

import datetime as dt
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
    DAILY_TABLE,
    RunStamp,
    replace_dates,
    table_location,
    with_run_stamp,
)
from logmetrics.tables.views import create_views, view_statements

RUN_FIELDS = {"cluster_table_version", "run_id", "computed_at"}
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
    """A path warehouse holding unique_clusters_daily: two full ISO weeks and three old days,
    at the 90-day view's edge."""
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
    dates = sorted({r["metric_date"] for r in rows})
    replace_dates(spark, with_run_stamp(df, stamp), output, DAILY_TABLE, dates)
    return root / "warehouse"


@pytest.fixture(scope="module")
def schema(spark: SparkSession, warehouse: Path) -> Iterator[str]:
    """A catalog schema holding that table, and the views created by spark-sql's templating."""
    root = warehouse.parent
    name = f"bi_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {name} LOCATION '{root / 'db'}'")
    location = table_location(str(warehouse), DAILY_TABLE)
    spark.sql(f"CREATE TABLE {name}.unique_clusters_daily USING DELTA LOCATION '{location}'")
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
        created = create_views(spark, OutputConfig(warehouse=str(warehouse)))
        assert created == ["`unique_clusters_latest_90_days`", "`unique_clusters_weekly`"]
        for view in ("unique_clusters_latest_90_days", "unique_clusters_weekly"):
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
        assert "FROM `main`.`bi`.`unique_clusters_daily`" in statement


def test_no_views_before_the_daily_table_exists(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no views: unique_clusters_daily is not written yet"):
        create_views(spark, OutputConfig(warehouse=str(tmp_path / "empty")))
