"""Config and command line: validated before Spark starts, one line naming the key, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from logmetrics.cli import main
from logmetrics.config import Config, load_config
from logmetrics.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
MINIMAL = """
inputs:
  served_logs: {path: logs}
  clusters: {path: clusters}
output: {warehouse: wh}
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(MINIMAL)
    return path


def test_defaults_fill_what_the_file_leaves_out(config_file: Path) -> None:
    config = load_config([config_file])
    assert config.metrics.ks == (5, 10, 20)
    assert config.metrics.threshold == 4
    assert config.inputs.served_logs.format == "parquet"
    assert config.inputs.clusters.format == "delta"
    assert config.inputs.clusters.version is None
    assert config.backfill.days_per_chunk == 30


def test_shipped_local_config_is_valid() -> None:
    config = load_config([REPO / "conf" / "local.yaml"])
    assert isinstance(config, Config)
    assert config.output.warehouse == "warehouse"


def test_set_overrides_any_key_with_yaml_values(config_file: Path) -> None:
    config = load_config(
        [config_file],
        ["metrics.ks=[10, 3]", "metrics.threshold=2", "inputs.clusters.version=4"],
    )
    assert config.metrics.ks == (3, 10)
    assert config.metrics.threshold == 2
    assert config.inputs.clusters.version == 4


def test_later_files_win(config_file: Path, tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("metrics: {threshold: 6}\ninputs: {clusters: {format: parquet}}\n")
    config = load_config([config_file, overlay])
    assert config.metrics.threshold == 6
    assert config.inputs.clusters.format == "parquet"
    assert config.inputs.clusters.path == "clusters"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["metrics.kz=[1]"], "metrics.kz: unknown key"),
        (["metrics.ks=ten"], "metrics.ks"),
        (["metrics.ks=[0, 10]"], "metrics.ks"),
        (["metrics.ks=[10, 10]"], "metrics.ks"),
        (["metrics.ks=[]"], "metrics.ks"),
        (["metrics.threshold=-1"], "metrics.threshold"),
        (["metrics.threshold=true"], "metrics.threshold"),
        (["inputs.served_logs.format=csv"], "inputs.served_logs.format"),
        (["inputs.clusters.version=-2"], "inputs.clusters.version"),
        (["inputs.served_logs.date_partition=a b"], "inputs.served_logs.date_partition"),
        (["backfill.days_per_chunk=0"], "backfill.days_per_chunk"),
        (["metrics.segment_by=[K]"], "'K' is a column of unique_clusters_by_query"),
        (["metrics.segment_by=[run_id]"], "'run_id' is a column of unique_clusters_by_query"),
        (["metrics.segment_by=[surface, Surface]"], "must not repeat a column"),
        (["nosuchsection.key=1"], "nosuchsection: unknown key"),
        (["metrics=1"], "--set expects section.key=value"),
        (["output.warehouse"], "--set expects section.key=value"),
    ],
)
def test_invalid_values_name_the_key(config_file: Path, overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config([config_file], overrides)
    text = str(raised.value)
    assert message in text
    assert "\n" not in text


def test_the_config_knows_the_by_query_columns_without_spark() -> None:
    """The segment names the config refuses are unique_clusters_by_query's own columns,
    written out in config.py so that it loads where PySpark is not installed."""
    from logmetrics import config
    from logmetrics.schemas import BY_QUERY

    assert config._BY_QUERY_COLUMNS == {n.lower() for n in BY_QUERY.fieldNames()}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("metrics.treshold=3", "metrics.treshold: unknown key; did you mean 'threshold'?"),
        (
            "quality.severity.volumes=warning",
            "quality.severity.volumes: unknown key; did you mean 'volume'?",
        ),
        ("output.schem=x", "output.schem: unknown key; did you mean 'schema'?"),
        ("metrics.zzz=1", "metrics.zzz: unknown key"),
        ("metrics.ks=ten", "metrics.ks: must be a list, e.g. [5, 10] (got 'ten')"),
        (
            "metrics.segment_by=surface",
            "metrics.segment_by: must be a list, e.g. [5, 10] (got 'surface')",
        ),
    ],
)
def test_a_misspelt_key_is_named_with_the_nearest_one_and_a_scalar_for_a_list_says_list(
    config_file: Path, override: str, message: str
) -> None:
    """The whole line (the bugs: `unknown key` with no hint; pydantic's `Input should be a
    valid tuple` for a YAML scalar where a list belongs)."""
    with pytest.raises(ConfigError) as raised:
        load_config([config_file], [override])
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("metrics.ks=[5, 0]", "metrics.ks: every k must be a positive integer (got [5, 0])"),
        ("metrics.ks=[5, 5]", "metrics.ks: must not repeat a k (got [5, 5])"),
        (
            "metrics.segment_by=[surface, Surface]",
            "metrics.segment_by: must not repeat a column (case aside) "
            "(got ['surface', 'Surface'])",
        ),
        (
            "output.schema=a-b",
            "output.schema: must be a plain identifier (letters, digits, _) (got 'a-b')",
        ),
    ],
)
def test_a_value_refused_is_shown_once(config_file: Path, override: str, message: str) -> None:
    """The whole line: the rule, then the value given, once (`[5, 0]` was `got [5, 0] (got
    [5, 0])`)."""
    with pytest.raises(ConfigError) as raised:
        load_config([config_file], [override])
    assert str(raised.value) == message


