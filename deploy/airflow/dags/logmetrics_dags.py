"""Airflow DAGs for logmetrics: `logmetrics_nightly` (one UTC day) and `logmetrics_backfill`.

What: each DAG renders one `logmetrics` command (`run --config C --date D`, or
`backfill --config C --start S --end E`) and hands it to Spark, on one of two paths:

- `spark_submit` (default): SparkSubmitOperator runs `jobs/nightly.py` / `jobs/backfill.py` (which
  prepend `run` / `backfill`) with Delta's jar, through the Spark connection; the `spark-submit`
  and the job's Python are the worker's logmetrics venv's when Variables name them.
- `databricks`: DatabricksSubmitRunOperator runs the logmetrics wheel as a `python_wheel_task`
  (entry point `logmetrics`, the full argument list) on a new job cluster.

The nightly DAG first waits, on the Airflow worker whichever path runs the job, until the day's
logs have landed: the sensor `wait_for_logs` pokes `logmetrics ready --config C --date D` in
reschedule mode (the worker slot is free between pokes) every `ready_poke_interval_seconds`, for
at most `ready_timeout_seconds` (DAG params). Exit 5 (not ready) pokes again; any other failure (2,
a bad config) fails the task at once, since waiting would not mend it. With no
`inputs.served_logs.ready_marker` in the config `ready` judges the day by its log files: it
answers 5 until a file holds a row of the day.

The nightly DAG then runs, on the same path, `logmetrics alerts --config C --start D --end D
--fail-on-alert` (`jobs/alerts.py`): the day just published judged against its baseline, from
the daily table alone. It exits 4 on an alert, so the DAG run turns red (and notifies) without
the day being recomputed; it has no retries, since an alert is a verdict on data, not a glitch.

Both DAGs declare the tables a run publishes as Airflow Assets, named by their location (the
environment variable LOGMETRICS_TABLES, read when the file is parsed: a path or URI as
`output.warehouse` takes it, or a Databricks schema, plus the table's name): when a run or
backfill task succeeds, each table gets an asset event, and a DAG scheduled on those Assets
runs after it (deploy/airflow/README.md, "Downstream DAGs"). The nightly DAG starts on
LOGMETRICS_START_DATE (YYYY-MM-DD, read when the file is parsed; 2026-11-01 without it). No
LOGMETRICS_TABLES, or either of the two in another form, is a warning, never an import error:
the file always loads, with no Assets or from the default day, and the warning's line is also
at the end of both DAGs' docs.

Why this shape: the DAGs are thin on purpose. Dates, data-quality gates and the idempotent
per-date writes (`replaceWhere` on `metric_date`) live in logmetrics, so a retry, a catch-up run
or a re-run of any day is safe and behaves exactly like the CLI. This file imports nothing from
logmetrics (the scheduler needs none of Spark's dependencies) and reads no Variable when it is
parsed (LOGMETRICS_TABLES and LOGMETRICS_START_DATE come from the environment): the path is
picked per run by the `choose_runner` branch task, and every other setting is a Jinja
`var.value` lookup rendered when the task runs. Credentials live only in Airflow connections;
their ids are Variables too. deploy/airflow/README.md lists the Variables.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import subprocess
import warnings
from pathlib import PurePosixPath
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.databricks.operators.databricks import DatabricksSubmitRunOperator
from airflow.sdk import (
    DAG,
    Asset,
    BaseSensorOperator,
    CronDataIntervalTimetable,
    Param,
    Variable,
    task,
)
from airflow.sdk.exceptions import AirflowFailException

# Under spark-submit logmetrics uses the session it is given, so Delta's jar and its two session
# settings are passed here. The jar is the cluster's Spark line's: the Variable
# logmetrics_delta_package names it (deploy/airflow/README.md: `io.delta:delta-spark_2.13:4.0.1`
# on Spark 4.0), by default the one for Spark 4.1, logmetrics.session.DELTA_PACKAGE
# (tests/deploy/test_dags.py checks they match). The two settings are the same on both lines.
DELTA_PACKAGE = "io.delta:delta-spark_4.1_2.13:4.3.1"
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

RUNNERS = ("spark_submit", "databricks")  # values of the Variable logmetrics_runner = task ids
DEFAULT_RUNNER = "spark_submit"

# What parsing found wrong in the environment (LOGMETRICS_TABLES, LOGMETRICS_START_DATE), a line
# each: a Python warning (the DAG processor logs it, DagBag.captured_warnings holds it) and a line
# of both DAGs' docs, never an import error: the scheduler keeps showing and running both DAGs.
PARSE_WARNINGS: list[str] = []


def _parse_warning(line: str) -> None:
    PARSE_WARNINGS.append(line)
    warnings.warn(line, UserWarning, stacklevel=2)


# The nightly DAG's first day, from the environment of the scheduler and the DAG processor (read
# when the file is parsed, like LOGMETRICS_TABLES). Catch-up runs every day from there on, one at
# a time; load older history with logmetrics_backfill instead (several days per Spark job).
START_DATE_ENV = "LOGMETRICS_START_DATE"
DEFAULT_START_DATE = dt.date(2026, 11, 1)


def start_date(value: str | None) -> dt.date:
    """The day `value` names (YYYY-MM-DD), or the default when it is unset; ValueError, one line
    that says what is kept, for anything else."""
    if not value:
        return DEFAULT_START_DATE
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        with contextlib.suppress(ValueError):  # 2026-02-30
            return dt.date.fromisoformat(value)
    raise ValueError(
        f"{START_DATE_ENV} is {value!r}, not a day as YYYY-MM-DD: the nightly DAG starts on "
        f"{DEFAULT_START_DATE}, the default"
    )


try:
    _first_day = start_date(os.environ.get(START_DATE_ENV))
except ValueError as error:
    _parse_warning(str(error))
    _first_day = DEFAULT_START_DATE
START_DATE = dt.datetime.combine(_first_day, dt.time(), tzinfo=dt.UTC)

# The UTC day a run computes: the day its data interval starts on. With the interval timetable
# below that is the logical date's day (`ds`); unlike `ds` it stays right for a manual run,
# whose interval Airflow infers as the last complete day.
DAY = "{{ data_interval_start | ds }}"

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "logmetrics",
    # Every task is idempotent (a day is replaced in one Delta commit), so retrying is safe; the
    # growing delay also rides out late upstream data behind a blocking data-quality check.
    "retries": 3,
    "retry_delay": dt.timedelta(minutes=10),
    "retry_exponential_backoff": True,
    "max_retry_delay": dt.timedelta(hours=2),
}


def _var(key: str, default: str | None = None) -> str:
    """A Variable, looked up when the task's templates are rendered (never at parse time)."""
    if default is None:  # required: rendering fails with "Variable ... not found"
        return "{{ var.value." + key + " }}"
    return "{{ var.value.get('" + key + "', '" + default + "') }}"


