"""deploy/airflow/README.md's first deployment, run as far as it runs without a cluster or a
workspace: its commands, in order (tests/deploy/readme_shell.py), each checked against what it
names or run.

Without Airflow (both venvs): the Variables table is what the DAG file reads, with its
defaults; every Variable the steps set is one the DAG reads; the providers' pins are
requirements.txt's; what the steps copy is in the repository and lands where their Variables
point; the Delta packages the README gives per Spark line are the DAG's default and, where
logmetrics is installed (the main suite), the jars of the pairs constraints.txt and
constraints-spark40.txt pin.

With Airflow (`make test-deploy`): each `airflow` command parsed by Airflow's own command line;
the environment step 1 exports loads both DAGs without a warning; `make wheel` run, its wheel
the one the steps install and upload, the upload played on the bundle README's workspace
(tests/deploy/test_readme_databricks.py) into the volume the Variable names; the Databricks
tasks rendered with the Variables of the databricks path; and the spark submit path's Variables
and Spark connection set as written into Airflow's database (/opt/logmetrics a temporary
folder), then the README's backfill trigger run through `dag.test()` with a stand-in at the
`spark-submit` the Variable names that records what it was given (Delta's jar for Spark 4.0,
the venv's Python, the connection's master among it). The workers the steps install are run in
test_worker.py and test_nightly_end_to_end.py.

The module is named to run after test_nightly_end_to_end.py (pytest takes a folder's files in
order): its `dag.test()` writes a second version of the backfill DAG (its own Assets, none of
the end-to-end warehouse's) and a run into the metadata database those runs share, which their
DAG runs would then find beside their own."""

from __future__ import annotations

import json
import re
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow_readme import README, ROOT, STEPS, install_commands, step, variables_set
from readme_shell import REPO, Command, commands, exported, section
from source_constants import string_constants

AIRFLOW_DIR = REPO / "deploy" / "airflow"
DAG_FILE = AIRFLOW_DIR / "dags" / "logmetrics_dags.py"
VARIABLE_ROW = re.compile(r"^\| `(logmetrics_\w+)` \| (.+?) \| .+ \|$", re.M)
DELTA_ROW = re.compile(r"^ *\| (4\.\d) \| `([^`]+)`( \(the default\))? \|$", re.M)


def dag_variables() -> dict[str, str | None]:
    """Every Variable the DAG file reads and its default (None: required), read from its text:
    `_var(key[, default])`, `Variable.get(key, default=...)` and the Jinja `var.value.get(key,
    ...)` whose default is another Variable's value (left out of the defaults: '...')."""
    source = DAG_FILE.read_text()
    constants = string_constants(DAG_FILE)
    found: dict[str, str | None] = {}
    for key, default in re.findall(r'_var\("(\w+)"(?:, (\w+|"[^"]*"))?\)', source):
        if not default:
            found[key] = None
        elif default.startswith('"'):
            found[key] = default.strip('"')
        else:  # a module constant: DELTA_PACKAGE
            found[key] = constants[default]
    for key, default in re.findall(r'Variable\.get\("(\w+)", default=(\w+)\)', source):
        found[key] = constants[default]
    for key in re.findall(r"var\.value\.get\('(\w+)'", source):
        found.setdefault(key, "...")
    return found


def test_every_command_of_the_readme_is_in_its_steps() -> None:
    """The steps hold every command a deployment runs; the Test section's re-lock is for
    whoever changes the pins."""
    deploying = re.compile(rf"^(airflow|databricks|make|pip|cp|mkdir|python3\.11|{ROOT}/\S+) ")
    outside_test = README.replace(section(README, "Test"), "")
    everywhere = [c.line for c in commands(outside_test) if deploying.match(c.line)]
    steps = commands(section(README, STEPS))
    assert everywhere == [c.line for c in steps]
    for copy in (c for c in steps if c.argv[0] == "cp"):  # what they copy is in the repository
        recursive = copy.argv[1] == "-r"
        *sources, _ = copy.argv[2 if recursive else 1 :]
        is_there = Path.is_dir if recursive else Path.is_file
        assert sources and all(is_there(copy.cwd / source) for source in sources), copy.line


