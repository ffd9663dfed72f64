"""The rules of the metric, as pure DataFrame -> DataFrame transforms and Column functions.

Reading order (each step feeds the next, chained with `.transform`):

    filter_well_formed_requests  rows with a request_id, served_at and results list
    with_metric_date             metric_date = UTC date of served_at
    explode_entries              one row per (row, array position), empty lists kept
    with_cluster_keys            cluster key per entry (left join to `cluster_keys(clusters)`)
    to_requests                  one row per (metric_date, request_id): the copy kept, its valid
                                 entries in rank order, results / missing counts, every k
    explode_windows              one row per (request, k): the `unique_clusters_by_query` grain

A cluster key is `c:<cluster_id>` for a clustered chunk and `s:<chunk_id>` for a singleton (a
chunk absent from the cluster table or present with a null cluster id), so the two never collide.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

REQUEST_KEY = ("metric_date", "request_id")


def filter_well_formed_requests(logs_df: DataFrame) -> DataFrame:
    """Rows with a request_id, a served_at and a results list; the rest never enter a metric."""
    return logs_df.where(is_well_formed_request())


def is_well_formed_request() -> Column:
    return (
        F.col("request_id").isNotNull()
        & F.col("served_at").isNotNull()
        & F.col("results").isNotNull()
    )


def with_metric_date(logs_df: DataFrame) -> DataFrame:
    """metric_date = the UTC date of served_at (the session time zone is UTC)."""
    return logs_df.withColumn("metric_date", F.to_date("served_at"))


def explode_entries(requests_df: DataFrame) -> DataFrame:
    """One row per result entry, with its array position; an empty list keeps one null row.

    `copy_hash` tells redelivered copies of a request apart by content, so that one copy can be
    chosen per request after the group-by without a second shuffle.
    """
    return requests_df.select(
        "metric_date",
        "request_id",
        "served_at",
        F.xxhash64("results").alias("copy_hash"),
        F.posexplode_outer("results").alias("pos", "entry"),
    ).select(
        "metric_date",
        "request_id",
        "served_at",
        "copy_hash",
        "pos",
        F.col("entry.rank").cast("long").alias("rank"),
        F.col("entry.chunk_id").alias("chunk_id"),
    )


def cluster_keys(clusters_df: DataFrame) -> DataFrame:
    """(chunk_id, cluster_key), chunk_id unique: a chunk listed more than once takes its smallest
    non-null cluster_id; a chunk whose cluster ids are all null is its own singleton."""
    return (
        clusters_df.where(F.col("chunk_id").isNotNull())
        .groupBy("chunk_id")
        .agg(F.min("cluster_id").alias("cluster_id"))
        .select(
            "chunk_id",
            F.when(F.col("cluster_id").isNull(), singleton_key(F.col("chunk_id")))
            .otherwise(F.concat(F.lit("c:"), F.col("cluster_id")))
            .alias("cluster_key"),
        )
    )


def singleton_key(chunk_id: Column) -> Column:
    return F.concat(F.lit("s:"), chunk_id)


def with_cluster_keys(entries_df: DataFrame, keys_df: DataFrame) -> DataFrame:
    """Attach each entry's cluster key; a chunk absent from the table is its own singleton and
    is flagged `is_missing`. `keys_df` must have unique chunk_ids (see `cluster_keys`)."""
    keys = keys_df.select("chunk_id", "cluster_key", F.lit(True).alias("is_known"))
    return entries_df.join(keys, on="chunk_id", how="left").select(
        *[c for c in entries_df.columns],
        F.coalesce(F.col("cluster_key"), singleton_key(F.col("chunk_id"))).alias("cluster_key"),
        F.col("is_known").isNull().alias("is_missing"),
    )


def to_requests(keyed_entries_df: DataFrame, ks: Sequence[int]) -> DataFrame:
    """One row per (metric_date, request_id) with every metric of the request.

    - Redelivered copies count once: the copy with the earliest served_at is kept (ties by a
      hash of its content, so the choice does not depend on the order rows arrive in).
    - Entries with a null chunk_id or rank are dropped; the rest are ordered by rank, ties by
      array position.
    - `windows` holds unique_clusters for every k in `ks`.
    """
    is_valid = F.col("chunk_id").isNotNull() & F.col("rank").isNotNull()
    entry = F.struct("rank", "pos", "cluster_key", "is_missing")
    rows = keyed_entries_df.groupBy(*REQUEST_KEY).agg(
        F.collect_list(
            F.struct(
                "served_at",
                "copy_hash",
                F.when(is_valid, entry).alias("entry"),
            )
        ).alias("rows"),
        F.count(F.when(F.col("pos").isNull() | (F.col("pos") == 0), True)).alias("copies"),
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
            & r["entry"].isNotNull()
        ),
    )
    # Identical copies contribute identical (rank, pos, ...) entries: array_distinct folds them.
    entries = F.array_sort(F.array_distinct(F.transform(kept, lambda r: r["entry"])))
    keys = F.transform("entries", lambda e: e["cluster_key"])
    return (
        rows.select(*REQUEST_KEY, "copies", "rows", chosen.alias("chosen"))
        .select(
            *REQUEST_KEY,
            F.col("chosen.served_at").alias("served_at"),
            "copies",
            entries.alias("entries"),
        )
        .select(
            *REQUEST_KEY,
            "served_at",
            "copies",
            F.size("entries").alias("results"),
            F.size(F.filter("entries", lambda e: e["is_missing"])).alias("missing_cluster_results"),
            windows(keys, ks).alias("windows"),
        )
    )


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


def explode_windows(requests_df: DataFrame) -> DataFrame:
    """One row per (request, k): the grain of `unique_clusters_by_query`."""
    return requests_df.select(
        *REQUEST_KEY,
        "served_at",
        F.inline("windows"),
        "results",
        "missing_cluster_results",
    )


def unique_clusters_by_request(
    logs_df: DataFrame, keys_df: DataFrame, ks: Sequence[int]
) -> DataFrame:
    """Served-log rows + `cluster_keys(clusters)` -> one row per request with every k."""
    return (
        logs_df.transform(filter_well_formed_requests)
        .transform(with_metric_date)
        .transform(explode_entries)
        .transform(with_cluster_keys, keys_df)
        .transform(to_requests, ks)
    )
