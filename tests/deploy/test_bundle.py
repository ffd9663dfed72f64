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
import importlib.util
import re
import tomllib
from collections.abc import Iterator
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
    "failure_webhook_id": "0c6a5f0e-1d1b-4c43-9d5e-5a2d1e7b9f10",
    "service_principal": "6f1d2e3c-4b5a-6978-8a9b-0c1d2e3f4a5b",
}


def logmetrics_parser() -> argparse.ArgumentParser:
    """The real `logmetrics` command line parser. Skipped only where logmetrics is not installed
    at all: the Airflow venv of `make test-deploy`; the main suite always runs these checks."""
    if importlib.util.find_spec("logmetrics") is None:
        pytest.skip("logmetrics is not installed in this venv; the main suite checks this")
    from logmetrics.cli import _parser

    return _parser()


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
        source = REPO / "src" / Path(*module.split(".")).with_suffix(".py")
        assert re.search(rf"^def {function}\(", source.read_text(), re.MULTILINE), target
        # the wheel the task installs is the one the artifact builds
        (library,) = task["libraries"]
        assert (BUNDLE_DIR / library["whl"]).parent.resolve() == dist, job_key
        assert (BUNDLE_DIR / library["whl"]).name.endswith(".whl")
    assert wheel_tasks == 4  # nightly run and alerts, backfill, maintain


# The bundle's tasks and the command each runs.
COMMANDS = {
    ("logmetrics_nightly", "run"): "run",
    ("logmetrics_nightly", "alerts"): "alerts",
    ("logmetrics_backfill", "backfill"): "backfill",
    ("logmetrics_maintain", "maintain"): "maintain",
}


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
    from logmetrics.cli import _run_day

    assert str(_run_day(parsed)) == "2026-03-01"  # the day before the trigger date


def test_nightly_alerts_judge_the_day_the_run_computed_and_fail_the_job(
    bundle: dict[str, Any],
) -> None:
    run, alerts = bundle["resources"]["jobs"]["logmetrics_nightly"]["tasks"]
    assert alerts["task_key"] == "alerts"
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
    from logmetrics.cli import _alerts_range, _run_day

    parsed = parser.parse_args(args)
    assert parsed.fail_on_alert is True
    day = _run_day(parser.parse_args(_arguments(bundle, "logmetrics_nightly", "run")))
    assert _alerts_range(parsed) == (day, day)


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


def substituted(bundle: dict[str, Any], target: str) -> dict[str, Any]:
    """The bundle as `target` deploys it, ${...} references replaced: a variable by the
    target's value, else its default, else a sample (variables without a default); the CLI's
    own substitutions by samples. Job parameters and {{...}} references stay: Databricks
    resolves them when a run starts."""
    values = {name: spec.get("default") for name, spec in bundle["variables"].items()}
    values.update(bundle["targets"][target].get("variables", {}))
    missing = {name for name, value in values.items() if value is None}
    assert missing == set(SAMPLE_REQUIRED_VARIABLES), missing
    values.update(SAMPLE_REQUIRED_VARIABLES)
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


def check_with_databricks_models(bundle: dict[str, Any]) -> int:
    """Load every job of every target through `databricks.bundles.jobs.Job.from_dict`, and
    prod's run_as through `JobRunAs`; raises on an unknown, misplaced or mistyped field.
    Returns the number of jobs loaded."""
    jobs_models = pytest.importorskip(
        "databricks.bundles.jobs", reason="databricks-bundles is in make test-deploy's venv"
    )
    loaded = 0
    for target in bundle["targets"]:
        resolved = substituted(bundle, target)
        for job in resolved["resources"]["jobs"].values():
            jobs_models.Job.from_dict(job)
            loaded += 1
        if resolved["run_as"] is not None:
            jobs_models.JobRunAs.from_dict(resolved["run_as"])
    return loaded


def test_every_job_loads_into_databricks_typed_models(bundle: dict[str, Any]) -> None:
    assert check_with_databricks_models(bundle) == len(bundle["targets"]) * 3


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
