"""The daily aggregation and everything derived from it: one group-by of a day's served
requests per segment row (`day_sums`), and from its few hundred rows the daily distributions,
the k-sweep and the redundancy cost.

Daily distributions: unique_clusters@k is an integer in 0..k, so a day's distribution is
exactly its histogram, and every quantile can be read off the histogram's cumulative counts:
no sort, no approximation. Quantiles follow numpy.percentile's default ('linear') method to the
last bit.

Slots: a slot is *new* when its cluster first appears there in the list (`new_slots` of each
request, from `per_request.to_requests`) and *redundant* when its cluster already appeared
above it. Per day and segment, `day_sums` sums, for every slot position p up to the largest k:

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

from logmetrics.schemas import ALL_TRAFFIC

QUANTILES = {"p10": 0.10, "p25": 0.25, "median": 0.50, "p75": 0.75, "p90": 0.90}


SEGMENT_KEY = ("segment", "segment_value")


def with_segments(requests_df: DataFrame, segment_by: Sequence[str]) -> DataFrame:
    """(segment, segment_value) per request and segment it counts in: every request counts in
    the all-traffic rows ('all', 'all'), and once more per `segment_by` column, under that
    column's value (`segment_values`, from `per_request.with_segment_values`)."""
    all_traffic = F.struct(F.lit(ALL_TRAFFIC).alias("segment"), F.lit(ALL_TRAFFIC).alias("value"))
    if not segment_by:
        return requests_df.withColumns(
            {"segment": F.lit(ALL_TRAFFIC), "segment_value": F.lit(ALL_TRAFFIC)}
        )
    pairs = [
        F.struct(F.lit(name).alias("segment"), F.col("segment_values")[i].alias("value"))
        for i, name in enumerate(segment_by)
    ]
    return requests_df.select(
        "*", F.inline(F.array(all_traffic, *pairs)).alias("segment", "segment_value")
    )


def with_calendar(daily_df: DataFrame, calendar_df: DataFrame) -> DataFrame:
    """Every all-traffic (metric_date, k) of `calendar_df` gets a row, with null counts where
    the day had no queries; segment rows exist where the segment had queries."""
    calendar = calendar_df.withColumns(
        {"segment": F.lit(ALL_TRAFFIC), "segment_value": F.lit(ALL_TRAFFIC)}
    )
    return calendar.join(daily_df, on=["metric_date", "k", *SEGMENT_KEY], how="full")


def request_aggregates(ks: Sequence[int]) -> list[Column]:
    """Aggregates over per-request rows (`per_request.to_requests`, whose `windows` hold one
    unique_clusters per k of `ks`, in that order): what `daily_from_sums` needs, so that the
    daily rows of every k come from one aggregation of the requests, not one per k.

    `histograms` holds one (k, histogram) per k: index i counts the requests with exactly i
    distinct clusters in their top-k."""

    def at(i: int) -> Column:
        return F.col("windows")[i]["unique_clusters"]

    histograms = [
        F.struct(
            F.lit(k).alias("k"),
            F.array(*[F.count(F.when(at(i) == v, True)) for v in range(k + 1)]).alias("histogram"),
        )
        for i, k in enumerate(ks)
    ]
    return [
        F.count(F.when(F.col("results") == 0, True)).alias("empty_queries"),
        F.sum("results").cast("long").alias("results"),
        F.sum("missing_cluster_results").cast("long").alias("missing_cluster_results"),
        F.array(*histograms).alias("histograms"),
    ]


def daily_from_sums(sums_df: DataFrame, calendar_df: DataFrame, threshold: int) -> DataFrame:
    """The `unique_clusters_daily` rows from per-(metric_date, segment, segment_value) sums that
    carry `queries` and `request_aggregates` (`day_sums`)."""
    per_k = sums_df.select(
        "metric_date",
        *SEGMENT_KEY,
        *_COUNT_COLUMNS,
        F.inline("histograms"),
    )
    return daily_rows(per_k, calendar_df, threshold)


def daily_rows(counts_df: DataFrame, calendar_df: DataFrame, threshold: int) -> DataFrame:
    """Counts and `histogram` per (metric_date, k, segment, segment_value) -> the daily rows:
    every all-traffic (metric_date, k) of the calendar (zero counts for a day without
    queries), with the histogram's statistics."""
    zeros = F.array_repeat(F.lit(0).cast("long"), F.col("k") + 1)
    return (
        with_calendar(counts_df, calendar_df)
        .select(
            "metric_date",
            "k",
            *SEGMENT_KEY,
            *[F.coalesce(F.col(c), F.lit(0).cast("long")).alias(c) for c in _COUNT_COLUMNS],
            F.coalesce("histogram", zeros).alias("histogram"),
        )
        .transform(with_histogram_statistics, threshold)
    )