CONFIG = _var("logmetrics_config", "conf/local.yaml")
# The config as the Airflow worker sees it, for the sensor: the run's own unless a Variable says
# otherwise (on Databricks the run's config and logs are paths only the cluster can read).
READY_CONFIG = (
    "{{ var.value.get('logmetrics_ready_config', "
    "var.value.get('logmetrics_config', 'conf/local.yaml')) }}"
)

# The tables a run or backfill publishes (those every computed day writes, for the readers of
# the metrics: BI refreshes, exports), each an Asset named by its location. Not the operational
# ones (quarantine, missing_cluster_chunks, job_runs).
PUBLISHED_TABLES = (
    "unique_clusters_by_query",
    "unique_clusters_daily",
    "unique_clusters_k_sweep",
    "redundancy_cost_daily",
    "unique_clusters_crowding",
    "unique_clusters_alerts",
    "data_quality",
)
TABLES_ENV = "LOGMETRICS_TABLES"


def tables_uri(tables: str | None) -> str:
    """Where the config writes the tables, as the URI their Assets are named under: a warehouse
    as `output.warehouse` takes it, an absolute path (as a file:// URI) or a URI (s3://bucket/
    warehouse, file:///srv/logmetrics/warehouse), or a Databricks schema (output.catalog and
    output.schema: databricks://<workspace host>/<catalog>/<schema>). ValueError, one line that
    says what to set, for anything else."""
    where = (tables or "").rstrip("/")
    if where.startswith("/"):
        return PurePosixPath(where).as_uri()
    uri = re.match(r"([a-z][a-z0-9+.-]*)://([^/]*)(/.*)?$", where)
    if uri is not None:
        scheme, authority, path = uri[1], uri[2], uri[3] or ""
        if scheme == "databricks":
            if authority and len(path.split("/")) == 3 and all(path.split("/")[1:]):
                return where
        elif scheme == "file":
            if not authority and path:
                return where
        elif authority:
            return where
    shown = "not set" if not tables else repr(tables)
    raise ValueError(
        f"{TABLES_ENV} is {shown}, so the run tasks publish no Assets: set it, on the scheduler "
        "and the DAG processor, to where the config writes the tables: an absolute path or a URI "
        "as output.warehouse takes it (/srv/logmetrics/warehouse, s3://bucket/warehouse) or "
        "databricks://<workspace host>/<catalog>/<schema>"
    )


