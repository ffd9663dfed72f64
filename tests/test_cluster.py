"""The same backfill three ways: local Spark, spark-submit to a standalone cluster, and Spark
Connect, each into its own warehouse; the published tables must be the same, and equal to the
pure-Python reference. `make test-cluster` runs this (`make test` skips it): the module brings
the loopback cluster up (deploy/cluster/cluster.sh) and down again, whatever happens.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

import reference

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CLUSTER_DIR = REPO / os.environ.get("CLUSTER_DIR", ".cluster")
MASTER_URL = f"spark://127.0.0.1:{os.environ.get('SPARK_MASTER_PORT', '7077')}"
MASTER_UI = f"http://127.0.0.1:{os.environ.get('SPARK_MASTER_WEBUI_PORT', '8080')}"
CONNECT_URL = f"sc://127.0.0.1:{os.environ.get('SPARK_CONNECT_PORT', '15002')}"
WORKERS = int(os.environ.get("CLUSTER_WORKERS", "2"))

START = dt.date(2026, 1, 1)
DAYS = 2
END = START + dt.timedelta(days=DAYS - 1)
QUERIES_PER_DAY = 200
KS = (5, 10, 20)  # conf/local.yaml's
THRESHOLD = 4
RUN_COLUMNS = ["run_id", "computed_at"]
TABLES = (
    "unique_clusters_by_query",
    "unique_clusters_daily",
    "unique_clusters_k_sweep",
    "redundancy_cost_daily",
)
MODES = ("local", "submit", "connect")
QUALITY = ["dq_passed", "rows_read", "duplicate_rows", "quarantined_rows", "quarantined_entries"]


def _run(command: list[str], what: str, **env: str) -> None:
    environ = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"} | env
    # As with .venv activated: bin/spark-submit finds its SPARK_HOME through `python3`.
    environ["PATH"] = f"{BIN}{os.pathsep}{environ.get('PATH', '')}"
    done = subprocess.run(command, cwd=REPO, env=environ, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
        pytest.fail(f"{what} exited {done.returncode}:\n{tail}")


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cluster-data")
    _run(
        [str(BIN / "logmetrics"), "generate", "--out", str(out), "--start", str(START)]
        + ["--days", str(DAYS), "--queries-per-day", str(QUERIES_PER_DAY), "--seed", "1"],
        "logmetrics generate",
    )
    return out


@pytest.fixture(scope="module")
def configs(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One config per mode, all absolute paths (a Connect server resolves paths itself)."""
    root = tmp_path_factory.mktemp("cluster-runs")
    out = {}
    for mode in MODES:
        path = root / f"{mode}.yaml"
        path.write_text(
            "inputs:\n"
            f"  served_logs: {{path: '{dataset / 'served_logs'}', format: parquet}}\n"
            f"  clusters: {{path: '{dataset / 'clusters'}', format: delta}}\n"
            f"output: {{warehouse: '{root / mode / 'warehouse'}'}}\n"
            f"metrics: {{ks: {list(KS)}, threshold: {THRESHOLD}}}\n"
            "backfill: {days_per_chunk: 2}\n"
            # 200 queries a day: the generator's one malformed row would fail the 0.1% gate.
            "quality: {max_malformed_rate: 0.01}\n"
            f"spark: {{master: 'local[2]', driver_memory: 1g, log_dir: '{root / mode / 'logs'}'}}\n"
        )
        out[mode] = path
    return out


def _backfill_args(config: Path) -> list[str]:
    return ["--config", str(config), "--start", str(START), "--end", str(END)]


@pytest.fixture(scope="module")
def local_run(configs: dict[str, Path]) -> Path:
    """Local mode as today, run before the cluster starts (two cores are all there is)."""
    _run([str(BIN / "logmetrics"), "backfill", *_backfill_args(configs["local"])], "local run")
    return configs["local"].parent / "local" / "warehouse"


@pytest.fixture(scope="module")
def cluster(local_run: Path) -> Iterator[None]:
    """`make cluster-up`, and `make cluster-down` after the module, even when a test failed."""
    if list((CLUSTER_DIR / "pids").glob("*.pid")):
        pytest.fail("a cluster is already up here: run `make cluster-down` first")
    up = subprocess.run(["bash", "deploy/cluster/cluster.sh", "up"], cwd=REPO)
    try:
        assert up.returncode == 0, f"cluster-up failed (logs in {CLUSTER_DIR}/logs)"
        yield
    finally:
        down = subprocess.run(["bash", "deploy/cluster/cluster.sh", "down"], cwd=REPO)
        assert down.returncode == 0, "cluster-down left processes behind"


def _completed_apps() -> dict[str, dict[str, Any]]:
    return {app["id"]: app for app in _json(f"{MASTER_UI}/json/")["completedapps"]}


