"""The table catalogue: every Delta table logmetrics writes (`OUTPUT_TABLES`), where it lives,
its writes and reads, and its upkeep (OPTIMIZE, VACUUM).

Each run replaces exactly its dates, in one atomic commit per table.

A plain `mode("overwrite")` on a partitioned table would delete every other day; here every
write carries a `replaceWhere` predicate on `metric_date`, so re-running a date is idempotent,
other dates are untouched, and readers never see half a day (Delta commits are atomic).
Tables are paths under `output.warehouse`, or names in a catalog (`output.catalog`,
`output.schema`). A write that loses a race with a concurrent writer is retried: two runs over
different dates both land, two runs over the same date leave one copy of it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import logging
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, DataFrameWriter, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from logmetrics import storage
from logmetrics.config import OutputConfig
from logmetrics.console import span_text
from logmetrics.errors import InputError
from logmetrics.interrupt import committing
from logmetrics.schemas import (
    ALERTS,
    BY_QUERY,
    CROWDING,
    DAILY,
    DATA_QUALITY,
    DETECTOR_CALIBRATION,
    EVALUATION_RESULTS,
    JOB_RUNS,
    K_SWEEP,
    MISSING_CLUSTER_CHUNKS,
    QUARANTINE,
    REDUNDANCY_COST,
    by_query_schema,
)
from logmetrics.storage import delta_path_identifier
from logmetrics.tables import delta_rs
from logmetrics.tables.lease import check_held

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Table:
    """A Delta table logmetrics writes. Only `unique_clusters_by_query` is partitioned (by
    metric_date): Delta's guidance is to partition a table only when each partition holds about
    a gigabyte, and the daily tables hold a few hundred rows a day. They are replaced per
    metric_date all the same (`replaceWhere` works on any column), one file per write."""

    name: str
    schema: StructType
    comment: str
    partition_by: tuple[str, ...] = ()
    relaxed: tuple[str, ...] = ()  # columns once NOT NULL: `ensure_table` drops it on old tables


BY_QUERY_TABLE = Table(
    "unique_clusters_by_query",
    BY_QUERY,
    "unique_clusters@k per served request and k; grain (metric_date, request_id, k).",
    partition_by=("metric_date",),
)


def by_query_table(segment_by: Sequence[str]) -> Table:
    """`unique_clusters_by_query` with the run's `metrics.segment_by` columns (a table written
    before they were configured gains them: the writes merge additive schema changes)."""
    return replace(BY_QUERY_TABLE, schema=by_query_schema(segment_by))


DAILY_TABLE = Table(
    "unique_clusters_daily",
    DAILY,
    "Exact daily distribution of unique_clusters@k; grain (metric_date, k, segment, "
    "segment_value).",
)
K_SWEEP_TABLE = Table(
    "unique_clusters_k_sweep",
    K_SWEEP,
    "Mean unique clusters, distinct fraction and marginal rate for every slot k; grain "
    "(metric_date, k, segment, segment_value).",
)
REDUNDANCY_COST_TABLE = Table(
    "redundancy_cost_daily",
    REDUNDANCY_COST,
    "Redundant slots in the top-k, their prompt tokens and USD; grain (metric_date, k, "
    "segment, segment_value).",
)
CROWDING_TABLE = Table(
    "unique_clusters_crowding",
    CROWDING,
    "What crowds the top-k: the cluster keys with the most redundant slots; grain "
    "(metric_date, k, segment, segment_value, rank).",
)
DATA_QUALITY_TABLE = Table(
    "data_quality",
    DATA_QUALITY,
    "One row per (metric_date, check): the data-quality gates, pass or fail.",
    relaxed=("success",),  # null: not judged
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
JOB_RUNS_TABLE = Table(
    "job_runs",
    JOB_RUNS,
    "The run ledger: one row per (run, day) when a day starts and when it ends.",
)
ALERTS_TABLE = Table(
    "unique_clusters_alerts",
    ALERTS,
    "Each published day's statistics against their baseline, and the verdict; grain "
    "(metric_date, k, segment, segment_value, statistic).",
)

DETECTOR_CALIBRATION_TABLE = Table(
    "detector_calibration",
    DETECTOR_CALIBRATION,
    "The near-duplicate detector's measured pair precision and recall per cluster table "
    "version or detector label (inputs.calibration), as the last run read it.",
)

EVALUATION_RESULTS_TABLE = Table(
    "evaluation_results",
    EVALUATION_RESULTS,
    "Judged evaluation (logmetrics evaluate): metric@k per run and query, and the mean (ALL).",
    partition_by=("run",),
)


OUTPUT_TABLES = (
    BY_QUERY_TABLE,
    DAILY_TABLE,
    K_SWEEP_TABLE,
    REDUNDANCY_COST_TABLE,
    CROWDING_TABLE,
    DATA_QUALITY_TABLE,
    QUARANTINE_TABLE,
    MISSING_CLUSTER_CHUNKS_TABLE,
    JOB_RUNS_TABLE,
    ALERTS_TABLE,
    DETECTOR_CALIBRATION_TABLE,
    EVALUATION_RESULTS_TABLE,
)
"""Every table logmetrics writes, for `logmetrics maintain`."""


@dataclass(frozen=True)
class RunStamp:
    """What every output row records about the run that wrote it."""

    run_id: str
    computed_at: dt.datetime
    cluster_table_version: int | None


@dataclass(frozen=True)
class TableRef:
    """A Delta table by path (`location`) or by catalog name (`name`, quoted), and the table
    properties it is created with (`output.table_properties`)."""

    table: Table
    location: str | None = None
    name: str | None = None
    properties: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return self.name or self.location or self.table.name


def table_ref(output: OutputConfig, table: Table) -> TableRef:
    properties = tuple(sorted(output.table_properties.items()))
    if output.schema_name is not None:
        parts = [output.catalog, output.schema_name, table.name]
        name = ".".join(quote_identifier(p) for p in parts if p is not None)
        return TableRef(table, name=name, properties=properties)
    assert output.warehouse is not None  # OutputConfig guarantees one of the two
    return TableRef(table, location=table_location(output.warehouse, table), properties=properties)


def schema_name(output: OutputConfig) -> str:
    """The catalog schema of catalog tables, quoted: `catalog`.`schema` (or `schema`)."""
    assert output.schema_name is not None
    return ".".join(quote_identifier(p) for p in (output.catalog, output.schema_name) if p)


def sql_target(ref: TableRef) -> str:
    """The table in SQL: its catalog name, or delta.`path`."""
    return ref.name or delta_path_identifier(str(ref.location))


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
    return df.select(*_conformed_columns(schema))


@functools.lru_cache(maxsize=64)
def _conformed_columns(schema: StructType) -> tuple[Column, ...]:
    """`conform`'s columns, built once per schema: a column expression is not bound to a
    DataFrame, and building one costs about a dozen calls into the JVM (the cast's type crosses
    as JSON), some 3,000 for a run's writes, where the select now costs one per column."""
    return tuple(_column(f.name).cast(f.dataType).alias(f.name) for f in schema.fields)


