"""Config and command line as an attack surface: what reaches SQL text is quoted, odd paths work,
hostile values are rejected in one line or stored verbatim, and no secret is read from the repo
or written to a log line."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from logmetrics import session
from logmetrics.cli import main
from logmetrics.config import OutputConfig, SparkConfig, load_config
from logmetrics.errors import ConfigError, LogmetricsError
from logmetrics.inputs.clusters import _latest_delta_version
from logmetrics.redaction import REDACTED, redact_url
from logmetrics.storage import delta_path_identifier
from logmetrics.tables.catalog import (
    DAILY_TABLE,
    DATA_QUALITY_TABLE,
    ensure_table,
    read_table,
    replace_dates,
    runs_predicate,
    sql_string,
    table_ref,
)

REPO = Path(__file__).resolve().parents[1]
MINIMAL = """
inputs:
  served_logs: {path: logs}
  clusters: {path: clusters}
output: {warehouse: wh}
"""
ODD = "we`ird 'dir"  # a backtick, a single quote and a space
HOSTILE = ["'; DROP TABLE x; --", "a'b", "a\\'b", "`x`", "\\", "line\nbreak", "ü ☃"]
# Built at run time, so this file holds no token-looking literal for the repository scan.
FAKE_TOKEN = "dapi" + "0123456789abcdef" * 2


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(MINIMAL)
    return path


# --- what reaches SQL text ------------------------------------------------------------------


def test_sql_building_quotes_paths_names_and_strings() -> None:
    path = f"/data/{ODD}/clusters"
    assert delta_path_identifier(path) == "delta.`/data/we``ird 'dir/clusters`"
    assert sql_string("it's a \\ test") == "'it\\'s a \\\\ test'"
    assert runs_predicate(["b'x", "a"]) == "run IN ('a', 'b\\'x')"
    named = table_ref(OutputConfig(catalog="main", schema="metrics"), DAILY_TABLE)
    assert named.name == "`main`.`metrics`.`unique_clusters_daily`"
    located = table_ref(OutputConfig(warehouse=f"/wh/{ODD}"), DAILY_TABLE)
    assert located.location == f"/wh/{ODD}/unique_clusters_daily"


def test_hostile_strings_survive_spark_sql_literals(spark: Any) -> None:
    for text in HOSTILE:
        assert spark.sql(f"SELECT {sql_string(text)} AS s").first().s == text


def test_delta_table_at_an_odd_path_is_read_by_sql(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / ODD / "clusters"
    spark.range(3).write.format("delta").save(str(path))
    spark.range(2).write.format("delta").mode("append").save(str(path))
    assert _latest_delta_version(spark, delta_path_identifier(str(path)), "clusters") == 1
    assert spark.sql(f"SELECT count(*) AS n FROM {delta_path_identifier(str(path))}").first().n == 5


def test_warehouse_at_an_odd_path_stores_a_hostile_run_id_verbatim(
    spark: Any, tmp_path: Path
) -> None:
    """CREATE TABLE on delta.`<path>`, a replaceWhere write and a read, with the run id (never
    SQL text: a literal column) and a check name as hostile as they come."""
    output = OutputConfig(warehouse=str(tmp_path / ODD / "wh"))
    day = dt.date(2026, 2, 1)
    run_id = HOSTILE[0]
    row = (day, HOSTILE[1], True, 0.5, 1.0, "warning", run_id, dt.datetime(2026, 2, 2), "{}")
    df = spark.createDataFrame([row], DATA_QUALITY_TABLE.schema)
    ensure_table(spark, table_ref(output, DATA_QUALITY_TABLE))
    replace_dates(spark, df, output, DATA_QUALITY_TABLE, [day])
    replace_dates(spark, df, output, DATA_QUALITY_TABLE, [day])  # idempotent
    table = read_table(spark, output, DATA_QUALITY_TABLE)
    assert table is not None
    rows = table.collect()
    assert [(r.run_id, r.check) for r in rows] == [(run_id, HOSTILE[1])]


@pytest.mark.parametrize("run_id", ["'; DROP TABLE x; --", "a'b"])
def test_run_id_is_not_taken_from_the_command_line(
    config_file: Path, run_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run id is generated (12 hex); a --run-id is an unknown option: exit 2, one line."""
    argv = ["run", "--config", str(config_file), "--date", "2026-02-01", "--run-id", run_id]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("logmetrics: error:") and "unrecognized arguments" in err
    assert len(err.splitlines()) == 1


# --- config values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "inputs.served_logs.path",
        "inputs.clusters.path",
        "output.warehouse",
        "spark.master",
        "spark.log_dir",
    ],
)
def test_paths_with_control_characters_are_one_line_errors(config_file: Path, key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key}: must not contain control characters") as exc:
        load_config([config_file], [f'{key}="a\\nb"'])
    assert "\n" not in str(exc.value)


