"""Second Spark paths to the same numbers, which only the tests use.

Each computes something the job computes another way (per-request rows without the
chunk machinery, daily distributions from the by-query grain, hash collisions listed rather
than counted), so a test can hold the production path against it on the same data.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from logmetrics.errors import LogmetricsError
from logmetrics.flows.keys import HASH_SALTS, exact_key_facts
from logmetrics.quality.facts import cluster_fact_aggregates
from logmetrics.rules.cluster_keys import cluster_keys
from logmetrics.rules.daily import SEGMENT_KEY, daily_rows, slot_aggregates, with_segments
from logmetrics.rules.per_request import filter_served_requests, requests_by_key


def key_hash_collisions(keys_df: DataFrame) -> DataFrame:
    """(hash, kind, values): the hashes shared by more than one chunk id or more than one
    cluster key (empty when both hashes are exact over this table)."""
    chunks = keys_df.groupBy(F.col("chunk_hash").alias("hash")).agg(
        F.lit("chunk").alias("kind"), F.count(F.lit(1)).alias("values")
    )
    clusters = keys_df.groupBy(F.col("cluster_hash").alias("hash")).agg(
        F.lit("cluster").alias("kind"), F.countDistinct("cluster_key").alias("values")
    )
    return chunks.unionByName(clusters).where(F.col("values") > 1)


def unique_clusters_by_request(
    logs_df: DataFrame, keys_df: DataFrame, ks: Sequence[int]
) -> DataFrame:
    """Served-log rows + `cluster_keys(clusters)` -> one row per served request with every k."""
    return requests_by_key(logs_df, keys_df, ks).transform(filter_served_requests)


def cluster_facts(keys_df: DataFrame) -> DataFrame:
    """One row: distinct chunk ids, chunk ids listed more than once, and cluster ids present but
    empty or blank, from the per-chunk counts `cluster_keys.cluster_keys` already made."""
    return keys_df.agg(*cluster_fact_aggregates())


def daily_distributions(
    by_query_df: DataFrame, calendar_df: DataFrame, max_k: int, threshold: int
) -> DataFrame:
    """One row per (metric_date, k, segment, segment_value); every (metric_date, k) of
    `calendar_df` has its all-traffic row, days without queries included.

    `by_query_df` has the `unique_clusters_by_query` grain (metric_date, request_id, k), with
    (segment, segment_value) from `with_segments` (all traffic without them);
    `calendar_df` lists every (metric_date, k) the run covers.
    """
    if "segment" not in by_query_df.columns:
        by_query_df = with_segments(by_query_df, ())
    counts = by_query_df.groupBy("metric_date", "k", *SEGMENT_KEY).agg(
        F.count(F.lit(1)).alias("queries"),
        F.count(F.when(F.col("results") == 0, True)).alias("empty_queries"),
        F.sum("results").alias("results"),
        F.sum("missing_cluster_results").alias("missing_cluster_results"),
        F.array(
            *[F.count(F.when(F.col("unique_clusters") == i, True)) for i in range(max_k + 1)]
        ).alias("counts_by_value"),
    )
    histogram = F.slice("counts_by_value", 1, F.col("k") + 1).alias("histogram")
    return daily_rows(counts.select("*", histogram), calendar_df, threshold)


def keyed_clusters(clusters_df: DataFrame) -> tuple[DataFrame, int]:
    """`cluster_keys`, persisted, and a salt whose hashes are exact over the table (checked
    here, salt after salt)."""
    for salt in range(HASH_SALTS):
        keys_df = cluster_keys(clusters_df, salt).persist(StorageLevel.MEMORY_AND_DISK)
        if exact_key_facts(keys_df) is not None:
            return keys_df, salt
        keys_df.unpersist()
    raise LogmetricsError(f"cluster keys collide under {HASH_SALTS} different hashes")


def slot_sums(segmented_df: DataFrame, max_k: int, tokens_per_slot: int) -> DataFrame:
    """One row per (metric_date, segment, segment_value): `queries` and the arrays
    new_at, filled_at, tokens_at (index p-1 for slot p, p = 1..max_k).

    `segmented_df` holds served requests (`new_slots`, `slot_tokens`) with the segment columns
    of `daily.with_segments`. A result without `tokens` costs `tokens_per_slot`.
    """
    return segmented_df.groupBy("metric_date", *SEGMENT_KEY).agg(
        F.count(F.lit(1)).alias("queries"), *slot_aggregates(max_k, tokens_per_slot)
    )
