"""The face: argument parsing, logging, exit codes; the only place that knows "yesterday".

Every command parses here, loads its config (`--config`, or the search in `_config_files`),
sets up the run's logging (the human summary on the terminal, every record in the run's log
file: `_setup_logging`) and maps errors to one line and an exit status (`EPILOG`). The work is
in `flows`; this module only decides which days and reports the outcome.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logmetrics.config import Config, load_config
from logmetrics.console import duration, is_console, say
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

    from logmetrics.flows.backfill import RunSummary
    from logmetrics.flows.inputs import DayFiles

log = logging.getLogger("logmetrics")

CONFIG_ENV = "LOGMETRICS_CONFIG"
CONFIG_SEARCH = ("conf/local.yaml", "logmetrics.yaml")
"""Where a command looks for its config without --config, after $LOGMETRICS_CONFIG (relative
to the working directory)."""
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


DESCRIPTION = """\
logmetrics counts the distinct near-duplicate clusters in every served top-k list
(unique-clusters@k), and publishes exact daily distributions, quality checks and alerts as
Delta tables."""

EPILOG = f"""\
The config: --config FILE (repeatable; later files win), else ${CONFIG_ENV}, else
./conf/local.yaml or ./logmetrics.yaml. --set section.key=value overrides one key.

Exit status: 0 done; 1 bad input or a failed run; 2 bad config or command line; 3 a day
failed a blocking data-quality check and was not published; 4 `alerts --fail-on-alert`
found an alert; 5 a day's logs are not ready (no files yet, or no ready marker).

Run `logmetrics COMMAND --help` for a command's options. Docs: README.md, docs/."""


def _parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="logmetrics",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one JSON object per line, for log shippers",
    )
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        title="commands",
        metavar="COMMAND",
        parser_class=_ArgumentParser,
    )

    run = commands.add_parser("run", help="compute one day (the nightly job)")
    _config_arguments(run)
    day = run.add_mutually_exclusive_group()
    day.add_argument("--date", type=_date, help="UTC date to compute (default: yesterday, UTC)")
    _day_before_argument(day)
    run.add_argument(
        "--force",
        action="store_true",
        help="recompute the day even when the run ledger has it as published from the same "
        "inputs and config",
    )
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
    views.add_argument(
        "--sql-out",
        default="views.sql",
        metavar="FILE",
        help="where the views' SQL goes when this session cannot keep them (no metastore); "
        "default views.sql",
    )
    views.set_defaults(handler=_cmd_views)

    demo = commands.add_parser("demo", help="generate a month of traffic, backfill it, print it")
    _config_arguments(demo)
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
    try:
        day = dt.date.fromisoformat(text) if _DATE.match(text) else None
    except ValueError:
        day = None
    if day is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)")
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


