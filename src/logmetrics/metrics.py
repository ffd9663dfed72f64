"""The rules of the metric, as pure DataFrame -> DataFrame transforms and Column functions.

Reading order (each step feeds the next, chained with `.transform`):

    with_row_status      metric_date (UTC date of served_at) and whether the row is malformed
    explode_entries      one row per (row, array position); empty lists and malformed rows keep one
    with_cluster_keys    cluster key per entry (left join to `cluster_keys(clusters)`)
    to_requests          one row per (metric_date, request_id, is_malformed): the copy kept, its
                         valid entries in rank order, every k, and what was set aside
    filter_served_requests / explode_windows
                         the requests that count, one row per (request, k)

Everything the quality gates and the quarantine need (malformed rows, entries with a null
chunk_id or rank, redelivered copies, unknown chunks) rides along in that one group-by, so the
logs are scanned once.

A cluster key is `c:<cluster_id>` for a clustered chunk and `s:<chunk_id>` for a singleton (a
chunk absent from the cluster table or present with a null cluster id), so the two never collide.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from logmetrics.sources import PARTITION_DATE

REQUEST_KEY = ("metric_date", "request_id", "is_malformed")
SINGLETON_PREFIX = "s:"


def with_row_status(logs_df: DataFrame) -> DataFrame:
    """metric_date = the UTC date of served_at (the session time zone is UTC), or the row's date
    partition when served_at is null; `malformed_reason` names the first missing field of a row
    that can never enter a metric (null request_id, served_at or results), with the raw row."""
    metric_date = F.to_date("served_at")
    if PARTITION_DATE in logs_df.columns:
        metric_date = F.coalesce(metric_date, F.col(PARTITION_DATE))
    reason = (
        F.when(F.col("request_id").isNull(), F.lit("null_request_id"))
        .when(F.col("served_at").isNull(), F.lit("null_served_at"))
        .when(F.col("results").isNull(), F.lit("null_results"))
    )
    raw = F.to_json(F.struct(*[F.col(c) for c in logs_df.columns if c != PARTITION_DATE]))
    return logs_df.withColumns(
        {
            "metric_date": metric_date,
            "is_malformed": reason.isNotNull(),
            "malformed_row": F.when(
                reason.isNotNull(), F.struct(reason.alias("reason"), raw.alias("raw"))
            ),
        }
    )


def explode_entries(logs_df: DataFrame) -> DataFrame:
    """One row per result entry with its array position; an empty list, or a malformed row,
    keeps one row with a null position.

    `copy_hash` tells redelivered copies of a request apart by content, so that one copy can be
    chosen per request after the group-by without a second shuffle.
    """
    row = ["metric_date", "request_id", "is_malformed", "malformed_row", "served_at"]
    results = F.when(~F.col("is_malformed"), F.col("results"))
    return logs_df.select(
        *row,
        F.xxhash64("results").alias("copy_hash"),
        F.posexplode_outer(results).alias("pos", "entry"),
    ).select(
        *row,
        "copy_hash",
        "pos",
        F.col("entry.rank").cast("long").alias("rank"),
        F.col("entry.chunk_id").alias("chunk_id"),
    )


def cluster_keys(clusters_df: DataFrame) -> DataFrame:
    """(chunk_id, cluster_key), chunk_id unique: a chunk listed more than once takes its smallest
    non-null cluster_id; a chunk whose cluster ids are all null is its own singleton.

    The same group-by also counts, per chunk, its rows (`listed`) and its empty or blank cluster
    ids (`empty_ids`), so the quality gates read the cluster table no second time.
    """
    return (
        clusters_df.where(F.col("chunk_id").isNotNull())
        .groupBy("chunk_id")
        .agg(
            F.min("cluster_id").alias("cluster_id"),
            F.count(F.lit(1)).alias("listed"),
            F.count(F.when(F.trim(F.col("cluster_id")) == "", True)).alias("empty_ids"),
        )
        .select(
            "chunk_id",
            F.when(F.col("cluster_id").isNull(), singleton_key(F.col("chunk_id")))
            .otherwise(F.concat(F.lit("c:"), F.col("cluster_id")))
            .alias("cluster_key"),
            "listed",
            "empty_ids",
        )
    )


def singleton_key(chunk_id: Column) -> Column:
    return F.concat(F.lit(SINGLETON_PREFIX), chunk_id)


def with_cluster_keys(entries_df: DataFrame, keys_df: DataFrame) -> DataFrame:
    """Attach each entry's cluster key; a chunk absent from the table is its own singleton and
    is flagged `is_missing`. `keys_df` must have unique chunk_ids (see `cluster_keys`)."""
    keys = keys_df.select("chunk_id", "cluster_key", F.lit(True).alias("is_known"))
    return entries_df.join(keys, on="chunk_id", how="left").select(
        *entries_df.columns,
        F.coalesce(F.col("cluster_key"), singleton_key(F.col("chunk_id"))).alias("cluster_key"),
        F.col("is_known").isNull().alias("is_missing"),
    )


def to_requests(keyed_entries_df: DataFrame, ks: Sequence[int]) -> DataFrame:
    """One row per (metric_date, request_id, is_malformed) with every metric of the request.

    - Redelivered copies count once: the copy with the earliest served_at is kept (ties by a
      hash of its content, so the choice does not depend on the order rows arrive in);
      `copies` counts the rows read.
    - Entries with a null chunk_id or rank are set aside (`invalid_entries`); the rest are
      ordered by rank, ties by array position.
    - `windows` holds unique_clusters for every k in `ks`.
    - Malformed rows group on their own and only carry `malformed_rows`.
    """
    is_valid = F.col("chunk_id").isNotNull() & F.col("rank").isNotNull()
    is_entry = F.col("pos").isNotNull()
    rows = keyed_entries_df.groupBy(*REQUEST_KEY).agg(
        F.collect_list(
            F.struct(
                "served_at",
                "copy_hash",
                F.when(is_valid, F.struct("rank", "pos", "cluster_key", "is_missing")).alias(
                    "entry"
                ),
                F.when(is_entry & ~is_valid, F.struct("pos", "rank", "chunk_id")).alias("bad"),
            )
        ).alias("rows"),
        F.count(F.when(~is_entry | (F.col("pos") == 0), True)).alias("copies"),
        F.collect_list("malformed_row").alias("malformed_rows"),
    )
    chosen = F.array_min(
        F.transform(
            "rows",
            lambda r: F.struct(
                r["served_at"].alias("served_at"), r["copy_hash"].alias("copy_hash")
            ),
        )
    )
    kept = F.filter(
        "rows",
        lambda r: (
            (r["served_at"] == F.col("chosen.served_at"))
            & (r["copy_hash"] == F.col("chosen.copy_hash"))
        ),
    )
    # Identical copies contribute identical entries: array_distinct folds them back to one copy.
    entries = F.array_sort(
        F.array_distinct(F.filter(F.transform("kept", lambda r: r["entry"]), _is_not_null))
    )
    invalid = F.array_sort(
        F.array_distinct(F.filter(F.transform("kept", lambda r: r["bad"]), _is_not_null))
    )
    keys = F.transform("entries", lambda e: e["cluster_key"])
    missing = F.filter("entries", lambda e: e["is_missing"])
    return (
        rows.select(*REQUEST_KEY, "copies", "malformed_rows", "rows", chosen.alias("chosen"))
        .select(
            *REQUEST_KEY,
            F.col("chosen.served_at").alias("served_at"),
            "copies",
            "malformed_rows",
            kept.alias("kept"),
        )
        .select(
            *REQUEST_KEY,
            "served_at",
            "copies",
            "malformed_rows",
            entries.alias("entries"),
            invalid.alias("invalid_entries"),
        )
        .select(
            *REQUEST_KEY,
            "served_at",
            "copies",
            F.size("entries").alias("results"),
            F.size(missing).alias("missing_cluster_results"),
            F.size(F.filter("entries", lambda e: e["rank"] <= 0)).alias("non_positive_ranks"),
            windows(keys, ks).alias("windows"),
            F.transform(missing, lambda e: F.substring(e["cluster_key"], 3, 1 << 30)).alias(
                "missing_chunks"
            ),
            "invalid_entries",
            "malformed_rows",
        )
    )


def _is_not_null(value: Column) -> Column:
    return value.isNotNull()


def unique_clusters_at(keys: Column, k: int) -> Column:
    """Distinct cluster keys among the first k (a shorter list counts what is there)."""
    return F.size(F.array_distinct(F.slice(keys, 1, k)))


def windows(keys: Column, ks: Sequence[int]) -> Column:
    """array<struct<k, unique_clusters>>, one element per k."""
    return F.array(
        *[
            F.struct(F.lit(k).alias("k"), unique_clusters_at(keys, k).alias("unique_clusters"))
            for k in ks
        ]
    )


def requests_by_key(logs_df: DataFrame, keys_df: DataFrame, ks: Sequence[int]) -> DataFrame:
    """Served-log rows + `cluster_keys(clusters)` -> `to_requests` rows (the one pass)."""
    return (
        logs_df.transform(with_row_status)
        .transform(explode_entries)
        .transform(with_cluster_keys, keys_df)
        .transform(to_requests, ks)
    )


def filter_served_requests(requests_df: DataFrame) -> DataFrame:
    """The requests that count: one per served request, malformed rows excluded."""
    return requests_df.where(~F.col("is_malformed")).drop("is_malformed")


def explode_windows(requests_df: DataFrame) -> DataFrame:
    """One row per (request, k): the grain of `unique_clusters_by_query`."""
    return requests_df.select(
        "metric_date",
        "request_id",
        "served_at",
        F.inline("windows"),
        "results",
        "missing_cluster_results",
    )


def unique_clusters_by_request(
    logs_df: DataFrame, keys_df: DataFrame, ks: Sequence[int]
) -> DataFrame:
    """Served-log rows + `cluster_keys(clusters)` -> one row per served request with every k."""
    return requests_by_key(logs_df, keys_df, ks).transform(filter_served_requests)
