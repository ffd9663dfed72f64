"""deploy/databricks/README.md's first deployment, run as far as it runs without a workspace
(none is reachable from here, and the Databricks CLI is not installed): each `databricks`
command of its steps, in order, from the directory and with the variables its block gives
(tests/deploy/readme_shell.py), parsed as the CLI's own usage lines state it and played
against a small model of the workspace: a volume needs its schema, an upload its volume,
`bundle validate` and `deploy` every variable without a default (the CLI stops on one with no
value), a deploy the config uploaded where its jobs read it and the tables' schema created,
`bundle run` a deployed job and its parameters.

Then, where each can run: the uploaded config loaded as logmetrics loads it, and the backfill's
parameters parsed by the real parser (the main suite, which has logmetrics); every job of each
`validate` and `deploy`, with the variables the steps give and each cloud's node type from the
README's table, through Databricks' typed models (`make test-deploy`, which has them)."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml
from readme_shell import Command, commands, section
from test_bundle import (
    BUNDLE_DIR,
    SAMPLE_SUBSTITUTIONS,
    check_with_databricks_models,
    logmetrics_parser,
    resolve,
    substituted,
    variable_values,
)

README = (BUNDLE_DIR / "README.md").read_text()
STEPS = "A first deployment, step by step"
NODE_TYPE_PLACEHOLDER = "<node-type>"
JOB_PARAMETER = re.compile(r"\{\{job\.parameters\.(\w+)\}\}")
# How each cloud names its node types: an AWS type in the Azure row fails.
NODE_TYPE_NAMES = {
    "AWS": r"[a-z][a-z0-9-]*\.[0-9]*x?(large|metal)",
    "Azure": r"Standard_[A-Z][A-Za-z0-9_]*",
    "Google Cloud": r"[a-z][a-z0-9]*-(standard|highmem|highcpu)-[0-9]+",
}


class _Usage(argparse.ArgumentParser):
    """A parser that fails the test, with its message, where the CLI would print its usage."""

    def error(self, message: str) -> NoReturn:
        raise AssertionError(f"{self.prog}: {message}")


def cli() -> argparse.ArgumentParser:
    """The commands the README runs, as the Databricks CLI's usage lines state them:
    `schemas create NAME CATALOG_NAME`, `volumes create CATALOG_NAME SCHEMA_NAME NAME
    VOLUME_TYPE`, `fs cp SOURCE_PATH TARGET_PATH`, `bundle validate|deploy|run [KEY]` with
    `-t/--target` and `--var name=value`, and their flags the README might use."""
    common = _Usage(add_help=False)
    common.add_argument("-p", "--profile")
    parser = _Usage(prog="databricks", parents=[common])
    groups = parser.add_subparsers(dest="group", required=True, parser_class=_Usage)

    schemas = groups.add_parser("schemas").add_subparsers(dest="verb", required=True)
    create = schemas.add_parser("create", parents=[common])
    for name in ("name", "catalog_name", "--comment", "--storage-root"):
        create.add_argument(name)

    volumes = groups.add_parser("volumes").add_subparsers(dest="verb", required=True)
    create = volumes.add_parser("create", parents=[common])
    for name in ("catalog_name", "schema_name", "name", "--comment", "--storage-location"):
        create.add_argument(name)
    create.add_argument("volume_type", choices=("MANAGED", "EXTERNAL"))

    fs = groups.add_parser("fs").add_subparsers(dest="verb", required=True)
    cp = fs.add_parser("cp", parents=[common])
    cp.add_argument("source_path")
    cp.add_argument("target_path")
    cp.add_argument("--overwrite", action="store_true")
    cp.add_argument("-r", "--recursive", action="store_true")

    bundle = groups.add_parser("bundle").add_subparsers(dest="verb", required=True)
    for verb in ("validate", "deploy", "run"):
        command = bundle.add_parser(verb, parents=[common])
        command.add_argument("-t", "--target")
        command.add_argument("--var", action="append", default=[])
        if verb == "run":
            command.add_argument("key")
            command.add_argument("--params")
    return parser


@dataclass
class Bundled:
    """A `bundle validate` or `deploy`: its target and every variable's value, resolved."""

    verb: str
    target: str
    given: dict[str, str]
    values: dict[str, str]


