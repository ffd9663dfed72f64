"""Stopping a run: SIGINT and SIGTERM sent to a real `logmetrics backfill` process at a point
placed by tests/signalled_run.py (local Spark's JVM starting, the first chunk's main pass, a
table commit in flight), and two signals in a row.

A signal stops the run at its next safe point: the process exits 130 (SIGINT) or 143
(SIGTERM) with one line on stderr and no traceback; no table commit begins after the signal,
a commit in flight lands; the days the run began and did not publish get `interrupted` rows
in the ledger; its local JVM has ended when the process has. A second signal ends the process
at once, the JVM first. Each time, the next run (in this process) leaves every table as an
uninterrupted run does, whose published tables equal the pure-Python reference.

The signals are sent as a terminal's Ctrl-C and Airflow's kill send them: to the run's whole
process group (`os.killpg`), which holds the run's own process, so that a signal to the
process alone (`kill PID`) is covered by the same tests: the run behaves the same, and no
process of its group, or of the session its local JVM runs in, is left. Each point is checked
with one signal: SIGINT and SIGTERM at start-up, SIGTERM in the main pass (Airflow), SIGINT
inside a commit (Ctrl-C), two in a row (SIGTERM then SIGINT inside a commit, to the process;
Ctrl-C twice, to the group), and a SIGKILL.

The warehouse each stopped run starts from has the first two days published, so that the
run computes the last two (one chunk), appending them to tables that exist.

Those past start-up are marked `reliability` (`.ci/run` runs them after `make test`: `make
test-guarantees`): each is a process and a resumed run, a minute or more; `make test` keeps
both signals at start-up and the signals of a process forked meanwhile."""

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
    left: list[psutil.Process]  # the run's group's and sessions' processes alive 30 s after it


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _sessions_of(pids: set[int]) -> list[psutil.Process]:
    """The processes alive in the sessions of `pids`, and in the sessions those processes lead:
    a run's terminal session, and the session its local JVM may have of its own."""
    found: dict[int, psutil.Process] = {}
    sessions = set(pids)
    while True:
        for process in psutil.process_iter():
            try:
                if os.getsid(process.pid) in sessions and _alive(process):
                    found[process.pid] = process
            except (ProcessLookupError, PermissionError):
                continue
        more = {p.pid for p in found.values()} - sessions
        if not more:
            return list(found.values())
        sessions |= more


def _signalled(
    config: Path, point: str, signals: list[signal.Signals], group: bool = False
) -> Stopped:
    """`logmetrics backfill` of DAYS in a process of its own, sent `signals` at `point`: the
    first once the point is reached, each next one once the one before was taken in (at
    several points, `a+b`: one at each, once it is reached). With
    `group`, the process leads a session and process group of its own (as a terminal's shell or
    Airflow starts a command), and each signal goes to the whole group (`os.killpg`: a
    terminal's Ctrl-C, Airflow's kill), whatever processes it holds by then."""
    said, told = os.pipe()
    out, err = config.parent / "stopped.out", config.parent / "stopped.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, LAUNCHER, point, str(len(signals)), str(told), *_backfill(config)],
            cwd=config.parent,
            stdout=stdout,
            stderr=stderr,
            pass_fds=(told,),
            start_new_session=group,
        )
    os.close(told)
    watchdog = threading.Timer(600, process.kill)
    watchdog.start()
    events: list[str] = []
    children: list[psutil.Process] = []
    direct: list[psutil.Process] = []
    sent = 0
    next_on = ("at ",) if "+" in point else ("at ", "took ")
    try:
        with os.fdopen(said) as lines:  # until the process (the one writer) ends
            for line in lines:
                events.append(line.rstrip("\n"))
                if line.startswith("at "):
                    direct = psutil.Process(process.pid).children()
                    children = psutil.Process(process.pid).children(recursive=True)
                if line.startswith(next_on) and sent < len(signals):
                    if group:
                        os.killpg(process.pid, signals[sent])
                    else:
                        process.send_signal(signals[sent])
                    sent += 1
        status = process.wait(timeout=60)
    finally:
        watchdog.cancel()
    alive_at_exit = [c for c in direct if _alive(c)]
    around = _sessions_of({process.pid, *(c.pid for c in children)}) if group else []
    psutil.wait_procs(children + around, timeout=30)  # its JVM's own children see it gone
    left = [p for p in around if _alive(p)]
    return Stopped(status, out.read_text(), err.read_text(), events, children, alive_at_exit, left)


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
    assert not stopped.left, [(p.pid, p.name()) for p in stopped.left if _alive(p)]


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
def test_a_group_signal_while_local_spark_starts_stops_before_anything_is_computed(
    data: Path, tmp_path: Path, sent: signal.Signals
) -> None:
    """SIGINT (Ctrl-C) or SIGTERM to the run's whole process group while its JVM starts
    (launched, PySpark not yet connected), as a terminal and Airflow send them; it reaches the
    run's own process as a signal to it alone does: exit 130 or 143, one line, local Spark
    stopped, no commit at all. Fails if the start-up swallows a Ctrl-C and the run goes on to
    publish (Spark's own SIGINT handler raised inside a call into the JVM, a Py4J error taken
    for a Comet that did not load), if a SIGTERM kills the process with no handler, if the
    JVM is in the run's group (it dies under the run), or if it is left running."""
    stopped = _signalled(_config(data, tmp_path / "wh"), "start-up", [sent], group=True)
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


