"""Orchestration: the run ledger, resumable backfills, concurrent runs, logs, catalog tables."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from pyspark.sql import SparkSession

from logmetrics.cli import main
from logmetrics.synthetic import generate
from suite_session import process_config

pytestmark = pytest.mark.slow

START = dt.date(2026, 6, 1)
DAYS = 4  # two chunks of two days: a kill can land in the first, and days remain after it
END = START + dt.timedelta(days=DAYS - 1)
VOLATILE = {"run_id", "computed_at", "checked_at", "quarantined_at", "details"}
TABLES = ("unique_clusters_by_query", "unique_clusters_daily", "data_quality", "quarantine")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("orchestration")
    generate(root, START, days=DAYS, queries_per_day=60, seed=9)
    return root


def _config(data: Path, warehouse: Path) -> Path:
    """The backfills' config (tests/suite_session.py), in chunks of two days."""
    return process_config(data, warehouse, backfill={"days_per_chunk": 2})


def _snapshot(spark: SparkSession, warehouse: Path) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for name in TABLES:
        df = spark.read.format("delta").load(str(warehouse / name))
        columns = [c for c in df.columns if c not in VOLATILE]
        out[name] = sorted(tuple(map(repr, r)) for r in df.select(*columns).collect())
    return out


def _snapshot_by_day(
    spark: SparkSession, warehouse: Path
) -> dict[str, dict[dt.date, list[tuple[Any, ...]]]]:
    """Each table's rows (volatile columns left out) per metric_date; no table: no days."""
    out: dict[str, dict[dt.date, list[tuple[Any, ...]]]] = {name: {} for name in TABLES}
    for name in TABLES:
        if not (warehouse / name / "_delta_log").is_dir():
            continue
        df = spark.read.format("delta").load(str(warehouse / name))
        columns = [c for c in df.columns if c not in VOLATILE]
        for row in df.select(*columns).collect():
            out[name].setdefault(row.metric_date, []).append(tuple(map(repr, row)))
    return {name: {d: sorted(rows) for d, rows in days.items()} for name, days in out.items()}


def _ledger(spark: SparkSession, warehouse: Path) -> list[Any]:
    return spark.read.format("delta").load(str(warehouse / "job_runs")).collect()


def _backfill_argv(config: Path, start: dt.date = START, end: dt.date = END) -> list[str]:
    return ["backfill", "--config", str(config), "--start", str(start), "--end", str(end)]


def test_the_ledger_records_each_day_and_a_changed_setting_restates_it(
    spark: SparkSession, data: Path, tmp_path: Path
) -> None:
    warehouse = tmp_path / "wh"
    config = _config(data, warehouse)
    two = START + dt.timedelta(days=1)  # one chunk: each run below is one pass
    assert main(_backfill_argv(config, START, two)) == 0
    first = _ledger(spark, warehouse)
    assert sorted((r.metric_date, r.status) for r in first) == sorted(
        [(START + dt.timedelta(days=i), s) for i in range(2) for s in ("started", "published")]
    )
    done = [r for r in first if r.status == "published"]
    assert all(r.queries == 60 and r.rows_read >= 60 and r.finished_at for r in done)
    assert len({r.config_fingerprint for r in first}) == 1

    # A day done from the same inputs and config is skipped, and --force restates it: the same
    # `run_range` for `run` and `backfill`, checked by tests/test_operator_view.py
    # (test_run_skips_a_day_that_is_done_and_force_restates_it) and, for a backfill over a
    # published range, tests/flows/test_living_inputs.py. A changed setting restates each day.
    changed = [*_backfill_argv(config, START, two), "--set", "metrics.threshold=3"]
    assert main(changed) == 0
    again = _ledger(spark, warehouse)
    assert len(again) == 2 * len(first)
    assert len({r.config_fingerprint for r in again}) == 2
    restated = [r for r in again if r.status == "published" and r.reason == "config_changed"]
    assert sorted(r.metric_date for r in restated) == [START, two]


