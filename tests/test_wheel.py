"""The wheel on a Spark runtime, as a Databricks `python_wheel_task` library is installed.

The wheel is built and pip-installed, with pip's own dependency resolution and no constraints,
into a venv that already holds pyspark 4.0 (a stand-in for Databricks 17.3 LTS, whose PySpark
must match its JVM): the runtime's PySpark stays as it was. That venv's spark-submit, with the
runtime's Delta (`--packages` and Delta's two session settings, as a cluster ships it, not the
`local` extra), then runs the installed logmetrics' backfill. Its tables, against the
pure-Python reference over the same logs: unique_clusters_by_query, unique_clusters_daily,
unique_clusters_k_sweep and redundancy_cost_daily equal it row for row; quarantine holds the
rows it sets aside (day, reason, request id: none in these logs) and, per day, as many
unusable entries; unique_clusters_alerts equals its rule over the published daily rows (two
days of too few queries: the verdicts are fixed, the values are compared);
unique_clusters_crowding (on by default) equals `reference.crowding` in every column: rank,
key, redundant slots, requests affected, share, cluster size, example request ids, tokens and
their price. Not compared: data_quality (no reference computes great-expectations' checks;
tests/quality checks them on the suite's line), missing_cluster_chunks and the job_runs
ledger. `make test-compat` runs this (`make test` skips it).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

import reference
from logmetrics.config import CrowdingConfig
from logmetrics.demo import generate_dataset
from logmetrics.session import delta_package, resolve_lock

pytestmark = [pytest.mark.slow, pytest.mark.wheel]

REPO = Path(__file__).resolve().parents[1]
RUNTIME_LINE = "4.0"
RUNTIME_CONSTRAINTS = REPO / "constraints-spark40.txt"
# What the runtime holds before the wheel comes: PySpark and the libraries a Databricks runtime
# ships beside it, at constraints-spark40.txt's versions.
RUNTIME_PACKAGES = ("pyspark", "py4j", "pandas", "numpy", "pyarrow")

START = dt.date(2026, 3, 1)
DAYS = 2
END = START + dt.timedelta(days=DAYS - 1)
QUERIES_PER_DAY = 300
KS = (1, 5, 10)
THRESHOLD = 4
RUN_COLUMNS = {"run_id", "computed_at", "cluster_table_version"}
SEGMENT = {"segment", "segment_value"}
QUALITY = {"dq_passed", "rows_read", "duplicate_rows", "quarantined_rows", "quarantined_entries"}


def _pins() -> dict[str, str]:
    lines = RUNTIME_CONSTRAINTS.read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if "==" in line and not line.startswith("#"))


def _run(command: list[str | Path], what: str, **kwargs: Any) -> str:
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, check=False, **kwargs
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
        pytest.fail(f"{what} exited {done.returncode}:\n{tail}")
    return done.stdout + done.stderr


def _installed_version(python: Path, name: str) -> str:
    probe = f"from importlib.metadata import version; print(version({name!r}))"
    return _run([python, "-c", probe], f"version of {name}").strip()


def _runtime_env(venv: Path) -> dict[str, str]:
    """The runtime venv's tools first on PATH (its spark-submit finds SPARK_HOME through
    `python3`), nothing of the test's own venv or Spark settings."""
    leaked = {"VIRTUAL_ENV", "PYTHONPATH", "SPARK_HOME", "SPARK_REMOTE", "PYSPARK_PYTHON"}
    env = {k: v for k, v in os.environ.items() if k not in leaked}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = str(venv / "bin" / "python")
    return env


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A venv holding the runtime's packages, then the wheel installed into it by plain pip."""
    root = tmp_path_factory.mktemp("runtime")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", root / "dist", REPO],
        "building the wheel",
    )
    (wheel,) = (root / "dist").glob("logmetrics-*.whl")
    venv = root / "venv"
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "venv", venv], "creating the runtime venv")
    pins = _pins()
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    # The runtime's own packages are the stand-in, not what is tested: installed by the uv of
    # the test's venv where it has one (the Makefile puts it there: a minute or two less of
    # .ci/run), else by pip. The wheel below is installed by plain pip either way.
    uv = Path(sys.executable).with_name("uv")
    installer = [uv, "pip", "install", "--python", python] if uv.exists() else [*pip, "install"]
    _run(
        [*installer, "--quiet", *(f"{name}=={pins[name]}" for name in RUNTIME_PACKAGES)],
        "installing the runtime's packages",
    )
    before = _installed_version(python, "pyspark")
    # As a cluster installs a wheel library: no constraints, pip resolves what is missing.
    _run([*pip, "install", "--quiet", wheel], "pip install of the wheel")
    return {
        "venv": venv,
        "wheel": wheel,
        "before": before,
        "after": _installed_version(python, "pyspark"),
        "pip_check": _run([*pip, "check"], "pip check"),
        "pins": pins,
    }


