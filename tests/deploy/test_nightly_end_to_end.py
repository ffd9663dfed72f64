"""The DAGs run end to end in a real Airflow (the scheduler's loop, a SQLite metadata database,
every task executed), on the spark_submit path, on the workers deploy/airflow/README.md installs
(tests/deploy/conftest.py builds them by the README's own commands, /opt/logmetrics a temporary
folder) with the Variables its step 3 sets: the `spark-submit` of the `[local]` extra, by its
path, runs the worker's copy of jobs/*.py on the worker venv's Python, with local Spark on
generated logs, into a temporary warehouse; the sensor runs the worker's `logmetrics ready`.

One generated history of five days (600 queries a day, over alerts.min_queries), the last day a
planted regression (every query repeats more: fewer distinct clusters); one warehouse for all.
The config expects a `_SUCCESS` marker in each day's partition, and every day but day 4 has one:
1. `logmetrics_backfill` publishes the first three days (the baseline), run as an operator
   would, by Airflow's command line (`airflow dags test`, in a process of its own);
2. `logmetrics_nightly` for day 4, a quiet day whose marker is missing (`dag.test()`, in this
   process, to count the pokes): the sensor pokes (the real `logmetrics ready` exits 5) and is
   rescheduled until the marker appears, then the run and its alerts task succeed;
3. `logmetrics_nightly` for day 5, the regression, on a worker whose Spark is not its own (step
   3's other form: the wheel without the extra, its driver given PySpark by a `spark-submit` from
   elsewhere, here the `[local]` worker's standing in for a cluster's; its sensor the wheel
   without PySpark, step 4's): the run succeeds (the day is published), the alerts task exits 4
   and fails the DAG run, once: it has no retries.
Steps 1 and 2 are module fixtures (`baseline`, `quiet`, the second built on the first) that
keep what their run left, so each test runs alone, or in any order, and sees the same.

The config judges against a trailing baseline (the previous days) so that three days of history
are enough; the rule is the same. The tables are read back with pyarrow from the Delta log.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow", reason="DAG tests run in the Airflow venv: make test-deploy")

import pyarrow.parquet as pq
from airflow.dag_processing.dagbag import DagBag
from airflow_readme import Worker
from published import DAG_ID, PUBLISHED, downstream_dag_source

REPO = Path(__file__).resolve().parents[2]
DAG_FOLDER = REPO / "deploy" / "airflow" / "dags"
AIRFLOW = Path(sys.executable).parent / "airflow"  # the Airflow venv's command line
UTC = dt.UTC
DAYS = [dt.date(2026, 11, 10) + dt.timedelta(days=i) for i in range(5)]
QUIET, REGRESSED = DAYS[3], DAYS[4]
MARKER = "_SUCCESS"
# The sensor's wait in these runs: a poke a second (dag.test() checks for due tasks every second).
FAST_POKES = {"ready_poke_interval_seconds": 1, "ready_timeout_seconds": 300}
# Local Spark under spark-submit, tuned like the test suite's session (tests/suite_session.py's
# TEST_CONF and INTERPRETED, written out: this venv has no logmetrics to import them from): one
# task, no compression, no generated code, no Delta checksum or file statistics.
FAST_SPARK = {
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.rdd.compress": "false",
    "spark.shuffle.compress": "false",
    "spark.databricks.delta.writeChecksumFile.enabled": "false",
    "spark.databricks.delta.stats.collect": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, spark_worker: Worker
) -> Iterator[dict[str, Path]]:
    """Generated logs, the job's config, Spark's conf dir and the Airflow environment: the
    Variables step 3 sets, naming the worker's files, but the config (the step says to edit
    the copy it makes: here it is the run's own); the metadata database is created once."""
    root = tmp_path_factory.mktemp("nightly")
    data, warehouse, spark_conf = root / "data", root / "warehouse", root / "spark-conf"
    generated = spark_worker.run(
        *("generate", "--out", str(data), "--start", str(DAYS[0]), "--days", str(len(DAYS))),
        *("--queries-per-day", "600", "--seed", "18", "--clean", "--clusters-format", "parquet"),
        *("--plant", f"{REGRESSED}:0.2"),
        cwd=root,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    # The log shipper has finished every day but QUIET.
    for day in DAYS:
        if day != QUIET:
            (_partition(data, day) / MARKER).touch()
    config = root / "job.yaml"
    config.write_text(
        "inputs:\n"
        f"  served_logs: {{path: '{data / 'served_logs'}', ready_marker: {MARKER}}}\n"
        f"  clusters: {{path: '{data / 'clusters_parquet'}', format: parquet}}\n"
        f"output: {{warehouse: '{warehouse}'}}\n"
        "metrics: {ks: [10]}\n"
        "alerts: {baseline: trailing, baseline_days: 7}\n"
    )
    # What `make cluster-up` gives spark-submit: Delta's jars and settings (from logmetrics, so
    # the pin stays in one place), and the Ivy settings that resolve from Maven Central only.
    spark_conf.mkdir()
    defaults = spark_worker.python("-m", "logmetrics.session")
    defaults += "".join(f"{key} {value}\n" for key, value in FAST_SPARK.items())
    (spark_conf / "spark-defaults.conf").write_text(defaults)

    environment = {
        f"AIRFLOW_VAR_{key.upper()}": value for key, value in spark_worker.variables.items()
    }
    environment |= {
        "AIRFLOW_VAR_LOGMETRICS_CONFIG": str(config),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[1]"}),
        "SPARK_CONF_DIR": str(spark_conf),
    }
    # The tables' Assets, where the config writes them; and, deployed beside the two DAGs (the
    # bundle dag.test() syncs to the database), the README's downstream DAG scheduled on them.
    environment["LOGMETRICS_TABLES"] = warehouse.as_uri()
    bundle = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    (bundle / "downstream.py").write_text(downstream_dag_source(warehouse.as_uri()))
    saved = {key: os.environ.get(key) for key in environment}
    os.environ.update(environment)
    from airflow.utils.db import initdb

    initdb()
    yield {"warehouse": warehouse, "data": data, "bundle": bundle, "root": root}
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _partition(data: Path, day: dt.date) -> Path:
    """The day's directory of the generated served logs, where its ready marker goes."""
    return data / "served_logs" / f"date={day}"


def _dag(dag_id: str) -> Any:
    """The DAG as deployed, but for the path tasks' retries: a failing run would otherwise wait
    ten minutes for its retry. The alerts tasks keep theirs (none), which is under test."""
    dag = DagBag(dag_folder=str(DAG_FOLDER)).dags[dag_id]
    for task in dag.tasks:
        if not task.task_id.endswith("_alerts"):
            task.retries = 0
    return dag


def _states(run: Any) -> dict[str, tuple[str, int]]:
    return {ti.task_id: (str(ti.state), ti.try_number) for ti in run.get_task_instances()}


def _nightly(day: dt.date, dag: Any = None) -> Any:
    """A manual nightly run whose data interval is `day` (the run after it, at 02:00 UTC), its
    sensor poking every second."""
    logical_date = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(2), tzinfo=UTC)
    dag = dag or _dag("logmetrics_nightly")
    return dag.test(logical_date=logical_date, run_conf=FAST_POKES)