def test_the_spark_worker_gets_what_its_variables_name() -> None:
    """Step 3 puts the config and the job scripts where its Variables point, and installs the
    venv whose files its other Variables name (test_worker.py runs the step and the files);
    step 4 the venv of the sensor's `logmetrics`. Read from the text: the copies land at the
    Variables' paths."""
    copied = {}
    for command in install_commands(3):
        if command.argv[0] == "cp":
            *sources, target = command.argv[2 if command.argv[1] == "-r" else 1 :]
            for source in sources:
                name = Path(source).name
                copied[f"{target.rstrip('/')}/{name}" if target.endswith("/") else target] = name
    variables = variables_set(step(3))
    assert copied == {f"{ROOT}/conf/logmetrics.yaml": "local.yaml", f"{ROOT}/jobs": "jobs"}
    assert variables["logmetrics_config"] == f"{ROOT}/conf/logmetrics.yaml"
    assert variables["logmetrics_jobs_dir"] == f"{ROOT}/jobs"
    for step_number in (3, 4):
        venv, pip = [c.argv for c in install_commands(step_number)][:2]
        assert venv == ("python3.11", "-m", "venv", f"{ROOT}/.venv"), step_number
        assert pip[:4] == (f"{ROOT}/.venv/bin/pip", "install", "-c", "constraints.txt")
        executable = variables_set(step(step_number))["logmetrics_executable"]
        assert executable == f"{ROOT}/.venv/bin/logmetrics", step_number
    assert variables["logmetrics_python"] == f"{ROOT}/.venv/bin/python"


def test_the_variables_table_is_what_the_dag_reads() -> None:
    """Each Variable the DAG file reads has its row, with its default or `required`; a row
    for a Variable the file does not read fails, and so does a default the file changed."""
    table = dict(VARIABLE_ROW.findall(README.split("\n## Variables", 1)[1].split("\n## ")[0]))
    read = dag_variables()
    assert set(table) == set(read)
    for key, default in read.items():
        if default is None:
            assert table[key] == "required", key
        elif default == "":  # unset: the connection or the environment decides
            assert table[key].startswith("none: "), (key, table[key])
        elif default != "...":
            assert table[key].startswith(f"`{default}`"), (key, table[key])
    assert read["logmetrics_delta_package"] == string_constants(DAG_FILE)["DELTA_PACKAGE"]
    assert read["logmetrics_databricks_node_type"] is None  # the workspace's cloud's


def test_the_steps_set_only_variables_the_dag_reads() -> None:
    set_anywhere = variables_set(section(README, STEPS))
    assert set(set_anywhere) <= set(dag_variables()), set(set_anywhere) - set(dag_variables())
    assert set_anywhere  # the steps do set Variables


def test_the_providers_are_the_pinned_ones() -> None:
    (pip,) = [c for c in commands(step(1)) if c.argv[:2] == ("pip", "install")]
    pinned = {
        line.split("==")[0]: line
        for line in (AIRFLOW_DIR / "requirements.txt").read_text().splitlines()
        if line.startswith("apache-airflow-providers-")
    }
    assert sorted(pip.argv[2:]) == sorted(pinned.values())


def _delta_table() -> dict[str, str]:
    rows = DELTA_ROW.findall(step(3))
    assert [default for _, _, default in rows].count(" (the default)") == 1
    return {line: package for line, package, _ in rows}


def test_delta_for_spark_4_0_is_a_variable_with_the_41_jar_as_default() -> None:
    """The 4.1 row, the default, is the DAG's; the step sets the 4.0 row's into the Variable."""
    table = _delta_table()
    (default,) = [p for line, p, d in DELTA_ROW.findall(step(3)) if d]
    assert default == table["4.1"] == dag_variables()["logmetrics_delta_package"]
    assert variables_set(step(3))["logmetrics_delta_package"] == table["4.0"]


@pytest.mark.imports_logmetrics
def test_the_delta_packages_are_the_tested_pairs_jars() -> None:
    """Each Spark line's package is the jar of the delta-spark its constraints file pins
    (logmetrics.session.delta_package: the main suite)."""
    from logmetrics.session import delta_package

    jars = {}
    for name in ("constraints.txt", "constraints-spark40.txt"):
        pins = {
            re.sub(r"[-_.]+", "-", package).lower(): version  # names as pip normalises them
            for package, _, version in (
                line.partition("==") for line in (REPO / name).read_text().splitlines()
            )
            if version and not package.startswith("#")
        }
        line = ".".join(pins["pyspark"].split(".")[:2])
        jars[line] = delta_package(pins["delta-spark"], line)
    assert _delta_table() == jars


# --- with Airflow: make test-deploy ---------------------------------------------------------


@pytest.fixture(scope="module")
def airflow_cli() -> Any:
    """Airflow's own command line parser."""
    pytest.importorskip("airflow", reason="Airflow's CLI: make test-deploy")
    from airflow.cli.cli_parser import get_parser

    return get_parser()


def parsed(cli: Any, command: Command) -> Any:
    try:
        return cli.parse_args(list(command.argv[1:]))
    except SystemExit:
        raise AssertionError(f"{command.line!r}: Airflow's CLI rejects it") from None


