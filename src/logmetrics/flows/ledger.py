"""The `job_runs` ledger: which days are done, from which inputs, with which config and code.

Append-only (appends never conflict between concurrent runs): a `started` row per day when the
run begins it, and a `published`, `held`, `failed` or `interrupted` row once the day is done or
the run stopped. Each row records the day's own inputs (`inputs.days`: its log files and the
cluster table's state), the config fingerprint, and why the day was computed. A day is computed
again exactly when its latest finished row is `failed` or `interrupted` (or it has none: a kill
before the write), or when its log files, the
cluster table or the config differ from that row's (`reason_to_compute`), so a resumed backfill
redoes nothing that was published, and late rows restate just the days they belong to.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from logmetrics import __version__
from logmetrics.config import Config, OutputConfig
from logmetrics.inputs.days import DayInputs
from logmetrics.schemas import JOB_RUNS, rows_frame
from logmetrics.tables import delta_rs
from logmetrics.tables.catalog import (
    JOB_RUNS_TABLE,
    ROWS_KEPT,
    RunStamp,
    append,
    read_table,
    recent_commits,
    table_ref,
)

STARTED, PUBLISHED, HELD, FAILED = "started", "published", "held", "failed"
INTERRUPTED = "interrupted"  # the run was stopped by a signal before the day was published
UNFINISHED = frozenset({STARTED, FAILED, INTERRUPTED})
"""Statuses after which a day's last computation does not stand: it is computed again."""
NEW, INPUTS_CHANGED, CLUSTERS_CHANGED = "new", "inputs_changed", "clusters_changed"
CONFIG_CHANGED, FORCED = "config_changed", "forced"


@dataclass(frozen=True)
class Previous:
    """A day's latest ledger row that says how it ended (or its latest `started` row, when the
    run that began it never finished it)."""

    status: str
    config_fingerprint: str
    inputs_fingerprint: str
    logs_fingerprint: str | None  # null in rows of logmetrics before per-day inputs
    clusters_fingerprint: str | None


@dataclass(frozen=True)
class LedgerRead:
    """What a run read of the ledger: each day's `Previous`, and the ledger's Delta version
    when the read began (None: no ledger yet); the read saw every commit up to it."""

    previous: dict[dt.date, Previous]
    version: int | None


def read_ledger(spark: SparkSession, output: OutputConfig, dates: Sequence[dt.date]) -> LedgerRead:
    """`previous_runs` of `dates`, and the ledger's version just before it (`LedgerRead`)."""
    newest = recent_commits(spark, output, JOB_RUNS_TABLE, limit=1)
    version = newest[0].version if newest else None
    return LedgerRead(previous_runs(spark, output, dates), version)


def started_commit(spark: SparkSession, output: OutputConfig, run_id: str) -> StartedAt:
    """The ledger's Delta version holding the run's `started` rows (`record` marks its
    commits; when a burst of later commits hides it, the oldest of them: a later version), and
    whether a commit before it may have written rows (`StartedAt`)."""
    commits = recent_commits(spark, output, JOB_RUNS_TABLE)
    version = next(
        (
            commit.version
            for commit in commits
            if (mark := _mark(commit.user_metadata)) is not None and mark[:2] == (run_id, STARTED)
        ),
        commits[-1].version,
    )
    earlier = [commit for commit in commits if commit.version < version]
    rows_before = len(earlier) < version or any(c.operation not in ROWS_KEPT for c in earlier)
    return StartedAt(version, rows_before)


@dataclass(frozen=True)
class StartedAt:
    """Where a run's `started` rows are in the ledger: their version, and whether any commit
    before it may have written rows (another run's `started` rows, say); False only when every
    earlier commit was seen and changed no row (the ledger's creation: ROWS_KEPT)."""

    version: int
    rows_before: bool


BEGUN_SINCE_COMMITS = 50
"""The ledger commits `begun_since` reads back; beyond them it assumes the days begun."""


def begun_since(
    spark: SparkSession,
    output: OutputConfig,
    version: int,
    dates: Sequence[dt.date],
    run_id: str,
) -> dict[dt.date, str]:
    """The days of `dates` another run began (its `started` rows) in a ledger commit after
    `version`, each with that run's id (the latest such run)."""
    commits = recent_commits(spark, output, JOB_RUNS_TABLE, limit=BEGUN_SINCE_COMMITS)
    if commits and commits[-1].version > version + 1:  # commits unseen: any may have begun them
        return {day: "(not known: too many ledger commits since)" for day in dates}
    begun: dict[dt.date, str] = {}
    wanted = set(dates)
    for commit in reversed(commits):
        mark = _mark(commit.user_metadata)
        if commit.version <= version or mark is None:
            continue
        run, status, days = mark
        if run != run_id and status == STARTED:
            begun.update((day, run) for day in days if day in wanted)
    return begun


