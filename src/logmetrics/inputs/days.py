"""Which log files hold each day's rows, and the state of a day's inputs the ledger records, as
far as the files themselves say it, without Spark or PySpark: Parquet files placed by their
footers (`inputs.footers`), JSON lines by their served_at text (`inputs.json_lines`). Where
they cannot say, the run's narrow pass (`inputs.narrow_pass`) reads the rows.

A day's state is the set of log files holding its rows (path, size and modification time; for
a Delta table its data files, named uniquely by the commit that wrote them), the unreadable
inputs that may hold its rows, and the cluster table's state (its Delta version, or its file
listing). A new day's files, or late rows landing in an old day's partition, change only the
days whose rows they hold.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from logmetrics.config import Config, ServedLogsInput
from logmetrics.inputs.damaged import CorruptInput
from logmetrics.inputs.footers import footer_days
from logmetrics.inputs.json_lines import json_days

NO_LOG_FILES = "no log file holds a row of it"
"""Why a day is not ready when no ready marker is configured (`inputs.served_logs`)."""


@dataclass(frozen=True)
class DayFiles:
    """The log files holding rows of one day, as `logmetrics ready` judges it without a
    marker."""

    files: int
    rows: int | None  # of it (JSON lines) or in its files (Parquet footers); None: not read
    by_lines: bool = False  # rows counted from the lines' served_at, not the files' footers


def footer_day_files(
    source: ServedLogsInput, day: dt.date, skip_files: Collection[str] = ()
) -> DayFiles | None:
    """`day`'s files, but `skip_files`, from the Parquet footers alone (`inputs.footers`), or
    None when the footers cannot place every file that may hold its rows."""
    footers = footer_days(source, day, day, skip_files=skip_files)
    if footers is None or footers.unplaced:
        return None
    return DayFiles(len(footers.states.get(day, [])), footers.rows.get(day, 0))


def json_day_files(
    source: ServedLogsInput, day: dt.date, skip_files: Collection[str] = ()
) -> tuple[DayFiles, list[CorruptInput]] | None:
    """`day`'s files, but `skip_files`, and the lines of them that do not parse, from the JSON
    lines' served_at text (`inputs.json_lines`); None when they are not JSON lines read here,
    or a file of them cannot be read without Spark."""
    found = json_days(source, day, day, skip_files=skip_files)
    if found is None or found.unread:
        return None
    bad = [line for line in found.bad_lines if line.days([day])]
    return DayFiles(len(found.files.get(day, [])), found.rows.get(day, 0), by_lines=True), bad


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