@pytest.fixture(scope="module")
def submit_run(cluster: None, configs: dict[str, Path]) -> tuple[Path, dict[str, Any]]:
    """jobs/backfill.py through spark-submit to the standalone master; the application it ran."""
    before = _completed_apps()
    _run(
        [str(BIN / "spark-submit"), "--master", MASTER_URL]
        + ["--properties-file", str(CLUSTER_DIR / "submit.conf")]
        + ["jobs/backfill.py", *_backfill_args(configs["submit"])],
        "spark-submit run",
    )
    new = [app for app_id, app in _completed_apps().items() if app_id not in before]
    assert len(new) == 1, f"expected one new completed application, got {new}"
    return configs["submit"].parent / "submit" / "warehouse", new[0]


@pytest.fixture(scope="module")
def connect_run(cluster: None, configs: dict[str, Path]) -> Path:
    """The `logmetrics` console script with SPARK_REMOTE pointing at the Connect server."""
    _run(
        [str(BIN / "logmetrics"), "backfill", *_backfill_args(configs["connect"])],
        "Spark Connect run",
        SPARK_REMOTE=CONNECT_URL,
    )
    return configs["connect"].parent / "connect" / "warehouse"


@pytest.fixture(scope="module")
def warehouses(local_run: Path, submit_run: tuple[Path, dict], connect_run: Path) -> dict:
    return {"local": local_run, "submit": submit_run[0], "connect": connect_run}


def _table(spark: SparkSession, warehouse: Path, name: str) -> DataFrame:
    return spark.read.format("delta").load(str(warehouse / name)).drop(*RUN_COLUMNS)


@pytest.mark.parametrize("name", TABLES)
def test_the_three_runs_publish_the_same_table(
    spark: SparkSession, warehouses: dict[str, Path], name: str
) -> None:
    local = _table(spark, warehouses["local"], name)
    assert local.count() > 0
    for mode in ("submit", "connect"):
        # Identical, to the last bit of every double (the means are of integers, so the order
        # in which another partitioning adds them up does not change them); rows in any order.
        assertDataFrameEqual(_table(spark, warehouses[mode], name), local, rtol=0.0, atol=0.0)


def test_the_runs_equal_the_reference(
    spark: SparkSession, warehouses: dict[str, Path], dataset: Path
) -> None:
    """The independent implementation (tests/reference.py) over the same generated files."""
    rows = (
        ds.dataset(dataset / "served_logs", format="parquet", partitioning="hive")
        .to_table(columns=["request_id", "served_at", "results", "date"])
        .to_pylist()
    )
    clusters = [
        (r["chunk_id"], r["cluster_id"])
        for r in ds.dataset(dataset / "clusters_parquet", format="parquet").to_table().to_pylist()
    ]
    expected = reference.by_query(rows, clusters, KS, START, END)
    table = _table(spark, warehouses["connect"], "unique_clusters_by_query")
    got = [
        {
            **{k: v for k, v in r.asDict().items() if k != "cluster_table_version"},
            "served_at": r.served_at.replace(tzinfo=dt.UTC),
        }
        for r in table.collect()
    ]
    got.sort(key=lambda r: (r["metric_date"], r["request_id"], r["k"]))
    assert len(got) == len(expected) == QUERIES_PER_DAY * DAYS * len(KS)
    assert got == expected

    drop = ["cluster_table_version", "segment", "segment_value", *QUALITY]
    daily = _table(spark, warehouses["submit"], "unique_clusters_daily").where(
        "segment = 'all' AND segment_value = 'all'"
    )
    got_daily = sorted(
        (r.asDict() for r in daily.drop(*drop).collect()), key=lambda r: (r["metric_date"], r["k"])
    )
    assert got_daily == reference.daily(rows, clusters, KS, THRESHOLD, START, END)


def test_the_submitted_job_ran_on_the_cluster_workers(submit_run: tuple[Path, dict]) -> None:
    """The master lists the application as finished, and every worker ran an executor of it."""
    _, app = submit_run
    assert app["state"] == "FINISHED"
    master = _json(f"{MASTER_UI}/json/")
    workers = [w for w in master["workers"] if w["state"] == "ALIVE"]
    assert len(workers) == WORKERS
    for worker in workers:
        state = _json(f"{worker['webuiaddress']}/json/")
        ran = [e for e in state["finishedexecutors"] if e["appid"] == app["id"]]
        assert ran, f"no executor of {app['id']} on worker {worker['id']}"


def test_the_connect_server_runs_its_executors_on_the_workers(connect_run: Path) -> None:
    master = _json(f"{MASTER_UI}/json/")
    (server,) = [a for a in master["activeapps"] if a["name"] == "Spark Connect server"]
    for worker in master["workers"]:
        state = _json(f"{worker['webuiaddress']}/json/")
        assert [e for e in state["executors"] if e["appid"] == server["id"]]
