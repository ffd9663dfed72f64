"""The Delta jar and the delta-spark Python package are pinned as a pair and must match."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from logmetrics import session
from logmetrics.config import SparkConfig
from logmetrics.errors import LogmetricsError
from logmetrics.session import (
    COMET_PACKAGE,
    DELTA_PACKAGE,
    DELTA_VERSION,
    SPARK_LINE,
    SPARK_MAJOR_MINOR,
    SPARK_PROVIDED_ARTIFACTS,
    check_remote_reachable,
    cluster_conf,
    comet_or_warn,
    comet_supported,
    delta_package,
    installed_delta_package,
    local_conf,
    python_workers,
)

REPO = Path(__file__).resolve().parents[1]

# The supported Spark lines: the file that pins each pair and the Delta jar that goes with it.
LINES = {
    "4.1": ("constraints.txt", "io.delta:delta-spark_4.1_2.13:4.3.1"),
    "4.0": ("constraints-spark40.txt", "io.delta:delta-spark_2.13:4.0.1"),
}


def _pins(name: str) -> dict[str, str]:
    lines = (REPO / name).read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if "==" in line and not line.startswith("#"))


def test_delta_jar_matches_the_installed_python_packages() -> None:
    """On whichever line this venv holds (make test: 4.1; make test-compat: 4.0), the installed
    pair is the one its constraints file pins, and the jar a local session adds is its pair."""
    constraints, jar = LINES[SPARK_LINE]
    pins = _pins(constraints)
    assert pyspark.__version__ == pins["pyspark"]
    assert version("delta-spark") == pins["delta_spark"]
    assert installed_delta_package() == jar
    assert local_conf(SparkConfig(accelerator="none"))["spark.jars.packages"] == jar


@pytest.mark.parametrize("line", sorted(LINES))
def test_each_constraints_file_pins_a_pair_that_matches(line: str) -> None:
    constraints, jar = LINES[line]
    pins = _pins(constraints)
    assert pins["pyspark"].startswith(line + ".")
    assert delta_package(pins["delta_spark"], line) == jar


def test_the_default_line_is_the_jar_the_docs_and_the_dag_name() -> None:
    """DELTA_PACKAGE (docs/cluster.md, the Airflow DAG) is constraints.txt's pair."""
    assert (SPARK_MAJOR_MINOR, DELTA_PACKAGE) == ("4.1", LINES["4.1"][1])
    assert delta_package(DELTA_VERSION, SPARK_MAJOR_MINOR) == DELTA_PACKAGE


def test_delta_4_0_is_refused_on_another_spark_line() -> None:
    with pytest.raises(LogmetricsError, match=r"built for Spark 4\.0, not the installed 4\.1"):
        delta_package("4.0.1", "4.1")


def test_local_spark_without_delta_spark_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(session, "version", missing)
    with pytest.raises(LogmetricsError, match=r"install logmetrics\[local\]"):
        installed_delta_package()


