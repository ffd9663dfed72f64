"""The run/backfill loop: one date range, a chunk of days at a time.

Scans the logs for corrupt files first (a Parquet file off the contract, known from its footer,
stops the run before anything else is read; the CLI scans local Parquet logs before Spark
starts: `scan_ahead`). Then the reads that need only the considered days run side by side: the
ledger and the published history beside the cluster table and each day's inputs (one narrow
pass). The run leaves alone the days no log file holds a row of (not ready, unless
`allow_empty_days`), computes the days whose inputs, cluster table or config changed since
they were last computed (a resumed backfill skips the rest), commits the run's `started` rows
beside the first chunk's main pass (no table is written before them), then computes each chunk
(`chunk.Chunk`) while the chunk before it is written, so the writes of one overlap the main
pass of the next. A hash collision in the cluster keys (`keys`) computes the chunk again under
the next salt, and a broadcast of them that runs out of memory with the next plan. The terminal
hears of a chunk while it computes (`Progress`) and once it is written; the log keeps a record
per day.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from logmetrics import interrupt, storage
from logmetrics.config import Config
from logmetrics.console import days_text, duration, say, span_text
from logmetrics.errors import failure_line
from logmetrics.flows import ledger
from logmetrics.flows.calibration import (
    checked_calibration,
    publish_calibration,
    warn_uncalibrated,
)
from logmetrics.flows.chunk import Chunk, DayResult, Writing, chunk_tables
from logmetrics.flows.history import PublishedDaily, published_before
from logmetrics.flows.keys import (
    HashCollision,
    first_plan,
    kept_keys,
    out_of_memory,
    plan_after_memory_failure,
    start_cluster_keys,
)
from logmetrics.flows.side_steps import SideSteps
from logmetrics.flows.writes import RunWrites, run_position
from logmetrics.inputs.clusters import (
    ClusterSnapshot,
    clusters_state,
    parquet_listing_state,
    read_clusters,
)
from logmetrics.inputs.damaged import CorruptInput, stop_on_corrupt
from logmetrics.inputs.days import NO_LOG_FILES, DayInputs, footer_day_inputs
from logmetrics.inputs.files import date_partition_column
from logmetrics.inputs.footers import footer_days
from logmetrics.inputs.narrow_pass import day_inputs
from logmetrics.inputs.scan import scan_served_logs, undated_rows
from logmetrics.inputs.served_logs import check_retrieval_spans
from logmetrics.phases import Phases
from logmetrics.quality.policy import describe
from logmetrics.session import broadcast_memory
from logmetrics.tables import delta_rs
from logmetrics.tables.catalog import RunStamp

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    run_id: str
    cluster_table_version: int | None
    days: list[DayResult] = field(default_factory=list)  # computed, in date order
    skipped: list[dt.date] = field(default_factory=list)  # done from the same inputs and config
    not_ready: dict[dt.date, str] = field(default_factory=dict)  # left alone, and why
    left: dict[dt.date, str] = field(default_factory=dict)  # to a later run (its id)
    alerts: int = 0
    improvements: int = 0
    forced: bool = False  # some days were computed whatever the ledger said (--force)

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
    *,
    always: Collection[dt.date] = (),
    seen_only: Collection[dt.date] = (),
    not_ready: Collection[dt.date] = (),
    required: Collection[dt.date] = (),
    scanned: list[CorruptInput] | None = None,
    phases: Phases | None = None,
) -> RunSummary:
    """Compute the days of start..end whose inputs, cluster table or config changed since they
    were last computed, or that never were (`ledger.reason_to_compute`), and publish the ones
    the failure policy allows; other dates are never touched. `always`: days computed whatever
    the ledger says (`run`'s own date, every day of `backfill --force`); `seen_only`: days
    computed only if the ledger has seen them (the days `run` looks back on); `not_ready`:
    days left alone (their logs have not all landed); `scanned`: `scan_ahead` of these days,
    when the caller ran it before Spark started. `phases` records where the time goes.

    Without a ready marker configured, a day no log file holds a row of is not ready either
    (unless `inputs.served_logs.allow_empty_days`): it is left alone and named in the
    summary's `not_ready`, and when it is `required` (`run`'s own date) nothing is computed.

    A run that fails after it began its days appends a `failed` row, with the error's line,
    for each day it had not finished; a run stopped by a signal (`interrupt`) an `interrupted`
    row for each, and raises `interrupt.Interrupted` naming them."""
    phases = phases or Phases()
    considered = considered_days(start, end, not_ready)
    # The log files first: a file off the contract is the commonest input error, and a Parquet
    # file's footer says so before the cluster table or the ledger is read.
    corrupt: list[CorruptInput] = []
    if considered:
        with phases.timed("input scan"):
            if scanned is None:
                scanned = scan_ahead(spark, config, considered)
            corrupt = _corrupt_inputs(spark, config, scanned)
            unreadable = [c.file for c in corrupt if c.line is None]
            first, last = considered[0], considered[-1]
            # Spans: the convention and the chunk-id path, judged on a sample, before any day
            check_retrieval_spans(spark, config.inputs.logs(), first, last, unreadable)
    if not considered:
        with phases.timed("inputs"):
            clusters = read_clusters(spark, config.inputs.clusters)
            checked_calibration(spark, config)  # a bad calibration file is said all the same
        return RunSummary(run_id=run_id, cluster_table_version=clusters.version)
    with SideSteps(phases) as side:
        # The ledger and the published history (from the longest look-back before the first
        # considered day: what any computed day needs) are read from here, beside the cluster
        # table and the days' inputs: the process's first queries pay the JVM's warm-up once.
        ledger_read = side.submit(
            "ledger read", ledger.read_ledger, spark, config.output, considered
        )
        daily = PublishedDaily(
            side.submit("published history", published_before, spark, config, considered)
        )
        return _run_days(
            spark,
            config,
            run_id,
            computed_at,
            considered,
            corrupt,
            ledger_read,
            daily,
            always,
            seen_only,
            required,
            phases,
            side,
        )


def _run_days(
    spark: SparkSession,
    config: Config,
    run_id: str,
    computed_at: dt.datetime,
    considered: list[dt.date],
    corrupt: list[CorruptInput],
    ledger_read: Future[ledger.LedgerRead],
    daily: PublishedDaily,
    always: Collection[dt.date],
    seen_only: Collection[dt.date],
    required: Collection[dt.date],
    phases: Phases,
    side: SideSteps,
) -> RunSummary:
    """`run_range` once the ledger's and the history's reads are under way: the cluster table,
    the days' inputs, the plan, the computation."""
    with phases.timed("inputs"):
        clusters = read_clusters(spark, config.inputs.clusters)
        cluster_state = clusters_state(spark, config.inputs.clusters, clusters)
        calibration = checked_calibration(spark, config)  # checked before anything is published
    stamp = RunStamp(run_id, computed_at, clusters.version)
    summary = RunSummary(run_id=run_id, cluster_table_version=clusters.version)
    published = (  # once the inputs are known readable, beside the narrow pass
        None
        if calibration is None
        else side.submit("calibration", publish_calibration, spark, config, calibration, stamp)
    )
    with phases.timed("input state"):
        inputs = day_inputs(spark, config, cluster_state, considered, corrupt)
    read = ledger_read.result()
    previous = read.previous
    if published is not None:
        published.result()
    empty = _without_files(config, considered, inputs, corrupt)
    # A day looked back on that was never computed is left alone anyway: nothing to say.
    summary.not_ready = {d: r for d, r in empty.items() if d not in seen_only or d in previous}
    if summary.not_ready.keys() & set(required):
        return summary
    considered = [d for d in considered if d not in empty]
    plan = plan_days(config, considered, inputs, previous, always, seen_only)
    summary.forced = bool(always)
    say_plan(plan, seen_only, summary)
    reasons = plan.reasons
    dates = sorted(reasons)
    if not dates:
        return summary
    version = "" if clusters.version is None else f", cluster table version {clusters.version}"
    say(
        log,
        f"computing {days_text(dates)}: k in {', '.join(map(str, config.metrics.ks))}{version}",
        days=len(dates),
    )
    # One `started` row per day of the run, in one commit beside the first chunk's main pass;
    # no table is written before it is (`Computed.start_writes`).
    started = side.submit(
        "ledger started",
        ledger.record,
        spark,
        config,
        stamp,
        [(d, ledger.STARTED, None) for d in dates],
        inputs,
        reasons,
    )
    try:
        _compute_days(
            spark,
            config,
            stamp,
            dates,
            inputs,
            reasons,
            corrupt,
            clusters,
            daily,
            read,
            summary,
            phases,
            side,
            started,
        )
    except BaseException as exc:
        wait([started])
        finished = {day.metric_date for day in summary.days}
        unfinished = [d for d in dates if d not in finished]
        signum = interrupt.requested()
        if signum is None:
            _record_unfinished(
                spark, config, stamp, unfinished, inputs, reasons, ledger.FAILED, exc
            )
            raise
        if started.exception() is not None:  # stopped before its `started` rows: nothing begun
            raise interrupt.Interrupted(signum, f"no day began ({days_text(dates)})") from None
        with interrupt.recording():  # the run began its days: the ledger says it stopped
            _record_unfinished(
                spark, config, stamp, unfinished, inputs, reasons, ledger.INTERRUPTED, exc
            )
        raise interrupt.Interrupted(signum, interrupt.not_published(unfinished)) from None
    if calibration is not None:
        warn_uncalibrated(config, calibration, clusters.version, dates)
    return summary


