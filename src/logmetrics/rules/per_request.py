"""The per-request metric: served-log rows to one row per request with unique_clusters@k for
every k, as pure DataFrame -> DataFrame transforms and Column functions.

Reading order (each step feeds the next, chained with `.transform`):

    with_row_status      metric_date (UTC date of served_at) and whether the row is malformed
    partition_by_request all copies of a request in one partition (the only shuffle of the logs)
    filter_first_copies  one copy of each redelivered request
    explode_entries      one row per (row, array position); empty lists and malformed rows keep one
    with_cluster_keys    cluster key per entry (broadcast left join to `cluster_keys.cluster_keys`,
                         or to `cluster_keys.filter_served_keys` of them when the whole table is
                         too large to broadcast: docs/cluster-scale.md)
    to_requests          one row per (metric_date, request_id, is_malformed): its valid entries
                         in rank order, every k, and what was set aside
    filter_served_requests / explode_windows
                         the requests that count, one row per (request, k)

Everything the quality gates and the quarantine need (malformed rows, entries with a null
chunk_id or rank, redelivered copies and the rows read, unknown chunks) rides along in that one
group-by, so the logs are scanned once. The logs are shuffled as rows, before the explode, by a
hash of the request: the explode, the join and the group-by then run inside each partition, with
no shuffle of the ten-times-larger entries.

Entries carry their cluster key's 64-bit hash (`cluster_hash`, `rules.cluster_keys`: checked
collision-free over the whole table); a chunk absent from the table carries its chunk_id
instead (`missing_chunk`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructType

from logmetrics.rules.cluster_keys import chunk_hash
from logmetrics.schemas import (
    DISTINCT_ROWS,
    NULL_SEGMENT_VALUE,
    PARTITION_DATE,
    SERVED_AT_TEXT,
    STORED_ROWS,
)

REQUEST_KEY = ("request_key", "metric_date", "request_id", "is_malformed")


def with_row_status(logs_df: DataFrame) -> DataFrame:
    """metric_date = the UTC date of served_at (the session time zone is UTC), or the row's date
    partition when served_at is null; `malformed_reason` names the first missing field of a row
    that can never enter a metric (null request_id, served_at or results, or a text served_at
    that is not a timestamp), with the raw row."""
    reason = F.when(F.col("request_id").isNull(), F.lit("null_request_id"))
    if SERVED_AT_TEXT in logs_df.columns:  # text that did not parse as an ISO 8601 timestamp
        unparsed = F.col("served_at").isNull() & F.col(SERVED_AT_TEXT).isNotNull()
        reason = reason.when(unparsed, F.lit("invalid_served_at"))
    reason = reason.when(F.col("served_at").isNull(), F.lit("null_served_at")).when(
        F.col("results").isNull(), F.lit("null_results")
    )
    hidden = {PARTITION_DATE, STORED_ROWS, DISTINCT_ROWS}  # the reader's, not the row's
    raw = F.to_json(F.struct(*[column(c) for c in logs_df.columns if c not in hidden]))
    return logs_df.withColumns(
        {
            "metric_date": _metric_date(logs_df),
            "is_malformed": reason.isNotNull(),
            "malformed_row": F.when(
                reason.isNotNull(), F.struct(reason.alias("reason"), raw.alias("raw"))
            ),
        }
    )


def _metric_date(logs_df: DataFrame) -> Column:
    metric_date = F.to_date("served_at")
    if PARTITION_DATE in logs_df.columns:
        metric_date = F.coalesce(metric_date, F.col(PARTITION_DATE))
    return metric_date


def column(name: str) -> Column:
    """The column called `name`, whatever characters it has (`a.b` is not a nested field)."""
    return F.col("`" + name.replace("`", "``") + "`")


def with_segment_values(logs_df: DataFrame, segment_by: Sequence[str]) -> DataFrame:
    """`segment_values`: the row's `segment_by` columns as text, in that order ('(null)' for a
    null), carried to the request's row for the segmented daily tables. Without segments there
    is no column: nothing is carried through the explode for nothing."""
    if not segment_by:
        return logs_df
    values = [F.coalesce(column(c).cast("string"), F.lit(NULL_SEGMENT_VALUE)) for c in segment_by]
    return logs_df.withColumn(SEGMENT_VALUES, F.array(*values).cast("array<string>"))


SEGMENT_VALUES = "segment_values"


def segment_value_columns(df: DataFrame) -> list[str]:
    """[`segment_values`] when the rows carry the segment columns' values, else []."""
    return [SEGMENT_VALUES] if SEGMENT_VALUES in df.columns else []