def test_the_help_is_written_for_users(capsys: pytest.CaptureFixture[str]) -> None:
    """`logmetrics --help` opens with what the tool does and ends with where the config comes
    from and the exit statuses, not the module's developer docstring."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "logmetrics counts the distinct near-duplicate clusters" in out
    assert "The only place that knows" not in out and "argument parsing" not in out
    assert "$LOGMETRICS_CONFIG, else\n./conf/local.yaml or ./logmetrics.yaml" in out
    assert "5 a day's logs are not ready" in out


def test_missing_required_key_is_named(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("inputs:\n  served_logs: {path: logs}\n  clusters: {path: c}\n")
    with pytest.raises(ConfigError, match=r"^output: required key is missing$"):
        load_config([path])


def test_served_logs_are_required_only_by_the_metric_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "eval.yaml"
    path.write_text("inputs:\n  clusters: {path: c}\noutput: {warehouse: w}\n")
    config = load_config([path])  # enough for `evaluate` and `report`
    with pytest.raises(ConfigError, match=r"^inputs.served_logs: required key is missing$"):
        config.inputs.logs()
    argv = ["backfill", "--config", str(path), "--start", "2026-01-01", "--end", "2026-01-02"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "logmetrics: error: inputs.served_logs: required key is missing"
    ]


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config([tmp_path / "nope.yaml"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("inputs: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config([bad])
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config([listed])


def test_yaml_is_loaded_safely(tmp_path: Path) -> None:
    evil = tmp_path / "evil.yaml"
    evil.write_text("inputs: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config([evil])


# What the config fingerprint holds (job_runs.config_fingerprint): a change to one of these keys
# restates every day a run looks at (`config_changed`), since it can change what a day publishes...
RESTATING = [
    "inputs.served_logs.path=other-logs",
    "inputs.served_logs.format=delta",
    "inputs.served_logs.on_corrupt=quarantine",
    "inputs.clusters.path=other-clusters",
    "inputs.clusters.version=3",
    "metrics.ks=[5, 10]",
    "metrics.threshold=3",
    "metrics.segment_by=[surface]",
    "cost.tokens_per_slot=400",
    "cost.usd_per_million_input_tokens=2.5",
    "crowding.enabled=false",
    "crowding.top_clusters=20",
    "quality.enabled=false",
    "quality.on_failure=warn",
    "quality.max_malformed_rate=0.05",
    "quality.max_missing_cluster_rate=0.2",
    "quality.severity.volume=blocking",
    "alerts.sigmas=4",
    "alerts.baseline=trailing",
    "alerts.min_queries=100",
]
# ...and these change none of it: when a day is ready, what the detector measured (shown beside
# the numbers), where the output goes, how Spark runs, how days are chunked and looked back on.
NOT_RESTATING: list[str | tuple[str, ...]] = [
    "inputs.served_logs.ready_marker=_SUCCESS",
    "inputs.calibration={path: calibration.csv, format: csv}",
    "inputs.clusters.detector=minhash-0.8-2026-11",
    "output.warehouse=elsewhere",
    "spark.master=local[1]",
    "spark.driver_memory=1g",
    "backfill.days_per_chunk=7",
    "backfill.broadcast_max_chunks=10",
    "nightly.lookback_days=1",
    ("evaluation.runs={bm25: {path: runs/bm25}}", "evaluation.judgments={path: qrels}"),
]


@pytest.mark.parametrize("override", RESTATING)
def test_a_key_that_changes_what_a_day_publishes_changes_the_fingerprint(
    config_file: Path, override: str
) -> None:
    """A change the fingerprint missed would leave published days as the old config made
    them (a forgotten section, e.g. crowding's, fails here)."""
    base = load_config([config_file]).fingerprint()
    assert base == load_config([config_file]).fingerprint()
    assert load_config([config_file], [override]).fingerprint() != base


@pytest.mark.parametrize("override", NOT_RESTATING)
def test_a_key_that_changes_no_number_keeps_the_fingerprint(
    config_file: Path, override: str | tuple[str, ...]
) -> None:
    """Setting a ready marker or a calibration table must not restate every published day
    (the fingerprint keeping them, as it once could, fails here)."""
    base = load_config([config_file]).fingerprint()
    overrides = [override] if isinstance(override, str) else list(override)
    assert load_config([config_file], overrides).fingerprint() == base


def test_every_config_section_is_placed_in_or_out_of_the_fingerprint() -> None:
    """A new section makes its author say whether it changes what a day publishes."""
    first = [line if isinstance(line, str) else line[0] for line in RESTATING + NOT_RESTATING]
    listed = {override.split(".")[0] for override in first}
    assert listed == set(Config.model_fields)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["backfill", "--start", "2026-01-05", "--end", "2026-01-01"], "is after --end"),
        (
            ["backfill", "--start", "2026-13-01", "--end", "2026-01-01"],
            "'2026-13-01' is not a date (YYYY-MM-DD)",
        ),
        (["backfill", "--start", "05/01/2026", "--end", "2026-01-01"], "not a date"),
        (["run", "--date", "2026-02-30"], "'2026-02-30' is not a date (YYYY-MM-DD)"),
        (["run", "--date", "2026-2-1"], "'2026-2-1' is not a date (YYYY-MM-DD)"),
        (["backfill", "--start", "2026-01-01", "--end", "2026-01-01T00"], "not a date"),
        (["run", "--date", "2026-01-01\n--set x.y=1"], "not a date"),
        (["run", "--date", "yesterday"], "not a date"),
        (["run", "--date", "9999-12-31"], "after the last date a run can compute"),
        (["backfill", "--start", "2026-01-01"], "--end"),
        (["frobnicate"], "invalid choice"),
        (["run", "--set", "metrics.ks=[-1]"], "metrics.ks"),
    ],
)
def test_command_line_errors_exit_2_with_one_line(
    config_file: Path,
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if argv[0] in ("run", "backfill"):
        argv = [*argv, "--config", str(config_file)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert err.startswith("logmetrics: error:")
    assert len(err.splitlines()) == 1


def test_shipped_databricks_config_names_catalog_tables() -> None:
    config = load_config([REPO / "conf" / "databricks.yaml"])
    assert (config.output.catalog, config.output.schema_name) == ("main", "retrieval_metrics")
    assert config.output.warehouse is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["output.warehouse=null"], "set output.warehouse (paths) or output.schema"),
        (["output.catalog=main"], "output.catalog needs output.schema"),
        (["output.schema=bad name"], "output.schema"),
        (["output.schema=x; DROP TABLE y"], "plain identifier"),
    ],
)
def test_output_locations_are_validated(
    config_file: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config([config_file], overrides)


def test_job_entry_points_accept_global_options_anywhere(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from logmetrics.cli import run_job

    argv = ["--config", str(config_file), "--log-format", "json", "--start", "2026-01-05"]
    assert run_job("backfill", [*argv, "--end", "2026-01-01"]) == 2
    assert "is after --end" in capsys.readouterr().err


def test_table_properties_are_strings_as_a_table_holds_them(config_file: Path) -> None:
    config = load_config(
        [config_file],
        [
            "output.table_properties={delta.enableChangeDataFeed: true, "
            "delta.logRetentionDuration: interval 60 days, delta.dataSkippingNumIndexedCols: 8}"
        ],
    )
    assert config.output.table_properties == {
        "delta.enableChangeDataFeed": "true",
        "delta.logRetentionDuration": "interval 60 days",
        "delta.dataSkippingNumIndexedCols": "8",
    }
    assert load_config([config_file]).output.table_properties == {}


@pytest.mark.parametrize(
    "value",
    ['{"delta.x\') DROP": 1}', "{'': x}", "[delta.enableChangeDataFeed]", "{a: [1]}"],
)
def test_bad_table_properties_are_named(config_file: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=r"output\.table_properties"):
        load_config([config_file], [f"output.table_properties={value}"])