@dataclass
class Workspace:
    """What the README's commands have made so far, and what each bundle command saw."""

    bundle: dict[str, Any]
    schemas: set[tuple[str, str]] = field(default_factory=set)
    volumes: set[tuple[str, str, str]] = field(default_factory=set)
    files: dict[str, Path] = field(default_factory=dict)  # /Volumes/... -> the local source
    bundled: list[Bundled] = field(default_factory=list)
    runs: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def run(self, command: Command) -> None:
        assert command.argv[0] == "databricks", f"{command.line!r}: not a databricks command"
        args = cli().parse_args(command.argv[1:])
        assert "DATABRICKS_HOST" in command.env or args.profile, (
            f"{command.line!r}: no workspace (DATABRICKS_HOST or --profile)"
        )
        getattr(self, f"{args.group}_{args.verb}")(command, args)

    def schemas_create(self, command: Command, args: argparse.Namespace) -> None:
        self.schemas.add((args.catalog_name, args.name))

    def volumes_create(self, command: Command, args: argparse.Namespace) -> None:
        schema = (args.catalog_name, args.schema_name)
        assert schema in self.schemas, f"{command.line!r}: schema {'.'.join(schema)} not created"
        self.volumes.add((*schema, args.name))

    def fs_cp(self, command: Command, args: argparse.Namespace) -> None:
        source = command.cwd / args.source_path
        assert source.is_file(), f"{command.line!r}: no file {source}"
        target = re.fullmatch(r"dbfs:(/Volumes/([^/]+)/([^/]+)/([^/]+)/.+)", args.target_path)
        assert target, f"{command.line!r}: a volume's path is dbfs:/Volumes/<c>/<s>/<v>/<file>"
        assert target.group(2, 3, 4) in self.volumes, f"{command.line!r}: volume not created"
        self.files[target[1]] = source

    def bundle_validate(self, command: Command, args: argparse.Namespace) -> None:
        assert (command.cwd / "databricks.yml").is_file(), f"{command.line!r}: no bundle here"
        target = args.target or next(t for t, s in self.bundle["targets"].items() if s["default"])
        assert target in self.bundle["targets"], f"{command.line!r}: no target {target}"
        given = {
            name.removeprefix("BUNDLE_VAR_"): value
            for name, value in command.env.items()
            if name.startswith("BUNDLE_VAR_")
        }
        for assignment in args.var:  # --var wins over the environment
            name, equals, value = assignment.partition("=")
            assert equals, f"{command.line!r}: --var {assignment!r} is not name=value"
            given[name] = value
        try:
            values = resolved(variable_values(self.bundle, target, given))
        except AssertionError as error:
            raise AssertionError(f"{command.line!r} stops: {error}") from None
        self.bundled.append(Bundled(args.verb, target, given, values))

    def bundle_deploy(self, command: Command, args: argparse.Namespace) -> None:
        self.bundle_validate(command, args)
        values = self.bundled[-1].values
        assert values["config"] in self.files, (
            f"{command.line!r}: its jobs read {values['config']}, which no step uploads"
        )
        tables = (values["tables_catalog"], values["tables_schema"])
        assert tables in self.schemas, (
            f"{command.line!r}: its jobs write {'.'.join(tables)}, which no step creates"
        )

    def bundle_run(self, command: Command, args: argparse.Namespace) -> None:
        deployed = {b.target for b in self.bundled if b.verb == "deploy"}
        assert args.target in deployed, f"{command.line!r}: target {args.target} not deployed"
        job = self.bundle["resources"]["jobs"].get(args.key)
        assert job is not None, f"{command.line!r}: no job {args.key}"
        params = dict(pair.split("=", 1) for pair in (args.params or "").split(",") if pair)
        declared = {p["name"] for p in job.get("parameters", [])}
        assert set(params) <= declared, f"{command.line!r}: not parameters of the job"
        self.runs.append((args.target, args.key, params))