def partition_by_request(logs_df: DataFrame) -> DataFrame:
    """Hash-partition the rows by `request_key` (a 64-bit hash of metric_date and request_id),
    so that every copy of a request, and later every entry of it, sits in one partition.

    The group-by in `to_requests` includes `request_key` in its keys, so Spark plans it inside
    each partition instead of shuffling the exploded entries. The number of partitions is
    Spark's (`spark.sql.shuffle.partitions`, coalesced by adaptive execution).
    """
    return logs_df.withColumn("request_key", F.xxhash64("metric_date", "request_id")).repartition(
        "request_key"
    )


def filter_first_copies(logs_df: DataFrame) -> DataFrame:
    """Redelivered copies count once: of the served copies of one (metric_date, request_id),
    the one with the earliest served_at is kept, ties by a hash of its content, so the choice
    does not depend on the order rows arrive in. `copies` counts the copies read for the
    request, and `conflicting` says whether their results differ (by content hash): a
    redelivery repeats its results; a conflict is another list under the same id.

    In the exploded shape a copy is several rows (`STORED_ROWS`, `DISTINCT_ROWS` of
    `inputs.shapes.group_result_rows`): `rows_read` counts the request's rows read, every copy's
    and every repeat, and `kept_rows` the kept copy's distinct rows; the rest of the rows read
    are duplicate rows. A nested or ids copy is one row: it has neither column.

    Malformed rows are all kept (each goes to the quarantine). The window runs inside the
    partitions `partition_by_request` made.
    """
    ordered = Window.partitionBy(*REQUEST_KEY).orderBy("served_at", "copy_hash")
    # The whole request, in the same order as `copy`: one sort serves both windows.
    whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    copy_hash = F.col("copy_hash")
    rows: dict[str, Column] = {}
    if STORED_ROWS in logs_df.columns:
        rows = {"rows_read": F.sum(STORED_ROWS).over(whole), "kept_rows": F.col(DISTINCT_ROWS)}
    return (
        logs_df.withColumn("copy_hash", F.xxhash64("results"))
        .withColumns(
            {
                "copies": F.count(F.lit(1)).over(whole),
                # One pass with `copies`: the copies disagree iff their hashes are not all one.
                "conflicting": (F.min(copy_hash).over(whole) != F.max(copy_hash).over(whole)),
                "copy": F.row_number().over(ordered),
                **rows,
            }
        )
        .where(F.col("is_malformed") | (F.col("copy") == 1))
        .drop("copy", "copy_hash", *([STORED_ROWS, DISTINCT_ROWS] if rows else []))
    )


ROW_COUNTS = ("rows_read", "kept_rows")
"""A request's rows read and its kept copy's distinct rows, in the exploded shape only
(`filter_first_copies`): carried to the request's row for `quality.facts.day_facts`."""


def row_count_columns(df: DataFrame) -> list[str]:
    """ROW_COUNTS when the rows carry them (the exploded shape), else []."""
    return [c for c in ROW_COUNTS if c in df.columns]


def explode_entries(logs_df: DataFrame) -> DataFrame:
    """One row per result entry with its array position; an empty list, or a malformed row,
    keeps one row with a null position."""
    row = [
        *REQUEST_KEY,
        "malformed_row",
        "served_at",
        "copies",
        "conflicting",
        *row_count_columns(logs_df),
        *segment_value_columns(logs_df),
    ]
    results = F.when(~F.col("is_malformed"), F.col("results"))
    results_type = logs_df.schema["results"].dataType
    entry_type = results_type.elementType if isinstance(results_type, ArrayType) else None
    has_tokens = isinstance(entry_type, StructType) and "tokens" in entry_type.names
    return logs_df.select(*row, F.posexplode_outer(results).alias("pos", "entry")).select(
        *row,
        "pos",
        F.col("entry.rank").cast("long").alias("rank"),
        F.col("entry.chunk_id").alias("chunk_id"),
        *([F.round("entry.tokens").cast("long").alias("tokens")] if has_tokens else []),
    )


