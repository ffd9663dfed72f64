"""Runs with everything on a real S3 server (SeaweedFS): the served logs (Parquet), the cluster
table (Delta) and the warehouse on `s3a://`. A backfill, a nightly new day (appended), late rows
restated by the look-back (on Comet, whose native reader reads S3 itself), `report`, `alerts`
and `views`: every table equal to the same runs on local files and the daily numbers to the
reference; a done day answered without Spark; a second writer refused while a run holds the
warehouse. Marked `objectstore`: minutes of runs, so `make test-guarantees` (CI's second step)
runs them, not `make test`.

Checked elsewhere, each once: a cluster table as Parquet files on S3 (every storage-fault run
reads one, and tests/faults/conftest.py's `store` checks the uninterrupted nightly from it
against the reference); a nightly killed after some of its commits and resumed
(tests/flows/test_nightly_commits.py, at each kind of commit), and on S3 a run stopped with
commits landed and its lease left, the next run taking the lease over and restating the day
exactly (tests/faults/test_outlasted.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import yaml
from benchmarks import s3_server
from pyspark.sql import SparkSession

import reference
from logmetrics import storage
from logmetrics.cli import main
from logmetrics.synthetic import generate
from logmetrics.tables import catalog
from suite_session import process_spark

pytestmark = [pytest.mark.slow, pytest.mark.objectstore]

START = dt.date(2026, 8, 1)
DAYS = [START + dt.timedelta(days=i) for i in range(4)]
NIGHT = DAYS[-1]
KS = (5, 10)
THRESHOLD = 4
DAY_TABLES = [
    table.name
    for table in catalog.OUTPUT_TABLES
    if "metric_date" in table.schema.names and table is not catalog.JOB_RUNS_TABLE
]
VOLATILE = {
    "run_id",
    "computed_at",
    "checked_at",
    "quarantined_at",
    "details",
    "cluster_table_version",
}
Rows = dict[str, dict[dt.date, list[str]]]


class Runs(NamedTuple):
    data: Path  # the logs and cluster table, locally
    local_config: Path
    s3_config: list[str]  # --config arguments: docs/config.md's example, then the suite's
    warehouse: str  # on S3
    night_log: str  # the nightly's run log on S3
    late_log: str  # the look-back run's, after late rows


def _settings(path: Path, conf: dict[str, str] | None = None, **overrides: object) -> Path:
    """The suite's settings for a run (metrics, quality, alerts, its JVM), as a config file
    layered over the paths."""
    config = {
        "metrics": {"ks": list(KS), "threshold": THRESHOLD, "segment_by": ["surface"]},
        "quality": {"max_malformed_rate": 0.1, "max_missing_cluster_rate": 0.1,
                    "on_failure": "warn"},
        "alerts": {"baseline": "trailing", "baseline_days": 3, "min_queries": 10,
                   "min_baseline_days": 2},
        "spark": process_spark(conf),
        **overrides,
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def docs_example(endpoint: str) -> str:
    """docs/config.md's worked S3 example (its YAML block), pointed at `endpoint`."""
    page = (Path(__file__).parents[1] / "docs" / "config.md").read_text()
    section = page[page.index("## Object storage") :]
    block = section[section.index("```yaml\n") + 8 :]
    return block[: block.index("```")].replace("http://127.0.0.1:8333", endpoint)


def _rows(spark: SparkSession, warehouse: str) -> Rows:
    """Each day table's rows (volatile columns left out) per day, sorted."""
    out: Rows = {}
    for name in DAY_TABLES:
        df = spark.read.format("delta").load(f"{warehouse.rstrip('/')}/{name}")
        columns = [c for c in df.columns if c not in VOLATILE]
        days: dict[dt.date, list[str]] = {}
        for row in df.select(*columns).collect():
            days.setdefault(row.metric_date, []).append(repr(row))
        out[name] = {d: sorted(r) for d, r in days.items()}
    return out


