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
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
from logmetrics.alerting import alerts_frame, announce, published_daily
from logmetrics.alerts import DAILY_COLUMNS, alert_rows, as_date
from logmetrics.config import Config
from logmetrics.distributions import daily_from_sums, with_segments
from logmetrics.errors import InputError, LogmetricsError
from logmetrics.file_scan import CorruptInput, scan_served_logs, undated_rows
from logmetrics.metrics import (
    cluster_keys,
    explode_windows,
    filter_served_keys,
    filter_served_requests,
    key_hash_checks,
    requests_by_key,
    served_chunk_hashes,
)
from logmetrics.phases import Phases
from logmetrics.quality.facts import (
    CLUSTER_FACT_COLUMNS,
    cluster_fact_aggregates,
    day_facts,
    quarantined_rows,
    top_missing_chunks,
)
from logmetrics.quality.gx_suite import CheckResult, evaluate
from logmetrics.quality.policy import DayVerdict, describe, verdicts
from logmetrics.schemas import ALL_TRAFFIC
from logmetrics.sinks import (
    ALERTS_TABLE,
    BY_QUERY_TABLE,
    DAILY_TABLE,
    DATA_QUALITY_TABLE,
    K_SWEEP_TABLE,
    MISSING_CLUSTER_CHUNKS_TABLE,
    QUARANTINE_TABLE,
    REDUNDANCY_COST_TABLE,
    RunStamp,
    Table,
    replace_dates,
    with_run_stamp,
)
from logmetrics.slots import day_sums, k_sweep, redundancy_cost
from logmetrics.sources import inputs_fingerprint, read_clusters, read_served_logs

