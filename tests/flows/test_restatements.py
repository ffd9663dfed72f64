"""Restatements end to end, on six hand-made days whose numbers are known in advance: the
nightly's look-back restates a day whose late rows flip its alert verdict, and judges it (and
the day after it) again; a new cluster table restates the days `run` looks back on and then
those a `backfill` covers (`clusters_changed`), each to the reference over the new table.

tests/flows/test_living_inputs.py has a backfill's `inputs_changed` and `clusters_changed`
restatements over generated traffic; here the alert rows themselves are read after a restatement
and the cluster table changes under `run`. One backfill (days 1-5) serves both tests."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import reference
from logmetrics.cli import main
from logmetrics.synthetic import CLUSTERS_SCHEMA, SERVED_LOGS_SCHEMA

pytestmark = pytest.mark.slow

START = dt.date(2026, 6, 1)
KS = (5,)
THRESHOLD = 2
CLUSTERS = 60  # g0..g59, five chunks each: c<i>-0..c<i>-4
# Each day judged against the 4 days before it (days 1-4 make day 5's baseline); 20 queries.
ALERT_RULE = {"baseline": "trailing", "baseline_days": 4, "min_queries": 10}
# Per day, how many queries hold 5, 4 and 1 distinct clusters in their top 5: days 1-4 a
# steady mean of 4.45-4.6, day 5 the same (ok), and its 20 late requests all one cluster.
MIX = {1: (9, 11, 0), 2: (10, 10, 0), 3: (11, 9, 0), 4: (12, 8, 0), 5: (10, 10, 0), 6: (10, 10, 0)}
LATE = (0, 0, 20)


def day(n: int) -> dt.date:
    return START + dt.timedelta(days=n - 1)


def _requests(date: dt.date, mix: tuple[int, int, int], name: str) -> pa.Table:
    """Requests of `date` whose top 5 hold 5, 4 and 1 distinct clusters, `mix` of each; the
    repeats are other chunks of the first entry's cluster."""
    rows = []
    for distinct in (u for u, n in zip((5, 4, 1), mix, strict=True) for _ in range(n)):
        i = len(rows)
        first = (i * 7) % CLUSTERS
        ids = [f"c{(first + j * 11) % CLUSTERS}-0" for j in range(distinct)]
        ids += [f"c{first}-{j}" for j in range(1, 5 - distinct + 1)]
        rows.append(
            {
                "request_id": f"{name}-{date}-{i}",
                "served_at": dt.datetime.combine(date, dt.time(12), dt.UTC)
                + dt.timedelta(seconds=i),
                "results": [{"rank": r, "chunk_id": c} for r, c in enumerate(ids, start=1)],
                "surface": "app",
                "index_version": "v1",
            }
        )
    return pa.Table.from_pylist(rows, schema=SERVED_LOGS_SCHEMA)


def _write_clusters(data: Path, cluster_of: Any) -> None:
    folder = data / "clusters"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rows = [
        {"chunk_id": f"c{i}-{j}", "cluster_id": cluster_of(i)}
        for i in range(CLUSTERS)
        for j in range(5)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=CLUSTERS_SCHEMA), folder / "part-0.parquet")


def _config(data: Path, warehouse: Path) -> Path:
    path = warehouse.parent / f"{warehouse.name}.yaml"
    path.write_text(
        "inputs:\n"
        f"  served_logs: {{path: '{data / 'served_logs'}'}}\n"
        f"  clusters: {{path: '{data / 'clusters'}', format: parquet}}\n"
        f"output: {{warehouse: '{warehouse}'}}\n"
        f"metrics: {{ks: {list(KS)}, threshold: {THRESHOLD}}}\n"
        "nightly: {lookback_days: 3}\n"
        "alerts: {baseline: trailing, baseline_days: 4, min_queries: 10}\n"
    )
    return path


