"""Living inputs (issue 24): a day is computed again exactly when its own inputs changed; late
rows restate their day; a day whose logs have not all landed is not published; a failed run
leaves `failed` rows that the next run picks up."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import reference
from logmetrics.cli import main
from logmetrics.flows import chunk as chunk_flow
from logmetrics.flows import ledger
from logmetrics.inputs.days import DayInputs
from logmetrics.synthetic import generate

pytestmark = pytest.mark.slow

START = dt.date(2026, 3, 1)
DAYS = 12
KS = (5, 10)
THRESHOLD = 4
ALERT_MIN_QUERIES = 10
ALERT_RULE = {"baseline": "trailing", "baseline_days": 7, "min_queries": ALERT_MIN_QUERIES}
TABLES = (
    "unique_clusters_by_query",
    "unique_clusters_daily",
    "unique_clusters_k_sweep",
    "redundancy_cost_daily",
    "data_quality",
    "quarantine",
    "missing_cluster_chunks",
    "unique_clusters_alerts",
)


def day(n: int) -> dt.date:
    """The n-th day of the generated data, from 1."""
    return START + dt.timedelta(days=n - 1)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("living")
    generate(root, START, days=DAYS, queries_per_day=40, seed=24)
    return root


@pytest.fixture(scope="module")
def ten_days(generated: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Days 1-10 backfilled once, for the tests that start from them (`_from_ten_days`): the
    data (`data/`, and as it was, `pristine/`) and the warehouse it gave (`wh/`)."""
    root = tmp_path_factory.mktemp("ten-days")
    data = _copy(generated, root, 10)
    assert main(_argv("backfill", _config(data, root / "wh"), day(1), day(10))) == 0
    shutil.copytree(data, root / "pristine")
    return root


