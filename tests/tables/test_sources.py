"""Readers: every input format, lossless conversions, partition pruning and clear errors."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from contract import SERVED_LOGS
from logmetrics.config import ClustersInput, ServedLogsInput
from logmetrics.errors import InputError
from logmetrics.inputs.clusters import ClusterSnapshot, clusters_state, read_clusters
from logmetrics.inputs.served_logs import read_served_logs
from logmetrics.schemas import CLUSTERS

DAY = dt.date(2026, 2, 1)
ROWS = [
    ("r1", dt.datetime(2026, 2, 1, 0, 0, tzinfo=dt.UTC), [(2, "b"), (1, "a")]),
    ("r2", dt.datetime(2026, 2, 1, 23, 59, 59, tzinfo=dt.UTC), []),
    ("r3", dt.datetime(2026, 1, 31, 23, 59, 59, tzinfo=dt.UTC), [(1, "a")]),  # the day before
    ("r4", dt.datetime(2026, 2, 2, 0, 0, tzinfo=dt.UTC), [(1, "a")]),  # the day after
]
IN_DAY = ["r1", "r2"]


def _ids(spark: SparkSession, source: ServedLogsInput) -> list[str]:
    df = read_served_logs(spark, source, DAY, DAY)
    return sorted(r.request_id for r in df.select("request_id").collect())


def _contract(df: DataFrame) -> DataFrame:
    """The contract's columns, with integers at one width (formats store them differently)."""

    def entry(e: Column) -> Column:
        return F.struct(e["rank"].cast("long").alias("rank"), e["chunk_id"])

    return df.select("request_id", "served_at", F.transform("results", entry).alias("results"))


def test_parquet_delta_and_json_read_the_same_rows(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.createDataFrame(ROWS, SERVED_LOGS)
    df.write.parquet(str(tmp_path / "pq"))
    df.write.format("delta").save(str(tmp_path / "delta"))
    with open(tmp_path / "logs.jsonl", "w") as out:
        for request_id, served_at, results in ROWS:
            entries = [{"rank": r, "chunk_id": c} for r, c in results]
            line = {
                "request_id": request_id,
                "served_at": served_at.isoformat(),
                "results": entries,
            }
            out.write(json.dumps(line) + "\n")
    expected = read_served_logs(spark, ServedLogsInput(path=str(tmp_path / "pq")), DAY, DAY)
    for fmt, path in (("delta", "delta"), ("json", "logs.jsonl")):
        source = ServedLogsInput(path=str(tmp_path / path), format=fmt)
        got = read_served_logs(spark, source, DAY, DAY)
        assertDataFrameEqual(_contract(got), _contract(expected))
    assert _ids(spark, ServedLogsInput(path=str(tmp_path / "pq"))) == IN_DAY


def test_date_partitions_are_pruned(spark: SparkSession, tmp_path: Path) -> None:
    # A partition far from the requested day holds garbage: reading it would fail.
    spark.createDataFrame(ROWS, SERVED_LOGS).write.parquet(str(tmp_path / "date=2026-02-01"))
    (tmp_path / "date=2026-03-01").mkdir()
    (tmp_path / "date=2026-03-01" / "part-0.parquet").write_bytes(b"not parquet at all")
    source = ServedLogsInput(path=str(tmp_path))
    assert _ids(spark, source) == IN_DAY


def test_any_directory_layout_is_read(spark: SparkSession, tmp_path: Path) -> None:
    # year/month/day directories, no Hive-style names: every file below the path is read.
    for i, (request_id, served_at, results) in enumerate(ROWS):
        spark.createDataFrame([(request_id, served_at, results)], SERVED_LOGS).write.parquet(
            str(tmp_path / f"{served_at:%Y/%m/%d}" / f"batch-{i}")
        )
    assert _ids(spark, ServedLogsInput(path=str(tmp_path))) == IN_DAY


def test_lossless_variants_are_converted(spark: SparkSession, tmp_path: Path) -> None:
    # int64 ids and ranks, a timestamp without time zone (read as UTC).
    entry = pa.struct([("rank", pa.int64()), ("chunk_id", pa.int64())])
    table = pa.table(
        {
            "request_id": pa.array([7, 8], pa.int64()),
            "served_at": pa.array(
                [dt.datetime(2026, 2, 1, 23, 30), dt.datetime(2026, 2, 2, 0, 30)],
                pa.timestamp("us"),
            ),
            "results": pa.array([[{"rank": 2, "chunk_id": 10}], []], pa.list_(entry)),
            "surface": ["web", "app"],
        }
    )
    pq.write_table(table, tmp_path / "part.parquet")
    df = read_served_logs(spark, ServedLogsInput(path=str(tmp_path)), DAY, DAY)
    rows = df.collect()
    assert [(r.request_id, r.results[0].chunk_id, r.surface) for r in rows] == [("7", "10", "web")]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            pa.table({"request_id": ["r"], "results": [[]]}),
            "required column 'served_at' is missing",
        ),
        (
            pa.table({"request_id": ["r"], "served_at": [1.5], "results": [[]]}),
            "column 'served_at' must be a timestamp, found double",
        ),
        (
            pa.table(
                {"request_id": ["r"], "served_at": [dt.datetime(2026, 2, 1)], "results": ["x"]}
            ),
            "column 'results' must be array<struct<rank:int,chunk_id:string>>, found string",
        ),
        (
            pa.table(
                {
                    "request_id": ["r"],
                    "served_at": [dt.datetime(2026, 2, 1)],
                    "results": [[{"rank": "first", "chunk_id": "a"}]],
                }
            ),
            "column 'results.rank' must be an integer, found string",
        ),
        (
            pa.table(
                {
                    "request_id": ["r"],
                    "served_at": [dt.datetime(2026, 2, 1)],
                    "results": [[{"rank": 1, "chunk_id": "a", "tokens": "many"}]],
                }
            ),
            "column 'results.tokens' must be a number, found string",
        ),
    ],
)
def test_off_contract_columns_are_named(
    spark: SparkSession, tmp_path: Path, table: pa.Table, message: str
) -> None:
    pq.write_table(table, tmp_path / "part.parquet")
    with pytest.raises(InputError, match="served logs at") as raised:
        read_served_logs(spark, ServedLogsInput(path=str(tmp_path)), DAY, DAY)
    assert message in str(raised.value)