def _column(name: str) -> Column:
    """The column called `name`, whatever characters it has (a segment column `service.name`
    is not a nested field)."""
    return F.col("`" + name.replace("`", "``") + "`")


_ENSURED: set[str] = set()


def ensure_table(spark: SparkSession, ref: TableRef) -> None:
    """Create the Delta table (partitioned, with column comments) if it does not exist; once
    per table and process, since every chunk of a backfill writes the same tables.

    SQL rather than `DeltaTable.createIfNotExists`: Spark Connect runs SQL on any server with
    Delta's SQL extension, while the DeltaTable API needs the Delta Connect server plugin."""
    if str(ref) in _ENSURED:
        return
    table = ref.table
    if table.relaxed:
        _relax_columns(spark, ref)
    if ref.location is not None and _holds_delta_table(ref.location):
        _ENSURED.add(str(ref))  # a path we can look at: no statement for nothing
        return
    columns = ", ".join(_column_ddl(field) for field in table.schema.fields)
    partitioned = f" PARTITIONED BY ({', '.join(table.partition_by)})" if table.partition_by else ""
    properties = f" TBLPROPERTIES ({_properties_sql(ref)})" if ref.properties else ""
    statement = (
        f"CREATE TABLE IF NOT EXISTS {sql_target(ref)} ({columns}) USING delta{partitioned} "
        f"COMMENT {sql_string(table.comment)}{properties}"
    )
    _retry_conflicts(lambda: spark.sql(statement), f"create {ref}")
    _ENSURED.add(str(ref))


