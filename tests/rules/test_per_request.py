"""The rules of the metric on hand-worked cases: every expected number is worked out by hand."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from contract import SERVED_LOGS
from logmetrics.rules.cluster_keys import chunk_hash, cluster_keys
from logmetrics.rules.per_request import explode_windows, with_cluster_keys
from logmetrics.schemas import CLUSTERS
from spark_reference import cluster_facts, key_hash_collisions, unique_clusters_by_request

DAY = dt.date(2026, 1, 5)
T0 = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC)


def _by_query(
    spark: SparkSession, rows: list[tuple], clusters: list[tuple], ks: tuple[int, ...]
) -> DataFrame:
    logs_df = spark.createDataFrame(rows, SERVED_LOGS)
    clusters_df = spark.createDataFrame(clusters, CLUSTERS)
    return (
        unique_clusters_by_request(logs_df, cluster_keys(clusters_df), ks)
        .transform(explode_windows)
        .select("request_id", "k", "unique_clusters", "results", "missing_cluster_results")
    )


def _expect(spark: SparkSession, rows: list[tuple]) -> DataFrame:
    return spark.createDataFrame(
        rows,
        "request_id string, k int, unique_clusters int, results int, missing_cluster_results int",
    )


def test_seed_window_one_paragraph_four_times_plus_six_sources(spark: SparkSession) -> None:
    # The chapter's window: ranks 1-4 are one paragraph (Zendesk, Confluence, PDF, MediaWiki),
    # ranks 5-10 six distinct sources -> 7 distinct clusters in 10 slots.
    results = [(1, "zendesk"), (2, "confluence"), (3, "pdf"), (4, "mediawiki")]
    results += [(r, f"source-{r}") for r in range(5, 11)]
    clusters = [(c, "invoice-dispute") for c in ("zendesk", "confluence", "pdf", "mediawiki")]
    clusters += [(f"source-{r}", f"cluster-{r}") for r in range(5, 11)]
    got = _by_query(spark, [("q", T0, results)], clusters, (1, 4, 5, 10, 20))
    expected = _expect(
        spark,
        [("q", 1, 1, 10, 0), ("q", 4, 1, 10, 0), ("q", 5, 2, 10, 0), ("q", 10, 7, 10, 0)]
        + [("q", 20, 7, 10, 0)],
    )
    assertDataFrameEqual(got, expected)


def test_order_is_by_rank_then_array_position_not_array_order(spark: SparkSession) -> None:
    # Array order is reversed; ranks have a gap (1, 3, 3, 7) and a tie at 3, broken by position:
    # rank order is a, c (pos 1), d (pos 2), b -> clusters X, Y, Z, X.
    results = [(7, "b"), (3, "c"), (3, "d"), (1, "a")]
    clusters = [("a", "X"), ("b", "X"), ("c", "Y"), ("d", "Z")]
    got = _by_query(spark, [("q", T0, results)], clusters, (1, 2, 3, 4))
    expected = _expect(
        spark, [("q", 1, 1, 4, 0), ("q", 2, 2, 4, 0), ("q", 3, 3, 4, 0), ("q", 4, 3, 4, 0)]
    )
    assertDataFrameEqual(got, expected)


def test_tie_at_the_window_edge_goes_to_the_earlier_position(spark: SparkSession) -> None:
    # Two entries at rank 2: the one earlier in the array is inside top-2.
    results = [(2, "same-as-first"), (1, "first"), (2, "other")]
    clusters = [("first", "A"), ("same-as-first", "A"), ("other", "B")]
    got = _by_query(spark, [("q", T0, results)], clusters, (2, 3))
    assertDataFrameEqual(got, _expect(spark, [("q", 2, 1, 3, 0), ("q", 3, 2, 3, 0)]))


def test_null_chunk_or_rank_entries_are_dropped_before_the_window(spark: SparkSession) -> None:
    results = [(1, "a"), (2, None), (None, "b"), (3, "c"), None, (4, "d")]
    clusters = [("a", "A"), ("b", "B"), ("c", "C"), ("d", "D")]
    # Valid entries: a, c, d -> top-2 is a, c (the null-rank b never enters).
    got = _by_query(spark, [("q", T0, results)], clusters, (2, 10))
    assertDataFrameEqual(got, _expect(spark, [("q", 2, 2, 3, 0), ("q", 10, 3, 3, 0)]))


def test_singletons_missing_and_null_cluster_ids(spark: SparkSession) -> None:
    # "absent" is not in the table: its own singleton, and missing. "nullid" is in the table with
    # a null cluster id: its own singleton, not missing. The same chunk twice is one cluster.
    results = [(1, "absent"), (2, "absent"), (3, "nullid"), (4, "nullid"), (5, "k1"), (6, "k2")]
    clusters = [("nullid", None), ("k1", "K"), ("k2", "K")]
    got = _by_query(spark, [("q", T0, results)], clusters, (1, 2, 3, 6))
    expected = _expect(
        spark, [("q", 1, 1, 6, 2), ("q", 2, 1, 6, 2), ("q", 3, 2, 6, 2), ("q", 6, 3, 6, 2)]
    )
    assertDataFrameEqual(got, expected)


def test_singleton_key_never_collides_with_a_cluster_id(spark: SparkSession) -> None:
    # A cluster literally named like a singleton key must stay a different cluster.
    results = [(1, "x"), (2, "y")]
    clusters = [("x", "single:y"), ("x", "s:y")]
    got = _by_query(spark, [("q", T0, results)], clusters, (2,))
    assertDataFrameEqual(got, _expect(spark, [("q", 2, 2, 2, 1)]))


def test_chunk_listed_twice_takes_its_smallest_non_null_cluster_id(spark: SparkSession) -> None:
    clusters = [("a", "M"), ("a", None), ("a", "B"), ("b", "B"), ("c", None), ("c", None)]
    got = cluster_keys(spark.createDataFrame([*clusters, ("b", " ")], CLUSTERS))
    expected = spark.createDataFrame(
        [("a", "c:B", 3, 0), ("b", "c: ", 2, 1), ("c", "s:c", 2, 0)],
        "chunk_id string, cluster_key string, listed long, empty_ids long",
    )
    assertDataFrameEqual(got.drop("chunk_hash", "cluster_hash"), expected)
    facts = cluster_facts(got).first()
    assert facts is not None
    assert (facts.cluster_duplicate_chunk_ids, facts.cluster_empty_ids) == (3, 1)
    results = [(1, "a"), (2, "b"), (3, "c")]
    counted = _by_query(spark, [("q", T0, results)], clusters, (3,))
    assertDataFrameEqual(counted, _expect(spark, [("q", 3, 2, 3, 0)]))


def test_redelivered_request_counts_once_and_earliest_copy_wins(spark: SparkSession) -> None:
    one = [(1, "a"), (2, "b")]
    other = [(1, "a"), (2, "a")]
    rows = [
        ("dup", T0, one),
        ("dup", T0, one),  # an identical redelivery
        ("late", T0 + dt.timedelta(minutes=5), other),
        ("late", T0, one),  # the earliest copy is the one kept
    ]
    clusters = [("a", "A"), ("b", "B")]
    got = _by_query(spark, rows, clusters, (2,))
    assertDataFrameEqual(got, _expect(spark, [("dup", 2, 2, 2, 0), ("late", 2, 2, 2, 0)]))


def test_empty_and_short_lists_still_count_as_queries(spark: SparkSession) -> None:
    rows = [
        ("empty", T0, []),
        ("all-null", T0, [(None, "a"), (1, None)]),
        ("short", T0, [(1, "a")]),
    ]
    got = _by_query(spark, rows, [("a", "A")], (1, 10))
    expected = _expect(
        spark,
        [("empty", 1, 0, 0, 0), ("empty", 10, 0, 0, 0), ("all-null", 1, 0, 0, 0)]
        + [("all-null", 10, 0, 0, 0), ("short", 1, 1, 1, 0), ("short", 10, 1, 1, 0)],
    )
    assertDataFrameEqual(got, expected)


def test_malformed_rows_never_enter_the_metrics(spark: SparkSession) -> None:
    rows = [
        (None, T0, [(1, "a")]),
        ("no-time", None, [(1, "a")]),
        ("no-results", T0, None),
        ("ok", T0, [(1, "a")]),
    ]
    got = _by_query(spark, rows, [("a", "A")], (10,))
    assertDataFrameEqual(got, _expect(spark, [("ok", 10, 1, 1, 0)]))


def test_no_rows_gives_no_requests(spark: SparkSession) -> None:
    got = _by_query(spark, [], [], (10,))
    assert got.count() == 0


@pytest.mark.parametrize(
    ("served_at", "metric_date"),
    [
        (dt.datetime(2026, 1, 5, 23, 59, 59, 999999, tzinfo=dt.UTC), dt.date(2026, 1, 5)),
        (dt.datetime(2026, 1, 6, 0, 0, tzinfo=dt.UTC), dt.date(2026, 1, 6)),
        # 01:30 in UTC+2 is 23:30 UTC the day before.
        (
            dt.datetime(2026, 1, 6, 1, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            dt.date(2026, 1, 5),
        ),
    ],
)
def test_metric_date_is_the_utc_date(
    spark: SparkSession, served_at: dt.datetime, metric_date: dt.date
) -> None:
    logs_df = spark.createDataFrame([("q", served_at, [(1, "a")])], SERVED_LOGS)
    got = unique_clusters_by_request(
        logs_df, cluster_keys(spark.createDataFrame([], CLUSTERS)), (1,)
    )
    assert [row.metric_date for row in got.collect()] == [metric_date]


def test_cluster_hash_is_one_per_key_and_collisions_are_detected(spark: SparkSession) -> None:
    clusters = [("a", "K"), ("b", "K"), ("c", "L"), ("d", None), ("e", None)]
    keys_df = cluster_keys(spark.createDataFrame(clusters, CLUSTERS))
    hashes = {r.chunk_id: r.cluster_hash for r in keys_df.collect()}
    assert hashes["a"] == hashes["b"]
    assert len({hashes["a"], hashes["c"], hashes["d"], hashes["e"]}) == 4
    assert key_hash_collisions(keys_df).isEmpty()
    salted = {
        r.chunk_id: r.cluster_hash
        for r in cluster_keys(
            keys_df.select("chunk_id", F.lit("K").alias("cluster_id")), salt=1
        ).collect()
    }
    assert salted["a"] != hashes["a"]
    # Two different keys, or two chunks, forced onto one hash: the check must see it.
    forced = keys_df.withColumn("cluster_hash", F.lit(7).cast("long"))
    assert [(r.kind, r.values) for r in key_hash_collisions(forced).collect()] == [("cluster", 4)]
    forced = keys_df.withColumn("chunk_hash", F.lit(7).cast("long"))
    assert [(r.kind, r.values) for r in key_hash_collisions(forced).collect()] == [("chunk", 5)]


def test_a_chunk_sharing_a_hash_with_a_listed_chunk_is_still_missing(spark: SparkSession) -> None:
    # The join is on 64-bit chunk hashes; the chunk id is compared after it.
    keys_df = cluster_keys(spark.createDataFrame([("listed", "K")], CLUSTERS))
    entries_df = spark.createDataFrame([("listed",), ("other",)], "chunk_id string")
    forced = keys_df.withColumn("chunk_hash", chunk_hash(F.lit("other"), 0))
    got = with_cluster_keys(entries_df, forced).collect()
    assert {(r.chunk_id, r.cluster_hash is None, r.missing_chunk) for r in got} == {
        ("listed", True, "listed"),
        ("other", True, "other"),
    }
    got = with_cluster_keys(entries_df, keys_df).collect()
    assert {(r.chunk_id, r.cluster_hash is None, r.missing_chunk) for r in got} == {
        ("listed", False, None),
        ("other", True, "other"),
    }
