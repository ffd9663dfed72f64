"""DAG integrity tests for deploy/airflow/dags (run by `make test-deploy`, in .venv-airflow).

They load the DAG folder the way the scheduler does, then render each task for a given run the
way a worker does (Variables come from AIRFLOW_VAR_* environment variables, connections from
AIRFLOW_CONN_*), and check the exact `logmetrics` arguments each path would run. Nothing here
imports logmetrics: the Airflow venv has none of its dependencies.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

pytest.importorskip("airflow", reason="DAG tests run in the Airflow venv: make test-deploy")

from airflow.dag_processing.dagbag import DagBag
from airflow.providers.databricks.operators.databricks import (
    DatabricksSubmitRunOperator,
)
from airflow.sdk import Asset, AssetAll, BaseSensorOperator, CronDataIntervalTimetable
from airflow.sdk.api.datamodels._generated import DagRun, TIRunContext
from airflow.sdk.bases import sensor as sensor_module
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowRescheduleException,
    AirflowRuntimeError,
    AirflowSensorTimeout,
    ParamValidationError,
)
from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
from airflow.serialization.encoders import coerce_to_core_timetable
from airflow.serialization.serialized_objects import DagSerialization
from airflow.timetables.base import DataInterval, TimeRestriction
from published import PUBLISHED, downstream_dag_source
from source_constants import string_constants

# A DAG file's parse warnings are checked where they are kept (DagBag.captured_warnings), not
# printed again: the DagBag re-emits each under the file's path, which is what this ignores (the
# warning the file itself raises is attributed to its module and still reaches the DagBag).
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:.*/logmetrics_dags")

REPO = Path(__file__).resolve().parents[2]
DAG_FOLDER = REPO / "deploy" / "airflow" / "dags"
CONFIG = "/etc/logmetrics/prod.yaml"
WHEEL = "/Volumes/main/logmetrics/wheels/logmetrics-0.1.0-py3-none-any.whl"
NODE_TYPE = "Standard_E4ds_v5"  # an Azure workspace's
UTC = dt.UTC
RANGE = {"start": "2026-03-01", "end": "2026-03-14"}
BACKFILL_ARGS = ["--config", CONFIG, "--start", "2026-03-01", "--end", "2026-03-14"]


@pytest.fixture(scope="module")
def dagbag() -> DagBag:
    return DagBag(dag_folder=str(DAG_FOLDER))


@pytest.fixture
def dags() -> dict[str, Any]:
    """Freshly parsed DAGs, as each worker process has: rendering writes the rendered values
    into the task objects, and resolving params writes their values into the DAG's Params."""
    return dict(DagBag(dag_folder=str(DAG_FOLDER)).dags)


@pytest.fixture
def variables(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The Variables a deployment sets (the config path, the wheel and the node type); others
    keep defaults."""
    for key in list(os.environ):
        if key.startswith("AIRFLOW_VAR_LOGMETRICS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("AIRFLOW_VAR_LOGMETRICS_CONFIG", CONFIG)
    monkeypatch.setenv("AIRFLOW_VAR_LOGMETRICS_DATABRICKS_WHEEL", WHEEL)
    monkeypatch.setenv("AIRFLOW_VAR_LOGMETRICS_DATABRICKS_NODE_TYPE", NODE_TYPE)
    return monkeypatch


# --- running a task instance's template rendering as a worker would ------------------------


def scheduled_interval(dag: Any, day: dt.date) -> tuple[dt.datetime, DataInterval, dt.datetime]:
    """(logical date, data interval, run after) of the scheduled run whose logical date is `day`,
    as the scheduler's timetable computes it."""
    timetable = coerce_to_core_timetable(dag.timetable)
    earliest = dt.datetime.combine(day, dt.time(), tzinfo=UTC)
    info = timetable.next_dagrun_info(
        last_automated_data_interval=None,
        restriction=TimeRestriction(earliest=earliest, latest=None, catchup=True),
    )
    assert info is not None and info.logical_date.date() == day
    return info.logical_date, info.data_interval, info.run_after


def task_instance(
    dag: Any,
    task_id: str,
    *,
    logical_date: dt.datetime | None,
    interval: DataInterval | None,
    run_after: dt.datetime,
    run_type: str = "scheduled",
    conf: dict[str, Any] | None = None,
) -> RuntimeTaskInstance:
    """The object the task runner builds from what the API server sends for a task instance."""
    task = dag.get_task(task_id)
    dag_run = DagRun(
        dag_id=dag.dag_id,
        run_id=f"{run_type}__test",
        logical_date=logical_date,
        data_interval_start=interval.start if interval else None,
        data_interval_end=interval.end if interval else None,
        run_after=run_after,
        start_date=run_after,
        end_date=None,
        run_type=run_type,
        state="running",
        conf=conf,
        consumed_asset_events=[],
        partition_key=None,
    )
    # model_construct: skips the fields only a real worker has (the DAG bundle it parsed from).
    return RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(),
        task_id=task_id,
        dag_id=dag.dag_id,
        run_id=dag_run.run_id,
        try_number=1,
        map_index=-1,
        dag_version_id=uuid.uuid4(),
        task=task,
        _ti_context_from_server=TIRunContext(dag_run=dag_run, max_tries=task.retries),
        max_tries=task.retries,
        start_date=run_after,
    )