def _without_files(
    config: Config,
    considered: list[dt.date],
    inputs: Mapping[dt.date, DayInputs],
    corrupt: list[CorruptInput],
) -> dict[dt.date, str]:
    """The days of `considered` no log file (readable or not) holds a row of, when that means
    not ready: no ready marker is configured (a marker is the upstream's word that a day is
    whole, empty or not) and empty days are not allowed."""
    source = config.inputs.logs()
    if source.allow_empty_days or source.ready_marker is not None:
        return {}
    return {
        day: NO_LOG_FILES
        for day in considered
        if inputs[day].files == 0 and not any(c.days([day]) for c in corrupt)
    }


@dataclass(frozen=True)
class Plan:
    """Which days a run computes and why, and which it leaves (`plan_days`)."""

    reasons: dict[dt.date, str]  # to compute, each with why
    done: list[dt.date]  # skipped: already done from the same inputs and config
    unseen: list[dt.date]  # looked back on, never computed: left to a backfill
    restated: dict[str, list[dt.date]]  # the days computed again, by reason


def plan_days(
    config: Config,
    considered: list[dt.date],
    inputs: Mapping[dt.date, DayInputs],
    previous: Mapping[dt.date, ledger.Previous],
    always: Collection[dt.date],
    seen_only: Collection[dt.date],
) -> Plan:
    """The days to compute and why (`ledger.reason_to_compute`), the days done and the days
    looked back on that were never computed: a pure decision, said by `say_plan`."""
    reasons: dict[dt.date, str] = {}
    done, unseen = [], []
    for day in considered:
        before = previous.get(day)
        if before is None and day in seen_only:
            unseen.append(day)
            continue
        reason = ledger.reason_to_compute(before, inputs[day], config.fingerprint(), day in always)
        if reason is None:
            done.append(day)
            continue
        reasons[day] = reason
    restated: dict[str, list[dt.date]] = {}
    for day, reason in reasons.items():
        if previous.get(day) is not None and reason != ledger.NEW:
            restated.setdefault(reason, []).append(day)
    return Plan(reasons, done, unseen, restated)