@pytest.fixture(scope="module")
def five_days(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Days 1-6 of logs (`data/`, as written: `pristine/`), days 1-5 backfilled (`wh/`)."""
    root = tmp_path_factory.mktemp("restatements")
    data = root / "data"
    for n, mix in MIX.items():
        partition = data / "served_logs" / f"date={day(n)}"
        partition.mkdir(parents=True)
        pq.write_table(_requests(day(n), mix, "q"), partition / "part-0.parquet")
    _write_clusters(data, lambda i: f"g{i}")
    assert main(["backfill", "--config", str(_config(data, root / "wh")), "--start",
                 str(day(1)), "--end", str(day(5))]) == 0  # fmt: skip
    shutil.copytree(data, root / "pristine")
    return root


def _from_five_days(five_days: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(data, warehouse, config) as the fixture left them: the data back at its own path with
    its files' times (the ledger knows a day's files by path, size and time), the warehouse
    this test's own copy."""
    data = five_days / "data"
    shutil.rmtree(data)
    shutil.copytree(five_days / "pristine", data)
    warehouse = tmp_path / "wh"
    shutil.copytree(five_days / "wh", warehouse)
    return data, warehouse, _config(data, warehouse)


def _table(spark: SparkSession, warehouse: Path, name: str) -> DataFrame:
    return spark.read.format("delta").load(str(warehouse / name))


def _last_run(spark: SparkSession, warehouse: Path) -> tuple[str, list[tuple[Any, ...]]]:
    """The latest run's id and its finished ledger rows: (metric_date, status, reason)."""
    runs = _table(spark, warehouse, "job_runs")
    first = runs.orderBy(F.desc("started_at"), F.desc("run_id")).first()
    assert first is not None
    rows = runs.where((F.col("run_id") == first.run_id) & (F.col("status") != "started"))
    return first.run_id, sorted((r.metric_date, r.status, r.reason) for r in rows.collect())


def _daily(spark: SparkSession, warehouse: Path) -> list[dict[str, Any]]:
    return [
        {**r.asDict(), "histogram": list(r.histogram)}
        for r in _table(spark, warehouse, "unique_clusters_daily").collect()
    ]


def _published(daily: list[dict[str, Any]], date: dt.date) -> list[dict[str, Any]]:
    """The day's daily rows, as `reference.daily` gives them (its keys only)."""
    keys = reference.daily([], [], KS, THRESHOLD, date, date)[0].keys()
    rows = [r for r in daily if r["metric_date"] == date]
    return sorted(({k: r[k] for k in keys} for r in rows), key=lambda r: r["k"])


def _expected(data: Path, date: dt.date) -> list[dict[str, Any]]:
    """`reference.daily` of the day over every log row and the cluster table as now on disk."""
    logs = ds.dataset(data / "served_logs", format="parquet", partitioning="hive").to_table()
    clusters = pq.read_table(data / "clusters").to_pylist()
    pairs = [(c["chunk_id"], c["cluster_id"]) for c in clusters]
    return reference.daily(logs.to_pylist(), pairs, KS, THRESHOLD, date, date)


def _alerts(spark: SparkSession, warehouse: Path, date: dt.date) -> list[dict[str, Any]]:
    rows = _table(spark, warehouse, "unique_clusters_alerts").where(
        F.col("metric_date") == F.lit(date)
    )
    return sorted((r.asDict() for r in rows.collect()), key=lambda r: (r["k"], r["statistic"]))


def _matches(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert len(got) == len(want) == len(KS) * 2
    for row, expected in zip(got, want, strict=True):
        wrong = {
            c: (row[c], v)
            for c, v in expected.items()
            if not (row[c] == pytest.approx(v, rel=1e-12) if isinstance(v, float) else row[c] == v)
        }
        assert wrong == {}, expected


def test_late_rows_that_flip_a_days_verdict_rejudge_it_and_the_day_after(
    spark: SparkSession, five_days: Path, tmp_path: Path
) -> None:
    """Day 5 was published `ok` on both statistics. Twenty late one-cluster requests land in
    its partition; the nightly run of day 6 (a chunk a day, so day 6 is judged in a chunk after
    day 5's) restates day 5 (`inputs_changed`) and its alert rows now say `alert`, written by
    that run and equal to the rule over the restated numbers; day 6 is judged against a
    baseline holding day 5 as restated. A run that restated day 5's numbers but left its old
    alert rows (or judged it on its old daily row), or judged day 6 on the history read before
    the restatement, fails."""
    data, warehouse, config = _from_five_days(five_days, tmp_path)
    before = _alerts(spark, warehouse, day(5))
    assert {r["statistic"]: r["status"] for r in before} == {
        "mean": "ok",
        "share_at_or_below_threshold": "ok",
    }
    late = data / "served_logs" / f"date={day(5)}" / "late.parquet"
    pq.write_table(_requests(day(5), LATE, "late"), late)

    argv = ["run", "--config", str(config), "--date", str(day(6))]
    assert main([*argv, "--set", "backfill.days_per_chunk=1"]) == 0
    run_id, finished = _last_run(spark, warehouse)
    assert finished == [
        (day(5), "published", "inputs_changed"),
        (day(6), "published", "new"),
    ]
    daily = _daily(spark, warehouse)
    assert _published(daily, day(5)) == _expected(data, day(5))
    assert _published(daily, day(5))[0]["queries"] == 40

    after = _alerts(spark, warehouse, day(5))
    assert {r["run_id"] for r in after} == {run_id}
    assert {r["statistic"]: r["status"] for r in after} == {
        "mean": "alert",
        "share_at_or_below_threshold": "alert",
    }
    _matches(after, reference.alerts(daily, [day(5)], **ALERT_RULE))
    assert [r["value"] for r in after] != [r["value"] for r in before]

    # Day 6's baseline (days 2-5) holds day 5 as restated, not as first published.
    sixth = _alerts(spark, warehouse, day(6))
    assert {r["run_id"] for r in sixth} == {run_id}
    _matches(sixth, reference.alerts(daily, [day(6)], **ALERT_RULE))
    stale = [
        {**r, "histogram": [0, 0, 0, 0, 10, 10]} if r["metric_date"] == day(5) else r for r in daily
    ]
    assert reference.alerts(stale, [day(6)], **ALERT_RULE)[0]["baseline_mean"] != pytest.approx(
        sixth[0]["baseline_mean"]
    )


def test_a_new_cluster_table_restates_the_nightlys_look_back_then_the_backfills_range(
    spark: SparkSession, five_days: Path, tmp_path: Path
) -> None:
    """The detector's new table merges the clusters eleven apart (so a list's distinct clusters
    fall to at most two). The nightly run of day 6 computes day 6 and restates the days it
    looks back on (3-5, `clusters_changed`), each to the reference over the new table, leaving
    days 1-2 as they were; a backfill over days 1-6 then restates only days 1-2
    (`clusters_changed`), the others being done from the new table. A ledger that ignored the
    cluster table's state (no restatement), a run that read the old table, or a backfill that
    restated the nightly's days again, fails."""
    data, warehouse, config = _from_five_days(five_days, tmp_path)
    old = _daily(spark, warehouse)
    _write_clusters(data, lambda i: f"p{i % 22}")

    assert main(["run", "--config", str(config), "--date", str(day(6))]) == 0
    _, finished = _last_run(spark, warehouse)
    assert finished == [
        *((day(n), "published", "clusters_changed") for n in (3, 4, 5)),
        (day(6), "published", "new"),
    ]
    daily = _daily(spark, warehouse)
    for n in (3, 4, 5, 6):
        assert _published(daily, day(n)) == _expected(data, day(n)), n
    for n in (3, 4, 5):
        assert _published(daily, day(n)) != _published(old, day(n)), n  # the table mattered
    for n in (1, 2):
        kept = [r for r in daily if r["metric_date"] == day(n)]
        assert kept == [r for r in old if r["metric_date"] == day(n)], n  # run ids too

    argv = ["backfill", "--config", str(config), "--start", str(day(1)), "--end", str(day(6))]
    assert main(argv) == 0
    _, finished = _last_run(spark, warehouse)
    assert finished == [(day(n), "published", "clusters_changed") for n in (1, 2)]
    daily = _daily(spark, warehouse)
    for n in range(1, 7):
        assert _published(daily, day(n)) == _expected(data, day(n)), n
