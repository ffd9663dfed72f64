"""One local SparkSession for the whole suite, tuned for speed on 2 cores, never stopped."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from class_archive import OPTIONS as CLASS_ARCHIVE
from logmetrics.config import SparkConfig
from logmetrics.session import PROFILES, local_conf, resolve_lock

# Measured on a 2-core machine: one shuffle partition makes the suite about 2.4x faster than
# Spark's defaults. Two task threads let a chunk's concurrent Delta writes overlap.
TEST_CONF = {
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC -XX:+UseSerialGC",
    "spark.rdd.compress": "false",
    "spark.shuffle.compress": "false",
    # Test-only: no checksum file and no per-file statistics at each Delta commit (the suite's
    # tables are a few rows; measured 4% off the two end-to-end modules, 2 alternating rounds).
    "spark.databricks.delta.writeChecksumFile.enabled": "false",
    "spark.databricks.delta.stats.collect": "false",
}

# The JIT compilers, under `make test`: three xdist worker JVMs on 2 cores keep every core busy
# (vmstat: 0% idle for the whole run), and 15 minutes in, the compiler threads had taken 29-33%
# of each worker JVM's CPU (C2 about 24%, C1 the rest). The quick compiler alone (the `short`
# profile's options: -XX:TieredStopAtLevel=1), as under xdist below: seven modules (hostile,
# reliability, gate_policy, alerts_end_to_end, evaluation, report, cli_process) on three
# workers in 471 and 495 s against 580 and 586 s with the tiered default (2 alternating rounds,
# 2026-12-02, platform floor 19 s that hour: 0.83); the whole suite 20:29 against 22:44 (0.90,
# one pair, the same afternoon). A single process
# (`make test-fast`) keeps the tiered default: there C2 compiles on the core its one task
# leaves free, and a warm backfill ran 5-25% faster with it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    TEST_CONF["spark.driver.extraJavaOptions"] = PROFILES["short"]["spark.driver.extraJavaOptions"]

# The classes every JVM of the suite loads, from the archive `make test` builds once
# (tests/class_archive.py); without it (a bare `pytest`), the JVM reads them from the jars.
TEST_CONF["spark.driver.extraJavaOptions"] += f" {CLASS_ARCHIVE}"

# Test-only: the suite's inputs are a few hundred rows, on which compiling generated code
# (whole-stage and each expression's) costs more than it saves: a warm 4-day in-process backfill
# took 13-16 s interpreted against 16-18 s compiled, with 22% less JVM CPU (2 alternating rounds,
# 2026-12-02). The results are Spark's either way; `make test-compat` runs the reference tests
# again with code generation on (LOGMETRICS_TEST_CODEGEN=on), the engine's production path.
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
if os.environ.get("LOGMETRICS_TEST_CODEGEN", "off") != "on":
    TEST_CONF.update(INTERPRETED)


# The suite's session runs on logmetrics' default engine (Comet where it loads); `make
# test-compat` runs the reference-equality modules once more with LOGMETRICS_TEST_ACCELERATOR=none
# (and LOGMETRICS_TEST_CODEGEN=on), so that the outputs are checked with and without Comet.
ACCELERATOR = os.environ.get("LOGMETRICS_TEST_ACCELERATOR", "comet")


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
# modules' total time in a `make test` of 2026-12-02 (pytest --junitxml, setup included).
LONGEST_FIRST = (
    "test_wheel.py",  # make test-compat: a Spark 4.0 venv
    "test_hive_metastore.py",  # make test-compat: four JVMs one after another
    "test_orchestration.py",  # 656 s
    "test_end_to_end.py",  # 440 s
    "test_living_inputs.py",  # 361 s
    "test_hostile.py",  # 126 s
    "test_alerts_end_to_end.py",  # 112 s
    "test_properties.py",  # 106 s
    "test_reliability.py",  # 98 s
    "test_gate_policy.py",  # 88 s
    "test_evaluation.py",  # 83 s
    "test_report.py",  # 51 s
    "test_cli_process.py",  # 44 s
    "test_per_request.py",  # 20 s
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
    for key, value in {**local_conf(settings), "spark.sql.warehouse.dir": str(warehouse)}.items():
        builder = builder.config(key, value)
    with resolve_lock():  # the other xdist worker may be resolving the jars too
        session = builder.getOrCreate()
    yield session
    session.stop()
