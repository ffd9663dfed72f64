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

import atexit
import contextlib
import fcntl
import logging
import os
import re
import shlex
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files
from pathlib import Path
from urllib.parse import urlsplit

import pyspark
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from logmetrics.config import SparkConfig
from logmetrics.console import say
from logmetrics.errors import LogmetricsError
from logmetrics.redaction import redact_url

log = logging.getLogger(__name__)

# The default Spark line, as constraints.txt pins it: the jar docs/cluster.md and the
# Airflow DAG name for spark-submit (tests/deploy/test_dags.py reads DELTA_PACKAGE here).
# A local session does not use these: it takes Delta's jar from the installed pair
# (`installed_delta_package`), so the other supported line (constraints-spark40.txt) gets its
# own; tests/test_session.py checks that on this line the two are the same.
DELTA_VERSION = "4.3.1"
SPARK_MAJOR_MINOR = "4.1"
DELTA_PACKAGE = f"io.delta:delta-spark_{SPARK_MAJOR_MINOR}_2.13:{DELTA_VERSION}"

SPARK_LINE = ".".join(pyspark.__version__.split(".")[:2])
"""The installed pyspark's major.minor: the Spark line Delta's and Comet's jars must be built
for. The one place the code switches on the Spark version."""


def delta_package(delta_version: str, spark_line: str = SPARK_LINE) -> str:
    """Delta's jar for delta-spark `delta_version` on `spark_line`. From Delta 4.1 on there is
    a jar per Spark line (`delta-spark_4.1_2.13`); Delta 4.0.x has one, for Spark 4.0 only
    (`delta-spark_2.13`)."""
    release = tuple(int(part) for part in delta_version.split(".")[:2])
    if release >= (4, 1):
        return f"io.delta:delta-spark_{spark_line}_2.13:{delta_version}"
    if spark_line != "4.0":
        raise LogmetricsError(
            f"delta-spark {delta_version} is built for Spark 4.0, not the installed {spark_line}"
            " (constraints.txt and constraints-spark40.txt pin pairs that match)"
        )
    return f"io.delta:delta-spark_2.13:{delta_version}"


def installed_delta_package() -> str:
    """Delta's jar for the installed delta-spark Python package and pyspark: the two are a
    pair. Local Spark needs them (the `local` extra); on a cluster the runtime ships Delta."""
    try:
        installed = version("delta-spark")
    except PackageNotFoundError:
        raise LogmetricsError(
            "local Spark needs delta-spark and pyspark: install logmetrics[local] (on a "
            "cluster, run under spark-submit or Databricks, whose session ships Delta)"
        ) from None
    return delta_package(installed)


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
        "spark.jars.packages": installed_delta_package(),
        "spark.jars.excludes": ",".join(SPARK_PROVIDED_ARTIFACTS),
        "spark.jars.ivySettings": str(files("logmetrics").joinpath("ivysettings.xml")),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }


COMET_VERSION = "1.2.0"
COMET_SPARK_LINES = ("4.1",)
"""The Spark lines Maven Central has Comet COMET_VERSION's jar for, of those logmetrics runs on
(there is no comet-spark-spark4.0_2.13:1.2.0): on another line Comet is off, with a warning."""
COMET_PACKAGE = f"org.apache.datafusion:comet-spark-spark{SPARK_LINE}_2.13:{COMET_VERSION}"
COMET_PLATFORMS = {("linux", "x86_64"), ("linux", "aarch64")}
"""Where Comet's jar carries its native library (libcomet.so for Linux on x86-64 and arm64)."""
COMET_HEAP_SHARE, COMET_OFF_HEAP_SHARE = 0.45, 0.35
"""With Comet on, the shares of `spark.driver_memory` given to the JVM heap and to Comet's
off-heap pool; the rest (a fifth) is left for what the JVM and Comet hold outside both
(metaspace, compiled code, thread stacks, Arrow buffers), so that the whole process, not only
its heap, stays within driver_memory."""
COMET_MIN_HEAP_MIB = 1024


def comet_supported(platform: str = sys.platform, machine: str | None = None) -> bool:
    """Whether Comet's jar has a native library for this operating system and CPU."""
    machine = machine or os.uname().machine
    return (platform, machine.lower()) in COMET_PLATFORMS


