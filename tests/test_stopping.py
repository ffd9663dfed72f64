"""Stopping a run: SIGINT and SIGTERM sent to a real `logmetrics backfill` process at a point
placed by tests/signalled_run.py (local Spark's JVM starting, the first chunk's main pass, a
table commit in flight), and two signals in a row.

A signal stops the run at its next safe point: the process exits 130 (SIGINT) or 143
(SIGTERM) with one line on stderr and no traceback; no table commit begins after the signal,
a commit in flight lands; the days the run began and did not publish get `interrupted` rows
in the ledger; its local JVM has ended when the process has. A second signal ends the process
at once, the JVM first. Each time, the next run (in this process) leaves every table as an
uninterrupted run does, whose published tables equal the pure-Python reference.

The warehouse each stopped run starts from has the first two days published, so that the
run computes the last two (one chunk), appending them to tables that exist.

The main pass's SIGTERM and the two signals are marked `reliability` (`make test-release`, run
by hand before a release): two more processes and their resumed runs are a minute and a half
of `make test`'s budget; `make test` keeps both signals at start-up and a Ctrl-C during a
commit, with its ledger rows and its resumed run."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import psutil
import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

import reference
from logmetrics.cli import main
from logmetrics.config import CrowdingConfig
from logmetrics.interrupt import stopping_on_signals
from logmetrics.synthetic import generate
from logmetrics.tables.catalog import (
    DETECTOR_CALIBRATION_TABLE,
    EVALUATION_RESULTS_TABLE,
    JOB_RUNS_TABLE,
    OUTPUT_TABLES,
)
from suite_session import process_config

pytestmark = pytest.mark.slow

START = dt.date(2026, 8, 1)
DAYS = [START + dt.timedelta(days=i) for i in range(4)]
BEFORE, COMPUTED = DAYS[:2], DAYS[2:]  # published before the stopped run; computed by it
KS = (5, 10)
THRESHOLD = 4  # the config's default
LAUNCHER = Path(__file__).with_name("signalled_run.py")
VOLATILE = {"run_id", "computed_at", "checked_at", "quarantined_at", "details"}
NOT_DAYS = (JOB_RUNS_TABLE, DETECTOR_CALIBRATION_TABLE, EVALUATION_RESULTS_TABLE)
DAY_TABLES = tuple(t.name for t in OUTPUT_TABLES if t not in NOT_DAYS)  # a run's days, by table
TRACEBACK = re.compile(r"Traceback|^\s+at |Py4J", re.M)

Tables = dict[str, list[tuple[Any, ...]]]


class Warehouses(NamedTuple):
    data: Path
    before: Path  # BEFORE published: what each stopped run starts from
    uninterrupted: Tables  # every day table after an uninterrupted run of DAYS from `before`


def _config(data: Path, warehouse: Path) -> Path:
    """The runs' config (tests/suite_session.py), in chunks of two days."""
    return process_config(data, warehouse, backfill={"days_per_chunk": 2})


def _backfill(config: Path) -> list[str]:
    return ["backfill", "--config", str(config), "--start", str(DAYS[0]), "--end", str(DAYS[-1])]


def _tables(spark: SparkSession, warehouse: Path) -> Tables:
    """Each day table's rows (the run's own columns left out), sorted; no table: none."""
    out: Tables = {}
    for name in DAY_TABLES:
        out[name] = []
        if (warehouse / name / "_delta_log").is_dir():
            df = spark.read.format("delta").load(str(warehouse / name))
            columns = [c for c in df.columns if c not in VOLATILE]
            out[name] = sorted(tuple(map(repr, r)) for r in df.select(*columns).collect())
    return out


RUN_AND_SEGMENT = {"run_id", "computed_at", "cluster_table_version", "segment", "segment_value"}


def _published(
    spark: SparkSession,
    warehouse: Path,
    name: str,
    keys: list[str],
    drop: set[str] = RUN_AND_SEGMENT,
) -> list[dict]:
    df = spark.read.format("delta").load(str(warehouse / name))
    rows = [{k: v for k, v in r.asDict().items() if k not in drop} for r in df.collect()]
    return sorted(rows, key=lambda r: tuple(r[k] for k in keys))


