"""Catalog tables (`output.schema`) on a real Hive metastore: Spark's own, with an embedded Derby
database in a temp directory (pyspark's jars carry spark-hive, Hive 2.3 and Derby). Separate
processes share nothing but the metastore and the warehouse directory: one creates the schema
(as an administrator would), `logmetrics backfill` writes the tables into `metrics.<table>`,
`logmetrics views` creates the BI views, and a fresh Spark session reads the tables, their
comments and properties, and queries the views. Derby allows one JVM at a time, so they run
one after another."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from logmetrics.synthetic import generate
from logmetrics.tables.catalog import (
    DAILY_TABLE,
    DETECTOR_CALIBRATION_TABLE,
    EVALUATION_RESULTS_TABLE,
    OUTPUT_TABLES,
)

pytestmark = [pytest.mark.slow, pytest.mark.platform]

START = dt.date(2026, 4, 6)  # a Monday: both days in one ISO week
# The backfill creates the tables with the first; `views`, configured with the second only,
# sets it on the existing tables. Both on a table: created with one, the other set later.
ON_CREATE = {"delta.enableChangeDataFeed": "true"}
BY_VIEWS = {"delta.logRetentionDuration": "interval 60 days"}

SETUP = """
import sys
from logmetrics.config import load_config
from logmetrics.session import get_spark
spark = get_spark(load_config([sys.argv[1]]).spark)
spark.sql("CREATE SCHEMA metrics")
"""

# The second process: a new Spark session on the same metastore. It prints one JSON object.
READ = """
import json, sys
from logmetrics.config import load_config
from logmetrics.session import get_spark
spark = get_spark(load_config([sys.argv[1]]).spark)
out = {"catalog": spark.conf.get("spark.sql.catalogImplementation")}
out["objects"] = {t.name: t.tableType for t in spark.catalog.listTables("metrics")}
daily = spark.catalog.getTable("metrics.unique_clusters_daily")
out["comment"] = daily.description
out["columns"] = {c.name: c.description for c in spark.catalog.listColumns(
    "metrics.unique_clusters_daily")}
detail = spark.sql("DESCRIBE DETAIL metrics.unique_clusters_daily").first()
out["format"], out["location"] = detail.format, detail.location
out["properties"] = {r.key: r.value for r in spark.sql(
    "SHOW TBLPROPERTIES metrics.unique_clusters_daily").collect()}
out["by_query_properties"] = {r.key: r.value for r in spark.sql(
    "SHOW TBLPROPERTIES metrics.unique_clusters_by_query").collect()}
cols = "metric_date, k, segment, segment_value, queries, median, mean, dq_passed"
def rows(sql):
    return sorted([str(v) for v in r] for r in spark.sql(sql).collect())
out["daily"] = rows(f"SELECT {cols} FROM metrics.unique_clusters_daily")
out["latest_90_days"] = rows(f"SELECT {cols} FROM metrics.unique_clusters_latest_90_days")
out["weekly"] = rows(
    "SELECT week_start, k, segment, segment_value, days, queries "
    "FROM metrics.unique_clusters_weekly")
out["daily_by_week"] = rows(
    "SELECT CAST(date_trunc('WEEK', metric_date) AS DATE), k, segment, segment_value, "
    "count(*), sum(queries) FROM metrics.unique_clusters_daily "
    "GROUP BY 1, k, segment, segment_value")
