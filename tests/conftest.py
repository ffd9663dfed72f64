"""One local SparkSession for the whole suite, never stopped (its settings, tuned for speed on
2 cores: tests/suite_session.py); the modules' order and the tests that need an option."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from benchmarks import s3_server
from pyspark.sql import SparkSession

from logmetrics import storage
from logmetrics.config import SparkConfig
from logmetrics.session import local_conf, resolve_lock
from suite_session import ACCELERATOR, INTERPRETED, TEST_CONF


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-cluster",
        action="store_true",
        help="run the tests marked `cluster` (they start a local Spark cluster: make test-cluster)",
    )
    parser.addoption(
        "--run-wheel",
        action="store_true",
        help="run the tests marked `wheel` (they build a runtime venv: make test-compat)",
    )


# `make test` runs the suite on pytest-xdist workers, one module at a time each (--dist
# loadfile: a module's fixtures are built once). Handing out the longest modules first lets the
# workers finish together. xdist would reorder the modules by their number of tests instead
# (its default): the Makefile turns that off with --no-loadscope-reorder. The order is the
# modules' total time in a `make test` of 2026-12-06 (setup included, three workers, platform
# floor 20 s that hour); the guarantees' modules (`make test-guarantees`) by their own runs.
LONGEST_FIRST = (
    "test_wheel.py",  # make test-compat: a Spark 4.0 venv
    "test_hive_metastore.py",  # make test-release: four JVMs one after another
    "test_object_storage_runs.py",  # make test-guarantees: about 8 minutes of runs on S3 first
    "test_readme.py",  # make test-guarantees (on Comet): the demo (600,000 rows), its commands
    "test_end_to_end.py",  # make test-guarantees (on Comet): 466 s on plain Spark
    "test_living_inputs.py",  # 597 s
    "test_nightly_commits.py",  # make test-guarantees (reliability): a nightly's kill points
    "test_stall.py",  # make test-guarantees (faults): four faulted nightlies, 35-45 s stalls
    "test_resets.py",  # make test-guarantees (faults): three faulted nightlies
    "test_vanish.py",  # make test-guarantees (faults): two faulted nightlies, a backfill
    "test_properties.py",  # make test-guarantees (on Comet): 290 s on plain Spark
    "test_log_shapes.py",  # 253 s: a property test and three shapes end to end
    "test_cli_process.py",  # 249 s: processes; its broadcast too large in make test-guarantees
    "test_reliability.py",  # 232 s
    "test_alerts_end_to_end.py",  # make test-guarantees (on Comet): 148 s on plain Spark
    "test_hostile.py",  # make test-guarantees (on Comet): 196 s on plain Spark
    "test_gate_policy.py",  # 194 s
    "test_orchestration.py",  # about 150 s; its kills and races in make test-guarantees
    "test_outlasted.py",  # make test-guarantees (faults): a store gone for good, a late commit
    "test_slow_down.py",  # make test-guarantees (faults): two faulted nightlies
    "test_stopping.py",  # make test: two processes; make test-guarantees: five, each resumed
    "test_held_days.py",  # make test-guarantees (reliability): four backfills
    "test_evaluation.py",  # 126 s
    "test_restatements.py",  # 118 s
    "test_report.py",  # 109 s
    "test_operator_view.py",  # 98 s
    "test_append_writes.py",  # 69 s
    "test_sql_views.py",  # 53 s
    "test_keys.py",  # 46 s
    "test_per_request.py",  # 40 s
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest modules first (a stable sort: the order within a module is kept); tests
    marked `cluster` or `wheel` are skipped, saying how to run them, unless --run-cluster or
    --run-wheel."""

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)
    skips = {
        "cluster": ("--run-cluster", "starts a Spark standalone cluster: run `make test-cluster`"),
        "wheel": ("--run-wheel", "builds a Spark 4.0 runtime venv: run `make test-compat`"),
    }
    for marker, (option, reason) in skips.items():
        if config.getoption(option):
            continue
        for item in items:
            if marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