_COUNT_COLUMNS = ("queries", "empty_queries", "results", "missing_cluster_results")


def with_histogram_statistics(daily_df: DataFrame, threshold: int) -> DataFrame:
    """Add quantiles, mean, the share at or below `threshold` and the missing-cluster rate.

    The histogram's total and cumulative counts are computed once per row, in a projection
    before the five quantiles that read them: written inside each quantile, the five repeated
    the total 15 times and the cumulative counts 10 times, a tree of expressions Spark built
    and analysed at every run (69aa688 measured the difference)."""
    hist = F.col("histogram")
    queries = F.col("queries")
    counted = daily_df.select(
        "*", total(hist).alias(_TOTAL), cumulative_counts(hist).alias(_CUMULATIVE)
    )
    values, cumulative = F.col(_TOTAL), F.col(_CUMULATIVE)
    return counted.select(
        "*",
        *[quantile_of(cumulative, values, p).alias(name) for name, p in QUANTILES.items()],
        F.when(queries > 0, total(F.transform(hist, lambda n, i: n * i)) / queries).alias("mean"),
        F.lit(threshold).alias("threshold"),
        F.when(queries > 0, total(F.slice(hist, 1, threshold + 1)) / queries).alias(
            "share_at_or_below_threshold"
        ),
        F.when(F.col("results") > 0, F.col("missing_cluster_results") / F.col("results")).alias(
            "missing_cluster_rate"
        ),
    ).drop(_TOTAL, _CUMULATIVE)


_TOTAL, _CUMULATIVE = "_histogram_total", "_histogram_cumulative"


def cumulative_counts(hist: Column) -> Column:
    """array<long>: element i is the count of values <= i (the histogram's running total)."""
    return F.transform(hist, lambda _, i: total(F.slice(hist, 1, i + 1)))


def quantile_of(cumulative: Column, n: Column, p: float) -> Column:
    """The p-quantile of the n values a histogram counts, as numpy.percentile(values, 100 * p),
    from its `cumulative_counts` and n.

    With n values sorted, the quantile sits at index p * (n - 1); the value at sorted index i is
    the number of histogram bins whose cumulative count is <= i.
    """

    def value_at(index: Column) -> Column:
        return F.size(F.filter(cumulative, lambda c: c <= index)).cast("double")

    position = F.lit(p) * (n - 1)
    below = F.floor(position)
    above = F.least(below + 1, n - 1)
    return F.when(n > 0, _lerp(value_at(below), value_at(above), position - below))


def _lerp(a: Column, b: Column, t: Column) -> Column:
    """numpy's _lerp: a + (b-a)*t, computed from the upper end when t >= 0.5 (bit-for-bit)."""
    diff = b - a
    return F.when(t >= 0.5, b - diff * (1 - t)).otherwise(a + diff * t)


def total(values: Column) -> Column:
    """The sum of an array of integers, as a long."""
    return F.aggregate(values, F.lit(0).cast("long"), lambda acc, x: acc + x)


def day_sums(segmented_df: DataFrame, ks: Sequence[int], tokens_per_slot: int) -> DataFrame:
    """Everything the daily tables need, in one aggregation of the served requests: per
    (metric_date, segment, segment_value), `slot_aggregates` (up to the largest k) and
    `request_aggregates` (every k's histogram). A few hundred rows for a month:
    the daily, k-sweep and redundancy-cost rows are derived from them (`daily_from_sums`,
    `k_sweep`, `redundancy_cost`) without another pass over the requests."""
    return segmented_df.groupBy("metric_date", *SEGMENT_KEY).agg(
        F.count(F.lit(1)).alias("queries"),
        *request_aggregates(ks),
        *slot_aggregates(max(ks), tokens_per_slot),
    )


def slot_aggregates(max_k: int, tokens_per_slot: int) -> list[Column]:
    """new_at, filled_at and tokens_at over served requests (index p-1 for slot p,
    p = 1..max_k): the requests carry `new_slots` and `slot_tokens`; a result without `tokens`
    costs `tokens_per_slot`."""

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
    (`tokens_per_slot` is recorded: `slot_aggregates` priced the results without tokens with it)."""
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