def say_plan(plan: Plan, seen_only: Collection[dt.date], summary: RunSummary) -> None:
    """The plan on the terminal, a line for the skipped and the restated days, and in the log
    a record per restated day; the skipped days go to `summary.skipped`."""
    for reason, days in plan.restated.items():
        for day in days:
            log.info(
                "restating %s: %s",
                day,
                reason.replace("_", " "),
                extra={"fields": {"metric_date": str(day), "reason": reason}},
            )
        say(log, f"restating {days_text(days)}: {reason.replace('_', ' ')}")
    summary.skipped = plan.done
    if plan.done:
        why = (
            "--force restates the days given, not the days looked back on"
            if summary.forced and all(d in seen_only for d in plan.done)
            else "--force restates"
        )
        say(
            log,
            f"{days_text(plan.done)}: already done from the same inputs and config, skipped "
            f"({why})",
            skipped=len(plan.done),
        )
    if plan.unseen:
        log.info(
            "not looking back on %s: never computed (a backfill computes them)",
            ", ".join(map(str, plan.unseen)),
        )


def _compute_days(
    spark: SparkSession,
    config: Config,
    stamp: RunStamp,
    dates: list[dt.date],
    inputs: Mapping[dt.date, DayInputs],
    reasons: Mapping[dt.date, str],
    corrupt: list[CorruptInput],
    clusters: ClusterSnapshot,
    daily: PublishedDaily,
    read: ledger.LedgerRead,
    summary: RunSummary,
    phases: Phases,
    side: SideSteps,
    started: Future[None],
) -> None:
    """The days, a chunk at a time: each chunk's tables are written while the next is computed
    (`started`: the run's `started` rows, committing)."""
    with phases.timed("cluster table rows"):
        # Rows bound the distinct chunk ids from above, and Spark counts them from metadata.
        table_rows = clusters.df.count()
    memory = broadcast_memory(spark)
    plan = first_plan(config.backfill.broadcast_max_chunks, table_rows, memory)
    kept = kept_keys(config, inputs[dates[0]].clusters, table_rows)
    writes = RunWrites(
        spark,
        config.output,
        stamp,
        frozenset(d for d in dates if d not in read.previous),
        side.submit(
            "ledger position", run_position, spark, config.output, read, stamp.run_id, after=started
        ),
        side,
    )
    began = time.monotonic()
    keys = start_cluster_keys(clusters.df, 0, side, kept)
    with Progress(phases, every=PROGRESS_SECONDS) as progress:
        # A chunk's tables are written while the next chunk is computed (its main pass keeps
        # both cores busy while the commits wait on the driver); the writes of two chunks never
        # overlap, and each chunk's `published` ledger rows follow its own commits.
        pending: tuple[Writing, float] | None = None

        def finish_pending() -> None:
            nonlocal pending
            if pending is not None:
                writing, chunk_began = pending
                pending = None
                done = writing.finish()
                summary.days.extend(done.days)
                summary.alerts += done.alerts
                summary.improvements += done.improvements
                summary.left.update(done.left)
                if done.days:
                    _log_progress(summary, done.days, len(dates), chunk_began, began)
                if done.left:
                    them = "them" if len(done.left) > 1 else "it"
                    say(
                        log,
                        f"{days_text(sorted(done.left))}: left to run "
                        f"{', '.join(sorted(set(done.left.values())))}, which began {them} after "
                        f"this one (its own rows of {them} deleted)",
                        left=len(done.left),
                    )
                progress.written()

        try:
            for chunk_dates in date_chunks(dates, config.backfill.days_per_chunk):
                interrupt.check()  # a safe point: no chunk begins once a stop was asked for
                chunk_began = time.monotonic()
                progress.now(span_text(chunk_dates[0], chunk_dates[-1]), chunk_began)
                chunk_corrupt = [c for c in corrupt if c.days(chunk_dates)]
                chunk = Chunk(
                    spark,
                    config,
                    chunk_dates,
                    stamp,
                    inputs,
                    reasons,
                    chunk_corrupt,
                    phases,
                    side,
                    started,
                    writes.for_chunk(chunk_dates, chunk_tables(config)),
                    daily,
                )
                while True:
                    try:
                        computed = chunk.compute(keys, plan)
                        break
                    except HashCollision:  # nothing was written: the chunk is done again
                        log.warning("hash collision in the cluster table with salt %d", keys.salt)
                        keys.unpersist()
                        keys = start_cluster_keys(clusters.df, keys.salt + 1, side, kept)
                    except Exception as exc:  # a broadcast out of memory: the next plan
                        if not out_of_memory(exc):
                            raise
                        plan = plan_after_memory_failure(plan, exc, memory, table_rows)
                finish_pending()
                pending = (computed.start_writes(), chunk_began)
        finally:
            try:
                finish_pending()  # the last chunk, or the one written while a later one failed
            finally:
                keys.unpersist()
                wait([started])  # a failed run's `failed` rows follow its `started` rows