def _assert_equal_the_reference(spark: SparkSession, data: Path, warehouse: Path) -> None:
    """The published tables of DAYS, against tests/reference.py over the generated logs."""
    logs = ds.dataset(data / "served_logs", format="parquet", partitioning="hive")
    rows = logs.to_table(columns=["request_id", "served_at", "results", "date"]).to_pylist()
    for row in rows:  # the date partition, as the job reads it
        row["date"] = dt.date.fromisoformat(str(row["date"]))
    table = ds.dataset(data / "clusters_parquet", format="parquet").to_table().to_pylist()
    clusters = [(r["chunk_id"], r["cluster_id"]) for r in table]
    first, last = DAYS[0], DAYS[-1]

    by_query = _published(
        spark, warehouse, "unique_clusters_by_query", ["metric_date", "request_id", "k"]
    )
    assert [{**r, "served_at": r["served_at"].replace(tzinfo=dt.UTC)} for r in by_query] == (
        reference.by_query(rows, clusters, KS, first, last)
    )
    quality = {
        "dq_passed",
        "rows_read",
        "duplicate_rows",
        "quarantined_rows",
        "quarantined_entries",
    }
    daily = _published(spark, warehouse, "unique_clusters_daily", ["metric_date", "k"])
    assert [{k: v for k, v in r.items() if k not in quality} for r in daily] == reference.daily(
        rows, clusters, KS, THRESHOLD, first, last
    )
    every_k = range(1, max(KS) + 1)
    sweep = _published(spark, warehouse, "unique_clusters_k_sweep", ["metric_date", "k"])
    assert sweep == reference.k_sweep(rows, clusters, max(KS), first, last)
    prices = {"tokens_per_slot", "usd_per_million_input_tokens"}
    cost = _published(spark, warehouse, "redundancy_cost_daily", ["metric_date", "k"])
    assert [{k: v for k, v in r.items() if k not in prices} for r in cost] == (
        reference.redundancy_cost(rows, clusters, every_k, 510, 3.0, first, last)
    )
    top = CrowdingConfig().top_clusters
    crowding = _published(
        spark, warehouse, "unique_clusters_crowding", ["metric_date", "k", "rank"]
    )
    expected = reference.crowding(rows, clusters, KS, top, first, last)
    assert len(crowding) == len(expected) > 0
    assert all(reference.mismatched(g, w) == {} for g, w in zip(crowding, expected, strict=True))
    keys = ["metric_date", "k", "segment", "segment_value", "statistic"]
    as_published = _published(spark, warehouse, "unique_clusters_daily", keys[:2], set())
    judged = [{**r, "histogram": list(r["histogram"])} for r in as_published]
    alerts = _published(spark, warehouse, "unique_clusters_alerts", keys, {"run_id", "computed_at"})
    expected = reference.alerts(judged, DAYS)
    assert len(alerts) == len(expected) == len(DAYS) * len(KS) * 2
    assert all(reference.mismatched(g, w) == {} for g, w in zip(alerts, expected, strict=True))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stopping")
    generate(root / "data", START, days=len(DAYS), queries_per_day=60, seed=9)
    return root / "data"


@pytest.fixture(scope="module")
def warehouses(
    spark: SparkSession, data: Path, tmp_path_factory: pytest.TempPathFactory
) -> Warehouses:
    root = tmp_path_factory.mktemp("warehouses")
    before = root / "before"
    argv = _backfill(_config(data, before))
    assert main([*argv[:-2], "--end", str(BEFORE[-1])]) == 0
    whole = root / "uninterrupted"
    shutil.copytree(before, whole)
    assert main(_backfill(_config(data, whole))) == 0
    _assert_equal_the_reference(spark, data, whole)
    return Warehouses(data, before, _tables(spark, whole))


@dataclass
class Stopped:
    """What a signalled run left: its exit status, stdout and stderr, the launcher's events
    (commits begun, landed, refused; the point; each signal taken in), and its processes."""

    status: int
    stdout: str
    stderr: str
    events: list[str]
    children: list[psutil.Process]  # at the point: its local JVM (and what that started)
    alive_at_exit: list[psutil.Process]  # of them, its direct children running as it ended


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signalled(config: Path, point: str, signals: list[signal.Signals]) -> Stopped:
    """`logmetrics backfill` of DAYS in a process of its own, sent `signals` at `point`: the
    first once the point is reached, each next one once the one before was taken in."""
    said, told = os.pipe()
    out, err = config.parent / "stopped.out", config.parent / "stopped.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, LAUNCHER, point, str(len(signals)), str(told), *_backfill(config)],
            cwd=config.parent,
            stdout=stdout,
            stderr=stderr,
            pass_fds=(told,),
        )
    os.close(told)
    watchdog = threading.Timer(600, process.kill)
    watchdog.start()
    events: list[str] = []
    children: list[psutil.Process] = []
    direct: list[psutil.Process] = []
    sent = 0
    try:
        with os.fdopen(said) as lines:  # until the process (the one writer) ends
            for line in lines:
                events.append(line.rstrip("\n"))
                if line.startswith("at "):
                    direct = psutil.Process(process.pid).children()
                    children = psutil.Process(process.pid).children(recursive=True)
                if (line.startswith("at ") or line.startswith("took ")) and sent < len(signals):
                    process.send_signal(signals[sent])
                    sent += 1
        status = process.wait(timeout=60)
    finally:
        watchdog.cancel()
    alive_at_exit = [c for c in direct if _alive(c)]
    psutil.wait_procs(children, timeout=30)  # its JVM's own children see it gone
    return Stopped(status, out.read_text(), err.read_text(), events, children, alive_at_exit)