print(json.dumps(out))
"""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def metastore(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    """The backfill, the views and the second session's findings, run once for the module."""
    root = tmp_path_factory.mktemp("hive")
    generate(root / "data", START, days=2, queries_per_day=60, seed=5)
    config = root / "job.yaml"
    config.write_text(
        "inputs:\n"
        "  served_logs: {path: data/served_logs}\n"
        "  clusters: {path: data/clusters_parquet, format: parquet}\n"
        "output: {warehouse: paths}\n"  # --set output.schema wins: catalog names, no paths
        "metrics: {ks: [5, 10], segment_by: [surface]}\n"
        "quality: {max_malformed_rate: 0.05, on_failure: warn}\n"
        "spark:\n"
        "  master: 'local[1]'\n"
        "  driver_memory: 1g\n"
        "  accelerator: none\n"
        "  conf:\n"
        "    spark.sql.shuffle.partitions: '1'\n"
        "    spark.default.parallelism: '1'\n"
        "    spark.sql.catalogImplementation: hive\n"
        "    spark.hadoop.javax.jdo.option.ConnectionURL: "
        f"'jdbc:derby:;databaseName={root / 'metastore_db'};create=true'\n"
        f"    spark.sql.warehouse.dir: '{root / 'wh'}'\n"
    )
    (root / "setup.py").write_text(SETUP)
    (root / "read.py").write_text(READ)
    catalog = ["--config", "job.yaml", "--set", "output.schema=metrics"]
    on_create = "output.table_properties=" + json.dumps(ON_CREATE)
    by_views = "output.table_properties=" + json.dumps(BY_VIEWS)
    _run(["setup.py", "job.yaml"], root)
    _run(
        ["-m", "logmetrics.cli", "backfill", *catalog, "--set", on_create,
         "--start", START.isoformat(), "--end", (START + dt.timedelta(days=1)).isoformat()],
        root,
    )  # fmt: skip
    views = _run(["-m", "logmetrics.cli", "views", *catalog, "--set", by_views], root)
    found = json.loads(_run(["read.py", "job.yaml"], root).stdout.strip().splitlines()[-1])
    return root, found, views.stdout


def test_the_tables_live_in_the_metastore_as_managed_delta_tables(
    metastore: tuple[Path, dict[str, Any], str],
) -> None:
    root, found, _ = metastore
    assert found["catalog"] == "hive"
    assert (root / "metastore_db").is_dir()  # the Derby database, not an in-memory catalog
    # Not written by the run: the judged evaluation and the detector's calibration (no
    # inputs.calibration).
    unwritten = {EVALUATION_RESULTS_TABLE.name, DETECTOR_CALIBRATION_TABLE.name}
    written = {t.name for t in OUTPUT_TABLES} - unwritten
    assert {name for name, kind in found["objects"].items() if kind == "MANAGED"} == written
    assert not (root / "paths").exists()
    assert found["format"] == "delta"
    assert found["location"] == (root / "wh" / "metrics.db" / DAILY_TABLE.name).as_uri().replace(
        "file:///", "file:/"
    )


def test_the_second_session_reads_the_table_and_column_comments(
    metastore: tuple[Path, dict[str, Any], str],
) -> None:
    _, found, _ = metastore
    assert found["comment"] == DAILY_TABLE.comment
    assert found["columns"] == {
        field.name: field.metadata["comment"] for field in DAILY_TABLE.schema.fields
    }
    both = {**ON_CREATE, **BY_VIEWS}  # set on create and kept by every write; set by `views`
    assert found["properties"].items() >= both.items()
    assert found["by_query_properties"].items() >= both.items()


def test_the_views_created_by_logmetrics_views_answer_from_the_tables(
    metastore: tuple[Path, dict[str, Any], str],
) -> None:
    _, found, views_stdout = metastore
    assert found["objects"]["unique_clusters_latest_90_days"] == "VIEW"
    assert found["objects"]["unique_clusters_weekly"] == "VIEW"
    assert "view: `metrics`.`unique_clusters_weekly`" in views_stdout.splitlines()
    assert "unique_clusters_daily: table properties set" in views_stdout.splitlines()
    # both days, both k, 'all' and each surface
    assert {(row[0], row[1], row[2]) for row in found["daily"]} == {
        (day, k, segment)
        for day in ("2026-04-06", "2026-04-07")
        for k in ("5", "10")
        for segment in ("all", "surface")
    }
    assert found["latest_90_days"] == found["daily"]
    assert found["weekly"] == found["daily_by_week"]
    assert {row[4] for row in found["weekly"] if row[2] == "all"} == {"2"}  # two days a week
