"""The fast paths' remote forms on a real S3 server (SeaweedFS, benchmarks/s3_server.py): Parquet
footers, the damaged-file scan, ready markers, a Parquet cluster table's state, a table's commits
and the kept cluster keys are read on S3 as on local files, and say what Spark's S3A says; a
user's S3 mistake (credentials, bucket, endpoint, path) is one line before Spark starts."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from benchmarks import s3_server
from pyarrow import fs as pafs
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from logmetrics import storage
from logmetrics.cli import main
from logmetrics.config import Config, OutputConfig, ServedLogsInput
from logmetrics.flows.keys import KEEP_KEYS_MIN_CHUNKS, kept_keys, start_cluster_keys
from logmetrics.flows.side_steps import SideSteps
from logmetrics.inputs import narrow_pass as inputs_flow
from logmetrics.inputs.clusters import clusters_state, read_clusters
from logmetrics.inputs.files import date_partition_column
from logmetrics.inputs.footers import footer_days
from logmetrics.inputs.markers import missing_ready_markers
from logmetrics.inputs.scan import scan_served_logs
from logmetrics.phases import Phases
from logmetrics.schemas import CLUSTERS
from logmetrics.synthetic import generate
from logmetrics.tables.catalog import JOB_RUNS_TABLE, recent_commits, table_ref
from logmetrics.tables.keys_cache import FolderKeys

START = dt.date(2026, 5, 1)
DAYS = [START + dt.timedelta(days=i) for i in range(3)]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("s3-data")
    generate(out, START, days=3, queries_per_day=40, seed=11)
    return out


def _config(s3: str, **logs: object) -> Config:
    return Config.model_validate(
        {
            "inputs": {
                "served_logs": {"path": f"{s3}/logs", **logs},
                "clusters": {"path": f"{s3}/clusters", "format": "parquet"},
            },
            "output": {"warehouse": f"{s3}/wh"},
        }
    )


@pytest.mark.parametrize("scheme", ["s3a", "s3"])
def test_footers_on_s3_place_each_file_as_spark_reads_it(
    s3_spark: SparkSession,
    s3: str,
    generated: Path,
    monkeypatch: pytest.MonkeyPatch,
    scheme: str,
) -> None:
    """Each day's input state from the footers read on S3 equals the narrow pass's over the
    same files through S3A (paths, sizes, modification times as Spark's file metadata gives
    them; `s3://` paths too, which the local session maps to S3A), so the ledger records one
    state whichever way a run took."""
    s3_server.upload(generated / "served_logs", f"{s3}/logs")
    s3 = s3.replace("s3a://", f"{scheme}://")
    config = _config(s3)
    source = config.inputs.logs()
    assert date_partition_column(source) == "date"
    footers = footer_days(source, DAYS[0], DAYS[-1])
    assert footers is not None and not footers.unplaced and len(footers.placed) == 3
    assert all(
        s.startswith(f"{s3}/logs/date=") for states in footers.states.values() for s in states
    )
    by_footers = inputs_flow.day_inputs(s3_spark, config, "v0", DAYS, [])
    monkeypatch.setattr(inputs_flow, "footer_days", lambda *a, **k: None)
    by_spark = inputs_flow.day_inputs(s3_spark, config, "v0", DAYS, [])
    assert by_footers == by_spark
    assert all(state.files >= 1 for state in by_spark.values())


def test_a_damaged_file_on_s3_is_found_before_spark_starts(s3: str, generated: Path) -> None:
    s3_server.upload(generated / "served_logs", f"{s3}/logs")
    bad = storage.place(f"{s3}/logs/date=2026-05-02/damaged.parquet")
    assert bad is not None
    with bad.fs.open_output_stream(bad.path) as out:
        out.write(b"PAR1 not a parquet file")
    found = scan_served_logs(None, _config(s3).inputs.logs(), DAYS[0], DAYS[-1])
    assert [(c.file, c.partition_date) for c in found] == [(bad.uri(), DAYS[1])]


def test_ready_markers_on_s3_are_looked_at_without_spark(s3: str, generated: Path) -> None:
    s3_server.upload(generated / "served_logs", f"{s3}/logs")
    source = ServedLogsInput(path=f"{s3}/logs", ready_marker="_SUCCESS")
    marker = storage.place(f"{s3}/logs/date=2026-05-01/_SUCCESS")
    assert marker is not None
    marker.write_text("")
    missing = missing_ready_markers(source, DAYS, spark=None)
    assert missing == {day: f"{s3}/logs/date={day.isoformat()}/_SUCCESS" for day in DAYS[1:]}


def test_a_parquet_cluster_table_on_s3_has_the_state_of_its_listing(
    s3_spark: SparkSession, s3: str, generated: Path
) -> None:
    s3_server.upload(generated / "clusters_parquet", f"{s3}/clusters")
    source = _config(s3).inputs.clusters
    clusters = read_clusters(s3_spark, source)
    before = clusters_state(s3_spark, source, clusters)
    assert before == clusters_state(s3_spark, source, clusters)
    root = storage.place(f"{s3}/clusters")
    assert root is not None
    (part,) = _files_below(root)
    table = pq.read_table(generated / "clusters_parquet")
    pq.write_table(table.slice(0, table.num_rows - 1), part.path, filesystem=root.fs)
    assert clusters_state(s3_spark, source, clusters) != before  # the same name, rewritten


def test_a_tables_commits_on_s3_are_read_from_its_log_as_delta_says_them(
    s3_spark: SparkSession, s3: str
) -> None:
    """The append path's reading of a table's newest commits, from the commit files on S3,
    equals `DESCRIBE HISTORY`'s through Delta (operations and userMetadata, newest first)."""
    output = OutputConfig(warehouse=f"{s3}/wh")
    location = table_ref(output, JOB_RUNS_TABLE).location
    assert location is not None
    rows = s3_spark.range(3).withColumn("metric_date", F.current_date())
    rows.write.format("delta").save(location)
    for n in range(3):
        rows.write.format("delta").mode("append").option("userMetadata", f"mark {n}").save(location)
    s3_spark.sql(f"DELETE FROM delta.`{location}` WHERE id = 1")
    read = recent_commits(s3_spark, output, JOB_RUNS_TABLE, limit=4)
    history = s3_spark.sql(f"DESCRIBE HISTORY delta.`{location}` LIMIT 4").collect()
    assert [(c.version, c.operation, c.user_metadata) for c in read] == [
        (r.version, r.operation, r.userMetadata) for r in history
    ]
    assert [c.user_metadata for c in read][1:] == ["mark 2", "mark 1", "mark 0"]


