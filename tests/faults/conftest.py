"""What the storage-fault modules share: the logs, the cluster table and a warehouse on the
worker's S3 server, built once per worker; a nightly run in a process of its own that stops at
a point of its run while the test breaks the store (tests/faulted_run.py); what such a run must
leave; and the next run's tables against the uninterrupted run's and the pure-Python
reference.

Each worker builds (in its suite session) the logs of four days and a cluster table on S3, a
warehouse with the first three published (`before`), and the uninterrupted nightly of the
fourth from a copy of it, whose tables each faulted run's next run must leave. Each test copies
`before` to a prefix of its own, runs the nightly there through the fault, then the next run
right away (in this process) on the healthy store."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pyarrow.dataset as ds
import pytest
import yaml
from benchmarks import s3_server
from pyarrow import fs as pafs
from pyspark.sql import SparkSession

import reference
from logmetrics import storage
from logmetrics.cli import main
from logmetrics.synthetic import generate
from logmetrics.tables import catalog
from logmetrics.tables.lease import LEASE_FILE
from suite_session import process_spark

START = dt.date(2026, 8, 1)
DAYS = [START + dt.timedelta(days=i) for i in range(4)]
NIGHT = DAYS[-1]
KS = (5, 10)
THRESHOLD = 4
LAUNCHER = Path(__file__).parents[1] / "faulted_run.py"
TRACEBACK = re.compile(r"Traceback|^\s+at |Py4J|Exception:", re.M)
VOLATILE = {"run_id", "computed_at", "checked_at", "quarantined_at", "details"}
DAY_TABLES = [
    t.name
    for t in catalog.OUTPUT_TABLES
    if "metric_date" in t.schema.names and t is not catalog.JOB_RUNS_TABLE
]
Rows = dict[str, list[str]]


def settings(path: Path, root: str, warehouse: str, endpoint: str, **sections: Any) -> Path:
    """A run's config: the logs and cluster table under `root` and the warehouse on S3, all
    reached at `endpoint` (the server, or a fault injector in front of it); the suite's Spark
    settings for a short run; ks 5 and 10, every day published."""
    config = {
        "inputs": {
            "served_logs": {"path": f"{root}/served_logs"},
            "clusters": {"path": f"{root}/clusters", "format": "parquet"},
        },
        "output": {"warehouse": warehouse},
        "metrics": {"ks": list(KS), "threshold": THRESHOLD},
        "quality": {"max_malformed_rate": 0.05, "on_failure": "warn"},
        **sections,
        "spark": process_spark(
            {
                "spark.hadoop.fs.s3a.endpoint": endpoint,
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.endpoint.region": s3_server.REGION,
            },
            log_dir=str(path.parent / "logs"),
        ),
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def tables(spark: SparkSession, warehouse: str) -> Rows:
    """Each day table's rows (the run's own columns left out), sorted: a row twice is there
    twice."""
    out: Rows = {}
    for name in DAY_TABLES:
        df = spark.read.format("delta").load(f"{warehouse}/{name}")
        columns = [c for c in df.columns if c not in VOLATILE]
        out[name] = sorted(repr(r) for r in df.select(*columns).collect())
    return out


def ledger(spark: SparkSession, warehouse: str, day: dt.date = NIGHT) -> list[Any]:
    runs = spark.read.format("delta").load(f"{warehouse}/job_runs")
    return sorted(
        runs.where(runs.metric_date == day).collect(),
        key=lambda r: (r.finished_at is not None, r.finished_at or dt.datetime.min),
    )


def copy(source: str, target: str) -> None:
    src, dst = storage.place(source), storage.place(target)
    assert src is not None and dst is not None
    pafs.copy_files(src.path, dst.path, source_filesystem=src.fs, destination_filesystem=dst.fs)


@dataclass(frozen=True)
class Store:
    """The worker's S3 server and what is on it for the fault tests."""

    server: s3_server.S3Server
    root: str  # s3a://faults/<worker>: served_logs, clusters
    data: Path  # the same logs and cluster table, locally (the reference reads them)
    before: str  # DAYS[:-1] published
    uninterrupted: Rows  # the nightly of NIGHT from `before`, uninterrupted
    base: Path  # a folder for the configs


