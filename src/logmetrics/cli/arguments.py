"""The argument types (a date, a positive integer, a planted change) and the options several
commands share (--config and --set, a range of days, --day-before)."""

from __future__ import annotations

import argparse
import datetime as dt
import re
from typing import Any

from logmetrics.cli.common import CONFIG_ENV, CONFIG_SEARCH
from logmetrics.errors import ConfigError

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        action="append",
        metavar="FILE",
        help="YAML config; repeat to layer files (later ones win). Default: "
        f"${CONFIG_ENV}, else the first of {', '.join(CONFIG_SEARCH)} that exists",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config key (value in YAML syntax); repeatable",
    )


def range_arguments(parser: argparse.ArgumentParser) -> None:
    """--start and --end, both required: an inclusive range of UTC days."""
    parser.add_argument("--start", type=date, required=True, help="first date, YYYY-MM-DD")
    parser.add_argument("--end", type=date, required=True, help="last date, YYYY-MM-DD")


def day_before_argument(parser: argparse._ActionsContainer) -> None:
    parser.add_argument(
        "--day-before",
        type=_day_before,
        metavar="YYYY-MM-DD",
        help="the day before this date: for a scheduler's trigger date (Databricks' "
        "{{job.trigger.time.iso_date}}), so every task of a run, and its repair, names one day",
    )


def _day_before(text: str) -> dt.date:
    day = date(text)
    if day == dt.date.min:
        raise argparse.ArgumentTypeError(f"{text!r} has no day before it")
    return day - dt.timedelta(days=1)


def check_range(start: dt.date | None, end: dt.date | None) -> None:
    if start is not None and end is not None and start > end:
        raise ConfigError(f"--start {start} is after --end {end}")


def date(text: str) -> dt.date:
    try:
        day = dt.date.fromisoformat(text) if _DATE.match(text) else None
    except ValueError:
        day = None
    if day is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)")
    if day == dt.date.max:  # a day's window ends at the next midnight, which does not exist
        raise argparse.ArgumentTypeError(f"{text!r} is after the last date a run can compute")
    return day


def planted_change(text: str) -> Any:
    from logmetrics.synthetic import PlantedChange

    day, _, rest = text.partition(":")
    shift, _, where = rest.partition(":")
    segment, _, value = where.partition("=")
    try:
        return PlantedChange(date(day), float(shift), segment or None, value if segment else None)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not DATE:SHIFT[:SEGMENT=VALUE] ({exc})"
        ) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value