log = logging.getLogger(__name__)
T = TypeVar("T")


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
    with _SideBySide(phases) as side:
        keys = start_cluster_keys(clusters.df, 0, side)
        # One `started` row per day of the run, in one commit beside the first chunk's work.
        started = side.submit(
            "ledger started",
            _record,
            spark,
            config,
            stamp,
            inputs,
            [(d, ledger.STARTED, None) for d in dates],
        )
        daily = _PublishedDaily(
            side.submit("published history", _published_before, spark, config, dates)
        )
        # A chunk's tables are written while the next chunk is computed (its main pass keeps
        # both cores busy while the commits wait on the driver); the writes of two chunks never
        # overlap, and each chunk's `published` ledger rows follow its own commits.
        pending: tuple[_Computed, float] | None = None

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
                chunk = _Chunk(
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
                    except _HashCollision:  # nothing was written: the chunk is done again
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


HASH_SALTS = 4


def _record(
    spark: SparkSession,
    config: Config,
    stamp: RunStamp,
    inputs: str,
    entries: list[tuple[dt.date, str, dict[str, int] | None]],
    finished_at: dt.datetime | None = None,
) -> None:
    """Append ledger rows for the run (`inputs`: the inputs fingerprint)."""
    ledger.record(
        spark,
        config.output,
        entries,
        stamp.run_id,
        stamp.computed_at,
        config.fingerprint(),
        stamp.cluster_table_version,
        inputs,
        finished_at,
    )


def _published_before(
    spark: SparkSession, config: Config, dates: Sequence[dt.date]
) -> pd.DataFrame:
    """The published `unique_clusters_daily` rows (`alerts.DAILY_COLUMNS`, the config's ks)
    from the longest look-back (the volume gate's window, the alerts' baseline) before the run's
    first date to its last: read once per run."""
    look_back = max(config.quality.volume_window_days, config.alerts.lookback_days())
    return published_daily(
        spark, config, dates[0] - dt.timedelta(days=look_back), dates[-1], missing_ok=True
    )


class _PublishedDaily:
    """What the volume gate and the alerts look back on: the published daily rows read at the
    start of the run, with the days the run has published since in place of theirs, so that a
    chunk sees its earlier chunks' days as the table now has them."""

    def __init__(self, before: Future[pd.DataFrame]) -> None:
        self._before = before
        self._ours: list[pd.DataFrame] = []

    def add(self, rows: pd.DataFrame) -> None:
        """Rows of days the run just published."""
        self._ours.append(rows)

    def rows(self) -> pd.DataFrame:
        before = self._before.result()
        if not self._ours:
            return before
        ours = pd.concat(self._ours, ignore_index=True)
        kept = before[~before["metric_date"].isin(set(ours["metric_date"]))]
        return pd.concat([kept, ours], ignore_index=True) if len(kept) else ours

    def queries(self, k: int) -> dict[dt.date, int]:
        """All-traffic queries per published day (at one k: every k counts the same queries)."""
        rows = self.rows()
        everyone = rows[
            (rows["k"] == k)
            & (rows["segment"] == ALL_TRAFFIC)
            & (rows["segment_value"] == ALL_TRAFFIC)
        ]
        return {
            as_date(d): int(q)
            for d, q in zip(everyone["metric_date"], everyone["queries"], strict=True)
        }


class _HashCollision(Exception):
    """Two chunk ids or two cluster keys share a hash under the keys' salt."""


@dataclass(frozen=True)
class ClusterKeys:
    """`cluster_keys` of the cluster table under one salt, persisted, and the check, running
    beside the work that uses them, that its hashes are exact (no two chunk ids share a
    `chunk_hash`, no two cluster keys a `cluster_hash`) with the table's facts for the quality
    gates (`quality.facts.CLUSTER_FACT_COLUMNS`)."""

    df: DataFrame
    salt: int
    check: Future[dict[str, int] | None]

    def facts(self) -> dict[str, int]:
        """The cluster table's facts; `_HashCollision` if the hashes are not exact."""
        facts = self.check.result()
        if facts is None:
            raise _HashCollision(self.salt)
        return facts


def start_cluster_keys(clusters_df: DataFrame, salt: int, side: _SideBySide) -> ClusterKeys:
    """The keys under `salt`, usable at once; their check runs as a side step. A collision
    (never seen in practice) is found before anything is written, and the caller computes the
    chunk again under the next salt, so unique_clusters stays exact."""
    if salt >= HASH_SALTS:
        raise LogmetricsError(f"cluster keys collide under {HASH_SALTS} different hashes")
    keys_df = cluster_keys(clusters_df, salt).persist(StorageLevel.MEMORY_AND_DISK)
    return ClusterKeys(keys_df, salt, side.submit("cluster keys", _exact_key_facts, keys_df))


def _exact_key_facts(keys_df: DataFrame) -> dict[str, int] | None:
    """The cluster table's facts if both hashes are exact over it, else None: one aggregation."""
    row = keys_df.agg(*cluster_fact_aggregates(), *key_hash_checks()).first()
    assert row is not None  # a global aggregate always has one row
    if not (row.chunk_hashes_exact and row.cluster_hashes_exact):
        return None
    return {c: int(row[c]) for c in CLUSTER_FACT_COLUMNS}


@dataclass(frozen=True)
class ChunkKeys:
    """The cluster keys a chunk of days joins its entries to, and whether they are broadcast;
    `served_df` is the chunk's served chunk hashes, persisted while the chunk uses them."""

    df: DataFrame
    broadcast: bool
    served_df: DataFrame | None = None

    def unpersist(self) -> None:
        if self.served_df is not None:
            self.served_df.unpersist()


def keys_for_chunk(
    keys_df: DataFrame, salt: int, logs_df: DataFrame, table_fits: bool, max_chunks: int
) -> ChunkKeys:
    """The keys the chunk's logs are joined to (docs/cluster-scale.md):

    - the whole table (`keys_df`, under `salt`), broadcast, when it `table_fits`;
    - else the keys of the chunk ids the logs serve (`filter_served_keys`), broadcast, when
      those are at most `max_chunks`: the served hashes are counted first (one read of the
      `results` column), and they bound the cut-down keys from above;
    - else the whole table, joined by a shuffle of the entries.
    """
    if table_fits:
        return ChunkKeys(keys_df, broadcast=True)
    served_df = served_chunk_hashes(logs_df, salt).persist(StorageLevel.MEMORY_AND_DISK)
    served = served_df.count()
    if served > max_chunks:
        served_df.unpersist()
        log.warning(
            "the chunk serves %d distinct chunk ids, above backfill.broadcast_max_chunks (%d): "
            "its entries are shuffled to the cluster keys (fewer days_per_chunk avoid it)",
            served,
            max_chunks,
        )
        return ChunkKeys(keys_df, broadcast=False)
    log.info("cluster keys cut down to the %d chunk id(s) the chunk serves", served)
    return ChunkKeys(keys_df.transform(filter_served_keys, served_df), True, served_df)


def keyed_clusters(clusters_df: DataFrame) -> tuple[DataFrame, int]:
    """`cluster_keys`, persisted, and a salt whose hashes are exact over the table (checked
    here, salt after salt)."""
    for salt in range(HASH_SALTS):
        keys_df = cluster_keys(clusters_df, salt).persist(StorageLevel.MEMORY_AND_DISK)
        if _exact_key_facts(keys_df) is not None:
            return keys_df, salt
        log.warning("hash collision in the cluster table with salt %d: trying another", salt)
        keys_df.unpersist()
    raise LogmetricsError(f"cluster keys collide under {HASH_SALTS} different hashes")


class _SideBySide:
    """Steps of a chunk run from threads of the process's one SparkSession, each timed as a
    phase: the Delta commits of different tables cannot conflict and Spark's scheduler is
    thread-safe, so their fixed latencies overlap instead of adding up. Leaving the block
    waits for every step."""

    def __init__(self, phases: Phases) -> None:
        self._phases = phases
        # A chunk's side steps: eight table writes, the run's ledger and history reads, the
        # cluster keys' check; more threads than that would only wait.
        self._pool = ThreadPoolExecutor(max_workers=12, thread_name_prefix="logmetrics")

    def __enter__(self) -> _SideBySide:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)

    def submit(self, name: str, step: Callable[..., T], *args: Any) -> Future[T]:
        return self._pool.submit(self._timed, name, step, *args)

    def _timed(self, name: str, step: Callable[..., T], *args: Any) -> T:
        with self._phases.timed(name):
            return step(*args)


