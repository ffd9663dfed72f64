"""A held day keeps what was published: a restatement held back by a blocking check (an
unreadable log file, under `on_corrupt: quarantine`) leaves the day's published numbers and,
in quarantine, missing_cluster_chunks and data_quality, the rows behind them, with the held
run's rows beside them, told apart by run_id (the held run's has a `held` ledger row of the
day); docs/tables.md's query for the rows behind the published numbers returns the published
run's; a day held again does not pile up held rows, and a run that publishes the day replaces
both.

Four days of generated traffic, in one chunk: the damaged file lies in the last day's date
partition, so the last two days (a partition may hold rows of the days either side) are held
and the first two published, in the same commit of each table."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from logmetrics.cli import main
from logmetrics.synthetic import generate

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

START = dt.date(2026, 9, 1)
DAYS = [START + dt.timedelta(days=i) for i in range(4)]
PUBLISHED, HELD = DAYS[:2], DAYS[2:]
DIAGNOSTICS = ("quarantine", "missing_cluster_chunks", "data_quality")
DOC = Path(__file__).resolve().parents[2] / "docs" / "tables.md"

Rows = dict[str, dict[dt.date, list[dict[str, Any]]]]


def _config(root: Path) -> Path:
    path = root / "job.yaml"
    path.write_text(
        "inputs:\n"
        f"  served_logs: {{path: '{root / 'data' / 'served_logs'}', on_corrupt: quarantine}}\n"
        f"  clusters: {{path: '{root / 'data' / 'clusters_parquet'}', format: parquet}}\n"
        f"output: {{warehouse: '{root / 'wh'}'}}\n"
        "metrics: {ks: [5, 10]}\n"
        "backfill: {days_per_chunk: 4}\n"
        "quality: {on_failure: fail, max_missing_cluster_rate: 1.0, max_malformed_rate: 1.0}\n"
    )
    return path


def _backfill(config: Path, *more: str) -> int:
    return main(["backfill", "--config", str(config), "--start", str(DAYS[0]),
                 "--end", str(DAYS[-1]), *more])  # fmt: skip


def _rows(spark: SparkSession, warehouse: Path) -> Rows:
    """The diagnostics tables' rows, per day, every column, sorted."""
    out: Rows = {}
    for name in DIAGNOSTICS:
        rows = [
            r.asDict() for r in spark.read.format("delta").load(str(warehouse / name)).collect()
        ]
        out[name] = {
            day: sorted((r for r in rows if r["metric_date"] == day), key=repr) for day in DAYS
        }
    return out


def _runs(spark: SparkSession, warehouse: Path, table: str) -> dict[dt.date, set[str]]:
    df = spark.read.format("delta").load(str(warehouse / table))
    runs: dict[dt.date, set[str]] = {}
    for r in df.select("metric_date", "run_id").collect():
        runs.setdefault(r.metric_date, set()).add(r.run_id)
    return runs


def _documented_query(spark: SparkSession, warehouse: Path, table: str, day: dt.date) -> list:
    """docs/tables.md's query for the rows behind the published numbers of `day`, as written
    there (for `quarantine`), on `table` of this path warehouse."""
    section = DOC.read_text().split("are this one query:", 1)[1]
    sql = re.search(r"```sql\n(.*?)```", section, re.S)
    assert sql is not None
    text = (
        sql.group(1)
        .replace("main.retrieval_metrics.quarantine", f"delta.`{warehouse / table}`")
        .replace(
            "main.retrieval_metrics.unique_clusters_daily",
            f"delta.`{warehouse / 'unique_clusters_daily'}`",
        )
        .replace("DATE'2026-10-15'", f"DATE'{day}'")
        .rstrip()
        .rstrip(";")
    )
    return sorted((r.asDict() for r in spark.sql(text).collect()), key=repr)


