"""Errors a user can cause: the CLI prints them as one line and exits non-zero."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from logmetrics.console import run_log


class LogmetricsError(Exception):
    """A condition we expect and can explain in one line (bad input, missing path, ...)."""

    exit_code = 1
    then: Callable[[], None] | None = None
    """What the command says after the error's line (a failed run's closing line), if any."""


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


def failure_line(exc: BaseException) -> str:
    """One line for a failure: its message's first line. For an error from the JVM (a Py4J
    error, a failed Spark job such as a lost task), also its root cause (the innermost
    exception it carries: a task's OutOfMemoryError, a file gone, the JVM's connection lost),
    unless the first line already says it, and where its full trace is: the run's log file
    (`console.run_log`), which the CLI writes it to."""
    first = _first_line(str(exc)) or type(exc).__name__
    if not _from_the_jvm(exc):
        return first
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    try:
        if java is not None:
            first = _first_line(str(java.getMessage())) or first
        cause = _root_cause(exc, java)
    except Exception:  # the JVM is gone: what Python holds of the error is all there is
        cause = None
    first = first.removesuffix("Trace:").rstrip()  # Py4J's: what follows is the cause
    first, cause = _name_the_failed_file(first, cause, java)
    if cause and cause not in first:
        first = f"{first} (root cause: {cause})"
    where = run_log()
    return f"{first}; full trace in {where}" if where else first


_READING_FILE = re.compile(r"(?P<head>while reading file )(?P<path>.*?)\.(?=\s+SQLSTATE|\s*$)")
_FOR_FILE = re.compile(r"\bfor file:? (?P<path>(?:\w+:/+)?[^\s:]+)")


def _name_the_failed_file(first: str, cause: str | None, java: Any) -> tuple[str, str | None]:
    """Spark's FAILED_READ_FILE line naming its file as a path: `file:///tmp/x.parquet` as
    `/tmp/x.parquet`; where it names none (`reading file .`: Comet's native reader), the file
    its causes name (`Failed to fetch metadata for file tmp/x.parquet`, a path without its
    leading `/` as the native reader writes it), when that is a file here. The line and the
    cause are returned as they came where no file can be named."""
    found = _READING_FILE.search(first)
    if found is None:
        return first, cause
    path = _local_or_uri(found["path"])
    if not path:
        for text in [cause or "", *_cause_messages(java)]:
            named = _FOR_FILE.search(text)
            path = _local_or_uri(named["path"]) if named else None
            if named and path:
                cause = cause.replace(named["path"], path) if cause else cause
                break
    if not path:
        return first, cause
    return first[: found.start("path")] + path + first[found.end("path") :], cause


def _local_or_uri(text: str) -> str | None:
    """A file as a person names it: a local path for `file:` URIs and for a path relative to
    `/` that is a file here; another store's URI as it is; None for nothing."""
    if not text:
        return None
    if text.startswith("file:"):
        return "/" + text.removeprefix("file:").lstrip("/")
    if "://" in text or text.startswith("/"):
        return text
    return f"/{text}" if Path(f"/{text}").is_file() else None


def _cause_messages(java: Any) -> list[str]:
    """The messages of a Java exception's causes, outermost first (none for a Python one)."""
    messages: list[str] = []
    cause = java
    try:
        while cause is not None and len(messages) < 50:
            messages.append(str(cause.getMessage() or ""))
            cause = cause.getCause()
    except Exception:  # not a Java exception, or the JVM is gone
        pass
    return messages


def _from_the_jvm(exc: BaseException) -> bool:
    return any(cls.__module__.startswith(("py4j.", "pyspark.errors")) for cls in type(exc).__mro__)


def _root_cause(exc: BaseException, java: Any) -> str | None:
    """The innermost cause of a JVM error, as `Class: first line of its message`: down the
    Java exception's causes; for a Py4J error without one, down its Python causes, else what
    Py4J wrote under its first line (`Trace:`), else, for its bare `An error occurred while
    calling ...`, raised when no answer came, that the JVM did not answer."""
    if java is not None:
        seen, cause = 0, java
        while cause.getCause() is not None and seen < 50:
            cause, seen = cause.getCause(), seen + 1
        if seen == 0:
            return None
        message = _first_line(str(cause.getMessage() or ""))
        name = str(cause.getClass().getName())
        return f"{name}: {message}" if message else name
    chain: list[BaseException] = [exc]
    while len(chain) < 50:
        following = getattr(chain[-1], "cause", None) or chain[-1].__cause__
        if not isinstance(following, BaseException):
            break
        chain.append(following)
    if len(chain) > 1:
        root = chain[-1]
        message = _first_line(str(root))
        return f"{type(root).__name__}: {message}" if message else type(root).__name__
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith("Trace:"):
        return lines[1]
    if len(lines) == 1 and lines[0].startswith("An error occurred while calling"):
        return "the JVM did not answer: it stopped, or the connection to it broke"
    return None


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""