def test_every_airflow_command_parses_and_names_a_dag_of_the_file(airflow_cli: Any) -> None:
    from airflow.dag_processing.dagbag import DagBag

    dags = DagBag(dag_folder=str(DAG_FILE.parent)).dags
    airflow = [c for c in commands(section(README, STEPS)) if c.argv[0] == "airflow"]
    assert len(airflow) >= 10
    for command in airflow:
        args = parsed(airflow_cli, command)
        if args.subcommand in ("unpause", "trigger"):
            assert args.dag_id in dags, command.line
        if args.subcommand == "trigger":
            params = dags[args.dag_id].params
            params.update(json.loads(args.conf))  # ParamValidationError on a bad date
    assert [c.argv[2:4] for c in airflow][-2:] == [
        ("unpause", "logmetrics_nightly"),
        ("trigger", "logmetrics_backfill"),
    ]


def test_the_environment_step_1_exports_loads_both_dags_without_a_warning(
    airflow_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What step 1 puts in the environment of the scheduler and the DAG processor is what the
    DAG file takes: both DAGs load, nothing to warn about, the Assets named under the tables'
    location and the nightly starting on the day it gives."""
    import datetime as dt

    from airflow.dag_processing.dagbag import DagBag

    environment = exported(step(1))
    assert set(environment) == {"LOGMETRICS_TABLES", "LOGMETRICS_START_DATE"}
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    bag = DagBag(dag_folder=str(DAG_FILE.parent))
    assert bag.import_errors == {} and bag.captured_warnings == {}
    nightly = bag.dags["logmetrics_nightly"]
    first_day = dt.date.fromisoformat(environment["LOGMETRICS_START_DATE"])
    assert nightly.start_date == dt.datetime.combine(first_day, dt.time(), tzinfo=dt.UTC)
    tables = environment["LOGMETRICS_TABLES"]
    assert nightly.get_task("spark_submit").outlets[1].uri == f"{tables}/unique_clusters_daily"


@pytest.fixture(scope="module")
def wheel(airflow_cli: Any, request: pytest.FixtureRequest) -> Path:
    """The README's `make wheel`, run as written (once, by tests/deploy/conftest.py, before the
    workers' installs): the wheel it leaves in dist/."""
    wheel: Path = request.getfixturevalue("readme_wheel")
    return wheel


def test_the_wheel_is_the_one_the_steps_install_and_upload(wheel: Path) -> None:
    """`make wheel` builds the file the steps name (its version included), with the console
    script the Databricks task runs and the `local` extra step 3 installs (none in step 4)."""
    named = {
        arg for c in commands(section(README, STEPS)) for arg in c.argv if arg.startswith("dist/")
    }
    assert {name.partition("[")[0] for name in named} == {str(wheel.relative_to(REPO))}
    extras = {}
    for number in (3, 4):
        (pip,) = [c for c in install_commands(number) if c.argv[0].endswith("/pip")]
        (installed,) = [arg for arg in pip.argv if arg.startswith("dist/")]
        extras[number] = installed.partition("[")[2].rstrip("]")
    assert extras == {3: "local", 4: ""}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert wheel.name == f"logmetrics-{project['version']}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith("entry_points.txt")]
        assert "logmetrics = logmetrics.cli:entry_point" in archive.read(entry_points).decode()
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        assert "Provides-Extra: local" in archive.read(metadata).decode().splitlines()


def test_the_databricks_path_uploads_where_its_variables_point(wheel: Path) -> None:
    """On the workspace the bundle README's steps leave (its config uploaded), step 4's volume
    and upload run, and the Variables name the uploaded wheel and the uploaded config."""
    from test_readme_databricks import BUNDLE_DIR, deploy
    from test_readme_databricks import README as BUNDLE_README

    workspace = deploy(BUNDLE_README, yaml.safe_load((BUNDLE_DIR / "databricks.yml").read_text()))
    for command in commands(step(4)):
        if command.argv[0] == "databricks":
            workspace.run(command)
    variables = variables_set(step(4))
    assert workspace.files[variables["logmetrics_databricks_wheel"]] == wheel
    assert variables["logmetrics_config"] in workspace.files
    assert variables["logmetrics_runner"] == "databricks"


def test_the_databricks_tasks_run_the_uploaded_wheel(
    airflow_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 4's Variables, rendered into the nightly run's Databricks task and submitted (the
    hook held back, test_dags.py's harness): the wheel, the node type and the config they set."""
    import datetime as dt

    from airflow.dag_processing.dagbag import DagBag
    from test_dags import nightly_ti, render, submitted_payload

    variables = variables_set(step(4))
    for key, value in variables.items():
        monkeypatch.setenv(f"AIRFLOW_VAR_{key.upper()}", value)
    dags = dict(DagBag(dag_folder=str(DAG_FILE.parent)).dags)
    task, context = render(nightly_ti(dags, "databricks", dt.date(2026, 11, 14)))
    payload = submitted_payload(task, context)
    assert payload["libraries"] == [{"whl": variables["logmetrics_databricks_wheel"]}]
    assert payload["new_cluster"]["node_type_id"] == variables["logmetrics_databricks_node_type"]
    config = variables["logmetrics_config"]
    assert payload["python_wheel_task"]["parameters"] == [
        "run", "--config", config, "--date", "2026-11-14"
    ]  # fmt: skip


SPARK_SUBMIT = """#!/bin/sh
# A stand-in spark-submit: records its arguments, one a line, and succeeds.
printf '%s\\n' "$@" > "$(dirname "$0")/argv"
"""


@pytest.fixture
def set_as_written(airflow_cli: Any, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Step 3's Variables and step 5's Spark connection, set by running their `airflow`
    commands as Airflow's CLI runs them (/opt/logmetrics a temporary folder), into the metadata
    database (created here, in the throwaway AIRFLOW_HOME); deleted after, as the other
    modules' runs take theirs from the environment."""
    from airflow.models.connection import Connection
    from airflow.models.variable import Variable
    from airflow.utils.db import initdb
    from airflow.utils.session import create_session

    initdb()
    root = str(tmp_path / "opt-logmetrics")
    written: dict[str, str] = {}
    connections: list[str] = []
    try:
        for command in commands(step(3)) + commands(step(5)):
            if command.argv[:2] not in (("airflow", "variables"), ("airflow", "connections")):
                continue
            args = parsed(airflow_cli, command)
            assert args.subcommand in ("set", "add"), command.line
            if args.subcommand == "set":
                args.value = args.value.replace(ROOT, root)
                written[args.key] = args.value
            else:
                connections.append(args.conn_id)
            args.func(args)
        assert {key: Variable.get(key) for key in written} == written
        assert connections == ["spark_default"]
        yield written
    finally:
        for key in written:
            Variable.delete(key)
        with create_session() as session:
            for conn_id in connections:
                session.query(Connection).filter(Connection.conn_id == conn_id).delete()


# The end-to-end module's version of the backfill DAG (its Assets at its warehouse) is in the
# database beside this one's: Airflow's lookup of a run's serialized DAG finds both and says so.
@pytest.mark.filterwarnings("ignore:Multiple rows returned with uselist=False")
# Airflow's own `connections add` code (3.3.2), which the fixture runs as the CLI does.
@pytest.mark.filterwarnings("ignore:ProvidersManager.hooks is deprecated")
def test_the_backfill_trigger_runs_spark_submit_with_the_variables_as_set(
    set_as_written: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's backfill trigger through `dag.test()` (Airflow's scheduling loop, the task
    runner reading the Variables and the connection from its database): the spark_submit path,
    and the command line a stand-in at the `spark-submit` the Variable names received names the
    connection's master in client mode, Delta's jar for Spark 4.0, the venv's Python for the
    driver and the executors, the job script in the jobs directory and the config the steps
    set, over the trigger's range."""
    from airflow.dag_processing.dagbag import DagBag

    (trigger,) = [c for c in commands(step(6)) if c.argv[2:3] == ("trigger",)]
    conf = json.loads(trigger.argv[trigger.argv.index("--conf") + 1])
    spark_submit = Path(set_as_written["logmetrics_spark_submit"])
    spark_submit.parent.mkdir(parents=True)
    spark_submit.write_text(SPARK_SUBMIT)
    spark_submit.chmod(0o755)
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    dag = DagBag(dag_folder=str(DAG_FILE.parent)).dags[trigger.argv[3]]
    for task in dag.tasks:
        task.retries = 0
        task.outlets = []  # no asset events in the database the end-to-end runs read
    run = dag.test(logical_date=None, run_conf=conf)
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert str(run.state) == "success", states
    assert states == {
        "choose_runner": "success",
        "spark_submit": "success",
        "databricks": "skipped",
    }
    argv = (spark_submit.parent / "argv").read_text().splitlines()
    (add,) = [c for c in commands(step(5)) if c.argv[:3] == ("airflow", "connections", "add")]
    assert argv[argv.index("--master") + 1] == add.argv[add.argv.index("--conn-host") + 1]
    assert argv[argv.index("--deploy-mode") + 1] == "client"
    assert argv[argv.index("--packages") + 1] == set_as_written["logmetrics_delta_package"]
    python = set_as_written["logmetrics_python"]
    confs = {argv[i + 1] for i, arg in enumerate(argv) if arg == "--conf"}
    assert {f"spark.pyspark.driver.python={python}", f"spark.pyspark.python={python}"} <= confs
    assert argv[-7:] == [
        f"{set_as_written['logmetrics_jobs_dir']}/backfill.py",
        *("--config", set_as_written["logmetrics_config"]),
        *("--start", conf["start"], "--end", conf["end"]),
    ]
