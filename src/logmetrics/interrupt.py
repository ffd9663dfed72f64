"""Stopping a command on SIGINT (Ctrl-C) or SIGTERM (Airflow, Kubernetes, a Databricks cancel).

The first signal asks the command to stop at its next safe point; nothing is raised where the
signal lands (Python runs its handler in the main thread, which may be inside a call into the
JVM: an exception there leaves Py4J's connection half-read). From then on:

- no table commit begins (`committing`, around every commit attempt: it raises `Interrupted`);
  a commit in flight finishes; the one commit still made is the ledger's record of the stop
  (`recording`: the run's unfinished days as `interrupted`);
- a thread cancels the Spark jobs of local Spark this process started, except the jobs of a
  commit in flight (tagged `COMMIT_TAG`), so a main pass stops in seconds, not at its end;
- the flows stop at their safe points (`check`: between chunks, before Spark starts);
- the CLI stops the local Spark it started (`stop_local_spark`: the JVM ends before the
  process does) and exits 130 (SIGINT) or 143 (SIGTERM) with one line.

A second signal ends the process at once, its local JVM killed first: the next run resumes as
after a SIGKILL. While a command runs, SIGINT and SIGTERM stay with this module: PySpark's
SparkContext installs its own SIGINT handler as it starts (cancel every job from inside the
interrupted call into the JVM, then raise KeyboardInterrupt there), which turned a Ctrl-C during
start-up into a Py4J error that the run carried on past.

A terminal's Ctrl-C and Airflow's kill signal the command's whole process group: the local JVM
runs in a session of its own (`session.launch_local_jvm`), so the signals reach this process
alone and the JVM stops when this module says.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from logmetrics.console import say

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)
COMMIT_TAG = "logmetrics-commit"
"""The Spark job tag of a commit's jobs: a stopping run leaves them running."""
CANCEL_EVERY = 0.2
"""Seconds between two sweeps of the stopping run's Spark jobs (new ones start meanwhile)."""
STOP_SECONDS = 60.0
"""The longest a stopping run waits for its local Spark to stop, and then for its JVM to exit,
before it kills it."""


class Interrupted(BaseException):
    """A stop asked for by a signal, raised at a safe point. Not an Exception, like
    KeyboardInterrupt: no handler of errors takes it for one."""

    def __init__(self, signum: int, detail: str = "stopped at a safe point") -> None:
        self.signum = signum
        self.detail = detail
        super().__init__(f"interrupted ({signal_name(signum)}): {detail}; run again to resume")

    @property
    def exit_code(self) -> int:
        """130 for SIGINT, 143 for SIGTERM: 128 + the signal, as a shell reports it."""
        return 128 + self.signum


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def not_published(days: Sequence[dt.date]) -> str:
    """`2026-10-11..2026-10-20, 2026-10-25 not published`: runs of consecutive days."""
    if not days:
        return "every day it computed was published"
    spans: list[list[dt.date]] = []
    for day in sorted(days):
        if spans and (day - spans[-1][-1]).days == 1:
            spans[-1].append(day)
        else:
            spans.append([day])
    text = ", ".join(f"{s[0]}..{s[-1]}" if len(s) > 1 else str(s[0]) for s in spans)
    return f"{text} not published"


@dataclass
class _Command:
    """The running command's stop: the signal asked for, and whether the Spark it runs on is
    its own (a session there before it, a notebook's or the test suite's, is left alone)."""

    spark_before: bool
    signum: int | None = None
    done: threading.Event = field(default_factory=threading.Event)


_command: _Command | None = None
_recording = threading.local()


def requested() -> int | None:
    """The signal a stop was asked for with, or None."""
    command = _command
    return None if command is None else command.signum


def check(detail: str = "stopped at a safe point") -> None:
    """A safe point: raise `Interrupted` once a stop was asked for."""
    signum = requested()
    if signum is not None:
        raise Interrupted(signum, detail)


