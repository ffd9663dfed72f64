"""A cluster table too large to broadcast (docs/cluster-scale.md): each chunk of days joins its
entries to the keys of the chunks it serves, broadcast, or, when even those are too many, to the
whole table by a shuffle join. Every path gives the same rows; the cut-down one keeps the plan's
one shuffle (the rows, by request)."""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from contract import SERVED_LOGS
from logmetrics.config import ClustersInput, Config, InputsConfig
from logmetrics.errors import LogmetricsError
from logmetrics.flows.keys import (
    BROADCAST_CHUNKS_PER_HEAP_GIB,
    BROADCAST_CHUNKS_PER_NATIVE_GIB,
    KEEP_KEYS_MIN_CHUNKS,
    RESULT_BYTES_PER_CHUNK,
    ChunkKeys,
    KeysPlan,
    broadcast_limit,
    kept_keys,
    keys_for_chunk,
    out_of_memory,
    plan_after_memory_failure,
    start_cluster_keys,
)
from logmetrics.flows.side_steps import SideSteps
from logmetrics.phases import Phases
from logmetrics.rules.cluster_keys import cluster_keys
from logmetrics.rules.per_request import requests_by_key
from logmetrics.schemas import CLUSTERS
from logmetrics.session import BroadcastMemory
from logmetrics.tables.keys_cache import KEEP, FolderKeys, KeysStore, TableKeys

T0 = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC)
KS = (1, 2, 3)
CLUSTER_ROWS = [
    ("a", "A"),
    ("b", "A"),
    ("c", "C"),
    ("d", None),  # a singleton
    ("e", "E"),
    ("f", "F"),  # f, g and h are never served: the cut-down leaves them out
    ("g", "F"),
    ("h", None),
]
LOG_ROWS = [
    ("q1", T0, [(1, "a"), (2, "b"), (3, "c")]),
    ("q2", T0, [(1, "x"), (2, "d")]),  # x is not in the table: it stays missing
    ("q3", T0, [(1, "c"), (2, None), (None, "a")]),  # entries set aside
    ("q4", T0, [(1, "a")]),
    ("q4", T0 + dt.timedelta(minutes=1), [(1, "e")]),  # a later, conflicting copy: not counted
    (None, T0, [(1, "e")]),  # malformed
    ("q5", T0, []),
    ("q6", T0, None),  # malformed
]


@pytest.fixture(scope="module")
def keys_df(spark: SparkSession) -> Iterator[DataFrame]:
    keys_df = cluster_keys(spark.createDataFrame(CLUSTER_ROWS, CLUSTERS)).persist()
    yield keys_df
    keys_df.unpersist()


def _requests(logs_df: DataFrame, keys: ChunkKeys) -> DataFrame:
    return requests_by_key(logs_df, keys.df, KS, 0, keys.broadcast)


@pytest.mark.parametrize("rows", [LOG_ROWS, []], ids=["served", "no rows"])
def test_every_path_gives_the_same_rows(
    spark: SparkSession, keys_df: DataFrame, rows: list[tuple]
) -> None:
    logs_df = spark.createDataFrame(rows, SERVED_LOGS)
    served = len({e[1] for r in rows if r[2] is not None for e in r[2]})  # None counts once
    assert served < len(CLUSTER_ROWS)
    whole = keys_for_chunk(keys_df, 0, logs_df, KeysPlan(True, 0))
    cut = keys_for_chunk(keys_df, 0, logs_df, KeysPlan(False, served))
    shuffled = keys_for_chunk(keys_df, 0, logs_df, KeysPlan(False, served - 1))
    try:
        assert (whole.broadcast, whole.served_df) == (True, None)
        assert cut.broadcast and cut.served_df is not None
        assert cut.served_df.count() == served
        if rows:  # only the served chunks that are listed are left: a, b, c, d and e
            assert sorted(r.chunk_id for r in cut.df.collect()) == ["a", "b", "c", "d", "e"]
        else:
            assert cut.df.isEmpty()
        assert (shuffled.broadcast, shuffled.served_df) == (False, None)
        assert shuffled.df is keys_df

        expected = _requests(logs_df, whole)
        assert expected.count() == (7 if rows else 0)  # q1..q6, and the two malformed rows
        assertDataFrameEqual(_requests(logs_df, cut), expected)
        shuffled_df = _requests(logs_df, shuffled)
        assert _plan(shuffled_df)[1] == ["SortMergeJoin LeftOuter"]  # however small the keys
        assertDataFrameEqual(shuffled_df, expected)
    finally:
        cut.unpersist()