def _reschedules(run: Any, task_id: str) -> int:
    """How many times the task was rescheduled (gave back its slot to poke again later)."""
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    (ti,) = [ti for ti in run.get_task_instances() if ti.task_id == task_id]
    with create_session() as session:
        query = select(func.count()).where(TaskReschedule.ti_id == ti.id)
        return int(session.scalar(query))


def _asset_events(dag_id: str) -> dict[str, list[str]]:
    """Per asset URI, the tasks of `dag_id` that emitted an event for it, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = (
        select(AssetModel.uri, AssetEvent.source_task_id)
        .join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
        .where(AssetEvent.source_dag_id == dag_id)
        .order_by(AssetEvent.timestamp)
    )
    found: dict[str, list[str]] = {}
    with create_session() as session:
        for uri, task_id in session.execute(query):
            found.setdefault(uri, []).append(task_id)
    return found


def _queued_for(dag_id: str) -> list[str]:
    """The assets whose events wait to start a run of `dag_id` (the scheduler's queue)."""
    from airflow.models.asset import AssetDagRunQueue, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = (
        select(AssetModel.uri)
        .join(AssetDagRunQueue, AssetDagRunQueue.asset_id == AssetModel.id)
        .where(AssetDagRunQueue.target_dag_id == dag_id)
    )
    with create_session() as session:
        return sorted(session.scalars(query))


def read_delta(path: Path) -> list[dict[str, Any]]:
    """A small Delta table's rows: the log's live files (JSON commits replayed, no checkpoint
    needed) read with pyarrow, partition values put back."""
    live: dict[str, dict[str, str]] = {}
    for commit in sorted((path / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = action["add"]["partitionValues"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    rows = []
    for file, partitions in live.items():
        for row in pq.read_table(path / file).to_pylist():
            rows.append({**row, **partitions})
    return rows


def _days(rows: list[dict[str, Any]]) -> set[str]:
    return {str(row["metric_date"]) for row in rows}


def _last_run(dag_id: str) -> Any:
    """The DAG's newest run in the metadata database."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc())
        run = session.scalars(query).first()
        session.expunge_all()
    return run


@pytest.fixture(scope="module")
def baseline(world: dict[str, Path]) -> dict[str, Any]:
    """`logmetrics_backfill` over the first three days, run once by Airflow's command line as
    an operator would (`airflow dags test`: the DAG file parsed from the DAG folder, the
    Variables and the connection from the environment, a process of its own; the deployed DAG,
    retries included): how the run ended and the tables as it left them."""
    conf = json.dumps({"start": str(DAYS[0]), "end": str(DAYS[2])})
    log = world["root"] / "airflow-dags-test.log"
    with log.open("w") as output:
        done = subprocess.run(
            [str(AIRFLOW), "dags", "test", "logmetrics_backfill", "--conf", conf],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=world["root"],
            timeout=600,  # a failing task would wait ten minutes for its retry
        )
    said = log.read_text()
    assert done.returncode == 0, said[-5000:]
    run = _last_run("logmetrics_backfill")
    return {
        "said": said,
        "state": str(run.state),
        "states": _states(run),
        "daily": read_delta(world["warehouse"] / "unique_clusters_daily"),
        "alerts": read_delta(world["warehouse"] / "unique_clusters_alerts"),
        "events": _asset_events("logmetrics_backfill"),
        "queued": _queued_for(DAG_ID),
    }


@pytest.fixture(scope="module")
def quiet(world: dict[str, Path], baseline: dict[str, Any]) -> dict[str, Any]:
    """`logmetrics_nightly` for QUIET, whose marker is missing, on the baseline's warehouse:
    each poke runs the real `logmetrics ready` (its output recorded), which exits 5, and the
    sensor is rescheduled; after the second such poke the shipper writes the marker (from
    inside the poke, so the count does not depend on timing); the third poke finds it. How
    the run ended, what each poke saw and said, and the tables as it left them."""
    marker = _partition(world["data"], QUIET) / MARKER
    assert not marker.exists()
    dag = _dag("logmetrics_nightly")  # each parse defines the sensor's class anew: patch this one
    sensor_class = type(dag.get_task("wait_for_logs"))
    real_poke, real_run = sensor_class.poke, subprocess.run
    pokes: list[tuple[bool, bool]] = []  # (marker there before the poke, poke said ready)
    said: list[str] = []  # what `logmetrics ready` printed, poke by poke

    def recorded_run(*args: Any, **kwargs: Any) -> Any:
        done = real_run(*args, **kwargs)
        said.append(done.stdout)
        return done

    def poke(self: Any, context: Any) -> bool:
        had_marker = marker.exists()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(subprocess, "run", recorded_run)
            ready = real_poke(self, context)
        pokes.append((had_marker, ready))
        if len(pokes) == 2:
            marker.touch()
        return ready

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sensor_class, "poke", poke)
        run = _nightly(QUIET, dag)
    return {
        "marker": marker,
        "state": str(run.state),
        "states": _states(run),
        "reschedules": _reschedules(run, "wait_for_logs"),
        "pokes": pokes,
        "said": said,
        "daily": read_delta(world["warehouse"] / "unique_clusters_daily"),
        "alerts": read_delta(world["warehouse"] / "unique_clusters_alerts"),
        "events": _asset_events("logmetrics_nightly"),
    }


def test_backfill_dag_publishes_the_baseline(
    baseline: dict[str, Any], spark_worker: Worker
) -> None:
    """`airflow dags test` ran the backfill on the spark_submit path, through the worker's
    `spark-submit` with the worker's Python for the job, and published the three days."""
    states = baseline["states"]
    assert baseline["state"] == "success", states
    (submitted,) = re.findall(r"Spark-Submit cmd: (.*)", baseline["said"])
    python = spark_worker.variables["logmetrics_python"]
    assert submitted.startswith(spark_worker.variables["logmetrics_spark_submit"] + " ")
    assert f"--conf spark.pyspark.driver.python={python} " in submitted
    assert states["spark_submit"] == ("success", 1)
    assert states["databricks"][0] == "skipped"
    assert _days(baseline["daily"]) == {str(d) for d in DAYS[:3]}
    # The first day has no baseline at all; then one and two days: fewer than 3.
    assert {row["status"] for row in baseline["alerts"]} == {"insufficient_baseline"}


def test_nightly_waits_for_the_ready_marker_then_publishes_a_quiet_day(
    quiet: dict[str, Any],
) -> None:
    """QUIET's marker appears after the second poke: two pokes said not ready (the real
    `logmetrics ready`, exit 5, naming the marker), two reschedules, the third poke found it,
    and the run and its alerts task succeeded."""
    not_ready = f"input not ready: {QUIET}: no {quiet['marker']}; its logs have not all landed"
    assert [said.splitlines()[-1] for said in quiet["said"][:2]] == [
        f"logmetrics: error: {not_ready}"
    ] * 2
    assert quiet["pokes"] == [(False, False), (False, False), (True, True)]
    assert quiet["reschedules"] == 2  # reschedule mode: no slot held meanwhile
    states = quiet["states"]
    assert quiet["state"] == "success", states
    assert states["wait_for_logs"] == ("success", 1)  # waiting is not a retry
    assert states["choose_runner"] == ("success", 1)
    assert states["spark_submit"] == ("success", 1)
    assert states["spark_submit_alerts"] == ("success", 1)
    assert states["databricks"][0] == states["databricks_alerts"][0] == "skipped"
    assert _days(quiet["daily"]) == {str(d) for d in DAYS[:4]}
    judged = [r for r in quiet["alerts"] if str(r["metric_date"]) == str(QUIET)]
    assert {(r["statistic"], r["status"], r["baseline_days"]) for r in judged} == {
        ("mean", "ok", 3),
        ("share_at_or_below_threshold", "ok", 3),
    }


def test_nightly_regression_fails_on_the_alerts_task_without_retry(
    world: dict[str, Path],
    quiet: dict[str, Any],
    sensor_worker: Worker,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`logmetrics_nightly` for the regression, on the four days the quiet run left, on a
    worker whose logmetrics has no PySpark of its own: its sensor runs `ready` without it, and
    the `spark-submit` (the [local] worker's, as a cluster's Spark would) gives the driver
    PySpark."""
    executable = sensor_worker.variables["logmetrics_executable"]
    monkeypatch.setenv("AIRFLOW_VAR_LOGMETRICS_EXECUTABLE", executable)
    monkeypatch.setenv("AIRFLOW_VAR_LOGMETRICS_PYTHON", str(sensor_worker.bin / "python"))
    capfd.readouterr()
    run = _nightly(REGRESSED)
    printed = "".join(capfd.readouterr())  # the task logs, spark-submit's output among them
    python = sensor_worker.bin / "python"
    assert f"--conf spark.pyspark.driver.python={python} " in printed
    # It failed for the alert: `logmetrics alerts` printed it and exited 4.
    assert f"ALERT {REGRESSED} all traffic k=10 share_at_or_below_threshold: " in printed
    assert "Error code is: 4." in printed
    states = _states(run)
    assert str(run.state) == "failed", states
    assert states["wait_for_logs"] == ("success", 1)  # its marker was there: no wait
    assert _reschedules(run, "wait_for_logs") == 0
    assert states["spark_submit"] == ("success", 1)  # the day is published: it is real data
    assert states["spark_submit_alerts"] == ("failed", 1)  # exit 4, and no second try
    assert states["databricks"][0] == states["databricks_alerts"][0] == "skipped"
    daily = read_delta(world["warehouse"] / "unique_clusters_daily")
    assert _days(daily) == {str(d) for d in DAYS}
    regressed = [r for r in read_delta(world["warehouse"] / "unique_clusters_alerts")
                 if str(r["metric_date"]) == str(REGRESSED)]  # fmt: skip
    assert {(r["statistic"], r["status"]) for r in regressed} == {
        ("mean", "alert"),
        ("share_at_or_below_threshold", "alert"),
    }
    assert all(r["baseline_days"] == 4 for r in regressed)
    # The day is published, so its tables' events are out, the alert notwithstanding.
    events = _asset_events("logmetrics_nightly")
    assert events[f"{world['warehouse'].as_uri()}/unique_clusters_daily"] == ["spark_submit"] * 2


def test_each_run_task_emits_an_event_per_table_and_queues_the_downstream_dag(
    world: dict[str, Path], baseline: dict[str, Any], quiet: dict[str, Any]
) -> None:
    """The backfill's run task, then the quiet night's, emitted one event for each published
    table, named by its location in the warehouse the run wrote; the README's downstream DAG,
    deployed beside them and scheduled on the daily table, was queued by the backfill's: the
    scheduler would start it. It loads and runs (a manual run: no triggering event)."""
    tables = world["warehouse"].as_uri()
    assert all((world["warehouse"] / table / "_delta_log").is_dir() for table in PUBLISHED)
    published = {f"{tables}/{table}" for table in PUBLISHED}
    assert baseline["events"] == {uri: ["spark_submit"] for uri in published}
    assert quiet["events"] == {uri: ["spark_submit"] for uri in published}
    assert baseline["queued"] == [f"{tables}/unique_clusters_daily"]

    downstream = DagBag(dag_folder=str(world["bundle"])).dags[DAG_ID]
    run = downstream.test()
    assert str(run.state) == "success", _states(run)