def comet_conf() -> dict[str, str]:
    """Comet's plugin, shuffle manager and settings, the same for local Spark and a cluster
    (`python -m logmetrics.session --accelerator comet`); its jar is added to
    `spark.jars.packages` beside Delta's, and its off-heap pool is sized by `comet_memory`
    locally, by the cluster's executor memory settings elsewhere."""
    return {
        "spark.plugins": "org.apache.spark.CometPlugin",
        "spark.shuffle.manager": (
            "org.apache.spark.sql.comet.execution.shuffle.CometShuffleManager"
        ),
        "spark.comet.exec.shuffle.enabled": "true",
        "spark.memory.offHeap.enabled": "true",
        # The persisted cluster keys and per-request rows are Spark's in-memory columns: Comet
        # reads them as Arrow, so the join to the keys and the per-request aggregation run
        # natively (without it, the join's build side keeps the whole main pass on the JVM).
        "spark.comet.sparkToColumnar.enabled": "true",
        # Comet says which operators and expressions stay on the JVM, and why, in the JVM log.
        "spark.comet.explainFallback.enabled": "true",
    }


def comet_memory(driver_memory: str) -> dict[str, str]:
    """A local session's `driver_memory` shared between the JVM heap, Comet's off-heap pool
    and what neither accounts for (`COMET_HEAP_SHARE`, `COMET_OFF_HEAP_SHARE`)."""
    total = _mebibytes(driver_memory)
    # Spark needs a heap of at least 450 MiB: a small driver_memory keeps up to 1 GiB of heap.
    heap = max(int(total * COMET_HEAP_SHARE), min(total, COMET_MIN_HEAP_MIB))
    return {
        "spark.memory.offHeap.size": f"{int(total * COMET_OFF_HEAP_SHARE)}m",
        "spark.driver.memory": f"{heap}m",
    }


def with_packages(conf: dict[str, str], *packages: str) -> dict[str, str]:
    """`conf` with `packages` added to its `spark.jars.packages`."""
    return {**conf, "spark.jars.packages": ",".join([conf["spark.jars.packages"], *packages])}


_UNITS = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


def _mebibytes(size: str) -> int:
    """A JVM memory size such as `4g` or `3072m` in MiB."""
    text = size.strip().lower().removesuffix("b")
    if text and text[-1] in _UNITS:
        return int(float(text[:-1]) * _UNITS[text[-1]])
    return int(float(text) / (1024 * 1024))  # bytes


@dataclass(frozen=True)
class BroadcastMemory:
    """What bounds a broadcast in the session at hand: the driver JVM's heap (it collects and,
    on plain Spark, builds the broadcast), `spark.driver.maxResultSize` (None: unlimited), on a
    cluster each executor's heap (it holds a copy; None in local mode, where the driver is the
    executor), and with Comet its native memory pool (`spark.memory.offHeap.size`, where each
    task builds the broadcast's hash table; None without Comet)."""

    driver_heap: int
    max_result: int | None
    executor_heap: int | None
    native_pool: int | None = None
    task_slots: int = 1  # tasks an executor (local Spark: the driver) runs at once

    @property
    def heap(self) -> int:
        """The smallest heap that holds the broadcast."""
        return min(self.driver_heap, self.executor_heap or self.driver_heap)

    def describe(self) -> str:
        """`driver heap 1.8 GiB, Comet's pool 1.4 GiB`: what the log and the errors say."""
        parts = [f"driver heap {self.driver_heap / 1024**3:.1f} GiB"]
        if self.executor_heap is not None:
            parts.append(f"executor memory {self.executor_heap / 1024**3:.1f} GiB")
        if self.native_pool is not None:
            parts.append(
                f"Comet's memory pool {self.native_pool / 1024**3:.1f} GiB for "
                f"{self.task_slots} task(s) at once"
            )
        return ", ".join(parts)


