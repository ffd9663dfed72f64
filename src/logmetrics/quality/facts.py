"""The facts the quality gates judge, all derived from the one pass that computes the metrics.

`to_requests` rows carry everything needed (copies and rows read, malformed rows, entries set
aside, unknown chunks), so nothing here scans the logs again: these are small aggregations over
the persisted per-request data, and one over the (already keyed) cluster table per run.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

DAY_FACT_COLUMNS = (
    "rows_read",
    "malformed_rows",
    "duplicate_rows",
    "conflicting_requests",
    "queries",
    "valid_entries",
    "missing_entries",
    "non_positive_ranks",
    "duplicate_request_ids",
    "quarantined_entries",
)


def day_facts(requests_df: DataFrame, days_df: DataFrame) -> DataFrame:
    """One row per day of `days_df` (metric_date): the counts behind every gate, and every row
    read accounted for, in the rows of the logs as stored:
    - `rows_read`: every row read whose day it is;
    - `malformed_rows`: the malformed ones, each a row of the quarantine;
    - `duplicate_rows`: the rest, beyond the rows of the copy kept of each request: every row
      of its other copies, and each repeat of a row of the kept copy.
    So rows_read = kept rows + duplicate_rows + malformed_rows, where a nested or ids copy is
    one row (kept rows = queries) and an exploded one its distinct rows (`kept_rows`, with
    `rows_read` per request: `per_request.filter_first_copies`)."""
    served = ~F.col("is_malformed")
    exploded = "rows_read" in requests_df.columns
    rows = F.col("rows_read") if exploded else F.col("copies")
    kept = F.col("kept_rows") if exploded else F.lit(1)
    facts = requests_df.groupBy("metric_date").agg(
        F.sum(rows).alias("rows_read"),
        F.sum(F.when(~served, rows)).alias("malformed_rows"),
        F.sum(F.when(served, rows - kept)).alias("duplicate_rows"),
        F.count(F.when(served & F.col("conflicting"), True)).alias("conflicting_requests"),
        F.count(F.when(served, True)).alias("queries"),
        F.sum(F.when(served, F.col("results"))).alias("valid_entries"),
        F.sum(F.when(served, F.col("missing_cluster_results"))).alias("missing_entries"),
        F.sum(F.when(served, F.col("non_positive_ranks"))).alias("non_positive_ranks"),
        F.sum(F.size(F.coalesce("invalid_entries", F.array()))).alias("quarantined_entries"),
    )
    # A row per day on each side: broadcast, rather than shuffled and sorted for a merge join.
    return (
        days_df.join(F.broadcast(facts), on="metric_date", how="left")
        .join(F.broadcast(duplicate_request_ids(requests_df)), on="metric_date", how="left")
        .select(
            "metric_date",
            *[F.coalesce(F.col(c), F.lit(0)).cast("long").alias(c) for c in DAY_FACT_COLUMNS],
        )
    )


def duplicate_request_ids(requests_df: DataFrame) -> DataFrame:
    """(metric_date, duplicate_request_ids): served rows left after de-duplication beyond one
    per (metric_date, request_id), the `unique_request_ids` gate's count. A day without any
    has no row.

    Counted per request where the rows already sit (the per-request rows are partitioned by
    `request_key`, a hash of metric_date and request_id: `per_request.partition_by_request`), so
    only the repeated ids, a handful of rows, cross a shuffle; a `countDistinct` beside the
    other facts made Spark expand and shuffle every request twice."""
    return (
        requests_df.where(~F.col("is_malformed"))
        .groupBy("request_key", "metric_date", "request_id")
        .agg((F.count(F.lit(1)) - 1).alias("repeats"))
        .where(F.col("repeats") > 0)
        .groupBy("metric_date")
        .agg(F.sum("repeats").alias("duplicate_request_ids"))
    )


CLUSTER_FACT_COLUMNS = ("cluster_chunks", "cluster_duplicate_chunk_ids", "cluster_empty_ids")


def cluster_fact_aggregates() -> list[Column]:
    """`cluster_facts` as aggregate columns (CLUSTER_FACT_COLUMNS), to ride along with others."""
    return [
        F.count(F.lit(1)).alias("cluster_chunks"),
        F.count(F.when(F.col("listed") > 1, True))
        .cast("long")
        .alias("cluster_duplicate_chunk_ids"),
        F.coalesce(F.sum("empty_ids"), F.lit(0)).cast("long").alias("cluster_empty_ids"),
    ]


def quarantined_rows(requests_df: DataFrame) -> DataFrame:
    """Every row kept out of the metrics, with why: malformed request rows, and entries with a
    null chunk_id or rank in the copy of a request that was kept."""
    malformed = requests_df.select(
        "metric_date",
        "request_id",
        F.explode("malformed_rows").alias("row"),
    ).select(
        "metric_date",
        F.col("row.reason").alias("reason"),
        "request_id",
        F.col("row.raw").alias("raw"),
    )
    entries = requests_df.where(~F.col("is_malformed")).select(
        "metric_date",
        "request_id",
        "served_at",
        F.explode("invalid_entries").alias("entry"),
    )
    bad_entries = entries.select(
        "metric_date",
        F.when(F.col("entry.chunk_id").isNull(), F.lit("null_chunk_id"))
        .otherwise(F.lit("null_rank"))
        .alias("reason"),
        "request_id",
        F.to_json(
            F.struct(
                "request_id",
                "served_at",
                F.col("entry.pos").alias("position"),
                F.col("entry.rank").alias("rank"),
                F.col("entry.chunk_id").alias("chunk_id"),
            )
        ).alias("raw"),
    )
    return malformed.unionByName(bad_entries)


def top_missing_chunks(requests_df: DataFrame, top_n: int) -> DataFrame:
    """Per day, the `top_n` most-served chunk ids absent from the cluster table."""
    counts = (
        requests_df.where(~F.col("is_malformed"))
        .select("metric_date", F.explode("missing_chunks").alias("chunk_id"))
        .groupBy("metric_date", "chunk_id")
        .agg(F.count(F.lit(1)).alias("serves"))
    )
    by_serves = Window.partitionBy("metric_date").orderBy(F.desc("serves"), F.asc("chunk_id"))
    return (
        counts.withColumn("rank", F.row_number().over(by_serves))
        .where(F.col("rank") <= top_n)
        .select("metric_date", "rank", "chunk_id", "serves")
    )


def trailing_queries_mean(
    facts: pd.DataFrame, known: dict[dt.date, int], window: int
) -> list[float | None]:
    """Per day of `facts`, the mean queries of the `window` days before it (the volume gate's
    input): published days from earlier runs (`known`), and the facts' own days."""
    known = {
        **known,
        **dict(zip(facts["metric_date"], (int(q) for q in facts["queries"]), strict=True)),
    }
    means: list[float | None] = []
    for day in facts["metric_date"]:
        before = [
            known[d]
            for d in (day - dt.timedelta(days=i) for i in range(1, window + 1))
            if d in known
        ]
        means.append(sum(before) / len(before) if before else None)
    return means