def with_cluster_keys(
    entries_df: DataFrame, keys_df: DataFrame, salt: int = 0, broadcast: bool = True
) -> DataFrame:
    """Attach each entry's `cluster_hash`; a chunk absent from the table is its own singleton:
    its hash is null and `missing_chunk` holds its chunk_id. `keys_df` comes from
    `cluster_keys(..., salt)` and has no two chunks sharing a `chunk_hash`.

    The join is on the 64-bit chunk hash (a fast long-keyed join), and the chunk id is then
    compared, so a served chunk that merely shares a hash with a listed one is still missing.
    With `broadcast` (keys that fit in memory: the whole table, or `filter_served_keys` of it)
    the join keeps the entries' partitioning by request, so `to_requests` needs no shuffle;
    otherwise the entries are shuffled to the keys in a sort-merge join, hinted so that Spark
    does not broadcast keys the caller judged too large (docs/cluster-scale.md).
    """
    keys = keys_df.select("chunk_hash", F.col("chunk_id").alias("listed_chunk_id"), "cluster_hash")
    is_listed = F.col("listed_chunk_id") == F.col("chunk_id")
    return (
        entries_df.withColumn("chunk_hash", chunk_hash(F.col("chunk_id"), salt))
        .join(F.broadcast(keys) if broadcast else keys.hint("merge"), on="chunk_hash", how="left")
        .select(
            *entries_df.columns,
            F.when(is_listed, F.col("cluster_hash")).alias("cluster_hash"),
            F.when(~F.coalesce(is_listed, F.lit(False)), F.col("chunk_id")).alias("missing_chunk"),
        )
    )


COUNTS = ("results", "missing_cluster_results", "non_positive_ranks")


def to_requests(
    keyed_entries_df: DataFrame, ks: Sequence[int], slot_keys: bool = False
) -> DataFrame:
    """One row per (metric_date, request_id, is_malformed) with every metric of the request
    (one copy of it: see `filter_first_copies`), and its `request_key`, which the rows are
    still partitioned by: a later group-by on it needs no shuffle.

    - Entries with a null chunk_id or rank are set aside (`invalid_entries`); the rest are
      ordered by rank, ties by array position.
    - `new_slots[i]` says whether slot i+1 (up to the largest k) is the first of its cluster
      in the list; every k's unique_clusters is the count of new slots among the first k
      (`windows`), and the k-sweep and the redundancy cost are sums of the same flags.
    - `slot_tokens` holds each of those slots' `tokens` (null where the results have none).
    - With `slot_keys`, the top slots' keys are kept (`slot_keys`, aligned with `new_slots`):
      what `rules.crowding` counts the repeated slots of each key from.
    - Malformed rows group on their own and only carry `malformed_rows`.

    Only built-in aggregates and array functions. What the lists collect is computed in a
    projection first: the collecting aggregate evaluates its inputs without generated code,
    so it is given plain columns.
    """
    is_valid = F.col("chunk_id").isNotNull() & F.col("rank").isNotNull()
    is_missing = is_valid & F.col("missing_chunk").isNotNull()
    key = F.struct("cluster_hash", "missing_chunk")
    has_tokens = "tokens" in keyed_entries_df.columns
    entry = F.struct("rank", "pos", key.alias("key"), *(["tokens"] if has_tokens else []))
    rows = (
        keyed_entries_df.select(
            *REQUEST_KEY,
            "served_at",
            "copies",
            "conflicting",
            *row_count_columns(keyed_entries_df),
            "malformed_row",
            *segment_value_columns(keyed_entries_df),
            is_valid.cast("int").alias("is_valid"),
            is_missing.cast("int").alias("is_missing"),
            (is_valid & (F.col("rank") <= 0)).cast("int").alias("is_non_positive"),
            F.when(is_valid, entry).alias("entry"),
            F.when(is_missing, F.col("missing_chunk")).alias("missing_chunk"),
            F.when(F.col("pos").isNotNull() & ~is_valid, F.struct("pos", "rank", "chunk_id")).alias(
                "invalid_entry"
            ),
        )
        .groupBy(*REQUEST_KEY)
        .agg(
            F.min("served_at").alias("served_at"),
            F.max("copies").alias("copies"),
            F.max("conflicting").alias("conflicting"),
            *[F.max(c).alias(c) for c in row_count_columns(keyed_entries_df)],
            # One copy, one value (malformed copies keep the first's, which nothing reads).
            *[F.first(c).alias(c) for c in segment_value_columns(keyed_entries_df)],
            F.sum("is_valid").alias("results"),
            F.sum("is_missing").alias("missing_cluster_results"),
            F.sum("is_non_positive").alias("non_positive_ranks"),
            # collect_list skips nulls: each list holds only what its column selected.
            F.collect_list("entry").alias("entries"),
            F.collect_list("missing_chunk").alias("missing_chunks"),
            F.collect_list("invalid_entry").alias("invalid_entries"),
            F.collect_list("malformed_row").alias("malformed_rows"),
        )
    )
    # The first max(ks) entries in rank order, ties by position.
    slots = F.slice(F.sort_array("entries"), 1, max(ks))
    no_tokens = F.lit(None).cast("array<bigint>")
    return (
        rows.select(
            "*",
            slots.getField("key").alias("slot_keys"),
            (slots.getField("tokens") if has_tokens else no_tokens).alias("slot_tokens"),
        )
        .select("*", new_slots(F.col("slot_keys")).alias("new_slots"))
        .select(
            *REQUEST_KEY,
            "served_at",
            "copies",
            "conflicting",
            *row_count_columns(keyed_entries_df),
            *segment_value_columns(keyed_entries_df),
            *[F.col(c).cast("int").alias(c) for c in COUNTS],
            windows(F.col("new_slots"), ks).alias("windows"),
            "new_slots",
            "slot_tokens",
            *(["slot_keys"] if slot_keys else []),
            *[
                (
                    F.sort_array(_null_if_empty(F.col(c)))
                    if c == "invalid_entries"
                    else _null_if_empty(F.col(c))
                ).alias(c)
                for c in RARE_LISTS
            ],
        )
    )