def broadcast_memory(spark: SparkSession) -> BroadcastMemory:
    """`BroadcastMemory` of `spark`: the driver's heap from its JVM where it can be reached
    (local, spark-submit), else from `spark.driver.memory` (Spark's default 1g)."""
    try:
        heap = int(spark._jvm.java.lang.Runtime.getRuntime().maxMemory())  # type: ignore[union-attr]
    except Exception:  # Spark Connect: no JVM here
        heap = _conf_bytes(spark, "spark.driver.memory", "1g")
    max_result = _conf_bytes(spark, "spark.driver.maxResultSize", "1g")
    master = _conf(spark, "spark.master", "local")
    local = master.startswith("local")
    executor = None if local else _conf_bytes(spark, "spark.executor.memory", "1g")
    slots = _local_threads(master) if local else int(_conf(spark, "spark.executor.cores", "1"))
    comet = "CometPlugin" in _conf(spark, "spark.plugins", "") and (
        _conf(spark, "spark.comet.enabled", "true").lower() != "false"
    )
    pool = _conf_bytes(spark, "spark.memory.offHeap.size", "0") if comet else 0
    return BroadcastMemory(heap, max_result or None, executor, pool or None, max(1, slots))


def _local_threads(master: str) -> int:
    """The tasks local Spark runs at once: N of `local[N]` (or `local[N,F]`), every core of
    `local[*]`, one of `local`."""
    match = re.match(r"^local\[(\*|\d+)", master)
    if match is None:
        return 1
    if match.group(1) == "*":
        return os.cpu_count() or 1
    return int(match.group(1))


def _conf(spark: SparkSession, key: str, default: str) -> str:
    try:
        return str(spark.conf.get(key, default) or default)
    except Exception:  # a setting the server will not say
        return default


def _conf_bytes(spark: SparkSession, key: str, default: str) -> int:
    """A memory setting in bytes; a number without a unit is MiB (Spark's rule for the memory
    settings) except for maxResultSize (bytes)."""
    text = _conf(spark, key, default).strip()
    if text.isdigit():
        return int(text) if key.endswith("maxResultSize") else int(text) * 1024 * 1024
    return int(_mebibytes(text) * 1024 * 1024)


SHORT_RUN_DAYS = 3
"""Up to this many days, `spark.profile: auto` starts the JVM for a short run."""

