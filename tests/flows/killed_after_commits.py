"""`python killed_after_commits.py N ARGS...`: `logmetrics ARGS...` that SIGKILLs itself right
after its N-th Delta commit (a table write or a ledger append), for
tests/flows/test_nightly_commits.py. Its commits are made one at a time, so that exactly N
have landed when the process dies, whichever of its threads made them. Not a test module."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from logmetrics.tables import catalog

KILL_AFTER = int(sys.argv[1])
_commits = 0
_one_at_a_time = threading.Lock()
_save = catalog._save


def _save_then_maybe_die(*args: Any, **kwargs: Any) -> None:
    global _commits
    with _one_at_a_time:
        _save(*args, **kwargs)
        _commits += 1
        if _commits == KILL_AFTER:
            sys.stderr.write(f"killed after commit {_commits}\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)


catalog._save = _save_then_maybe_die

if __name__ == "__main__":
    from logmetrics.cli import main

    raise SystemExit(main(sys.argv[2:]))
