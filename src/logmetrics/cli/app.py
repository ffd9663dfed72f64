"""A command run: parsed (`parser`), its logging set up (`logs`), stopped at its next safe point
by SIGINT or SIGTERM (`interrupt`), and every error mapped to one line on stderr and an exit
status (the parser's epilog lists them)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from collections.abc import Sequence

from logmetrics.cli.logs import setup_logging
from logmetrics.cli.parser import build_parser
from logmetrics.errors import LogmetricsError, failure_line
from logmetrics.interrupt import Interrupted, requested, stop_local_spark, stopping_on_signals

log = logging.getLogger("logmetrics")


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
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.started = started
        args.run_id = uuid.uuid4().hex[:12]
        setup_logging(args.log_level, args.log_format, args.run_id)
        with stopping_on_signals():
            return _run_command(args)
    except Interrupted as exc:
        print(f"logmetrics: {exc}", file=sys.stderr)
        return exc.exit_code
    except LogmetricsError as exc:
        print(f"logmetrics: error: {exc}", file=sys.stderr, flush=True)
        if exc.then is not None:
            exc.then()
        return exc.exit_code
    except KeyboardInterrupt:
        print("logmetrics: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in SPARK_MODULES:
            raise
        log.info("no %s here", exc.name, exc_info=exc)  # the trace, in the log
        print(f"logmetrics: error: {no_spark_line(exc.name or 'pyspark')}", file=sys.stderr)
        return 1
    except Exception as exc:  # an unexpected failure: one line here, the details in the log
        from logmetrics.storage import store_failure

        stopped_by = store_failure(exc)  # an S3 store that failed (S3A's or a direct read)
        if stopped_by is not None:
            log.info("the store failed: %s", stopped_by, exc_info=exc)  # the trace, in the log
            print(f"logmetrics: error: {stopped_by}", file=sys.stderr)
            return 1
        if "pyspark" not in sys.modules:  # no Spark ran: not Spark's failure
            raise
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        if isinstance(exc, PySparkException | Py4JError):
            line = failure_line(exc)
            log.info("Spark failed: %s", line, exc_info=exc)  # the trace, in the run's log
            print(f"logmetrics: error: Spark failed: {line}", file=sys.stderr)
            return 1
        raise


SPARK_MODULES = ("pyspark", "py4j", "delta")
"""What the wheel leaves to the runtime (a cluster's Spark, or the `local` extra): a command that
needs one of them where it is missing says what to install, in one line."""


def no_spark_line(module: str) -> str:
    """The one line for a command that needs Spark where PySpark (or Delta's Python package,
    `module`) is not installed: what to install, or how else to run it."""
    return (
        f"this command needs Spark, and {module} is not installed for {sys.executable}: install "
        "logmetrics with its local extra (pip install 'logmetrics[local]' brings PySpark and "
        "Delta), or run the command through your cluster's spark-submit; `logmetrics ready` "
        "on a local or S3 path needs neither"
    )


def _run_command(args: argparse.Namespace) -> int:
    """The command, stopped by SIGINT or SIGTERM at its next safe point (`interrupt`): any
    error once a stop was asked for is the stop's, and the local Spark the command started is
    stopped before the process exits."""
    try:
        return int(args.handler(args))
    except BaseException as exc:
        signum = requested()
        if signum is None:
            raise
        if not isinstance(exc, Interrupted):
            log.info("the stop cut this short", exc_info=exc)  # in the run's log only
            exc = Interrupted(signum)
        stop_local_spark()
        raise exc from None


def run_job(command: str, argv: Sequence[str]) -> int:
    """For jobs/*.py: `command` with `argv`, which may hold the global options (--log-format,
    --log-level) anywhere, as any command accepts them after its name."""
    return main([command, *argv])