def _held_rows(rows: Rows, day: dt.date, run_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    return {name: [r for r in rows[name][day] if r["run_id"] in run_ids] for name in DIAGNOSTICS}


def _held_in_ledger(spark: SparkSession, warehouse: Path, day: dt.date) -> set[str]:
    runs = spark.read.format("delta").load(str(warehouse / "job_runs"))
    return {
        r.run_id for r in runs.where((runs.metric_date == day) & (runs.status == "held")).collect()
    }


def test_a_held_restatement_keeps_the_rows_behind_the_published_numbers(
    spark: SparkSession, tmp_path: Path
) -> None:
    generate(tmp_path / "data", START, days=len(DAYS), queries_per_day=60, seed=21)
    config, warehouse = _config(tmp_path), tmp_path / "wh"
    assert _backfill(config) == 0
    first = _rows(spark, warehouse)
    first_daily = _runs(spark, warehouse, "unique_clusters_daily")
    (published_run,) = set().union(*first_daily.values())
    for name in ("quarantine", "missing_cluster_chunks"):  # the generator's dirty rows
        assert all(first[name][day] for day in HELD), name

    partition = tmp_path / "data" / "served_logs" / f"date={DAYS[-1]}"
    broken = partition / "0-broken.parquet"
    shutil.copy(next(partition.glob("*.parquet")), broken)
    broken.write_bytes(broken.read_bytes()[:200])  # truncated: not a Parquet file any more

    # A restatement of the four days: the first two published, the last two held.
    assert _backfill(config, "--force") == 3
    second = _rows(spark, warehouse)
    daily = _runs(spark, warehouse, "unique_clusters_daily")
    assert {d: daily[d] for d in HELD} == {d: first_daily[d] for d in HELD}  # numbers kept
    (restating_run,) = set().union(*(daily[d] for d in PUBLISHED)) - {published_run}
    for day in HELD:
        # The published run's rows, every column as they were, beside the held run's.
        assert _held_rows(second, day, {published_run}) == _held_rows(first, day, {published_run})
        assert _held_in_ledger(spark, warehouse, day) == {restating_run}
        held = _held_rows(second, day, {restating_run})
        assert {r["run_id"] for name in DIAGNOSTICS for r in second[name][day]} == {
            published_run,
            restating_run,
        }
        assert [r["reason"] for r in held["quarantine"] if r["reason"] == "corrupt_file"] == [
            "corrupt_file"
        ]
        failed = {r["check"] for r in held["data_quality"] if r["success"] is False}
        assert "readable_inputs" in failed
        assert len(held["data_quality"]) == 10
        assert held["missing_cluster_chunks"]  # the readable files' unknown chunks
        for name in DIAGNOSTICS:  # the documented query: the rows behind the published numbers
            assert _documented_query(spark, warehouse, name, day) == first[name][day], name
    for day in PUBLISHED:  # published again: this run's rows only, in the same commit
        for name in DIAGNOSTICS:
            assert {r["run_id"] for r in second[name][day]} == {restating_run}, (name, day)
            assert _documented_query(spark, warehouse, name, day) == second[name][day], name

    # Held again: the held rows are this run's, not both held runs'; the published run's stay.
    assert _backfill(config, "--force") == 3
    third = _rows(spark, warehouse)
    for day in HELD:
        runs_of_day = {r["run_id"] for name in DIAGNOSTICS for r in third[name][day]}
        assert published_run in runs_of_day and restating_run not in runs_of_day
        assert len(runs_of_day) == 2
        assert _held_rows(third, day, {published_run}) == _held_rows(first, day, {published_run})

    # Repaired: the held days are published again, their rows all the new run's.
    broken.unlink()
    assert _backfill(config) == 0
    fourth = _rows(spark, warehouse)
    daily_runs = _runs(spark, warehouse, "unique_clusters_daily")
    for day in HELD:
        (run,) = daily_runs[day]
        assert run not in {published_run, restating_run}
        for name in DIAGNOSTICS:
            assert {r["run_id"] for r in fourth[name][day]} == {run}, (name, day)
            assert _documented_query(spark, warehouse, name, day) == fourth[name][day]