def _record_unfinished(
    spark: SparkSession,
    config: Config,
    stamp: RunStamp,
    dates: list[dt.date],
    inputs: Mapping[dt.date, DayInputs],
    reasons: Mapping[dt.date, str],
    status: str,
    exc: BaseException,
) -> None:
    """A `failed` (or `interrupted`) row for each day the run began and did not finish, with
    the error's line (or the signal); a failure to write them is logged, and the run's own
    error is the one raised. The terminal hears of the error once, from the CLI."""
    if not dates:
        return
    signum = interrupt.requested()
    if status == ledger.INTERRUPTED and signum is not None:
        error = f"interrupted ({interrupt.signal_name(signum)})"
    else:
        error = failure_line(exc) if isinstance(exc, Exception) else type(exc).__name__
    try:
        ledger.record(
            spark,
            config,
            stamp,
            [(d, status, None) for d in dates],
            inputs,
            reasons,
            finished_at=dt.datetime.now(dt.UTC),
            error=error,
        )
    except Exception:  # in the run's log: the terminal hears of the run's own error, once
        log.info("could not record the %s days in job_runs", status, exc_info=True)
    log.info("%d day(s) %s: %s", len(dates), status, error)


def answer_without_spark(
    config: Config,
    start: dt.date,
    end: dt.date,
    run_id: str,
    *,
    always: Collection[dt.date] = (),
    seen_only: Collection[dt.date] = (),
    not_ready: Collection[dt.date] = (),
    required: Collection[dt.date] = (),
    scanned: list[CorruptInput] | None = None,
) -> RunSummary | None:
    """`run_range`'s summary when the run has no day to compute (every day done from the same
    inputs and config, or not ready), found without Spark: the days' states from the log
    files' footers (`inputs.days.footer_day_inputs`), the ledger and the cluster table's
    version read with delta-rs (`tables.delta_rs`). None when there is a day to compute, or
    anything cannot be known that way (`--force`, unreadable log files, a calibration table,
    logs, ledger or cluster table on a store with no reader here): Spark then answers.
    Says what `run_range` says of its plan."""
    if always or scanned is None or scanned or config.inputs.calibration is not None:
        return None
    clusters = _cluster_state_without_spark(config)
    if clusters is None:
        return None
    state, version = clusters
    considered = considered_days(start, end, not_ready)
    inputs = footer_day_inputs(config, state, considered, [])
    previous = ledger.previous_runs_without_spark(config.output, considered)
    if inputs is None or previous is None:
        return None
    summary = RunSummary(run_id=run_id, cluster_table_version=version)
    empty = _without_files(config, considered, inputs, [])
    summary.not_ready = {d: r for d, r in empty.items() if d not in seen_only or d in previous}
    if summary.not_ready.keys() & set(required):
        return summary
    considered = [d for d in considered if d not in empty]
    plan = plan_days(config, considered, inputs, previous, always, seen_only)
    if plan.reasons:
        return None
    if considered and date_partition_column(config.inputs.logs()) is None:
        footers = footer_days(config.inputs.logs(), considered[0], considered[-1])
        warn_undated(footers.undated if footers is not None else 0)
    say_plan(plan, seen_only, summary)
    return summary


