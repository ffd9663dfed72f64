"""What a person reads on the terminal: each thing said once, apart from the structured log.

A run's human summary (progress while it computes, a line per chunk, each failing check and each
alert once, a closing line) is made of log records marked for the terminal by `say`. The CLI's
handlers print marked records plainly on stdout and unmarked warnings and errors on stderr;
the run's log file (or JSON on stderr, `--log-format json`) keeps every record, marked or not,
once, at its level. So nothing is both printed and logged to the terminal.
"""

from __future__ import annotations

import datetime as dt
import difflib
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

CONSOLE = "console"
"""The attribute `say` sets on a record that is a line of the human summary."""
RUN_LOG = "logmetrics_run_log"
"""The attribute marking the handler of the run's log file (on the root logger)."""


def say(logger: logging.Logger, message: str, level: int = logging.INFO, **fields: Any) -> None:
    """One line of the human summary (`message` already formatted), kept in the structured log
    with `fields` as the same event."""
    logger.log(level, message, extra={CONSOLE: True, "fields": fields}, stacklevel=2)


def is_console(record: logging.LogRecord) -> bool:
    return bool(getattr(record, CONSOLE, False))


def run_log(written: bool = False) -> str | None:
    """The run's log file, relative to the working directory when it lies under it: where a
    one-line error says its full trace is. None without one (JSON on stderr, or `spark.log_dir:
    null`), or, with `written`, before anything was written to it."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and getattr(handler, RUN_LOG, False):
            if written and handler.stream is None:
                return None
            relative = os.path.relpath(handler.baseFilename)
            return handler.baseFilename if relative.startswith("..") else relative
    return None


def duration(seconds: float) -> str:
    """`42s`, `3m07s`, `1h02m03s`: a wall time for people."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def span_text(first: dt.date, last: dt.date) -> str:
    """`2026-10-01..2026-10-30`, or `2026-10-30` for a range of one day."""
    return str(first) if first == last else f"{first}..{last}"


def days_text(days: Sequence[dt.date], most: int = 4) -> str:
    """`2026-10-01, 2026-10-03` or, for many days, `12 days from 2026-10-01 to 2026-10-30`."""
    ordered = sorted(days)
    if len(ordered) <= most:
        return ", ".join(map(str, ordered))
    return f"{len(ordered)} days from {ordered[0]} to {ordered[-1]}"


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """`; did you mean 'backfill'?` for a misspelt name (a command, a config key), from the
    names it could have been; empty when none is close."""
    close = difflib.get_close_matches(given, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