def test_kept_cluster_keys_live_beside_a_warehouse_on_s3(
    s3_spark: SparkSession, s3: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Built and kept by one run under `<warehouse>/_cluster_keys` on S3, read back by the
    next; an entry whose files are not as written is never read."""
    rows = [(f"c{i}", f"k{i % 3}" if i % 4 else None) for i in range(12)]
    clusters_df = s3_spark.createDataFrame(rows, CLUSTERS)
    config = Config.model_validate(
        {"inputs": {"clusters": {"path": f"{s3}/clusters"}}, "output": {"warehouse": f"{s3}/wh"}}
    )
    kept = kept_keys(config, "v7", KEEP_KEYS_MIN_CHUNKS)
    assert isinstance(kept, FolderKeys) and kept.root.uri() == f"{s3}/wh/_cluster_keys"

    def keys() -> tuple[list[tuple[object, ...]], dict[str, int]]:
        with SideSteps(Phases()) as side:
            started = start_cluster_keys(clusters_df, 0, side, kept)
            rows = sorted(tuple(r) for r in started.df.select("chunk_id", "cluster_key").collect())
            return rows, started.facts()

    built = keys()
    markers = [i for i in _files_below(kept.root) if i.base_name == "_entry.json"]
    assert len(markers) == 1
    assert json.loads(kept.root.at(markers[0].path).read_text())["facts"] == built[1]
    with caplog.at_level("INFO", logger="logmetrics"):
        assert keys() == built
    assert "reused" in caplog.text
    data = [i for i in _files_below(kept.root) if i.base_name.startswith("part-")]
    kept.root.fs.delete_file(data[0].path)  # a file lost: not as written
    assert kept.find(s3_spark, 0) is None
    assert keys() == built  # built and kept again


def _files_below(root: storage.Place) -> list[pafs.FileInfo]:
    return [i for i in root.listing(recursive=True) if i.type == pafs.FileType.File]


def _free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_a_users_s3_mistake_is_one_line_naming_the_path_before_spark(
    s3: str,
    s3_server_running: s3_server.S3Server,
    generated: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wrong credentials, a bucket that does not exist, an endpoint that does not answer, a
    path with a typo: exit 1, one line naming the path and never the secret, nothing written
    (no session is asked for: the check runs before Spark starts)."""
    s3_server.upload(generated / "served_logs", f"{s3}/logs")
    s3_server.upload(generated / "clusters_parquet", f"{s3}/clusters")
    import logmetrics.session

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(logmetrics.session, "get_spark", no_spark)
    endpoint, s3_conf = s3_server_running.endpoint, s3_server_running.spark_conf

    def run(config: dict[str, object], secret: str | None = None) -> tuple[int, str]:
        path = tmp_path / "job.yaml"
        path.write_text(json.dumps(config))
        saved = os.environ["AWS_SECRET_ACCESS_KEY"]
        os.environ["AWS_SECRET_ACCESS_KEY"] = secret or saved
        try:
            status = main(["run", "--config", str(path), "--date", "2026-05-02"])
        finally:
            os.environ["AWS_SECRET_ACCESS_KEY"] = saved
            storage.configure(s3_conf)
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        return status, err

    def job(logs: str, conf_endpoint: str = endpoint) -> dict[str, object]:
        return {
            "inputs": {
                "served_logs": {"path": logs},
                "clusters": {"path": f"{s3}/clusters", "format": "parquet"},
            },
            "output": {"warehouse": f"{s3}/wh"},
            "spark": {
                "conf": {
                    "spark.hadoop.fs.s3a.endpoint": conf_endpoint,
                    "spark.hadoop.fs.s3a.path.style.access": "true",
                }
            },
        }

    secret = "not-the-secret-0123456789abcdef"
    status, err = run(job(f"{s3}/logs"), secret=secret)
    assert status == 1 and f"served logs at {s3}/logs" in err and "credentials" in err
    assert secret not in err
    status, err = run(job("s3a://no-such-bucket-here/logs"))
    assert status == 1 and "bucket 'no-such-bucket-here' does not exist" in err
    dead = f"http://127.0.0.1:{_free_port()}"
    status, err = run(job(f"{s3}/logs", conf_endpoint=dead))
    assert status == 1 and f"the S3 endpoint {dead} does not answer" in err
    status, err = run(job(f"{s3}/lgos"))
    assert status == 1 and err.endswith(f"served logs at {s3}/lgos: path does not exist")
    wh = storage.place(f"{s3}/wh")
    assert wh is not None and not wh.exists()  # nothing published


def test_a_store_without_a_reader_here_is_left_to_spark_and_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ABFS and GCS paths: no footers, no scan, no kept keys folder; the run's log says what
    it does instead, once per kind."""
    source = ServedLogsInput(path="abfss://logs@account.dfs.core.windows.net/served")
    with caplog.at_level("INFO", logger="logmetrics"):
        assert footer_days(source, DAYS[0], DAYS[-1]) is None
        assert footer_days(source, DAYS[0], DAYS[-1]) is None
        assert scan_served_logs(None, source, DAYS[0], DAYS[-1]) == []
        config = Config.model_validate(
            {
                "inputs": {"clusters": {"path": "gs://b/clusters"}},
                "output": {"warehouse": "gs://b/wh"},
            }
        )
        assert kept_keys(config, "v1", KEEP_KEYS_MIN_CHUNKS) is None
    said = [r.getMessage() for r in caplog.records]
    assert (
        said.count(
            "the log files' footers on abfss:// is read through Spark: the narrow pass reads them"
        )
        == 1
    )
    assert any(m.startswith("the damaged-file scan on abfss://") for m in said)
    assert any(m.startswith("kept cluster keys on gs://") for m in said)