def _commits(events: list[str]) -> list[tuple[str, int, str]]:
    """(begins | landed | refused, n, what) of each commit event, in order."""
    found = [re.match(r"(begins|landed|refused) (\d+) (.*?)(?::.*)?$", e) for e in events]
    return [(m.group(1), int(m.group(2)), m.group(3)) for m in found if m]


def _after_signal(events: list[str]) -> list[str]:
    return events[events.index("took 1") + 1 :]


def _ledger(spark: SparkSession, warehouse: Path) -> list[Any]:
    runs = spark.read.format("delta").load(str(warehouse / "job_runs"))
    return runs.where(runs.metric_date.isin(COMPUTED)).collect()


def _versions(warehouse: Path) -> dict[str, int]:
    """Each table's commits, from its Delta log."""
    return {
        table.name: len(list((table / "_delta_log").glob("*.json")))
        for table in warehouse.iterdir()
        if (table / "_delta_log").is_dir()
    }


def _assert_stopped_cleanly(stopped: Stopped, line: str, code: int) -> None:
    """The exit status, one line on stderr, no trace, no line said twice, and the JVM (its
    descendants too) gone with the process."""
    assert stopped.status == code, stopped.stderr[-3000:]
    assert stopped.stderr.splitlines() == [line], stopped.stderr[-3000:]
    assert not TRACEBACK.search(stopped.stdout + stopped.stderr)
    said = stopped.stdout.splitlines()
    assert len(said) == len(set(said)), said
    assert stopped.children, "no JVM seen at the point"
    assert not stopped.alive_at_exit, "the JVM outlived the process"
    assert not [c for c in stopped.children if _alive(c)], "a process of the JVM outlived it"


def _assert_resumes(spark: SparkSession, warehouses: Warehouses, warehouse: Path) -> None:
    """The next run leaves every day table as the uninterrupted run did, and publishes the
    days the stopped run did not."""
    assert main(_backfill(_config(warehouses.data, warehouse))) == 0
    assert _tables(spark, warehouse) == warehouses.uninterrupted
    last = {}
    for row in sorted(
        _ledger(spark, warehouse), key=lambda r: (r.finished_at is not None, r.finished_at)
    ):
        last[row.metric_date] = row.status
    assert last == dict.fromkeys(COMPUTED, "published")


@pytest.fixture
def warehouse(warehouses: Warehouses, tmp_path: Path) -> Path:
    copy = tmp_path / "wh"
    shutil.copytree(warehouses.before, copy)
    return copy


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_local_spark_starts_stops_before_anything_is_computed(
    data: Path, tmp_path: Path, sent: signal.Signals
) -> None:
    """SIGINT (Ctrl-C) or SIGTERM while the JVM starts (launched, PySpark not yet connected):
    exit 130 or 143, one line, local Spark stopped, no commit at all. Fails if the start-up
    swallows a Ctrl-C and the run goes on to publish (Spark's own SIGINT handler raised
    inside a call into the JVM, a Py4J error taken for a Comet that did not load), if a
    SIGTERM kills the process with no handler, or if the JVM is left running."""
    stopped = _signalled(_config(data, tmp_path / "wh"), "start-up", [sent])
    _assert_stopped_cleanly(
        stopped,
        f"logmetrics: interrupted ({sent.name}): no day computed; run again to resume",
        128 + sent,
    )
    assert not _commits(stopped.events)
    assert not (tmp_path / "wh").exists()


def test_a_process_started_while_a_command_runs_keeps_the_signals_it_is_given() -> None:
    """PySpark starts its JVM with a `preexec_fn` that has it ignore SIGINT. While a command
    runs, SIGINT and SIGTERM stay with logmetrics' handler in this process, and only there:
    the child ignores SIGINT as it was told. Fails if the command's hold on `signal.signal`
    reaches into the forked child (the JVM then took a Ctrl-C to its group and stopped)."""
    assert threading.current_thread() is threading.main_thread()  # where the hold applies
    with stopping_on_signals():
        child = subprocess.run(
            ["grep", "^SigIgn:", "/proc/self/status"],
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
            capture_output=True,
            text=True,
            check=True,
        )
        assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN  # this process: held
    ignored = int(child.stdout.split()[1], 16)
    assert ignored & 1 << (signal.SIGINT - 1), child.stdout


