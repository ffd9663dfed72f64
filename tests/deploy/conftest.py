"""Settings for the DAG tests: Airflow's production defaults, a throwaway AIRFLOW_HOME, no
example DAGs, the DAG folder as the dags-folder bundle. test_dags.py needs no database (it
parses and renders); test_nightly_end_to_end.py creates a SQLite one in AIRFLOW_HOME.

Not AIRFLOW__CORE__UNIT_TEST_MODE: it loads Airflow's own unit_tests.cfg, which among other things
turns `create_cron_data_intervals` on, i.e. changes what a cron schedule means, and would hide
the very mistake test_nightly_schedule is there to catch.

`make test-deploy` sets these too; the defaults let `pytest tests/deploy` run on its own in the
Airflow venv. In the main venv (no Airflow) they are harmless: test_dags.py is skipped there.
Run from the Airflow venv with `--confcutdir=tests/deploy`, so that tests/conftest.py (which
imports pyspark and logmetrics) is not loaded.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# The DAG bundle `dag.test()` syncs from (test_nightly_end_to_end.py): read when Airflow loads.
os.environ.setdefault(
    "AIRFLOW__CORE__DAGS_FOLDER",
    os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "airflow", "dags"),
)
if "AIRFLOW_HOME" not in os.environ:  # never write an airflow.cfg into ~/airflow
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="airflow-home-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
