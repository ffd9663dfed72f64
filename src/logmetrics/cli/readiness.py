"""`logmetrics ready`, and the not-ready answers `run` and `backfill` share: which days' logs
have not all landed (a missing ready marker; without one, no file holding a row of the day),
told from the file system, the Parquet footers and the JSON lines' served_at text before Spark
starts (and without PySpark installed) where they can say."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from logmetrics.cli.arguments import config_arguments, date
from logmetrics.cli.common import command_config, spark_for, yesterday
from logmetrics.config import Config
from logmetrics.errors import InputNotReady

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from logmetrics.inputs.damaged import CorruptInput
    from logmetrics.inputs.days import DayFiles

log = logging.getLogger("logmetrics")


def add_ready(commands: argparse._SubParsersAction) -> None:
    ready = commands.add_parser(
        "ready", help="whether a day's logs have all landed (exit 0, or 5 when not)"
    )
    config_arguments(ready)
    ready.add_argument("--date", type=date, help="UTC date to ask about (default: yesterday)")
    ready.set_defaults(handler=ready_command)


def ready_command(args: argparse.Namespace) -> int:
    day = args.date or yesterday()
    config = command_config(args)
    from logmetrics.inputs.files import check_inputs_exist
    from logmetrics.inputs.json_lines import check_json_source

    source = config.inputs.logs()
    check_inputs_exist(config.inputs)
    check_json_source(source)  # a misspelt column of JSON lines, said as a run would say it
    missing = missing_markers(config, [day])
    if missing:
        raise InputNotReady(not_ready_line(missing, "its logs have not all landed"))
    if source.ready_marker is not None:
        print(f"{day}: ready")
        return 0
    from logmetrics.inputs.days import NO_LOG_FILES

    files, unreadable = _day_files(config, day)
    if files.files == 0 and not unreadable and not source.allow_empty_days:
        raise InputNotReady(
            not_ready_line(
                {day: NO_LOG_FILES}, "no ready marker is configured, so its files were judged"
            )
        )
    counted = "of it in them" if files.by_lines else "in them by their footers"
    rows = "" if not files.rows else f", {files.rows:,} rows {counted}"
    set_aside = (
        f"; {len(unreadable)} input(s) that may hold rows of it cannot be read and go to the "
        f"quarantine (inputs.served_logs.on_corrupt): {unreadable[0].describe()}"
        if unreadable
        else ""
    )
    print(
        f"{day}: ready (no ready marker configured: judged by its files, {files.files} file(s) "
        f"hold rows of it{rows}{set_aside})"
    )
    return 0


def _day_files(config: Config, day: dt.date) -> tuple[DayFiles, list[CorruptInput]]:
    """The log files holding rows of `day`, and those (or the JSON lines) that may but cannot
    be read. From the files alone, without Spark or PySpark, where they can say: Parquet
    footers, JSON lines' served_at text; a line that does not parse stops here under
    `on_corrupt: fail` (`run` would stop on it: waiting does not mend it) and is left out under
    `quarantine`. Else by a narrow pass of a Spark session, a file whose footer cannot place it
    first judged by the damaged-file scan."""
    from logmetrics.inputs.damaged import scan_needs_spark, stop_on_corrupt
    from logmetrics.inputs.days import footer_day_files, json_day_files

    source = config.inputs.logs()
    stopping = "a run stops on it: replace or remove it"
    found = footer_day_files(source, day)
    if found is not None:
        return found, []
    from_lines = json_day_files(source, day)
    if from_lines is not None:
        stop_on_corrupt(source, from_lines[1], stopping)
        return from_lines
    from logmetrics.flows.backfill import scan_ahead
    from logmetrics.inputs.narrow_pass import day_files

    unreadable = [] if scan_needs_spark(source) else scan_ahead(None, config, [day])
    unreadable = [c for c in unreadable if c.days([day])]
    stop_on_corrupt(source, unreadable, stopping)
    skipped = [c.file for c in unreadable]
    found = footer_day_files(source, day, skip_files=skipped) if unreadable else None
    if found is None:
        found = day_files(spark_for(config), config, day, skip_files=skipped)
    return found, unreadable


def missing_markers(
    config: Config, days: list[dt.date], spark: SparkSession | None = None
) -> dict[dt.date, str]:
    """The days whose ready marker is missing, each with why; a remote path starts (or uses)
    Spark to look."""
    from logmetrics.inputs.markers import missing_ready_markers, needs_spark_for_readiness

    source = config.inputs.logs()
    if spark is None and needs_spark_for_readiness(source):
        spark = spark_for(config)
    return {d: f"no {path}" for d, path in missing_ready_markers(source, days, spark).items()}


def without_files_by_footers(config: Config, days: Sequence[dt.date]) -> dict[dt.date, str]:
    """The days of `days` no log file holds a row of, when that makes them not ready (no ready
    marker configured, empty days not allowed), as local Parquet footers say it without Spark;
    a day they cannot judge (other formats, a remote path, a file they cannot place) is left to
    the run's narrow pass."""
    source = config.inputs.logs()
    if source.ready_marker is not None or source.allow_empty_days:
        return {}
    from logmetrics.inputs.days import NO_LOG_FILES, footer_day_files

    found = {day: footer_day_files(source, day) for day in days}
    return {d: NO_LOG_FILES for d, files in found.items() if files is not None and not files.files}


def not_ready_line(
    missing: dict[dt.date, str], what_happened: str, whole: tuple[dt.date, dt.date] | None = None
) -> str:
    """`input not ready: <the days>: <why>; <what happened>`, the days counted once: one
    reason for all of them (no log files), or the first day's marker and the others'. The days
    of `whole`, a range of more than one day, are `no day of <first>..<last> is ready`."""
    from logmetrics.console import days_text, span_text

    days = sorted(missing)
    reasons = {missing[d] for d in days}
    why = missing[days[0]]
    if len(days) > 1:
        why = (
            why.replace("a row of it", "a row of any of them")
            if len(reasons) == 1
            else f"{why}, nor the other days' markers"
        )
    named = days_text(days)
    if whole is not None and whole[0] != whole[1]:
        named = f"no day of {span_text(*whole)} is ready"
    return f"input not ready: {named}: {why}; {what_happened}"


def stop_if_not_ready(
    not_ready: Mapping[dt.date, str],
    required: Collection[dt.date],
    seen_only: Collection[dt.date],
) -> None:
    """A required day not ready: exit 5 before anything is computed. Days looked back on that
    are not ready are only left alone (a day with a marker is computed once it has one)."""
    stopping = {d: p for d, p in not_ready.items() if d in required}
    if stopping:
        raise InputNotReady(not_ready_line(stopping, "nothing was computed"))
    for day in sorted(d for d in not_ready if d in seen_only):
        log.warning("%s: %s, not looked back on", day, not_ready[day])
