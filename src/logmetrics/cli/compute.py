"""`logmetrics run` (one day and the days it looks back on) and `logmetrics backfill` (a range):
which days, answered without Spark where the ledger and the footers can say, else computed by
`flows.backfill.run_range`; then the failing checks and the closing line on the terminal."""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import logging
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from logmetrics.cli.arguments import (
    check_range,
    config_arguments,
    date,
    day_before_argument,
    range_arguments,
)
from logmetrics.cli.common import (
    check_outputs_reachable,
    command_config,
    now,
    spark_for,
    writing,
    yesterday,
)
from logmetrics.cli.readiness import (
    missing_markers,
    not_ready_line,
    stop_if_not_ready,
    without_files_by_footers,
)
from logmetrics.config import Config
from logmetrics.console import duration, run_log, say, span_text
from logmetrics.errors import InputNotReady, LogmetricsError, QualityGateFailed
from logmetrics.interrupt import check

if TYPE_CHECKING:
    from logmetrics.flows.backfill import RunSummary

log = logging.getLogger("logmetrics")


def add_run(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run",
        help="compute one day (the nightly job), and again the days before it whose inputs changed",
        description="Compute one UTC day (--date, the day before --day-before, or yesterday) "
        "and publish it; a day already published from the same log files, cluster table and "
        "config is skipped. It also looks back on the nightly.lookback_days days before it "
        "(default 3): each one computed before whose log files (late rows), cluster table or "
        "config changed since is computed again, alerts included; the others are left as "
        "they are (a day never computed is a backfill's to compute).",
    )
    config_arguments(run)
    day = run.add_mutually_exclusive_group()
    day.add_argument("--date", type=date, help="UTC date to compute (default: yesterday, UTC)")
    day_before_argument(day)
    run.add_argument(
        "--force",
        action="store_true",
        help="recompute the day even when the run ledger has it as published from the same "
        "inputs and config (a restatement); the days looked back on are still computed only "
        "when their inputs changed",
    )
    run.set_defaults(handler=run_command)


def add_backfill(commands: argparse._SubParsersAction) -> None:
    backfill = commands.add_parser("backfill", help="compute an inclusive range of days")
    config_arguments(backfill)
    range_arguments(backfill)
    backfill.add_argument(
        "--force",
        action="store_true",
        help="recompute days the run ledger has as computed from the same inputs and config",
    )
    backfill.set_defaults(handler=backfill_command)


def run_day(args: argparse.Namespace) -> dt.date:
    """The day `run` computes: --date, the day before --day-before, or yesterday (UTC)."""
    if args.day_before is not None:
        return args.day_before
    return args.date or yesterday()


def run_command(args: argparse.Namespace) -> int:
    day = run_day(args)
    config = command_config(args)
    lookback = [day - dt.timedelta(days=i) for i in range(config.nightly.lookback_days, 0, -1)]
    start = lookback[0] if lookback else day
    always = {day} if args.force else set()
    return _compute(config, start, day, args, always=always, seen_only=lookback, required={day})


def backfill_command(args: argparse.Namespace) -> int:
    check_range(args.start, args.end)
    config = command_config(args)
    from logmetrics.flows.backfill import considered_days

    always = considered_days(args.start, args.end) if args.force else ()
    return _compute(config, args.start, args.end, args, always=always)


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
    from logmetrics.inputs.damaged import scan_needs_spark, stop_on_corrupt
    from logmetrics.inputs.files import check_inputs_exist
    from logmetrics.inputs.json_lines import check_json_source
    from logmetrics.inputs.markers import needs_spark_for_readiness

    check_inputs_exist(config.inputs)
    check_json_source(config.inputs.logs())  # a misspelt column of JSON lines: before Spark
    check_outputs_reachable(config)
    from logmetrics.flows.backfill import (
        answer_without_spark,
        considered_days,
        run_range,
        scan_ahead,
    )
    from logmetrics.phases import Phases
    from logmetrics.quality.gx_suite import warm_up

    days = considered_days(start, end)
    remote = needs_spark_for_readiness(config.inputs.logs())
    not_ready = {} if remote else missing_markers(config, days)
    if not remote:  # `run`'s own day without files: said before Spark starts, as `ready` does
        not_ready |= without_files_by_footers(config, [d for d in required if d not in not_ready])
    computed_at = now()
    stop_if_not_ready(not_ready, required, seen_only)
    # A log file off the contract, or one that cannot be read under `on_corrupt: fail`, stops
    # the run here, before Spark starts, where no session is needed to say so (Parquet footers).
    considered = considered_days(start, end, not_ready)
    ahead = not remote and not scan_needs_spark(config.inputs.logs())
    scanned = (scan_ahead(None, config, considered) if considered else []) if ahead else None
    stop_on_corrupt(config.inputs.logs(), scanned or [], "nothing was computed")  # as runs do
    answered = answer_without_spark(
        config,
        start,
        end,
        args.run_id,
        always=always,
        seen_only=seen_only,
        not_ready=set(not_ready),
        required=required,
        scanned=scanned,
    )
    if answered is not None:  # nothing to compute: no JVM started
        log.info("answered without Spark: no day of %s to compute", span_text(start, end))
        stop_if_not_ready(answered.not_ready, required, seen_only)
        waiting = {**not_ready, **answered.not_ready}
        finish(config, answered, args, waiting, seen_only, whole=(start, end))
        return 0
    warm_up(config.quality)  # great-expectations loads while Spark starts
    check("no day computed")  # safe points: before Spark starts, and once it has
    spark = spark_for(config, days=(end - start).days + 1)
    check("no day computed")
    if remote:
        not_ready = missing_markers(config, days, spark)
        stop_if_not_ready(not_ready, required, seen_only)
    phases = Phases()
    phases.add("start-up", args.started[0], time.perf_counter() - args.started[1])
    with writing(spark, config, args):
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
    stop_if_not_ready(summary.not_ready, required, seen_only)
    log.info("where the time went: %s", phases.describe(), extra={"fields": phases.fields()})
    finish(config, summary, args, not_ready, seen_only, whole=(start, end))
    return 0


def finish(
    config: Config,
    summary: RunSummary,
    args: argparse.Namespace,
    not_ready: Mapping[dt.date, str] | None = None,
    seen_only: Collection[dt.date] = (),
    whole: tuple[dt.date, dt.date] | None = None,
) -> None:
    """After the run of the range `whole`: the failing checks, collapsed across days, and the
    closing line on the terminal; but for days a blocking check held back exit 3, and for
    days not ready exit 5, the closing line said after the error's."""
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
    failures = summary.failures()
    waiting = {d: p for d, p in not_ready.items() if d not in seen_only}
    error: LogmetricsError | None = None
    if failures and holding:
        held = "\n".join(f"  not published: {line}" for line in failures)
        error = QualityGateFailed(f"{len(failures)} day(s) failed a blocking quality check\n{held}")
    elif whole is not None and len(waiting) == (whole[1] - whole[0]).days + 1:  # none ready
        error = InputNotReady(not_ready_line(waiting, "nothing was computed", whole))
    elif waiting:
        them = "it" if len(waiting) == 1 else "them"
        error = InputNotReady(
            not_ready_line(waiting, f"nothing was computed for {them}, only for the ready days")
        )
    closing = functools.partial(_closing_line, config, summary, not_ready, seen_only, args)
    if error is None:
        closing()
        return
    error.then = closing  # said after the error's line: the run's last word
    raise error


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
    logged = run_log(written=True)
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
