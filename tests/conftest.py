"""One local SparkSession for the whole suite, tuned for speed on 2 cores, never stopped."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from logmetrics.config import SparkConfig
from logmetrics.session import local_conf

# Measured on a 2-core machine: one task thread, one shuffle partition and a JVM that skips the
# C2 compiler make the suite about 2.4x faster than Spark's defaults.
TEST_CONF = {
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.rdd.compress": "false",
    "spark.shuffle.compress": "false",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-cluster",
        action="store_true",
        help="run the tests marked `cluster` (they start a local Spark cluster: make test-cluster)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `cluster` are skipped, saying how to run them, unless --run-cluster."""
    if config.getoption("--run-cluster"):
        return
    skip = pytest.mark.skip(reason="starts a Spark standalone cluster: run `make test-cluster`")
    for item in items:
        if "cluster" in item.keywords:
            item.add_marker(skip)


# Spark hands timestamps back as naive datetimes in the process's time zone: make that UTC.
os.environ["TZ"] = "UTC"
time.tzset()
os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    settings = SparkConfig(master="local[1]", driver_memory="2g", log_dir=None, conf=TEST_CONF)
    builder = SparkSession.builder.appName("logmetrics-tests")
    for key, value in {**local_conf(settings), "spark.sql.warehouse.dir": str(warehouse)}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()