def _relax_columns(spark: SparkSession, ref: TableRef) -> None:
    """Drop NOT NULL from the table's `relaxed` columns where a table written by an older
    logmetrics still has it (one commit, once), so that a null the schema now allows can be
    written."""
    if ref.name is not None:
        existing = spark.read.table(ref.name) if spark.catalog.tableExists(ref.name) else None
    else:
        existing = read_delta_path(spark, str(ref.location))
    if existing is None:
        return
    fields = {f.name: f for f in existing.schema.fields}
    for column in ref.table.relaxed:
        if column in fields and not fields[column].nullable:
            statement = f"ALTER TABLE {sql_target(ref)} ALTER COLUMN `{column}` DROP NOT NULL"
            _retry_conflicts(partial(spark.sql, statement), f"relax {ref}.{column}")
            log.info("%s: column %s may now be null", ref, column)


def apply_table_properties(spark: SparkSession, output: OutputConfig, table: Table) -> bool:
    """Set `output.table_properties` on the table if it exists (ALTER TABLE ... SET
    TBLPROPERTIES, one Delta commit): a table created before they were configured gets them
    too. False when there is nothing to set or no table yet."""
    ref = table_ref(output, table)
    target = _existing_target(spark, output, table)
    if not ref.properties or target is None:
        return False
    statement = f"ALTER TABLE {target} SET TBLPROPERTIES ({_properties_sql(ref)})"
    _retry_conflicts(lambda: spark.sql(statement), f"set the properties of {ref}")
    return True


def _properties_sql(ref: TableRef) -> str:
    return ", ".join(f"{sql_string(key)} = {sql_string(value)}" for key, value in ref.properties)


def _holds_delta_table(location: str) -> bool:
    """Whether a path (local or S3: `storage`) already holds a Delta table: its log has
    a commit or a checkpoint (old commits are cleaned up once a checkpoint covers them). False
    where it cannot be looked at directly (the caller runs its statement)."""
    where = storage.place(location)
    if where is None:
        return False
    names = [info.base_name for info in where.child("_delta_log").listing()]
    return any(name.endswith(".json") or name == "_last_checkpoint" for name in names)


def _column_ddl(field: StructField) -> str:
    ddl = f"`{field.name}` {field.dataType.simpleString()}"
    if not field.nullable:
        ddl += " NOT NULL"
    if field.metadata.get("comment"):
        ddl += f" COMMENT {sql_string(field.metadata['comment'])}"
    return ddl


def replace_dates(
    spark: SparkSession,
    df: DataFrame,
    output: OutputConfig,
    table: Table,
    dates: Sequence[dt.date],
    stamp: RunStamp | None = None,
    mark: WriteMark | None = None,
) -> None:
    """Replace exactly `dates` of `table` with `df`'s rows, in one Delta commit; with `stamp`,
    its provenance columns (`with_run_stamp`) are added to the rows after their shuffle. With
    `mark`, the commit says which run and days it is (`WriteMark`)."""
    replace_where(
        spark,
        df,
        output,
        table,
        dates_predicate(dates),
        stamp,
        partitions=len(set(dates)),
        mark=mark,
    )


