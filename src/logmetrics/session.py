"""The one place a SparkSession is built (local Spark + Delta jars) or picked up (cluster).

- An active session (Databricks, a notebook, the test suite) is used as it is.
- Under `spark-submit` or Spark Connect (`SPARK_REMOTE`) the session the platform configures is
  used; logmetrics adds no packages there (the cluster ships Delta the standard way).
- Otherwise logmetrics starts local Spark with Delta's jars, resolved by Ivy from Maven Central.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from importlib.resources import files
from pathlib import Path

from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from logmetrics.config import SparkConfig
from logmetrics.errors import LogmetricsError

log = logging.getLogger(__name__)

# The Delta jar and the delta-spark Python package are a pair: constraints.txt pins
# delta-spark==DELTA_VERSION and tests/test_session.py checks that they match.
DELTA_VERSION = "4.3.1"
SPARK_MAJOR_MINOR = "4.1"
DELTA_PACKAGE = f"io.delta:delta-spark_{SPARK_MAJOR_MINOR}_2.13:{DELTA_VERSION}"

# Delta's pom pulls in jars that Spark already ships (older versions of them). Excluding them
# keeps one copy of each class on the classpath and the first download small.
SPARK_PROVIDED_ARTIFACTS = (
    "com.fasterxml.jackson.core:jackson-annotations",
    "com.fasterxml.jackson.core:jackson-core",
    "com.fasterxml.jackson.core:jackson-databind",
    "com.github.luben:zstd-jni",
    "com.google.code.findbugs:jsr305",
    "commons-pool:commons-pool",
    "io.airlift:aircompressor",
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.logging.log4j:log4j-api",
    "org.apache.logging.log4j:log4j-core",
    "org.apache.logging.log4j:log4j-slf4j2-impl",
    "org.apache.parquet:parquet-column",
    "org.apache.parquet:parquet-common",
    "org.apache.parquet:parquet-encoding",
    "org.apache.parquet:parquet-format-structures",
    "org.apache.parquet:parquet-hadoop",
    "org.apache.parquet:parquet-jackson",
    "org.roaringbitmap:RoaringBitmap",
    "org.slf4j:slf4j-api",
    "org.xerial.snappy:snappy-java",
)

# Settings every session gets, local or not: metric_date is the UTC date of served_at.
RUNTIME_CONF = {"spark.sql.session.timeZone": "UTC"}


def local_conf(settings: SparkConfig) -> dict[str, str]:
    """Spark settings for a local session with Delta; `settings.conf` wins over the defaults."""
    conf = {
        "spark.master": settings.master,
        "spark.driver.memory": settings.driver_memory,
        "spark.jars.packages": DELTA_PACKAGE,
        "spark.jars.excludes": ",".join(SPARK_PROVIDED_ARTIFACTS),
        "spark.jars.ivySettings": str(files("logmetrics").joinpath("ivysettings.xml")),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.adaptive.enabled": "true",
        # Small Delta logs: rebuilding a snapshot over the default 50 partitions is pure overhead.
        "spark.databricks.delta.snapshotPartitions": "2",
    }
    conf.update(settings.conf)
    conf.update(RUNTIME_CONF)  # not overridable: metric_date is the UTC date of served_at
    return conf


def is_managed_environment() -> bool:
    """True under spark-submit, Databricks or Spark Connect: the platform owns the session."""
    return bool(
        os.environ.get("SPARK_REMOTE")
        or os.environ.get("PYSPARK_GATEWAY_PORT")  # set by spark-submit's PythonRunner
        or os.environ.get("DATABRICKS_RUNTIME_VERSION")
    )


def get_spark(settings: SparkConfig, app_name: str = "logmetrics") -> SparkSession:
    """Return the process's one SparkSession, starting local Spark with Delta if there is none."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return configure_runtime(active)
    if is_managed_environment():
        log.info("using the platform's Spark session (no packages added)")
        return configure_runtime(SparkSession.builder.appName(app_name).getOrCreate())

    builder = SparkSession.builder.appName(app_name)
    for key, value in local_conf(settings).items():
        builder = builder.config(key, value)
    log.info("starting local Spark (%s) with %s", settings.master, DELTA_PACKAGE)
    with _jvm_output_to(settings.log_dir) as log_file:
        try:
            return builder.getOrCreate()
        except PySparkRuntimeError as exc:
            where = f"; its log: {log_file}" if log_file else ""
            reason = exc.getCondition()
            raise LogmetricsError(f"local Spark did not start ({reason}){where}") from None


def configure_runtime(spark: SparkSession, conf: Mapping[str, str] = RUNTIME_CONF) -> SparkSession:
    for key, value in conf.items():
        spark.conf.set(key, value)
    return spark


@contextlib.contextmanager
def _jvm_output_to(log_dir: str | None) -> Iterator[Path | None]:
    """Send the JVM's stdout/stderr (Ivy's report, log4j) to a file instead of the terminal.

    The JVM inherits file descriptors 1 and 2 when it is launched, so pointing them at a log
    file for the duration of the launch keeps Java stack traces and Ivy noise off the screen
    for the life of the process, while Python's own output is restored right after.
    """
    if not log_dir:
        yield None
        return
    path = Path(log_dir)
    path.mkdir(parents=True, exist_ok=True)
    log_file = path / f"spark-{os.getpid()}.log"
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_file, "ab") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
    try:
        yield log_file
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    log.info("Spark's own log: %s", log_file)