def _wait_all(futures: Sequence[Future[Any]]) -> None:
    """Wait for every step, then raise the first failure (no step is left running)."""
    wait(futures)
    for future in futures:
        future.result()


Write = tuple[DataFrame, Table]
"""A table's rows for the chunk's days (or the published ones), and the table."""


@dataclass(frozen=True)
class _Chunk:
    """One chunk of days: computed from one read of the logs, then checked and published."""

    spark: SparkSession
    config: Config
    dates: list[dt.date]
    stamp: RunStamp
    inputs: str  # the inputs fingerprint, for the ledger
    corrupt: list[CorruptInput]  # unreadable files and lines that may hold these days' rows
    phases: Phases
    side: _SideBySide  # the run's side steps
    started: Future[None]  # the run's `started` ledger rows
    daily: _PublishedDaily  # the published daily rows before and during the run

    def compute(self, keys: ClusterKeys, table_fits: bool) -> _Computed:
        """The chunk's one pass over its logs, its gates and every table's rows, nothing written
        yet (`_Computed.write` does it). The per-request rows stay persisted until then.
        `table_fits`: the whole cluster table is small enough to broadcast (`keys_for_chunk`)."""
        logs_df = self._logs()
        # Only a cluster table too large to broadcast whole costs this phase any time.
        with nullcontext() if table_fits else self.phases.timed("served chunks"):
            chunk_keys = keys_for_chunk(
                keys.df, keys.salt, logs_df, table_fits, self.config.backfill.broadcast_max_chunks
            )
        requests_df = self._requests(logs_df, keys.salt, chunk_keys).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        try:
            with self.phases.timed("main pass"):
                facts = pd.DataFrame(day_facts(requests_df, self._days_df()).toPandas())
            facts["corrupt_inputs"] = [
                sum(day in c.days(self.dates) for c in self.corrupt) for day in facts["metric_date"]
            ]
            cluster = keys.facts()  # waits for the keys' check: exact, or computed again
            with self.phases.timed("gates"):
                known = self.daily.queries(min(self.config.metrics.ks))
                checks = self._checks(facts, cluster, known)
            day_verdicts = verdicts(self.dates, checks)
            publish = [
                v.metric_date
                for v in day_verdicts
                if v.passed or self.config.quality.on_failure == "warn"
            ]
            tables = [(df, t, self.dates) for df, t in self._diagnostics(requests_df, checks)]
            alerts = pd.DataFrame()
            if publish:
                published, alerts = self._published(requests_df, facts, day_verdicts, publish)
                tables += [(df, t, publish) for df, t in published]
        except BaseException:
            requests_df.unpersist()
            chunk_keys.unpersist()
            raise
        return _Computed(
            self, requests_df, chunk_keys, tables, publish, alerts, facts, day_verdicts
        )

    def _logs(self) -> DataFrame:
        """The chunk's served-log rows (lazily: each pass over them reads what it needs)."""
        return read_served_logs(
            self.spark,
            self.config.inputs.logs(),
            self.dates[0],
            self.dates[-1],
            self.config.metrics.segment_by,
            skip_files=[c.file for c in self.corrupt if c.line is None],
        )

    def _requests(self, logs_df: DataFrame, salt: int, keys: ChunkKeys) -> DataFrame:
        """The chunk's logs, one row per (metric_date, request_id, is_malformed): the one pass."""
        metrics = self.config.metrics
        return requests_by_key(
            logs_df, keys.df, metrics.ks, salt, keys.broadcast, metrics.segment_by
        )

    def _checks(
        self, facts: pd.DataFrame, cluster: dict[str, int], known: dict[dt.date, int]
    ) -> list[CheckResult]:
        if not self.config.quality.enabled:
            return []
        judged = facts.assign(
            **{name: count for name, count in cluster.items() if name != "cluster_chunks"}
        )
        judged["trailing_queries_mean"] = self._trailing_queries_mean(facts, known)
        return evaluate(judged, self.config.quality)

    def _trailing_queries_mean(
        self, facts: pd.DataFrame, known: dict[dt.date, int]
    ) -> list[float | None]:
        """Mean queries of the `volume_window_days` days before each day: published days from
        earlier runs (`known`), and this chunk's own days."""
        window = self.config.quality.volume_window_days
        known = {
            **known,
            **dict(zip(facts["metric_date"], (int(q) for q in facts["queries"]), strict=True)),
        }
        means: list[float | None] = []
        for day in facts["metric_date"]:
            before = [
                known[d]
                for d in (day - dt.timedelta(days=i) for i in range(1, window + 1))
                if d in known
            ]
            means.append(sum(before) / len(before) if before else None)
        return means

    def _diagnostics(self, requests_df: DataFrame, checks: list[CheckResult]) -> list[Write]:
        """quarantine, missing_cluster_chunks and data_quality: written for every day, pass or
        fail, so that no row vanishes without a trace and every verdict is on record."""
        quarantine_df = quarantined_rows(requests_df).unionByName(self._corrupt_rows())
        missing_df = top_missing_chunks(requests_df, self.config.quality.missing_chunks_top_n)
        writes = [(quarantine_df, QUARANTINE_TABLE), (missing_df, MISSING_CLUSTER_CHUNKS_TABLE)]
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
            writes.append((checks_df, DATA_QUALITY_TABLE))
        return writes

    def _published(
        self,
        requests_df: DataFrame,
        facts: pd.DataFrame,
        day_verdicts: Sequence[DayVerdict],
        publish: list[dt.date],
    ) -> tuple[list[Write], pd.DataFrame]:
        """The `publish` days of unique_clusters_by_query, and of unique_clusters_daily,
        unique_clusters_k_sweep and redundancy_cost_daily, which all come from one aggregation
        of the requests (`day_sums`: a few hundred rows, brought to the driver); and of
        unique_clusters_alerts, those daily rows judged against the published ones before them
        (returned too, to be announced once written)."""
        metrics, cost = self.config.metrics, self.config.cost
        served_df = requests_df.transform(filter_served_requests).where(
            F.col("metric_date").isin(publish)
        )
        segmented_df = served_df.transform(with_segments, metrics.segment_by)
        with self.phases.timed("daily sums"):
            sums_df = self._local(day_sums(segmented_df, metrics.ks, cost.tokens_per_slot))
        daily_df = self._local(
            daily_from_sums(sums_df, self._calendar(publish, metrics.ks), metrics.threshold).join(
                self._day_status(facts, day_verdicts), on="metric_date", how="inner"
            )
        )
        every_k = self._calendar(publish, range(1, max(metrics.ks) + 1))
        cost_df = redundancy_cost(
            sums_df, every_k, cost.tokens_per_slot, cost.usd_per_million_input_tokens
        )
        with self.phases.timed("alerts"):
            alerts = self._alerts(daily_df, publish)
        stamp = self.stamp
        return [
            (served_df.transform(explode_windows), BY_QUERY_TABLE),
            (daily_df, DAILY_TABLE),
            (k_sweep(sums_df, every_k), K_SWEEP_TABLE),
            (cost_df, REDUNDANCY_COST_TABLE),
            (alerts_frame(self.spark, alerts, stamp.run_id, stamp.computed_at), ALERTS_TABLE),
        ], alerts

    def _alerts(self, daily_df: DataFrame, publish: list[dt.date]) -> pd.DataFrame:
        """The published days judged in date order (`alerts.alert_rows`), against the published
        rows the run read once and the days it has published since (these included)."""
        ours = daily_df.select(*[c for c in DAILY_COLUMNS if c != "cluster_table_version"])
        rows = pd.DataFrame(ours.toPandas()).assign(
            cluster_table_version=self.stamp.cluster_table_version
        )
        self.daily.add(rows)
        return alert_rows(self.daily.rows(), publish, self.config.alerts, self.config.metrics.ks)

    def _local(self, df: DataFrame) -> DataFrame:
        """A small result collected once (as Arrow) and handed back as a local relation: what
        is derived from it plans and runs on the driver's copy, not on the cached requests."""
        return self.spark.createDataFrame(df.toArrow())

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


