"""`logmetrics alerts`: published days judged again against their baselines, from the daily
table alone; `--fail-on-alert` turns an alert into exit 4."""

from __future__ import annotations

import argparse
import datetime as dt
import logging

from logmetrics.cli.arguments import check_range, config_arguments, date, day_before_argument
from logmetrics.cli.common import check_outputs_reachable, command_config, now, spark_for, writing
from logmetrics.console import say, span_text
from logmetrics.errors import AlertsFired, ConfigError, InputError

log = logging.getLogger("logmetrics")


def add_alerts(commands: argparse._SubParsersAction) -> None:
    alerts = commands.add_parser(
        "alerts",
        help="judge published days against their baselines, from the published daily table",
    )
    config_arguments(alerts)
    alerts.add_argument("--start", type=date, help="first date, YYYY-MM-DD")
    alerts.add_argument("--end", type=date, help="last date, YYYY-MM-DD")
    day_before_argument(alerts)
    alerts.add_argument(
        "--fail-on-alert",
        action="store_true",
        help="exit 4 when any day of the range has an `alert` (improvements do not count)",
    )
    alerts.set_defaults(handler=alerts_command)


def alerts_range(args: argparse.Namespace) -> tuple[dt.date, dt.date]:
    """The days `alerts` judges: --start to --end, or the one day before --day-before."""
    if args.day_before is not None:
        if args.start is not None or args.end is not None:
            raise ConfigError("alerts: --day-before replaces --start and --end")
        return args.day_before, args.day_before
    if args.start is None or args.end is None:
        raise ConfigError("alerts: give --start and --end, or --day-before")
    check_range(args.start, args.end)
    return args.start, args.end


def alerts_command(args: argparse.Namespace) -> int:
    """Judge the range's published days; a range with none (or no daily table) is an
    `InputError` like `report`'s, said before Spark starts where the table's files can say."""
    start, end = alerts_range(args)
    config = command_config(args)
    from logmetrics.flows.alerts import announce, publish_alerts
    from logmetrics.flows.backfill import considered_days
    from logmetrics.tables.catalog import DAILY_TABLE, check_rows_without_spark, no_rows_line

    computed_at = now()
    days = considered_days(start, end)
    check_outputs_reachable(config)
    check_rows_without_spark(config.output, DAILY_TABLE, start, end)
    spark = spark_for(config)
    with writing(spark, config, args):
        rows, culprits = publish_alerts(spark, config, days, args.run_id, computed_at)
    judged = rows["metric_date"].nunique()
    if not judged:
        raise InputError(no_rows_line(DAILY_TABLE, start, end))
    alerts, improvements = announce(rows, culprits)
    span = span_text(start, end)
    say(log, f"{span}: {judged} day(s) judged, {alerts} alert(s), {improvements} improvement(s)")
    if alerts and args.fail_on_alert:
        raise AlertsFired(f"{alerts} alert(s) in {span} (--fail-on-alert)")
    return 0
