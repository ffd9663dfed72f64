"""A nightly day's commits (the ledger's `started` rows, each table's write, the `published`
rows): a run killed between any two of them converges, on the next run, to the tables of an
uninterrupted one, and two runs of the same new day at once leave it once, as the ledger's last
`published` row computed it.

The kill points come from one nightly in this process whose commits are made one at a time,
the warehouse copied after each: the copy after the N-th commit is what a SIGKILL right there
leaves on disk (the next commit's files, written but not committed, included); it is then
resumed. Three points are resumed, each a state the others are not: after the `started` rows
alone (no table holds the day), halfway through the tables (some do, some do not), and after
every table's append but before the `published` rows, killed for real with SIGKILL in a
process of its own (`killed_after_commits.py`): there every table's append must be replaced.
The two runs of one day are a process and this one.

Marked `reliability`: some ten nightly runs, three of them processes, are minutes of the
suite's budget; `.ci/run` runs them after `make test` (`make test-guarantees`), `make test` the
write orders one commit at a time (tests/flows/test_append_writes.py)."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from logmetrics.cli import main
from logmetrics.synthetic import generate
from logmetrics.tables import catalog
from suite_session import process_config

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

START = dt.date(2026, 7, 1)
NIGHT = START + dt.timedelta(days=2)  # the nightly's day: new to every table
DAY_TABLES = (
    "unique_clusters_by_query",
    "unique_clusters_daily",
    "unique_clusters_k_sweep",
    "redundancy_cost_daily",
    "unique_clusters_crowding",
    "unique_clusters_alerts",
    "data_quality",
    "quarantine",
    "missing_cluster_chunks",
)
COMMITS = 1 + len(DAY_TABLES) + 1  # `started`, each table, `published`
VOLATILE = {"run_id", "computed_at", "checked_at", "quarantined_at", "details"}
KILLER = Path(__file__).with_name("killed_after_commits.py")

Rows = dict[str, dict[dt.date, list[tuple[Any, ...]]]]


class History(NamedTuple):
    data: Path
    warehouse: Path  # the two days before NIGHT, published: copied for each test
    night: Rows  # every table after an uninterrupted nightly of NIGHT
    killed: dict[int, Path]  # that nightly's warehouse as it was right after its N-th commit


def _config(data: Path, warehouse: Path) -> Path:
    """The runs' config (tests/suite_session.py)."""
    return process_config(data, warehouse)


def _night(config: Path) -> list[str]:
    return ["run", "--config", str(config), "--date", str(NIGHT)]


def _rows(spark: SparkSession, warehouse: Path) -> Rows:
    """Each day table's rows (volatile columns left out) per day, sorted: a day written twice
    shows its rows twice."""
    out: Rows = {}
    for name in DAY_TABLES:
        out[name] = {}
        if not (warehouse / name / "_delta_log").is_dir():
            continue
        df = spark.read.format("delta").load(str(warehouse / name))
        columns = [c for c in df.columns if c not in VOLATILE]
        for row in df.select(*columns).collect():
            out[name].setdefault(row.metric_date, []).append(tuple(map(repr, row)))
    return {name: {d: sorted(rows) for d, rows in days.items()} for name, days in out.items()}


def _ledger(spark: SparkSession, warehouse: Path, day: dt.date) -> list[Any]:
    runs = spark.read.format("delta").load(str(warehouse / "job_runs"))
    return runs.where(runs.metric_date == day).collect()


def _last_published(spark: SparkSession, warehouse: Path, day: dt.date) -> Any:
    """The ledger's last finished row of the day (what `run` reads as the day's standing)."""
    finished = [r for r in _ledger(spark, warehouse, day) if r.finished_at is not None]
    last = max(finished, key=lambda r: r.finished_at)
    assert last.status == "published"
    return last


