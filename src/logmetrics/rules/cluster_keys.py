"""Cluster keys: each listed chunk's key and its salted 64-bit hashes, checked exact.

A cluster key is `c:<cluster_id>` for a clustered chunk and `s:<chunk_id>` for a singleton (a
chunk present with only null cluster ids), so the two never collide. The per-request pass
joins entries to these keys by `chunk_hash` (`per_request.with_cluster_keys`); when the whole
table is too large to broadcast, a chunk of days uses only the keys of the chunk ids it serves
(`served_chunk_hashes`, `filter_served_keys`: docs/cluster-scale.md). `salt` picks other hash
functions should `key_hash_checks` ever find two chunks or two keys sharing a hash.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

SINGLETON_PREFIX = "s:"
CLUSTER_PREFIX = "c:"


def cluster_keys(clusters_df: DataFrame, salt: int = 0) -> DataFrame:
    """(chunk_id, cluster_key, chunk_hash, cluster_hash), chunk_id unique: a chunk listed more
    than once takes its smallest non-null cluster_id; a chunk whose cluster ids are all null is
    its own singleton. The two hashes are 64-bit (`salt` picks other hash functions should
    `key_hash_collisions` ever find two chunks or two keys sharing one).

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
            .otherwise(F.concat(F.lit(CLUSTER_PREFIX), F.col("cluster_id")))
            .alias("cluster_key"),
            "listed",
            "empty_ids",
        )
        .select(
            "chunk_id",
            "cluster_key",
            chunk_hash(F.col("chunk_id"), salt).alias("chunk_hash"),
            F.xxhash64(F.lit(salt), "cluster_key").alias("cluster_hash"),
            "listed",
            "empty_ids",
        )
    )


def chunk_hash(chunk_id: Column, salt: int) -> Column:
    return F.xxhash64(F.lit(salt), chunk_id)


def key_hash_checks() -> list[Column]:
    """Aggregates over `cluster_keys` rows: whether each hash is exact over the table (no two
    chunk ids share a `chunk_hash`, no two cluster keys a `cluster_hash`). The same verdict as
    an empty `key_hash_collisions`, in one aggregation that can ride along with others."""
    return [
        (F.countDistinct("chunk_hash") == F.count(F.lit(1))).alias("chunk_hashes_exact"),
        (F.countDistinct("cluster_hash") == F.countDistinct("cluster_key")).alias(
            "cluster_hashes_exact"
        ),
    ]


def served_chunk_hashes(logs_df: DataFrame, salt: int = 0) -> DataFrame:
    """(chunk_hash), distinct: the `chunk_hash` under `salt` of every chunk id in the rows'
    results, whatever the row (malformed, a later copy): a superset of the hashes
    `with_cluster_keys` looks up in these rows. Reads only the `results` column."""
    return (
        logs_df.select(F.explode("results").alias("entry"))
        .select(chunk_hash(F.col("entry.chunk_id"), salt).alias("chunk_hash"))
        .distinct()
    )


def filter_served_keys(keys_df: DataFrame, served_df: DataFrame) -> DataFrame:
    """The `cluster_keys` rows whose chunk_hash is in `served_df` (`served_chunk_hashes` of
    the logs, under the keys' salt). Every entry of those logs finds the same key here as in
    the whole table, so `with_cluster_keys` attaches the same hashes; the set of served hashes
    is broadcast into the semi-join, so the keys, however many, are not shuffled."""
    return keys_df.join(F.broadcast(served_df), on="chunk_hash", how="left_semi")


def singleton_key(chunk_id: Column) -> Column:
    return F.concat(F.lit(SINGLETON_PREFIX), chunk_id)