def resolved(values: dict[str, Any]) -> dict[str, str]:
    """Variables' values with the references among them (`config`'s default names `catalog`
    and `schema`) and the CLI's own (the deploying user) substituted."""
    known = {**{f"var.{k}": str(v) for k, v in values.items()}, **SAMPLE_SUBSTITUTIONS}

    def sub(value: str) -> str:
        for _ in range(5):
            value = re.sub(r"\$\{([A-Za-z0-9_.]+)\}", lambda m: known[m[1]], value)
        return value

    return {name: sub(str(value)) for name, value in values.items()}


def deploy(text: str, bundle: dict[str, Any]) -> Workspace:
    """The README's steps in `text`, played in order from the repository root."""
    workspace = Workspace(bundle)
    for command in commands(section(text, STEPS)):
        workspace.run(command)
    return workspace


@pytest.fixture(scope="module")
def bundle() -> dict[str, Any]:
    return yaml.safe_load((BUNDLE_DIR / "databricks.yml").read_text())


@pytest.fixture(scope="module")
def workspace(bundle: dict[str, Any]) -> Workspace:
    return deploy(README, bundle)


def node_types() -> dict[str, str]:
    """The README's table: the node type of each cloud."""
    rows = re.findall(
        r"^ *\| (AWS|Azure|Google Cloud) \| `([^`]+)` \|$", section(README, STEPS), re.M
    )
    return dict(rows)


def test_every_command_of_the_readme_is_in_its_steps() -> None:
    """The steps are the README's only commands: none elsewhere escapes this test."""
    everywhere = [c.line for c in commands(README)]
    assert everywhere == [c.line for c in commands(section(README, STEPS))]


def test_the_first_deployment_runs_in_order(workspace: Workspace, bundle: dict[str, Any]) -> None:
    """Validated, then dev and prod deployed, a backfill run in prod; the config uploaded to
    where every deploy's jobs read it, in a volume of the bundle's catalog and schema."""
    assert [(b.verb, b.target) for b in workspace.bundled] == [
        ("validate", "dev"),
        ("deploy", "dev"),
        ("deploy", "prod"),
    ]
    configs = {b.values["config"] for b in workspace.bundled}
    assert configs == {"/Volumes/main/logmetrics/config/logmetrics.yaml"} == set(workspace.files)
    catalog, schema = (bundle["variables"][name]["default"] for name in ("catalog", "schema"))
    assert workspace.volumes == {(catalog, schema, "config")}
    assert [(target, job) for target, job, _ in workspace.runs] == [("prod", "logmetrics_backfill")]


def test_every_variable_without_a_default_is_set_before_validate(
    workspace: Workspace, bundle: dict[str, Any]
) -> None:
    required = {name for name, spec in bundle["variables"].items() if "default" not in spec}
    validate = workspace.bundled[0]
    assert validate.verb == "validate"
    assert required <= set(validate.given), required - set(validate.given)


@pytest.mark.parametrize(
    ("step", "message"),
    [
        # validate before the variables: the README's order until it said otherwise
        (
            lambda text: text.replace(
                "export DATABRICKS_HOST=https://<your-workspace>\n",
                "export DATABRICKS_HOST=https://<your-workspace>\n"
                "   databricks bundle validate -t dev\n",
            ),
            "'databricks bundle validate -t dev' stops: target dev: no value for "
            "failure_webhook_id, node_type, service_principal, warehouse_id",
        ),
        # the upload without its volume
        (
            lambda text: text.replace(
                "   databricks volumes create main logmetrics config MANAGED\n", ""
            ),
            "volume not created",
        ),
        # no upload at all
        (
            lambda text: re.sub(r"^ *databricks fs cp .*\n", "", text, flags=re.M),
            "its jobs read /Volumes/main/logmetrics/config/logmetrics.yaml, which no step uploads",
        ),
        # the upload somewhere the jobs do not read
        (
            lambda text: text.replace("/config/logmetrics.yaml --overwrite", "/config/conf.yaml"),
            "which no step uploads",
        ),
        # no schema for the tables
        (
            lambda text: re.sub(
                r"^ *databricks schemas create retrieval_m.*\n", "", text, flags=re.M
            ),
            "its jobs write main.retrieval_metrics, which no step creates",
        ),
        # a variable the bundle does not declare
        (
            lambda text: text.replace("BUNDLE_VAR_node_type=", "BUNDLE_VAR_node_type_id="),
            "not variables of the bundle: {'node_type_id'}",
        ),
    ],
    ids=["validate first", "no volume", "no upload", "elsewhere", "no tables schema", "typo"],
)
def test_a_step_out_of_place_fails_the_walk(
    bundle: dict[str, Any], step: Any, message: str
) -> None:
    """What the walk rests on: each mistake a newcomer would hit in a workspace fails here."""
    text = step(README)
    assert text != README
    with pytest.raises(AssertionError, match=re.escape(message)):
        deploy(text, bundle)


