"""The run/backfill loop: one date range, a chunk of days at a time.

Reads the cluster table and fingerprints the inputs once, skips the days the ledger has as
done (a resumed backfill), scans the logs for corrupt files, writes the run's `started` rows,
then computes each chunk (`chunk.Chunk`) while the chunk before it is written, so the writes
of one overlap the main pass of the next. A hash collision in the cluster keys (`keys`)
computes the chunk again under the next salt. Progress is logged per day and per chunk.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from logmetrics.config import Config
from logmetrics.errors import InputError
from logmetrics.flows import ledger
from logmetrics.flows.chunk import Chunk, Computed, DayResult
from logmetrics.flows.history import PublishedDaily, published_before
from logmetrics.flows.keys import HashCollision, start_cluster_keys
from logmetrics.flows.side_steps import SideSteps
from logmetrics.phases import Phases
from logmetrics.quality.policy import describe
from logmetrics.tables.catalog import RunStamp
from logmetrics.tables.file_scan import CorruptInput, scan_served_logs, undated_rows
from logmetrics.tables.sources import inputs_fingerprint, read_clusters

log = logging.getLogger(__name__)


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
    phases: Phases | None = None,
) -> RunSummary:
    """Compute every date in start..end and publish the ones the failure policy allows; other
    dates are never touched. With `skip_done`, days the ledger has as published with the same
    inputs and config are skipped (a resumed backfill). `phases` records where the time goes."""
    phases = phases or Phases()
    with phases.timed("inputs"):
        clusters = read_clusters(spark, config.inputs.clusters)
        inputs = inputs_fingerprint(spark, config.inputs, clusters)
    stamp = RunStamp(run_id, computed_at, clusters.version)
    summary = RunSummary(run_id=run_id, cluster_table_version=clusters.version)
    dates = [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]
    if skip_done:
        with phases.timed("ledger read"):
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
    with phases.timed("input scan"):
        corrupt = _corrupt_inputs(spark, config, dates[0], dates[-1])
    with phases.timed("cluster table rows"):
        # Rows bound the distinct chunk ids from above, and Spark counts them from metadata.
        table_rows = clusters.df.count()
    max_chunks = config.backfill.broadcast_max_chunks
    table_fits = table_rows <= max_chunks
    if not table_fits:
        log.info(
            "the cluster table has %d rows, above backfill.broadcast_max_chunks (%d): each "
            "chunk of days broadcasts only the keys of the chunks it serves",
            table_rows,
            max_chunks,
        )
    began = time.monotonic()
    with SideSteps(phases) as side:
        keys = start_cluster_keys(clusters.df, 0, side)
        # One `started` row per day of the run, in one commit beside the first chunk's work.
        started = side.submit(
            "ledger started",
            ledger.record,
            spark,
            config,
            stamp,
            inputs,
            [(d, ledger.STARTED, None) for d in dates],
        )
        daily = PublishedDaily(
            side.submit("published history", published_before, spark, config, dates)
        )
        # A chunk's tables are written while the next chunk is computed (its main pass keeps
        # both cores busy while the commits wait on the driver); the writes of two chunks never
        # overlap, and each chunk's `published` ledger rows follow its own commits.
        pending: tuple[Computed, float] | None = None

        def write_pending() -> None:
            nonlocal pending
            if pending is not None:
                computed, chunk_began = pending
                pending = None
                days = computed.write()
                summary.days.extend(days)
                _log_progress(summary, days, len(dates), chunk_began, began)

        try:
            for chunk_dates in date_chunks(dates, config.backfill.days_per_chunk):
                chunk_began = time.monotonic()
                chunk_corrupt = [c for c in corrupt if c.days(chunk_dates)]
                chunk = Chunk(
                    spark,
                    config,
                    chunk_dates,
                    stamp,
                    inputs,
                    chunk_corrupt,
                    phases,
                    side,
                    started,
                    daily,
                )
                while True:
                    try:
                        computed = chunk.compute(keys, table_fits)
                        break
                    except HashCollision:  # nothing was written: the chunk is done again
                        log.warning("hash collision in the cluster table with salt %d", keys.salt)
                        keys.df.unpersist()
                        keys = start_cluster_keys(clusters.df, keys.salt + 1, side)
                write_pending()
                pending = (computed, chunk_began)
        finally:
            try:
                write_pending()  # the last chunk, or the one computed before a chunk that failed
            finally:
                keys.df.unpersist()
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
