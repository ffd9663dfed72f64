"""The Delta jar and the delta-spark Python package are pinned as a pair and must match."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pyspark

from logmetrics.config import SparkConfig
from logmetrics.session import (
    DELTA_PACKAGE,
    DELTA_VERSION,
    SPARK_MAJOR_MINOR,
    SPARK_PROVIDED_ARTIFACTS,
    local_conf,
)

REPO = Path(__file__).resolve().parents[1]


def test_delta_jar_matches_the_installed_python_packages() -> None:
    assert version("delta-spark") == DELTA_VERSION
    assert ".".join(pyspark.__version__.split(".")[:2]) == SPARK_MAJOR_MINOR
    assert DELTA_PACKAGE == f"io.delta:delta-spark_{SPARK_MAJOR_MINOR}_2.13:{DELTA_VERSION}"


def test_constraints_pin_the_same_pair() -> None:
    pins = dict(
        line.split("==", 1)
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins["delta_spark"] == DELTA_VERSION
    assert pins["pyspark"].startswith(SPARK_MAJOR_MINOR + ".")


def test_excluded_transitive_jars_are_shipped_by_spark_itself() -> None:
    jars = [p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")]
    for artifact in SPARK_PROVIDED_ARTIFACTS:
        name = artifact.split(":")[1]
        assert any(re.match(rf"{re.escape(name)}-\d", jar) for jar in jars), artifact


def test_local_session_gets_delta_and_utc_and_user_settings_win() -> None:
    conf = local_conf(SparkConfig(conf={"spark.sql.shuffle.partitions": "3"}))
    assert conf["spark.jars.packages"] == DELTA_PACKAGE
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert Path(conf["spark.jars.ivySettings"]).is_file()


def test_session_time_zone_stays_utc_whatever_the_config_says() -> None:
    conf = local_conf(SparkConfig(conf={"spark.sql.session.timeZone": "Europe/Paris"}))
    assert conf["spark.sql.session.timeZone"] == "UTC"