def test_the_node_type_is_chosen_per_cloud(workspace: Workspace, bundle: dict[str, Any]) -> None:
    """No default (an AWS type fails in an Azure or Google Cloud workspace): the README sets it
    from its table, which names one of each cloud's."""
    assert "default" not in bundle["variables"]["node_type"]
    assert {b.given["node_type"] for b in workspace.bundled} == {NODE_TYPE_PLACEHOLDER}
    table = node_types()
    assert set(table) == set(NODE_TYPE_NAMES)
    for cloud, node_type in table.items():
        assert re.fullmatch(NODE_TYPE_NAMES[cloud], node_type), (cloud, node_type)


def test_the_tables_schema_is_the_uploaded_configs_output(workspace: Workspace) -> None:
    """The dashboard reads where the uploaded config writes, and a step creates that schema
    (logmetrics creates the tables, not their schema)."""
    for bundled in workspace.bundled:
        config = yaml.safe_load(workspace.files[bundled.values["config"]].read_text())
        tables = (config["output"]["catalog"], config["output"]["schema"])
        assert (bundled.values["tables_catalog"], bundled.values["tables_schema"]) == tables
        assert tables in workspace.schemas
        assert tables != (bundled.values["catalog"], bundled.values["schema"])  # two schemas


@pytest.mark.imports_logmetrics
def test_the_uploaded_config_is_a_logmetrics_config(workspace: Workspace) -> None:
    """The file the README uploads loads as every job loads it (a mistake in it is a
    ConfigError): catalog tables, no warehouse, in the schema the dashboard reads."""
    from logmetrics.config import load_config

    for bundled in workspace.bundled:
        output = load_config([workspace.files[bundled.values["config"]]]).output
        assert output.warehouse is None
        tables = (bundled.values["tables_catalog"], bundled.values["tables_schema"])
        assert (output.catalog, output.schema_name) == tables


@pytest.mark.imports_logmetrics
def test_the_backfill_runs_with_parameters_the_cli_parses(
    workspace: Workspace, bundle: dict[str, Any]
) -> None:
    """The README's `bundle run` gives both of the job's parameters, as dates the real parser
    reads into the range it names."""
    ((_, key, params),) = workspace.runs
    job = bundle["resources"]["jobs"][key]
    assert set(params) == {p["name"] for p in job["parameters"]}
    (task,) = job["tasks"]
    arguments = [
        resolve(JOB_PARAMETER.sub(lambda m: params[m[1]], value), bundle["variables"], job)
        for value in task["python_wheel_task"]["parameters"]
    ]
    parsed = logmetrics_parser().parse_args(arguments)
    assert parsed.command == "backfill"
    assert (str(parsed.start), str(parsed.end)) == (params["start"], params["end"])


@pytest.mark.parametrize("cloud", list(NODE_TYPE_NAMES))
def test_each_validate_and_deploy_loads_into_databricks_models(
    workspace: Workspace, bundle: dict[str, Any], cloud: str
) -> None:
    """Every job of each bundle command's target, with the variables the README gives and the
    cloud's node type, through Databricks' typed models (make test-deploy)."""
    node_type = node_types()[cloud]
    for bundled in workspace.bundled:
        given = {**bundled.given, "node_type": node_type}
        loaded = check_with_databricks_models(bundle, given, targets=[bundled.target])
        assert loaded == {"jobs": 3, "dashboards": 1}
        jobs = substituted(bundle, bundled.target, given)["resources"]["jobs"].values()
        clusters = [c["new_cluster"] for job in jobs for c in job["job_clusters"]]
        assert {cluster["node_type_id"] for cluster in clusters} == {node_type}
