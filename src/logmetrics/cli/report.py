"""`logmetrics report`: the published tables rendered as figures and one HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path

from logmetrics.cli.arguments import check_range, config_arguments, date
from logmetrics.cli.common import command_config, spark_for


def add_report(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report", help="render figures and an HTML page from the published tables"
    )
    config_arguments(report)
    report.add_argument("--start", type=date, help="first date (default: the table's first)")
    report.add_argument("--end", type=date, help="last date (default: the table's last)")
    report.add_argument("--out", required=True, help="output directory (PNGs and index.html)")
    report.set_defaults(handler=report_command)


def report_command(args: argparse.Namespace) -> int:
    """The report of the range; a range with nothing published (or no daily table) is an
    `InputError` like `alerts`', said before Spark starts where the table's files can say."""
    check_range(args.start, args.end)
    config = command_config(args)
    from logmetrics.report import load_report_data, render
    from logmetrics.tables.catalog import DAILY_TABLE, check_rows_without_spark

    check_rows_without_spark(config.output, DAILY_TABLE, args.start, args.end)

    data = load_report_data(spark_for(config), config, args.start, args.end)
    index = render(data, Path(args.out))
    print(f"report: {index}")
    return 0