@dataclass(frozen=True)
class _Computed:
    """A chunk computed by `_Chunk.compute`: its tables' rows, not yet written."""

    chunk: _Chunk
    requests_df: DataFrame  # persisted: every table's rows are read from it
    chunk_keys: ChunkKeys  # the keys its entries were joined to
    tables: list[tuple[DataFrame, Table, list[dt.date]]]
    publish: list[dt.date]  # the days whose blocking gates passed (or on_failure: warn)
    alerts: pd.DataFrame
    facts: pd.DataFrame
    day_verdicts: Sequence[DayVerdict]

    def write(self) -> list[DayResult]:
        """Every table's commit runs side by side with the others; the `published` ledger rows
        are appended once all of them (and the run's `started` rows) have committed."""
        chunk = self.chunk
        writes: list[Future[None]] = []
        try:
            writes += [
                chunk.side.submit(f"write {table.name}", chunk._write, df, table, dates)
                for df, table, dates in self.tables
            ]
            _wait_all([*writes, chunk.started])
        finally:
            wait(writes)  # no write still reads the cached requests
            self.requests_df.unpersist()
            self.chunk_keys.unpersist()
        if self.publish:
            announce(self.alerts)
        counts = {
            r.metric_date: {
                "rows_read": int(r.rows_read),
                "queries": int(r.queries),
                "results": int(r.valid_entries),
            }
            for r in self.facts.itertuples()
        }
        with chunk.phases.timed("ledger published"):
            _record(
                chunk.spark,
                chunk.config,
                chunk.stamp,
                chunk.inputs,
                [
                    (d, ledger.PUBLISHED if d in self.publish else ledger.HELD, counts[d])
                    for d in chunk.dates
                ],
                finished_at=dt.datetime.now(dt.UTC),
            )
        return [
            DayResult(
                v.metric_date, counts[v.metric_date]["queries"], v.metric_date in self.publish, v
            )
            for v in self.day_verdicts
        ]


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