def nightly_ti(
    dags: dict[str, Any], task_id: str, day: dt.date, conf: dict[str, Any] | None = None
) -> RuntimeTaskInstance:
    dag = dags["logmetrics_nightly"]
    logical_date, interval, run_after = scheduled_interval(dag, day)
    return task_instance(
        dag, task_id, logical_date=logical_date, interval=interval, run_after=run_after, conf=conf
    )


def backfill_ti(dags: dict[str, Any], task_id: str, conf: dict[str, Any]) -> RuntimeTaskInstance:
    run_after = dt.datetime(2026, 3, 20, 9, 30, tzinfo=UTC)
    return task_instance(
        dags["logmetrics_backfill"],
        task_id,
        logical_date=None,  # Airflow 3: a manual run need not have one
        interval=None,
        run_after=run_after,
        run_type="manual",
        conf=conf,
    )


def render(ti: RuntimeTaskInstance) -> tuple[Any, Any]:
    """(rendered task, context), as the task runner has them just before `execute`."""
    context = ti.get_template_context()
    ti.render_templates(context)
    return ti.task, context


def choose(ti: RuntimeTaskInstance) -> str:
    """The branch task's decision, called with the arguments Airflow would pass it."""
    task, context = render(ti)
    return task.python_callable(**task.determine_kwargs(context))


def submitted_payload(task: Any, context: Any) -> dict[str, Any]:
    """The JSON the rendered Databricks task would POST to runs/submit (the hook is mocked)."""
    hook = mock.Mock()
    hook.submit_run.return_value = 42
    task.__dict__["_hook"] = hook  # the operator's cached_property
    assert task.submit_job(context) == 42
    (payload,), _ = hook.submit_run.call_args
    return payload