def _cluster_state_without_spark(config: Config) -> tuple[str, int | None] | None:
    """The cluster table's state and Delta version as `clusters_state` records them, read
    without Spark; None where that cannot be done."""
    source = config.inputs.clusters
    if source.location is None:  # a table only the catalog places: Spark asks it
        return None
    if source.data_format != "delta":
        root = storage.place(source.location)
        return None if root is None else (parquet_listing_state(root), None)
    if source.version is not None:
        return f"v{source.version}", source.version
    try:
        table = delta_rs.open_table(source.location)
    except delta_rs.NoReader:
        return None
    if table is None:
        return None
    version = int(table.version())
    return f"v{version}", version


def considered_days(
    start: dt.date, end: dt.date, not_ready: Collection[dt.date] = ()
) -> list[dt.date]:
    """The days of start..end a run looks at: every one, but those in `not_ready` (their logs
    have not all landed)."""
    days = (start + dt.timedelta(days=i) for i in range((end - start).days + 1))
    return [day for day in days if day not in not_ready]


def scan_ahead(
    spark: SparkSession | None, config: Config, considered: Sequence[dt.date]
) -> list[CorruptInput]:
    """The log files (or JSON lines) of the `considered` days that cannot be read; an
    InputError for a file off the contract. Without a session where the logs need none
    (`inputs.damaged.scan_needs_spark`): the CLI runs it before Spark starts."""
    return scan_served_logs(spark, config.inputs.logs(), considered[0], considered[-1])