# A short run (a nightly day) is dominated by start-up: thousands of classes loaded once and a
# few dozen small Spark jobs. The quick JIT compiler alone (C1) and the serial collector cut
# the JVM's CPU by about a third there, and adaptive execution only re-plans tiny queries; a
# long backfill runs hot loops over millions of rows, where the optimizing compiler (C2) pays.
PROFILES = {
    "short": {
        # C1 alone reserves 48 MB for compiled code, which Comet's classes fill ("CodeCache is
        # full", then a crash): reserve what the tiered default does.
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC -XX:TieredStopAtLevel=1 "
        "-XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m",
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


PLAN_BUILDING = {"spark.python.sql.dataFrameDebugging.enabled": "false"}
"""How PySpark builds plans, in a local session. By default (Spark 4.0 and 4.1) PySpark wraps
every Column operation to record the Python call site it came from, for error messages: about
nine more calls into the JVM per operation, plus a walk of the Python stack. Off, the property
tests, which build and run thousands of small plans, took 0.79-0.81 of the time (2 alternating
rounds, 2026-12-04), and the reference property test made 73,323 calls into the JVM instead of
165,377 (cProfile). A nightly run, whose time is the JVM's, does not move (6 alternating pairs,
benchmarks/README.md). Off, an analysis error names the failing expression without the Python
line that built it; `spark.conf` in the config turns it back on."""


def profile_for(settings: SparkConfig, days: int | None = None) -> str:
    """`settings.profile`, `auto` resolved by the number of days the run covers (None: a
    command that computes no day, such as report or maintain: short)."""
    if settings.profile != "auto":
        return settings.profile
    return "short" if days is None or days <= SHORT_RUN_DAYS else "long"


HADOOP_VERSION = next(
    (
        match.group(1)
        for jar in (Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")
        if (match := re.match(r"hadoop-client-api-(\d+\.\d+\.\d+)\.jar$", jar.name))
    ),
    None,
)
"""The Hadoop version of the installed pyspark's jars: S3A's jar must be the same version."""

S3A_CONF = {
    # `s3://` paths too, as Databricks and EMR take them.
    "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    # The standard chain: the environment, a profile, a web identity token, the container's or
    # instance's role (S3A's default has no profile). Named one by one, not as the AWS SDK's
    # DefaultCredentialsProvider: Comet's native S3 reader takes only providers it knows, and
    # refuses that one ("Unsupported credential provider").
    "spark.hadoop.fs.s3a.aws.credentials.provider": ",".join(
        [
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider",
            "software.amazon.awssdk.auth.credentials.ProfileCredentialsProvider",
            "software.amazon.awssdk.auth.credentials.WebIdentityTokenFileCredentialsProvider",
            "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider",
        ]
    ),
    # Conditional writes (If-None-Match, If-Match): the warehouse's writer lease
    # (`tables.lease`).
    "spark.hadoop.fs.s3a.create.conditional.enabled": "true",
    # Object-store semantics, not a file system's, for what Spark and Delta write: a file is
    # created without first listing whether a directory sits there or checking `overwrite`,
    # a directory made without walking its parents, a delete leaves no parent marker. Spark
    # writes files of unique names; Delta's log store checks a commit's absence itself, and
    # the writer lease keeps a second writer out (docs/config.md, "Object storage"). A
    # nightly's writes on S3 took 12.5 s instead of 20 s with it.
    "spark.hadoop.fs.s3a.performance.flags": "create,mkdir,delete",
    # The run's patience with a store that stalls, vanishes, throttles or resets: about a
    # minute of any of them is ridden out, and a store gone for good fails the run within a
    # bound (docs/config.md, "Object storage", has both, derived from these). S3A's defaults
    # retry a 503 with back-off doubling from 100 ms twenty times (hours), and a stalled upload
    # 48 times 200 s.
    "spark.hadoop.fs.s3a.connection.establish.timeout": "15s",  # S3A's floor
    "spark.hadoop.fs.s3a.connection.request.timeout": "30s",
    "spark.hadoop.fs.s3a.connection.timeout": "30s",  # no byte for 30 s: the attempt failed
    "spark.hadoop.fs.s3a.attempts.maximum": "1",  # the AWS SDK's retries within each of S3A's
    "spark.hadoop.fs.s3a.retry.limit": "6",
    "spark.hadoop.fs.s3a.retry.interval": "1s",
    "spark.hadoop.fs.s3a.retry.throttle.limit": "6",
    "spark.hadoop.fs.s3a.retry.throttle.interval": "1s",
}
"""What a local session adds when a configured path is on S3, besides S3A's jar; `spark.conf`
wins over each (the endpoint, path-style access and region are the user's: docs/config.md)."""


def s3a_package() -> str:
    """Hadoop's S3A connector for the installed pyspark's Hadoop, resolved like Delta's jar
    (its AWS SDK bundle comes with it)."""
    if HADOOP_VERSION is None:
        raise LogmetricsError(
            "S3 paths need Hadoop's S3A jar of pyspark's Hadoop version, and the installed "
            "pyspark has no hadoop-client-api jar to read it from"
        )
    return f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}"


def local_conf(settings: SparkConfig, days: int | None = None, s3: bool = False) -> dict[str, str]:
    """Spark settings for a local session with Delta; `settings.conf` wins over the defaults.
    `days`: how many days the run covers, for `spark.profile: auto`; `s3`: a configured path is
    on S3 (S3A's jar and `S3A_CONF`)."""
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
        # The daily sums' one aggregation holds three buffers per slot up to the largest k and
        # the histograms: about 105 fields at ks up to 20, past the default of 100, above which
        # Spark gives up whole-stage code generation. At 400 it is generated: a 30-day chunk's
        # daily sums 4.8 -> 3.6 s on both engines (3 alternating rounds, 2 cores).
        "spark.sql.codegen.maxFields": "400",
        **PLAN_BUILDING,
    }
    if use_comet(settings):
        conf = with_packages(
            {**conf, **comet_conf(), **comet_memory(settings.driver_memory)}, COMET_PACKAGE
        )
    if s3:
        conf = with_packages({**conf, **S3A_CONF}, s3a_package())
    conf.update(settings.conf)
    conf.update(RUNTIME_CONF)  # not overridable: metric_date is the UTC date of served_at
    return conf


def use_comet(settings: SparkConfig) -> bool:
    """`spark.accelerator: comet`, on a Spark line Comet is built for and a platform its
    native library supports."""
    return settings.accelerator == "comet" and comet_released() and comet_supported()


def comet_released() -> bool:
    """Whether Comet COMET_VERSION has a jar for the installed Spark line."""
    return SPARK_LINE in COMET_SPARK_LINES


def comet_or_warn(settings: SparkConfig) -> bool:
    """`use_comet`, saying in one line why not when Comet was asked for but cannot run here."""
    comet = use_comet(settings)
    if settings.accelerator == "comet" and not comet:
        if not comet_released():
            log.warning(
                "Comet %s has no build for Spark %s: plain Spark (spark.accelerator: none "
                "silences this)",
                COMET_VERSION,
                SPARK_LINE,
            )
        else:
            log.warning(
                "Comet has no native library for %s/%s: plain Spark (spark.accelerator: none "
                "silences this)",
                sys.platform,
                os.uname().machine,
            )
    return comet


def is_managed_environment() -> bool:
    """True under spark-submit, Databricks or Spark Connect: the platform owns the session."""
    return bool(
        os.environ.get("SPARK_REMOTE")
        or os.environ.get("PYSPARK_GATEWAY_PORT")  # set by spark-submit's PythonRunner
        or os.environ.get("DATABRICKS_RUNTIME_VERSION")
    )


def get_spark(
    settings: SparkConfig,
    app_name: str = "logmetrics",
    days: int | None = None,
    s3: bool = False,
) -> SparkSession:
    """Return the process's one SparkSession, starting local Spark with Delta if there is none
    (`days`: how many days the run covers, for `spark.profile: auto`; `s3`: a configured path
    is on S3, so local Spark starts with S3A)."""
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

    options = {
        "spark.app.name": app_name,
        **outside_working_directory(local_conf(settings, days, s3)),
    }
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    comet = comet_or_warn(settings)
    packages = [installed_delta_package(), *([COMET_PACKAGE] if comet else [])]
    packages += [s3a_package()] if s3 else []
    engine = " and Comet" if comet else ""
    engine += ", S3A" if s3 else ""
    say(
        log,
        f"starting local Spark ({redact_url(settings.master)}) with Delta{engine}",
        packages=" and ".join(packages),
    )
    for name, value in {**LOCAL_JVM_ENVIRONMENT, **python_workers(settings.master)}.items():
        os.environ.setdefault(name, value)  # read as Spark starts; its JVM inherits them
    with _jvm_output_to(settings.log_dir) as log_file, resolve_lock():
        try:
            launch_local_jvm(options)
            spark = builder.getOrCreate()
        except PySparkRuntimeError as exc:
            where = f"; its log: {log_file}" if log_file else ""
            reason = exc.getCondition()
            raise LogmetricsError(f"local Spark did not start ({reason}){where}") from None
    if comet:
        check_comet_loaded(spark)
    return spark


def launch_local_jvm(options: Mapping[str, str]) -> None:
    """Launch local Spark's JVM as the session builder would (PySpark's `launch_gateway`, with
    the builder's `options`), but in a session and process group of its own, for the builder
    to use (`SparkContext._gateway`). A terminal's Ctrl-C and Airflow's kill signal the whole
    process group of the command: a JVM in it stopped under the run (SIGTERM ends it; so did
    SIGINT, which PySpark has it ignore, see `interrupt`), before the run could record its
    stop in job_runs, and PySpark's threads printed their broken connections to it. Out of the
    group, the JVM (and PySpark's workers, which it starts) hears of a stop from this process
    alone (`interrupt.stop_local_spark`; a second signal kills it), and ends with this process
    whatever its end: the JVM exits when its stdin, a pipe from this process, closes (a
    SIGKILL too). Not when the builder would start Spark Connect (`spark.api.mode: connect`),
    which launches its own."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    mode = options.get("spark.api.mode", os.environ.get("SPARK_API_MODE", "classic"))
    if mode.lower() == "connect":
        return
    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        conf = SparkConf()
        for key, value in options.items():
            conf.set(key, value)
        gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm


def outside_working_directory(conf: Mapping[str, str]) -> dict[str, str]:
    """`conf` with what local Spark writes for its session alone, by default in the working
    directory, in this process's `scratch_dir` instead: Spark's warehouse directory (the
    in-memory catalog's `default` database: `spark-warehouse/`) and Derby's home (a local
    Hive metastore's `metastore_db/` and `derby.log`). A location `conf` names wins."""
    out = dict(conf)
    out.setdefault("spark.sql.warehouse.dir", os.path.join(scratch_dir(), "spark-warehouse"))
    java = out.get("spark.driver.extraJavaOptions", "")
    if "-Dderby.system.home=" not in java:
        home = shlex.quote(f"-Dderby.system.home={scratch_dir()}")
        out["spark.driver.extraJavaOptions"] = f"{java} {home}".strip()
    return out


_SCRATCH: list[str] = []


def scratch_dir() -> str:
    """This process's temporary folder for what local Spark writes for its session alone:
    made on first use, removed when the process ends."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.mkdtemp(prefix="logmetrics-spark-"))
        atexit.register(shutil.rmtree, _SCRATCH[0], ignore_errors=True)
    return _SCRATCH[0]


LOCAL_JVM_ENVIRONMENT = {"MALLOC_ARENA_MAX": "2"}
"""Set for the local JVM unless already set. glibc gives each thread that allocates natively
(Comet's native engine, Arrow, compression codecs) its own malloc arena, up to 8 per core, and
memory freed in one arena is not reused by another: the process grows beyond what Spark and
Comet account for. Two arenas, measured on the 90-day benchmark with Comet: peak PSS of the
process tree 4.08 -> 3.86 GiB with 30-day chunks and 6.0 -> 5.0 GiB with one 90-day chunk, at
the same wall time."""


def python_workers(master: str) -> dict[str, str]:
    """The Python the workers of local Spark run: this one. PySpark starts its Python workers
    (the small frames logmetrics builds from Python rows need them) with `python3` from PATH
    unless PYSPARK_PYTHON names one, and a `python3` there that is another Python, or none,
    failed every day of a backfill with a Java stack trace. A cluster's workers (any other
    master) run on other machines: their Python is the cluster's to set."""
    return {"PYSPARK_PYTHON": sys.executable} if master.startswith("local") else {}


IVY_HOME = Path.home() / ".ivy2.5.2"
"""Spark's default Ivy home (its `spark.jars.ivy`), where the resolved jars are cached."""


@contextlib.contextmanager
def resolve_lock() -> Iterator[None]:
    """Hold an exclusive lock on Ivy's cache while a local JVM starts: two processes resolving
    `spark.jars.packages` into an empty cache at once each delete the other's half-downloaded
    jars (seen with two test workers on a fresh machine), and the JVM of both fails to start.
    Once the cache is warm the resolve takes about a second, so the wait is short."""
    IVY_HOME.mkdir(parents=True, exist_ok=True)
    with open(IVY_HOME / ".logmetrics-resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_comet_loaded(spark: SparkSession) -> bool:
    """Whether Comet's native library loaded in the driver; if it did not (a libc too old, a
    jar without it), Comet is switched off for the session with a one-line warning, and every
    plan runs on plain Spark (its shuffle manager then hands every shuffle to Spark's)."""
    try:
        loaded = bool(spark._jvm.org.apache.comet.NativeBase.isLoaded())  # type: ignore[union-attr]
    except Exception as exc:  # any failure to reach it means not loaded
        log.debug("Comet's loader: %s", exc)
        loaded = False
    if not loaded:
        log.warning("Comet's native library did not load: plain Spark for this run")
        spark.conf.set("spark.comet.enabled", "false")
        spark.conf.set("spark.comet.exec.shuffle.enabled", "false")
    return loaded


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


def cluster_conf(accelerator: str = "none") -> dict[str, str]:
    """What a cluster's spark-submit or Connect server needs from logmetrics: Delta, and with
    `accelerator` comet, Comet's jar and settings (its pool from `spark.memory.offHeap.size`,
    set with the executors' memory). Comet only where it has a jar for the Spark line."""
    if accelerator == "comet" and comet_released():
        return with_packages({**delta_conf(), **comet_conf()}, COMET_PACKAGE)
    if accelerator == "comet":
        log.warning("Comet %s has no build for Spark %s: Delta only", COMET_VERSION, SPARK_LINE)
    return delta_conf()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        description="Spark settings for a cluster, in spark-defaults format."
    )
    parser.add_argument("--accelerator", choices=("comet", "none"), default="none")
    sys.stdout.write(spark_properties(cluster_conf(parser.parse_args().accelerator)))