def spark_submit_command(
    task: Any, monkeypatch: pytest.MonkeyPatch, extra: dict[str, str] | None = None
) -> list[str]:
    """The spark-submit command line the rendered task would run, through its Spark connection
    (YARN, and the connection's `extra`)."""
    connection = {"conn_type": "spark", "host": "yarn", "extra": extra or {}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{task._conn_id.upper()}", json.dumps(connection))
    return task._get_hook()._build_spark_submit_command(task.application)


def confs(command: list[str]) -> dict[str, str]:
    """The `--conf key=value` pairs of a spark-submit command line."""
    pairs = (command[i + 1].partition("=") for i, arg in enumerate(command) if arg == "--conf")
    return {key: value for key, _, value in pairs}


def parse_warnings(bag: DagBag) -> list[str]:
    """What parsing the DAG file warned about, a message a line, as the DagBag captured it
    (`<file>:<line>: UserWarning: <message>`)."""
    captured = bag.captured_warnings.get(str(DAG_FOLDER / "logmetrics_dags.py"), ())
    assert set(bag.captured_warnings) <= {str(DAG_FOLDER / "logmetrics_dags.py")}
    return [line.split(": UserWarning: ", 1)[1] for line in captured]


# --- the DAG folder -------------------------------------------------------------------------


def test_dag_folder_loads_without_errors(dagbag: DagBag) -> None:
    assert dagbag.import_errors == {}
    assert dagbag.captured_warnings == {}
    assert sorted(dagbag.dag_ids) == ["logmetrics_backfill", "logmetrics_nightly"]


def test_parsing_reads_no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Variables are read when tasks run, not each time the DAG processor parses the file."""

    def no_variables_at_parse_time(key: str, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"Variable {key} read while parsing")

    monkeypatch.setattr(
        "airflow.sdk.execution_time.context._get_variable", no_variables_at_parse_time
    )
    bag = DagBag(dag_folder=str(DAG_FOLDER))
    assert bag.import_errors == {}
    assert len(bag.dags) == 2


# --- the tables as Assets -------------------------------------------------------------------

TABLES = os.environ["LOGMETRICS_TABLES"]  # tests/deploy/conftest.py


@pytest.mark.parametrize("dag_id", ["logmetrics_nightly", "logmetrics_backfill"])
def test_the_run_tasks_publish_each_table_as_an_asset_named_by_its_location(
    dagbag: DagBag, dag_id: str
) -> None:
    """Both paths' run tasks (the one that runs emits the events) carry an Asset per published
    table, `<LOGMETRICS_TABLES>/<table>`; no other task does (the alerts task comes after the
    run's events: a fired alert does not hold them back)."""
    dag = dagbag.dags[dag_id]
    expected = [Asset(f"{TABLES}/{table}") for table in PUBLISHED]
    outlets = {t.task_id: list(t.outlets) for t in dag.tasks if t.outlets}
    assert outlets == {"spark_submit": expected, "databricks": expected}
    assert [a.uri for a in expected][1] == "s3://logmetrics-tests/warehouse/unique_clusters_daily"
    # The scheduler sees them too.
    again = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert [a.uri for a in again.get_task("spark_submit").outlets] == [a.uri for a in expected]


@pytest.mark.parametrize(
    ("tables", "uri"),
    [
        ("file:///srv/logmetrics/warehouse/", "file:///srv/logmetrics/warehouse/unique_clusters_daily"),
        ("/srv/logmetrics/warehouse", "file:///srv/logmetrics/warehouse/unique_clusters_daily"),
        ("/srv/log metrics/", "file:///srv/log%20metrics/unique_clusters_daily"),
        ("abfss://c@acct.dfs.core.windows.net/wh", "abfss://c@acct.dfs.core.windows.net/wh/unique_clusters_daily"),
        ("databricks://adb-1.azuredatabricks.net/main/retrieval_metrics",
         "databricks://adb-1.azuredatabricks.net/main/retrieval_metrics/unique_clusters_daily"),
    ],
)  # fmt: skip
def test_the_assets_follow_where_the_tables_are(
    monkeypatch: pytest.MonkeyPatch, tables: str, uri: str
) -> None:
    """A URI as it is; an absolute path, as `output.warehouse` takes it, as its file:// URI
    (the form a downstream DAG names it by)."""
    monkeypatch.setenv("LOGMETRICS_TABLES", tables)
    bag = DagBag(dag_folder=str(DAG_FOLDER))
    assert bag.import_errors == {} and parse_warnings(bag) == []
    assert bag.dags["logmetrics_nightly"].get_task("spark_submit").outlets[1].uri == uri


TABLES_WANTED = (
    ", so the run tasks publish no Assets: set it, on the scheduler and the DAG processor, to "
    "where the config writes the tables: an absolute path or a URI as output.warehouse takes it "
    "(/srv/logmetrics/warehouse, s3://bucket/warehouse) or "
    "databricks://<workspace host>/<catalog>/<schema>"
)


def _loads_without_assets_saying(bag: DagBag, line: str) -> None:
    """Both DAGs loaded, no task publishes an Asset, and parsing said `line`, once: as the
    file's one warning and at the end of each DAG's docs."""
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["logmetrics_backfill", "logmetrics_nightly"]
    assert parse_warnings(bag) == [line]
    for dag in bag.dags.values():
        assert all(not task.outlets for task in dag.tasks), dag.dag_id
        assert dag.doc_md.endswith(f"\n\n**Parse warning:** {line}"), dag.dag_id
        assert dag.doc_md.count("**Parse warning:**") == 1


@pytest.mark.parametrize(
    "tables",
    [None, "", "warehouse", "./warehouse", "~/warehouse", "s3://", "s3:/bucket/warehouse",
     "file://host/srv/warehouse", "databricks://host/main", "databricks://host/main/"],
)  # fmt: skip
def test_without_a_tables_location_both_dags_load_with_no_assets_and_say_why(
    monkeypatch: pytest.MonkeyPatch, tables: str | None
) -> None:
    """Unset, a relative or scheme-less path, a URI without its bucket or host, a Databricks URI
    without its schema: not an import error (the scheduler would lose both DAGs) but one
    warning line naming the variable and what it takes, and no Assets."""
    if tables is None:
        monkeypatch.delenv("LOGMETRICS_TABLES")
    else:
        monkeypatch.setenv("LOGMETRICS_TABLES", tables)
    shown = "not set" if not tables else repr(tables)
    bag = DagBag(dag_folder=str(DAG_FOLDER))
    _loads_without_assets_saying(bag, f"LOGMETRICS_TABLES is {shown}{TABLES_WANTED}")


def test_a_location_airflow_refuses_as_an_asset_is_a_warning_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOGMETRICS_TABLES", "airflow://host/warehouse")
    _loads_without_assets_saying(
        DagBag(dag_folder=str(DAG_FOLDER)),
        "LOGMETRICS_TABLES is 'airflow://host/warehouse', which Airflow refuses as an Asset's URI "
        "(Asset scheme 'airflow' is reserved), so the run tasks publish no Assets",
    )


# --- the nightly's first day ----------------------------------------------------------------


def test_the_start_date_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """LOGMETRICS_START_DATE (read when the file is parsed) moves the nightly's first day: the
    first run catch-up makes covers that day."""
    monkeypatch.setenv("LOGMETRICS_START_DATE", "2026-03-01")
    bag = DagBag(dag_folder=str(DAG_FOLDER))
    assert bag.import_errors == {} and parse_warnings(bag) == []
    nightly = bag.dags["logmetrics_nightly"]
    assert nightly.start_date == dt.datetime(2026, 3, 1, tzinfo=UTC)
    first = coerce_to_core_timetable(nightly.timetable).next_dagrun_info(
        last_automated_data_interval=None,
        restriction=TimeRestriction(earliest=nightly.start_date, latest=None, catchup=True),
    )
    assert first is not None and first.data_interval.start.date() == dt.date(2026, 3, 1)


def test_the_start_date_defaults_to_2026_11_01(dagbag: DagBag) -> None:
    assert "LOGMETRICS_START_DATE" not in os.environ
    for dag in dagbag.dags.values():
        assert dag.start_date == dt.datetime(2026, 11, 1, tzinfo=UTC)


@pytest.mark.parametrize("value", ["2026-3-1", "2026-02-30", "20260301", "yesterday"])
def test_a_malformed_start_date_keeps_the_default_and_says_so(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("LOGMETRICS_START_DATE", value)
    bag = DagBag(dag_folder=str(DAG_FOLDER))
    assert bag.import_errors == {}
    assert parse_warnings(bag) == [
        f"LOGMETRICS_START_DATE is {value!r}, not a day as YYYY-MM-DD: the nightly DAG starts "
        "on 2026-11-01, the default"
    ]
    assert bag.dags["logmetrics_nightly"].start_date == dt.datetime(2026, 11, 1, tzinfo=UTC)
    assert len(bag.dags["logmetrics_nightly"].get_task("spark_submit").outlets) == 7


def test_the_readmes_downstream_dag_is_scheduled_on_a_table_both_dags_publish(
    dagbag: DagBag, tmp_path: Path
) -> None:
    (tmp_path / "downstream.py").write_text(downstream_dag_source(TABLES))
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.import_errors == {}
    (downstream,) = bag.dags.values()
    condition = downstream.timetable.asset_condition
    assert condition == AssetAll(Asset(f"{TABLES}/unique_clusters_daily"))
    scheduled = {a.uri for a in condition.objects}
    for dag_id in ("logmetrics_nightly", "logmetrics_backfill"):
        published = {a.uri for a in dagbag.dags[dag_id].get_task("spark_submit").outlets}
        assert scheduled <= published, dag_id


def test_dags_serialize_for_the_scheduler(dagbag: DagBag) -> None:
    for dag in dagbag.dags.values():
        again = DagSerialization.from_dict(DagSerialization.to_dict(dag))
        assert again.dag_id == dag.dag_id
        assert set(again.task_ids) == set(dag.task_ids)


@pytest.mark.parametrize("dag_id", ["logmetrics_nightly", "logmetrics_backfill"])
def test_both_dags_branch_to_two_runners(dagbag: DagBag, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    runners = {"choose_runner", "spark_submit", "databricks"}
    nightly = dag_id == "logmetrics_nightly"
    alerts = {"spark_submit_alerts", "databricks_alerts"} if nightly else set()
    sensor = {"wait_for_logs"} if nightly else set()
    assert set(dag.task_ids) == runners | alerts | sensor
    assert dag.get_task("choose_runner").downstream_task_ids == {"spark_submit", "databricks"}
    assert dag.max_active_runs == 1
    assert "logmetrics" in dag.tags
    for task in dag.tasks:
        if task.task_id in alerts:
            continue
        assert task.retries == 3
        assert task.retry_exponential_backoff
        assert task.retry_delay == dt.timedelta(minutes=10)
        assert task.max_retry_delay == dt.timedelta(hours=2)
        assert task.execution_timeout is not None


def test_nightly_alerts_follow_the_run_on_its_path_without_retries(dagbag: DagBag) -> None:
    """An alert (exit 4) is a verdict on the day, not a glitch: no retry, the run goes red."""
    dag = dagbag.dags["logmetrics_nightly"]
    for path in ("spark_submit", "databricks"):
        alerts = dag.get_task(f"{path}_alerts")
        assert dag.get_task(path).downstream_task_ids == {alerts.task_id}
        assert alerts.downstream_task_ids == set()
        assert alerts.retries == 0
        assert alerts.trigger_rule == "all_success"  # a skipped path skips its alerts too
        assert alerts.execution_timeout == dt.timedelta(hours=1)


def test_nightly_waits_for_the_logs_before_anything_runs(dagbag: DagBag) -> None:
    """The sensor is the first task: every other task, on both paths, runs after it; in
    reschedule mode it holds no worker slot between two pokes."""
    dag = dagbag.dags["logmetrics_nightly"]
    sensor = dag.get_task("wait_for_logs")
    assert isinstance(sensor, BaseSensorOperator)
    assert sensor.mode == "reschedule"
    assert sensor.upstream_task_ids == set()
    assert sensor.downstream_task_ids == {"choose_runner"}
    assert {t.task_id for t in sensor.get_flat_relatives(upstream=False)} == (
        set(dag.task_ids) - {"wait_for_logs"}
    )
    assert sensor.retries == 3  # for a lost worker; a failing `ready` is not retried (below)
    assert sensor.execution_timeout == dt.timedelta(minutes=10)  # one poke, not the wait


def test_nightly_params_set_how_the_sensor_waits(dagbag: DagBag) -> None:
    params = dagbag.dags["logmetrics_nightly"].params
    assert set(params) == {"ready_poke_interval_seconds", "ready_timeout_seconds"}
    assert params["ready_poke_interval_seconds"] == 5 * 60
    assert params["ready_timeout_seconds"] == 6 * 60 * 60
    for name, minimum in (("ready_poke_interval_seconds", 1), ("ready_timeout_seconds", 0)):
        schema = params.get_param(name).schema
        assert schema["type"] == "integer" and schema["minimum"] == minimum


def test_nightly_schedule(dagbag: DagBag) -> None:
    dag = dagbag.dags["logmetrics_nightly"]
    assert isinstance(dag.timetable, CronDataIntervalTimetable)
    assert dag.timetable.expression == "0 2 * * *"
    assert str(dag.timetable.timezone) in {"UTC", "Timezone('UTC')"}
    assert dag.catchup is True
    assert dag.max_active_runs == 1
    assert not any(task.depends_on_past for task in dag.tasks)
    assert dag.start_date.tzinfo is not None


def test_nightly_run_for_a_day_starts_after_that_day(dagbag: DagBag) -> None:
    logical_date, interval, run_after = scheduled_interval(
        dagbag.dags["logmetrics_nightly"], dt.date(2026, 3, 14)
    )
    assert logical_date == dt.datetime(2026, 3, 14, 2, tzinfo=UTC)
    assert interval.start == logical_date
    assert run_after == interval.end == dt.datetime(2026, 3, 15, 2, tzinfo=UTC)


def test_backfill_is_manual_with_two_required_date_params(dagbag: DagBag) -> None:
    dag = dagbag.dags["logmetrics_backfill"]
    assert not dag.timetable.can_be_scheduled
    assert dag.catchup is False
    assert set(dag.params) == {"start", "end"}
    for name in ("start", "end"):
        schema = dag.params.get_param(name).schema
        assert schema["type"] == "string" and schema["format"] == "date"


# --- which path: the Variable logmetrics_runner, read by the branch task at run time ---------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, "spark_submit"), ("spark_submit", "spark_submit"), ("databricks", "databricks")],
)
def test_choose_runner_follows_the_variable(
    dags: dict[str, Any], variables: pytest.MonkeyPatch, value: str | None, expected: str
) -> None:
    if value is not None:
        variables.setenv("AIRFLOW_VAR_LOGMETRICS_RUNNER", value)
    assert choose(nightly_ti(dags, "choose_runner", dt.date(2026, 3, 14))) == expected
    assert choose(backfill_ti(dags, "choose_runner", RANGE)) == expected


def test_choose_runner_rejects_an_unknown_runner(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_RUNNER", "emr")
    with pytest.raises(ValueError, match="logmetrics_runner is 'emr'"):
        choose(nightly_ti(dags, "choose_runner", dt.date(2026, 3, 14)))


def test_choose_runner_rejects_start_after_end(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    ti = backfill_ti(dags, "choose_runner", {"start": "2026-03-15", "end": "2026-03-14"})
    with pytest.raises(ValueError, match="start 2026-03-15 is after end 2026-03-14"):
        choose(ti)


# --- nightly: the rendered command ----------------------------------------------------------


def test_nightly_spark_submit_renders_run_for_the_day(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_SPARK_CONN_ID", "spark_prod")
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_JOBS_DIR", "/opt/logmetrics/jobs")
    task, context = render(nightly_ti(dags, "spark_submit", dt.date(2026, 3, 14)))

    assert context["ds"] == "2026-03-14"
    # jobs/nightly.py prepends `run`: together `logmetrics run --config ... --date 2026-03-14`
    assert task.application == "/opt/logmetrics/jobs/nightly.py"
    assert task.application_args == ["--config", CONFIG, "--date", "2026-03-14"]
    assert task.packages == "io.delta:delta-spark_4.1_2.13:4.3.1"
    assert task._conn_id == "spark_prod"
    assert task.name == "logmetrics-nightly-2026-03-14"

    command = spark_submit_command(task, variables)
    assert command[:3] == ["spark-submit", "--master", "yarn"]
    assert command[-5:] == ["/opt/logmetrics/jobs/nightly.py", *task.application_args]
    assert command[command.index("--packages") + 1] == task.packages
    pairs = {command[i + 1] for i, arg in enumerate(command) if arg == "--conf"}
    assert "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in pairs
    assert (
        "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog" in pairs
    )


def test_nightly_databricks_renders_the_same_run(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_RUNNER", "databricks")
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_DATABRICKS_CONN_ID", "databricks_prod")
    task, context = render(nightly_ti(dags, "databricks", dt.date(2026, 3, 14)))

    assert task.databricks_conn_id == "databricks_prod"
    wheel_task = task.json["python_wheel_task"]
    assert wheel_task == {
        "package_name": "logmetrics",
        "entry_point": "logmetrics",
        "parameters": ["run", "--config", CONFIG, "--date", "2026-03-14"],
    }
    assert task.json["libraries"] == [{"whl": WHEEL}]
    assert task.json["new_cluster"] == {
        "spark_version": "17.3.x-scala2.13",
        "node_type_id": NODE_TYPE,
        "num_workers": "2",
        "data_security_mode": "SINGLE_USER",
    }

    payload = submitted_payload(task, context)
    assert payload["python_wheel_task"] == wheel_task
    assert payload["run_name"] == "logmetrics-nightly-2026-03-14"


def test_nightly_defaults_without_variables(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    variables.delenv("AIRFLOW_VAR_LOGMETRICS_CONFIG")
    task, _ = render(nightly_ti(dags, "spark_submit", dt.date(2026, 3, 14)))
    assert task.application == "jobs/nightly.py"
    assert task.application_args == ["--config", "conf/local.yaml", "--date", "2026-03-14"]
    assert task._conn_id == "spark_default"


@pytest.mark.parametrize("key", ["logmetrics_databricks_wheel", "logmetrics_databricks_node_type"])
def test_databricks_without_a_wheel_or_node_type_variable_fails_to_render(
    dags: dict[str, Any], variables: pytest.MonkeyPatch, key: str
) -> None:
    """No default for either: the node type is the workspace's cloud's (an AWS type fails on
    Azure or Google Cloud)."""
    variables.delenv(f"AIRFLOW_VAR_{key.upper()}")
    with pytest.raises(AirflowRuntimeError, match=f"Variable {key} not found"):
        render(nightly_ti(dags, "databricks", dt.date(2026, 3, 14)))


def test_spark_submit_takes_delta_from_its_variable(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    """A Spark 4.0 cluster is a Variable, not an edit of the file: its Delta jar reaches the
    spark-submit command line of the run and the alerts tasks."""
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_DELTA_PACKAGE", "io.delta:delta-spark_2.13:4.0.1")
    for task_id in ("spark_submit", "spark_submit_alerts"):
        task, _ = render(nightly_ti(dags, task_id, dt.date(2026, 3, 14)))
        command = spark_submit_command(task, variables)
        assert command[command.index("--packages") + 1] == "io.delta:delta-spark_2.13:4.0.1"


DELTA_CONFS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def test_spark_submit_and_the_jobs_python_come_from_variables(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    """A worker of the README's step 3: the `[local]` extra's spark-submit by its path (the
    provider holds only the connection's spark-binary extra to names on the PATH) and the
    venv's Python for the driver and the executors, on every spark-submit task."""
    spark_submit = "/opt/logmetrics/.venv/lib/python3.11/site-packages/pyspark/bin/spark-submit"
    python = "/opt/logmetrics/.venv/bin/python"
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_SPARK_SUBMIT", spark_submit)
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_PYTHON", python)
    python_confs = {"spark.pyspark.driver.python": python, "spark.pyspark.python": python}
    rendered = [render(nightly_ti(dags, task_id, dt.date(2026, 3, 14)))[0]
                for task_id in ("spark_submit", "spark_submit_alerts")]  # fmt: skip
    rendered.append(render(backfill_ti(dags, "spark_submit", RANGE))[0])
    for task in rendered:
        command = spark_submit_command(task, variables, extra={"spark-binary": "spark3-submit"})
        assert command[0] == spark_submit, task.task_id
        assert confs(command) == {**DELTA_CONFS, **python_confs}, task.task_id


def test_without_those_variables_the_connection_and_the_environment_decide(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    """A deployment from before them runs as it did: the connection's spark-binary
    (`spark-submit` on the PATH unless it names another) and no Python conf, which would
    override PYSPARK_PYTHON in the worker's environment."""
    task, _ = render(nightly_ti(dags, "spark_submit", dt.date(2026, 3, 14)))
    assert spark_submit_command(task, variables)[0] == "spark-submit"
    command = spark_submit_command(task, variables, extra={"spark-binary": "spark3-submit"})
    assert command[0] == "spark3-submit"
    assert confs(command) == DELTA_CONFS


def test_manual_nightly_run_computes_the_last_complete_day(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    """A run triggered by hand at 2026-03-15 15:00 covers the last complete interval, whose day
    is 2026-03-14; its logical date (`ds`) would say 2026-03-15."""
    dag = dags["logmetrics_nightly"]
    run_after = dt.datetime(2026, 3, 15, 15, tzinfo=UTC)
    interval = coerce_to_core_timetable(dag.timetable).infer_manual_data_interval(
        run_after=run_after
    )
    ti = task_instance(
        dag,
        "spark_submit",
        logical_date=run_after,
        interval=interval,
        run_after=run_after,
        run_type="manual",
    )
    task, context = render(ti)
    assert context["ds"] == "2026-03-15"
    assert task.application_args == ["--config", CONFIG, "--date", "2026-03-14"]


def test_nightly_alerts_render_the_same_day_on_both_paths(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    expected = ["--config", CONFIG, "--start", "2026-03-14", "--end", "2026-03-14"]
    expected.append("--fail-on-alert")
    task, _ = render(nightly_ti(dags, "spark_submit_alerts", dt.date(2026, 3, 14)))
    # jobs/alerts.py prepends `alerts`
    assert task.application == "jobs/alerts.py"
    assert task.application_args == expected
    assert task.packages == "io.delta:delta-spark_4.1_2.13:4.3.1"
    assert task.name == "logmetrics-alerts-2026-03-14"
    assert spark_submit_command(task, variables)[-8:] == ["jobs/alerts.py", *expected]

    variables.setenv("AIRFLOW_VAR_LOGMETRICS_RUNNER", "databricks")
    task, context = render(nightly_ti(dags, "databricks_alerts", dt.date(2026, 3, 14)))
    wheel_task = {
        "package_name": "logmetrics",
        "entry_point": "logmetrics",
        "parameters": ["alerts", *expected],
    }
    assert task.json["python_wheel_task"] == wheel_task
    payload = submitted_payload(task, context)
    assert payload["python_wheel_task"] == wheel_task
    assert payload["run_name"] == "logmetrics-alerts-2026-03-14"
    assert payload["libraries"] == [{"whl": WHEEL}]


# --- nightly: the sensor ---------------------------------------------------------------------


def test_sensor_renders_ready_for_the_day(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    task, _ = render(nightly_ti(dags, "wait_for_logs", dt.date(2026, 3, 14)))
    # the run's config, and `logmetrics` from the worker's PATH
    assert task.command == ["logmetrics", "ready", "--config", CONFIG, "--date", "2026-03-14"]


def test_sensor_executable_and_config_come_from_variables(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    """Where `logmetrics` is on the worker, and the config as the worker sees it (on Databricks
    the run's config and logs are paths only the cluster can read)."""
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_EXECUTABLE", "/opt/logmetrics/bin/logmetrics")
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_READY_CONFIG", "/etc/logmetrics/worker.yaml")
    task, _ = render(nightly_ti(dags, "wait_for_logs", dt.date(2026, 3, 14)))
    assert task.command == [
        "/opt/logmetrics/bin/logmetrics",
        *("ready", "--config", "/etc/logmetrics/worker.yaml", "--date", "2026-03-14"),
    ]


def test_sensor_defaults_without_variables(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    variables.delenv("AIRFLOW_VAR_LOGMETRICS_CONFIG")
    task, _ = render(nightly_ti(dags, "wait_for_logs", dt.date(2026, 3, 14)))
    expected = ["logmetrics", "ready", "--config", "conf/local.yaml", "--date", "2026-03-14"]
    assert task.command == expected


def _fake_logmetrics(tmp_path: Path, variables: pytest.MonkeyPatch, exit_code: int) -> Path:
    """A `logmetrics` that records its arguments and exits with `exit_code`."""
    script = tmp_path / "logmetrics"
    script.write_text(f'#!/bin/sh\necho "$@" > "$0.args"\nexit {exit_code}\n')
    script.chmod(0o755)
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_EXECUTABLE", str(script))
    return script


@pytest.mark.parametrize(("exit_code", "ready"), [(0, True), (5, False)])
def test_sensor_pokes_again_only_while_not_ready(
    dags: dict[str, Any],
    variables: pytest.MonkeyPatch,
    tmp_path: Path,
    exit_code: int,
    ready: bool,
) -> None:
    script = _fake_logmetrics(tmp_path, variables, exit_code)
    task, context = render(nightly_ti(dags, "wait_for_logs", dt.date(2026, 3, 14)))
    assert task.poke(context) is ready
    args = "ready --config /etc/logmetrics/prod.yaml --date 2026-03-14\n"
    assert script.with_suffix(".args").read_text() == args


@pytest.mark.parametrize("exit_code", [1, 2, 3])
def test_sensor_fails_at_once_when_ready_fails(
    dags: dict[str, Any], variables: pytest.MonkeyPatch, tmp_path: Path, exit_code: int
) -> None:
    """A bad config (2) or a broken install will not mend by waiting: AirflowFailException fails
    the task without its retries, instead of poking until the timeout."""
    _fake_logmetrics(tmp_path, variables, exit_code)
    task, context = render(nightly_ti(dags, "wait_for_logs", dt.date(2026, 3, 14)))
    with pytest.raises(AirflowFailException, match=f"ready exited with {exit_code}"):
        task.poke(context)


def test_sensor_fails_at_once_without_the_executable(
    dags: dict[str, Any], variables: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    variables.setenv("AIRFLOW_VAR_LOGMETRICS_EXECUTABLE", str(tmp_path / "nowhere"))
    task, context = render(nightly_ti(dags, "wait_for_logs", dt.date(2026, 3, 14)))
    with pytest.raises(AirflowFailException, match="cannot run"):
        task.poke(context)


def test_sensor_reschedules_after_the_poke_interval_param(
    dags: dict[str, Any], variables: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The sensor's own reschedule request, on a clock held still: exactly the run's
    `ready_poke_interval_seconds` on. The DAG's default interval, or a backoff, fails."""
    _fake_logmetrics(tmp_path, variables, 5)
    conf = {"ready_poke_interval_seconds": 7, "ready_timeout_seconds": 3600}
    task, context = render(nightly_ti(dags, "wait_for_logs", dt.date(2026, 3, 14), conf))
    now = dt.datetime(2026, 3, 15, 2, 0, 30, tzinfo=UTC)
    variables.setattr(sensor_module.timezone, "utcnow", lambda: now)
    with pytest.raises(AirflowRescheduleException) as rescheduled:
        task.execute(context)  # the first poke: no worker slot held until the next one
    assert rescheduled.value.reschedule_date == now + dt.timedelta(seconds=7)


def test_sensor_times_out_after_the_timeout_param(
    dags: dict[str, Any], variables: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_logmetrics(tmp_path, variables, 5)
    conf = {"ready_poke_interval_seconds": 60, "ready_timeout_seconds": 0}
    task, context = render(nightly_ti(dags, "wait_for_logs", dt.date(2026, 3, 14), conf))
    with pytest.raises(AirflowSensorTimeout, match=r"timeout of 0\.0\b"):
        task.execute(context)


@pytest.mark.parametrize(
    "conf", [{"ready_poke_interval_seconds": 0}, {"ready_timeout_seconds": "an hour"}]
)
def test_sensor_params_are_validated(
    dags: dict[str, Any], variables: pytest.MonkeyPatch, conf: dict[str, Any]
) -> None:
    with pytest.raises(ParamValidationError):
        render(nightly_ti(dags, "wait_for_logs", dt.date(2026, 3, 14), conf))


# --- backfill: the rendered command ---------------------------------------------------------


def test_backfill_spark_submit_renders_the_range(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    task, _ = render(backfill_ti(dags, "spark_submit", RANGE))
    # jobs/backfill.py prepends `backfill`
    assert task.application == "jobs/backfill.py"
    assert task.application_args == BACKFILL_ARGS
    assert task.name == "logmetrics-backfill-2026-03-01-2026-03-14"
    command = spark_submit_command(task, variables)
    assert command[-7:] == ["jobs/backfill.py", *BACKFILL_ARGS]


def test_backfill_databricks_renders_and_submits_the_range(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    task, context = render(backfill_ti(dags, "databricks", RANGE))
    expected = {
        "package_name": "logmetrics",
        "entry_point": "logmetrics",
        "parameters": ["backfill", *BACKFILL_ARGS],
    }
    assert task.json["python_wheel_task"] == expected
    # The DAG's params are not turned into named_parameters next to the positional ones.
    assert submitted_payload(task, context)["python_wheel_task"] == expected


def test_provider_still_injects_dag_params_into_wheel_tasks(
    dags: dict[str, Any], variables: pytest.MonkeyPatch
) -> None:
    """Why _WheelSubmitRun exists. If this fails after a provider upgrade, the provider no longer
    copies DAG params into named_parameters and the override can go."""
    task, context = render(backfill_ti(dags, "databricks", RANGE))
    payload = DatabricksSubmitRunOperator._prepare_submit_json(task, context)
    assert payload["python_wheel_task"]["named_parameters"] == RANGE


@pytest.mark.parametrize(
    "conf",
    [
        {},  # no defaults: both are required
        {"start": "2026-03-01"},
        {"start": "2026-3-1", "end": "2026-03-14"},
        {"start": "2026-03-01", "end": "14/03/2026"},
        {"start": "2026-02-30", "end": "2026-03-14"},
    ],
)
def test_backfill_rejects_missing_or_malformed_dates(
    dags: dict[str, Any], variables: pytest.MonkeyPatch, conf: dict[str, Any]
) -> None:
    with pytest.raises(ParamValidationError):
        render(backfill_ti(dags, "spark_submit", conf))


# --- what the DAGs name must exist in the repo ------------------------------------------------


def test_delta_package_is_the_one_logmetrics_uses() -> None:
    from_dags = string_constants(DAG_FOLDER / "logmetrics_dags.py")["DELTA_PACKAGE"]
    from_session = string_constants(REPO / "src" / "logmetrics" / "session.py")["DELTA_PACKAGE"]
    assert from_dags == from_session


@pytest.mark.parametrize(
    ("script", "command"),
    [("nightly.py", "run"), ("backfill.py", "backfill"), ("alerts.py", "alerts")],
)
def test_job_scripts_prepend_their_command(script: str, command: str) -> None:
    text = (REPO / "jobs" / script).read_text()
    assert re.search(rf'run_job\("{command}", sys\.argv\[1:\]\)', text)