def _corrupt_inputs(
    spark: SparkSession, config: Config, corrupt: list[CorruptInput]
) -> list[CorruptInput]:
    """The unreadable log files (or JSON lines) `scan_ahead` found. With `on_corrupt: fail` the
    first one stops the run here, before anything is computed or published."""
    source = config.inputs.logs()
    stop_on_corrupt(source, corrupt, "nothing was published")
    for item in corrupt:
        log.warning("quarantined, its days fail readable_inputs: %s", item.describe())
    warn_undated(undated_rows(spark, source))
    return corrupt


def warn_undated(rows: int) -> None:
    if rows:
        log.warning(
            "%d row(s) of the served logs have no usable served_at and no date partition to "
            "place them by: no day can count them (they are in no table)",
            rows,
        )


def _log_progress(
    summary: RunSummary,
    days: list[DayResult],
    total_days: int,
    chunk_began: float,
    began: float,
) -> None:
    """A chunk written: a record per day for the log, one line for the terminal."""
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
    held = [d.metric_date for d in days if not d.published]
    published = len(days) - len(held)
    queries = sum(d.queries for d in days)
    eta_text = f", ETA {duration(eta)}" if done < total_days else ""
    say(
        log,
        f"{span_text(days[0].metric_date, days[-1].metric_date)}: {published} day(s) published"
        + (f", {len(held)} held back ({days_text(held)})" if held else "")
        + f", {queries:,} queries in {duration(seconds)} | {done}/{total_days} days done, "
        f"{rate:.2f} days/s{eta_text}",
        published=published,
        held=len(held),
        queries=queries,
        chunk_seconds=round(seconds, 3),
        days_done=done,
        days_total=total_days,
    )


PROGRESS_SECONDS = 15.0
"""The longest the terminal stays silent while a chunk computes, in its first minute; later
the silence may grow to half the chunk's time so far, so that a long chunk says a few lines,
not hundreds."""


class Progress:
    """A line on the terminal while chunks compute and write: the oldest chunk not yet said to be
    written (a chunk's writes overlap the next chunk's main pass, so its lines come first and
    the days keep their order), which of the run's phases are running, how long since that
    chunk began; every PROGRESS_SECONDS since the last line said."""

    def __init__(self, phases: Phases, every: float = PROGRESS_SECONDS) -> None:
        self._phases = phases
        self._every = every
        self._lock = threading.Lock()
        self._chunks: list[tuple[str, float]] = []  # (label, began), oldest first
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def now(self, label: str, began: float) -> None:
        """A chunk begins to compute."""
        with self._lock:
            self._chunks.append((label, began))

    def written(self) -> None:
        """The oldest chunk was said to be written: the lines go on with the next, after their
        full interval."""
        with self._lock:
            if self._chunks:
                self._chunks.pop(0)
            self._last = time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                if not self._chunks:
                    continue
                label, began = self._chunks[0]
                now = time.monotonic()
                elapsed = now - began
                if now - self._last < max(self._every, elapsed / 2):
                    continue
                self._last = now
            running = self._phases.running()[-2:]
            doing = "; ".join(running) if running else "computing"
            say(log, f"  {label}: {doing}, {duration(elapsed)}", progress=label)
