"""deploy/databricks/databricks.yml names things that must exist: the wheel's console script,
the files it builds from and ships, the variables it references, and `logmetrics` arguments
that the real command line parser accepts. Needs only PyYAML and the repository; runs in the
main suite (and in `make test-deploy`, minus the two checks that need logmetrics itself).
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
# Sample values for the references a task's parameters may hold, to parse them as Databricks
# would pass them once resolved.
SAMPLE_JOB_PARAMETERS = {"start": "2026-03-01", "end": "2026-03-14"}


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
    assert wheel_tasks == 2


def test_spark_python_tasks_name_existing_job_scripts(bundle: dict[str, Any]) -> None:
    for job_key, _, task in tasks(bundle):
        python_file = task.get("spark_python_task", {}).get("python_file")
        if python_file is not None:
            path = (BUNDLE_DIR / python_file).resolve()
            assert path.parent == REPO / "jobs" and path.is_file(), (job_key, python_file)


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


def _arguments(bundle: dict[str, Any], job_key: str) -> list[str]:
    job = bundle["resources"]["jobs"][job_key]
    (task,) = job["tasks"]
    raw = task["python_wheel_task"]["parameters"]
    return [resolve(str(value), bundle["variables"], job) for value in raw]


def test_nightly_runs_yesterday_on_a_daily_utc_schedule(bundle: dict[str, Any]) -> None:
    job = bundle["resources"]["jobs"]["logmetrics_nightly"]
    assert job["schedule"]["quartz_cron_expression"] == "0 0 2 * * ?"
    assert job["schedule"]["timezone_id"] == "UTC"
    assert job["schedule"]["pause_status"] == "${var.nightly_pause_status}"
    assert job["max_concurrent_runs"] == 1

    args = _arguments(bundle, "logmetrics_nightly")
    assert args == ["run", "--config", "/Volumes/main/logmetrics/config/logmetrics.yaml"]
    parsed = logmetrics_parser().parse_args(args)
    assert parsed.command == "run"
    assert parsed.date is None  # logmetrics computes yesterday, UTC
    assert parsed.config == ["/Volumes/main/logmetrics/config/logmetrics.yaml"]


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