def test_json_logs_carry_the_run_id_on_every_line(
    data: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    config = _config(data, tmp_path / "wh")
    assert main(["--log-format", "json", *_backfill_argv(config, START, START)]) == 0
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
    records = [json.loads(line) for line in lines]
    ours = [r for r in records if r["logger"].startswith("logmetrics")]
    assert ours and len({r["run_id"] for r in ours}) == 1
    day = [r for r in ours if r.get("metric_date") == str(START)]
    assert day and day[0]["queries"] == 60 and day[0]["published"] is True


def test_tables_can_be_named_in_a_catalog(spark: SparkSession, data: Path, tmp_path: Path) -> None:
    spark.sql("CREATE DATABASE IF NOT EXISTS logmetrics_test")
    config = _config(data, tmp_path / "wh")
    argv = [*_backfill_argv(config, START, START), "--set", "output.schema=logmetrics_test"]
    argv += ["--set", "output.warehouse=null"]
    assert main(argv) == 0
    daily = spark.read.table("logmetrics_test.unique_clusters_daily")
    assert {(r.metric_date, r.k) for r in daily.collect()} == {(START, 5), (START, 10)}
    assert spark.read.table("logmetrics_test.job_runs").count() == 2


def _spawn(
    config: Path,
    *extra: str,
    start: dt.date = START,
    end: dt.date = END,
    log_level: str = "INFO",
) -> subprocess.Popen[str]:
    argv = ["--log-level", log_level, "--log-format", "json"]
    argv += [*_backfill_argv(config, start, end), *extra]  # every record on stderr
    return subprocess.Popen(
        [sys.executable, "-m", "logmetrics.cli", *argv],
        cwd=config.parent,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


class Uninterrupted(NamedTuple):
    """The tables of an uninterrupted 4-day backfill: whole, and per day."""

    tables: dict[str, list[tuple[Any, ...]]]
    by_day: dict[str, dict[dt.date, list[tuple[Any, ...]]]]


@pytest.fixture(scope="module")
def uninterrupted(
    spark: SparkSession, data: Path, tmp_path_factory: pytest.TempPathFactory
) -> Uninterrupted:
    """Read once for the killed runs, which compare with it."""
    warehouse = tmp_path_factory.mktemp("uninterrupted") / "wh"
    assert main(_backfill_argv(_config(data, warehouse))) == 0
    return Uninterrupted(_snapshot(spark, warehouse), _snapshot_by_day(spark, warehouse))


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("moment", "pattern", "occurrence", "delay"),
    [
        ("during a Delta commit", "(writing|appending to) .*unique_clusters_daily", 2, 0.2),
        ("between days", ": published,", 2, 0.0),
    ],
)
def test_killed_backfill_resumes_to_the_tables_of_an_uninterrupted_run(
    spark: SparkSession,
    data: Path,
    uninterrupted: Uninterrupted,
    tmp_path: Path,
    moment: str,
    pattern: str,
    occurrence: int,
    delay: float,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGKILL at a point of a 4-day backfill (chunks of 2 days): no reader sees a partial
    or doubled day meanwhile, and the resumed run converges to the uninterrupted run's tables.
    The killed run is a process of its own; the resume runs in this one (a warm JVM: what
    matters is what the killed process left behind)."""
    warehouse = tmp_path / "killed"
    config = _config(data, warehouse)
    process = _spawn(config, log_level="DEBUG")
    assert process.stderr is not None
    seen = 0
    deadline = time.monotonic() + 300
    for line in process.stderr:
        seen += re.search(pattern, line) is not None
        if seen >= occurrence or time.monotonic() > deadline:
            break
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert seen >= occurrence, moment

    reference = uninterrupted.by_day
    killed = _snapshot_by_day(spark, warehouse)
    for table, days in killed.items():
        for day, rows in days.items():  # every day a reader can see is whole, and once
            assert rows == reference[table][day], (moment, table, day)

    with caplog.at_level("INFO", logger="logmetrics"):
        assert main(_backfill_argv(config)) == 0
    if killed["unique_clusters_daily"]:  # days published before the kill are not redone
        assert "already done from the same inputs and config, skipped" in caplog.text
    assert _snapshot(spark, warehouse) == uninterrupted.tables
    ledger = _ledger(spark, warehouse)
    published_days = [r.metric_date for r in ledger if r.status == "published"]
    assert sorted(set(published_days)) == [START + dt.timedelta(days=i) for i in range(DAYS)]


@pytest.mark.reliability
def test_concurrent_backfills_over_disjoint_and_overlapping_dates(
    spark: SparkSession, data: Path, tmp_path: Path
) -> None:
    """Two backfill processes over disjoint ranges, and a third run, in this process, over a
    date of each, started once the first process is computing: every day ends up once."""
    warehouse = tmp_path / "shared"
    config = _config(data, warehouse)
    days = DAYS
    runs = [
        _spawn(config, start=START, end=START + dt.timedelta(days=1)),
        _spawn(config, start=START + dt.timedelta(days=2), end=START + dt.timedelta(days=3)),
    ]
    first = runs[0]
    assert first.stderr is not None
    for line in first.stderr:
        if "computing" in line:
            break
    overlapping = _backfill_argv(config, START + dt.timedelta(days=1), START + dt.timedelta(days=2))
    assert main([*overlapping, "--force"]) == 0
    for run in runs:
        _, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
    daily = spark.read.format("delta").load(str(warehouse / "unique_clusters_daily"))
    keys = [(r.metric_date, r.k) for r in daily.select("metric_date", "k").collect()]
    assert sorted(keys) == [(START + dt.timedelta(days=i), k) for i in range(days) for k in (5, 10)]
    by_query = spark.read.format("delta").load(str(warehouse / "unique_clusters_by_query"))
    per_day = {r.metric_date: r["count"] for r in by_query.groupBy("metric_date").count().collect()}
    assert per_day == {START + dt.timedelta(days=i): 60 * 2 for i in range(days)}