@pytest.fixture(scope="session")
def store(
    s3_spark: SparkSession,
    s3_server_running: s3_server.S3Server,
    tmp_path_factory: pytest.TempPathFactory,
) -> Store:
    root_dir = tmp_path_factory.mktemp("faults")
    server = s3_server_running
    storage.configure(server.spark_conf)
    bucket = server.bucket("faults")
    root = f"s3a://{bucket}/{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.urandom(3).hex()}"
    data = root_dir / "data"
    generate(data, START, days=len(DAYS), queries_per_day=40, seed=67)
    s3_server.upload(data / "served_logs", f"{root}/served_logs")
    s3_server.upload(data / "clusters_parquet", f"{root}/clusters")

    def config(name: str, warehouse: str, **sections: Any) -> list[str]:
        path = settings(root_dir / f"{name}.yaml", root, warehouse, server.endpoint, **sections)
        return ["--config", str(path)]

    before = f"{root}/before"
    days = ["--start", str(DAYS[0]), "--end", str(DAYS[-2])]
    assert main(["backfill", *config("before", before), *days]) == 0
    whole = f"{root}/uninterrupted"
    copy(before, whole)
    assert main(["run", *config("uninterrupted", whole), "--date", str(NIGHT)]) == 0
    uninterrupted = tables(s3_spark, whole)
    assert_reference(s3_spark, data, whole)
    return Store(server, root, data, before, uninterrupted, root_dir)


@pytest.fixture(scope="session")
def backfilled(s3_spark: SparkSession, store: Store) -> Rows:
    """The tables of a backfill of DAYS[1:], a day a chunk, from an empty warehouse."""
    storage.configure(store.server.spark_conf)
    warehouse = f"{store.root}/backfilled"
    path = settings(
        store.base / "backfilled.yaml",
        store.root,
        warehouse,
        store.server.endpoint,
        backfill={"days_per_chunk": 1},
    )
    days = ["--start", str(DAYS[1]), "--end", str(NIGHT)]
    assert main(["backfill", "--config", str(path), *days]) == 0
    return tables(s3_spark, warehouse)


def assert_reference(spark: SparkSession, data: Path, warehouse: str) -> None:
    """The daily table's and the per-query table's rows of every day it holds, against the
    pure-Python reference over the generated logs."""
    logs = ds.dataset(data / "served_logs", format="parquet", partitioning="hive")
    rows = logs.to_table(columns=["request_id", "served_at", "results", "date"]).to_pylist()
    for row in rows:
        row["date"] = dt.date.fromisoformat(str(row["date"]))
    table = ds.dataset(data / "clusters_parquet", format="parquet").to_table().to_pylist()
    clusters = [(r["chunk_id"], r["cluster_id"]) for r in table]
    daily = spark.read.format("delta").load(f"{warehouse}/unique_clusters_daily")
    got = {(r.metric_date, r.k): r.asDict() for r in daily.where(daily.segment == "all").collect()}
    days = sorted({day for day, _ in got})
    expected = reference.daily(rows, clusters, KS, THRESHOLD, days[0], days[-1])
    assert len(got) == len(expected) == len(days) * len(KS)
    for want in expected:
        assert reference.mismatched(got[(want["metric_date"], want["k"])], want) == {}, want
    by_query = spark.read.format("delta").load(f"{warehouse}/unique_clusters_by_query").collect()
    published = sorted(
        (r.metric_date, r.request_id, r.k, r.unique_clusters, r.results) for r in by_query
    )
    want_rows = reference.by_query(rows, clusters, KS, days[0], days[-1])
    assert published == sorted(
        (w["metric_date"], w["request_id"], w["k"], w["unique_clusters"], w["results"])
        for w in want_rows
    )


