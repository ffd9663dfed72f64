"""Wires one date range through the flow: read -> metrics -> distributions -> publish.

No Spark logic of its own: it reads, calls the transforms in `metrics` and `distributions`,
and hands the results to `sinks`, one chunk of days at a time so months fit on one machine.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DateType, IntegerType, StructField, StructType

from logmetrics.config import Config
from logmetrics.distributions import daily_distributions
from logmetrics.metrics import cluster_keys, explode_windows, unique_clusters_by_request
from logmetrics.sinks import BY_QUERY_TABLE, DAILY_TABLE, RunStamp, replace_dates, with_run_stamp
from logmetrics.sources import read_clusters, read_served_logs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DayResult:
    metric_date: dt.date
    queries: int


@dataclass
class RunSummary:
    run_id: str
    cluster_table_version: int | None
    days: list[DayResult] = field(default_factory=list)

    @property
    def queries(self) -> int:
        return sum(day.queries for day in self.days)


def date_chunks(start: dt.date, end: dt.date, days_per_chunk: int) -> Iterator[list[dt.date]]:
    """start..end (inclusive) in consecutive chunks of at most `days_per_chunk` days."""
    day = start
    while day <= end:
        chunk_end = min(end, day + dt.timedelta(days=days_per_chunk - 1))
        yield [day + dt.timedelta(days=i) for i in range((chunk_end - day).days + 1)]
        day = chunk_end + dt.timedelta(days=1)


def run_range(
    spark: SparkSession,
    config: Config,
    start: dt.date,
    end: dt.date,
    run_id: str,
    computed_at: dt.datetime,
) -> RunSummary:
    """Compute and publish every date in start..end; other dates are never touched."""
    clusters = read_clusters(spark, config.inputs.clusters)
    stamp = RunStamp(run_id, computed_at, clusters.version)
    keys_df = cluster_keys(clusters.df).persist(StorageLevel.MEMORY_AND_DISK)
    summary = RunSummary(run_id=run_id, cluster_table_version=clusters.version)
    total_days = (end - start).days + 1
    log.info(
        "computing %d day(s) %s..%s, k in %s, cluster table version %s",
        total_days,
        start,
        end,
        list(config.metrics.ks),
        clusters.version,
    )
    began = time.monotonic()
    try:
        for dates in date_chunks(start, end, config.backfill.days_per_chunk):
            chunk_began = time.monotonic()
            days = _compute_and_publish(spark, config, dates, keys_df, stamp)
            summary.days.extend(days)
            _log_progress(summary, days, total_days, chunk_began, began)
    finally:
        keys_df.unpersist()
    return summary


def _compute_and_publish(
    spark: SparkSession,
    config: Config,
    dates: list[dt.date],
    keys_df: DataFrame,
    stamp: RunStamp,
) -> list[DayResult]:
    logs_df = read_served_logs(spark, config.inputs.served_logs, dates[0], dates[-1])
    requests_df = unique_clusters_by_request(logs_df, keys_df, config.metrics.ks).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    try:
        by_query_df = requests_df.transform(explode_windows)
        daily_df = daily_distributions(
            by_query_df,
            _calendar(spark, dates, config.metrics.ks),
            max_k=max(config.metrics.ks),
            threshold=config.metrics.threshold,
        )
        warehouse = config.output.warehouse
        replace_dates(spark, with_run_stamp(by_query_df, stamp), warehouse, BY_QUERY_TABLE, dates)
        daily_df = with_run_stamp(daily_df, stamp).persist(StorageLevel.MEMORY_AND_DISK)
        replace_dates(spark, daily_df, warehouse, DAILY_TABLE, dates)
        k0 = min(config.metrics.ks)
        queries = {
            row["metric_date"]: row["queries"]
            for row in daily_df.where(daily_df.k == k0).select("metric_date", "queries").collect()
        }
        daily_df.unpersist()
    finally:
        requests_df.unpersist()
    return [DayResult(d, queries.get(d, 0)) for d in dates]


def _calendar(spark: SparkSession, dates: list[dt.date], ks: tuple[int, ...]) -> DataFrame:
    schema = StructType(
        [StructField("metric_date", DateType(), False), StructField("k", IntegerType(), False)]
    )
    return spark.createDataFrame([(d, k) for d in dates for k in ks], schema)


def _log_progress(
    summary: RunSummary,
    days: list[DayResult],
    total_days: int,
    chunk_began: float,
    began: float,
) -> None:
    done = len(summary.days)
    elapsed = time.monotonic() - began
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total_days - done) / rate if rate > 0 else 0.0
    log.info(
        "%s..%s: %d queries in %.1fs | %d/%d days done, %.2f days/s, ETA %s",
        days[0].metric_date,
        days[-1].metric_date,
        sum(d.queries for d in days),
        time.monotonic() - chunk_began,
        done,
        total_days,
        rate,
        _duration(eta),
    )


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
