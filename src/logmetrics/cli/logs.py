"""The run's logging, configured once per command: the human summary on the terminal, every
record once in the run's log file (or as JSON lines on stderr), each stamped with the run id."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from logmetrics.console import RUN_LOG, is_console

_FULL_FORMAT = "%(asctime)s %(levelname)s [run %(run_id)s] %(name)s: %(message)s"
_LOG_ROOT: Path | None = None  # where run logs go instead of spark.log_dir (the test suite's)


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


@dataclass
class _Logging:
    """The handlers of this process's run: the terminal's, and the one that keeps every record
    (the run's log file, or JSON on stderr) on the root logger, where records of other
    libraries (py4j's) land too, and which leaves nothing for `logging.basicConfig` to do: py4j
    calls `logging.exception` on the root logger, whose first call added a handler there when
    it had none, and every line of the run was printed twice from then on."""

    run_id: str
    terminal_warnings: logging.Handler | None = None
    log_file: logging.Handler | None = None

    def use_log_dir(self, log_dir: str | None) -> None:
        """The run's log file under `log_dir` (`spark.log_dir`); with none, every record goes
        to the terminal instead, once, as `spark.log_dir: null` sends the JVM's there."""
        if self.terminal_warnings is None:  # JSON on stderr already has every record
            return
        everything = logging.getLogger()
        if self.log_file is not None:
            everything.removeHandler(self.log_file)
            self.log_file.close()
        directory = _LOG_ROOT or (Path(log_dir) if log_dir else None)
        handler: logging.Handler
        if directory is None:
            self.terminal_warnings.setLevel(logging.DEBUG)
            self.terminal_warnings.setFormatter(
                logging.Formatter(_FULL_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S")
            )
            handler = logging.NullHandler()  # the terminal has every record of ours
        else:
            directory.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(directory / f"logmetrics-{self.run_id}.log", delay=True)
            handler.setFormatter(logging.Formatter(_FULL_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S"))
            setattr(handler, RUN_LOG, True)
        handler.addFilter(_RunId(self.run_id))
        handler._logmetrics = True  # type: ignore[union-attr]
        everything.addHandler(handler)
        self.log_file = handler


_LOGGING = _Logging(run_id="")


def setup_logging(level: str, log_format: str, run_id: str) -> None:
    """text: the human summary (`console.say`'s lines) on stdout, other warnings and errors on
    stderr, and every record, once, in the run's log file (`use_log_dir`: under `logs/` until
    the config names `spark.log_dir`); json: every record, once, as one JSON object per line
    on stderr, for log shippers. Each line carries the run id. Configured once per command:
    the handlers of an earlier command in this process are replaced."""
    global _LOGGING
    ours = logging.getLogger("logmetrics")
    for logger in (ours, logging.getLogger()):
        for old in [h for h in logger.handlers if getattr(h, "_logmetrics", False)]:
            logger.removeHandler(old)
            old.close()
    ours.setLevel(getattr(logging, level))
    _LOGGING = _Logging(run_id=run_id)
    if log_format == "json":
        everything = logging.StreamHandler(sys.stderr)
        everything.setFormatter(_JsonFormatter())
        everything.addFilter(_RunId(run_id))
        everything._logmetrics = True  # type: ignore[attr-defined]
        logging.getLogger().addHandler(everything)
    else:
        summary = logging.StreamHandler(sys.stdout)
        summary.addFilter(is_console)
        summary.setFormatter(logging.Formatter("%(message)s"))
        warnings = logging.StreamHandler(sys.stderr)
        warnings.setLevel(logging.WARNING)
        warnings.addFilter(lambda record: not is_console(record))
        warnings.setFormatter(_TerminalWarnings())
        _LOGGING.terminal_warnings = warnings
        for handler in (summary, warnings):
            handler.addFilter(_RunId(run_id))
            handler._logmetrics = True  # type: ignore[attr-defined]
            ours.addHandler(handler)
    _LOGGING.use_log_dir("logs")
    for noisy in ("py4j", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # PySpark logs every analysis error with its whole JVM stack trace to stderr; we report the
    # error ourselves, in one line. (A worker that only asks `ready` may have no PySpark.)
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:
        return
    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def use_log_dir(log_dir: str | None) -> None:
    """The run's log file under `log_dir`, once the command's config names it."""
    _LOGGING.use_log_dir(log_dir)
