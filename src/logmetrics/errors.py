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