@pytest.fixture(scope="module")
def history(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> History:
    """Three days of logs, the first two published; the third's uninterrupted nightly, whose
    commits are counted (COMMITS: each one a kill point of the test below)."""
    root = tmp_path_factory.mktemp("nightly-commits")
    generate(root / "data", START, days=3, queries_per_day=60, seed=13)
    warehouse = root / "history"
    config = _config(root / "data", warehouse)
    argv = [
        "backfill",
        "--config",
        str(config),
        "--start",
        str(START),
        "--end",
        str(NIGHT - dt.timedelta(days=1)),
    ]
    assert main(argv) == 0
    night = root / "night"
    shutil.copytree(warehouse, night)
    killed: dict[int, Path] = {}
    save, lock = catalog._save, threading.Lock()

    def save_and_copy(*args: Any) -> None:
        with lock:  # one commit at a time: the copy is the warehouse after exactly N
            save(*args)
            n = len(killed) + 1
            killed[n] = root / f"killed-after-{n}"
            shutil.copytree(night, killed[n])

    catalog._save = save_and_copy
    try:
        assert main(_night(_config(root / "data", night))) == 0
    finally:
        catalog._save = save
    assert len(killed) == COMMITS
    rows = _rows(spark, night)
    assert all(rows[name].get(NIGHT) for name in ("unique_clusters_daily", "data_quality"))
    return History(root / "data", warehouse, rows, killed)


@pytest.fixture
def warehouse(history: History, tmp_path: Path) -> Iterator[Path]:
    copy = tmp_path / "wh"
    shutil.copytree(history.warehouse, copy)
    yield copy


def _spawn(argv: list[str], kill_after: int | None = None) -> subprocess.Popen[str]:
    prefix = [str(KILLER), str(kill_after)] if kill_after is not None else ["-m", "logmetrics.cli"]
    every_record = ["--log-level", "INFO", "--log-format", "json"]  # on stderr
    return subprocess.Popen(
        [sys.executable, *prefix, *every_record, *argv],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _converges(spark: SparkSession, history: History, warehouse: Path, config: Path) -> None:
    """Each table holds the day's rows once or not at all, as the uninterrupted run wrote
    them; the next run restates the day to the uninterrupted run's tables."""
    killed = _rows(spark, warehouse)
    for name, days in killed.items():
        if NIGHT in days:  # written before the kill: whole, and once
            assert days[NIGHT] == history.night[name][NIGHT], name
    assert main(_night(config)) == 0
    assert _rows(spark, warehouse) == history.night
    assert _last_published(spark, warehouse, NIGHT).queries == 60


# Killed after the `started` rows alone, and halfway through the tables (some hold the day,
# some not): after every table's append is test_a_nightly_sigkilled_between_..., for real.
@pytest.mark.parametrize("kill_after", [1, COMMITS // 2])
def test_a_nightly_killed_after_a_commit_converges_on_the_next_run(
    spark: SparkSession, history: History, tmp_path: Path, kill_after: int
) -> None:
    """Killed right after the nightly's N-th commit (the ledger's `started` rows are the first,
    `published` the last; between them the tables, appended since the day is new to them):
    every table then holds the day's rows once or not at all, as the uninterrupted run wrote
    them, and the next run restates the day to the uninterrupted run's tables, its ledger's
    last row `published`. Fails if an append is not replaced by the run after a killed one
    (the day twice), or if a table is written before the `started` rows (a killed run's rows
    that no ledger row says to restate)."""
    warehouse = tmp_path / "wh"
    shutil.copytree(history.killed[kill_after], warehouse)
    _converges(spark, history, warehouse, _config(history.data, warehouse))


def test_a_nightly_sigkilled_between_its_last_append_and_its_published_rows_converges(
    spark: SparkSession, history: History, warehouse: Path
) -> None:
    """The same for real: a process SIGKILLed right after its last table's append, before the
    ledger's `published` rows."""
    config = _config(history.data, warehouse)
    process = _spawn(_night(config), COMMITS - 1)
    _, err = process.communicate(timeout=600)
    assert process.returncode == -signal.SIGKILL, err[-3000:]
    assert f"killed after commit {COMMITS - 1}" in err
    assert re.search(r"unique_clusters_daily: appended .*new to the table", err), err[-3000:]
    _converges(spark, history, warehouse, config)


def _late_rows(data: Path) -> Path:
    """Ten more requests of NIGHT, landed in its partition as a file of their own (its path)."""
    partition = data / "served_logs" / f"date={NIGHT}"
    table = pq.read_table(next(partition.glob("*.parquet")))
    late = table.slice(0, 10)
    late = late.set_column(
        late.schema.get_field_index("request_id"),
        "request_id",
        pc.binary_join_element_wise(late["request_id"], pa.scalar("-late"), ""),
    )
    path = partition / "part-late.parquet"
    pq.write_table(late, path)
    return path


@pytest.mark.parametrize("late", [False, True], ids=["same inputs", "late rows between"])
def test_two_runs_of_the_same_new_day_leave_it_once_as_the_last_published_row_computed(
    spark: SparkSession,
    history: History,
    tmp_path: Path,
    late: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A nightly (a process) and a manual `run` of the same new day (here), started while the
    nightly computes; with `late`, ten late requests land in the day's partition between them.
    Each table then holds the day's rows once, all from the run whose `published` row is the
    ledger's last for the day, with the queries that row counted. Fails if both runs' appends
    land (the day twice), or if the tables keep one run's rows while the ledger's last word is
    the other's. The runs read the history's own logs, so that their config is the one the
    first days were published with and NIGHT is new to both: with a copy of the logs elsewhere
    the config (its logs' path) changes, both runs restate every day, and two restatements at
    once promise less (docs/tables.md, "Concurrent runs")."""
    warehouse = tmp_path / "wh"
    shutil.copytree(history.warehouse, warehouse)
    config = _config(history.data, warehouse)
    nightly = _spawn(_night(config))
    assert nightly.stderr is not None
    for line in nightly.stderr:
        if "computing" in line:
            break
    late_file = _late_rows(history.data) if late else None
    try:
        with caplog.at_level("INFO", logger="logmetrics"):
            assert main(_night(config)) == 0
        _, err = nightly.communicate(timeout=600)
    finally:
        if late_file is not None:  # the module's other tests read the history's logs
            late_file.unlink()
    assert nightly.returncode == 0, err[-3000:]
    assert "config changed" not in caplog.text + err  # NIGHT new to both, nothing restated

    last = _last_published(spark, warehouse, NIGHT)
    assert last.queries in ({60, 70} if late else {60})  # without or with the late requests
    for name in DAY_TABLES:
        df = spark.read.format("delta").load(str(warehouse / name))
        runs = {r.run_id for r in df.where(df.metric_date == NIGHT).select("run_id").collect()}
        # A table the uninterrupted nightly writes rows of the day into holds them, all from
        # the last run to publish it (an empty table would pass a subset check).
        assert runs == ({last.run_id} if history.night[name].get(NIGHT) else set()), name
    by_query = spark.read.format("delta").load(str(warehouse / "unique_clusters_by_query"))
    night = by_query.where(by_query.metric_date == NIGHT)
    assert night.count() == night.select("request_id").distinct().count() * 2  # ks 5, 10
    assert night.select("request_id").distinct().count() == last.queries
