"""`python faulted_run.py POINT OUT IN ARGS...`: `logmetrics ARGS...` in a process that stops at
POINT, says so on the file descriptor OUT (`at POINT`), and waits there for one byte on the file
descriptor IN: the test (tests/test_storage_faults.py) breaks the S3 store meanwhile, so that
what the run does next meets the fault. Then it carries on. Not a test module.

POINT is one of:
- `reading-logs`: the run reads its logs' state (their footers, on S3), Spark started and the
  writer lease held;
- `main-pass` (or `main-pass:N`, the N-th chunk's): the main pass begins, once the run's
  `started` rows are committed;
- `table-commit`: inside the run's first table commit (not the ledger's), before it is made;
- `ledger-append`: inside the ledger's append of the `published` rows, before it is made;
- `lease-renewal`: the writer lease is renewed every second from the start; the run stops
  at its first main pass, where it makes no request of its own, while the renewals meet the
  fault, and carries on once the test writes its byte (after the fault).

Its commits are made one at a time (as tests/signalled_run.py's), and each says on OUT when it
`begins`, `landed` or was `refused` (it raised), with what it writes; each renewal of the lease
says `renewed` or `renewal failed`."""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from logmetrics import phases
from logmetrics.tables import catalog, lease

POINT, OUT, IN = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

_said = threading.Lock()
_one_commit_at_a_time = threading.Lock()
_commits = itertools.count(1)
_ledger_appends = itertools.count(1)
_tables_begun = itertools.count(1)
_main_passes = itertools.count(1)
_started = threading.Event()  # the run's `started` rows landed


def _say(line: str) -> None:
    with _said:
        os.write(OUT, f"{line}\n".encode())


def _wait_for_the_fault() -> None:
    _say(f"at {POINT}")
    os.read(IN, 1)


def _timed_then_wait(timed: Callable[..., Any]) -> Callable[..., Any]:
    first_inputs = threading.Event()
    chunk = int(POINT.split(":")[1]) if POINT.startswith("main-pass:") else 1

    @contextlib.contextmanager
    def timed_phase(self: phases.Phases, name: str) -> Iterator[None]:
        if POINT == "reading-logs" and name == "input state" and not first_inputs.is_set():
            first_inputs.set()
            _wait_for_the_fault()
        waits = POINT.startswith(("main-pass", "lease-renewal"))
        if name == "main pass" and next(_main_passes) == chunk and waits:
            _started.wait()
            _wait_for_the_fault()
        with timed(self, name):
            yield

    return timed_phase


def _serialized(retry: Callable[..., Any]) -> Callable[..., Any]:
    def one_at_a_time(action: Callable[[], Any], what: str) -> Any:
        with _one_commit_at_a_time:
            n = next(_commits)
            _say(f"begins {n} {what}")
            ledger = what.endswith("/job_runs")
            here = (POINT == "ledger-append" and ledger and next(_ledger_appends) == 2) or (
                POINT == "table-commit" and not ledger and next(_tables_begun) == 1
            )
            made = action
            if here:

                def made() -> Any:  # inside the commit, past its checks
                    _wait_for_the_fault()
                    return action()

            try:
                result = retry(made, what)
            except BaseException as exc:
                _say(f"refused {n} {what}: {type(exc).__name__}")
                raise
            _say(f"landed {n} {what}")
            if ledger:
                _started.set()
            return result

    return one_at_a_time


def _renewals_said(write: Callable[..., str]) -> Callable[..., str]:
    def written(spark: Any, uri: str, text: str, etag: str | None) -> str:
        if threading.current_thread().name != "writer-lease":
            return write(spark, uri, text, etag)
        try:
            found = write(spark, uri, text, etag)
        except BaseException as exc:
            _say(f"renewal failed: {type(exc).__name__}")
            raise
        _say("renewed")
        return found

    return written


if __name__ == "__main__":
    phases.Phases.timed = _timed_then_wait(phases.Phases.timed)  # type: ignore[method-assign]
    catalog._retry_conflicts = _serialized(catalog._retry_conflicts)
    lease._write = _renewals_said(lease._write)
    if POINT == "lease-renewal":
        lease.RENEW_SECONDS = 1

    from logmetrics.cli import main

    raise SystemExit(main(sys.argv[4:]))
