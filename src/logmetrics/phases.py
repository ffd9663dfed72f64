"""Where a run's wall time goes: start-up, inputs, the main pass, gates, each write, the ledger.

A `Phases` is made by the command that runs the job and handed down; each step wraps itself in
`phases.timed(name)`. Phases may overlap (the table writes run side by side), so each phase
keeps its own start and length and the summary gives both: what a reader needs to see that a
nightly run is dominated by its work, not by overhead. The CLI logs it as one line when the run
ends (and as JSON fields with `--log-format json`, which the fixed-cost benchmark reads).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Phase:
    name: str
    started: float  # seconds since the epoch
    seconds: float


class Phases:
    """The phases of one run, in the order they ended (safe to use from several threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: list[Phase] = []
        self._running: dict[int, str] = {}  # a token per phase in progress -> its name

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        started, began = time.time(), time.perf_counter()
        token = object()
        with self._lock:
            self._running[id(token)] = name
        try:
            yield
        finally:
            with self._lock:
                del self._running[id(token)]
            self.add(name, started, time.perf_counter() - began)

    def running(self) -> list[str]:
        """The phases in progress, in the order they began (for progress lines)."""
        with self._lock:
            return list(dict.fromkeys(self._running.values()))

    def add(self, name: str, started: float, seconds: float) -> None:
        with self._lock:
            self._done.append(Phase(name, started, seconds))

    def totals(self) -> dict[str, float]:
        """Seconds per phase name, summed over its occurrences (chunks), first-seen order."""
        out: dict[str, float] = {}
        with self._lock:
            for phase in self._done:
                out[phase.name] = out.get(phase.name, 0.0) + phase.seconds
        return out

    def describe(self) -> str:
        """`start-up 6.1s, main pass 2.3s, ...`: one line for the log."""
        return ", ".join(f"{name} {seconds:.1f}s" for name, seconds in self.totals().items())

    def fields(self) -> dict[str, Any]:
        """The same as JSON fields: totals and every phase with its start (epoch seconds)."""
        with self._lock:
            done = list(self._done)
        return {
            "phase_seconds": {k: round(v, 3) for k, v in self.totals().items()},
            "phases": [
                {"name": p.name, "started": round(p.started, 3), "seconds": round(p.seconds, 3)}
                for p in done
            ],
        }
