"""A cluster table too large to broadcast (docs/cluster-scale.md): each chunk of days joins its
entries to the keys of the chunks it serves, broadcast, or, when even those are too many, to the
whole table by a shuffle join. Every path gives the same rows; the cut-down one keeps the plan's
one shuffle (the rows, by request)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from logmetrics.flows.keys import ChunkKeys, keys_for_chunk
from logmetrics.rules.cluster_keys import cluster_keys
from logmetrics.rules.per_request import requests_by_key
from logmetrics.schemas import CLUSTERS, SERVED_LOGS

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
    whole = keys_for_chunk(keys_df, 0, logs_df, table_fits=True, max_chunks=0)
    cut = keys_for_chunk(keys_df, 0, logs_df, table_fits=False, max_chunks=served)
    shuffled = keys_for_chunk(keys_df, 0, logs_df, table_fits=False, max_chunks=served - 1)
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
    cut = keys_for_chunk(keys_df, 0, logs_df, table_fits=False, max_chunks=len(CLUSTER_ROWS))
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
    shuffled = keys_for_chunk(keys_df, 0, logs_df, table_fits=False, max_chunks=0)
    assert _plan(_requests(logs_df, shuffled)) == (
        [
            "hashpartitioning(chunk_hash)",
            "hashpartitioning(chunk_hash)",
            "hashpartitioning(request_key)",
            "hashpartitioning(request_key, metric_date, request_id, is_malformed)",
        ],
        ["SortMergeJoin LeftOuter"],
    )