# Spark hands timestamps back as naive datetimes in the process's time zone: make that UTC.
os.environ["TZ"] = "UTC"
time.tzset()
os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    settings = SparkConfig(
        master="local[2]",
        driver_memory="2g",
        log_dir=None,
        accelerator=ACCELERATOR,
        conf=TEST_CONF,
    )
    builder = SparkSession.builder.appName("logmetrics-tests")
    conf = {**local_conf(settings, s3=True), "spark.sql.warehouse.dir": str(warehouse)}
    for key, value in conf.items():
        builder = builder.config(key, value)
    with resolve_lock():  # the other xdist worker may be resolving the jars too
        session = builder.getOrCreate()
    yield session
    session.stop()


@pytest.fixture(scope="module")
def compiled(spark: SparkSession) -> Iterator[None]:
    """Generated code on in the suite's session for a module whose runs are large, then the
    suite's setting back (`suite_session.INTERPRETED`: off, as compiling costs more than it
    saves on a few hundred rows). tests/test_readme.py's demo and the README's commands after
    it (600,000 served rows) took 0.78 of their interpreted time with it, alone on one worker
    (179 / 228 s and 161 / 207 s, alternating, 2026-12-06). Not tests/test_alerts_end_to_end.py
    (45,000 requests: a 24-day backfill, then a nightly): 1.07 and 1.05 of its time compiled."""
    before = {key: spark.conf.get(key) for key in INTERPRETED}
    for key in INTERPRETED:
        spark.conf.unset(key)
    yield
    for key, value in before.items():
        spark.conf.set(key, value)


@pytest.fixture(scope="session", autouse=True)
def _run_logs_in_a_temp_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The run log file of every command a test runs in this process goes to a temp dir, not
    to the checkout's logs/."""
    from logmetrics.cli import logs

    logs._LOG_ROOT = tmp_path_factory.mktemp("run-logs")


# The worker's S3 server, started in the background once the collected tests hold one that
# needs it: SeaweedFS takes about 11 s to take its first object (its filer waits out its peers'
# bootstrap), time the worker spends on its first tests instead of waiting.
_S3_STARTING: Future[s3_server.S3Server] | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    global _S3_STARTING
    if any("s3_server_running" in getattr(item, "fixturenames", ()) for item in session.items):
        data = Path(tempfile.mkdtemp(prefix="s3-server-"))
        _S3_STARTING = ThreadPoolExecutor(1, "s3-server").submit(s3_server.start, data)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The background server stopped (if no test took it: `s3_server_running` stops its own),
    its data removed."""
    if _S3_STARTING is None or _S3_STARTING.cancel():
        return
    with contextlib.suppress(Exception):
        server = _S3_STARTING.result()
        server.stop()
        shutil.rmtree(server.log.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server_running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3_server.S3Server]:
    """A real S3 server (SeaweedFS, benchmarks/s3_server.py) for the worker's tests, its keys
    in this process's environment (the standard credential chain reads them: pyarrow here,
    and the processes tests start): the one started in the background at collection, if it
    started."""
    started = None
    if _S3_STARTING is not None:
        with contextlib.suppress(Exception):  # it failed to start: start it here, and say why
            started = _S3_STARTING.result()
    if started is None:
        started = s3_server.start(tmp_path_factory.mktemp("s3-server"))
    with s3_server.serving(started) as server:
        storage.configure({})  # the file systems made from now on take the server's keys
        yield server
    storage.configure({})


@pytest.fixture
def s3(s3_server_running: s3_server.S3Server, request: pytest.FixtureRequest) -> Iterator[str]:
    """`s3a://logmetrics/<the test's own prefix>` on the real server, with `storage`
    configured for it (as a command's config would)."""
    storage.configure(s3_server_running.spark_conf)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:60]
    yield f"s3a://{s3_server_running.bucket('logmetrics')}/{name}-{os.urandom(3).hex()}"
    storage.configure({})


@pytest.fixture(scope="session")
def s3_spark(spark: SparkSession, s3_server_running: s3_server.S3Server) -> SparkSession:
    """The suite's session reaching the real S3 server through S3A: the endpoint in its Hadoop
    configuration, and the keys too (S3A's own static provider: the JVM's environment, which
    the standard chain reads, was fixed when it started, before the server was)."""
    conf = spark._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    for key, value in s3_server_running.spark_conf.items():
        conf.set(key.removeprefix("spark.hadoop."), value)
    conf.set(
        "fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    )
    conf.set("fs.s3a.access.key", s3_server_running.access_key)
    conf.set("fs.s3a.secret.key", s3_server_running.secret_key)
    return spark
