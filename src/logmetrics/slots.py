"""Per-slot daily sums, and what they give: the k-sweep and the redundancy cost.

A slot is *new* when its cluster first appears there in the list (`new_slots` of each request,
from `metrics.to_requests`) and *redundant* when its cluster already appeared above it. Per
day and segment, one group-by sums, for every slot position p up to the largest k:

    new_at[p]       requests whose slot p is new
    filled_at[p]    requests with a slot p at all (lists shorter than p have none)
    tokens_at[p]    prompt tokens of the redundant slots at p

Everything per k is a prefix sum of those: unique_clusters@k summed over a day's queries is
the sum of new_at[1..k], the redundant slots of the top-k are filled - new over 1..k.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from logmetrics.distributions import SEGMENT_KEY, request_aggregates, total, with_calendar


def slot_sums(segmented_df: DataFrame, max_k: int, tokens_per_slot: int) -> DataFrame:
    """One row per (metric_date, segment, segment_value): `queries` and the arrays
    new_at, filled_at, tokens_at (index p-1 for slot p, p = 1..max_k).

    `segmented_df` holds served requests (`new_slots`, `slot_tokens`) with the segment columns
    of `distributions.with_segments`. A result without `tokens` costs `tokens_per_slot`.
    """
    return segmented_df.groupBy("metric_date", *SEGMENT_KEY).agg(
        F.count(F.lit(1)).alias("queries"), *slot_aggregates(max_k, tokens_per_slot)
    )


def day_sums(segmented_df: DataFrame, ks: Sequence[int], tokens_per_slot: int) -> DataFrame:
    """Everything the daily tables need, in one aggregation of the served requests: per
    (metric_date, segment, segment_value), `slot_sums`' columns (up to the largest k) and
    `distributions.request_aggregates` (every k's histogram). A few hundred rows for a month:
    the daily, k-sweep and redundancy-cost rows are derived from them (`daily_from_sums`,
    `k_sweep`, `redundancy_cost`) without another pass over the requests."""
    return segmented_df.groupBy("metric_date", *SEGMENT_KEY).agg(
        F.count(F.lit(1)).alias("queries"),
        *request_aggregates(ks),
        *slot_aggregates(max(ks), tokens_per_slot),
    )


def slot_aggregates(max_k: int, tokens_per_slot: int) -> list[Column]:
    """new_at, filled_at and tokens_at over served requests (see `slot_sums`)."""

    def slot(column: str, p: int) -> Column:
        return F.try_element_at(F.col(column), F.lit(p))

    def per_slot(values: list[Column]) -> Column:
        return F.array(*[F.coalesce(v, F.lit(0).cast("long")) for v in values])

    positions = range(1, max_k + 1)
    return [
        per_slot([F.count(F.when(slot("new_slots", p), True)) for p in positions]).alias("new_at"),
        per_slot([F.count(F.when(F.size("new_slots") >= p, True)) for p in positions]).alias(
            "filled_at"
        ),
        per_slot(
            [
                F.sum(
                    F.when(
                        ~slot("new_slots", p),
                        F.coalesce(slot("slot_tokens", p), F.lit(tokens_per_slot).cast("long")),
                    )
                )
                for p in positions
            ]
        ).alias("tokens_at"),
    ]


def k_sweep(sums_df: DataFrame, calendar_df: DataFrame) -> DataFrame:
    """The `unique_clusters_k_sweep` rows: per (metric_date, k, segment), for every k the
    calendar lists (1..max_k), the mean of unique_clusters@k over the day's queries, that
    mean / k, and the marginal rate: mean at k minus mean at k-1 (at k = 1, the mean)."""
    queries = F.col("queries")

    def mean_at(k: Column) -> Column:
        return F.when(queries > 0, total(F.slice("new_at", 1, k)) / queries)

    k = F.col("k")
    return _per_k(sums_df, calendar_df).select(
        "metric_date",
        "k",
        *SEGMENT_KEY,
        "queries",
        total(F.slice("new_at", 1, k)).alias("unique_clusters_total"),
        mean_at(k).alias("mean_unique_clusters"),
        (mean_at(k) / k).alias("distinct_fraction"),
        (mean_at(k) - F.when(k > 1, mean_at(k - 1)).otherwise(0.0)).alias("marginal_rate"),
    )


def redundancy_cost(
    sums_df: DataFrame,
    calendar_df: DataFrame,
    tokens_per_slot: int,
    usd_per_million_input_tokens: float,
) -> DataFrame:
    """The `redundancy_cost_daily` rows: per (metric_date, k, segment), for every k the calendar
    lists, the redundant slots of the top-k windows, their tokens and their price
    (`tokens_per_slot` is recorded: `slot_sums` priced the results without tokens with it)."""
    k = F.col("k")
    tokens = total(F.slice("tokens_at", 1, k))
    return _per_k(sums_df, calendar_df).select(
        "metric_date",
        "k",
        *SEGMENT_KEY,
        "queries",
        total(F.slice("filled_at", 1, k)).alias("slots"),
        (total(F.slice("filled_at", 1, k)) - total(F.slice("new_at", 1, k))).alias(
            "redundant_slots"
        ),
        tokens.alias("redundant_tokens"),
        (tokens * F.lit(usd_per_million_input_tokens) / 1_000_000).alias("redundant_usd"),
        F.lit(tokens_per_slot).cast("long").alias("tokens_per_slot"),
        F.lit(usd_per_million_input_tokens).alias("usd_per_million_input_tokens"),
    )


def _per_k(sums_df: DataFrame, calendar_df: DataFrame) -> DataFrame:
    """`sums_df` once per k of the calendar (k <= the arrays' length), all-traffic days without
    queries included with zero sums."""
    per_k = sums_df.join(calendar_df.select("k").distinct(), how="cross")
    empty = F.array().cast("array<bigint>")
    return with_calendar(per_k, calendar_df).select(
        "metric_date",
        "k",
        *SEGMENT_KEY,
        F.coalesce("queries", F.lit(0).cast("long")).alias("queries"),
        *[F.coalesce(c, empty).alias(c) for c in ("new_at", "filled_at", "tokens_at")],
    )