def test_the_wheel_leaves_pyspark_and_delta_to_the_runtime() -> None:
    """A job wheel pip-installed on a cluster must not bring its own PySpark: they are in the
    `local` extra, never in the wheel's own dependencies."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[\[<>=!~; ]", dep, maxsplit=1)[0] for dep in project["dependencies"]]
    assert not {"pyspark", "delta-spark", "py4j"} & set(names)
    assert not any("[spark" in dep for dep in project["dependencies"])
    local = project["optional-dependencies"]["local"]
    assert {re.split(r"[\[<>=]", dep, maxsplit=1)[0] for dep in local} == {
        "pyspark",
        "delta-spark",
        "great-expectations",
    }


def test_excluded_transitive_jars_are_shipped_by_spark_itself() -> None:
    jars = [p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")]
    for artifact in SPARK_PROVIDED_ARTIFACTS:
        name = artifact.split(":")[1]
        assert any(re.match(rf"{re.escape(name)}-\d", jar) for jar in jars), artifact


def test_local_session_gets_delta_and_utc_and_user_settings_win() -> None:
    conf = local_conf(SparkConfig(accelerator="none", conf={"spark.sql.shuffle.partitions": "3"}))
    assert conf["spark.jars.packages"] == installed_delta_package()
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert Path(conf["spark.jars.ivySettings"]).is_file()


@pytest.mark.parametrize(
    ("profile", "days", "c1_only", "adaptive"),
    [
        ("auto", 1, True, "false"),  # a nightly day: start-up dominates
        ("auto", None, True, "false"),  # report, maintain: no day computed
        ("auto", 3, True, "false"),
        ("auto", 4, False, "true"),  # a backfill: throughput dominates
        ("short", 90, True, "false"),
        ("long", 1, False, "true"),
    ],
)
def test_the_jvm_profile_follows_the_run_length_unless_set(
    profile: str, days: int | None, c1_only: bool, adaptive: str
) -> None:
    conf = local_conf(SparkConfig(profile=profile), days)  # type: ignore[arg-type]
    java = conf["spark.driver.extraJavaOptions"]
    assert "-Duser.timezone=UTC" in java
    assert ("-XX:TieredStopAtLevel=1" in java) is c1_only
    # C1's own 48 MB code cache overflows with Comet loaded: the short profile reserves more.
    assert ("-XX:ReservedCodeCacheSize=240m" in java) is c1_only
    assert ("-XX:+UseSerialGC" in java) is c1_only
    assert conf["spark.sql.adaptive.enabled"] == adaptive
    mine = {"spark.driver.extraJavaOptions": "-Dx=1", "spark.sql.adaptive.enabled": "true"}
    conf = local_conf(SparkConfig(profile=profile, conf=mine), days)  # type: ignore[arg-type]
    assert conf["spark.driver.extraJavaOptions"] == "-Dx=1"
    assert conf["spark.sql.adaptive.enabled"] == "true"


def test_a_local_session_builds_plans_without_recording_call_sites(spark: SparkSession) -> None:
    """PySpark reads the setting once, from the active session: re-read here, it must say off
    (a misspelt key would leave PySpark's default, on); the config can turn it back on."""
    from pyspark.errors import utils

    cached = utils._enable_debugging_cache
    utils._enable_debugging_cache = None
    try:
        assert utils.is_debugging_enabled() is False
    finally:
        utils._enable_debugging_cache = cached
    key = "spark.python.sql.dataFrameDebugging.enabled"
    assert local_conf(SparkConfig(conf={key: "true"}))[key] == "true"


def test_session_time_zone_stays_utc_whatever_the_config_says() -> None:
    conf = local_conf(SparkConfig(conf={"spark.sql.session.timeZone": "Europe/Paris"}))
    assert conf["spark.sql.session.timeZone"] == "UTC"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_spark_remote_with_nothing_listening_is_one_clear_error() -> None:
    remote = f"sc://127.0.0.1:{_closed_port()}"
    with pytest.raises(LogmetricsError, match="no Spark Connect server at SPARK_REMOTE="):
        check_remote_reachable(remote)
    with pytest.raises(LogmetricsError, match="not sc://host:port"):
        check_remote_reachable("sc://127.0.0.1:notaport")
    check_remote_reachable("local")  # pyspark starts that server itself: nothing to check


def test_the_cli_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    for name in ("logs", "clusters"):
        (tmp_path / name).mkdir()
    config = tmp_path / "job.yaml"
    config.write_text(
        f"inputs:\n  served_logs: {{path: '{tmp_path / 'logs'}'}}\n"
        f"  clusters: {{path: '{tmp_path / 'clusters'}'}}\n"
        f"output: {{warehouse: '{tmp_path / 'wh'}'}}\n"
    )
    remote = f"sc://127.0.0.1:{_closed_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "logmetrics.cli", "backfill", "--config", str(config)]
        + ["--start", "2026-01-01", "--end", "2026-01-01"],
        env={**os.environ, "SPARK_REMOTE": remote},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        f"logmetrics: error: no Spark Connect server at SPARK_REMOTE={remote} "
        "(Connection refused): start one (`make cluster-up`) or unset SPARK_REMOTE"
    ]


