"""deploy/databricks/databricks.yml names things that must exist: the wheel's console script,
the files it builds from and ships, the variables it references, and `logmetrics` arguments
that the real command line parser accepts. Needs only PyYAML and the repository; runs in the
main suite (and in `make test-deploy`, minus the checks that need logmetrics itself).

In `make test-deploy` every job, its variables substituted (defaults, the target's values,
samples for the variables without a default), is also loaded through Databricks' own typed
models (`databricks-bundles`: `Job.from_dict`, which rejects an unknown or misplaced field and
a value of the wrong type); the main venv does not install them, so those checks skip there.
"""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BUNDLE_DIR = REPO / "deploy" / "databricks"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

VAR_REF = re.compile(r"\$\{var\.([A-Za-z0-9_]+)\}")
JOB_PARAM_REF = re.compile(r"\{\{\s*job\.parameters\.([A-Za-z0-9_]+)\s*\}\}")
TRIGGER_DATE_REF = "{{job.trigger.time.iso_date}}"
# Sample values for the references a task's parameters may hold, to parse them as Databricks
# would pass them once resolved.
SAMPLE_JOB_PARAMETERS = {"start": "2026-03-01", "end": "2026-03-14"}
SAMPLE_TRIGGER_DATE = "2026-03-02"
# Values for what the CLI substitutes at deploy time, and for the variables every deploy must
# give (they have no default).
SAMPLE_SUBSTITUTIONS = {
    "workspace.current_user.userName": "someone@example.com",
    "bundle.name": "logmetrics",
}
SAMPLE_REQUIRED_VARIABLES = {
    "node_type": "Standard_E4ds_v5",
    "failure_webhook_id": "0c6a5f0e-1d1b-4c43-9d5e-5a2d1e7b9f10",
    "service_principal": "6f1d2e3c-4b5a-6978-8a9b-0c1d2e3f4a5b",
    "warehouse_id": "1a2b3c4d5e6f7a8b",
}


def logmetrics_parser() -> argparse.ArgumentParser:
    """The real `logmetrics` command line parser, for the tests marked `imports_logmetrics`: the
    main suite runs them, `make test-deploy` leaves them out (its venv has no logmetrics)."""
    from logmetrics.cli.parser import build_parser

    return build_parser()


@pytest.fixture(scope="module")
def bundle() -> dict[str, Any]:
    return yaml.safe_load((BUNDLE_DIR / "databricks.yml").read_text())