def append_dates(
    spark: SparkSession,
    df: DataFrame,
    output: OutputConfig,
    table: Table,
    dates: Sequence[dt.date],
    stamp: RunStamp,
    mark: WriteMark,
) -> None:
    """Append `df`'s rows of `dates`, which `table` holds none of (the caller knows:
    `flows.writes`), in one Delta commit marked with `mark`: a blind append, with no DELETE
    first, so no rebuild of the table's whole state."""
    ref = table_ref(output, table)
    ensure_table(spark, ref)
    log.debug("appending to %s %s", ref, dates_predicate(dates))
    rows = one_file_per_partition(spark, df, table, len(set(dates)))
    writer = (
        conform(with_run_stamp(rows, stamp), table.schema)
        .write.format("delta")
        .mode("append")
        .option("mergeSchema", "true")
        .option("userMetadata", mark.user_metadata())
    )
    _retry_conflicts(lambda: _save(writer, ref), f"append to {ref}")


def delete_run_rows(
    spark: SparkSession,
    output: OutputConfig,
    table: Table,
    dates: Sequence[dt.date],
    run_id: str,
) -> None:
    """Delete one run's rows of `dates` from `table`, in one Delta commit: other runs' rows of
    those days are untouched."""
    target = _existing_target(spark, output, table)
    if target is None:
        return
    statement = (
        f"DELETE FROM {target} WHERE ({dates_predicate(dates)}) AND run_id = {sql_string(run_id)}"
    )
    _retry_conflicts(lambda: spark.sql(statement), f"delete from {target}")


def replace_runs(
    spark: SparkSession, df: DataFrame, output: OutputConfig, table: Table, runs: Sequence[str]
) -> None:
    """Replace every row of the evaluated `runs` with `df`'s rows, in one Delta commit: rows
    of other runs are untouched, and a run evaluated again leaves no row of its last time."""
    replace_where(spark, df, output, table, runs_predicate(runs))


def replace_where(
    spark: SparkSession,
    df: DataFrame,
    output: OutputConfig,
    table: Table,
    predicate: str,
    stamp: RunStamp | None = None,
    partitions: int | None = None,
    mark: WriteMark | None = None,
) -> None:
    """Replace the rows of `table` matching `predicate` with `df`'s rows, in one Delta commit
    (`stamp`, `partitions`: see `one_file_per_partition`; `mark`: `replace_dates`)."""
    ref = table_ref(output, table)
    ensure_table(spark, ref)
    log.debug("writing %s where %s", ref, predicate)
    rows = one_file_per_partition(spark, df, table, partitions)
    rows = conform(with_run_stamp(rows, stamp) if stamp else rows, table.schema)
    writer = (
        rows.write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", predicate)
        .option("mergeSchema", "true")  # a newer logmetrics may add columns: additive only
    )
    if mark is not None:
        writer = writer.option("userMetadata", mark.user_metadata())
    _retry_conflicts(lambda: _save(writer, ref), f"write {ref}")


@dataclass(frozen=True)
class WriteMark:
    """What a run's commit to a day table says of itself (Delta's `userMetadata`): the run,
    its position (the Delta version of `job_runs` holding its `started` rows; later runs have
    later positions) and the days the commit writes."""

    run_id: str
    position: int
    days: tuple[dt.date, ...]

    def user_metadata(self) -> str:
        return json.dumps(
            {
                "logmetrics_run": self.run_id,
                "position": self.position,
                "days": [d.isoformat() for d in self.days],
            },
            separators=(",", ":"),
        )

    @staticmethod
    def parse(text: str | None) -> WriteMark | None:
        """The mark of a logmetrics day write; None for any other commit."""
        try:
            fields = json.loads(text or "")
            return WriteMark(
                str(fields["logmetrics_run"]),
                int(fields["position"]),
                tuple(dt.date.fromisoformat(d) for d in fields["days"]),
            )
        except (ValueError, TypeError, KeyError):
            return None


@dataclass(frozen=True)
class Commit:
    """One commit of a table's history."""

    version: int
    operation: str
    user_metadata: str | None

    @property
    def mark(self) -> WriteMark | None:
        """What a logmetrics day write says of itself; None for any other commit."""
        return WriteMark.parse(self.user_metadata)


