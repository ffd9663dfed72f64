"""The one place a SparkSession is built (local Spark + Delta jars) or picked up (cluster).

- An active session (Databricks, a notebook, the test suite) is used as it is.
- Under `spark-submit` or Spark Connect (`SPARK_REMOTE`) the session the platform configures is
  used; logmetrics adds no packages there (the cluster ships Delta the standard way). A
  `SPARK_REMOTE` where nothing listens is one clear error, not minutes of gRPC retries.
- Otherwise logmetrics starts local Spark with Delta's jars, resolved by Ivy from Maven Central.

`python -m logmetrics.session` prints Delta's settings in spark-defaults format: what
`make cluster-up` writes for spark-submit and the Connect server, so the Delta pin stays here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from collections.abc import Iterator, Mapping
from importlib.resources import files
from pathlib import Path
from urllib.parse import urlsplit

from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from logmetrics.config import SparkConfig
from logmetrics.errors import LogmetricsError
from logmetrics.redaction import redact_url

log = logging.getLogger(__name__)

# The Delta jar and the delta-spark Python package are a pair: constraints.txt pins
# delta-spark==DELTA_VERSION and tests/test_session.py checks that they match.
DELTA_VERSION = "4.3.1"
SPARK_MAJOR_MINOR = "4.1"
DELTA_PACKAGE = f"io.delta:delta-spark_{SPARK_MAJOR_MINOR}_2.13:{DELTA_VERSION}"

CONNECT_DEFAULT_PORT = 15002

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


def delta_conf() -> dict[str, str]:
    """Delta's jars (resolved by Ivy from Maven Central) and its SQL extension and catalog: the
    same for local Spark, a spark-submit to a cluster and a Spark Connect server."""
    return {
        "spark.jars.packages": DELTA_PACKAGE,
        "spark.jars.excludes": ",".join(SPARK_PROVIDED_ARTIFACTS),
        "spark.jars.ivySettings": str(files("logmetrics").joinpath("ivysettings.xml")),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }


SHORT_RUN_DAYS = 3
"""Up to this many days, `spark.profile: auto` starts the JVM for a short run."""

# A short run (a nightly day) is dominated by start-up: thousands of classes loaded once and a
# few dozen small Spark jobs. The quick JIT compiler alone (C1) and the serial collector cut
# the JVM's CPU by about a third there, and adaptive execution only re-plans tiny queries; a
# long backfill runs hot loops over millions of rows, where the optimizing compiler (C2) pays.
PROFILES = {
    "short": {
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC -XX:TieredStopAtLevel=1 "
        "-XX:+UseSerialGC",
        "spark.sql.adaptive.enabled": "false",
    },
    "long": {
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.sql.adaptive.enabled": "true",
    },
}
"""Per profile, settings a local session starts with. -Duser.timezone=UTC in both: Delta
rebuilds a table's whole state on every commit in a JVM whose default time zone is not UTC
(to verify its checksum), and the session's time zone is UTC anyway."""


def profile_for(settings: SparkConfig, days: int | None = None) -> str:
    """`settings.profile`, `auto` resolved by the number of days the run covers (None: a
    command that computes no day, such as report or maintain: short)."""
    if settings.profile != "auto":
        return settings.profile
    return "short" if days is None or days <= SHORT_RUN_DAYS else "long"


def local_conf(settings: SparkConfig, days: int | None = None) -> dict[str, str]:
    """Spark settings for a local session with Delta; `settings.conf` wins over the defaults.
    `days`: how many days the run covers, for `spark.profile: auto`."""
    conf = {
        "spark.master": settings.master,
        "spark.driver.memory": settings.driver_memory,
        **delta_conf(),
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "8",
        **PROFILES[profile_for(settings, days)],
        # Small Delta logs: rebuilding a snapshot over the default 50 partitions is pure overhead.
        "spark.databricks.delta.snapshotPartitions": "2",
        # The per-request frame is cached once and scanned by every table of a chunk: on one
        # machine the CPU to compress and decompress it costs more than the memory it saves.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
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


def get_spark(
    settings: SparkConfig, app_name: str = "logmetrics", days: int | None = None
) -> SparkSession:
    """Return the process's one SparkSession, starting local Spark with Delta if there is none
    (`days`: how many days the run covers, for `spark.profile: auto`)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return configure_runtime(active)
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        check_remote_reachable(remote)
        log.info("using the Spark Connect server at %s", redact_url(remote))
    if is_managed_environment():
        log.info("using the platform's Spark session (no packages added)")
        return configure_runtime(SparkSession.builder.appName(app_name).getOrCreate())

    builder = SparkSession.builder.appName(app_name)
    for key, value in local_conf(settings, days).items():
        builder = builder.config(key, value)
    log.info("starting local Spark (%s) with %s", redact_url(settings.master), DELTA_PACKAGE)
    with _jvm_output_to(settings.log_dir) as log_file:
        try:
            return builder.getOrCreate()
        except PySparkRuntimeError as exc:
            where = f"; its log: {log_file}" if log_file else ""
            reason = exc.getCondition()
            raise LogmetricsError(f"local Spark did not start ({reason}){where}") from None


def check_remote_reachable(remote: str, timeout: float = 5.0) -> None:
    """Fail in one line when nothing listens at an `sc://host:port` SPARK_REMOTE: the Connect
    client would otherwise retry for minutes before it gives up."""
    if not remote.startswith("sc://"):
        return  # e.g. SPARK_REMOTE=local: pyspark starts its own server
    shown = redact_url(remote)  # a Databricks SPARK_REMOTE carries ;token=...
    parts = urlsplit(remote.split(";", 1)[0])
    try:
        host, port = parts.hostname, parts.port or CONNECT_DEFAULT_PORT
    except ValueError:
        raise LogmetricsError(f"SPARK_REMOTE={shown!r} is not sc://host:port") from None
    if not host:
        raise LogmetricsError(f"SPARK_REMOTE={shown!r} is not sc://host:port")
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise LogmetricsError(
            f"no Spark Connect server at SPARK_REMOTE={shown} ({exc.strerror or exc}): start one "
            "(`make cluster-up`) or unset SPARK_REMOTE"
        ) from None


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


def spark_properties(conf: Mapping[str, str]) -> str:
    """`conf` in spark-defaults format, for `spark-submit --properties-file`."""
    return "".join(f"{key} {value}\n" for key, value in conf.items())


if __name__ == "__main__":
    sys.stdout.write(spark_properties(delta_conf()))