@pytest.mark.reliability
def test_sigterm_in_the_main_pass_stops_it_and_records_the_days_interrupted(
    spark: SparkSession, warehouses: Warehouses, warehouse: Path
) -> None:
    """SIGTERM once the first chunk's main pass begins (the run's `started` rows committed):
    exit 143, one line naming the days, `interrupted` rows for both, the only commit after
    the signal theirs; the next run computes the days again. Fails without a handler (the
    process dies with the signal, no ledger row, the JVM left behind) or if the chunk's
    tables are written after the signal."""
    config = _config(warehouses.data, warehouse)
    stopped = _signalled(config, "main-pass", [signal.SIGTERM])
    days = f"{COMPUTED[0]}..{COMPUTED[-1]}"
    _assert_stopped_cleanly(
        stopped,
        f"logmetrics: interrupted (SIGTERM): {days} not published; run again to resume",
        143,
    )
    after = _commits(_after_signal(stopped.events))
    assert after == [
        ("begins", after[0][1], f"append to {warehouse}/job_runs"),
        ("landed", after[0][1], f"append to {warehouse}/job_runs"),
    ]
    ledger = _ledger(spark, warehouse)
    assert sorted((r.metric_date, r.status) for r in ledger) == sorted(
        (d, s) for d in COMPUTED for s in ("started", "interrupted")
    )
    assert {r.error for r in ledger if r.status == "interrupted"} == {"interrupted (SIGTERM)"}
    assert "SIGTERM: stopping at the next safe point" in stopped.stdout
    _assert_resumes(spark, warehouses, warehouse)


@pytest.mark.reliability
def test_ctrl_c_during_a_table_commit_lets_it_land_and_begins_no_other(
    spark: SparkSession, warehouses: Warehouses, warehouse: Path
) -> None:
    """SIGINT inside the chunk's second table commit (commits one at a time; the first is the
    run's `started` rows): that commit lands, every later one is refused but the ledger's
    `interrupted` rows; each table's Delta log holds exactly the commits that landed; exit 130
    and one line; the next run replaces what the stopped run appended. Fails if the chunk's
    other tables are still written, or its `published` rows, or with a Py4J traceback."""
    config = _config(warehouses.data, warehouse)
    before = _versions(warehouse)
    stopped = _signalled(config, "commit:3", [signal.SIGINT])
    days = f"{COMPUTED[0]}..{COMPUTED[-1]}"
    _assert_stopped_cleanly(
        stopped, f"logmetrics: interrupted (SIGINT): {days} not published; run again to resume", 130
    )
    commits = _commits(stopped.events)
    in_flight = next(what for event, n, what in commits if (event, n) == ("begins", 3))
    assert stopped.events.index("at commit:3") < stopped.events.index(f"landed 3 {in_flight}")
    after = _commits(_after_signal(stopped.events))
    landed = [what for event, _, what in after if event == "landed"]
    assert landed == [in_flight, f"append to {warehouse}/job_runs"]
    begun = [n for event, n, _ in after if event == "begins"]
    refused = [n for event, n, _ in after if event == "refused"]
    assert begun and refused == begun[:-1]  # all but the ledger's last
    made: dict[str, int] = {}
    for event, _, what in commits:
        if event == "landed":
            name = what.rsplit("/", 1)[1]
            made[name] = made.get(name, 0) + 1
    tables = set(before) | set(made)
    assert _versions(warehouse) == {t: before.get(t, 0) + made.get(t, 0) for t in tables}
    statuses = sorted((r.metric_date, r.status) for r in _ledger(spark, warehouse))
    assert statuses == sorted((d, s) for d in COMPUTED for s in ("started", "interrupted"))
    _assert_resumes(spark, warehouses, warehouse)


@pytest.mark.reliability
def test_a_second_signal_ends_the_process_at_once(
    spark: SparkSession, warehouses: Warehouses, warehouse: Path
) -> None:
    """SIGTERM inside a table commit, then SIGINT while the run waits to stop: the process
    ends at once (130, one line), the commit never made, its JVM killed with it; the ledger
    has the days' `started` rows only (as after a SIGKILL), and the next run computes them.
    Fails if the second signal waits for the first's safe point, or leaves the JVM."""
    config = _config(warehouses.data, warehouse)
    stopped = _signalled(config, "commit:3", [signal.SIGTERM, signal.SIGINT])
    _assert_stopped_cleanly(
        stopped,
        "logmetrics: interrupted again (SIGINT): stopped at once; the next run computes the "
        "unfinished days again",
        130,
    )
    assert not [e for e in _commits(_after_signal(stopped.events)) if e[0] == "landed"]
    statuses = sorted((r.metric_date, r.status) for r in _ledger(spark, warehouse))
    assert statuses == [(d, "started") for d in COMPUTED]
    _assert_resumes(spark, warehouses, warehouse)
