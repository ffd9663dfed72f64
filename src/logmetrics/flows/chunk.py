"""One chunk of days: computed from one read of its logs, checked, then written.

    read -> one pass to per-request rows (persisted) -> facts -> quality gates
         -> quarantine, data_quality, missing_cluster_chunks (every day; a held day's beside
            the rows behind its published numbers)
         -> the days that may be published: by query, daily distributions, k-sweep,
            redundancy cost, crowding (all traffic and segments) and their alerts

`Chunk.compute` runs the pass and builds every table's rows, nothing written;
`Computed.start_writes` submits their commits, side by side, once the run's `started` rows are
committed, and returns (the backfill computes the next chunk meanwhile); each is an append where
its days are new, a replaceWhere otherwise (`flows.writes`). `Writing.finish` waits for them,
leaves to a later run any appended day it began meanwhile (`ChunkWrites.recheck`), and then
appends the other days' `published` / `held` ledger rows. The rules are in `rules` and
`quality`; the tables in `tables`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, wait
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial

import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from logmetrics import interrupt
from logmetrics.config import Config
from logmetrics.flows import ledger
from logmetrics.flows.alerts import alerts_frame, announce, culprit_rows
from logmetrics.flows.history import PublishedDaily
from logmetrics.flows.keys import ChunkKeys, ClusterKeys, KeysPlan, keys_for_chunk
from logmetrics.flows.side_steps import SideSteps, wait_all
from logmetrics.flows.writes import ChunkWrites
from logmetrics.inputs.damaged import CorruptInput
from logmetrics.inputs.days import DayInputs
from logmetrics.inputs.served_logs import read_served_logs
from logmetrics.phases import Phases
from logmetrics.quality.facts import (
    day_facts,
    quarantined_rows,
    top_missing_chunks,
    trailing_queries_mean,
)
from logmetrics.quality.gx_suite import CheckResult, evaluate
from logmetrics.quality.policy import DayVerdict, describe, verdicts
from logmetrics.rules.alerts import alert_rows
from logmetrics.rules.crowding import crowding_candidates, crowding_rows
from logmetrics.rules.daily import (
    daily_from_sums,
    day_sums,
    k_sweep,
    redundancy_cost,
    with_segments,
)
from logmetrics.rules.per_request import explode_windows, filter_served_requests, requests_by_key
from logmetrics.schemas import (
    CALENDAR,
    DAILY_COLUMNS,
    DATA_QUALITY_ROWS,
    DAY_STATUS,
    DAYS,
    QUARANTINE_ROWS,
    rows_frame,
)
from logmetrics.tables.catalog import (
    ALERTS_TABLE,
    CROWDING_TABLE,
    DAILY_TABLE,
    DATA_QUALITY_TABLE,
    K_SWEEP_TABLE,
    MISSING_CLUSTER_CHUNKS_TABLE,
    QUARANTINE_TABLE,
    REDUNDANCY_COST_TABLE,
    RunStamp,
    Table,
    by_query_table,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DayResult:
    metric_date: dt.date
    queries: int
    published: bool
    verdict: DayVerdict


Rows = DataFrame | Callable[[], DataFrame]
"""A table's rows, or what builds them in the write's own thread, beside the other writes (for
rows that need a small collect first: `Chunk._crowding`)."""
Write = tuple[Rows, Table]
"""A table's rows for the chunk's days (or the published ones), and the table."""


def chunk_tables(config: Config) -> list[Table]:
    """Every table a chunk may write (`Chunk._diagnostics`, `Chunk._published`)."""
    return [
        QUARANTINE_TABLE,
        MISSING_CLUSTER_CHUNKS_TABLE,
        *([DATA_QUALITY_TABLE] if config.quality.enabled else []),
        by_query_table(config.metrics.segment_by),
        DAILY_TABLE,
        K_SWEEP_TABLE,
        REDUNDANCY_COST_TABLE,
        ALERTS_TABLE,
        *([CROWDING_TABLE] if config.crowding.enabled else []),
    ]


@dataclass(frozen=True)
class Chunk:
    """One chunk of days: computed from one read of the logs, then checked and published."""

    spark: SparkSession
    config: Config
    dates: list[dt.date]
    stamp: RunStamp
    inputs: Mapping[dt.date, DayInputs]  # each day's inputs, for the ledger
    reasons: Mapping[dt.date, str]  # why each day is computed, for the ledger
    corrupt: list[CorruptInput]  # unreadable files and lines that may hold these days' rows
    phases: Phases
    side: SideSteps  # the run's side steps
    started: Future[None]  # the run's `started` ledger rows
    writes: ChunkWrites  # how each table is written (`flows.writes`)
    daily: PublishedDaily  # the published daily rows before and during the run

    def compute(self, keys: ClusterKeys, plan: KeysPlan) -> Computed:
        """The chunk's one pass over its logs, its gates and every table's rows, nothing written
        yet (`Computed.write` does it). The per-request rows stay persisted until then.
        `plan`: how the entries meet the cluster keys (`keys_for_chunk`)."""
        logs_df = self._logs()
        keys_df = keys.df  # waits for them while they are written to be kept
        # Only a cluster table too large to broadcast whole costs this phase any time.
        with nullcontext() if plan.table_fits else self.phases.timed("served chunks"):
            chunk_keys = keys_for_chunk(keys_df, keys.salt, logs_df, plan)
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
            interrupt.check()  # a safe point: the published tables' rows are not built
            publish = [
                v.metric_date
                for v in day_verdicts
                if v.passed or self.config.quality.on_failure == "warn"
            ]
            tables = [(df, t, self.dates) for df, t in self._diagnostics(requests_df, checks)]
            alerts = pd.DataFrame()
            if publish:
                published, alerts = self._published(
                    requests_df, facts, day_verdicts, publish, keys.df
                )
                tables += [(df, t, publish) for df, t in published]
        except BaseException:
            requests_df.unpersist()
            chunk_keys.unpersist()
            raise
        return Computed(self, requests_df, chunk_keys, tables, publish, alerts, facts, day_verdicts)

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
            logs_df,
            keys.df,
            metrics.ks,
            salt,
            keys.broadcast,
            metrics.segment_by,
            slot_keys=self.config.crowding.enabled,
        )

    def _checks(
        self, facts: pd.DataFrame, cluster: dict[str, int], known: dict[dt.date, int]
    ) -> list[CheckResult]:
        if not self.config.quality.enabled:
            return []
        judged = facts.assign(
            **{name: count for name, count in cluster.items() if name != "cluster_chunks"}
        )
        judged["trailing_queries_mean"] = trailing_queries_mean(
            facts, known, self.config.quality.volume_window_days
        )
        return evaluate(judged, self.config.quality, self.config.inputs.logs().allow_empty_days)

    def _diagnostics(self, requests_df: DataFrame, checks: list[CheckResult]) -> list[Write]:
        """quarantine, missing_cluster_chunks and data_quality: written for every day, pass or
        fail, so that no row vanishes without a trace and every verdict is on record (a held
        day's beside the rows behind its published numbers: `ChunkWrites.write`)."""
        # Shuffled to one task, so that the scans of the cached requests run in parallel.
        quarantine_df = quarantined_rows(requests_df).unionByName(self._corrupt_rows())
        quarantine_df = quarantine_df.repartition(1)
        missing_df = top_missing_chunks(requests_df, self.config.quality.missing_chunks_top_n)
        writes: list[Write] = [
            (quarantine_df, QUARANTINE_TABLE),
            (missing_df, MISSING_CLUSTER_CHUNKS_TABLE),
        ]
        if self.config.quality.enabled:
            checks_df = rows_frame(
                self.spark,
                [
                    (c.metric_date, c.check, c.success, c.observed_value, c.threshold)
                    + (c.severity, c.details)
                    for c in checks
                ],
                DATA_QUALITY_ROWS,
            )
            writes.append((checks_df, DATA_QUALITY_TABLE))
        return writes

    def _published(
        self,
        requests_df: DataFrame,
        facts: pd.DataFrame,
        day_verdicts: Sequence[DayVerdict],
        publish: list[dt.date],
        keys_df: DataFrame,
    ) -> tuple[list[Write], pd.DataFrame]:
        """The `publish` days of unique_clusters_by_query, and of unique_clusters_daily,
        unique_clusters_k_sweep and redundancy_cost_daily, which all come from one aggregation
        of the requests (`day_sums`: a few hundred rows, brought to the driver); of
        unique_clusters_crowding (when `crowding.enabled`), from the requests' repeated slots,
        named by the cluster keys (`keys_df`); and of unique_clusters_alerts, those daily rows
        judged against the published ones before them (returned too, to be announced once
        written)."""
        metrics, cost, crowd = self.config.metrics, self.config.cost, self.config.crowding
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
            (
                served_df.transform(explode_windows, metrics.segment_by),
                by_query_table(metrics.segment_by),
            ),
            (daily_df, DAILY_TABLE),
            (k_sweep(sums_df, every_k), K_SWEEP_TABLE),
            (cost_df, REDUNDANCY_COST_TABLE),
            (alerts_frame(self.spark, alerts, stamp.run_id, stamp.computed_at), ALERTS_TABLE),
            *(
                [(partial(self._crowding, served_df, keys_df), CROWDING_TABLE)]
                if crowd.enabled
                else []
            ),
        ], alerts

    def _crowding(self, served_df: DataFrame, keys_df: DataFrame) -> DataFrame:
        """unique_clusters_crowding's rows: the candidates (a few thousand rows, from one
        aggregation of the repeated slots, counts and examples together) collected once, then
        named. Built in the table's write thread."""
        metrics, cost = self.config.metrics, self.config.cost
        top_n = self.config.crowding.top_clusters
        with self.phases.timed("crowding candidates"):
            candidates = self._local(
                crowding_candidates(
                    served_df,
                    metrics.ks,
                    top_n,
                    metrics.segment_by,
                    cost.tokens_per_slot,
                    cost.usd_per_million_input_tokens,
                )
            )
        return crowding_rows(candidates, keys_df, top_n)

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
        is derived from it plans and runs on the driver's copy, not on the cached requests.
        With its schema: Spark 4.0 reads an Arrow list back as holding nulls, and a histogram
        that may hold nulls cannot be cast to its table's column, whose elements are not null."""
        return self.spark.createDataFrame(df.toArrow(), schema=df.schema)

    def _write(self, rows: Rows, table: Table, dates: list[dt.date], held: list[dt.date]) -> None:
        """Write the table's rows: appended or replaced (`ChunkWrites.write`)."""
        self.writes.write(rows() if callable(rows) else rows, table, dates, held)

    def _corrupt_rows(self) -> DataFrame:
        """The quarantine's rows for the unreadable inputs: one per input and day it may hold."""
        rows = [(d, c.reason, None, c.raw()) for c in self.corrupt for d in c.days(self.dates)]
        return rows_frame(self.spark, rows, QUARANTINE_ROWS)

    def _days_df(self) -> DataFrame:
        return rows_frame(self.spark, [(d,) for d in self.dates], DAYS)

    def _calendar(self, dates: list[dt.date], ks: Iterable[int]) -> DataFrame:
        """Every (metric_date, k): the all-traffic rows a table must have."""
        return rows_frame(self.spark, [(d, k) for d in dates for k in ks], CALENDAR)

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
        return rows_frame(self.spark, rows, DAY_STATUS)


