"""Daily distributions: histograms of unique_clusters@k, and exact quantiles derived from them.

unique_clusters@k is an integer in 0..k, so a day's distribution is exactly its histogram, and
every quantile can be read off the histogram's cumulative counts: no sort, no approximation.
Quantiles follow numpy.percentile's default ('linear') method to the last bit.
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
    column's value (`segment_values`, from `metrics.with_segment_values`)."""
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


def request_aggregates(ks: Sequence[int]) -> list[Column]:
    """Aggregates over per-request rows (`metrics.to_requests`, whose `windows` hold one
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
    """`daily_distributions`' rows from per-(metric_date, segment, segment_value) sums that
    carry `queries` and `request_aggregates` (`slots.day_sums`)."""
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
    """Add quantiles, mean, the share at or below `threshold` and the missing-cluster rate."""
    hist = F.col("histogram")
    queries = F.col("queries")
    return daily_df.select(
        "*",
        *[histogram_quantile(hist, p).alias(name) for name, p in QUANTILES.items()],
        F.when(queries > 0, total(F.transform(hist, lambda n, i: n * i)) / queries).alias("mean"),
        F.lit(threshold).alias("threshold"),
        F.when(queries > 0, total(F.slice(hist, 1, threshold + 1)) / queries).alias(
            "share_at_or_below_threshold"
        ),
        F.when(F.col("results") > 0, F.col("missing_cluster_results") / F.col("results")).alias(
            "missing_cluster_rate"
        ),
    )


def histogram_quantile(hist: Column, p: float) -> Column:
    """The p-quantile of the values a histogram counts, as numpy.percentile(values, 100 * p).

    With n values sorted, the quantile sits at index p * (n - 1); the value at sorted index i is
    the number of histogram bins whose cumulative count is <= i.
    """
    n = total(hist)
    cumulative = F.transform(hist, lambda _, i: total(F.slice(hist, 1, i + 1)))

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