def tasks(bundle: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    for job_key, job in bundle["resources"]["jobs"].items():
        for task in job["tasks"]:
            yield job_key, job, task


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def resolve(value: str, variables: dict[str, Any], job: dict[str, Any]) -> str:
    """A parameter as the task receives it: bundle variables and job parameters substituted."""
    declared = {p["name"] for p in job.get("parameters", [])}

    def job_param(match: re.Match[str]) -> str:
        assert match[1] in declared, f"{{{{job.parameters.{match[1]}}}}} is not a job parameter"
        return SAMPLE_JOB_PARAMETERS[match[1]]

    for _ in range(5):  # variable defaults may reference other variables
        value = VAR_REF.sub(lambda m: str(variables[m[1]]["default"]), value)
    value = value.replace(TRIGGER_DATE_REF, SAMPLE_TRIGGER_DATE)
    return JOB_PARAM_REF.sub(job_param, value)


def test_bundle_has_a_name_and_dev_and_prod_targets(bundle: dict[str, Any]) -> None:
    assert bundle["bundle"]["name"] == "logmetrics"
    targets = bundle["targets"]
    assert targets["dev"]["mode"] == "development"
    assert targets["dev"]["default"] is True
    assert targets["prod"]["mode"] == "production"
    assert targets["prod"]["variables"]["nightly_pause_status"] == "UNPAUSED"


def test_no_credentials_or_hosts_in_the_bundle(bundle: dict[str, Any]) -> None:
    text = (BUNDLE_DIR / "databricks.yml").read_text()
    assert not re.search(r"^\s*(token|password|client_secret|host)\s*:", text, re.MULTILINE)
    assert "dapi" not in text  # Databricks personal access tokens start with it


def test_every_referenced_variable_is_declared(bundle: dict[str, Any]) -> None:
    declared = set(bundle["variables"])
    for target in bundle["targets"].values():
        assert set(target.get("variables", {})) <= declared
    referenced = {name for text in strings(bundle) for name in VAR_REF.findall(text)}
    assert referenced <= declared, referenced - declared
    unused = declared - referenced
    assert not unused, f"declared but never used: {unused}"


def test_the_artifact_builds_this_repository(bundle: dict[str, Any]) -> None:
    (artifact,) = bundle["artifacts"].values()
    assert artifact["type"] == "whl"
    assert (BUNDLE_DIR / artifact["path"] / "pyproject.toml").resolve() == REPO / "pyproject.toml"
    assert artifact["build"].split()[:2] == ["python", "-m"]


def test_wheel_tasks_run_the_console_script_of_this_wheel(bundle: dict[str, Any]) -> None:
    (artifact,) = bundle["artifacts"].values()
    dist = (BUNDLE_DIR / artifact["path"] / "dist").resolve()
    wheel_tasks = 0
    for job_key, _, task in tasks(bundle):
        wheel = task.get("python_wheel_task")
        if wheel is None:
            continue
        wheel_tasks += 1
        assert wheel["package_name"] == PYPROJECT["project"]["name"], job_key
        assert wheel["entry_point"] in PYPROJECT["project"]["scripts"], job_key
        target = PYPROJECT["project"]["scripts"][wheel["entry_point"]]
        module, function = target.split(":")
        assert f"\ndef {function}(" in _defining_source(module, function), target
        # the wheel the task installs is the one the artifact builds
        (library,) = task["libraries"]
        assert (BUNDLE_DIR / library["whl"]).parent.resolve() == dist, job_key
        assert (BUNDLE_DIR / library["whl"]).name.endswith(".whl")
    assert wheel_tasks == 5  # nightly run, alerts and views, backfill, maintain


def _defining_source(module: str, function: str) -> str:
    """The source text of the module that defines `function` (`def function(`), from
    `module`'s file (`module.py` or `module/__init__.py`) or the module it re-exports
    `function` from (`from logmetrics.cli.app import entry_point`): read, not imported, since
    the Airflow venv may not hold logmetrics."""
    base = REPO / "src" / Path(*module.split("."))
    source = (base / "__init__.py" if base.is_dir() else base.with_suffix(".py")).read_text()
    if re.search(rf"^def {function}\(", source, re.M):
        return source
    found = re.search(rf"^from ([\w.]+) import [^\n]*\b{function}\b", source, re.M)
    assert found, f"{module} neither defines nor imports {function}"
    return _defining_source(found.group(1), function)


# The bundle's tasks and the command each runs.
COMMANDS = {
    ("logmetrics_nightly", "run"): "run",
    ("logmetrics_nightly", "alerts"): "alerts",
    ("logmetrics_nightly", "views"): "views",
    ("logmetrics_backfill", "backfill"): "backfill",
    ("logmetrics_maintain", "maintain"): "maintain",
}


@pytest.mark.imports_logmetrics
def test_every_task_is_the_wheels_entry_point_with_arguments_the_cli_parses(
    bundle: dict[str, Any],
) -> None:
    """Every task is a python_wheel_task (no spark_python_task, whose script path nothing here
    would check) of `logmetrics.cli:entry_point`, the function that turns a failing status into
    SystemExit (`main` returns it, and the task would succeed); its parameters, resolved, are
    one `logmetrics` command the real parser accepts. A task of another kind, an entry point
    that returns its status, or a misspelt option fails."""
    kinds = {
        (job_key, task["task_key"]): tuple(sorted(k for k in task if k.endswith("_task")))
        for job_key, _, task in tasks(bundle)
    }
    assert kinds == dict.fromkeys(COMMANDS, ("python_wheel_task",))
    assert PYPROJECT["project"]["scripts"] == {"logmetrics": "logmetrics.cli:entry_point"}
    for job_key, task_key in COMMANDS:
        wheel = _task(bundle, job_key, task_key)["python_wheel_task"]
        assert (wheel["package_name"], wheel["entry_point"]) == ("logmetrics", "logmetrics")
        assert all(isinstance(value, str) for value in wheel["parameters"]), (job_key, task_key)
    parser = logmetrics_parser()
    for (job_key, task_key), command in COMMANDS.items():
        parsed = parser.parse_args(_arguments(bundle, job_key, task_key))
        assert parsed.command == command, (job_key, task_key)
        assert parsed.config == [CONFIG], (job_key, task_key)


def test_tasks_use_a_declared_job_cluster(bundle: dict[str, Any]) -> None:
    for job_key, job, task in tasks(bundle):
        clusters = {c["job_cluster_key"]: c["new_cluster"] for c in job["job_clusters"]}
        cluster = clusters[task["job_cluster_key"]]
        assert cluster["spark_version"] == "${var.spark_version}", job_key
        assert cluster["node_type_id"] == "${var.node_type}", job_key


def test_runtime_is_spark_4_scala_2_13(bundle: dict[str, Any]) -> None:
    version = bundle["variables"]["spark_version"]["default"]
    major = int(version.split(".")[0])
    assert major >= 17 and version.endswith("-scala2.13"), version  # DBR 17+ is Spark 4


def _task(bundle: dict[str, Any], job_key: str, task_key: str | None = None) -> dict[str, Any]:
    job_tasks = bundle["resources"]["jobs"][job_key]["tasks"]
    if task_key is None:
        (task,) = job_tasks
        return task  # type: ignore[no-any-return]
    (task,) = [t for t in job_tasks if t["task_key"] == task_key]
    return task  # type: ignore[no-any-return]


def _arguments(bundle: dict[str, Any], job_key: str, task_key: str | None = None) -> list[str]:
    job = bundle["resources"]["jobs"][job_key]
    raw = _task(bundle, job_key, task_key)["python_wheel_task"]["parameters"]
    return [resolve(str(value), bundle["variables"], job) for value in raw]


CONFIG = "/Volumes/main/logmetrics/config/logmetrics.yaml"


@pytest.mark.imports_logmetrics
def test_nightly_runs_the_day_before_its_trigger_date_on_a_daily_utc_schedule(
    bundle: dict[str, Any],
) -> None:
    job = bundle["resources"]["jobs"]["logmetrics_nightly"]
    assert job["schedule"]["quartz_cron_expression"] == "0 0 2 * * ?"
    assert job["schedule"]["timezone_id"] == "UTC"
    assert job["schedule"]["pause_status"] == "${var.nightly_pause_status}"
    assert job["max_concurrent_runs"] == 1

    run = _task(bundle, "logmetrics_nightly", "run")
    assert run["python_wheel_task"]["parameters"][-2:] == ["--day-before", TRIGGER_DATE_REF]
    args = _arguments(bundle, "logmetrics_nightly", "run")
    assert args == ["run", "--config", CONFIG, "--day-before", SAMPLE_TRIGGER_DATE]
    parsed = logmetrics_parser().parse_args(args)
    assert parsed.command == "run"
    assert parsed.config == [CONFIG]
    from logmetrics.cli.compute import run_day

    assert str(run_day(parsed)) == "2026-03-01"  # the day before the trigger date


@pytest.mark.imports_logmetrics
def test_nightly_alerts_judge_the_day_the_run_computed_and_fail_the_job(
    bundle: dict[str, Any],
) -> None:
    run, alerts = (_task(bundle, "logmetrics_nightly", key) for key in ("run", "alerts"))
    assert alerts["depends_on"] == [{"task_key": run["task_key"]}]
    assert "run_if" not in alerts  # the default, ALL_SUCCESS: no verdict on an unpublished day
    assert alerts["max_retries"] == 0  # an alert fails the task, and so the job run
    assert alerts["job_cluster_key"] == run["job_cluster_key"]
    assert alerts["libraries"] == run["libraries"]

    args = _arguments(bundle, "logmetrics_nightly", "alerts")
    assert args == [
        "alerts", "--config", CONFIG, "--day-before", SAMPLE_TRIGGER_DATE, "--fail-on-alert"
    ]  # fmt: skip
    parser = logmetrics_parser()
    from logmetrics.cli.alerts import alerts_range
    from logmetrics.cli.compute import run_day

    parsed = parser.parse_args(args)
    assert parsed.fail_on_alert is True
    day = run_day(parser.parse_args(_arguments(bundle, "logmetrics_nightly", "run")))
    assert alerts_range(parsed) == (day, day)


@pytest.mark.imports_logmetrics
def test_maintain_runs_weekly_after_the_nightly(bundle: dict[str, Any]) -> None:
    job = bundle["resources"]["jobs"]["logmetrics_maintain"]
    assert job["schedule"]["quartz_cron_expression"] == "0 0 5 ? * SUN"
    assert job["schedule"]["timezone_id"] == "UTC"
    assert job["schedule"]["pause_status"] == "${var.maintain_pause_status}"
    assert bundle["targets"]["prod"]["variables"]["maintain_pause_status"] == "UNPAUSED"
    assert job["max_concurrent_runs"] == 1
    args = _arguments(bundle, "logmetrics_maintain")
    assert args == ["maintain", "--config", CONFIG]
    assert logmetrics_parser().parse_args(args).command == "maintain"


@pytest.mark.imports_logmetrics
def test_the_nightly_keeps_the_views_in_step_after_its_run(bundle: dict[str, Any]) -> None:
    """The views the dashboard reads are (re)created by this wheel after each nightly run,
    beside the alerts task: an alert, which fails the job, does not leave them behind."""
    views = _task(bundle, "logmetrics_nightly", "views")
    assert views["depends_on"] == [{"task_key": "run"}]
    assert "run_if" not in views
    assert _arguments(bundle, "logmetrics_nightly", "views") == ["views", "--config", CONFIG]
    assert logmetrics_parser().parse_args(["views", "--config", CONFIG]).command == "views"


DASHBOARD = BUNDLE_DIR / "dashboards" / "logmetrics.lvdash.json"


def test_the_dashboard_reads_the_tables_schema_on_a_warehouse_the_deploy_names(
    bundle: dict[str, Any],
) -> None:
    """One dashboard, its file beside the bundle; its warehouse a variable every deploy gives;
    the catalog and schema its datasets read, variables whose defaults are the tables'
    catalog and schema in conf/databricks.yaml (the config the jobs' volume holds a copy of)."""
    (resource,) = bundle["resources"]["dashboards"].values()
    assert (BUNDLE_DIR / resource["file_path"]).resolve() == DASHBOARD
    assert resource["warehouse_id"] == "${var.warehouse_id}"
    assert "default" not in bundle["variables"]["warehouse_id"]
    assert resource["dataset_catalog"] == "${var.tables_catalog}"
    assert resource["dataset_schema"] == "${var.tables_schema}"
    output = yaml.safe_load((REPO / "conf" / "databricks.yaml").read_text())["output"]
    variables = bundle["variables"]
    assert (variables["tables_catalog"]["default"], variables["tables_schema"]["default"]) == (
        output["catalog"],
        output["schema"],
    )
    dashboard = json.loads(DASHBOARD.read_text())
    pages = [page["displayName"] for page in dashboard["pages"]]
    assert pages == ["Trend", "Alerts", "Cost", "Data quality"]


def test_every_job_notifies_failures_through_variables(bundle: dict[str, Any]) -> None:
    for job_key, job in bundle["resources"]["jobs"].items():
        assert job["email_notifications"] == {"on_failure": ["${var.failure_email}"]}, job_key
        assert job["webhook_notifications"] == {
            "on_failure": [{"id": "${var.failure_webhook_id}"}]
        }, job_key
    assert "default" not in bundle["variables"]["failure_webhook_id"]  # every deploy names one


def test_prod_runs_as_a_service_principal(bundle: dict[str, Any]) -> None:
    assert bundle["targets"]["prod"]["run_as"] == {
        "service_principal_name": "${var.service_principal}"
    }
    assert "run_as" not in bundle["targets"]["dev"]  # dev runs as the deploying user


@pytest.mark.imports_logmetrics
def test_backfill_passes_its_job_parameters(bundle: dict[str, Any]) -> None:
    job = bundle["resources"]["jobs"]["logmetrics_backfill"]
    assert [p["name"] for p in job["parameters"]] == ["start", "end"]
    assert "schedule" not in job
    assert job["max_concurrent_runs"] == 1

    (task,) = job["tasks"]
    assert task["python_wheel_task"]["parameters"][3:] == [
        "--start",
        "{{job.parameters.start}}",
        "--end",
        "{{job.parameters.end}}",
    ]
    parsed = logmetrics_parser().parse_args(_arguments(bundle, "logmetrics_backfill"))
    assert parsed.command == "backfill"
    assert (str(parsed.start), str(parsed.end)) == ("2026-03-01", "2026-03-14")


# --- Databricks' typed models (make test-deploy) -------------------------------------------


def variable_values(
    bundle: dict[str, Any], target: str, given: Mapping[str, str]
) -> dict[str, Any]:
    """Each variable's value for `target` as the CLI resolves it: `given` (`--var`,
    `BUNDLE_VAR_<name>`) over the target's `variables` over the defaults. A name not declared,
    or a variable left without a value (the CLI stops on it), fails with the names."""
    declared = bundle["variables"]
    assert set(given) <= set(declared), f"not variables of the bundle: {set(given) - set(declared)}"
    values = {name: spec.get("default") for name, spec in declared.items()}
    values.update(bundle["targets"][target].get("variables", {}))
    values.update(given)
    missing = sorted(name for name, value in values.items() if value is None)
    assert not missing, f"target {target}: no value for {', '.join(missing)}"
    return values


def substituted(
    bundle: dict[str, Any], target: str, given: Mapping[str, str] = SAMPLE_REQUIRED_VARIABLES
) -> dict[str, Any]:
    """The bundle as `target` deploys it, ${...} references replaced: a variable by `given`'s
    value, else the target's, else its default (`given` by default samples for the variables
    without a default); the CLI's own substitutions by samples. Job parameters and {{...}}
    references stay: Databricks resolves them when a run starts."""
    values = variable_values(bundle, target, given)
    known = {**{f"var.{k}": str(v) for k, v in values.items()}, **SAMPLE_SUBSTITUTIONS}
    known["bundle.target"] = target
    reference = re.compile(r"\$\{([A-Za-z0-9_.]+)\}")

    def sub(node: Any) -> Any:
        if isinstance(node, dict):
            return {key: sub(value) for key, value in node.items()}
        if isinstance(node, list):
            return [sub(value) for value in node]
        if isinstance(node, str):
            for _ in range(5):  # values may reference other variables
                node = reference.sub(lambda m: known[m[1]], node)
            assert "${" not in node, node
        return node

    result: dict[str, Any] = sub(
        {key: value for key, value in bundle.items() if key not in ("variables", "targets")}
    )
    result["run_as"] = sub(bundle["targets"][target].get("run_as"))
    return result


def check_with_databricks_models(
    bundle: dict[str, Any],
    given: Mapping[str, str] = SAMPLE_REQUIRED_VARIABLES,
    targets: Iterable[str] | None = None,
) -> dict[str, int]:
    """Load every job of every target (or of `targets`), its variables `given` (`substituted`),
    through `databricks.bundles.jobs.Job.from_dict`, every dashboard through
    `databricks.bundles.dashboards.Dashboard.from_dict`, and prod's run_as through `JobRunAs`;
    raises on an unknown, misplaced or mistyped field. Returns the number of jobs and of
    dashboards loaded."""
    jobs_models = pytest.importorskip(
        "databricks.bundles.jobs", reason="databricks-bundles is in make test-deploy's venv"
    )
    dashboards_models = pytest.importorskip("databricks.bundles.dashboards")
    loaded = {"jobs": 0, "dashboards": 0}
    for target in bundle["targets"] if targets is None else targets:
        resolved = substituted(bundle, target, given)
        for job in resolved["resources"]["jobs"].values():
            jobs_models.Job.from_dict(job)
            loaded["jobs"] += 1
        for dashboard in resolved["resources"]["dashboards"].values():
            model = dashboards_models.Dashboard.from_dict(dashboard)
            assert model.as_dict() == dashboard  # nothing dropped on the way in
            loaded["dashboards"] += 1
        if resolved["run_as"] is not None:
            jobs_models.JobRunAs.from_dict(resolved["run_as"])
    return loaded


def test_the_samples_are_the_variables_without_a_default(bundle: dict[str, Any]) -> None:
    """What every deploy must give, among them the node type: it is the cloud's (an AWS type
    fails on an Azure or Google Cloud workspace), so no default picks one."""
    required = {name for name, spec in bundle["variables"].items() if "default" not in spec}
    assert required == set(SAMPLE_REQUIRED_VARIABLES)
    assert "node_type" in required


def test_every_job_and_dashboard_loads_into_databricks_typed_models(
    bundle: dict[str, Any],
) -> None:
    targets = len(bundle["targets"])
    assert check_with_databricks_models(bundle) == {"jobs": targets * 3, "dashboards": targets}


def test_the_models_really_reject_unknown_and_misplaced_fields() -> None:
    """What the check rests on: Job.from_dict rejects what it does not know, wherever it is."""
    jobs_models = pytest.importorskip("databricks.bundles.jobs")
    with pytest.raises(ValueError, match="Unexpected field 'max_retrys' for class Task"):
        jobs_models.Job.from_dict({"name": "x", "tasks": [{"task_key": "a", "max_retrys": 1}]})
    with pytest.raises(ValueError, match="Unexpected field 'schedule' for class Task"):
        jobs_models.Job.from_dict({"name": "x", "tasks": [{"task_key": "a", "schedule": {}}]})


MUTATIONS = {
    # a misspelt field in a task
    "misspelt": (
        "          max_retries: 0\n",
        "          max_retrys: 0\n",
        "Unexpected field 'max_retrys' for class Task",
    ),
    # a job-level field inside a task
    "misplaced": (
        "          max_retries: 0\n",
        "          max_retries: 0\n          max_concurrent_runs: 1\n",
        "Unexpected field 'max_concurrent_runs' for class Task",
    ),
    # a misspelt enum value
    "bad value": (
        "pause_status: ${var.nightly_pause_status}",
        "pause_status: PAUSD",
        "'PAUSD' is not a valid PauseStatus",
    ),
    # a misspelt field of the dashboard
    "dashboard field": (
        "      dataset_schema: ${var.tables_schema}\n",
        "      dataset_schemas: ${var.tables_schema}\n",
        "Unexpected field 'dataset_schemas' for class Dashboard",
    ),
    # a job's field on the dashboard
    "misplaced on the dashboard": (
        "      display_name: logmetrics\n",
        "      display_name: logmetrics\n      max_concurrent_runs: 1\n",
        "Unexpected field 'max_concurrent_runs' for class Dashboard",
    ),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_a_misspelt_field_in_databricks_yml_fails_the_check(tmp_path: Path, mutation: str) -> None:
    old, new, message = MUTATIONS[mutation]
    text = (BUNDLE_DIR / "databricks.yml").read_text()
    assert text.count(old) == 1, mutation
    mutated = tmp_path / "databricks.yml"
    mutated.write_text(text.replace(old, new))
    pytest.importorskip("databricks.bundles.jobs")
    with pytest.raises(ValueError, match=re.escape(message)):
        check_with_databricks_models(yaml.safe_load(mutated.read_text()))