def table_assets(tables: str | None) -> list[Asset]:
    """An Asset per published table, `<tables>/<table>`; none, and a parse warning, when
    `tables` is not a location the Assets can be named by."""
    try:
        where = tables_uri(tables)
    except ValueError as error:
        _parse_warning(str(error))
        return []
    try:
        return [Asset(f"{where}/{table}") for table in PUBLISHED_TABLES]
    except ValueError as error:  # Airflow's own rules for an Asset's URI: a reserved scheme
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        _parse_warning(
            f"{TABLES_ENV} is {tables!r}, which Airflow refuses as an Asset's URI ({reason}), "
            "so the run tasks publish no Assets"
        )
        return []


TABLE_ASSETS = table_assets(os.environ.get(TABLES_ENV))
# Both DAGs' docs: this file's docstring, and what parsing it warned about.
DOC_MD = (__doc__ or "") + "".join(f"\n\n**Parse warning:** {line}" for line in PARSE_WARNINGS)

NOT_READY = 5  # `logmetrics ready`'s (and `run`'s) exit status while a day's logs are landing
READY_POKE_INTERVAL = 5 * 60  # seconds: defaults of the nightly DAG's params
READY_TIMEOUT = 6 * 60 * 60


class _SparkSubmit(SparkSubmitOperator):
    """SparkSubmitOperator whose connection id and spark-submit are rendered too (the provider's
    are not template fields), so they can come from Variables like everything else, and which
    runs the job's Python on `python` when it is set.

    The operator's `spark_binary` is not held to the provider's list of names on the PATH (that
    list is for the connection's `spark-binary` extra), so a Variable can name the spark-submit
    of the `[local]` extra by its path; empty, the connection chooses, as before. `python`
    becomes spark.pyspark.driver.python and spark.pyspark.python only when it is set: a conf
    overrides PYSPARK_PYTHON in the worker's environment, which a deployment may rely on.
    """

    template_fields = (
        *SparkSubmitOperator.template_fields,
        "_conn_id",
        "_spark_binary",
        "python",
    )

    def __init__(self, *, python: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.python = python

    def _get_hook(self) -> Any:
        if self.python:  # rendered by now: the Variable logmetrics_python
            self.conf = {
                **(self.conf or {}),
                "spark.pyspark.driver.python": self.python,
                "spark.pyspark.python": self.python,
            }
        return super()._get_hook()


class _WheelSubmitRun(DatabricksSubmitRunOperator):
    """DatabricksSubmitRunOperator that does not copy DAG params into the wheel task.

    Since apache-airflow-providers-databricks 7.16 the operator fills an empty
    `python_wheel_task.named_parameters` with the DAG's params (apache/airflow#66613). Beside our
    positional `parameters` that would run `logmetrics --start=... --end=...` or be rejected.
    DatabricksRunNowOperator has an opt-out (`forward_dag_params`), this operator has none, so the
    injected slot is dropped here; tests/deploy checks the payload that is actually submitted.
    """

    def _prepare_submit_json(self, context: Any) -> dict[str, Any]:
        payload: dict[str, Any] = super()._prepare_submit_json(context)
        payload.get("python_wheel_task", {}).pop("named_parameters", None)
        return payload


class _LogsReady(BaseSensorOperator):
    """Pokes `logmetrics ready ...` (the `command` list) on the worker until it exits 0; exit 5
    means not yet, any other exit fails the task at once (AirflowFailException: no retry).

    Not the standard provider's BashSensor, although its `retry_exit_code=5` means the same: it
    runs its script through bash in a fresh temporary directory, where the relative default
    config (`conf/local.yaml`) would not be the file the run task reads, and a Variable holding a
    space would split. This runs the argument list in the worker's directory, as spark-submit
    does. Its poke interval and timeout are the run's params, read when the task runs.
    """

    template_fields = ("command",)

    def __init__(self, *, command: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.command = command

    def execute(self, context: Any) -> Any:
        params = context["params"]
        self.poke_interval = float(params["ready_poke_interval_seconds"])
        self.timeout = float(params["ready_timeout_seconds"])
        return super().execute(context)

    def poke(self, context: Any) -> bool:
        try:
            done = subprocess.run(
                self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        except OSError as error:  # no such executable: the Variable logmetrics_executable
            raise AirflowFailException(f"cannot run {self.command[0]!r}: {error}") from error
        for line in done.stdout.splitlines():
            self.log.info("%s", line)
        if done.returncode == 0:
            return True
        if done.returncode == NOT_READY:
            return False
        raise AirflowFailException(f"{self.command[0]} ready exited with {done.returncode}")


@task.branch(task_id="choose_runner")
def choose_runner(params: dict[str, Any] | None = None) -> str:
    """Pick the path for this run from the Variable logmetrics_runner; fail fast on a bad value
    (and, for a backfill, on start after end) before any cluster is started.

    `params` is filled in by Airflow from the run's context.
    """
    runner = Variable.get("logmetrics_runner", default=DEFAULT_RUNNER)
    if runner not in RUNNERS:
        raise ValueError(f"Variable logmetrics_runner is {runner!r}; expected one of {RUNNERS}")
    params = params or {}
    if "start" in params and params["start"] > params["end"]:
        raise ValueError(f"start {params['start']} is after end {params['end']}")
    return runner


def _spark_submit(task_id: str, script: str, args: list[str], name: str, **kwargs: Any) -> Any:
    """SparkSubmitOperator running `jobs/<script>` (which prepends its command) with Delta."""
    return _SparkSubmit(
        task_id=task_id,
        conn_id=_var("logmetrics_spark_conn_id", "spark_default"),
        # Empty by default: the connection's spark-binary (spark-submit on the worker's PATH).
        spark_binary=_var("logmetrics_spark_submit", ""),
        python=_var("logmetrics_python", ""),  # empty by default: PYSPARK_PYTHON, or python3
        application=_var("logmetrics_jobs_dir", "jobs") + f"/{script}",
        application_args=args,
        packages=_var("logmetrics_delta_package", DELTA_PACKAGE),
        conf=DELTA_CONF,
        name=name,
        **kwargs,
    )


def _databricks(task_id: str, command: str, args: list[str], name: str, **kwargs: Any) -> Any:
    """A one-time Databricks run of the wheel's `logmetrics <command> <args>` on a job cluster."""
    return _WheelSubmitRun(
        task_id=task_id,
        databricks_conn_id=_var("logmetrics_databricks_conn_id", "databricks_default"),
        json={
            "run_name": name,
            "new_cluster": {
                "spark_version": _var("logmetrics_databricks_spark_version", "17.3.x-scala2.13"),
                # Cloud-specific, so no default: an AWS type fails on Azure or Google Cloud.
                "node_type_id": _var("logmetrics_databricks_node_type"),
                "num_workers": _var("logmetrics_databricks_num_workers", "2"),
                "data_security_mode": "SINGLE_USER",  # Unity Catalog access (volumes, tables)
            },
            "libraries": [{"whl": _var("logmetrics_databricks_wheel")}],
            "python_wheel_task": {
                "package_name": "logmetrics",
                "entry_point": "logmetrics",
                "parameters": [command, *args],
            },
        },
        **kwargs,
    )


def _wait_for_logs(day: str) -> Any:
    """The sensor that holds the run until `logmetrics ready` says `day`'s logs have landed."""
    return _LogsReady(
        task_id="wait_for_logs",
        command=[_var("logmetrics_executable", "logmetrics"), "ready"]
        + ["--config", READY_CONFIG, "--date", day],
        mode="reschedule",
        poke_interval=READY_POKE_INTERVAL,  # replaced by the run's params when it runs
        timeout=READY_TIMEOUT,
        # One poke is one short process; a hung one (a remote store) frees the slot.
        execution_timeout=dt.timedelta(minutes=10),
    )


def _runner_tasks(
    script: str, command: str, args: list[str], name: str, after: Any = None
) -> tuple[Any, Any]:
    """[after >>] choose_runner >> [spark_submit, databricks], both running
    `logmetrics <command> <args>` and publishing the tables' Assets (the path that ran emits
    their events; the skipped one none); returns the two path tasks."""
    spark_submit = _spark_submit("spark_submit", script, args, name, outlets=TABLE_ASSETS)
    databricks = _databricks("databricks", command, args, name, outlets=TABLE_ASSETS)
    branch = choose_runner()
    if after is not None:
        after >> branch
    branch >> [spark_submit, databricks]
    return spark_submit, databricks


def _alerts_tasks(paths: tuple[Any, Any], day: str, name: str) -> None:
    """After each path's run, on the same path: `logmetrics alerts` for `day`, failing on an
    alert (exit 4) with no retry. The branch's skip of the other path reaches its alerts task."""
    args = ["--config", CONFIG, "--start", day, "--end", day, "--fail-on-alert"]
    settings: dict[str, Any] = {"retries": 0, "execution_timeout": dt.timedelta(hours=1)}
    spark_submit, databricks = paths
    spark_submit >> _spark_submit("spark_submit_alerts", "alerts.py", args, name, **settings)
    databricks >> _databricks("databricks_alerts", "alerts", args, name, **settings)


with DAG(
    dag_id="logmetrics_nightly",
    description="logmetrics run for one UTC day, the day the data interval starts on",
    # 02:00 UTC: the day before is complete, with two hours' grace for late log lines. An interval
    # timetable (not Airflow 3's default trigger timetable for cron strings) makes the run at
    # D+1 02:00 cover [D 02:00, D+1 02:00), so its logical date, `ds`, is the day D.
    schedule=CronDataIntervalTimetable("0 2 * * *", timezone="UTC"),
    start_date=START_DATE,
    # catchup + one run at a time: after an outage the missed days run oldest first, one after
    # another. In order, because each day's volume check compares it with the 7 days before;
    # one at a time, because concurrent jobs would write the same Delta tables.
    catchup=True,
    max_active_runs=1,
    default_args={
        **DEFAULT_ARGS,
        # Days are independent (a day is computed from that day's logs only), so a day that
        # fails, e.g. a blocking data-quality check, must not hold back the days after it: they
        # are published and the failed run stays red until it is fixed and cleared.
        "depends_on_past": False,
        "execution_timeout": dt.timedelta(hours=4),
    },
    # How the sensor waits for the day's logs; a manual run may set others.
    params={
        "ready_poke_interval_seconds": Param(
            READY_POKE_INTERVAL,
            type="integer",
            minimum=1,
            description="seconds between two `logmetrics ready` checks of the day's logs",
        ),
        "ready_timeout_seconds": Param(
            READY_TIMEOUT,
            type="integer",
            minimum=0,
            description="seconds from the first check after which a day not ready fails the run",
        ),
    },
    tags=["logmetrics"],
    doc_md=DOC_MD,
):
    nightly = _runner_tasks(
        script="nightly.py",
        command="run",
        args=["--config", CONFIG, "--date", DAY],
        name="logmetrics-nightly-" + DAY,
        after=_wait_for_logs(DAY),
    )
    _alerts_tasks(nightly, DAY, name="logmetrics-alerts-" + DAY)


_DATE = {"type": "string", "format": "date", "pattern": r"^\d{4}-\d{2}-\d{2}$"}

with DAG(
    dag_id="logmetrics_backfill",
    description="logmetrics backfill for an inclusive range of UTC days, triggered by hand",
    schedule=None,
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,  # two backfills at once would write the same Delta tables
    default_args={**DEFAULT_ARGS, "execution_timeout": dt.timedelta(hours=24)},
    params={
        "start": Param(description="first UTC day, YYYY-MM-DD", **_DATE),
        "end": Param(description="last UTC day, YYYY-MM-DD (inclusive)", **_DATE),
    },
    tags=["logmetrics"],
    doc_md=DOC_MD,
):
    _runner_tasks(
        script="backfill.py",
        command="backfill",
        args=["--config", CONFIG, "--start", "{{ params.start }}", "--end", "{{ params.end }}"],
        name="logmetrics-backfill-{{ params.start }}-{{ params.end }}",
    )
