"""Settings for the DAG tests: Airflow's production defaults, a throwaway AIRFLOW_HOME, no
example DAGs, a copy of the DAG folder as the dags-folder bundle, a LOGMETRICS_TABLES.
test_dags.py needs no database (it parses and renders); test_nightly_end_to_end.py creates a
SQLite one in AIRFLOW_HOME.

Not AIRFLOW__CORE__UNIT_TEST_MODE: it loads Airflow's own unit_tests.cfg, which among other things
turns `create_cron_data_intervals` on, i.e. changes what a cron schedule means, and would hide
the very mistake test_nightly_schedule is there to catch.

`make test-deploy` sets these too; the defaults let `pytest tests/deploy` run on its own in the
Airflow venv. In the main venv (no Airflow) they are harmless: test_dags.py is skipped there.
Run from the Airflow venv with `--confcutdir=tests/deploy`, so that tests/conftest.py (which
imports pyspark and logmetrics) is not loaded. The tests marked `imports_logmetrics` (they
import logmetrics in the test's own process: the real command line parser, the config loader)
run only where logmetrics is, the main venv (`make test`).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import tempfile

import pytest

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

HAS_LOGMETRICS = importlib.util.find_spec("logmetrics") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Where logmetrics cannot be imported (the Airflow venv), the tests that import it are
    left out, said as deselected: the main venv runs them (`make test`)."""
    if HAS_LOGMETRICS:
        return
    kept = [item for item in items if "imports_logmetrics" not in item.keywords]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
