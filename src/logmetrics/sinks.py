"""Delta writes: each run replaces exactly its dates, in one atomic commit per table.

A plain `mode("overwrite")` on a partitioned table would delete every other day; here every
write carries a `replaceWhere` predicate on `metric_date`, so re-running a date is idempotent,
other dates are untouched, and readers never see half a day (Delta commits are atomic).
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from logmetrics.schemas import BY_QUERY, DAILY, DATA_QUALITY, MISSING_CLUSTER_CHUNKS, QUARANTINE


@dataclass(frozen=True)
class Table:
    name: str
    schema: StructType
    comment: str


BY_QUERY_TABLE = Table(
    "unique_clusters_by_query",
    BY_QUERY,
    "unique_clusters@k per served request and k; grain (metric_date, request_id, k).",
)
DAILY_TABLE = Table(
    "unique_clusters_daily",
    DAILY,
    "Exact daily distribution of unique_clusters@k; grain (metric_date, k).",
)


DATA_QUALITY_TABLE = Table(
    "data_quality",
    DATA_QUALITY,
    "One row per (metric_date, check): the data-quality gates, pass or fail.",
)
QUARANTINE_TABLE = Table(
    "quarantine",
    QUARANTINE,
    "Every input row or entry kept out of the metrics, with the reason and the raw JSON.",
)
MISSING_CLUSTER_CHUNKS_TABLE = Table(
    "missing_cluster_chunks",
    MISSING_CLUSTER_CHUNKS,
    "Per day, the most-served chunk ids absent from the cluster table.",
)


@dataclass(frozen=True)
class RunStamp:
    """What every output row records about the run that wrote it."""

    run_id: str
    computed_at: dt.datetime
    cluster_table_version: int | None


def table_location(warehouse: str, table: Table) -> str:
    """`<warehouse>/<table>`; a local relative warehouse is made absolute (Delta needs it)."""
    if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", warehouse):
        warehouse = os.path.abspath(warehouse)
    return f"{warehouse.rstrip('/')}/{table.name}"


def with_run_stamp(df: DataFrame, stamp: RunStamp) -> DataFrame:
    """The provenance columns; the quality tables name the run's start for what they record."""
    started = F.lit(stamp.computed_at).cast("timestamp")
    return df.withColumns(
        {
            "cluster_table_version": F.lit(stamp.cluster_table_version).cast("long"),
            "run_id": F.lit(stamp.run_id),
            "computed_at": started,
            "checked_at": started,
            "quarantined_at": started,
        }
    )


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """The table's columns, in its order and types: the write's schema contract."""
    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def ensure_table(spark: SparkSession, location: str, table: Table) -> None:
    """Create the Delta table (partitioned by metric_date, with column comments) if absent."""
    from delta.tables import DeltaTable

    (
        DeltaTable.createIfNotExists(spark)
        .location(location)
        .addColumns(table.schema)
        .partitionedBy("metric_date")
        .comment(table.comment)
        .execute()
    )


def replace_dates(
    spark: SparkSession, df: DataFrame, warehouse: str, table: Table, dates: Sequence[dt.date]
) -> None:
    """Replace exactly `dates` of `table` with `df`'s rows, in one Delta commit."""
    location = table_location(warehouse, table)
    ensure_table(spark, location, table)
    (
        conform(df, table.schema)
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", dates_predicate(dates))
        .save(location)
    )


def read_table(spark: SparkSession, warehouse: str, table: Table) -> DataFrame | None:
    """The published table, or None before its first write."""
    from delta.tables import DeltaTable

    location = table_location(warehouse, table)
    if not DeltaTable.isDeltaTable(spark, location):
        return None
    return spark.read.format("delta").load(location)


def dates_predicate(dates: Sequence[dt.date]) -> str:
    """A SQL predicate on metric_date for exactly these dates (a range when contiguous)."""
    if not dates:
        raise ValueError("no dates to replace")
    ordered = sorted(set(dates))
    first, last = ordered[0], ordered[-1]
    if (last - first).days + 1 == len(ordered):
        return (
            f"metric_date >= DATE'{first.isoformat()}' AND metric_date <= DATE'{last.isoformat()}'"
        )
    listed = ", ".join(f"DATE'{d.isoformat()}'" for d in ordered)
    return f"metric_date IN ({listed})"