class _TerminalWarnings(logging.Formatter):
    """`warning: ...`: a warning or an error that is not a line of the human summary."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


_FULL_FORMAT = "%(asctime)s %(levelname)s [run %(run_id)s] %(name)s: %(message)s"
_LOG_ROOT: Path | None = None  # where run logs go instead of spark.log_dir (the test suite's)


@dataclass
class _Logging:
    """The handlers of this process's run: the terminal's and the run's log file."""

    run_id: str
    terminal_warnings: logging.Handler | None = None
    log_file: logging.FileHandler | None = None

    def use_log_dir(self, log_dir: str | None) -> None:
        """The run's log file under `log_dir` (`spark.log_dir`); with none, every record goes
        to the terminal instead, once, as `spark.log_dir: null` sends the JVM's there."""
        if self.terminal_warnings is None:  # JSON on stderr already has every record
            return
        root = logging.getLogger("logmetrics")
        if self.log_file is not None:
            root.removeHandler(self.log_file)
            self.log_file.close()
            self.log_file = None
        directory = _LOG_ROOT or (Path(log_dir) if log_dir else None)
        if directory is None:
            self.terminal_warnings.setLevel(logging.DEBUG)
            self.terminal_warnings.setFormatter(
                logging.Formatter(_FULL_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S")
            )
            return
        directory.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(directory / f"logmetrics-{self.run_id}.log", delay=True)
        handler.addFilter(_RunId(self.run_id))
        handler.setFormatter(logging.Formatter(_FULL_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S"))
        handler._logmetrics = True  # type: ignore[attr-defined]
        root.addHandler(handler)
        self.log_file = handler

    def log_path(self) -> str | None:
        """The run's log file, once something was written to it."""
        handler = self.log_file
        if handler is None or handler.stream is None:
            return None
        relative = os.path.relpath(handler.baseFilename)
        return handler.baseFilename if relative.startswith("..") else relative


_LOGGING = _Logging(run_id="")


def _setup_logging(level: str, log_format: str, run_id: str) -> None:
    """text: the human summary (`console.say`'s lines) on stdout, other warnings and errors on
    stderr, and every record, once, in the run's log file (`_Logging.use_log_dir`: under
    `logs/` until the config names `spark.log_dir`); json: every record, once, as one JSON
    object per line on stderr, for log shippers. Each line carries the run id."""
    global _LOGGING
    root = logging.getLogger("logmetrics")
    for old in [h for h in root.handlers if getattr(h, "_logmetrics", False)]:
        root.removeHandler(old)
        old.close()
    root.setLevel(getattr(logging, level))
    _LOGGING = _Logging(run_id=run_id)
    if log_format == "json":
        handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
        handlers[0].setFormatter(_JsonFormatter())
    else:
        summary = logging.StreamHandler(sys.stdout)
        summary.addFilter(is_console)
        summary.setFormatter(logging.Formatter("%(message)s"))
        warnings = logging.StreamHandler(sys.stderr)
        warnings.setLevel(logging.WARNING)
        warnings.addFilter(lambda record: not is_console(record))
        warnings.setFormatter(_TerminalWarnings())
        handlers = [summary, warnings]
        _LOGGING.terminal_warnings = warnings
    for handler in handlers:
        handler.addFilter(_RunId(run_id))
        handler._logmetrics = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    _LOGGING.use_log_dir("logs")
    for noisy in ("py4j", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # PySpark logs every analysis error with its whole JVM stack trace to stderr; we report the
    # error ourselves, in one line.
    from pyspark.logger import PySparkLogger

    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def _config_files(args: argparse.Namespace) -> list[str]:
    """--config's files; without it, $LOGMETRICS_CONFIG (files separated by the path
    separator), else the first of CONFIG_SEARCH that exists."""
    if args.config:
        return list(args.config)
    named = os.environ.get(CONFIG_ENV, "").strip()
    if named:
        return [part for part in named.split(os.pathsep) if part]
    for candidate in CONFIG_SEARCH:
        if Path(candidate).is_file():
            return [candidate]
    raise ConfigError(
        f"no config: none of --config, ${CONFIG_ENV}, {', '.join(f'./{c}' for c in CONFIG_SEARCH)}"
    )


def _load_config(args: argparse.Namespace) -> Config:
    """The command's config (`_config_files`), and the run's log file under its
    `spark.log_dir`."""
    config = load_config(_config_files(args), args.set)
    _LOGGING.use_log_dir(config.spark.log_dir)
    return config


# --- commands -----------------------------------------------------------------------------


def _yesterday() -> dt.date:
    return dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)


def _cmd_run(args: argparse.Namespace) -> int:
    day = _run_day(args)
    config = _load_config(args)
    lookback = [day - dt.timedelta(days=i) for i in range(config.nightly.lookback_days, 0, -1)]
    start = lookback[0] if lookback else day
    always = {day} if args.force else set()
    return _compute(config, start, day, args, always=always, seen_only=lookback, required={day})


def _cmd_backfill(args: argparse.Namespace) -> int:
    _check_range(args.start, args.end)
    config = _load_config(args)
    from logmetrics.flows.backfill import considered_days

    always = considered_days(args.start, args.end) if args.force else ()
    return _compute(config, args.start, args.end, args, always=always)


def _cmd_ready(args: argparse.Namespace) -> int:
    day = args.date or _yesterday()
    config = _load_config(args)
    from logmetrics.tables.sources import check_inputs_exist

    check_inputs_exist(config.inputs)
    missing = _not_ready(config, [day])
    if missing:
        raise InputNotReady(_not_ready_line(missing, "its logs have not all landed"))
    if config.inputs.logs().ready_marker is not None:
        print(f"{day}: ready")
        return 0
    from logmetrics.flows.inputs import NO_LOG_FILES

    files = _day_files(config, day)
    if files.files == 0 and not config.inputs.logs().allow_empty_days:
        raise InputNotReady(
            _not_ready_line(
                {day: NO_LOG_FILES}, "no ready marker is configured, so its files were judged"
            )
        )
    rows = "" if files.rows is None else f", {files.rows:,} rows in them by their footers"
    print(
        f"{day}: ready (no ready marker configured: judged by its files, {files.files} file(s) "
        f"hold rows of it{rows})"
    )
    return 0


def _day_files(config: Config, day: dt.date) -> DayFiles:
    """The log files holding rows of `day`: from local Parquet footers without Spark where they
    can say, else by a narrow pass of a Spark session."""
    from logmetrics.flows.inputs import day_files, footer_day_files

    found = footer_day_files(config.inputs.logs(), day)
    if found is not None:
        return found
    from logmetrics.session import get_spark

    return day_files(get_spark(config.spark), config, day)


def _not_ready(
    config: Config, days: list[dt.date], spark: SparkSession | None = None
) -> dict[dt.date, str]:
    """The days whose ready marker is missing, each with why; a remote path starts (or uses)
    Spark to look."""
    from logmetrics.tables.sources import missing_ready_markers, needs_spark_for_readiness

    source = config.inputs.logs()
    if spark is None and needs_spark_for_readiness(source):
        from logmetrics.session import get_spark

        spark = get_spark(config.spark)
    return {d: f"no {path}" for d, path in missing_ready_markers(source, days, spark).items()}


def _without_files_by_footers(config: Config, days: Sequence[dt.date]) -> dict[dt.date, str]:
    """The days of `days` no log file holds a row of, when that makes them not ready (no ready
    marker configured, empty days not allowed), as local Parquet footers say it without Spark;
    a day they cannot judge (other formats, a remote path, a file they cannot place) is left to
    the run's narrow pass."""
    source = config.inputs.logs()
    if source.ready_marker is not None or source.allow_empty_days:
        return {}
    from logmetrics.flows.inputs import NO_LOG_FILES, footer_day_files

    found = {day: footer_day_files(source, day) for day in days}
    return {d: NO_LOG_FILES for d, files in found.items() if files is not None and not files.files}


def _not_ready_line(missing: dict[dt.date, str], what_happened: str) -> str:
    days = sorted(missing)
    more = f" (and {len(days) - 1} more day(s) like it)" if len(days) > 1 else ""
    listed = ", ".join(map(str, days))
    return f"input not ready: {listed}: {missing[days[0]]}{more}; {what_happened}"


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
    backfill computes the ready days, then exits 5 naming the others. The terminal gets the
    failing checks, collapsed across days, and a closing line."""
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
    if not remote:  # `run`'s own day without files: said before Spark starts, as `ready` does
        not_ready |= _without_files_by_footers(config, [d for d in required if d not in not_ready])
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
        required=required,
        scanned=scanned,
        phases=phases,
    )
    not_ready = {**not_ready, **summary.not_ready}
    _stop_if_not_ready(summary.not_ready, required, seen_only)
    log.info("where the time went: %s", phases.describe(), extra={"fields": phases.fields()})
    _finish(config, summary, args, not_ready, seen_only)
    return 0


def _finish(
    config: Config,
    summary: RunSummary,
    args: argparse.Namespace,
    not_ready: Mapping[dt.date, str] | None = None,
    seen_only: Collection[dt.date] = (),
) -> None:
    """After a run: the failing checks, collapsed across days, and the closing line on the
    terminal; then exit 3 for days a blocking check held back, or 5 for days not ready."""
    from logmetrics.quality.policy import failing_checks

    not_ready = dict(not_ready or summary.not_ready)
    log.info(
        "run %s done: %d day(s), %d queries, cluster table version %s",
        args.run_id,
        len(summary.days),
        summary.queries,
        summary.cluster_table_version,
    )
    holding = config.quality.on_failure == "fail"
    for line in failing_checks([day.verdict for day in summary.days], blocking=not holding):
        say(log, line, logging.WARNING)
    _closing_line(config, summary, not_ready, seen_only, args)
    failures = summary.failures()
    if failures and holding:
        held = "\n".join(f"  not published: {line}" for line in failures)
        raise QualityGateFailed(f"{len(failures)} day(s) failed a blocking quality check\n{held}")
    waiting = {d: p for d, p in not_ready.items() if d not in seen_only}
    if waiting:
        them = "it" if len(waiting) == 1 else "them"
        raise InputNotReady(
            _not_ready_line(waiting, f"nothing was computed for {them}, only for the ready days")
        )


def _closing_line(
    config: Config,
    summary: RunSummary,
    not_ready: Mapping[dt.date, str],
    seen_only: Collection[dt.date],
    args: argparse.Namespace,
) -> None:
    """`done in 1m17s: 30 day(s) published, ...; 7 alert(s); tables in warehouse; log ...`."""
    from logmetrics.tables.catalog import DAILY_TABLE, table_ref

    published = sum(day.published for day in summary.days)
    parts = [f"{published} day(s) published"]
    held = len(summary.days) - published
    waiting = [d for d in not_ready if d not in seen_only]
    for count, what in (
        (held, "held back by a blocking check"),
        (len(summary.skipped), "skipped (already done)"),
        (len(waiting), "not ready"),
    ):
        if count:
            parts.append(f"{count} {what}")
    fired = f"{summary.alerts} alert(s)" + (
        f", {summary.improvements} improvement(s)" if summary.improvements else ""
    )
    where = table_ref(config.output, DAILY_TABLE)
    tables = (
        f"tables in {config.output.warehouse}"
        if config.output.warehouse is not None and where.name is None
        else f"tables in {str(where).rsplit('.', 1)[0]}"
    )
    logged = _LOGGING.log_path()
    say(
        log,
        f"done in {duration(time.perf_counter() - args.started[1])}: {', '.join(parts)}; "
        f"{fired}; {tables}" + (f"; log {logged}" if logged else ""),
        published=published,
        held=held,
        skipped=len(summary.skipped),
        not_ready=len(waiting),
        alerts=summary.alerts,
    )


def _stop_if_not_ready(
    not_ready: Mapping[dt.date, str],
    required: Collection[dt.date],
    seen_only: Collection[dt.date],
) -> None:
    """A required day not ready: exit 5 before anything is computed. Days looked back on that
    are not ready are only left alone (a day with a marker is computed once it has one)."""
    stopping = {d: p for d, p in not_ready.items() if d in required}
    if stopping:
        raise InputNotReady(_not_ready_line(stopping, "nothing was computed"))
    for day in sorted(d for d in not_ready if d in seen_only):
        log.warning("%s: %s, not looked back on", day, not_ready[day])


def _cmd_report(args: argparse.Namespace) -> int:
    _check_range(args.start, args.end)
    config = _load_config(args)
    from logmetrics.report import load_report_data, render
    from logmetrics.session import get_spark

    data = load_report_data(get_spark(config.spark), config, args.start, args.end)
    index = render(data, Path(args.out))
    print(f"report: {index}")
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
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


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from logmetrics.flows.evaluation import require_evaluation, run_evaluation
    from logmetrics.rules.evaluation import format_averages, format_comparison
    from logmetrics.session import get_spark
    from logmetrics.tables.sources import check_evaluation_inputs_exist, check_path_exists

    config = _load_config(args)
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
    config = _load_config(args)
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
    config = _load_config(args)
    from logmetrics.flows.alerts import announce, publish_alerts
    from logmetrics.flows.backfill import considered_days
    from logmetrics.session import get_spark

    computed_at = dt.datetime.now(dt.UTC).replace(microsecond=0)
    days = considered_days(start, end)
    rows, culprits = publish_alerts(get_spark(config.spark), config, days, args.run_id, computed_at)
    alerts, improvements = announce(rows, culprits)
    judged = rows["metric_date"].nunique()
    say(
        log,
        f"{start}..{end}: {judged} day(s) judged, {alerts} alert(s), {improvements} improvement(s)",
    )
    if alerts and args.fail_on_alert:
        raise AlertsFired(f"{alerts} alert(s) from {start} to {end} (--fail-on-alert)")
    return 0


def _cmd_views(args: argparse.Namespace) -> int:
    config = _load_config(args)
    from logmetrics.session import get_spark
    from logmetrics.tables.catalog import OUTPUT_TABLES, apply_table_properties
    from logmetrics.tables.views import create_views, views_last, views_sql

    spark = get_spark(config.spark)
    for table in OUTPUT_TABLES:
        if apply_table_properties(spark, config.output, table):
            print(f"{table.name}: table properties set", flush=True)
    views = create_views(spark, config.output)
    if views_last(spark):
        for view in views:
            print(f"view: {view}", flush=True)
        return 0
    out = Path(args.sql_out)
    out.write_text(views_sql(config.output))
    print(
        f"views NOT kept: {', '.join(views)} ran against the tables, but this session's catalog "
        "is in memory (no metastore), so they end with it.\n"
        f"Their SQL is in {out}: run it in a Spark SQL session with Delta and a metastore "
        f"(spark-sql -f {out}), or set output.schema to create them in a catalog.",
        flush=True,
    )
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from logmetrics.demo import run_demo

    config = _load_config(args)
    summary = run_demo(
        config, days=args.days, queries_per_day=args.queries_per_day, run_id=args.run_id
    )
    _finish(config, summary, args)
    return 0


if __name__ == "__main__":
    entry_point()
