"""The state of the inputs each day is computed from where the files alone cannot say it
(`inputs.days`): one narrow pass over the range (`rules.per_request.day_file_states`:
`served_at` and the files' metadata only, date partitions pruned) places the files that local
Parquet footers cannot (Delta, JSON, remote paths, a file whose footer cannot say)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from logmetrics.config import Config
from logmetrics.inputs.damaged import CorruptInput
from logmetrics.inputs.days import DayFiles, DayInputs, day_states
from logmetrics.inputs.footers import footer_days
from logmetrics.inputs.served_logs import read_served_logs
from logmetrics.rules.per_request import day_file_states


def day_files(
    spark: SparkSession, config: Config, day: dt.date, skip_files: Sequence[str] = ()
) -> DayFiles:
    """`day`'s files, but `skip_files`, by the narrow pass over its logs
    (`rules.per_request.day_file_states`)."""
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