def _assert_stopped_at(
    point: str,
    spark: SparkSession,
    warehouse: Path,
    before: dict[str, int],
    stopped: Stopped,
    sent: signal.Signals,
) -> None:
    """A run stopped by `sent` at `point` (`main-pass`, or `commit:3`, inside its third commit):
    its status and one line naming the days; after the signal, no commit begins but the one in
    flight, which lands, and the ledger's `interrupted` rows (the others are refused); each
    Delta log holds what landed; the ledger's rows name the signal, the terminal says it once."""
    days = f"{COMPUTED[0]}..{COMPUTED[-1]}"
    _assert_stopped_cleanly(
        stopped,
        f"logmetrics: interrupted ({sent.name}): {days} not published; run again to resume",
        128 + sent,
    )
    after = _commits(_after_signal(stopped.events))
    record = f"append to {warehouse}/job_runs"
    if point == "main-pass":
        assert after == [("begins", after[0][1], record), ("landed", after[0][1], record)]
    else:
        commits = _commits(stopped.events)
        in_flight = next(what for event, n, what in commits if (event, n) == ("begins", 3))
        assert stopped.events.index(f"at {point}") < stopped.events.index(f"landed 3 {in_flight}")
        assert [what for event, _, what in after if event == "landed"] == [in_flight, record]
        begun = [n for event, n, _ in after if event == "begins"]
        refused = [n for event, n, _ in after if event == "refused"]
        assert begun and refused == begun[:-1]  # all but the ledger's last
    _assert_logs_hold_what_landed(warehouse, before, stopped.events)
    ledger = _ledger(spark, warehouse)
    assert sorted((r.metric_date, r.status) for r in ledger) == sorted(
        (d, s) for d in COMPUTED for s in ("started", "interrupted")
    )
    assert {r.error for r in ledger if r.status == "interrupted"} == {f"interrupted ({sent.name})"}
    assert stopped.stdout.count(f"{sent.name}: stopping at the next safe point") == 1


def _assert_logs_hold_what_landed(
    warehouse: Path, before: dict[str, int], events: list[str]
) -> None:
    """Each table's Delta log holds the commits it had `before` and those the run landed."""
    made: dict[str, int] = {}
    for event, _, what in _commits(events):
        if event == "landed":
            name = what.rsplit("/", 1)[1]
            made[name] = made.get(name, 0) + 1
    tables = set(before) | set(made)
    assert _versions(warehouse) == {t: before.get(t, 0) + made.get(t, 0) for t in tables}


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
    _assert_stopped_at_once(spark, warehouse, stopped, signal.SIGINT)
    _assert_resumes(spark, warehouses, warehouse)


