"""Which files hold each day's rows where the files alone cannot say it (`inputs.days`): one
narrow pass of Spark over the range (`day_file_states`: `served_at` and the files' metadata
only, date partitions pruned) places the files that Parquet footers cannot (Delta, JSON, OTLP,
remote paths, a file whose footer cannot say). A row counts on the day the rules count it on
(`rules.per_request`): the UTC date of its served_at, else its date partition's."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from logmetrics.config import Config
from logmetrics.inputs.damaged import CorruptInput
from logmetrics.inputs.days import DayFiles, DayInputs, day_states
from logmetrics.inputs.footers import footer_days
from logmetrics.inputs.served_logs import read_served_logs
from logmetrics.schemas import PARTITION_DATE


def day_files(
    spark: SparkSession, config: Config, day: dt.date, skip_files: Sequence[str] = ()
) -> DayFiles:
    """`day`'s files, but `skip_files`, by the narrow pass over its logs
    (`day_file_states`)."""
    logs_df = read_served_logs(
        spark, config.inputs.logs(), day, day, skip_files=skip_files, copies=False
    )
    rows = logs_df.transform(day_file_states).where(F.col("metric_date") == F.lit(day)).collect()
    return DayFiles(len(rows[0].files) if rows else 0, None)


def day_inputs(
    spark: SparkSession,
    config: Config,
    clusters: str,
    dates: Sequence[dt.date],
    corrupt: Sequence[CorruptInput],
) -> dict[dt.date, DayInputs]:
    """Every day of `dates` (consecutive or not) and its inputs' state, over the logs of
    dates[0]..dates[-1]: local Parquet files placed on their days by their footers
    (`inputs.footers`), the others by one narrow pass; a day without rows has the state of an
    empty file set."""
    if not dates:
        return {}
    source = config.inputs.logs()
    start, end = min(dates), max(dates)
    unreadable_files = [c.file for c in corrupt if c.line is None]
    footers = footer_days(source, start, end, skip_files=unreadable_files)
    files: dict[dt.date, list[str]] = {}
    if footers is None or footers.unplaced:
        skipped = [*unreadable_files, *(footers.placed if footers else [])]
        logs_df = read_served_logs(spark, source, start, end, skip_files=skipped, copies=False)
        files = {
            row.metric_date: list(row.files) for row in logs_df.transform(day_file_states).collect()
        }
    for day, placed in (footers.states if footers else {}).items():
        files.setdefault(day, []).extend(placed)
    return day_states(dates, files, corrupt, clusters)


def day_file_states(logs_df: DataFrame) -> DataFrame:
    """(metric_date, files): per day, the files that hold its rows (the day placed as
    `with_row_status` places it), each as `path|size|modification time`. A narrow pass: it reads
    `served_at` (and the date partition) only, and Spark's `_metadata` of each file; for a Delta
    table, its data files, whose names are unique to the commit that wrote them. The rows are
    made distinct on the raw columns first, so the file's text is built once per (day, file),
    not once per row."""
    files = logs_df.select(
        _metric_date(logs_df).alias("metric_date"),
        F.col("_metadata.file_path").alias("path"),
        F.col("_metadata.file_size").alias("size"),
        F.col("_metadata.file_modification_time").alias("mtime"),
    ).distinct()
    file_state = F.concat_ws(
        "|", "path", F.col("size").cast("string"), F.col("mtime").cast("string")
    )
    return files.groupBy("metric_date").agg(F.collect_list(file_state).alias("files"))


def _metric_date(logs_df: DataFrame) -> Column:
    """The day a row counts on, as `rules.per_request.with_row_status` places it."""
    metric_date = F.to_date("served_at")
    if PARTITION_DATE in logs_df.columns:
        metric_date = F.coalesce(metric_date, F.col(PARTITION_DATE))
    return metric_date