def recent_commits(
    spark: SparkSession, output: OutputConfig, table: Table, limit: int = 20
) -> list[Commit]:
    """The table's newest `limit` commits, newest first; none before the table exists. A
    table on a local path or S3 has them read from its log's commit files (`_log_commits`: no
    Spark job), any other with `DESCRIBE HISTORY` (Delta reads only their commit files)."""
    ref = table_ref(output, table)
    root = storage.place(ref.location) if ref.location is not None else None
    if root is not None:
        found = _log_commits(root, limit)
        if found is not None:
            return found
    elif ref.location is not None:
        storage.say_no_reader(ref.location, "a table's commits", "DESCRIBE HISTORY reads them")
    target = _existing_target(spark, output, table)
    if target is None:
        return []
    rows = spark.sql(f"DESCRIBE HISTORY {target} LIMIT {int(limit)}").select(
        "version", "operation", "userMetadata"
    )
    return [Commit(int(r.version), str(r.operation), r.userMetadata) for r in rows.collect()]


_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")


def _log_commits(root: storage.Place, limit: int) -> list[Commit] | None:
    """The newest `limit` commits of the Delta table at `root` (local or S3), newest first,
    each from its commit file's `commitInfo` action (the Delta protocol's: the operation and
    the userMetadata, what `DESCRIBE HISTORY` shows of them): [] when there is no log; None
    when a commit file has no `commitInfo` or a checkpoint alone holds the newest versions
    (the caller asks Delta)."""
    log_dir = root.child("_delta_log")
    names = [info.base_name for info in log_dir.listing()]
    versions = sorted(
        (int(m.group(1)) for name in names if (m := _COMMIT_FILE.match(name))), reverse=True
    )
    if not versions:
        return None if names else []
    commits = []
    for version in versions[:limit]:
        info = None
        for line in log_dir.child(f"{version:020d}.json").read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "commitInfo" in action:
                info = action["commitInfo"]
                break
        if not isinstance(info, dict):
            return None
        commits.append(Commit(version, str(info.get("operation", "")), info.get("userMetadata")))
    return commits