def test_comet_is_the_default_where_its_native_library_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session, "comet_supported", lambda: True)
    monkeypatch.setattr(session, "comet_released", lambda: True)
    conf = local_conf(SparkConfig(driver_memory="4g"))
    assert conf["spark.jars.packages"] == f"{installed_delta_package()},{COMET_PACKAGE}"
    assert conf["spark.plugins"] == "org.apache.spark.CometPlugin"
    assert conf["spark.shuffle.manager"].endswith("CometShuffleManager")
    # The heap, the pool and what neither accounts for share driver_memory: 45/35/20%.
    assert conf["spark.memory.offHeap.enabled"] == "true"
    assert conf["spark.memory.offHeap.size"] == "1433m"
    assert conf["spark.driver.memory"] == "1843m"
    # A small driver_memory keeps a heap Spark can start with (it needs 450 MiB).
    small = local_conf(SparkConfig(driver_memory="1g"))
    assert small["spark.driver.memory"] == "1024m"
    assert small["spark.memory.offHeap.size"] == "358m"
    off = local_conf(SparkConfig(driver_memory="4g", accelerator="none"))
    assert not any(key.startswith("spark.comet") for key in off)
    assert "spark.plugins" not in off and "spark.shuffle.manager" not in off
    assert off["spark.driver.memory"] == "4g"


def test_comet_where_it_cannot_load_means_plain_spark_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(session, "comet_supported", lambda: False)
    monkeypatch.setattr(session, "comet_released", lambda: True)
    conf = local_conf(SparkConfig())
    assert conf["spark.jars.packages"] == installed_delta_package()
    assert "spark.plugins" not in conf
    with caplog.at_level("WARNING", logger="logmetrics.session"):
        assert comet_or_warn(SparkConfig()) is False
    assert len(caplog.records) == 1 and "plain Spark" in caplog.records[0].getMessage()
    caplog.clear()
    assert comet_or_warn(SparkConfig(accelerator="none")) is False
    assert not caplog.records  # asked for nothing: nothing to say
    assert comet_supported("darwin", "arm64") is False
    assert comet_supported("linux", "x86_64") and comet_supported("linux", "aarch64")


def test_comet_on_a_spark_line_it_has_no_build_for_means_plain_spark_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Comet 1.2.0 has no jar for Spark 4.0 (make test-compat's line): Delta only, one line."""
    monkeypatch.setattr(session, "SPARK_LINE", "4.0")
    monkeypatch.setattr(session, "comet_supported", lambda: True)
    assert "spark.plugins" not in local_conf(SparkConfig())
    with caplog.at_level("WARNING", logger="logmetrics.session"):
        assert comet_or_warn(SparkConfig()) is False
    assert [r.getMessage() for r in caplog.records] == [
        "Comet 1.2.0 has no build for Spark 4.0: plain Spark (spark.accelerator: none "
        "silences this)"
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="logmetrics.session"):
        conf = cluster_conf("comet")
    assert "spark.plugins" not in conf and "comet" not in conf["spark.jars.packages"]
    assert len(caplog.records) == 1
    monkeypatch.setattr(session, "SPARK_LINE", "4.1")
    assert COMET_PACKAGE in cluster_conf("comet")["spark.jars.packages"]


@pytest.mark.parametrize(
    ("size", "mib"), [("4g", 4096), ("3072m", 3072), ("2G", 2048), ("1.5g", 1536)]
)
def test_memory_sizes_in_mebibytes(size: str, mib: int) -> None:
    assert session._mebibytes(size) == mib


def test_a_second_process_waits_for_the_resolve_lock() -> None:
    """While one process starts its JVM (and may be resolving jars into Ivy's cache), another
    cannot take the lock: two resolves into one empty cache break each other's downloads."""
    probe = (
        "import fcntl, sys\n"
        f"lock = open({str(session.IVY_HOME / '.logmetrics-resolve.lock')!r}, 'w')\n"
        "try:\n"
        "    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except BlockingIOError:\n"
        "    sys.exit(7)\n"
    )
    with session.resolve_lock():
        held = subprocess.run([sys.executable, "-c", probe], check=False)
    free = subprocess.run([sys.executable, "-c", probe], check=False)
    assert (held.returncode, free.returncode) == (7, 0)


class _Started(Exception):
    """Raised by the stand-in launch: the local JVM would start here."""


def test_local_spark_starts_with_two_malloc_arenas_and_this_python_unless_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str | None, str | None]] = []

    class Builder:
        def config(self, _: str, __: str) -> Builder:
            return self

    class Session:
        builder = Builder()

        @staticmethod
        def getActiveSession() -> None:
            return None

    def launch(_: object) -> None:
        seen.append((os.environ.get("MALLOC_ARENA_MAX"), os.environ.get("PYSPARK_PYTHON")))
        raise _Started

    monkeypatch.setattr(session, "SparkSession", Session)
    monkeypatch.setattr(session, "launch_local_jvm", launch)
    monkeypatch.setattr(session, "is_managed_environment", lambda: False)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with pytest.raises(_Started):
        session.get_spark(SparkConfig(accelerator="none"))
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")  # the user's choices stand
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3")
    with pytest.raises(_Started):
        session.get_spark(SparkConfig(accelerator="none"))
    assert seen == [("2", sys.executable), ("4", "/opt/python/bin/python3")]