def test_a_delta_cluster_table_at_a_relative_path(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make demo` names its inputs relative to the working directory."""
    spark.createDataFrame([("a", "A")], CLUSTERS).write.format("delta").save(
        str(tmp_path / "data" / "clusters")
    )
    monkeypatch.chdir(tmp_path)
    snapshot = read_clusters(spark, ClustersInput(path="data/clusters"))
    assert snapshot.version == 0
    assert [tuple(r) for r in snapshot.df.collect()] == [("a", "A")]


def test_a_missing_segment_column_is_named(spark: SparkSession, tmp_path: Path) -> None:
    served = dt.datetime(2026, 2, 1, 12, tzinfo=dt.UTC)
    table = pa.table(
        {
            "request_id": ["r"],
            "served_at": [served],
            "results": [[{"rank": 1, "chunk_id": "a"}]],
            "surface": ["web"],
        }
    )
    pq.write_table(table, tmp_path / "part.parquet")
    source = ServedLogsInput(path=str(tmp_path))
    read_served_logs(spark, source, DAY, DAY, segment_by=("surface",))
    with pytest.raises(InputError) as raised:
        read_served_logs(spark, source, DAY, DAY, segment_by=("surface", "index_version"))
    assert "segment column 'index_version' (metrics.segment_by) is missing" in str(raised.value)


def test_missing_paths_and_non_delta_cluster_table(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="path does not exist"):
        read_served_logs(spark, ServedLogsInput(path=str(tmp_path / "nope")), DAY, DAY)
    spark.createDataFrame([("a", "A")], "chunk_id string, cluster_id string").write.parquet(
        str(tmp_path / "clusters")
    )
    with pytest.raises(InputError, match="cannot read cluster table"):
        read_clusters(spark, ClustersInput(path=str(tmp_path / "clusters")))
    parquet = read_clusters(spark, ClustersInput(path=str(tmp_path / "clusters"), format="parquet"))
    assert parquet.version is None
    assert parquet.df.collect()[0].asDict() == {"chunk_id": "a", "cluster_id": "A"}


def test_a_parquet_cluster_table_state_follows_the_files_spark_reads(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The state changes with a file Spark reads (also below a `_`-named partition holding
    `=`, which Spark lists) and not with one it skips (`_SUCCESS`, `.crc`, `_temporary/`)."""
    root = tmp_path / "clusters"
    table = pa.table({"chunk_id": ["a", "b"], "cluster_id": ["x", "x"]})
    for part in ("_shard=0", "_shard=1"):
        (root / part).mkdir(parents=True)
        pq.write_table(table, root / part / "part-0.parquet")
    source = ClustersInput(path=str(root), format="parquet")

    def state() -> str:
        return clusters_state(spark, source, ClusterSnapshot(df=spark.range(0), version=None))

    before = state()
    for skipped in ("_SUCCESS", ".part-0.parquet.crc", "_temporary/0/part-9.parquet"):
        (root / skipped).parent.mkdir(parents=True, exist_ok=True)
        (root / skipped).write_text("not data")
        assert state() == before, skipped
    pq.write_table(table.slice(0, 1), root / "_shard=1" / "part-0.parquet")
    assert state() != before


def test_a_cluster_table_of_one_parquet_file_has_a_state_of_that_file(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A cluster table configured as one Parquet file (a path Spark reads as it is): its state
    is read, and changes when the file is rewritten (it once failed: the file listed as a
    directory)."""
    path = tmp_path / "clusters.parquet"
    table = pa.table({"chunk_id": ["a", "b"], "cluster_id": ["x", "x"]})
    pq.write_table(table, path)
    source = ClustersInput(path=str(path), format="parquet")

    def state() -> str:
        return clusters_state(spark, source, ClusterSnapshot(df=spark.range(0), version=None))

    before = state()
    assert state() == before
    pq.write_table(table.slice(0, 1), path)
    assert state() != before
