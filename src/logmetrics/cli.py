"""Command line: argument parsing, logging, exit codes. The only place that knows "yesterday".

    logmetrics run      --config FILE [--date YYYY-MM-DD]        one day (default: yesterday, UTC),
                                                   and restate the nightly.lookback_days before it
                        [--day-before YYYY-MM-DD]                 or the day before a trigger date
    logmetrics backfill --config FILE --start D1 --end D2        an inclusive range, in chunks
    logmetrics ready    --config FILE [--date YYYY-MM-DD]        have the day's logs all landed?
    logmetrics generate --out DIR --start D --days N --queries-per-day Q --seed S
    logmetrics report   --config FILE [--start D1 --end D2] --out DIR   PNGs + index.html
    logmetrics demo                                              generate, backfill, print, report
    logmetrics evaluate --config FILE                            judged runs: recall, nDCG, clusters
    logmetrics maintain --config FILE [--no-vacuum]              OPTIMIZE and VACUUM every table
    logmetrics alerts   --config FILE --start D1 --end D2 [--fail-on-alert]
                                                   re-judge published days against their baselines
                        (or --day-before D: the one day before D)
    logmetrics views    --config FILE                            the BI views; table properties

Exit status: 0 success, 1 bad input or a failed run, 2 bad config or command line, 3 a day
failed a blocking data-quality check, 4 `alerts --fail-on-alert` found an alert in its range,
5 a day's input is not ready (its `inputs.served_logs.ready_marker` is missing).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logmetrics.config import Config, load_config
from logmetrics.errors import (
    AlertsFired,
    ConfigError,
    InputNotReady,
    LogmetricsError,
    QualityGateFailed,
    failure_line,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("logmetrics")

DEMO_CONFIG = "conf/local.yaml"
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def entry_point() -> None:
    """The `logmetrics` console script and the Databricks wheel task's entry point: a non-zero
    status leaves as SystemExit, so it fails the task even where the caller ignores the value
    the function returns (a `python_wheel_task` calls the entry point's function directly)."""
    status = main()
    if status:
        raise SystemExit(status)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run and report one command; returns the exit status."""
    started = time.time(), time.perf_counter()
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        args.started = started
        args.run_id = uuid.uuid4().hex[:12]
        _setup_logging(args.log_level, args.log_format, args.run_id)
        return int(args.handler(args))
    except LogmetricsError as exc:
        print(f"logmetrics: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("logmetrics: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # an unexpected failure: one line here, the details in the log
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException

        if isinstance(exc, PySparkException | Py4JJavaError):
            print(f"logmetrics: error: Spark failed: {failure_line(exc)}", file=sys.stderr)
            log.debug("Spark failure", exc_info=True)
            return 1
        raise


def _parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="logmetrics", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one JSON object per line, for log shippers",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)

    run = commands.add_parser("run", help="compute one day (the nightly job)")
    _config_arguments(run)
    day = run.add_mutually_exclusive_group()
    day.add_argument("--date", type=_date, help="UTC date to compute (default: yesterday, UTC)")
    _day_before_argument(day)
    run.set_defaults(handler=_cmd_run)

    ready = commands.add_parser(
        "ready", help="whether a day's logs have all landed (exit 0, or 5 when not)"
    )
    _config_arguments(ready)
    ready.add_argument("--date", type=_date, help="UTC date to ask about (default: yesterday)")
    ready.set_defaults(handler=_cmd_ready)

    backfill = commands.add_parser("backfill", help="compute an inclusive range of days")
    _config_arguments(backfill)
    _range_arguments(backfill)
    backfill.add_argument(
        "--force",
        action="store_true",
        help="recompute days the run ledger has as computed from the same inputs and config",
    )
    backfill.set_defaults(handler=_cmd_backfill)

    generate = commands.add_parser("generate", help="write synthetic served logs and clusters")
    generate.add_argument("--out", required=True, help="output directory")
    generate.add_argument("--start", type=_date, required=True, help="first date, YYYY-MM-DD")
    generate.add_argument("--days", type=_positive_int, default=30)
    generate.add_argument("--queries-per-day", type=_positive_int, default=2000)
    generate.add_argument("--seed", type=int, default=7)
    generate.add_argument("--list-length", type=_positive_int, default=10)
    generate.add_argument(
        "--clean", action="store_true", help="no awkward rows (duplicates, nulls, ...)"
    )
    generate.add_argument("--clusters-format", choices=["delta", "parquet"], default="delta")
    generate.add_argument(
        "--weekly-amplitude",
        type=float,
        default=0.0,
        help="a weekly season of the repeat probability (e.g. 0.04; docs/alerts.md)",
    )
    generate.add_argument(
        "--plant",
        type=_planted_change,
        action="append",
        default=[],
        metavar="DATE:SHIFT[:SEGMENT=VALUE]",
        help="plant a change: the repeat probability moves by SHIFT on DATE, in all traffic or "
        "one segment value (2026-10-29:0.12:surface=app is a regression); repeatable",
    )
    generate.set_defaults(handler=_cmd_generate)

    report = commands.add_parser(
        "report", help="render figures and an HTML page from the published tables"
    )
    _config_arguments(report)
    report.add_argument("--start", type=_date, help="first date (default: the table's first)")
    report.add_argument("--end", type=_date, help="last date (default: the table's last)")
    report.add_argument("--out", required=True, help="output directory (PNGs and index.html)")
    report.set_defaults(handler=_cmd_report)

    evaluate = commands.add_parser(
        "evaluate", help="judged evaluation of retrieval runs, and a comparison of two"
    )
    _config_arguments(evaluate)
    evaluate.set_defaults(handler=_cmd_evaluate)

    maintain = commands.add_parser(
        "maintain",
        help="compact the tables' small files (OPTIMIZE) and delete files no recent version "
        "reads (VACUUM)",
    )
    _config_arguments(maintain)
    maintain.add_argument(
        "--vacuum-retain-hours",
        type=_positive_int,
        default=VACUUM_RETAIN_HOURS,
        help=f"keep the files of the last N hours' versions (default {VACUUM_RETAIN_HOURS}, "
        "Delta's own minimum: readers and time travel within it stay safe)",
    )
    maintain.add_argument("--no-vacuum", action="store_true", help="compact only")
    maintain.set_defaults(handler=_cmd_maintain)

    alerts = commands.add_parser(
        "alerts",
        help="judge published days against their baselines, from the published daily table",
    )
    _config_arguments(alerts)
    alerts.add_argument("--start", type=_date, help="first date, YYYY-MM-DD")
    alerts.add_argument("--end", type=_date, help="last date, YYYY-MM-DD")
    _day_before_argument(alerts)
    alerts.add_argument(
        "--fail-on-alert",
        action="store_true",
        help="exit 4 when any day of the range has an `alert` (improvements do not count)",
    )
    alerts.set_defaults(handler=_cmd_alerts)

    views = commands.add_parser(
        "views",
        help="create or replace the BI views over the tables, and set output.table_properties "
        "on the tables that exist",
    )
    _config_arguments(views)
    views.set_defaults(handler=_cmd_views)

    demo = commands.add_parser("demo", help="generate a month of traffic, backfill it, print it")
    demo.add_argument("--config", action="append", default=None, help=f"default {DEMO_CONFIG}")
    demo.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    demo.add_argument("--days", type=_positive_int, default=30)
    demo.add_argument("--queries-per-day", type=_positive_int, default=2000)
    demo.set_defaults(handler=_cmd_demo)
    return parser


def run_job(command: str, argv: Sequence[str]) -> int:
    """For jobs/*.py: `command` with `argv`, where the global options (--log-format,
    --log-level) may come anywhere; they are moved ahead of the command."""
    global_args: list[str] = []
    rest: list[str] = []
    items = iter(argv)
    for arg in items:
        name = arg.split("=", 1)[0]
        if name in ("--log-format", "--log-level"):
            global_args.append(arg)
            if "=" not in arg:
                global_args.append(next(items, ""))
        else:
            rest.append(arg)
    return main([*global_args, command, *rest])


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is a ConfigError (one line, exit 2) like every other."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{self.prog}: {message}")


def _config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML config; repeat to layer files (later ones win)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config key (value in YAML syntax); repeatable",
    )


def _range_arguments(parser: argparse.ArgumentParser) -> None:
    """--start and --end, both required: an inclusive range of UTC days."""
    parser.add_argument("--start", type=_date, required=True, help="first date, YYYY-MM-DD")
    parser.add_argument("--end", type=_date, required=True, help="last date, YYYY-MM-DD")


def _day_before_argument(parser: argparse._ActionsContainer) -> None:
    parser.add_argument(
        "--day-before",
        type=_day_before,
        metavar="YYYY-MM-DD",
        help="the day before this date: for a scheduler's trigger date (Databricks' "
        "{{job.trigger.time.iso_date}}), so every task of a run, and its repair, names one day",
    )


def _day_before(text: str) -> dt.date:
    day = _date(text)
    if day == dt.date.min:
        raise argparse.ArgumentTypeError(f"{text!r} has no day before it")
    return day - dt.timedelta(days=1)


def _run_day(args: argparse.Namespace) -> dt.date:
    """The day `run` computes: --date, the day before --day-before, or yesterday (UTC)."""
    if args.day_before is not None:
        return args.day_before
    return args.date or _yesterday()


def _alerts_range(args: argparse.Namespace) -> tuple[dt.date, dt.date]:
    """The days `alerts` judges: --start to --end, or the one day before --day-before."""
    if args.day_before is not None:
        if args.start is not None or args.end is not None:
            raise ConfigError("logmetrics alerts: --day-before replaces --start and --end")
        return args.day_before, args.day_before
    if args.start is None or args.end is None:
        raise ConfigError("logmetrics alerts: give --start and --end, or --day-before")
    _check_range(args.start, args.end)
    return args.start, args.end


def _check_range(start: dt.date | None, end: dt.date | None) -> None:
    if start is not None and end is not None and start > end:
        raise ConfigError(f"--start {start} is after --end {end}")


def _date(text: str) -> dt.date:
    if not _DATE.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)")
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid date") from None
    if day == dt.date.max:  # a day's window ends at the next midnight, which does not exist
        raise argparse.ArgumentTypeError(f"{text!r} is after the last date a run can compute")
    return day


def _planted_change(text: str) -> Any:
    from logmetrics.synthetic import PlantedChange

    day, _, rest = text.partition(":")
    shift, _, where = rest.partition(":")
    segment, _, value = where.partition("=")
    try:
        return PlantedChange(_date(day), float(shift), segment or None, value if segment else None)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not DATE:SHIFT[:SEGMENT=VALUE] ({exc})"
        ) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


class _RunId(logging.Filter):
    """Stamps every record with the run's id, so every line can be traced to its run."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.run_id = self.run_id
        return True


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "run_id": getattr(record, "run_id", None),
            "msg": record.getMessage(),
            **getattr(record, "fields", {}),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _setup_logging(level: str, log_format: str, run_id: str) -> None:
    """Our records go to stderr, one line each with the run id; json for log shippers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RunId(run_id))
    if log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter(
                "%(asctime)s %(levelname)s [run %(run_id)s] %(name)s: %(message)s",
                datefmt="%Y-%m-%dT%H:%M:%S",
            )
        )
    handler._logmetrics = True  # type: ignore[attr-defined]
    root = logging.getLogger("logmetrics")
    for old in [h for h in root.handlers if getattr(h, "_logmetrics", False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level))
    for noisy in ("py4j", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # PySpark logs every analysis error with its whole JVM stack trace to stderr; we report the
    # error ourselves, in one line.
    from pyspark.logger import PySparkLogger

    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


# --- commands -----------------------------------------------------------------------------


def _yesterday() -> dt.date:
    return dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)


def _cmd_run(args: argparse.Namespace) -> int:
    day = _run_day(args)
    config = load_config(args.config, args.set)
    lookback = [day - dt.timedelta(days=i) for i in range(config.nightly.lookback_days, 0, -1)]
    start = lookback[0] if lookback else day
    return _compute(config, start, day, args, always={day}, seen_only=lookback, required={day})


def _cmd_backfill(args: argparse.Namespace) -> int:
    _check_range(args.start, args.end)
    config = load_config(args.config, args.set)
    from logmetrics.flows.backfill import considered_days

    always = considered_days(args.start, args.end) if args.force else ()
    return _compute(config, args.start, args.end, args, always=always)


def _cmd_ready(args: argparse.Namespace) -> int:
    day = args.date or _yesterday()
    config = load_config(args.config, args.set)
    missing = _not_ready(config, [day])
    if missing:
        raise InputNotReady(_not_ready_line(missing, "its logs have not all landed"))
    print(f"{day}: ready")
    return 0


def _not_ready(
    config: Config, days: list[dt.date], spark: SparkSession | None = None
) -> dict[dt.date, str]:
    """The days whose ready marker is missing; a remote path starts (or uses) Spark to look."""
    from logmetrics.tables.sources import missing_ready_markers, needs_spark_for_readiness

    source = config.inputs.logs()
    if spark is None and needs_spark_for_readiness(source):
        from logmetrics.session import get_spark

        spark = get_spark(config.spark)
    return missing_ready_markers(source, days, spark)


def _not_ready_line(missing: dict[dt.date, str], what_happened: str) -> str:
    days = sorted(missing)
    more = f" (and {len(days) - 1} more day(s) like it)" if len(days) > 1 else ""
    listed = ", ".join(map(str, days))
    return f"input not ready: {listed}: no {missing[days[0]]}{more}; {what_happened}"


def _compute(
    config: Config,
    start: dt.date,
    end: dt.date,
    args: argparse.Namespace,
    always: Collection[dt.date] = (),
    seen_only: Collection[dt.date] = (),
    required: Collection[dt.date] = (),
) -> int:
    """Compute start..end as `run_range` decides (`always`, `seen_only`: its arguments). Days
    whose logs are not ready are left alone: a `required` one (`run`'s date) stops the run
    before anything is computed (exit 5); days looked back on (`seen_only`) are skipped; a
    backfill computes the ready days, then exits 5 naming the others."""
    from logmetrics.flows.backfill import considered_days, run_range, scan_ahead
    from logmetrics.phases import Phases
    from logmetrics.quality.gx_suite import warm_up
    from logmetrics.session import get_spark
    from logmetrics.tables.file_scan import scan_needs_spark
    from logmetrics.tables.sources import check_inputs_exist, needs_spark_for_readiness

    check_inputs_exist(config.inputs)
    days = considered_days(start, end)
    remote = needs_spark_for_readiness(config.inputs.logs())
    not_ready = {} if remote else _not_ready(config, days)
    computed_at = dt.datetime.now(dt.UTC).replace(microsecond=0)
    warm_up(config.quality)  # great-expectations loads while Spark starts
    _stop_if_not_ready(not_ready, required, seen_only)
    # A log file off the contract stops the run here, before Spark starts, where no session is
    # needed to say so (local logs, Parquet footers).
    considered = considered_days(start, end, not_ready)
    ahead = bool(considered) and not remote and not scan_needs_spark(config.inputs.logs())
    scanned = scan_ahead(None, config, considered) if ahead else None
    spark = get_spark(config.spark, days=(end - start).days + 1)
    if remote:
        not_ready = _not_ready(config, days, spark)
        _stop_if_not_ready(not_ready, required, seen_only)
    phases = Phases()
    phases.add("start-up", args.started[0], time.perf_counter() - args.started[1])
    summary = run_range(
        spark,
        config,
        start,
        end,
        args.run_id,
        computed_at,
        always=always,
        seen_only=seen_only,
        not_ready=set(not_ready),
        scanned=scanned,
        phases=phases,
    )
    log.info("where the time went: %s", phases.describe(), extra={"fields": phases.fields()})
    log.info(
        "run %s done: %d day(s), %d queries, cluster table version %s",
        args.run_id,
        len(summary.days),
        summary.queries,
        summary.cluster_table_version,
    )
    failures = summary.failures()
    if failures and config.quality.on_failure == "fail":
        held = "\n".join(f"  not published: {line}" for line in failures)
        raise QualityGateFailed(f"{len(failures)} day(s) failed a blocking quality check\n{held}")
    for line in failures:
        log.warning("quality check failed (published with dq_passed = false): %s", line)
    not_ready = {d: p for d, p in not_ready.items() if d not in seen_only}
    if not_ready:
        them = "it" if len(not_ready) == 1 else "them"
        raise InputNotReady(
            _not_ready_line(not_ready, f"nothing was computed for {them}, only for the ready days")
        )
    return 0


def _stop_if_not_ready(
    not_ready: dict[dt.date, str], required: Collection[dt.date], seen_only: Collection[dt.date]
) -> None:
    """A required day not ready: exit 5 before anything is computed. Days looked back on that
    are not ready are only left alone (a day with a marker is computed once it has one)."""
    stopping = {d: p for d, p in not_ready.items() if d in required}
    if stopping:
        raise InputNotReady(_not_ready_line(stopping, "nothing was computed"))
    for day in sorted(d for d in not_ready if d in seen_only):
        log.warning("%s: no %s, not looked back on", day, not_ready[day])


def _cmd_report(args: argparse.Namespace) -> int:
    _check_range(args.start, args.end)
    config = load_config(args.config, args.set)
    from logmetrics.report import load_report_data, render
    from logmetrics.session import get_spark

    data = load_report_data(get_spark(config.spark), config, args.start, args.end)
    index = render(data, Path(args.out))
    print(f"report: {index}")
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    from logmetrics.demo import generate_dataset

    generate_dataset(
        out=Path(args.out),
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


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from logmetrics.flows.evaluation import require_evaluation, run_evaluation
    from logmetrics.rules.evaluation import format_averages, format_comparison
    from logmetrics.session import get_spark
    from logmetrics.tables.sources import check_evaluation_inputs_exist, check_path_exists

    config = load_config(args.config, args.set)
    settings = require_evaluation(config)
    check_path_exists(config.inputs.clusters.path, "cluster table")
    check_evaluation_inputs_exist(settings.runs, settings.judgments)
    computed_at = dt.datetime.now(dt.UTC).replace(microsecond=0)
    spark = get_spark(config.spark)
    summary = run_evaluation(spark, config, args.run_id, computed_at)
    print("\n".join(summary.notes()))
    print()
    print(format_averages(summary.averages))
    if summary.pair is not None and summary.comparison is not None:
        a, b = summary.pair
        print()
        print(f"{b} vs {a} (paired randomisation test, two-sided):")
        print(format_comparison(summary.comparison, a, b))
    return 0


VACUUM_RETAIN_HOURS = 168


def _cmd_maintain(args: argparse.Namespace) -> int:
    if args.vacuum_retain_hours < VACUUM_RETAIN_HOURS:
        raise ConfigError(
            f"--vacuum-retain-hours {args.vacuum_retain_hours} is below Delta's minimum of "
            f"{VACUUM_RETAIN_HOURS}: a shorter window can delete files a running reader needs"
        )
    config = load_config(args.config, args.set)
    from logmetrics.session import get_spark
    from logmetrics.tables.catalog import (
        OUTPUT_TABLES,
        Table,
        apply_table_properties,
        optimize,
        small_listings,
        table_ref,
        vacuum,
    )

    spark = get_spark(config.spark)

    def maintain(table: Table) -> str:
        where = table_ref(config.output, table)
        properties = apply_table_properties(spark, config.output, table)
        compacted = optimize(spark, config.output, table)
        if compacted is None:
            return f"{table.name}: not written yet ({where})"
        removed, added = compacted
        line = f"{table.name}: OPTIMIZE compacted {removed} file(s) into {added}"
        if properties:
            line += "; table properties set"
        if not args.no_vacuum:
            vacuum(spark, config.output, table, args.vacuum_retain_hours)
            line += f"; VACUUM kept the files of the last {args.vacuum_retain_hours} hours"
        return line

    # Tables side by side (each is a few small Spark jobs), reported in a fixed order.
    with small_listings(spark), ThreadPoolExecutor(4) as pool:
        for line in pool.map(maintain, OUTPUT_TABLES):
            print(line, flush=True)
    return 0


def _cmd_alerts(args: argparse.Namespace) -> int:
    start, end = _alerts_range(args)
    config = load_config(args.config, args.set)
    from logmetrics.flows.alerts import announce, publish_alerts
    from logmetrics.flows.backfill import considered_days
    from logmetrics.session import get_spark

    computed_at = dt.datetime.now(dt.UTC).replace(microsecond=0)
    days = considered_days(start, end)
    rows, culprits = publish_alerts(get_spark(config.spark), config, days, args.run_id, computed_at)
    alerts = announce(rows, culprits)
    if alerts and args.fail_on_alert:
        raise AlertsFired(f"{alerts} alert(s) from {start} to {end} (--fail-on-alert)")
    return 0


def _cmd_views(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.set)
    from logmetrics.session import get_spark
    from logmetrics.tables.catalog import OUTPUT_TABLES, apply_table_properties
    from logmetrics.tables.views import create_views

    spark = get_spark(config.spark)
    for table in OUTPUT_TABLES:
        if apply_table_properties(spark, config.output, table):
            print(f"{table.name}: table properties set", flush=True)
    for view in create_views(spark, config.output):
        print(f"view: {view}", flush=True)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from logmetrics.demo import run_demo

    config = load_config(args.config or [DEMO_CONFIG], args.set)
    return run_demo(
        config, days=args.days, queries_per_day=args.queries_per_day, run_id=args.run_id
    )


if __name__ == "__main__":
    entry_point()
