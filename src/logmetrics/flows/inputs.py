"""The state of the inputs each day is computed from, so that a day is computed again exactly
when its own inputs changed.

A day's state is the set of log files holding its rows (path, size and modification time; for a
Delta table its data files, named uniquely by the commit that wrote them), the unreadable inputs
that may hold its rows, and the cluster table's state (its Delta version, or its file listing).
Local Parquet files are placed on their days by their footers' served_at statistics
(`tables.footers`) without reading a row; the rest (Delta, JSON, remote paths, a file whose
footer cannot say) by one narrow pass over the range (`rules.per_request.day_file_states`:
`served_at` and the files' metadata only, date partitions pruned). Either way a new day's
files, or late rows landing in an old day's partition, change only the days whose rows they
hold.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from logmetrics.config import Config, ServedLogsInput
from logmetrics.rules.per_request import day_file_states
from logmetrics.tables.file_scan import CorruptInput
from logmetrics.tables.footers import footer_days
from logmetrics.tables.sources import read_served_logs

NO_LOG_FILES = "no log file holds a row of it"
"""Why a day is not ready when no ready marker is configured (`inputs.served_logs`)."""


@dataclass(frozen=True)
class DayFiles:
    """The log files holding rows of one day, as `logmetrics ready` judges it without a
    marker."""

    files: int
    rows: int | None  # rows in those files, from their footers (None: not read from footers)


def footer_day_files(
    source: ServedLogsInput, day: dt.date, skip_files: Collection[str] = ()
) -> DayFiles | None:
    """`day`'s files, but `skip_files`, from the Parquet footers alone (`tables.footers`), or
    None when the footers cannot place every file that may hold its rows."""
    footers = footer_days(source, day, day, skip_files=skip_files)
    if footers is None or footers.unplaced:
        return None
    return DayFiles(len(footers.states.get(day, [])), footers.rows.get(day, 0))


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


@dataclass(frozen=True)
class DayInputs:
    """What one day is computed from, as the ledger records it."""

    logs: str  # hash of the day's log files (and of its unreadable inputs)
    files: int  # log files holding the day's rows
    clusters: str  # the cluster table's state: v<version>, or a hash of its listing

    @property
    def fingerprint(self) -> str:
        """Both states in one hash: `job_runs.inputs_fingerprint`."""
        return _hash(f"{self.logs}|{self.clusters}")


def day_inputs(
    spark: SparkSession,
    config: Config,
    clusters: str,
    dates: Sequence[dt.date],
    corrupt: Sequence[CorruptInput],
) -> dict[dt.date, DayInputs]:
    """Every day of `dates` (consecutive or not) and its inputs' state, over the logs of
    dates[0]..dates[-1]: local Parquet files placed on their days by their footers
    (`tables.footers`), the others by one narrow pass; a day without rows has the state of an
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


def footer_day_inputs(
    config: Config, clusters: str, dates: Sequence[dt.date], corrupt: Sequence[CorruptInput]
) -> dict[dt.date, DayInputs] | None:
    """`day_inputs` from the footers alone, without Spark; None when they cannot place every
    file of the days (the logs are not Parquet on a local path or S3, or a file's footer cannot
    say)."""
    if not dates:
        return {}
    unreadable = [c.file for c in corrupt if c.line is None]
    footers = footer_days(config.inputs.logs(), min(dates), max(dates), skip_files=unreadable)
    if footers is None or footers.unplaced:
        return None
    return day_states(dates, footers.states, corrupt, clusters)


def day_states(
    dates: Sequence[dt.date],
    files: Mapping[dt.date, Sequence[str]],
    corrupt: Sequence[CorruptInput],
    clusters: str,
) -> dict[dt.date, DayInputs]:
    """Each day's `DayInputs`: its files' states (`path|size|mtime`), the unreadable inputs that
    may hold its rows, and the cluster table's state; a day without rows has the state of an
    empty file set."""
    states = {}
    for day in dates:
        day_files = files.get(day, [])
        unreadable = sorted(f"{c.file}|{c.line}" for c in corrupt if day in c.days([day]))
        listing = _sha256("\n".join(sorted(day_files))) if day_files else ""
        logs = _hash("\n".join([listing, *unreadable]))
        states[day] = DayInputs(logs, len(day_files), clusters)
    return states


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _hash(text: str) -> str:
    return _sha256(text)[:16]
