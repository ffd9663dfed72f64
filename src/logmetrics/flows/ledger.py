"""The `job_runs` ledger: which days are done, with which inputs, config and code.

Append-only (appends never conflict between concurrent runs): a `started` row per day when its
chunk begins, and a `published` or `held` row once the day's tables have committed. A day is
done when its latest finished row is `published` with the same config fingerprint and the same
inputs (Delta versions, or file listings), so a killed backfill resumes where it stopped, a day
whose write did not commit (no finished row) is computed again, and changed logs or a new
cluster table are never skipped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from logmetrics import __version__
from logmetrics.config import Config, OutputConfig
from logmetrics.schemas import JOB_RUNS
from logmetrics.tables.catalog import JOB_RUNS_TABLE, RunStamp, append, read_table

STARTED, PUBLISHED, HELD = "started", "published", "held"


def done_dates(
    spark: SparkSession,
    output: OutputConfig,
    dates: Sequence[dt.date],
    fingerprint: str,
    inputs: str,
) -> set[dt.date]:
    """The dates whose latest finished record is `published` with these inputs and config."""
    runs = read_table(spark, output, JOB_RUNS_TABLE)
    if runs is None or not dates:
        return set()
    latest = Window.partitionBy("metric_date").orderBy(F.desc("finished_at"), F.desc("run_id"))
    rows = (
        runs.where(F.col("status") != STARTED)
        .where(F.col("metric_date").between(F.lit(min(dates)), F.lit(max(dates))))
        .withColumn("nth", F.row_number().over(latest))
        .where(
            (F.col("nth") == 1)
            & (F.col("status") == PUBLISHED)
            & (F.col("config_fingerprint") == fingerprint)
            & (F.col("inputs_fingerprint") == inputs)
        )
        .select("metric_date")
        .collect()
    )
    return {row.metric_date for row in rows} & set(dates)


def record(
    spark: SparkSession,
    config: Config,
    stamp: RunStamp,
    inputs: str,
    entries: Iterable[tuple[dt.date, str, dict[str, int] | None]],
    finished_at: dt.datetime | None = None,
) -> None:
    """Append one ledger row per (date, status, counts) of the run `stamp` names (`inputs`: the
    inputs fingerprint; the config's fingerprint is recorded beside it)."""
    rows = [
        (
            stamp.run_id,
            day,
            status,
            stamp.computed_at,
            finished_at,
            (counts or {}).get("rows_read"),
            (counts or {}).get("queries"),
            (counts or {}).get("results"),
            stamp.cluster_table_version,
            inputs,
            config.fingerprint(),
            __version__,
        )
        for day, status, counts in entries
    ]
    append(spark, spark.createDataFrame(rows, JOB_RUNS), config.output, JOB_RUNS_TABLE)
