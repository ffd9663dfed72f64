"""What crowds the window: per day, k and segment, the cluster keys whose copies take the most
slots of the top-k (`unique_clusters_crowding`).

A key with n entries in a request's top-k takes n - 1 redundant slots there. The per-request
rows carry their top slots' keys (`slot_keys`) beside the flags the metric already made of them
(`new_slots`: the first slot of each key), so this is one aggregation of the slots that repeat
a key, with no array function evaluated per request and no second read:

    the repeated slots (a generator over the slots, the new ones dropped; whether each is its
    key's first repeat in the list, from built-in array lookups) -> per (day, segment values,
    key, smallest k of the slot): slots, first repeats (requests affected), tokens and the 3
    smallest request ids, together -> spread over the segment rows and the ks at or above ->
    the top `top_n` by redundant slots (ties kept) -> named from the cluster table's keys,
    ranked with ties by the key as text, cut to `top_n` (`crowding_rows`)
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from logmetrics.rules.cluster_keys import CLUSTER_PREFIX, SINGLETON_PREFIX
from logmetrics.rules.daily import SEGMENT_KEY, with_segments
from logmetrics.rules.per_request import segment_value_columns

EXAMPLES = 3
"""Request ids listed per key (`example_request_ids`): the smallest, as text."""

_GROUP = ("metric_date", "k", *SEGMENT_KEY)


def crowding_candidates(
    requests_df: DataFrame,
    ks: Sequence[int],
    top_n: int,
    segment_by: Sequence[str] = (),
    tokens_per_slot: int = 0,
    usd_per_million_input_tokens: float = 0.0,
) -> DataFrame:
    """Per (day, k, segment row), every key tied with the `top_n`-th or above by redundant
    slots, with its requests affected, its share of the row's redundant slots, the tokens of
    its redundant slots (each result's `tokens`, else `tokens_per_slot`) and their price, and
    its example request ids: a few thousand rows. The tie-break by text comes after the keys
    are named (`crowding_rows`), which is only done for these.

    Two aggregations, the big one first: the repeated slots are counted per (day, the request's
    segment values, key, the smallest k of `ks` their slot falls in), a few rows per key and
    day; only those counts are spread over the segment rows and added up there, one sum per k
    of the counts from that k or below."""
    ks_sorted = sorted(set(ks))
    repeats = _repeated_slots(requests_df, ks_sorted, tokens_per_slot)
    by_slot_k = repeats.groupBy(
        "metric_date", *segment_value_columns(requests_df), "key", "from_k"
    ).agg(
        F.count(F.lit(1)).alias("slots"),
        F.count(F.when(F.col("first"), True)).alias("firsts"),
        F.sum("tokens").alias("tokens"),
        _smallest(F.when(F.col("first"), F.col("request_id"))).alias("examples"),
    )
    per_row = by_slot_k.transform(with_segments, segment_by).groupBy(
        "metric_date", *SEGMENT_KEY, "key"
    )
    # Per k, the repeats at slots within it: those counted from a k at or below.
    within = {k: F.col("from_k") <= k for k in ks_sorted}
    sums = per_row.agg(
        *[F.sum(F.when(within[k], F.col(c))).alias(f"{c}_{k}") for c in _SUMS for k in ks_sorted],
        # A few short lists per key: the smallest of each `from_k` up to k, cut below.
        *[
            F.collect_list(F.when(within[k], F.col("examples"))).alias(f"examples_{k}")
            for k in ks_sorted
        ],
    )
    per_k = F.array(
        *[
            F.struct(
                F.lit(k).alias("k"),
                F.col(f"slots_{k}").alias("redundant_slots"),
                F.col(f"firsts_{k}").alias("requests_affected"),
                F.col(f"tokens_{k}").alias("redundant_tokens"),
                F.slice(F.array_sort(F.flatten(f"examples_{k}")), 1, EXAMPLES).alias(
                    "example_request_ids"
                ),
            )
            for k in ks_sorted
        ]
    )
    counts = sums.select("metric_date", *SEGMENT_KEY, "key", F.inline(per_k)).where(
        F.col("redundant_slots").isNotNull()  # no repeat within this k
    )
    group = Window.partitionBy(*_GROUP)
    usd = F.col("redundant_tokens") * F.lit(usd_per_million_input_tokens) / 1_000_000
    return (
        counts.select(
            "*",
            usd.alias("redundant_usd"),  # as redundancy_cost_daily prices its tokens
            (F.col("redundant_slots") / F.sum("redundant_slots").over(group)).alias(
                "share_of_redundant_slots"
            ),
            F.rank().over(group.orderBy(F.desc("redundant_slots"))).alias("by_slots"),
        )
        .where(F.col("by_slots") <= top_n)
        .drop("by_slots")
    )


_SUMS = ("slots", "firsts", "tokens")


def crowding_rows(candidates_df: DataFrame, keys_df: DataFrame, top_n: int) -> DataFrame:
    """The table's rows from `crowding_candidates`: the keys named from `keys_df`
    (`cluster_keys.cluster_keys` of the whole cluster table under the salt the requests were
    keyed with), ranked with ties by the key as text, cut to `top_n`."""
    group = Window.partitionBy(*_GROUP)
    order = group.orderBy(
        F.desc("redundant_slots"),
        F.coalesce("cluster_id", "chunk_id"),
        F.col("cluster_id").isNull(),
    )
    return (
        candidates_df.transform(_named, keys_df)
        .withColumn("rank", F.row_number().over(order))
        .where(F.col("rank") <= top_n)
        .select(
            *_GROUP,
            "rank",
            "cluster_id",
            "chunk_id",
            "redundant_slots",
            "requests_affected",
            "share_of_redundant_slots",
            "cluster_size",
            "example_request_ids",
            "redundant_tokens",
            "redundant_usd",
        )
    )


def _repeated_slots(
    requests_df: DataFrame, ks_sorted: Sequence[int], tokens_per_slot: int
) -> DataFrame:
    """One row per slot of a request's top slots whose key already appeared above it: the
    day, segment values and request, the slot's key, its tokens (`tokens_per_slot` for a
    result without them), whether it is the key's first repeat in the list (the slot of its
    second entry: the request is one the key crowds from that slot's k on), and `from_k`, the
    smallest k of `ks_sorted` whose top-k holds the slot. A generator over `slot_keys`, the
    new slots (`new_slots`) dropped; the rest built-in lookups, evaluated per repeated slot."""
    pos = F.col("pos") + 1  # 1-based
    keys, key = F.col("slot_keys"), F.col("key")
    first_at = F.array_position(keys, key)  # the key's first slot, above this one
    second_at = first_at + F.array_position(F.slice(keys, first_at + 1, F.size(keys)), key)
    from_k = F.when(pos <= ks_sorted[0], F.lit(ks_sorted[0]))
    for k in ks_sorted[1:]:
        from_k = from_k.when(pos <= k, F.lit(k))
    segments = segment_value_columns(requests_df)
    return (
        requests_df.select(
            "metric_date",
            *segments,
            "request_id",
            "slot_keys",
            "new_slots",
            "slot_tokens",
            F.posexplode("slot_keys").alias("pos", "key"),
        )
        .where(~F.element_at("new_slots", pos))
        .select(
            "metric_date",
            *segments,
            "request_id",
            "key",
            F.coalesce(F.element_at("slot_tokens", pos), F.lit(tokens_per_slot).cast("long")).alias(
                "tokens"
            ),
            (second_at == pos).alias("first"),
            from_k.alias("from_k"),
        )
    )


def _smallest(values: Column) -> Column:
    """The `EXAMPLES` smallest of a group's values, ascending (nulls skipped)."""
    return F.slice(F.array_sort(F.collect_list(values)), 1, EXAMPLES)


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