RARE_LISTS = ("missing_chunks", "invalid_entries", "malformed_rows")
"""Lists that are empty for almost every request: null when empty, which makes the persisted
per-request rows cheaper to scan (a null costs a bit, an empty array a decode)."""


def _null_if_empty(values: Column) -> Column:
    return F.when(F.size(values) > 0, values)


def new_slots(keys: Column) -> Column:
    """array<boolean>: whether each key is the first occurrence of its value in `keys`."""
    return F.transform(keys, lambda key, i: F.array_position(keys, key) == i + 1)


def unique_clusters_at(new_slots: Column, k: int) -> Column:
    """Distinct cluster keys among the first k: the new slots among them (a shorter list
    counts what is there)."""
    return F.size(F.array_remove(F.slice(new_slots, 1, k), False))


def windows(new_slots: Column, ks: Sequence[int]) -> Column:
    """array<struct<k, unique_clusters>>, one element per k."""
    return F.array(
        *[
            F.struct(F.lit(k).alias("k"), unique_clusters_at(new_slots, k).alias("unique_clusters"))
            for k in ks
        ]
    )


def requests_by_key(
    logs_df: DataFrame,
    keys_df: DataFrame,
    ks: Sequence[int],
    salt: int = 0,
    broadcast: bool = True,
    segment_by: Sequence[str] = (),
    slot_keys: bool = False,
) -> DataFrame:
    """Served-log rows + `cluster_keys(clusters)` -> `to_requests` rows (the one pass); with
    `slot_keys`, their top slots' keys too (for `rules.crowding`)."""
    return (
        logs_df.transform(with_row_status)
        .transform(with_segment_values, segment_by)
        .transform(partition_by_request)
        .transform(filter_first_copies)
        .transform(explode_entries)
        .transform(with_cluster_keys, keys_df, salt, broadcast)
        .transform(to_requests, ks, slot_keys)
    )


def filter_served_requests(requests_df: DataFrame) -> DataFrame:
    """The requests that count: one per served request, malformed rows excluded."""
    return requests_df.where(~F.col("is_malformed")).drop("is_malformed")


def explode_windows(requests_df: DataFrame, segment_by: Sequence[str] = ()) -> DataFrame:
    """One row per (request, k): the grain of `unique_clusters_by_query`, with one column per
    `segment_by` column (its value as text, from `with_segment_values`)."""
    segments = [F.col(SEGMENT_VALUES)[i].alias(name) for i, name in enumerate(segment_by)]
    return requests_df.select(
        "metric_date",
        "request_id",
        "served_at",
        *segments,
        F.inline("windows"),
        "results",
        "missing_cluster_results",
    )
