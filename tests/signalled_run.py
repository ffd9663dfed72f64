"""`python signalled_run.py POINT SIGNALS FD ARGS...`: `logmetrics ARGS...` in a process that
pauses at POINT, says so on the file descriptor FD (`at POINT`), and waits there until SIGNALS
signals sent by the test (tests/test_stopping.py) have reached it, saying `took N` after each.
Then it carries on. POINT may name several points joined by `+` (`main-pass+commit:2`): the
process then pauses at each in turn for one signal (SIGNALS is their number). Not a test
module.

POINT is one of:
- `start-up`: local Spark's JVM is launched, PySpark not yet connected to it;
- `main-pass`: the first chunk's main pass begins, once the run's `started` rows are committed;
- `commit:N`: inside the N-th table commit, past its check for a stop, before it is made.

Its commits are made one at a time (as tests/flows/killed_after_commits.py's), and each says
on FD when it `begins`, `landed` or was `refused` (it raised), with what it writes: so a test
knows which commits began after the signal. The signal is known to have reached the process
by Python's wakeup file descriptor, which its C-level handler writes to whatever handler is
installed, and, where logmetrics has one, once its handler has run (`interrupt.requested`)."""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyspark.java_gateway

from logmetrics import phases
from logmetrics.tables import catalog

POINTS, SIGNALS, OUT = sys.argv[1].split("+"), int(sys.argv[2]), int(sys.argv[3])
AT_EACH = SIGNALS if len(POINTS) == 1 else 1
WAIT = 600.0

_woken, _wake = os.pipe()
os.set_blocking(_woken, False)
os.set_blocking(_wake, False)
_said = threading.Lock()
_one_commit_at_a_time = threading.Lock()
_commits = itertools.count(1)
_landed: list[str] = []
_taken = itertools.count(1)


def _say(line: str) -> None:
    with _said:
        os.write(OUT, f"{line}\n".encode())


def _handled() -> bool:
    """Whether logmetrics' own handler has run (a logmetrics without one: only the arrival)."""
    try:
        from logmetrics import interrupt
    except ImportError:
        return True
    return interrupt.requested() is not None


def _wait_for_signals(point: str) -> None:
    """Say the point, then wait for its signals (AT_EACH) to reach the process."""
    _say(f"at {point}")
    deadline = time.monotonic() + WAIT
    for n in itertools.islice(_taken, AT_EACH):
        while time.monotonic() < deadline:
            ready, _, _ = select.select([_woken], [], [], 0.05)
            if ready and os.read(_woken, 1):
                break
        while not _handled() and time.monotonic() < deadline:
            time.sleep(0.01)
        _say(f"took {n}")


def _launch_then_wait(launch: Callable[..., Any]) -> Callable[..., Any]:
    def launched(*args: Any, **kwargs: Any) -> Any:
        process = launch(*args, **kwargs)
        _wait_for_signals("start-up")
        return process

    return launched


def _timed_then_wait(timed: Callable[..., Any]) -> Callable[..., Any]:
    first = threading.Event()

    @contextlib.contextmanager
    def timed_phase(self: phases.Phases, name: str) -> Iterator[None]:
        if name == "main pass" and not first.is_set():
            first.set()
            while not any(w.startswith("append to") and w.endswith("/job_runs") for w in _landed):
                time.sleep(0.01)  # the run's `started` rows, committed
            _wait_for_signals("main-pass")
        with timed(self, name):
            yield

    return timed_phase


def _serialized(retry: Callable[..., Any]) -> Callable[..., Any]:
    def one_at_a_time(action: Callable[[], Any], what: str) -> Any:
        with _one_commit_at_a_time:
            n = next(_commits)
            _say(f"begins {n} {what}")
            made = action
            if f"commit:{n}" in POINTS:

                def made() -> Any:  # inside the commit, past its check for a stop
                    _wait_for_signals(f"commit:{n}")
                    return action()

            try:
                result = retry(made, what)
            except BaseException as exc:
                _say(f"refused {n} {what}: {type(exc).__name__}")
                raise
            _landed.append(what)
            _say(f"landed {n} {what}")
            return result

    return one_at_a_time


if __name__ == "__main__":
    signal.set_wakeup_fd(_wake)
    if "start-up" in POINTS:
        pyspark.java_gateway.Popen = _launch_then_wait(pyspark.java_gateway.Popen)  # type: ignore[attr-defined]
    if "main-pass" in POINTS:
        phases.Phases.timed = _timed_then_wait(phases.Phases.timed)  # type: ignore[method-assign]
    catalog._retry_conflicts = _serialized(catalog._retry_conflicts)

    from logmetrics.cli import main

    raise SystemExit(main(sys.argv[4:]))