def _mark(user_metadata: str | None) -> tuple[str, str, tuple[dt.date, ...]] | None:
    """What a ledger commit of `record` says of itself: the run, the status, the days."""
    try:
        fields = json.loads(user_metadata or "")
        days = tuple(dt.date.fromisoformat(d) for d in fields.get("days", []))
        return str(fields["logmetrics_run"]), str(fields["status"]), days
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def previous_runs(
    spark: SparkSession, output: OutputConfig, dates: Sequence[dt.date]
) -> dict[dt.date, Previous]:
    """Each day of `dates` the ledger has a row for: its latest finished row, or, without one,
    its latest `started` row. One read of the ledger, one row per day to the driver."""
    runs = read_table(spark, output, JOB_RUNS_TABLE)
    if runs is None or not dates:
        return {}
    latest = Window.partitionBy("metric_date").orderBy(
        (F.col("status") != STARTED).desc(),
        F.desc_nulls_last("finished_at"),
        F.desc("started_at"),
        F.desc("run_id"),
    )
    rows = (
        runs.where(F.col("metric_date").between(F.lit(min(dates)), F.lit(max(dates))))
        .withColumn("nth", F.row_number().over(latest))
        .where(F.col("nth") == 1)
        .select(
            "metric_date",
            *[
                F.col(f.name) if f.name in runs.columns else F.lit(None).alias(f.name)
                for f in fields(Previous)
            ],
        )
        .collect()
    )
    wanted = set(dates)
    return {
        row.metric_date: Previous(*[row[f.name] for f in fields(Previous)])
        for row in rows
        if row.metric_date in wanted
    }


def previous_runs_without_spark(
    output: OutputConfig, dates: Sequence[dt.date]
) -> dict[dt.date, Previous] | None:
    """`previous_runs` read with delta-rs, before Spark starts: the same rows, chosen by the
    same order; None when the ledger cannot be read that way (catalog tables, a store or a
    table delta-rs has no reader for: `tables.delta_rs`)."""
    location = table_ref(output, JOB_RUNS_TABLE).location
    if location is None or not dates:
        return None
    try:
        table = delta_rs.open_table(location)
    except delta_rs.NoReader:
        return None
    if table is None:
        return {}
    wanted = [f.name for f in fields(Previous)]
    present = set(table.schema().to_arrow().names)
    order = ["status", "finished_at", "started_at", "run_id"]
    columns = ["metric_date", *order, *(c for c in wanted if c in present and c not in order)]
    bounds = [("metric_date", ">=", min(dates)), ("metric_date", "<=", max(dates))]
    rows = delta_rs.read_rows(table, location, columns, bounds).to_pylist()
    latest: dict[dt.date, dict[str, Any]] = {}
    for row in rows:
        day = row["metric_date"]
        if day not in latest or _later(row, latest[day]):
            latest[day] = row
    keep = set(dates)
    return {
        day: Previous(**{name: row.get(name) for name in wanted})  # type: ignore[arg-type]
        for day, row in latest.items()
        if day in keep
    }


def _later(row: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether `row` is ahead of `other` in `previous_runs`' order: a finished status first,
    then the latest finished_at (nulls last), started_at, run_id."""

    def key(r: Mapping[str, Any]) -> tuple[Any, ...]:
        finished = r["finished_at"]
        return (
            r["status"] != STARTED,
            finished is not None,
            finished or dt.datetime.min,
            r["started_at"] or dt.datetime.min,
            r["run_id"] or "",
        )

    return key(row) > key(other)


def reason_to_compute(
    previous: Previous | None, current: DayInputs, config_fingerprint: str, forced: bool
) -> str | None:
    """Why a day must be computed, or None when its last computation stands: `new` without a
    standing one (never finished, `failed` or `interrupted`), else what changed since (the
    config, the cluster table, the day's log files), else `forced` when asked to, else
    nothing."""
    if previous is None or previous.status in UNFINISHED:
        return NEW
    if previous.config_fingerprint != config_fingerprint:
        return CONFIG_CHANGED
    if previous.logs_fingerprint is None:  # a row from before per-day inputs: compare the whole
        return None if previous.inputs_fingerprint == current.fingerprint else INPUTS_CHANGED
    if previous.clusters_fingerprint != current.clusters:
        return CLUSTERS_CHANGED
    if previous.logs_fingerprint != current.logs:
        return INPUTS_CHANGED
    return FORCED if forced else None


def record(
    spark: SparkSession,
    config: Config,
    stamp: RunStamp,
    entries: Iterable[tuple[dt.date, str, dict[str, int] | None]],
    inputs: Mapping[dt.date, DayInputs],
    reasons: Mapping[dt.date, str],
    finished_at: dt.datetime | None = None,
    error: str | None = None,
    errors: Mapping[dt.date, str] | None = None,
) -> None:
    """Append one ledger row per (date, status, counts) of the run `stamp` names, with the
    day's inputs and the reason it was computed (`error`: a failed day's one line; `errors`:
    a day's own, such as the blocking checks that held it back)."""
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
            inputs[day].fingerprint,
            config.fingerprint(),
            __version__,
            reasons[day],
            inputs[day].logs,
            inputs[day].files,
            inputs[day].clusters,
            (errors or {}).get(day, error),
        )
        for day, status, counts in entries
    ]
    statuses = {row[2] for row in rows}
    # The commit says whose rows it holds, of which days: `started_commit` finds the run's
    # `started` commit, `begun_since` the other runs' that began the same days.
    marked = {
        "logmetrics_run": stamp.run_id,
        "status": ",".join(sorted(statuses)),
        "days": sorted({row[1].isoformat() for row in rows}),
    }
    append(
        spark,
        rows_frame(spark, rows, JOB_RUNS),
        config.output,
        JOB_RUNS_TABLE,
        json.dumps(marked, separators=(",", ":")),
    )