@dataclass
class Faulted:
    """What a run through a fault left: its exit status, what it said, the launcher's events,
    when the fault began and the process ended, and its processes."""

    status: int | None  # None: it did not end within its bound, and was killed
    stdout: str
    stderr: str
    events: list[str]
    seconds: float  # from the fault's start to the process's end
    children: list[psutil.Process] = field(default_factory=list)
    outlived: list[psutil.Process] = field(default_factory=list)  # alive 30 s after it ended
    log: str = ""  # the run's log file

    def said(self) -> str:
        return f"status {self.status} after {self.seconds:.0f} s\n{self.stderr[-3000:]}"


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run_through(
    argv: list[str],
    point: str,
    fault: Callable[[list[str]], Callable[[], None]],
    window: float | None,
    bound: float,
    cwd: Path,
    go_after_window: bool = False,
) -> Faulted:
    """`logmetrics argv` in a process of its own (tests/faulted_run.py) that stops at `point`;
    there `fault(events)` (the launcher's lines so far) breaks the store and returns what
    heals it, called `window` seconds later (on a timer; None: once the run has ended); the
    run goes on at once (or, `go_after_window`, once the store is healed). The process is
    killed if it has not ended `bound` seconds after the fault began (`status` None: a
    hang)."""
    said, told = os.pipe()
    heard, hear = os.pipe()
    out, err = cwd / "faulted.out", cwd / "faulted.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(LAUNCHER), point, str(told), str(heard), *argv],
            cwd=cwd,
            stdout=stdout,
            stderr=stderr,
            pass_fds=(told, heard),
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    os.close(told)
    os.close(heard)
    events: list[str] = []
    children: list[psutil.Process] = []
    began: float | None = None
    healer: threading.Timer | None = None
    heal: Callable[[], None] = _nothing
    hung = threading.Event()
    start_watch = threading.Timer(900, _kill_group, [process, hung])  # the point never reached
    start_watch.start()
    watch: threading.Timer | None = None
    try:
        with os.fdopen(said) as lines:
            for line in lines:
                events.append(line.rstrip("\n"))
                if not line.startswith("at "):
                    continue
                children = psutil.Process(process.pid).children(recursive=True)
                heal = fault(events)
                began = time.monotonic()
                start_watch.cancel()
                watch = threading.Timer(bound, _kill_group, [process, hung])
                watch.start()
                if window is not None and go_after_window:
                    time.sleep(window)
                    heal()
                elif window is not None:
                    healer = threading.Timer(window, heal)
                    healer.start()
                os.write(hear, b"g")
        status = process.wait(timeout=60)
        ended = time.monotonic()
    except BaseException:
        _kill_group(process, threading.Event())  # no run left behind a failed test
        raise
    finally:
        os.close(hear)
        start_watch.cancel()
        if watch is not None:
            watch.cancel()
        if healer is not None:
            healer.join()  # the store is healthy again for what follows
        elif window is None:
            heal()
    seconds = ended - began if began is not None else float("nan")
    psutil.wait_procs(children, timeout=30)
    logs = sorted((cwd / "logs").glob("*.log"))
    return Faulted(
        None if hung.is_set() else status,
        out.read_text(),
        err.read_text(),
        events,
        seconds,
        children,
        [c for c in children if _alive(c)],
        "\n".join(p.read_text() for p in logs if not p.name.startswith("spark-")),
    )


def _nothing() -> None:
    pass


def _kill_group(process: subprocess.Popen[bytes], hung: threading.Event) -> None:
    if process.poll() is None:
        hung.set()
        os.killpg(process.pid, 9)


def lease_held(warehouse: str) -> bool:
    lease = storage.place(f"{warehouse}/{LEASE_FILE}")
    assert lease is not None
    return lease.exists()


def assert_ended_cleanly(run: Faulted, warehouse: str) -> None:
    """Ended by itself (no hang), its JVM with it; published (0), or one line naming the
    store, the path and what failed (1); no traceback; the writer lease released."""
    assert run.status is not None, f"no end within its bound: {run.said()}"
    assert run.status in (0, 1), run.said()
    assert not TRACEBACK.search(run.stdout + run.stderr), run.said()
    if run.status == 1:
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1, run.said()
        assert lines[0].startswith("logmetrics: error: "), run.said()
        assert "s3a://" in lines[0] or "S3" in lines[0], run.said()
    assert run.children, "no JVM seen at the point"
    assert not run.outlived, f"the JVM outlived the run: {run.outlived}"
    assert not lease_held(warehouse), "the writer lease was left held"


def assert_next_run_exact(
    spark: SparkSession, store: Store, config: list[str], warehouse: str
) -> None:
    """The next run, right away on the healthy store, publishes the night: every day table as
    the uninterrupted run left it (no row twice, none missing, none from the faulted run
    left), and the ledger's last word on the night `published`."""
    assert main(["run", *config, "--date", str(NIGHT)]) == 0
    assert tables(spark, warehouse) == store.uninterrupted
    assert ledger(spark, warehouse)[-1].status == "published"


def run_log_json(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture
def warehouse(store: Store, request: pytest.FixtureRequest) -> Iterator[str]:
    """A copy of `before` under a prefix of the test's own."""
    storage.configure(store.server.spark_conf)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:50]
    target = f"{store.root}/{name}-{os.urandom(2).hex()}"
    copy(store.before, target)
    yield target