@contextlib.contextmanager
def committing() -> Iterator[None]:
    """Around one attempt of a table commit: none begins once a stop was asked for (but the
    ledger's record of it, `recording`); one in flight is tagged, so the stop leaves its Spark
    jobs running."""
    signum = requested()
    if signum is not None and not getattr(_recording, "on", False):
        raise Interrupted(signum, "stopped before a table commit")
    context = _own_spark_context()
    if context is None:
        yield
        return
    context.addJobTag(COMMIT_TAG)
    try:
        yield
    finally:
        context.removeJobTag(COMMIT_TAG)


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """The stopping run's one commit after the signal, in this thread: its ledger rows."""
    _recording.on = True
    try:
        yield
    finally:
        _recording.on = False


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[None]:
    """Handle SIGINT and SIGTERM as this module says while the block runs (a command); outside
    the main thread, where Python cannot handle signals, the block runs as it is."""
    global _command
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    command = _Command(spark_before=_spark_context() is not None)
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    install = signal.signal
    for signum in SIGNALS:
        install(signum, _handle)
    signal.signal = _keeping_ours(install)
    _command = command
    watcher = threading.Thread(target=_watch, args=(command,), name="interrupt", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        command.done.set()
        _command = None
        signal.signal = install
        for signum, handler in before.items():
            install(signum, handler if handler is not None else signal.SIG_DFL)
        watcher.join(timeout=5)


def stop_local_spark() -> None:
    """Stop the local Spark this command started, and wait for its JVM to exit (it is killed
    after STOP_SECONDS): the JVM must not outlive the process, holding its memory. A session
    that was there before the command, or a JVM this process did not launch (spark-submit,
    Databricks), is left alone."""
    command = _command
    process = _local_jvm()
    if command is None or command.spark_before or process is None:
        return
    command.done.set()  # no more sweeps of its jobs
    context = _spark_context()
    if context is not None:
        stopping = threading.Thread(target=_stop_quietly, args=(context,), daemon=True)
        stopping.start()
        stopping.join(STOP_SECONDS)
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()  # PySpark's gateway exits at the end of its input
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        log.warning("local Spark did not exit within %.0fs of stopping: killed", STOP_SECONDS)
        process.kill()
        process.wait()


KILL_WAIT_SECONDS = 10.0
"""How long a second signal waits for the killed JVM to be gone before the process ends."""


def _handle(signum: int, frame: FrameType | None) -> None:
    """The signal handler: the first signal is recorded (the watcher acts on it), a second one
    ends the process at once."""
    command = _command
    if command is None:
        return
    if command.signum is None:
        command.signum = signum
        return
    process = None if command.spark_before else _local_jvm()
    if process is not None:
        with contextlib.suppress(OSError):
            process.kill()
    line = (
        f"logmetrics: interrupted again ({signal_name(signum)}): stopped at once; the next run "
        "computes the unfinished days again\n"
    )
    with contextlib.suppress(OSError):
        os.write(2, line.encode())
    if process is not None:
        # Reaped before this process ends: SIGKILL lands asynchronously, and a JVM of gigabytes
        # takes a moment to go (seen: still running as this process exited). Meanwhile
        # PySpark's threads see their connections to it break and print tracebacks: that line
        # was the last word, so stderr goes nowhere from here.
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
            process.wait(timeout=KILL_WAIT_SECONDS)
    os._exit(128 + signum)


def _keeping_ours(install: Callable[..., Any]) -> Callable[..., Any]:
    """`signal.signal` while a command runs: SIGINT and SIGTERM stay with `_handle`. Not in a
    child forked meanwhile, where a `preexec_fn` sets what the program it runs inherits (the
    JVM PySpark launches ignores SIGINT so; kept with `_handle`, which the program's start
    resets, it caught it instead, and a Ctrl-C ended it)."""
    ours = os.getpid()

    def signal_signal(signum: int, handler: Any) -> Any:
        if signum in SIGNALS and handler is not _handle and os.getpid() == ours:
            return signal.getsignal(signum)
        return install(signum, handler)

    return signal_signal


def _watch(command: _Command) -> None:
    """Wait for the first signal; then say it once and cancel the Spark jobs that are not a
    commit's, sweep after sweep, until the command ends."""
    while command.signum is None and not command.done.wait(0.1):
        pass
    if command.signum is None:
        return
    say(
        log,
        f"{signal_name(command.signum)}: stopping at the next safe point (a second signal "
        "stops at once)",
        signal=signal_name(command.signum),
    )
    while not command.done.is_set():
        if not command.spark_before and _local_jvm() is not None:
            _cancel_all_but_commits()
        command.done.wait(CANCEL_EVERY)


def _cancel_all_but_commits() -> None:
    context = _spark_context()
    if context is None:
        return
    try:
        jvm_context = context._jsc.sc()
        tracker = jvm_context.statusTracker()
        active = set(tracker.getActiveJobIds())
        if active:
            for job in sorted(active - set(tracker.getJobIdsForTag(COMMIT_TAG))):
                jvm_context.cancelJob(job)
    except Exception as exc:  # Spark stopping meanwhile
        log.debug("cancelling the stopping run's jobs: %s", exc)


def _spark_context() -> Any:
    """The classic SparkContext of this process, if PySpark started one."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    return SparkContext._active_spark_context


def _local_jvm() -> subprocess.Popen[bytes] | None:
    """The JVM this process launched for local Spark (PySpark's gateway process), if any."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    return getattr(SparkContext._gateway, "proc", None)


def _own_spark_context() -> Any:
    """The SparkContext of the local Spark this command started, which a stop may cancel
    jobs of; None otherwise (no command, a session before it, a platform's JVM)."""
    command = _command
    if command is None or command.spark_before or _local_jvm() is None:
        return None
    return _spark_context()


def _stop_quietly(context: Any) -> None:
    with warnings.catch_warnings(), contextlib.suppress(Exception):
        warnings.simplefilter("ignore")
        context.stop()