def _run(argv: list[str]) -> str:
    """`logmetrics argv` in this process; the records it logged."""
    handler = _Records()
    logging.getLogger("logmetrics").addHandler(handler)
    try:
        assert main(argv) == 0, argv
    finally:
        logging.getLogger("logmetrics").removeHandler(handler)
    return "\n".join(handler.lines)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _late_rows(data: Path) -> Path:
    """Ten more requests of DAYS[2], landed in its partition as a file of their own."""
    partition = data / "served_logs" / f"date={DAYS[2]}"
    table = pq.read_table(next(partition.glob("*.parquet"))).slice(0, 10)
    ids = [f"{i}-late" for i in table.column("request_id").to_pylist()]
    table = table.set_column(
        table.schema.get_field_index("request_id"), "request_id", pa.array(ids)
    )
    late = partition / "part-late.parquet"
    pq.write_table(table, late)
    return late


@pytest.fixture(autouse=True)
def _reads_reach_the_server(s3_server_running: s3_server.S3Server) -> None:
    """This process's direct reads (`storage.place`) reach the test server: a command run in
    this worker before (another module's, on local files) configured them for its own paths."""
    storage.configure(s3_server_running.spark_conf)


@pytest.fixture(scope="module")
def runs(
    s3_spark: SparkSession,
    s3_server_running: s3_server.S3Server,
    tmp_path_factory: pytest.TempPathFactory,
) -> Runs:
    """docs/config.md's S3 example, as written but for the endpoint (its buckets made on the
    test server), and the same runs on local files: a backfill of days 1-3, the nightly of
    day 4, late rows in day 3 and the nightly again."""
    root = tmp_path_factory.mktemp("object-storage-runs")
    example = root / "s3.yaml"
    example.write_text(docs_example(s3_server_running.endpoint))
    paths = yaml.safe_load(example.read_text())
    logs, clusters = paths["inputs"]["served_logs"]["path"], paths["inputs"]["clusters"]["path"]
    warehouse = paths["output"]["warehouse"]
    for uri in (logs, warehouse):
        s3_server_running.bucket(uri.split("/")[2])
    storage.configure(s3_server_running.spark_conf)
    data = root / "data"
    generate(data, START, days=len(DAYS), queries_per_day=60, seed=31)
    table = s3_spark.read.parquet(str(data / "clusters_parquet"))
    table.write.format("delta").save(str(data / "clusters"))
    table.write.format("delta").save(clusters)
    s3_server.upload(data / "served_logs", logs)
    local_config = _settings(
        root / "local.yaml",
        inputs={
            "served_logs": {"path": str(data / "served_logs")},
            "clusters": {"path": str(data / "clusters"), "format": "delta"},
        },
        output={"warehouse": str(root / "wh")},
    )
    s3_config = ["--config", str(example), "--config", str(_settings(root / "suite.yaml"))]

    def both(*argv: str) -> str:
        _run([argv[0], "--config", str(local_config), *argv[1:]])
        return _run([argv[0], *s3_config, *argv[1:]])

    backfill = ("backfill", "--start", str(DAYS[0]), "--end", str(DAYS[2]))
    both(*backfill)
    night_log = both("run", "--date", str(NIGHT))

    # Late rows, and the nightly again: on S3 a process on Comet, the default engine, whose
    # native reader reads the logs from S3 with the credentials chain the session names.
    late = _late_rows(data)
    s3_server.upload(late.parent, f"{logs}/date={DAYS[2]}")
    _run(["run", "--config", str(local_config), "--date", str(NIGHT)])
    comet = root / "comet.yaml"
    comet.write_text("spark: {accelerator: comet}\n")
    process = subprocess.run(
        [sys.executable, "-m", "logmetrics.cli", "--log-format", "json", "run", *s3_config,
         "--config", str(comet), "--date", str(NIGHT)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-3000:]
    assert "Comet's native library did not load" not in process.stderr
    late_log = process.stderr
    return Runs(data, local_config, s3_config, warehouse, night_log, late_log)


def test_every_table_on_s3_is_the_one_on_local_files(s3_spark: SparkSession, runs: Runs) -> None:
    """After the backfill, the nightly and the look-back over late rows: each day table on S3
    holds the same rows as on local files, and the daily numbers are the reference's over
    every row of the logs (the late ones included)."""
    on_s3 = _rows(s3_spark, runs.warehouse)
    local = _rows(s3_spark, str(runs.local_config.parent / "wh"))
    for name in DAY_TABLES:
        assert on_s3[name] == local[name], name
    assert set(on_s3["unique_clusters_daily"]) == set(DAYS)
    source = ds.dataset(runs.data / "served_logs", format="parquet", partitioning="hive")
    rows = source.to_table(columns=["request_id", "served_at", "results", "date"]).to_pylist()
    cluster_rows = [
        (r["chunk_id"], r["cluster_id"])
        for r in ds.dataset(runs.data / "clusters_parquet").to_table().to_pylist()
    ]
    expected = reference.daily(rows, cluster_rows, KS, THRESHOLD, DAYS[0], DAYS[-1])
    daily = s3_spark.read.format("delta").load(f"{runs.warehouse}/unique_clusters_daily")
    got = {(r.metric_date, r.k): r.asDict() for r in daily.where(daily.segment == "all").collect()}
    assert len(expected) == len(got) == len(DAYS) * len(KS)
    for want in expected:
        assert reference.mismatched(got[(want["metric_date"], want["k"])], want) == {}, want


def test_the_nightly_on_s3_appends_its_new_day_and_the_look_back_restates_late_rows(
    s3_spark: SparkSession, runs: Runs
) -> None:
    assert re.search(r"unique_clusters_daily: appended .*new to the table", runs.night_log)
    assert f"restating {DAYS[2]}: inputs changed" in runs.late_log
    ledger = s3_spark.read.format("delta").load(f"{runs.warehouse}/job_runs")
    finished = ledger.where(ledger.status != "started").orderBy("finished_at").collect()
    last = {r.metric_date: (r.status, r.reason) for r in finished}
    assert last == {
        DAYS[0]: ("published", "new"),
        DAYS[1]: ("published", "new"),
        DAYS[2]: ("published", "inputs_changed"),
        NIGHT: ("published", "new"),
    }


def test_report_alerts_and_views_read_the_warehouse_on_s3(
    runs: Runs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    assert main(["report", *runs.s3_config, "--out", str(out)]) == 0
    assert str(NIGHT) in (out / "index.html").read_text()
    days = ["--start", str(DAYS[0]), "--end", str(NIGHT)]
    assert main(["alerts", *runs.s3_config, *days]) == 0
    capsys.readouterr()
    assert main(["views", *runs.s3_config]) == 0
    assert f"Their SQL is in {runs.warehouse}/views.sql" in capsys.readouterr().out
    sql = storage.place(f"{runs.warehouse}/views.sql")
    assert sql is not None and "CREATE OR REPLACE VIEW" in sql.read_text()
    assert f"delta.`{runs.warehouse}/unique_clusters_daily`" in sql.read_text()


def test_a_done_day_on_s3_is_answered_without_spark(runs: Runs, tmp_path: Path) -> None:
    """The nightly again, nothing changed: a process that starts no JVM (the ledger read with
    delta-rs on S3, the footers on S3) says the days are done."""
    import psutil

    process = subprocess.Popen(
        [sys.executable, "-m", "logmetrics.cli", "run", *runs.s3_config, "--date", str(NIGHT)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    seen: set[str] = set()
    watched = psutil.Process(process.pid)
    while process.poll() is None:
        with contextlib.suppress(psutil.Error):
            seen.update(child.name() for child in watched.children(recursive=True))
    out, err = process.communicate()
    assert process.returncode == 0, err
    assert not any("java" in name for name in seen), seen
    assert "already done from the same inputs and config, skipped" in out


def test_a_second_writer_of_the_s3_warehouse_is_refused(
    runs: Runs, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another run holds the warehouse's writer lease (it is alive, on another host): a run
    that would write stops in one line naming it, before it writes anything."""
    lease = storage.place(f"{runs.warehouse}/_writer_lease.json")
    assert lease is not None
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=2)
    lease.write_text(json.dumps({
        "run_id": "a1b2c3d4e5f6", "command": "backfill", "host": "worker-7", "pid": 4242,
        "acquired_at": "2026-12-05T00:00:00+00:00", "expires_at": expires.isoformat(),
    }))  # fmt: skip
    ledger = storage.place(f"{runs.warehouse}/job_runs/_delta_log")
    assert ledger is not None
    commits = len(ledger.listing())
    days = ["--start", str(DAYS[0]), "--end", str(NIGHT), "--force"]
    try:
        status = main(["backfill", *runs.s3_config, *days])
    finally:
        lease.fs.delete_file(lease.path)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1
    assert err[-1].startswith(
        f"logmetrics: error: another logmetrics run writes the warehouse {runs.warehouse}: "
        "run a1b2c3d4e5f6 (backfill, pid 4242 on worker-7"
    )
    assert len(ledger.listing()) == commits
