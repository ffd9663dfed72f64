"""Errors a user can cause: the CLI prints them as one line and exits non-zero."""

from __future__ import annotations


class LogmetricsError(Exception):
    """A condition we expect and can explain in one line (bad input, missing path, ...)."""

    exit_code = 1


class ConfigError(LogmetricsError):
    """The configuration or the command line is invalid; raised before Spark starts."""

    exit_code = 2


class InputError(LogmetricsError):
    """An input (served logs, cluster table) is missing, unreadable or off-contract."""


class QualityGateFailed(LogmetricsError):
    """At least one day failed a blocking data-quality check and was not published."""

    exit_code = 3


class AlertsFired(LogmetricsError):
    """`logmetrics alerts --fail-on-alert` found at least one `alert` in its range."""

    exit_code = 4


class InputNotReady(LogmetricsError):
    """A day's logs have not all landed (its `inputs.served_logs.ready_marker` is missing)."""

    exit_code = 5


def failure_line(exc: Exception) -> str:
    """One line for a failure, inside Spark or not: its message's first line, and for a file
    that could not be read (a damaged file on remote storage, which the scan does not read
    ahead), the underlying cause, which says what is wrong with it."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return _first_line(str(exc)) or type(exc).__name__
    first = _first_line(str(java.getMessage()))
    cause = java.getCause()
    if "FAILED_READ_FILE" in first and cause is not None:
        first = f"{first} ({_first_line(str(cause.getMessage()))})"
    return first


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""