POINTS = ["reading-logs", "main-pass", "table-commit", "ledger-append", "lease-renewal"]
"""Where a nightly meets the fault (tests/faulted_run.py)."""


def points(*per_change: str) -> list[Any]:
    """POINTS as a test's parameters, those not in `per_change` marked `exhaustive`: `.ci/run`
    meets each fault at the points named, `make test-release` at every point. The points
    named cover what each client of the store does with each fault once: the direct reads
    (pyarrow: `reading-logs`) with every fault, since each is told apart there (a stall by
    its timeout, an outage by a refused connection, a 503 by its code, a reset); S3A in the
    main pass and in Delta's commits; the lease's conditional writes, whose lost answers
    (a reset, a stall) may have landed; every point met by some fault."""
    unknown = set(per_change) - set(POINTS)
    assert not unknown, unknown
    return [
        point if point in per_change else pytest.param(point, marks=pytest.mark.exhaustive)
        for point in POINTS
    ]


SLACK = 300.0
"""What a faulted run may take, past the fault's own length and its S3 patience, for the rest
of its work (a nightly on this data under the suite's load); a run not ended by then hangs."""
PATIENCE = 190.0
"""The longest S3A and the direct reads keep trying a store that refuses, resets or throttles
every request (docs/config.md, "Object storage": seven tries, back-off doubling from 2 s with
a random factor of 0.5 to 1.5, at most 189 s)."""


@dataclass
class Scenario:
    """A fault: where the faulted run reaches the store, and how the store is broken
    (`fault()`, which returns what heals it)."""

    name: str
    endpoint: str
    fault: Callable[[float | None], Callable[[], None]]  # the window: what heals it
    met: Callable[[], bool] = lambda: True  # whether the store's clients met the fault
    cleanup: Callable[[], None] = lambda: None


@pytest.fixture(scope="session")
def toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from storage_faults import Toxiproxy

    proxy = Toxiproxy(tmp_path_factory.mktemp("toxiproxy") / "toxiproxy.log")
    yield proxy
    proxy.stop()


FIGURES: list[dict[str, Any]] = []


def record(scenario: str, point: str, window: float | None, run: Faulted) -> None:
    """A faulted run's outcome and duration, printed (`pytest -rP` shows them: the figures of
    docs/config.md's table of faults)."""
    figure = {
        "fault": scenario,
        "point": point,
        "window_s": window,
        "status": run.status,
        "seconds_from_fault_to_exit": round(run.seconds, 1),
    }
    FIGURES.append(figure)
    print("fault figure:", json.dumps(figure))


def check_nightly_rides_out(
    spark: SparkSession,
    store: Store,
    warehouse: str,
    tmp_path: Path,
    scenario: Scenario,
    point: str,
    window: float,
) -> Faulted:
    """The nightly meets `scenario`'s fault at `point` for `window` seconds: it ends by itself
    (within the fault, its patience and SLACK), cleanly (`assert_ended_cleanly`), having
    ridden the fault out: published, every table as the uninterrupted nightly left it, no row
    twice; the fault was met (the run ended after it, or its renewals met it); the next run,
    right away, leaves the tables so."""
    config = settings(tmp_path / "faulted.yaml", store.root, warehouse, scenario.endpoint)
    argv = ["run", "--config", str(config), "--date", str(NIGHT)]
    renewal = point == "lease-renewal"
    run = run_through(
        argv,
        point,
        lambda events: scenario.fault(window),
        window,
        window + PATIENCE + SLACK,
        tmp_path,
        renewal,
    )
    record(scenario.name, point, window, run)
    assert_ended_cleanly(run, warehouse)
    assert run.status == 0, run.said()
    if renewal:
        renewals = [e for e in run.events if e.startswith(("renewed", "renewal failed"))]
        at = run.events.index(f"at {point}")
        assert any(e in renewals for e in run.events[at:]), run.events
    else:
        assert run.seconds >= window, f"the run did not meet the fault: {run.said()}"
    assert scenario.met(), "the store's clients never met the fault"
    assert tables(spark, warehouse) == store.uninterrupted
    next_config = settings(tmp_path / "next.yaml", store.root, warehouse, store.server.endpoint)
    storage.configure(store.server.spark_conf)
    assert_next_run_exact(spark, store, ["--config", str(next_config)], warehouse)
    return run