def _assert_stopped_at_once(
    spark: SparkSession, warehouse: Path, stopped: Stopped, second: signal.Signals
) -> None:
    """A run ended by a `second` signal: its status and line, no commit landed after the first
    signal, the ledger as a SIGKILL leaves it."""
    _assert_stopped_cleanly(
        stopped,
        f"logmetrics: interrupted again ({second.name}): stopped at once; the next run "
        "computes the unfinished days again",
        128 + second,
    )
    assert not [e for e in _commits(_after_signal(stopped.events)) if e[0] == "landed"]
    statuses = sorted((r.metric_date, r.status) for r in _ledger(spark, warehouse))
    assert statuses == [(d, "started") for d in COMPUTED]


# The same signals sent to the run's whole process group (`os.killpg`), as a terminal's Ctrl-C
# and Airflow's kill send them: its local JVM and PySpark's workers must not stop under it.
# Each fails while the JVM is in the run's group: it ends with the signal (SIGTERM, and SIGINT
# too while PySpark's wish that it ignore SIGINT was lost), the run cannot record its stop
# (`warning: could not record the interrupted days`), PySpark's threads print tracebacks.


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("sent", "point"),
    [(signal.SIGTERM, "main-pass"), (signal.SIGINT, "commit:3")],
    ids=["SIGTERM-main-pass", "SIGINT-commit:3"],
)
def test_a_group_signal_while_computing_stops_as_one_to_the_run_alone(
    spark: SparkSession,
    warehouses: Warehouses,
    warehouse: Path,
    sent: signal.Signals,
    point: str,
) -> None:
    """SIGTERM to the run's process group once its main pass begins (Airflow's kill), SIGINT
    inside a table commit (Ctrl-C; the commit lands): as sent to the process alone, exit 143 or
    130, one line naming the days, `interrupted` rows for them and no other commit after the
    signal (the only one the ledger's), nothing of the run left; the next run computes the
    days again. Fails without a handler (the process dies with the signal, no ledger row, the
    JVM left behind), if the chunk's other tables or its `published` rows are written after
    the signal, or with a Py4J traceback."""
    config = _config(warehouses.data, warehouse)
    before = _versions(warehouse)
    stopped = _signalled(config, point, [sent], group=True)
    _assert_stopped_at(point, spark, warehouse, before, stopped, sent)
    _assert_resumes(spark, warehouses, warehouse)


@pytest.mark.reliability
def test_ctrl_c_twice_to_the_group_ends_everything_at_once(
    spark: SparkSession, warehouses: Warehouses, warehouse: Path
) -> None:
    """Ctrl-C twice in a terminal: SIGINT to the group in the main pass, and again as the
    stopping run records its days `interrupted` (its second commit): the second ends the run
    at once, its JVM and PySpark's workers with it (out of the group, they hear of it from the
    run alone), the ledger as after a SIGKILL. Fails if the first signal stops the JVM under
    the run (the record fails, with tracebacks and a warning, and the run ends before the
    second signal), or if the JVM or a worker is left running."""
    config = _config(warehouses.data, warehouse)
    stopped = _signalled(config, "main-pass+commit:2", [signal.SIGINT, signal.SIGINT], group=True)
    _assert_stopped_at_once(spark, warehouse, stopped, signal.SIGINT)
    _assert_resumes(spark, warehouses, warehouse)


@pytest.mark.reliability
def test_sigkill_to_the_group_leaves_no_process_of_the_run(
    warehouses: Warehouses, warehouse: Path
) -> None:
    """SIGKILL to the run's process group in its main pass (what a supervisor sends once its
    SIGTERM's grace is over): the JVM, out of the group, ends as its stdin from the killed run
    closes, and PySpark's daemon and workers with it: no process of the run is left. Passes
    with the JVM in the group too (the signal kills it there): it guards the JVM's own
    session."""
    config = _config(warehouses.data, warehouse)
    stopped = _signalled(config, "main-pass", [signal.SIGKILL], group=True)
    assert stopped.status == -signal.SIGKILL
    assert stopped.children, "no JVM seen at the point"
    assert not [c for c in stopped.children if _alive(c)], "a process of the JVM outlived it"
    assert not stopped.left, [(p.pid, p.name()) for p in stopped.left if _alive(p)]