def test_the_local_jvm_is_launched_in_a_session_of_its_own_unless_spark_connect_starts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A signal to the command's process group (Ctrl-C, Airflow's kill) must not reach local
    Spark's JVM: PySpark launches it with the builder's settings in a session of its own, for
    the builder to use. Spark Connect's local server (`spark.api.mode: connect`) is launched
    by PySpark itself, as before."""
    from pyspark import SparkContext, java_gateway

    launched: list[tuple[dict[str, str], dict[str, object]]] = []

    class Gateway:
        jvm = "the JVM"

    def launch_gateway(conf: pyspark.SparkConf, popen_kwargs: dict[str, object]) -> Gateway:
        launched.append((dict(conf.getAll()), popen_kwargs))
        return Gateway()

    monkeypatch.setattr(java_gateway, "launch_gateway", launch_gateway)
    monkeypatch.setattr(SparkContext, "_gateway", None)
    monkeypatch.setattr(SparkContext, "_jvm", None)
    monkeypatch.delenv("SPARK_API_MODE", raising=False)
    session.launch_local_jvm({"spark.api.mode": "connect", "spark.master": "local[1]"})
    assert launched == [] and SparkContext._gateway is None
    options = {"spark.app.name": "logmetrics", "spark.master": "local[1]"}
    session.launch_local_jvm(options)
    assert launched == [(options, {"start_new_session": True})]
    assert SparkContext._jvm == "the JVM"
    session.launch_local_jvm(options)  # launched once: the builder uses it
    assert len(launched) == 1


def test_python_workers_are_this_python_on_local_spark_only() -> None:
    """PySpark would start them with `python3` from PATH (tests/test_cli_process.py puts one
    there that cannot start)."""
    assert python_workers("local[2]") == {"PYSPARK_PYTHON": sys.executable}
    assert python_workers("local") == {"PYSPARK_PYTHON": sys.executable}
    assert python_workers("spark://host:7077") == {}
    assert python_workers("yarn") == {}


def test_a_path_on_s3_adds_s3a_of_pysparks_own_hadoop() -> None:
    """With a path on S3, local Spark starts with hadoop-aws of the Hadoop version pyspark's
    jars are (S3A must match it), `s3://` mapped to S3A and the standard credential chain;
    without one, none of it. `spark.conf` still wins."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    (client,) = jars.glob("hadoop-client-api-*.jar")
    hadoop = client.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    settings = SparkConfig(conf={"spark.hadoop.fs.s3a.retry.limit": "9"})
    on_s3 = session.local_conf(settings, s3=True)
    assert f"org.apache.hadoop:hadoop-aws:{hadoop}" in on_s3["spark.jars.packages"].split(",")
    assert on_s3["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    providers = on_s3["spark.hadoop.fs.s3a.aws.credentials.provider"].split(",")
    assert [p.rsplit(".", 1)[-1] for p in providers] == [
        "EnvironmentVariableCredentialsProvider",
        "ProfileCredentialsProvider",
        "WebIdentityTokenFileCredentialsProvider",
        "IAMInstanceCredentialsProvider",
    ]
    assert on_s3["spark.hadoop.fs.s3a.retry.limit"] == "9"
    local = session.local_conf(SparkConfig())
    assert "hadoop-aws" not in local["spark.jars.packages"]
    assert not any(key.startswith("spark.hadoop.fs.s3") for key in local)
