"""Wires one date range through the flow, a chunk of days at a time:

    read -> one pass to per-request rows (persisted) -> facts -> quality gates
         -> quarantine, data_quality, missing_cluster_chunks -> publish the days that may be:
            by query, daily distributions, k-sweep and redundancy cost (all traffic, segments)

No Spark logic of its own: it reads, calls the transforms in `metrics`, `distributions` and
`slots` and `quality.facts`, asks `quality` for a verdict, and hands the results to `sinks`.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DateType,
    IntegerType,
    LongType,
    StructField,
    StructType,
)

from logmetrics import ledger
from logmetrics.alerting import announce, publish_alerts
from logmetrics.config import Config
from logmetrics.distributions import daily_distributions, with_segments
from logmetrics.errors import InputError, LogmetricsError
from logmetrics.file_scan import CorruptInput, scan_served_logs, undated_rows
from logmetrics.metrics import (
    cluster_keys,
    explode_windows,
    filter_served_requests,
    key_hash_collisions,
    requests_by_key,
)
from logmetrics.quality.facts import (
    cluster_facts,
    day_facts,
    quarantined_rows,
    top_missing_chunks,
)
from logmetrics.quality.gx_suite import CheckResult, evaluate
from logmetrics.quality.policy import DayVerdict, describe, verdicts
from logmetrics.sinks import (
    BY_QUERY_TABLE,
    DAILY_TABLE,
    DATA_QUALITY_TABLE,
    K_SWEEP_TABLE,
    MISSING_CLUSTER_CHUNKS_TABLE,
    QUARANTINE_TABLE,
    REDUNDANCY_COST_TABLE,
    RunStamp,
    Table,
    read_table,
    replace_dates,
    with_run_stamp,
)
from logmetrics.slots import k_sweep, redundancy_cost, slot_sums
from logmetrics.sources import inputs_fingerprint, read_clusters, read_served_logs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DayResult:
    metric_date: dt.date
    queries: int
    published: bool
    verdict: DayVerdict


@dataclass
class RunSummary:
    run_id: str
    cluster_table_version: int | None
    days: list[DayResult] = field(default_factory=list)

    @property
    def queries(self) -> int:
        return sum(day.queries for day in self.days)

    def failures(self) -> list[str]:
        """One line per day that failed a blocking check: the check and the observed value."""
        return [
            "; ".join(describe(check) for check in day.verdict.blocking_failures)
            for day in self.days
            if not day.verdict.passed
        ]


def date_chunks(dates: Sequence[dt.date], days_per_chunk: int) -> Iterator[list[dt.date]]:
    """Sorted dates in chunks of at most `days_per_chunk` consecutive days (a gap, such as a
    skipped day, starts a new chunk, so no chunk reads logs it does not need)."""
    chunk: list[dt.date] = []
    for day in sorted(dates):
        if chunk and (len(chunk) == days_per_chunk or (day - chunk[-1]).days != 1):
            yield chunk
            chunk = []
        chunk.append(day)
    if chunk:
        yield chunk


def run_range(
    spark: SparkSession,
    config: Config,
    start: dt.date,
    end: dt.date,
    run_id: str,
    computed_at: dt.datetime,
    skip_done: bool = False,
) -> RunSummary:
    """Compute every date in start..end and publish the ones the failure policy allows; other
    dates are never touched. With `skip_done`, days the ledger has as published with the same
    inputs and config are skipped (a resumed backfill)."""
    clusters = read_clusters(spark, config.inputs.clusters)
    stamp = RunStamp(run_id, computed_at, clusters.version)
    summary = RunSummary(run_id=run_id, cluster_table_version=clusters.version)
    inputs = inputs_fingerprint(spark, config.inputs, clusters)
    dates = [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]
    if skip_done:
        done = ledger.done_dates(spark, config.output, dates, config.fingerprint(), inputs)
        if done:
            log.info("skipping %d day(s) already done with the same inputs and config", len(done))
        dates = [d for d in dates if d not in done]
    log.info(
        "computing %d day(s) of %s..%s, k in %s, cluster table version %s",
        len(dates),
        start,
        end,
        list(config.metrics.ks),
        clusters.version,
    )
    if not dates:
        return summary
    corrupt = _corrupt_inputs(spark, config, dates[0], dates[-1])
    keys_df, salt = keyed_clusters(clusters.df)
    cluster_counts = cluster_facts(keys_df).first()
    assert cluster_counts is not None  # a global aggregate always has one row
    counts = cluster_counts.asDict()
    broadcast = counts.pop("cluster_chunks") <= BROADCAST_MAX_CHUNKS
    began = time.monotonic()
    try:
        for chunk_dates in date_chunks(dates, config.backfill.days_per_chunk):
            chunk_began = time.monotonic()
            chunk_corrupt = [c for c in corrupt if c.days(chunk_dates)]
            chunk = _Chunk(spark, config, chunk_dates, stamp, counts, inputs, chunk_corrupt)
            days = chunk.compute_and_publish(keys_df, salt, broadcast)
            summary.days.extend(days)
            _log_progress(summary, days, len(dates), chunk_began, began)
    finally:
        keys_df.unpersist()
    return summary


def _corrupt_inputs(
    spark: SparkSession, config: Config, start: dt.date, end: dt.date
) -> list[CorruptInput]:
    """The unreadable log files (or JSON lines) of start..end. With `on_corrupt: fail` the first
    one stops the run here, before anything is computed or published."""
    source = config.inputs.logs()
    corrupt = scan_served_logs(spark, source, start, end)
    if corrupt and source.on_corrupt == "fail":
        more = f" (and {len(corrupt) - 1} more)" if len(corrupt) > 1 else ""
        raise InputError(
            f"served logs at {source.path}: {corrupt[0].describe()}{more}; nothing was "
            "published (inputs.served_logs.on_corrupt: quarantine computes the rest)"
        )
    for item in corrupt:
        log.warning("quarantined, its days fail readable_inputs: %s", item.describe())
    undated = undated_rows(spark, source)
    if undated:
        log.warning(
            "%d row(s) of the served logs have no usable served_at and no date partition to "
            "place them by: no day can count them (they are in no table)",
            undated,
        )
    return corrupt


BROADCAST_MAX_CHUNKS = 20_000_000
"""Up to this many chunk ids (about 1 GB hashed), the cluster keys are broadcast to every task
and the logs are never shuffled after the explode; above it, Spark plans a shuffle join."""
HASH_SALTS = 4


def keyed_clusters(clusters_df: DataFrame) -> tuple[DataFrame, int]:
    """`cluster_keys`, persisted, and its salt: hashes that no two chunk ids and no two cluster
    keys share (checked: another salt is tried on a collision, so unique_clusters stays exact)."""
    for salt in range(HASH_SALTS):
        keys_df = cluster_keys(clusters_df, salt).persist(StorageLevel.MEMORY_AND_DISK)
        if key_hash_collisions(keys_df).isEmpty():
            return keys_df, salt
        log.warning("hash collision in the cluster table with salt %d: trying another", salt)
        keys_df.unpersist()
    raise LogmetricsError(f"cluster keys collide under {HASH_SALTS} different hashes")


@dataclass(frozen=True)
class _Chunk:
    """One chunk of days: computed from one read of the logs, then checked and published."""

    spark: SparkSession
    config: Config
    dates: list[dt.date]
    stamp: RunStamp
    cluster_counts: dict[str, Any]
    inputs: str  # the inputs fingerprint, for the ledger
    corrupt: list[CorruptInput]  # unreadable files and lines that may hold these days' rows

    def compute_and_publish(
        self, keys_df: DataFrame, salt: int, broadcast: bool
    ) -> list[DayResult]:
        config = self.config
        self._record([(d, ledger.STARTED, None) for d in self.dates])
        metrics = config.metrics
        logs_df = read_served_logs(
            self.spark,
            config.inputs.logs(),
            self.dates[0],
            self.dates[-1],
            metrics.segment_by,
            skip_files=[c.file for c in self.corrupt if c.line is None],
        )
        requests_df = requests_by_key(
            logs_df, keys_df, metrics.ks, salt, broadcast, metrics.segment_by
        ).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            facts = pd.DataFrame(day_facts(requests_df, self._days_df()).toPandas())
            facts["corrupt_inputs"] = [
                sum(day in c.days(self.dates) for c in self.corrupt) for day in facts["metric_date"]
            ]
            checks = self._checks(facts)
            day_verdicts = verdicts(self.dates, checks)
            self._write_diagnostics(requests_df, checks)
            publish = [
                v.metric_date
                for v in day_verdicts
                if v.passed or config.quality.on_failure == "warn"
            ]
            if publish:
                self._publish(requests_df, facts, day_verdicts, publish)
        finally:
            requests_df.unpersist()
        if publish:  # issue 18: judge the days just published, from the daily table alone
            stamp = self.stamp
            announce(publish_alerts(self.spark, config, publish, stamp.run_id, stamp.computed_at))
        counts = {
            r.metric_date: {
                "rows_read": int(r.rows_read),
                "queries": int(r.queries),
                "results": int(r.valid_entries),
            }
            for r in facts.itertuples()
        }
        self._record(
            [(d, ledger.PUBLISHED if d in publish else ledger.HELD, counts[d]) for d in self.dates],
            finished_at=dt.datetime.now(dt.UTC),
        )
        return [
            DayResult(v.metric_date, counts[v.metric_date]["queries"], v.metric_date in publish, v)
            for v in day_verdicts
        ]

    def _record(
        self,
        entries: list[tuple[dt.date, str, dict[str, int] | None]],
        finished_at: dt.datetime | None = None,
    ) -> None:
        ledger.record(
            self.spark,
            self.config.output,
            entries,
            self.stamp.run_id,
            self.stamp.computed_at,
            self.config.fingerprint(),
            self.stamp.cluster_table_version,
            self.inputs,
            finished_at,
        )

    def _checks(self, facts: pd.DataFrame) -> list[CheckResult]:
        if not self.config.quality.enabled:
            return []
        judged = facts.assign(**self.cluster_counts)
        judged["trailing_queries_mean"] = self._trailing_queries_mean(facts)
        return evaluate(judged, self.config.quality)

    def _trailing_queries_mean(self, facts: pd.DataFrame) -> list[float | None]:
        """Mean queries of the `volume_window_days` days before each day: published days from
        earlier runs, and this chunk's own days."""
        window = self.config.quality.volume_window_days
        first = self.dates[0] - dt.timedelta(days=window)
        known = self._published_queries(first, self.dates[0] - dt.timedelta(days=1))
        known.update(zip(facts["metric_date"], (int(q) for q in facts["queries"]), strict=True))
        means: list[float | None] = []
        for day in facts["metric_date"]:
            before = [
                known[d]
                for d in (day - dt.timedelta(days=i) for i in range(1, window + 1))
                if d in known
            ]
            means.append(sum(before) / len(before) if before else None)
        return means

    def _published_queries(self, first: dt.date, last: dt.date) -> dict[dt.date, int]:
        daily = read_table(self.spark, self.config.output, DAILY_TABLE)
        if daily is None:
            return {}
        rows = (
            daily.where(
                F.col("metric_date").between(F.lit(first), F.lit(last))
                & (F.col("k") == min(self.config.metrics.ks))
            )
            .select("metric_date", "queries")
            .collect()
        )
        return {row.metric_date: int(row.queries) for row in rows}

    def _write_diagnostics(self, requests_df: DataFrame, checks: list[CheckResult]) -> None:
        """quarantine, missing_cluster_chunks and data_quality: written for every day, pass or
        fail, so that no row vanishes without a trace and every verdict is on record."""
        output, stamp = self.config.output, self.stamp
        quarantine_df = with_run_stamp(
            quarantined_rows(requests_df).unionByName(self._corrupt_rows()), stamp
        )
        replace_dates(self.spark, quarantine_df, output, QUARANTINE_TABLE, self.dates)
        missing_df = top_missing_chunks(requests_df, self.config.quality.missing_chunks_top_n)
        replace_dates(
            self.spark,
            with_run_stamp(missing_df, stamp),
            output,
            MISSING_CLUSTER_CHUNKS_TABLE,
            self.dates,
        )
        if self.config.quality.enabled:
            checks_df = self.spark.createDataFrame(
                [
                    (c.metric_date, c.check, c.success, c.observed_value, c.threshold)
                    + (c.severity, c.details)
                    for c in checks
                ],
                "metric_date date, check string, success boolean, observed_value double, "
                "threshold double, severity string, details string",
            )
            replace_dates(
                self.spark,
                with_run_stamp(checks_df, stamp),
                output,
                DATA_QUALITY_TABLE,
                self.dates,
            )

    def _publish(
        self,
        requests_df: DataFrame,
        facts: pd.DataFrame,
        day_verdicts: Sequence[DayVerdict],
        publish: list[dt.date],
    ) -> None:
        """Exactly the `publish` days of unique_clusters_by_query, unique_clusters_daily,
        unique_clusters_k_sweep and redundancy_cost_daily, in that order."""
        metrics, cost = self.config.metrics, self.config.cost
        max_k = max(metrics.ks)
        served_df = requests_df.transform(filter_served_requests).where(
            F.col("metric_date").isin(publish)
        )
        by_query_df = served_df.transform(explode_windows)
        segmented_df = served_df.transform(with_segments, metrics.segment_by)
        daily_df = daily_distributions(
            segmented_df.transform(explode_windows),
            self._calendar(publish, metrics.ks),
            max_k=max_k,
            threshold=metrics.threshold,
        ).join(self._day_status(facts, day_verdicts), on="metric_date", how="inner")
        self._write(by_query_df, BY_QUERY_TABLE, publish)
        self._write(daily_df, DAILY_TABLE, publish)
        sums_df = slot_sums(segmented_df, max_k, cost.tokens_per_slot).persist()
        try:
            every_k = self._calendar(publish, range(1, max_k + 1))
            sweep_df = k_sweep(sums_df, every_k)
            cost_df = redundancy_cost(
                sums_df,
                every_k,
                cost.tokens_per_slot,
                cost.usd_per_million_input_tokens,
            )
            self._write(sweep_df, K_SWEEP_TABLE, publish)
            self._write(cost_df, REDUNDANCY_COST_TABLE, publish)
        finally:
            sums_df.unpersist()

    def _write(self, df: DataFrame, table: Table, dates: list[dt.date]) -> None:
        replace_dates(self.spark, with_run_stamp(df, self.stamp), self.config.output, table, dates)

    def _corrupt_rows(self) -> DataFrame:
        """The quarantine's rows for the unreadable inputs: one per input and day it may hold."""
        rows = [(d, c.reason, None, c.raw()) for c in self.corrupt for d in c.days(self.dates)]
        return self.spark.createDataFrame(
            rows, "metric_date date, reason string, request_id string, raw string"
        )

    def _days_df(self) -> DataFrame:
        schema = StructType([StructField("metric_date", DateType(), False)])
        return self.spark.createDataFrame([(d,) for d in self.dates], schema)

    def _calendar(self, dates: list[dt.date], ks: Iterable[int]) -> DataFrame:
        """Every (metric_date, k): the all-traffic rows a table must have."""
        schema = StructType(
            [StructField("metric_date", DateType(), False), StructField("k", IntegerType(), False)]
        )
        return self.spark.createDataFrame([(d, k) for d in dates for k in ks], schema)

    def _day_status(self, facts: pd.DataFrame, day_verdicts: Sequence[DayVerdict]) -> DataFrame:
        passed = {v.metric_date: v.passed for v in day_verdicts}
        rows = [
            (
                r.metric_date,
                passed[r.metric_date],
                int(r.rows_read),
                int(r.duplicate_rows),
                int(r.malformed_rows),
                int(r.quarantined_entries),
            )
            for r in facts.itertuples()
        ]
        schema = StructType(
            [
                StructField("metric_date", DateType(), False),
                StructField("dq_passed", BooleanType(), False),
                StructField("rows_read", LongType(), False),
                StructField("duplicate_rows", LongType(), False),
                StructField("quarantined_rows", LongType(), False),
                StructField("quarantined_entries", LongType(), False),
            ]
        )
        return self.spark.createDataFrame(rows, schema)


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
    seconds = time.monotonic() - chunk_began
    for day in days:
        log.info(
            "%s: %s, %d queries (%.1fs for its chunk of %d day(s))",
            day.metric_date,
            "published" if day.published else "HELD BACK by a blocking quality check",
            day.queries,
            seconds,
            len(days),
            extra={
                "fields": {
                    "metric_date": str(day.metric_date),
                    "published": day.published,
                    "queries": day.queries,
                    "chunk_seconds": round(seconds, 3),
                    "dq_passed": day.verdict.passed,
                }
            },
        )
    held = [str(d.metric_date) for d in days if not d.published]
    log.info(
        "%s..%s: %d queries in %.1fs%s | %d/%d days done, %.2f days/s, ETA %s",
        days[0].metric_date,
        days[-1].metric_date,
        sum(d.queries for d in days),
        time.monotonic() - chunk_began,
        f", NOT published (quality): {', '.join(held)}" if held else "",
        done,
        total_days,
        rate,
        _duration(eta),
    )


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
