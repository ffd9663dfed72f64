"""The state of the inputs each day is computed from, so that a day is computed again exactly
when its own inputs changed.

A day's state is the set of log files holding its rows (path, size and modification time; for a
Delta table its data files, named uniquely by the commit that wrote them), the unreadable inputs
that may hold its rows, and the cluster table's state (its Delta version, or its file listing).
One narrow pass over the range finds every day's files (`rules.per_request.day_file_states`:
`served_at` and the files' metadata only, date partitions pruned), so a new day's files, or late
rows landing in an old day's partition, change only the days whose rows they hold.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from logmetrics.config import Config
from logmetrics.rules.per_request import day_file_states
from logmetrics.tables.file_scan import CorruptInput
from logmetrics.tables.sources import read_served_logs


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
    """Every day of `dates` (consecutive or not) and its inputs' state, from one narrow pass over
    the logs of dates[0]..dates[-1]; a day without rows has the state of an empty file set."""
    if not dates:
        return {}
    logs_df = read_served_logs(
        spark,
        config.inputs.logs(),
        min(dates),
        max(dates),
        skip_files=[c.file for c in corrupt if c.line is None],
    )
    found = {row.metric_date: row for row in logs_df.transform(day_file_states).collect()}
    states = {}
    for day in dates:
        row = found.get(day)
        unreadable = sorted(f"{c.file}|{c.line}" for c in corrupt if day in c.days([day]))
        logs = _hash("\n".join([row.files_fingerprint if row else "", *unreadable]))
        states[day] = DayInputs(logs, int(row.input_files) if row else 0, clusters)
    return states


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
