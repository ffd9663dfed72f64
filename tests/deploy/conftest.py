"""Settings for the DAG tests: Airflow's production defaults, a throwaway AIRFLOW_HOME, no
example DAGs, a copy of the DAG folder as the dags-folder bundle, a LOGMETRICS_TABLES.
test_dags.py needs no database (it parses and renders); test_nightly_end_to_end.py creates a
SQLite one in AIRFLOW_HOME.

Not AIRFLOW__CORE__UNIT_TEST_MODE: it loads Airflow's own unit_tests.cfg, which among other things
turns `create_cron_data_intervals` on, i.e. changes what a cron schedule means, and would hide
the very mistake test_nightly_schedule is there to catch.

`make test-deploy` sets these too; the defaults let `pytest tests/deploy` run on its own in the
Airflow venv. In the main venv (no Airflow) they are harmless: test_dags.py is not collected there.
Run from the Airflow venv with `--confcutdir=tests/deploy`, so that tests/conftest.py (which
imports pyspark and logmetrics) is not loaded.

Each venv runs what it can: the modules that need Airflow (test_dags.py,
test_nightly_end_to_end.py, test_worker.py) are collected only where Airflow is, and the tests
marked `imports_logmetrics` (they import logmetrics in the test's own process: the real command
line parser, the config loader) only where logmetrics is, the main venv (`make test`); the
Airflow venv runs logmetrics only as a worker does, as a process of the README's worker venvs,
which the fixtures below build once per session.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from airflow_readme import SENSOR_WORKER, SPARK_WORKER, Worker, install_worker, step
from readme_shell import REPO, commands

os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
if "AIRFLOW_HOME" not in os.environ:  # never write an airflow.cfg into ~/airflow
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="airflow-home-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
# The DAG bundle `dag.test()` syncs to the metadata database (test_nightly_end_to_end.py),
# read when Airflow loads: a copy of deploy/airflow/dags, beside which that test writes the
# README's downstream DAG, as a deploy would hold it.
if "AIRFLOW__CORE__DAGS_FOLDER" not in os.environ:
    bundle = tempfile.mkdtemp(prefix="airflow-dags-")
    atexit.register(shutil.rmtree, bundle, ignore_errors=True)
    dags = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "airflow", "dags")
    shutil.copy(os.path.join(dags, "logmetrics_dags.py"), bundle)
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = bundle
# The downstream DAG starts unpaused when dag.test() syncs it: asset events queue runs of
# unpaused DAGs only (read once, when airflow.models.dag is imported).
os.environ.setdefault("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "False")
# Where the DAGs' Assets say the tables are (their file reads it when it is parsed).
os.environ.setdefault("LOGMETRICS_TABLES", "s3://logmetrics-tests/warehouse")

HAS_AIRFLOW = importlib.util.find_spec("airflow") is not None
HAS_LOGMETRICS = importlib.util.find_spec("logmetrics") is not None
if not HAS_AIRFLOW:  # the main venv: make test-deploy runs these
    collect_ignore = ["test_dags.py", "test_nightly_end_to_end.py", "test_worker.py"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Where logmetrics cannot be imported (the Airflow venv), the tests that import it are
    left out, said as deselected: the main venv runs them (`make test`)."""
    if HAS_LOGMETRICS:
        return
    kept = [item for item in items if "imports_logmetrics" not in item.keywords]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


# --- the README's workers ------------------------------------------------------------------

# Step 3's worker (the wheel with its [local] extra: PySpark, its spark-submit, delta-spark) and
# step 4's (the wheel alone), built by the README's own commands (tests/deploy/airflow_readme.py)
# once per session, in the background from the end of collection when a collected test needs
# one, while the tests that need neither run: the wheel by the steps' `make wheel`, then step 3's
# install, which the end-to-end runs wait for first (about a minute of pip with its cache warm),
# then step 4's, during their first Spark runs. One after the other, not side by side: on 2 cores
# two installs at once held the first Spark run back until both were done.
WORKER_FIXTURES = {"spark_worker", "sensor_worker", "readme_wheel"}
_BUILDING: dict[str, Future[Any]] = {}
_SECONDS: dict[str, float] = {}  # each build's time, and the tests' wait for it: the summary


def _timed(name: str, build: Callable[[], Any]) -> Any:
    started = time.monotonic()
    try:
        return build()
    finally:
        _SECONDS[name] = time.monotonic() - started


def _make_wheel() -> Path:
    """The steps' `make wheel`, run as written: the wheel it leaves in dist/."""
    steps = [command for n in (SPARK_WORKER, SENSOR_WORKER) for command in commands(step(n))]
    makes = {command.argv for command in steps if command.argv[0] == "make"}
    assert makes == {("make", "wheel")}, makes
    done = subprocess.run(("make", "wheel"), cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = (REPO / "dist").glob("logmetrics-*.whl")
    return built


def _build_workers() -> None:
    """The wheel, then step 3's worker, then step 4's: a future each."""
    root = Path(tempfile.mkdtemp(prefix="logmetrics-workers-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    pool = ThreadPoolExecutor(1, "worker-install")  # in the order submitted
    wheel = pool.submit(_timed, "make wheel", _make_wheel)
    _BUILDING["wheel"] = wheel

    def install(number: int) -> Worker:
        wheel.result()  # raises the wheel's failure into each worker's
        return _timed(f"step {number}", lambda: install_worker(number, root / f"step-{number}"))

    for name, number in (("spark_worker", SPARK_WORKER), ("sensor_worker", SENSOR_WORKER)):
        _BUILDING[name] = pool.submit(install, number)
    pool.shutdown(wait=False)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly or not HAS_AIRFLOW:
        return
    if any(WORKER_FIXTURES & set(getattr(item, "fixturenames", ())) for item in session.items):
        _build_workers()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The builds no test came to wait for are not started (a run stopped early, `-x`); the
    one under way, if any, ends before the process does."""
    for future in _BUILDING.values():
        future.cancel()


def _built(name: str) -> Any:
    """What the background build made (started here if collection did not): its error, if it
    failed, fails the test; nothing here skips."""
    if not _BUILDING:
        _build_workers()
    started = time.monotonic()
    try:
        return _BUILDING[name].result()
    finally:
        waited = time.monotonic() - started
        _SECONDS["waited"] = _SECONDS.get("waited", 0.0) + waited


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line: what the README's workers cost, and how much of it the tests waited for."""
    if _SECONDS:
        built = ", ".join(f"{name} {s:.0f} s" for name, s in _SECONDS.items() if name != "waited")
        terminalreporter.write_line(
            f"the README's workers, built in the background: {built}; "
            f"the tests waited {_SECONDS.get('waited', 0.0):.0f} s for them"
        )


@pytest.fixture(scope="session")
def readme_wheel() -> Path:
    """The wheel the README's `make wheel` built, which both workers install."""
    return _built("wheel")


@pytest.fixture(scope="session")
def spark_worker() -> Worker:
    """Step 3's worker: the wheel with its `[local]` extra, the config and `jobs/`."""
    return _built("spark_worker")


@pytest.fixture(scope="session")
def sensor_worker() -> Worker:
    """Step 4's worker: the wheel alone, no PySpark."""
    return _built("sensor_worker")