def test_paths_with_quotes_backticks_and_spaces_are_accepted(config_file: Path) -> None:
    config = load_config([config_file], [f"output.warehouse={ODD}", f"inputs.clusters.path={ODD}"])
    assert config.output.warehouse == ODD and config.inputs.clusters.path == ODD


def test_spark_conf_values_with_quotes_are_passed_verbatim(config_file: Path) -> None:
    value = "-Dx='a b' -Dy=\"`$(echo pwned)`\""
    setting = json.dumps({"spark.driver.extraJavaOptions": value})  # JSON is YAML
    config = load_config([config_file], [f"spark.conf={setting}"])
    assert session.local_conf(config.spark)["spark.driver.extraJavaOptions"] == value


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["spark.conf.spark.sql.shuffle.partitions=16"], "'spark' must be a string, number"),
        (['spark.conf={"spark.x": null}'], "'spark.x' must be a string, number"),
        (['spark.conf={"spark.x": [1]}'], "'spark.x' must be a string, number"),
        (['spark.conf={"spark x": 1}'], "is not a Spark setting name"),
        (['spark.conf={"spark.x": "a\\nb"}'], "'spark.x' must not contain control characters"),
        (["output.schema='`x`'"], "plain identifier"),
        (["output.catalog=a.b", "output.schema=s"], "plain identifier"),
        (["metrics.segment_by=['a`b']"], "is not a column name"),
        (['inputs.served_logs.date_partition="d\'--"'], "column name"),
    ],
)
def test_set_values_are_validated(config_file: Path, overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as exc:
        load_config([config_file], overrides)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("override", ["spark conf=1", "spark.conf-x=1", "`x`.y=1", "a.b;c=1"])
def test_set_keys_must_be_identifiers(config_file: Path, override: str) -> None:
    with pytest.raises(ConfigError, match=r"--set expects section\.key=value"):
        load_config([config_file], [override])


@pytest.mark.parametrize(
    "yaml_text",
    [
        "inputs: !!python/object/apply:os.system ['echo pwned']\n",
        "inputs: !!python/object/new:subprocess.Popen [['echo', 'pwned']]\n",
        "inputs: !!python/name:os.system\n",
        "output: {warehouse: !!python/object/apply:eval ['1+1']}\n",
    ],
)
def test_python_yaml_tags_are_rejected(
    tmp_path: Path, yaml_text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = tmp_path / "evil.yaml"
    evil.write_text(yaml_text)
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config([evil])
    assert main(["run", "--config", str(evil), "--date", "2026-02-01"]) == 2
    assert "pwned" not in capsys.readouterr().out


def test_python_yaml_tags_in_set_values_are_rejected(config_file: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config([config_file], ["spark.master=!!python/object/apply:os.system ['echo x']"])


# --- secrets ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "section",
    [f"databricks: {{token: {FAKE_TOKEN}}}", f"spark: {{token: {FAKE_TOKEN}}}", "token: x"],
    ids=["databricks.token", "spark.token", "token"],
)
def test_the_config_has_no_place_for_a_token(
    config_file: Path, tmp_path: Path, section: str
) -> None:
    extra = tmp_path / "extra.yaml"
    extra.write_text(section + "\n")
    with pytest.raises(ConfigError, match=r"^(databricks|spark.token|token): unknown key$") as exc:
        load_config([config_file, extra])
    assert FAKE_TOKEN not in str(exc.value)
    with pytest.raises(ConfigError, match=r"^output\.token: unknown key$"):
        load_config([config_file], [f"output.token={FAKE_TOKEN}"])


@pytest.mark.parametrize(
    "key",
    [
        "spark.databricks.token",
        "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.s3a.access.key",
        "spark.authenticate.secret",
        "spark.ssl.keyPassword",
    ],
)
def test_secret_spark_settings_are_rejected_without_echoing_them(
    config_file: Path, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    override = f"spark.conf={{{key!r}: {FAKE_TOKEN!r}}}"
    with pytest.raises(ConfigError, match="looks like a secret") as exc:
        load_config([config_file], [override])
    assert FAKE_TOKEN not in str(exc.value)
    assert main(["run", "--config", str(config_file), "--set", override]) == 2
    err = capsys.readouterr().err
    assert "looks like a secret" in err and FAKE_TOKEN not in err
    assert len(err.strip().splitlines()) == 1


def test_malformed_set_of_a_secret_is_not_echoed(config_file: Path) -> None:
    for override in [f"spark.conf.token={FAKE_TOKEN}[", f"token={FAKE_TOKEN}"]:
        with pytest.raises(ConfigError) as exc:
            load_config([config_file], [override])
        assert FAKE_TOKEN not in str(exc.value)


def test_redact_url_hides_tokens_and_passwords() -> None:
    remote = f"sc://adb-1.azuredatabricks.net:443/;token={FAKE_TOKEN};x-databricks-cluster-id=c1"
    assert redact_url(remote) == (
        f"sc://adb-1.azuredatabricks.net:443/;token={REDACTED};x-databricks-cluster-id=c1"
    )
    assert redact_url("spark://me:hunter2@host:7077") == f"spark://me:{REDACTED}@host:7077"
    assert redact_url("local[*]") == "local[*]"


def test_spark_connect_errors_do_not_print_the_token() -> None:
    with pytest.raises(LogmetricsError) as exc:
        session.check_remote_reachable(f"sc://127.0.0.1:1/;token={FAKE_TOKEN}", timeout=1)
    assert FAKE_TOKEN not in str(exc.value) and REDACTED in str(exc.value)
    with pytest.raises(LogmetricsError) as exc:
        session.check_remote_reachable(f"sc://:x/;token={FAKE_TOKEN}")
    assert FAKE_TOKEN not in str(exc.value)


class _FakeSpark:
    """Stands in for SparkSession in get_spark: no JVM, only what get_spark touches."""

    class conf:
        @staticmethod
        def set(key: str, value: str) -> None:
            pass

    class builder:
        @classmethod
        def appName(cls, name: str) -> type[_FakeSpark.builder]:
            return cls

        @classmethod
        def config(cls, key: str, value: str) -> type[_FakeSpark.builder]:
            return cls

        @staticmethod
        def getOrCreate() -> type[_FakeSpark]:
            return _FakeSpark

    @staticmethod
    def getActiveSession() -> None:
        return None


def test_get_spark_logs_no_secret(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(session, "SparkSession", _FakeSpark)
    monkeypatch.setattr(session, "check_remote_reachable", lambda remote: None)
    caplog.set_level(logging.DEBUG, logger="logmetrics")
    settings = SparkConfig(master=f"spark://me:{FAKE_TOKEN}@host:7077", log_dir=None)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    session.get_spark(settings)  # local Spark
    monkeypatch.setenv("SPARK_REMOTE", f"sc://host:443/;token={FAKE_TOKEN}")
    session.get_spark(settings)  # Spark Connect
    logged = caplog.text + "".join(capsys.readouterr())
    assert "starting local Spark" in logged and "Spark Connect server" in logged
    assert FAKE_TOKEN not in logged


# The repository holds no secret: every tracked file, whatever its type.
_SECRET_PATTERNS = {
    "Databricks token": re.compile(r"dapi[0-9a-f]{32}"),
    "AWS access key id": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36}\b"),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "Slack token": re.compile(r"\bxox[abpors]-[A-Za-z0-9-]{10,}"),
}
# A YAML key naming a secret with a literal value (not empty, null, or a ${...}/{{...}} reference).
_YAML_SECRET = re.compile(
    r"""^\s*-?\s*["']?([\w.-]*[_.-])?(token|secret|password|passwd|api_?key|access[_.]?key)["']?\s*:"""
    r"""[ \t]*(?![ \t]|$|null\b|~|["']?\$\{|["']?\{\{|["'][ \t]*["']|#)(.+)$""",
    re.IGNORECASE | re.MULTILINE,
)


def _tracked_texts() -> list[tuple[str, str]]:
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    texts = []
    for name in filter(None, names):
        path = REPO / name.decode()
        if path.is_file() and path.stat().st_size < 2_000_000:
            texts.append((name.decode(), path.read_bytes().decode("utf-8", "replace")))
    return texts


def test_no_secret_in_any_tracked_file() -> None:
    texts = _tracked_texts()
    assert len(texts) > 20  # really the repository
    found = [
        f"{name}: {what}"
        for name, text in texts
        for what, pattern in _SECRET_PATTERNS.items()
        if pattern.search(text)
    ]
    found += [
        f"{name}: {m.group(0).strip()[:40]}"
        for name, text in texts
        if name.endswith((".yaml", ".yml"))
        for m in _YAML_SECRET.finditer(text)
    ]
    assert found == []


def test_the_secret_scan_catches_what_it_should() -> None:
    planted = "\n".join(
        [
            "databricks:",
            f"  token: {FAKE_TOKEN}",
            "  client_secret: 'abc'",
            "spark.hadoop.fs.s3a.access.key: " + "AKIA" + "A" * 16,
        ]
    )
    assert _SECRET_PATTERNS["Databricks token"].search(planted)
    assert _SECRET_PATTERNS["AWS access key id"].search(planted)
    assert len(_YAML_SECRET.findall(planted)) == 3
    harmless = "token: ${DATABRICKS_TOKEN}\npassword:\ntokens_per_slot: 510\nsecret: null\n"
    assert _YAML_SECRET.findall(harmless) == []