def test_installing_the_wheel_leaves_the_runtimes_pyspark_alone(
    runtime: dict[str, Any], tmp_path: Path
) -> None:
    assert runtime["before"] == runtime["after"] == runtime["pins"]["pyspark"]
    assert runtime["after"].startswith(RUNTIME_LINE + ".")
    assert "No broken requirements found" in runtime["pip_check"]
    python = runtime["venv"] / "bin" / "python"
    # Neither the local extra's packages nor a second Delta came with it.
    listed = _run([python, "-m", "pip", "list", "--format=freeze"], "pip list").lower()
    assert "delta-spark" not in listed and "delta_spark" not in listed
    assert "grpcio" not in listed  # pyspark[connect], from the local extra only
    # The console script answers without a JVM: its help, and a config error (exit 2).
    logmetrics = runtime["venv"] / "bin" / "logmetrics"
    assert "backfill" in _run([logmetrics, "--help"], "logmetrics --help")
    (tmp_path / "bad.yaml").write_text("bogus: 1\n")
    done = subprocess.run(
        [logmetrics, "run", "--config", tmp_path / "bad.yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_runtime_env(runtime["venv"]),
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["logmetrics: error: inputs: required key is missing"]
    # No JVM was started, so no Spark log (the run's own log file holds the error line).
    assert not list((tmp_path / "logs").glob("spark-*.log"))


@pytest.fixture(scope="module")
def dataset(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel-generated")
    generate_dataset(out, START, DAYS, queries_per_day=QUERIES_PER_DAY, seed=11, spark=spark)
    return out


@pytest.fixture(scope="module")
def submitted(
    runtime: dict[str, Any], dataset: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """jobs/backfill.py through the runtime's spark-submit, on local[2]: its warehouse and
    output. Delta comes as a cluster ships it: the jar for the runtime's Delta and its
    extension and catalog; the Python side runs the installed wheel."""
    work = tmp_path_factory.mktemp("wheel-run")
    warehouse = work / "warehouse"
    config = work / "job.yaml"
    config.write_text(
        "\n".join(
            [
                "inputs:",
                f"  served_logs: {{path: '{dataset / 'served_logs'}', format: parquet}}",
                f"  clusters: {{path: '{dataset / 'clusters'}', format: delta}}",
                f"output: {{warehouse: '{warehouse}'}}",
                f"metrics: {{ks: {list(KS)}, threshold: {THRESHOLD}}}",
                # A few hundred queries a day: the generator's malformed row is above 0.1%.
                "quality: {max_malformed_rate: 0.01}",
            ]
        )
        + "\n"
    )
    venv = runtime["venv"]
    runtime_delta = delta_package(runtime["pins"]["delta_spark"], RUNTIME_LINE)
    # Under the Ivy lock: the other test worker's JVMs may resolve the same jars meanwhile.
    with resolve_lock():
        output = _spark_submit(venv, runtime_delta, config, work)
    return warehouse, output


def _spark_submit(venv: Path, runtime_delta: str, config: Path, work: Path) -> str:
    return _run(
        [venv / "bin" / "spark-submit", "--master", "local[2]", "--driver-memory", "1g"]
        + ["--packages", runtime_delta]
        + ["--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension"]
        + [
            "--conf",
            "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
        ]
        # Maven Central only, as for every JVM logmetrics starts (not a local ~/.m2).
        + ["--conf", f"spark.jars.ivySettings={REPO / 'src' / 'logmetrics' / 'ivysettings.xml'}"]
        + ["--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2"]
        + [REPO / "jobs" / "backfill.py", "--config", config]
        + ["--start", START.isoformat(), "--end", END.isoformat()],
        "spark-submit of jobs/backfill.py",
        cwd=work,
        env=_runtime_env(venv),
    )


def test_the_installed_wheel_ran_on_the_runtimes_spark(
    runtime: dict[str, Any], submitted: tuple[Path, str]
) -> None:
    warehouse, output = submitted
    # Said in the run's log file (spark.log_dir, under the submit's working directory), not on
    # the terminal, which has the run's summary.
    logs = (warehouse.parent / "logs").glob("logmetrics-*.log")
    assert "using the platform's Spark session (no packages added)" in "".join(
        path.read_text() for path in logs
    )
    assert "using the platform's Spark session" not in output
    where = _run(
        [runtime["venv"] / "bin" / "python", "-c", "import logmetrics; print(logmetrics.__file__)"],
        "import logmetrics",
    )
    assert str(runtime["venv"]) in where  # the installed wheel, not the source tree


def _source(dataset: Path) -> tuple[list[dict[str, Any]], list[tuple]]:
    rows = (
        ds.dataset(dataset / "served_logs", format="parquet", partitioning="hive")
        .to_table(columns=["request_id", "served_at", "results", "date"])
        .to_pylist()
    )
    for row in rows:  # the date partition, as the job reads it: a date
        row["date"] = dt.date.fromisoformat(str(row["date"]))
    clusters = [
        (r["chunk_id"], r["cluster_id"])
        for r in ds.dataset(dataset / "clusters_parquet", format="parquet").to_table().to_pylist()
    ]
    return rows, clusters


def _rows(spark: SparkSession, warehouse: Path, name: str, keys: list[str], drop: set[str]) -> list:
    df = spark.read.format("delta").load(str(warehouse / name))
    rows = [{k: v for k, v in r.asDict().items() if k not in drop} for r in df.collect()]
    return sorted(rows, key=lambda r: tuple(r[k] for k in keys))


def test_the_tables_equal_the_reference(
    spark: SparkSession, dataset: Path, submitted: tuple[Path, str]
) -> None:
    warehouse, _ = submitted
    rows, clusters = _source(dataset)
    by_query = [
        {**r, "served_at": r["served_at"].replace(tzinfo=dt.UTC)}
        for r in _rows(
            spark,
            warehouse,
            "unique_clusters_by_query",
            ["metric_date", "request_id", "k"],
            RUN_COLUMNS,
        )
    ]
    assert len(by_query) == QUERIES_PER_DAY * DAYS * len(KS)
    assert by_query == reference.by_query(rows, clusters, KS, START, END)

    drop = RUN_COLUMNS | SEGMENT
    daily = _rows(spark, warehouse, "unique_clusters_daily", ["metric_date", "k"], drop | QUALITY)
    assert daily == reference.daily(rows, clusters, KS, THRESHOLD, START, END)
    k_sweep = _rows(spark, warehouse, "unique_clusters_k_sweep", ["metric_date", "k"], drop)
    assert k_sweep == reference.k_sweep(rows, clusters, max(KS), START, END)
    prices = {"tokens_per_slot", "usd_per_million_input_tokens"}
    cost = _rows(spark, warehouse, "redundancy_cost_daily", ["metric_date", "k"], drop | prices)
    every_k = range(1, max(KS) + 1)
    assert cost == reference.redundancy_cost(rows, clusters, every_k, 510, 3.0, START, END)

    # Quarantine: each row no metric can use, by its first missing field, on its served_at's
    # day or its partition's; then, per day, the unusable entries of the requests it kept.
    set_aside, entries = _expected_quarantine(rows)
    quarantine = spark.read.format("delta").load(str(warehouse / "quarantine")).collect()
    row_reasons = {"null_request_id", "null_served_at", "null_results"}
    assert sorted(
        (r.metric_date, r.reason, r.request_id) for r in quarantine if r.reason in row_reasons
    ) == sorted(set_aside)
    per_day: dict[dt.date, int] = {}
    for r in quarantine:
        if r.reason not in row_reasons:
            per_day[r.metric_date] = per_day.get(r.metric_date, 0) + 1
    assert per_day == entries
    assert set(entries) == set(reference.dates_between(START, END))  # some on every day

    # Alerts: the rule over the daily rows as published (two days: no baseline yet).
    published = [
        {**r, "histogram": list(r["histogram"])}
        for r in _rows(spark, warehouse, "unique_clusters_daily", ["metric_date", "k"], set())
    ]
    expected = reference.alerts(published, reference.dates_between(START, END))
    alerts = _rows(
        spark,
        warehouse,
        "unique_clusters_alerts",
        ["metric_date", "k", "segment", "segment_value", "statistic"],
        {"run_id", "computed_at"},
    )
    assert len(alerts) == len(expected) == DAYS * len(KS) * 2
    for got, want in zip(alerts, expected, strict=True):
        assert reference.mismatched(got, want) == {}, want

    # Crowding (on by default): the top keys of each day and k, every column.
    expected = reference.crowding(rows, clusters, KS, CrowdingConfig().top_clusters, START, END)
    crowding = _rows(
        spark, warehouse, "unique_clusters_crowding", ["metric_date", "k", "rank"], drop
    )
    assert len(crowding) == len(expected) > 0
    for got, want in zip(crowding, expected, strict=True):
        assert got.keys() == want.keys()
        assert reference.mismatched(got, want) == {}, want


def _expected_quarantine(
    rows: list[dict[str, Any]],
) -> tuple[list[tuple[dt.date, str, str | None]], dict[dt.date, int]]:
    """From the raw rows of START..END: (day, reason, request id) of each row set aside, and per
    day the entries of its kept requests that are null or have a null rank or chunk id."""
    set_aside: list[tuple[dt.date, str, str | None]] = []
    entries: dict[dt.date, int] = {}
    kept: set[tuple[dt.date, str]] = set()
    served = sorted(rows, key=lambda r: (r["served_at"] is None, r["served_at"] or 0))
    for row in served:
        day = reference.utc_date(row["served_at"]) if row["served_at"] else row["date"]
        if not START <= day <= END:
            continue
        reason = next(
            (
                f"null_{field}"
                for field in ("request_id", "served_at", "results")
                if row[field] is None
            ),
            None,
        )
        if reason is not None:
            set_aside.append((day, reason, row["request_id"]))
        elif (day, row["request_id"]) not in kept:  # the earliest copy is the request
            kept.add((day, row["request_id"]))
            bad = sum(1 for e in row["results"] if e is None or None in (e["rank"], e["chunk_id"]))
            if bad:
                entries[day] = entries.get(day, 0) + bad
    return set_aside, entries