ROWS_KEPT = frozenset(
    {"CREATE TABLE", "OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "ADD COLUMNS"}
)
"""Commits that change no row of a table: the empty table's creation and the upkeep's."""


def newest_write(spark: SparkSession, output: OutputConfig, table: Table) -> Commit | None:
    """The table's newest commit that may have changed its rows (not its creation or upkeep,
    ROWS_KEPT); None when no row was ever written to it (no table yet, or only such commits
    since its creation). Past its last 10 commits, the oldest of them stands for it."""
    commits = recent_commits(spark, output, table, limit=10)
    changed = next((c for c in commits if c.operation not in ROWS_KEPT), None)
    if changed is not None or not commits or commits[-1].version == 0:
        return changed
    return commits[-1]


def one_file_per_partition(
    spark: SparkSession, df: DataFrame, table: Table, partitions: int | None = None
) -> DataFrame:
    """`df`'s columns of the table, one file per table partition or, for an unpartitioned
    table, one file per write, whatever came upstream.

    A partitioned table's rows are shuffled by its partition columns into a fixed number of
    tasks, which adaptive execution leaves as it is (it would coalesce the shuffle by its
    bytes: three tasks for a month of the per-query table, on two cores): `partitions` (the
    dates written), at most `spark.sql.shuffle.partitions` when that is a number (Databricks
    also takes `auto`). Only the table's own columns cross the shuffle: the provenance columns
    are constants, added after it."""
    rows = df.select(*[_column(c) for c in df.columns if c in table.schema.names])
    if not table.partition_by:
        return rows.coalesce(1)
    setting = str(spark.conf.get("spark.sql.shuffle.partitions") or "")
    counts = [n for n in (partitions, int(setting) if setting.isdigit() else None) if n]
    if not counts:
        return rows.repartition(*table.partition_by)
    return rows.repartition(max(1, min(counts)), *table.partition_by)


def append(
    spark: SparkSession,
    df: DataFrame,
    output: OutputConfig,
    table: Table,
    user_metadata: str | None = None,
) -> None:
    """Append `df` to `table` (a blind append: it never conflicts with another writer); the
    commit carries `user_metadata` (`recent_commits` finds it)."""
    ref = table_ref(output, table)
    ensure_table(spark, ref)
    writer = (
        conform(df, table.schema).write.format("delta").mode("append").option("mergeSchema", "true")
    )
    if user_metadata is not None:
        writer = writer.option("userMetadata", user_metadata)
    _retry_conflicts(lambda: _save(writer, ref), f"append to {ref}")


def optimize(spark: SparkSession, output: OutputConfig, table: Table) -> tuple[int, int] | None:
    """Compact the table's small files (Delta's OPTIMIZE, which changes no row): (files
    removed, files added), or None when the table does not exist yet. A nightly run adds a few
    small files to each table; compacting them now and then keeps reads fast."""
    target = _existing_target(spark, output, table)
    if target is None:
        return None
    row = _retry_conflicts(
        lambda: spark.sql(f"OPTIMIZE {target}").select("metrics.*").first(), f"optimize {target}"
    )
    return (int(row.numFilesRemoved), int(row.numFilesAdded)) if row is not None else (0, 0)


def vacuum(spark: SparkSession, output: OutputConfig, table: Table, retain_hours: int) -> bool:
    """Delete the files no version of the last `retain_hours` hours reads (Delta's VACUUM):
    what replaced days and compaction left behind. False when the table does not exist.
    Run it under `small_listings` (`maintain` does)."""
    target = _existing_target(spark, output, table)
    if target is None:
        return False
    spark.sql(f"VACUUM {target} RETAIN {int(retain_hours)} HOURS").collect()
    return True


@contextlib.contextmanager
def small_listings(spark: SparkSession) -> Iterator[None]:
    """VACUUM lists a table's files in `parallelPartitionDiscovery.parallelism` Spark tasks
    (10,000 by default: half a minute of task scheduling for a table of a few hundred files on
    one machine); a handful is enough for these tables. The setting is restored on exit."""
    listing = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    before = spark.conf.get(listing) or "10000"
    spark.conf.set(listing, "8")
    try:
        yield
    finally:
        spark.conf.set(listing, before)


def _existing_target(spark: SparkSession, output: OutputConfig, table: Table) -> str | None:
    """The table's SQL name (catalog name, or delta.`path`), or None before its first write."""
    ref = table_ref(output, table)
    if ref.name is not None:
        return ref.name if spark.catalog.tableExists(ref.name) else None
    if read_delta_path(spark, str(ref.location)) is None:
        return None
    return sql_target(ref)


def read_table(spark: SparkSession, output: OutputConfig, table: Table) -> DataFrame | None:
    """The table as published, or None before its first write."""
    ref = table_ref(output, table)
    if ref.name is not None:
        return spark.read.table(ref.name) if spark.catalog.tableExists(ref.name) else None
    return read_delta_path(spark, str(ref.location))


def no_table_line(output: OutputConfig, table: Table) -> str:
    """What a command that reads `table` says when it is not written yet."""
    return f"no {table.name} table at {table_ref(output, table)}: run `logmetrics backfill` first"


def no_rows_line(table: Table, first: dt.date | None = None, last: dt.date | None = None) -> str:
    """What a command that reads `table` over first..last (None, None: all of it) says when
    the table has no row there."""
    if first is None or last is None:
        return f"{table.name} has no rows"
    them = "that day" if first == last else "those days"
    return f"nothing is published for {span_text(first, last)}: {table.name} has no rows of {them}"


def check_rows_without_spark(
    output: OutputConfig, table: Table, first: dt.date | None = None, last: dt.date | None = None
) -> None:
    """Before Spark starts, from the table's Delta log and files (delta-rs, `tables.delta_rs`):
    an `InputError` when the table at its path does not exist (`no_table_line`) or, over
    first..last (both None: the whole table; one None: not asked), has no row
    (`no_rows_line`). Nothing when it has, or when it cannot be read that way (catalog tables,
    a store or a table delta-rs has no reader for): Spark reads it and says the same."""
    location = table_ref(output, table).location
    if location is None:
        return
    try:
        found = delta_rs.open_table(location)
    except delta_rs.NoReader:
        return
    if found is None:
        raise InputError(no_table_line(output, table))
    if (first is None) != (last is None):
        return
    bounds = [] if first is None else [("metric_date", ">=", first), ("metric_date", "<=", last)]
    try:
        rows = delta_rs.read_rows(found, location, ["metric_date"], bounds).num_rows
    except Exception as exc:  # a feature delta-rs lacks: Spark reads it
        log.info("delta-rs cannot read %s (%s): Spark reads it", location, exc)
        return
    if not rows:
        raise InputError(no_rows_line(table, first, last))


def dates_predicate(dates: Sequence[dt.date]) -> str:
    """A SQL predicate on metric_date for exactly these dates (a range when contiguous)."""
    if not dates:
        raise ValueError("no dates to replace")
    ordered = sorted(set(dates))
    first, last = ordered[0], ordered[-1]
    if (last - first).days + 1 == len(ordered):
        # Not BETWEEN: Spark 4 rewrites it into an expression Delta's replaceWhere cannot take.
        low, high = first.isoformat(), last.isoformat()
        return f"metric_date >= DATE'{low}' AND metric_date <= DATE'{high}'"
    listed = ", ".join(f"DATE'{d.isoformat()}'" for d in ordered)
    return f"metric_date IN ({listed})"


def runs_predicate(runs: Sequence[str]) -> str:
    """A SQL predicate on `run` for exactly these run names."""
    if not runs:
        raise ValueError("no runs to replace")
    listed = ", ".join(sql_string(name) for name in sorted(set(runs)))
    return f"run IN ({listed})"


def quote_identifier(name: str) -> str:
    """`name` as one backquoted Spark SQL identifier (an inner backtick doubled). The config
    admits only plain identifiers as catalog and schema; this holds whatever comes."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """`text` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _save(writer: DataFrameWriter, ref: TableRef) -> None:
    if ref.name is not None:
        writer.saveAsTable(ref.name)
    else:
        writer.save(str(ref.location))


_CONFLICT = re.compile(
    r"Concurrent(Append|DeleteRead|DeleteDelete|Transaction|Write)Exception|ProtocolChanged"
    r"|MetadataChanged|DELTA_CONCURRENT|DELTA_PROTOCOL_CHANGED|DELTA_METADATA_CHANGED"
    r"|TABLE_OR_VIEW_ALREADY_EXISTS|DELTA_TABLE_ALREADY_EXISTS"
    # Another run is creating the same table: its directory exists, its first commit not yet.
    r"|DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION"
)
MAX_ATTEMPTS = 6


def _retry_conflicts(action: Callable[[], T], what: str) -> T:
    """Run `action`, retrying with back-off when a concurrent Delta writer won the race. No
    attempt begins once the run was asked to stop (`interrupt.committing`) or this process
    lost the warehouse's writer lease (`lease.check_held`)."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        check_held()
        try:
            with committing():
                return action()
        except Exception as exc:
            if attempt == MAX_ATTEMPTS or not _CONFLICT.search(f"{type(exc).__name__} {exc}"):
                raise
            pause = min(8.0, 0.25 * 2**attempt) * (0.5 + random.random())
            log.warning("%s: concurrent writer, retrying in %.1fs (%d)", what, pause, attempt)
            time.sleep(pause)
    raise AssertionError("unreachable")


def read_delta_path(spark: SparkSession, path: str) -> DataFrame | None:
    """The Delta table at `path`, or None when there is none (yet). Resolved here, so the
    answer is the same locally and over Spark Connect (where reads are lazy)."""
    try:
        df = spark.read.format("delta").load(path)
        df.schema  # noqa: B018 - resolves the path: no Delta table there is an AnalysisException
    except AnalysisException as exc:
        if _NOT_A_DELTA_TABLE.search(str(exc)):
            return None
        raise
    return df


# DELTA_TABLE_NOT_FOUND: a `_delta_log` without a commit yet, while another run creates the table.
_NOT_A_DELTA_TABLE = re.compile(
    r"DELTA_MISSING_DELTA_TABLE|DELTA_TABLE_NOT_FOUND|PATH_NOT_FOUND|is not a Delta table"
)