def _from_ten_days(ten_days: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(data, warehouse, config) as `ten_days` left them. The data goes back to the same path,
    file times kept (the ledger knows a day's files by path, size and modification time); the
    warehouse is this test's own copy."""
    data = ten_days / "data"
    shutil.rmtree(data)
    shutil.copytree(ten_days / "pristine", data)
    warehouse = tmp_path / "wh"
    shutil.copytree(ten_days / "wh", warehouse)
    return data, warehouse, _config(data, warehouse)


def _copy(generated: Path, tmp_path: Path, days: int) -> Path:
    """The generated data with the partitions of its first `days` days only."""
    data = tmp_path / "data"
    shutil.copytree(generated, data)
    for n in range(days + 1, DAYS + 1):
        shutil.rmtree(_partition(data, day(n)))
    return data


def _partition(data: Path, date: dt.date) -> Path:
    return data / "served_logs" / f"date={date}"


def _config(data: Path, warehouse: Path, *lines: str, logs: str = "served_logs") -> Path:
    path = warehouse.parent / f"{warehouse.name}.yaml"
    fmt = "delta" if "delta" in logs else "parquet"
    text = [
        "inputs:",
        f"  served_logs: {{path: '{data / logs}', format: {fmt}}}",
        f"  clusters: {{path: '{data / 'clusters_parquet'}', format: parquet}}",
        f"output: {{warehouse: '{warehouse}'}}",
        f"metrics: {{ks: {list(KS)}, threshold: {THRESHOLD}, segment_by: []}}",
        "backfill: {days_per_chunk: 31}",
        "quality: {max_malformed_rate: 0.1, max_missing_cluster_rate: 0.1, on_failure: warn}",
        # 40 queries a day: judged against the week before, so a restated day's verdict moves.
        f"alerts: {{baseline: trailing, baseline_days: 7, min_queries: {ALERT_MIN_QUERIES}}}",
        *lines,
    ]
    path.write_text("\n".join(text) + "\n")
    return path


def _argv(command: str, config: Path, *dates: dt.date, extra: tuple[str, ...] = ()) -> list[str]:
    if command == "backfill":
        return [
            "backfill",
            "--config",
            str(config),
            "--start",
            str(dates[0]),
            "--end",
            str(dates[1]),
            *extra,
        ]
    return [command, "--config", str(config), "--date", str(dates[0]), *extra]


def _table(spark: SparkSession, warehouse: Path, name: str) -> DataFrame:
    return spark.read.format("delta").load(str(warehouse / name))


def _by_day(spark: SparkSession, warehouse: Path) -> dict[str, dict[dt.date, list[str]]]:
    """Every table's rows per day, run columns included: a day not computed again keeps them."""
    out: dict[str, dict[dt.date, list[str]]] = {}
    for name in TABLES:
        rows: dict[dt.date, list[str]] = {}
        for row in _table(spark, warehouse, name).collect():
            rows.setdefault(row.metric_date, []).append(repr(row))
        out[name] = {d: sorted(r) for d, r in rows.items()}
    return out


def _finished(spark: SparkSession, warehouse: Path, run: int = -1) -> list[tuple[Any, ...]]:
    """(metric_date, status, reason) of the ledger's finished rows of one run (by start)."""
    runs = _table(spark, warehouse, "job_runs")
    ids = [
        r.run_id
        for r in runs.groupBy("run_id").agg(F.min("started_at").alias("t")).orderBy("t").collect()
    ]
    rows = runs.where((F.col("run_id") == ids[run]) & (F.col("status") != "started")).collect()
    return sorted((r.metric_date, r.status, r.reason) for r in rows)


def _source_rows(data: Path) -> list[dict[str, Any]]:
    table = ds.dataset(data / "served_logs", format="parquet", partitioning="hive").to_table(
        columns=["request_id", "served_at", "results", "date"]
    )
    return table.to_pylist()


def _cluster_rows(data: Path) -> list[tuple[Any, Any]]:
    table = ds.dataset(data / "clusters_parquet", format="parquet").to_table()
    return [(r["chunk_id"], r["cluster_id"]) for r in table.to_pylist()]


def _late_rows(data: Path, source: dt.date, served_on: dt.date, into: dt.date, name: str) -> None:
    """Ten new requests served on `served_on`, landing late as a file in `into`'s partition."""
    rows = pq.read_table(next(_partition(data, source).glob("*.parquet"))).slice(0, 10)
    shift = pa.scalar(
        dt.datetime.combine(served_on, dt.time()) - dt.datetime.combine(source, dt.time())
    )
    served = pc.add(rows.column("served_at"), pa.scalar(shift.as_py(), pa.duration("us")))
    ids = pc.binary_join_element_wise(pa.scalar(f"{name}-"), rows.column("request_id"), "")
    rows = rows.set_column(rows.schema.get_field_index("served_at"), "served_at", served)
    rows = rows.set_column(rows.schema.get_field_index("request_id"), "request_id", ids)
    pq.write_table(rows, _partition(data, into) / f"{name}.parquet")


def test_a_backfill_computes_a_new_day_and_restates_a_changed_one_only(
    spark: SparkSession, generated: Path, ten_days: Path, tmp_path: Path
) -> None:
    """Over a published range, a backfill computes the day that landed (`new`) and restates
    the day a late file changed (`inputs_changed`), to the reference's numbers over all its
    rows; every other day keeps its rows. A backfill that skipped published days, restated the
    whole range for one late file, or kept the changed day's old numbers fails."""
    data, warehouse, config = _from_ten_days(ten_days, tmp_path)  # days 1-10 backfilled
    before = _by_day(spark, warehouse)
    shutil.copytree(_partition(generated, day(11)), _partition(data, day(11)))
    _late_rows(data, day(3), served_on=day(4), into=day(4), name="late4")
    assert main(_argv("backfill", config, day(1), day(11))) == 0
    assert _finished(spark, warehouse) == [
        (day(4), "published", "inputs_changed"),
        (day(11), "published", "new"),
    ]
    assert _published_daily(spark, warehouse, day(4)) == _expected_daily(data, day(4))
    after = _by_day(spark, warehouse)
    for name in TABLES:
        kept = {d: rows for d, rows in after[name].items() if d not in {day(4), day(11)}}
        assert kept == {d: rows for d, rows in before[name].items() if d != day(4)}, name
    assert main(_argv("backfill", config, day(1), day(11))) == 0  # nothing new: nothing done
    assert _table(spark, warehouse, "job_runs").select("run_id").distinct().count() == 2


def test_a_delta_log_table_skips_the_days_an_appended_commit_does_not_touch(
    spark: SparkSession, generated: Path, tmp_path: Path
) -> None:
    logs = spark.read.parquet(str(generated / "served_logs"))
    table = tmp_path / "data" / "served_logs_delta"
    shutil.copytree(generated / "clusters_parquet", tmp_path / "data" / "clusters_parquet")
    first_ten = logs.where(F.col("date") <= F.lit(day(10)))
    first_ten.write.format("delta").partitionBy("date").save(str(table))
    warehouse = tmp_path / "wh"
    config = _config(tmp_path / "data", warehouse, logs="served_logs_delta")
    assert main(_argv("backfill", config, day(1), day(10))) == 0
    before = _by_day(spark, warehouse)
    logs.where(F.col("date") == F.lit(day(11))).write.format("delta").mode("append").save(
        str(table)
    )
    assert main(_argv("backfill", config, day(1), day(11))) == 0
    assert _finished(spark, warehouse) == [(day(11), "published", "new")]
    after = _by_day(spark, warehouse)
    for name in TABLES:
        assert {d: r for d, r in after[name].items() if d != day(11)} == before[name], name


def _published_daily(spark: SparkSession, warehouse: Path, date: dt.date) -> list[dict[str, Any]]:
    """The day's published unique_clusters_daily rows, as `reference.daily` gives them."""
    drop = {"run_id", "computed_at", "cluster_table_version", "dq_passed", "rows_read"}
    drop |= {
        "duplicate_rows",
        "quarantined_rows",
        "quarantined_entries",
        "segment",
        "segment_value",
    }
    daily = _table(spark, warehouse, "unique_clusters_daily").where(
        F.col("metric_date") == F.lit(date)
    )
    return sorted(
        ({k: v for k, v in r.asDict().items() if k not in drop} for r in daily.collect()),
        key=lambda r: r["k"],
    )


def _expected_daily(data: Path, date: dt.date) -> list[dict[str, Any]]:
    """`reference.daily` of the day over every row of the logs, wherever its file lies."""
    return reference.daily(_source_rows(data), _cluster_rows(data), KS, THRESHOLD, date, date)


def _last_run_id(spark: SparkSession, warehouse: Path) -> str:
    runs = _table(spark, warehouse, "job_runs").orderBy(F.desc("started_at"), F.desc("run_id"))
    first = runs.first()
    assert first is not None
    return str(first.run_id)


def _check_alerts(spark: SparkSession, warehouse: Path, date: dt.date, run_id: str) -> None:
    """The day's unique_clusters_alerts rows were written by `run_id` and equal the rule
    (`reference.alerts`) over the daily rows as now published."""
    daily = [
        {**r.asDict(), "histogram": list(r.histogram)}
        for r in _table(spark, warehouse, "unique_clusters_daily").collect()
    ]
    expected = reference.alerts(daily, [date], **ALERT_RULE)
    alerts = _table(spark, warehouse, "unique_clusters_alerts").where(
        F.col("metric_date") == F.lit(date)
    )
    got = sorted(
        (r.asDict() for r in alerts.collect()),
        key=lambda r: (r["k"], r["segment"], r["segment_value"], r["statistic"]),
    )
    assert {r["run_id"] for r in got} == {run_id}
    assert len(got) == len(expected) == 2 * len(KS)
    assert {r["status"] for r in got} <= {"ok", "alert", "improvement"}  # judged, not skipped
    for row, want in zip(got, expected, strict=True):
        assert reference.mismatched(row, want) == {}, want


def test_late_rows_restate_their_day_and_only_it(
    spark: SparkSession,
    generated: Path,
    ten_days: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Late rows restate their day: its numbers are those of all its rows (a restatement that
    read only the day's partition, or kept the published numbers, fails), and its alerts are
    judged again from them (a run that judged the day on its previously published row, or
    left its old alert rows, fails)."""
    data, warehouse, config = _from_ten_days(ten_days, tmp_path)  # days 1-10 backfilled
    for n in (11, 12):  # the days the nightly runs below are for
        shutil.copytree(_partition(generated, day(n)), _partition(data, day(n)))

    before = _published_daily(spark, warehouse, day(8))
    _late_rows(data, day(7), served_on=day(8), into=day(8), name="late8")
    with caplog.at_level("INFO", logger="logmetrics"):
        assert main(_argv("run", config, day(11))) == 0
    assert _finished(spark, warehouse) == [
        (day(8), "published", "inputs_changed"),
        (day(11), "published", "new"),
    ]
    assert f"restating {day(8)}: inputs changed" in caplog.text
    got = _published_daily(spark, warehouse, day(8))
    assert got == _expected_daily(data, day(8))
    assert got[0]["queries"] == before[0]["queries"] + 10  # the late requests are counted
    _check_alerts(spark, warehouse, day(8), _last_run_id(spark, warehouse))

    # An arrival-time layout: rows of day 9 in a file of day 10's partition.
    before = _published_daily(spark, warehouse, day(9))
    _late_rows(data, day(9), served_on=day(9), into=day(10), name="late9")
    assert main(_argv("run", config, day(12))) == 0
    assert _finished(spark, warehouse) == [
        (day(9), "published", "inputs_changed"),
        (day(12), "published", "new"),
    ]
    got = _published_daily(spark, warehouse, day(9))
    assert got == _expected_daily(data, day(9))
    assert got[0]["queries"] == before[0]["queries"] + 10  # counted on their day, not day 10


def test_a_new_cluster_table_restates_every_day_of_a_backfills_range_and_no_other(
    spark: SparkSession, ten_days: Path, tmp_path: Path
) -> None:
    """After the cluster table changed, a backfill over part of a published range computes
    every day of its range again (`clusters_changed`), to the reference's numbers under the
    new table, and touches no other day. A backfill that went on reading the old cluster
    table's state, or skipped the days as done, fails."""
    data, warehouse, config = _from_ten_days(ten_days, tmp_path)  # days 1-10 backfilled
    # The detector's new version: half of the chunks move to one cluster.
    restated = [day(3), day(4), day(5)]
    before = _by_day(spark, warehouse)
    old = {d: _published_daily(spark, warehouse, d) for d in restated}
    clusters = ds.dataset(data / "clusters_parquet", format="parquet").to_table()
    ids = clusters.column("cluster_id")
    merged = ["merged" if i < len(ids) // 2 else c for i, c in enumerate(ids.to_pylist())]
    clusters = clusters.set_column(
        clusters.schema.get_field_index("cluster_id"), "cluster_id", pa.array(merged, ids.type)
    )
    shutil.rmtree(data / "clusters_parquet")
    (data / "clusters_parquet").mkdir()
    pq.write_table(clusters, data / "clusters_parquet" / "part-0.parquet")
    assert main(_argv("backfill", config, day(3), day(5))) == 0
    assert _finished(spark, warehouse) == [(d, "published", "clusters_changed") for d in restated]
    for d in restated:
        published = _published_daily(spark, warehouse, d)
        assert published == _expected_daily(data, d), d
        assert published != old[d], d  # the new cluster table changed the numbers
    after = _by_day(spark, warehouse)
    for name in TABLES:
        kept_before = {d: r for d, r in before[name].items() if d not in restated}
        assert {d: r for d, r in after[name].items() if d not in restated} == kept_before, name


def _error_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The `logmetrics:` lines of stderr since the last read."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("logmetrics:")]


def test_a_day_without_its_ready_marker_is_not_published_until_it_has_one(
    spark: SparkSession, generated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A day without its ready marker: `ready` and `run` exit 5, and a backfill over it
    publishes the ready days and exits 5; each says, in one whole line, which day is not ready,
    why, and that nothing was computed for it (`ready` computes nothing: it says the logs have
    not all landed). A line that named the day but not what was done about it (the backfill's
    old 'the other days were computed'), or a run that published the day, fails."""
    data = _copy(generated, tmp_path, 3)

    def marker(n: int) -> Path:
        return _partition(data, day(n)) / "_SUCCESS"

    for n in (1, 2):
        marker(n).touch()
    warehouse = tmp_path / "wh"
    config = _config(data, warehouse, "nightly: {lookback_days: 1}")
    config.write_text(
        config.read_text().replace(
            "format: parquet}", "format: parquet, ready_marker: _SUCCESS}", 1
        )
    )
    missing = f"logmetrics: error: input not ready: {day(3)}: no {marker(3)}"
    assert main(_argv("ready", config, day(2))) == 0
    assert main(_argv("ready", config, day(3))) == 5
    assert _error_lines(capsys) == [f"{missing}; its logs have not all landed"]
    assert main(_argv("run", config, day(3))) == 5
    assert _error_lines(capsys) == [f"{missing}; nothing was computed"]
    assert not (warehouse / "unique_clusters_daily").exists()

    assert main(_argv("backfill", config, day(1), day(3))) == 5  # the ready days are computed
    assert _error_lines(capsys) == [
        f"{missing}; nothing was computed for it, only for the ready days"
    ]
    assert _finished(spark, warehouse) == [
        (day(1), "published", "new"),
        (day(2), "published", "new"),
    ]
    marker(3).touch()
    assert main(_argv("run", config, day(3))) == 0
    published = _table(spark, warehouse, "unique_clusters_daily").select("metric_date").distinct()
    assert sorted(r.metric_date for r in published.collect()) == [day(1), day(2), day(3)]


def test_a_spark_error_leaves_failed_rows_and_the_next_run_computes_those_days(
    spark: SparkSession, generated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two one-day chunks, the second failing in Spark: the first chunk's day stays
    `published`, with its numbers; only the second's gets `failed`, with the error's line, and
    the next run computes that day alone. A run that marked every day of the run failed, or
    lost the first chunk's writes, fails."""
    data = _copy(generated, tmp_path, 2)
    warehouse = tmp_path / "wh"
    config = _config(data, warehouse)
    real = chunk_flow.Chunk.compute

    def failing(chunk: chunk_flow.Chunk, *args: Any) -> Any:
        if chunk.dates == [day(2)]:
            chunk.spark.sql("SELECT raise_error('planted failure in the main pass')").collect()
        return real(chunk, *args)

    monkeypatch.setattr(chunk_flow.Chunk, "compute", failing)
    one_day_chunks = ("--set", "backfill.days_per_chunk=1")
    assert main(_argv("backfill", config, day(1), day(2), extra=one_day_chunks)) == 1
    assert _finished(spark, warehouse) == [
        (day(1), "published", "new"),
        (day(2), "failed", "new"),
    ]
    (failed,) = _table(spark, warehouse, "job_runs").where(F.col("status") == "failed").collect()
    assert "planted failure in the main pass" in failed.error and "\n" not in failed.error
    assert _published_daily(spark, warehouse, day(1)) == _expected_daily(data, day(1))
    assert _published_daily(spark, warehouse, day(2)) == []
    monkeypatch.setattr(chunk_flow.Chunk, "compute", real)
    assert main(_argv("backfill", config, day(1), day(2))) == 0
    assert _finished(spark, warehouse) == [(day(2), "published", "new")]
    assert _published_daily(spark, warehouse, day(2)) == _expected_daily(data, day(2))


STATE = DayInputs(logs="L", files=1, clusters="v1")


@pytest.mark.parametrize(
    ("previous", "current", "config", "forced", "reason"),
    [
        (None, STATE, "C", False, "new"),
        (ledger.Previous("started", "C", STATE.fingerprint, "L", "v1"), STATE, "C", False, "new"),
        (ledger.Previous("failed", "C", STATE.fingerprint, "L", "v1"), STATE, "C", False, "new"),
        (ledger.Previous("published", "C", STATE.fingerprint, "L", "v1"), STATE, "C", False, None),
        (ledger.Previous("held", "C", STATE.fingerprint, "L", "v1"), STATE, "C", False, None),
        (
            ledger.Previous("published", "C", STATE.fingerprint, "L", "v1"),
            STATE,
            "C",
            True,
            "forced",
        ),
        (
            ledger.Previous("published", "B", STATE.fingerprint, "L", "v1"),
            STATE,
            "C",
            False,
            "config_changed",
        ),
        (ledger.Previous("published", "C", "x", "L", "v0"), STATE, "C", False, "clusters_changed"),
        (ledger.Previous("published", "C", "x", "K", "v1"), STATE, "C", False, "inputs_changed"),
        (ledger.Previous("published", "C", "old", None, None), STATE, "C", False, "inputs_changed"),
        (ledger.Previous("published", "C", STATE.fingerprint, None, None), STATE, "C", False, None),
    ],
)
def test_reason_to_compute(
    previous: ledger.Previous | None,
    current: DayInputs,
    config: str,
    forced: bool,
    reason: str | None,
) -> None:
    assert ledger.reason_to_compute(previous, current, config, forced) == reason
