"""What crowds the window: per day, k and segment, the cluster keys whose copies take the most
slots of the top-k (`unique_clusters_crowding`).

A key with n entries in a request's top-k takes n - 1 redundant slots there. The per-request
rows carry the slots that repeat a key already above them (`per_request.repeated_slots`:
position, key and whether it is the key's first repeat in the list), so this is one
aggregation of those repeats, with no second read of the logs:

    repeats per (day, segment values, key, smallest k their slot is in) -> spread over the
    segment rows and the ks at or above -> per (day, k, segment, key): redundant slots,
    requests affected -> the top `top_n` by redundant slots (ties by the key as text) -> the
    key's cluster id or chunk id and cluster size (the cluster table's keys) -> the up to 3
    smallest request ids affected
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from logmetrics.rules.cluster_keys import CLUSTER_PREFIX, SINGLETON_PREFIX
from logmetrics.rules.daily import SEGMENT_KEY, with_segments
from logmetrics.rules.per_request import segment_value_columns

EXAMPLES = 3
"""Request ids listed per key (`example_request_ids`): the smallest, as text."""

_GROUP = ("metric_date", "k", *SEGMENT_KEY)


def crowding_candidates(
    requests_df: DataFrame, ks: Sequence[int], top_n: int, segment_by: Sequence[str] = ()
) -> DataFrame:
    """Per (day, k, segment row), every key tied with the `top_n`-th or above by redundant
    slots, with its requests affected and its share of the row's redundant slots: a few
    thousand rows. The tie-break by text comes after the keys are named (`crowding_rows`),
    which is only done for these.

    Two aggregations, the big one first: the repeats are counted per (day, the request's
    segment values, key, the smallest k of `ks` their slot falls in), a few rows per key and
    day; only those counts are spread over the segment rows and added up there, one sum per k
    of the counts from that k or below."""
    ks_sorted = sorted(set(ks))
    by_slot_k = (
        _repeats(requests_df, ks_sorted)
        .groupBy("metric_date", *segment_value_columns(requests_df), "key", "from_k")
        .agg(
            F.count(F.lit(1)).alias("slots"),
            F.count(F.when(F.col("first"), True)).alias("firsts"),
        )
    )
    per_row = by_slot_k.transform(with_segments, segment_by).groupBy(
        "metric_date", *SEGMENT_KEY, "key"
    )
    # Per k, the repeats at slots within it: those counted from a k at or below.
    within = {k: F.col("from_k") <= k for k in ks_sorted}
    sums = per_row.agg(
        *[F.sum(F.when(within[k], F.col("slots"))).alias(f"slots_{k}") for k in ks_sorted],
        *[F.sum(F.when(within[k], F.col("firsts"))).alias(f"firsts_{k}") for k in ks_sorted],
    )
    per_k = F.array(
        *[
            F.struct(
                F.lit(k).alias("k"),
                F.col(f"slots_{k}").alias("redundant_slots"),
                F.col(f"firsts_{k}").alias("requests_affected"),
            )
            for k in ks_sorted
        ]
    )
    counts = sums.select("metric_date", *SEGMENT_KEY, "key", F.inline(per_k)).where(
        F.col("redundant_slots").isNotNull()  # no repeat within this k
    )
    group = Window.partitionBy(*_GROUP)
    return (
        counts.select(
            "*",
            (F.col("redundant_slots") / F.sum("redundant_slots").over(group)).alias(
                "share_of_redundant_slots"
            ),
            F.rank().over(group.orderBy(F.desc("redundant_slots"))).alias("by_slots"),
        )
        .where(F.col("by_slots") <= top_n)
        .drop("by_slots")
    )


def crowding_rows(
    candidates_df: DataFrame,
    requests_df: DataFrame,
    keys_df: DataFrame,
    ks: Sequence[int],
    top_n: int,
    segment_by: Sequence[str] = (),
) -> DataFrame:
    """The table's rows from `crowding_candidates`: the keys named from `keys_df`
    (`cluster_keys.cluster_keys` of the whole cluster table under the salt the requests were
    keyed with), ranked with ties by the key as text, cut to `top_n`, with the example request
    ids of each (from the requests' repeats again, for the listed keys only)."""
    group = Window.partitionBy(*_GROUP)
    order = group.orderBy(
        F.desc("redundant_slots"),
        F.coalesce("cluster_id", "chunk_id"),
        F.col("cluster_id").isNull(),
    )
    top = (
        candidates_df.transform(_named, keys_df)
        .withColumn("rank", F.row_number().over(order))
        .where(F.col("rank") <= top_n)
    )
    examples = _examples(_repeats(requests_df, sorted(set(ks))), top, segment_by, ks)
    # Every listed key has a redundant slot, so a request it crowds: the join keeps every row.
    return top.join(examples, on=[*_GROUP, "key"]).select(
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


def _repeats(requests_df: DataFrame, ks_sorted: Sequence[int]) -> DataFrame:
    """One row per repeated slot of a request (`per_request.first_repeats`): its day, segment
    values, request id, slot, key, whether it is the key's first repeat, and `from_k`, the
    smallest k of `ks_sorted` whose top-k holds the slot."""
    from_k = F.when(F.col("pos") <= ks_sorted[0], F.lit(ks_sorted[0]))
    for k in ks_sorted[1:]:
        from_k = from_k.when(F.col("pos") <= k, F.lit(k))
    return (
        requests_df.where(F.col("repeats").isNotNull())
        .select(
            "metric_date",
            *segment_value_columns(requests_df),
            "request_id",
            F.inline("repeats"),
        )
        .withColumn("from_k", from_k)
    )


def _every_k_from(df: DataFrame, ks_sorted: Sequence[int]) -> DataFrame:
    """One row per k of `ks_sorted` at or above the row's `from_k`: a repeat at slot p is
    redundant in every top-k with k >= p."""
    ks_array = F.array(*[F.lit(k) for k in ks_sorted])
    return df.select("*", F.explode(F.filter(ks_array, lambda k: k >= F.col("from_k"))).alias("k"))


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


def _examples(
    repeats: DataFrame, top: DataFrame, segment_by: Sequence[str], ks: Sequence[int]
) -> DataFrame:
    """(group, key, example_request_ids): the `EXAMPLES` smallest request ids where the key has
    at least two entries in the top-k (each such request has one `first` repeat of it), for
    the listed keys only: their days' first repeats are picked out by a broadcast of the few
    (day, key) pairs listed, and cut to the smallest per (day, segment values, key, k they
    start from) before they are spread over the segment rows and ks."""
    listed = top.select("metric_date", "key").distinct()
    firsts = repeats.where(F.col("first")).join(
        F.broadcast(listed), on=["metric_date", "key"], how="left_semi"
    )
    part = ["metric_date", *segment_value_columns(repeats), "key", "from_k"]
    ks_sorted = sorted(set(ks))
    smallest = firsts.withColumn(
        "nth", F.row_number().over(Window.partitionBy(*part).orderBy("request_id"))
    ).where(F.col("nth") <= EXAMPLES)
    spread = smallest.transform(with_segments, segment_by).transform(_every_k_from, ks_sorted)
    nth = F.row_number().over(Window.partitionBy(*_GROUP, "key").orderBy("request_id"))
    return (
        spread.select(*_GROUP, "key", "request_id", nth.alias("nth"))
        .where(F.col("nth") <= EXAMPLES)
        .groupBy(*_GROUP, "key")
        .agg(F.sort_array(F.collect_list("request_id")).alias("example_request_ids"))
    )