@dataclass(frozen=True)
class Computed:
    """A chunk computed by `Chunk.compute`: its tables' rows, not yet written."""

    chunk: Chunk
    requests_df: DataFrame  # persisted: every table's rows are read from it
    chunk_keys: ChunkKeys  # the keys its entries were joined to
    tables: list[tuple[Rows, Table, list[dt.date]]]
    publish: list[dt.date]  # the days whose blocking gates passed (or on_failure: warn)
    alerts: pd.DataFrame
    facts: pd.DataFrame
    day_verdicts: Sequence[DayVerdict]

    def start_writes(self) -> Writing:
        """Submit every table's commit to the side steps, side by side with the others, each
        once the run's `started` rows are committed, and return at once: the main thread
        computes the next chunk meanwhile."""
        chunk = self.chunk
        writes: list[Future[None]] = []
        try:
            interrupt.check()  # a safe point: none of the chunk's writes is submitted
            for df, table, dates in self.tables:
                held = [d for d in dates if d not in self.publish]
                writes.append(  # no table is written before the run's `started` rows are
                    chunk.side.submit(
                        f"write {table.name}",
                        chunk._write,
                        df,
                        table,
                        dates,
                        held,
                        after=chunk.started,
                    )
                )
        except BaseException:  # none is left running: the rows they read are dropped
            wait(writes)
            self.release()
            raise
        return Writing(self, writes)

    def release(self) -> None:
        """Drop the chunk's persisted rows (once nothing reads them)."""
        self.requests_df.unpersist()
        self.chunk_keys.unpersist()


