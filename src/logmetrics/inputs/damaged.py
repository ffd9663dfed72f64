"""Served-log inputs that cannot be read (a damaged file, a JSON line that does not parse), and
what `inputs.served_logs.on_corrupt` does with them: `fail` stops the command naming the first,
`quarantine` sets them aside. Found by the damaged-file scan (`inputs.scan`) or, for
`logmetrics ready`, by reading JSON lines (`inputs.json_lines`); no Spark here."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from logmetrics.config import ServedLogsInput
from logmetrics.errors import InputError

CORRUPT_LINE_SHOWN = 500
"""Characters of a corrupt line kept in the quarantine and in errors."""


@dataclass(frozen=True)
class CorruptInput:
    """A served-log file (or one line of a JSON file) that cannot be read."""

    file: str
    error: str
    partition_date: dt.date | None  # the date of its date partition; None: any day of the run
    line: str | None = None  # the line, for JSON; None: the whole file

    @property
    def reason(self) -> str:
        return "corrupt_line" if self.line is not None else "corrupt_file"

    def days(self, dates: Sequence[dt.date]) -> list[dt.date]:
        """The days of `dates` whose numbers it may have belonged to."""
        if self.partition_date is None:
            return list(dates)
        # A partition's rows may be served a day either side of its date (sources).
        near = {self.partition_date + dt.timedelta(days=d) for d in (-1, 0, 1)}
        return [d for d in dates if d in near]

    def raw(self) -> str:
        entry = {"file": self.file, "error": self.error}
        if self.line is not None:
            entry["line"] = self.line
        return json.dumps(entry, ensure_ascii=False)

    def describe(self) -> str:
        what = "a line of " if self.line is not None else ""
        shown = f": {self.line[:120]!r}" if self.line is not None else ""
        return f"{what}{self.file} cannot be read ({self.error}){shown}"


def scan_needs_spark(source: ServedLogsInput) -> bool:
    """Whether `scan_served_logs` needs a session for these logs (JSON lines, OTLP's too)."""
    return source.data_format in ("json", "otlp") and not source.by_catalog


def redacted(line: str) -> str:
    """A line of spans that cannot be read, as the quarantine and the messages keep it: its hash
    and length, never its text (spans hold what users asked and what documents say)."""
    digest = hashlib.sha256(line.encode("utf-8", errors="replace")).hexdigest()[:16]
    return f"sha256 {digest}, {len(line)} characters"


def not_otlp(what: str, file: str) -> str:
    """The line for a file under `format: otlp` that holds no OTLP/JSON export."""
    return (
        f"{what}: file {file} is not OTLP/JSON: each line must be an ExportTraceServiceRequest "
        '({"resourceSpans": [...]}), as an OpenTelemetry Collector\'s file exporter writes it'
    )


def stop_on_corrupt(
    source: ServedLogsInput, corrupt: Sequence[CorruptInput], consequence: str
) -> None:
    """With `on_corrupt: fail`, an InputError naming the first unreadable log file (or JSON
    line) of `corrupt` and the `consequence`; nothing with `quarantine`."""
    if corrupt and source.on_corrupt == "fail":
        more = f" (and {len(corrupt) - 1} more)" if len(corrupt) > 1 else ""
        raise InputError(
            f"{source.described}: {corrupt[0].describe()}{more}; {consequence} "
            "(inputs.served_logs.on_corrupt: quarantine computes the rest)"
        )