@pytest.fixture
def planned_as_on_a_cluster(spark: SparkSession) -> Iterator[None]:
    """Several shuffle partitions (with one, Spark needs no shuffle to co-locate a join) and no
    adaptive execution (its plans are final only once run): restored afterwards."""
    settings = {"spark.sql.shuffle.partitions": "4", "spark.sql.adaptive.enabled": "false"}
    before = {key: spark.conf.get(key) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


def _plan(df: DataFrame) -> tuple[list[str], list[str]]:
    """The executed plan's shuffles (their partitioning, without expression ids or partition
    counts) and its joins. Cached frames count as scans: how they were computed once (the
    cluster keys' group-by, the served hashes' distinct) is not part of this plan. Comet's
    native operators count as the Spark operators they replace (CometExchange, a shuffle;
    CometBroadcastHashJoin, a broadcast join)."""
    shuffles, joins = [], []
    todo = [df._jdf.queryExecution().executedPlan()]
    while todo:
        node = todo.pop()
        name = node.nodeName().removeprefix("Comet")
        if name in ("Exchange", "ColumnarExchange"):
            partitioning = node.outputPartitioning().toString()
            shuffles.append(re.sub(r"#\d+L?|, \d+\)$", "", partitioning) + ")")
        elif name.endswith("Join"):
            joins.append(f"{name} {node.joinType()}")
        children = node.children()
        todo += [children.apply(i) for i in range(children.size())]
    return sorted(shuffles), sorted(joins)


@pytest.mark.usefixtures("planned_as_on_a_cluster")
def test_the_cut_down_keys_are_broadcast_and_the_entries_never_shuffled(
    spark: SparkSession, keys_df: DataFrame
) -> None:
    logs_df = spark.createDataFrame(LOG_ROWS, SERVED_LOGS)
    cut = keys_for_chunk(keys_df, 0, logs_df, KeysPlan(False, len(CLUSTER_ROWS)))
    try:
        assert cut.served_df is not None
        # The one shuffle is the rows' by request; the entries meet the cut-down keys in a
        # broadcast join, and the keys are cut down by a broadcast semi-join (not shuffled).
        assert _plan(_requests(logs_df, cut)) == (
            ["hashpartitioning(request_key)"],
            ["BroadcastHashJoin LeftOuter", "BroadcastHashJoin LeftSemi"],
        )
    finally:
        cut.unpersist()

    # The check can fail: joined to the whole table without a broadcast (a few keys, still
    # not broadcast), the entries are shuffled to the keys by chunk hash, and back to their
    # request for the group-by.
    shuffled = keys_for_chunk(keys_df, 0, logs_df, KeysPlan(False, 0))
    assert _plan(_requests(logs_df, shuffled)) == (
        [
            "hashpartitioning(chunk_hash)",
            "hashpartitioning(chunk_hash)",
            "hashpartitioning(request_key)",
            "hashpartitioning(request_key, metric_date, request_id, is_malformed)",
        ],
        ["SortMergeJoin LeftOuter"],
    )


# --- kept keys (tables.keys_cache) -------------------------------------------------------------


ROWS = KEEP_KEYS_MIN_CHUNKS  # the rows the tests' cluster tables claim, so their keys are kept


def _config(tmp_path: Path, **backfill: object) -> Config:
    return Config.model_validate(
        {
            "inputs": {"clusters": {"path": str(tmp_path / "clusters"), "format": "parquet"}},
            "output": {"warehouse": str(tmp_path / "wh")},
            "backfill": backfill,
        }
    )


def _start(spark: SparkSession, kept: KeysStore | None, salt: int = 0) -> tuple[list, dict, int]:
    """The keys (sorted rows), the facts and the salt `start_cluster_keys` gives."""
    clusters_df = spark.createDataFrame(CLUSTER_ROWS, CLUSTERS)
    with SideSteps(Phases()) as side:
        keys = start_cluster_keys(clusters_df, salt, side, kept)
        try:
            columns = ["chunk_id", "cluster_key", "chunk_hash", "cluster_hash"]
            rows = sorted(tuple(r) for r in keys.df.select(*columns).collect())
            return rows, keys.facts(), keys.salt
        finally:
            keys.unpersist()


def test_kept_keys_are_the_keys_built_in_memory_with_their_facts(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Built and kept by one run, read by the next, without a check: the same rows and facts
    as keys built in memory. A kept entry that is not as written (a file gone, a marker
    missing) is never read: the keys are built, and kept, again."""
    built = _start(spark, None)
    assert built[1] == {
        "cluster_chunks": 8,
        "cluster_duplicate_chunk_ids": 0,
        "cluster_empty_ids": 0,
    }
    kept = kept_keys(_config(tmp_path), "v3", ROWS)
    assert isinstance(kept, FolderKeys) and kept.root.path == str(tmp_path / "wh" / "_cluster_keys")
    root = Path(kept.root.path)
    assert kept.find(spark, 0) is None
    assert _start(spark, kept) == built  # built, written, checked and kept
    (entry,) = root.glob("*/*/_entry.json")
    with caplog.at_level(logging.INFO, logger="logmetrics"):
        assert _start(spark, kept) == built  # read back
    assert "reused" in caplog.text

    data = entry.parent / "keys"
    next(data.glob("part-*.parquet")).unlink()  # a file lost: not as written
    assert kept.find(spark, 0) is None
    assert _start(spark, kept) == built
    assert kept.find(spark, 0) is not None
    for marker in root.glob("*/*/_entry.json"):
        marker.unlink()  # half-written entries: never read
    assert kept.find(spark, 0) is None


def test_a_salt_known_to_collide_is_skipped_and_old_entries_go(
    spark: SparkSession, tmp_path: Path
) -> None:
    kept = kept_keys(_config(tmp_path), "v3", ROWS)
    assert isinstance(kept, FolderKeys)
    kept.commit(spark, kept.new_entry(0), None)  # salt 0 found to collide by an earlier run
    rows, facts, salt = _start(spark, kept)
    assert salt == 1
    assert (rows, facts) == _start(spark, None, salt=1)[:2]

    for state in ("v4", "v5", "v6"):  # newer table versions: the oldest entries go
        other = kept_keys(_config(tmp_path), state, ROWS)
        assert other is not None and other.identity != kept.identity
        _start(spark, other)
    assert len(list(Path(kept.root.path).glob("*/*/_entry.json"))) == KEEP
    assert kept.find(spark, 1) is None


def test_where_keys_are_kept(tmp_path: Path) -> None:
    """Beside the warehouse (local or S3), in `cluster_keys_dir` when set, in tables beside
    catalog outputs; nowhere when reuse is off, the folder on a store with no reader here, a
    Parquet table on such a store (its state is its files' names alone) or a table too small
    to gain; the identity changes with the table's state."""
    first = kept_keys(_config(tmp_path), "v1", ROWS)
    assert first is not None
    assert first.identity != kept_keys(_config(tmp_path), "v2", ROWS).identity  # type: ignore[union-attr]
    elsewhere = kept_keys(_config(tmp_path, cluster_keys_dir=str(tmp_path / "k")), "v1", ROWS)
    assert isinstance(elsewhere, FolderKeys) and elsewhere.root.path == str(tmp_path / "k")
    assert kept_keys(_config(tmp_path, keep_cluster_keys=False), "v1", ROWS) is None
    on_s3 = kept_keys(_config(tmp_path, cluster_keys_dir="s3a://bucket/keys"), "v1", ROWS)
    assert isinstance(on_s3, FolderKeys) and on_s3.root.uri() == "s3a://bucket/keys"
    assert kept_keys(_config(tmp_path, cluster_keys_dir="abfss://c@a/keys"), "v1", ROWS) is None
    remote = _config(tmp_path).model_copy(
        update={"inputs": InputsConfig(clusters=ClustersInput(path="gs://b/c", format="parquet"))}
    )
    assert kept_keys(remote, "listing-hash", ROWS) is None
    catalog = Config.model_validate(
        {"inputs": {"clusters": {"path": "c"}}, "output": {"catalog": "main", "schema": "m"}}
    )
    in_tables = kept_keys(catalog, "v1", ROWS)
    assert isinstance(in_tables, TableKeys) and str(in_tables).startswith("`main`.`m`.")
    assert kept_keys(_config(tmp_path), "v1", ROWS - 1) is None


# --- the broadcast limit and a broadcast out of memory -----------------------------------------

GIB = 1024**3


def test_the_automatic_limit_follows_the_memory_that_holds_the_broadcast() -> None:
    """The heap (the driver's, or an executor's when smaller), Comet's pool per task when it
    runs, and what `spark.driver.maxResultSize` lets the driver collect, whichever is least."""
    local = BroadcastMemory(driver_heap=4 * GIB, max_result=None, executor_heap=None)
    limit, why = broadcast_limit("auto", local)
    assert limit == 4 * BROADCAST_CHUNKS_PER_HEAP_GIB and "auto: driver heap 4.0 GiB" in why
    assert broadcast_limit("auto", BroadcastMemory(2 * GIB, None, None))[0] == limit // 2
    # On a cluster the executors hold a copy each: the smaller heap bounds it.
    assert broadcast_limit("auto", BroadcastMemory(4 * GIB, None, GIB))[0] == limit // 4
    # Comet: each of the tasks run at once builds the hash table in its share of the pool.
    comet = BroadcastMemory(4 * GIB, None, None, native_pool=GIB // 2, task_slots=4)
    assert broadcast_limit("auto", comet)[0] == BROADCAST_CHUNKS_PER_NATIVE_GIB // 8
    assert broadcast_limit("auto", replace(comet, task_slots=1))[0] == min(
        BROADCAST_CHUNKS_PER_NATIVE_GIB // 2, limit
    )
    small_results = BroadcastMemory(4 * GIB, 64 * RESULT_BYTES_PER_CHUNK, None)
    assert broadcast_limit("auto", small_results)[0] == 64
    assert broadcast_limit(123, local) == (123, "backfill.broadcast_max_chunks")


def test_a_broadcast_out_of_memory_takes_the_next_plan_then_stops_with_a_sentence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = BroadcastMemory(driver_heap=GIB // 2, max_result=None, executor_heap=None)
    lost = RuntimeError("Job aborted: Lost task 5.0 (TID 42): TaskResultLost (result lost)")
    assert out_of_memory(lost)
    assert out_of_memory(RuntimeError("java.lang.OutOfMemoryError: Java heap space"))
    assert not out_of_memory(RuntimeError("FAILED_READ_FILE: part-0.parquet"))

    whole = KeysPlan(True, 1000)
    with caplog.at_level(logging.WARNING, logger="logmetrics"):
        served = plan_after_memory_failure(whole, lost, memory, table_rows=900)
        shuffled = plan_after_memory_failure(served, lost, memory, table_rows=900)
    assert served == KeysPlan(False, 1000)
    assert (shuffled.table_fits, shuffled.max_chunks) == (False, 0)
    assert "whole cluster table's keys (900 rows) ran out of memory" in caplog.text
    assert "computed again with its entries shuffled" in caplog.text
    with pytest.raises(LogmetricsError) as stopped:
        plan_after_memory_failure(shuffled, lost, memory, table_rows=900)
    line = str(stopped.value)
    assert "\n" not in line and "(driver heap 0.5 GiB)" in line
    assert "lower backfill.broadcast_max_chunks" in line and "raise spark.driver_memory" in line


@pytest.mark.slow
def test_kept_keys_in_tables_beside_catalog_outputs(spark: SparkSession) -> None:
    """Catalog outputs with no keys folder: the keys are kept in two Delta tables of their
    schema, read back by the next run with their facts; a salt known to collide is skipped;
    past KEEP entries the oldest go from both tables."""
    spark.sql("CREATE SCHEMA IF NOT EXISTS kept_keys_beside")
    config = Config.model_validate(
        {"inputs": {"clusters": {"path": "c"}}, "output": {"schema": "kept_keys_beside"}}
    )
    built = _start(spark, None)
    kept = kept_keys(config, "v3", ROWS)
    assert isinstance(kept, TableKeys)
    assert kept.find(spark, 0) is None
    assert _start(spark, kept) == built  # built, written, checked and kept
    found = kept.find(spark, 0)
    assert found is not None and found.facts == built[1]
    assert (
        sorted(
            tuple(r)
            for r in kept.read(spark, found)
            .select("chunk_id", "cluster_key", "chunk_hash", "cluster_hash")
            .collect()
        )
        == built[0]
    )
    assert _start(spark, kept) == built  # read back

    other = kept_keys(config, "v4", ROWS)
    assert isinstance(other, TableKeys)
    other.commit(spark, other.new_entry(0), None)  # salt 0 found to collide by an earlier run
    assert _start(spark, other)[2] == 1
    for state in ("v5", "v6"):
        newer = kept_keys(config, state, ROWS)
        assert newer is not None
        _start(spark, newer)
    entries = spark.read.table("kept_keys_beside.logmetrics_cluster_keys_entries")
    assert entries.count() == KEEP
    assert kept.find(spark, 0) is None  # the oldest went
    keys = spark.read.table("kept_keys_beside.logmetrics_cluster_keys")
    assert {r.entry for r in keys.select("entry").distinct().collect()} <= {
        r.entry for r in entries.collect()
    }
