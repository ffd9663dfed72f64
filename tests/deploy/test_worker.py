"""The Airflow workers deploy/airflow/README.md installs, built by its own commands (step 3's:
the wheel with its `[local]` extra, for the spark_submit path; step 4's: the wheel alone, for
the sensor of the databricks path; tests/deploy/conftest.py builds both once per session, with
/opt/logmetrics a temporary folder), and run as the worker runs them: `logmetrics ready` answers
on both (exit 0 for a day whose ready marker is there, 5 for one whose marker is not), and on
the worker without PySpark `run` and `backfill` stop with one line that says what to install.
The spark_submit path's runs themselves (a backfill through `airflow dags test`, nightlies
through `dag.test()`) are test_nightly_end_to_end.py's, with these workers.

Collected in the Airflow venv only (`make test-deploy`), where the workers are built; nothing
here skips: a worker that cannot be built fails its tests."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pytest
from airflow_readme import Worker

DAY, NOT_YET = dt.date(2026, 11, 14), dt.date(2026, 11, 15)
MARKER = "_SUCCESS"


def _has(worker: Worker, module: str) -> bool:
    """Whether the worker's Python can import `module` (found, not imported)."""
    found = worker.python(
        "-c", f"import importlib.util; print(importlib.util.find_spec({module!r}))"
    )
    return found.strip() != "None"


def test_the_workers_hold_what_the_steps_say(spark_worker: Worker, sensor_worker: Worker) -> None:
    """Step 3's worker: PySpark and delta-spark (the `[local]` extra), the `spark-submit` and
    the Python its Variables name, the config and the job scripts where they point; step 4's:
    logmetrics without PySpark. Both venvs pass `pip check` (the pinned versions agree)."""
    variables = spark_worker.variables
    assert set(variables) == {
        "logmetrics_config",
        "logmetrics_jobs_dir",
        "logmetrics_executable",
        "logmetrics_python",
        "logmetrics_spark_submit",
    }
    assert (
        Path(variables["logmetrics_config"]).read_text()
        == (Path(__file__).parents[2] / "conf" / "local.yaml").read_text()
    )
    for script in ("nightly.py", "backfill.py", "alerts.py"):
        assert (Path(variables["logmetrics_jobs_dir"]) / script).is_file(), script
    assert Path(variables["logmetrics_python"]) == spark_worker.bin / "python"
    assert Path(variables["logmetrics_spark_submit"]).is_file()
    assert _has(spark_worker, "pyspark") and _has(spark_worker, "delta")
    assert set(sensor_worker.variables) == {"logmetrics_executable"}
    assert not _has(sensor_worker, "pyspark") and _has(sensor_worker, "logmetrics")
    for worker in (spark_worker, sensor_worker):
        assert Path(worker.variables["logmetrics_executable"]) == worker.bin / "logmetrics"
        worker.python("-m", "pip", "check")


@pytest.fixture(scope="module")
def landing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config the worker reads, naming logs by a local path: DAY's partition holds its ready
    marker, NOT_YET's is there without one."""
    root = tmp_path_factory.mktemp("landing")
    logs, clusters = root / "served_logs", root / "clusters"
    (logs / f"date={DAY}").mkdir(parents=True)
    (logs / f"date={DAY}" / MARKER).touch()
    (logs / f"date={NOT_YET}").mkdir()
    clusters.mkdir()
    config = root / "worker.yaml"
    config.write_text(
        "inputs:\n"
        f"  served_logs: {{path: '{logs}', ready_marker: {MARKER}}}\n"
        f"  clusters: {{path: '{clusters}', format: parquet}}\n"
        f"output: {{warehouse: '{root / 'warehouse'}'}}\n"
    )
    return config


def _clean(done: subprocess.CompletedProcess[str], worker: Worker) -> None:
    """No traceback from the worker's `logmetrics`: its failures are lines, not crashes."""
    output = done.stdout + done.stderr
    assert "Traceback" not in output, f"step {worker.step}'s worker:\n{output}"


@pytest.mark.parametrize("which", ["spark_worker", "sensor_worker"])
def test_ready_answers_on_the_worker(
    which: str, landing: Path, request: pytest.FixtureRequest
) -> None:
    """The sensor's command, as the DAG renders it, on each worker: exit 0 for the day whose
    marker has landed, 5 (poke again) for the day whose marker has not, naming it. On step 4's
    worker with no PySpark at all: a config naming the logs by a path needs none."""
    worker: Worker = request.getfixturevalue(which)
    ready = worker.run("ready", "--config", str(landing), "--date", str(DAY), cwd=landing.parent)
    _clean(ready, worker)
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert ready.stdout.strip().splitlines()[-1] == f"{DAY}: ready"

    args = ("ready", "--config", str(landing), "--date", str(NOT_YET))
    waiting = worker.run(*args, cwd=landing.parent)
    _clean(waiting, worker)
    assert waiting.returncode == 5, waiting.stdout + waiting.stderr
    marker = landing.parent / "served_logs" / f"date={NOT_YET}" / MARKER
    assert waiting.stderr.strip().splitlines() == [
        f"logmetrics: error: input not ready: {NOT_YET}: no {marker}; its logs have not all landed"
    ]


@pytest.mark.parametrize(
    "args",
    [("run", "--date", str(DAY)), ("backfill", "--start", str(DAY), "--end", str(DAY))],
    ids=["run", "backfill"],
)
def test_without_pyspark_a_run_says_what_to_install(
    sensor_worker: Worker, landing: Path, args: tuple[str, ...]
) -> None:
    """Step 4's worker runs only the sensor; a `run` or `backfill` there (a ready day: they get
    as far as needing Spark) exits 1 with one line that names PySpark and the extra that brings
    it, not a traceback."""
    done = sensor_worker.run(args[0], "--config", str(landing), *args[1:], cwd=landing.parent)
    _clean(done, sensor_worker)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("logmetrics: error: "), line
    assert "pyspark" in line and "[local]" in line, line
