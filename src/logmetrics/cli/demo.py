"""`logmetrics generate` (synthetic served logs and a cluster table) and `logmetrics demo` (a
month of it, backfilled and printed)."""

from __future__ import annotations

import argparse
from pathlib import Path

from logmetrics.cli.arguments import config_arguments, date, planted_change, positive_int
from logmetrics.cli.common import command_config
from logmetrics.cli.compute import finish


def add_generate(commands: argparse._SubParsersAction) -> None:
    generate = commands.add_parser("generate", help="write synthetic served logs and clusters")
    generate.add_argument("--out", required=True, help="output directory")
    generate.add_argument("--start", type=date, required=True, help="first date, YYYY-MM-DD")
    _traffic_arguments(generate, "days of traffic (default 30)")
    generate.add_argument(
        "--seed", type=int, default=7, help="the generator's seed: the same seed, the same data"
    )
    generate.add_argument(
        "--list-length",
        type=positive_int,
        default=10,
        help="results in each served list, the largest k it can measure (default 10)",
    )
    generate.add_argument(
        "--clean", action="store_true", help="no awkward rows (duplicates, nulls, ...)"
    )
    generate.add_argument(
        "--clusters-format",
        choices=["delta", "parquet"],
        default="delta",
        help="delta: the cluster table at <out>/clusters as Delta, beside its Parquet files "
        "in <out>/clusters_parquet; parquet: those files only (default delta)",
    )
    generate.add_argument(
        "--weekly-amplitude",
        type=float,
        default=0.0,
        help="a weekly season of the repeat probability (e.g. 0.04; docs/alerts.md)",
    )
    generate.add_argument(
        "--plant",
        type=planted_change,
        action="append",
        default=[],
        metavar="DATE:SHIFT[:SEGMENT=VALUE]",
        help="plant a change: the repeat probability moves by SHIFT on DATE, in all traffic or "
        "one segment value (2026-10-29:0.12:surface=app is a regression); repeatable",
    )
    generate.set_defaults(handler=generate_command)


def add_demo(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="generate a month of traffic, backfill it, print it")
    config_arguments(demo)
    _traffic_arguments(
        demo,
        "days of traffic from 2026-10-01 (default 30; from 23 days on, the last but one has a "
        "planted regression)",
    )
    demo.set_defaults(handler=demo_command)


def _traffic_arguments(parser: argparse.ArgumentParser, days: str) -> None:
    """--days (its help: `days`) and --queries-per-day: how much traffic is generated."""
    parser.add_argument("--days", type=positive_int, default=30, help=days)
    parser.add_argument(
        "--queries-per-day",
        type=positive_int,
        default=2000,
        help="served requests a day (default 2000)",
    )


def generate_command(args: argparse.Namespace) -> int:
    from logmetrics.demo import generate_dataset

    generate_dataset(
        out=Path(args.out).resolve(),  # Spark's working directory need not be ours
        start=args.start,
        days=args.days,
        queries_per_day=args.queries_per_day,
        seed=args.seed,
        list_length=args.list_length,
        dirty=not args.clean,
        clusters_format=args.clusters_format,
        weekly_amplitude=args.weekly_amplitude,
        planted=args.plant,
    )
    return 0


def demo_command(args: argparse.Namespace) -> int:
    from logmetrics.demo import run_demo

    config = command_config(args)
    summary = run_demo(
        config, days=args.days, queries_per_day=args.queries_per_day, run_id=args.run_id
    )
    finish(config, summary, args)
    return 0
