"""What crowds the window: per day, k and segment, the cluster keys whose copies take the most
slots of the top-k (`unique_clusters_crowding`).

A key with n entries in a request's top-k takes n - 1 redundant slots there. The per-request
rows carry the slots that repeat a key already above them (`per_request.repeated_slots`:
position, key and whether it is the key's first repeat in the list), so this is one
aggregation of those repeats, with no second read of the logs:

    repeats per (request, k with pos <= k) -> per (day, k, segment, key): redundant slots,
    requests affected -> the top `top_n` by redundant slots (ties by the key as text) -> the
    key's cluster id or chunk id and cluster size (the cluster table's keys) -> the up to 3
    smallest request ids affected
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from logmetrics.rules.cluster_keys import CLUSTER_PREFIX, SINGLETON_PREFIX
from logmetrics.rules.daily import SEGMENT_KEY

EXAMPLES = 3
"""Request ids listed per key (`example_request_ids`): the smallest, as text."""

_GROUP = ("metric_date", "k", *SEGMENT_KEY)


def crowding(
    segmented_df: DataFrame, keys_df: DataFrame, ks: Sequence[int], top_n: int
) -> DataFrame:
    """The `unique_clusters_crowding` rows of the served requests in `segmented_df` (one row
    per request and segment it counts in, `daily.with_segments`), run columns aside.

    `keys_df`: `cluster_keys.cluster_keys` of the whole cluster table under the salt the
    requests were keyed with (it names each key and counts its cluster's members)."""
    per_k = segmented_df.where(F.col("repeats").isNotNull()).select(
        "metric_date",
        *SEGMENT_KEY,
        "request_id",
        F.inline("repeats"),
    )
    ks_sorted = sorted(set(ks))
    per_k = per_k.select(
        "*",
        F.explode(
            F.filter(F.array(*[F.lit(k) for k in ks_sorted]), lambda k: k >= F.col("pos"))
        ).alias("k"),
    )
    counts = per_k.groupBy(*_GROUP, "key").agg(
        F.count(F.lit(1)).alias("redundant_slots"),
        F.count(F.when(F.col("first"), True)).alias("requests_affected"),
    )
    group = Window.partitionBy(*_GROUP)
    # Every key tied with the top_n-th by redundant slots; the tie-break by text comes after
    # the keys are named, which is only done for these few.
    candidates = counts.select(
        "*",
        (F.col("redundant_slots") / F.sum("redundant_slots").over(group)).alias(
            "share_of_redundant_slots"
        ),
        F.rank().over(group.orderBy(F.desc("redundant_slots"))).alias("by_slots"),
    ).where(F.col("by_slots") <= top_n)
    named = candidates.transform(_named, keys_df)
    order = group.orderBy(
        F.desc("redundant_slots"),
        F.coalesce("cluster_id", "chunk_id"),
        F.col("cluster_id").isNull(),
    )
    top = named.withColumn("rank", F.row_number().over(order)).where(F.col("rank") <= top_n)
    # Every listed key has a redundant slot, so a request it crowds: the join keeps every row.
    return top.join(_examples(per_k), on=[*_GROUP, "key"]).select(
        *_GROUP,
        "rank",
        "cluster_id",
        "chunk_id",
        "redundant_slots",
        "requests_affected",
        "share_of_redundant_slots",
        "cluster_size",
        "example_request_ids",
    )


def _named(candidates_df: DataFrame, keys_df: DataFrame) -> DataFrame:
    """`cluster_id` (null for a chunk that is its own key), `chunk_id` (that chunk, set only
    when cluster_id is null) and `cluster_size` (the cluster's chunks in the table; 1 for a lone
    chunk), from the keys' hashes: only the candidates' hashes are looked up."""
    hashes = candidates_df.select(F.col("key.cluster_hash").alias("cluster_hash")).distinct()
    clusters = (
        keys_df.join(F.broadcast(hashes), on="cluster_hash", how="left_semi")
        .groupBy("cluster_hash")
        .agg(F.min("cluster_key").alias("cluster_key"), F.count(F.lit(1)).alias("members"))
    )
    cluster_key = F.col("cluster_key")
    is_cluster = cluster_key.startswith(CLUSTER_PREFIX)
    return candidates_df.join(
        F.broadcast(clusters), on=F.col("key.cluster_hash") == clusters["cluster_hash"], how="left"
    ).select(
        *candidates_df.columns,
        F.when(is_cluster, F.substring(cluster_key, len(CLUSTER_PREFIX) + 1, 1 << 30)).alias(
            "cluster_id"
        ),
        F.coalesce(
            F.when(
                cluster_key.startswith(SINGLETON_PREFIX),
                F.substring(cluster_key, len(SINGLETON_PREFIX) + 1, 1 << 30),
            ),
            F.col("key.missing_chunk"),
        ).alias("chunk_id"),
        F.when(is_cluster, F.col("members")).otherwise(F.lit(1)).cast("long").alias("cluster_size"),
    )


def _examples(per_k: DataFrame) -> DataFrame:
    """(group, key, example_request_ids): the `EXAMPLES` smallest request ids where the key has
    at least two entries in the top-k (each such request has one `first` repeat of it). A
    row_number limit: Spark keeps the first rows of each group before the shuffle."""
    smallest = Window.partitionBy(*_GROUP, "key").orderBy("request_id")
    return (
        per_k.where(F.col("first"))
        .select(*_GROUP, "key", "request_id", F.row_number().over(smallest).alias("nth"))
        .where(F.col("nth") <= EXAMPLES)
        .groupBy(*_GROUP, "key")
        .agg(F.sort_array(F.collect_list("request_id")).alias("example_request_ids"))
    )