@dataclass(frozen=True)
class ChunkDone:
    """A chunk written: its days (in date order), the alerts and improvements announced, and
    the days left to a run that began them later and wrote them meanwhile (`flows.writes`),
    with that run's id."""

    days: list[DayResult]
    alerts: int
    improvements: int
    left: dict[dt.date, str]


@dataclass(frozen=True)
class Writing:
    """A computed chunk whose table writes are running (`Computed.start_writes`)."""

    computed: Computed
    writes: list[Future[None]]

    def finish(self) -> ChunkDone:
        """Wait for the chunk's commits (and the run's `started` rows), then announce its
        alerts and append its `published` ledger rows: they follow all of its commits. An
        appended day another run began since this one did is left to it
        (`ChunkWrites.recheck`): no alert or ledger row of this run."""
        computed = self.computed
        chunk = computed.chunk
        try:
            wait_all([*self.writes, chunk.started])
            interrupt.check()  # a safe point: no alert said, no ledger row, for an unpublished day
            with chunk.phases.timed("ledger recheck"):
                left = chunk.writes.recheck(chunk.dates)
        finally:
            wait(self.writes)  # no write still reads the cached requests
            computed.release()
        for day, run in sorted(left.items()):
            log.info(
                "%s: left to run %s, which began it after this one",
                day,
                run,
                extra={"fields": {"metric_date": str(day), "left_to": run}},
            )
        dates = [d for d in chunk.dates if d not in left]
        alerts = computed.alerts
        if not alerts.empty and left:
            alerts = alerts[~alerts["metric_date"].isin(set(left))]
        fired = (0, 0)
        if computed.publish:
            fired = announce(
                alerts, culprit_rows(chunk.spark, chunk.config, alerts, chunk.daily.rows())
            )
        counts = {
            r.metric_date: {
                "rows_read": int(r.rows_read),
                "queries": int(r.queries),
                "results": int(r.valid_entries),
            }
            for r in computed.facts.itertuples()
        }
        if dates:
            with chunk.phases.timed("ledger published"):
                ledger.record(
                    chunk.spark,
                    chunk.config,
                    chunk.stamp,
                    [
                        (d, ledger.PUBLISHED if d in computed.publish else ledger.HELD, counts[d])
                        for d in dates
                    ],
                    chunk.inputs,
                    chunk.reasons,
                    finished_at=dt.datetime.now(dt.UTC),
                    errors={
                        v.metric_date: "; ".join(describe(c) for c in v.blocking_failures)
                        for v in computed.day_verdicts
                        if v.metric_date not in computed.publish
                    },
                )
        days = [
            DayResult(
                v.metric_date,
                counts[v.metric_date]["queries"],
                v.metric_date in computed.publish,
                v,
            )
            for v in computed.day_verdicts
            if v.metric_date not in left
        ]
        return ChunkDone(days, *fired, left)
