"""Side steps: work run from threads of the process's one SparkSession, beside the main pass.

Delta commits to different tables cannot conflict and Spark's scheduler is thread-safe, so a
chunk's table writes, the run's ledger and history reads and the cluster keys' check overlap
their fixed latencies instead of adding them up. Each step is timed as a phase.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from logmetrics.phases import Phases

T = TypeVar("T")


class SideSteps:
    """Steps of a chunk run from threads of the process's one SparkSession, each timed as a
    phase: the Delta commits of different tables cannot conflict and Spark's scheduler is
    thread-safe, so their fixed latencies overlap instead of adding up. Leaving the block
    waits for every step."""

    def __init__(self, phases: Phases) -> None:
        self._phases = phases
        # A chunk's side steps: eight table writes, the run's ledger and history reads, the
        # cluster keys' check; more threads than that would only wait.
        self._pool = ThreadPoolExecutor(max_workers=12, thread_name_prefix="logmetrics")

    def __enter__(self) -> SideSteps:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)

    def submit(self, name: str, step: Callable[..., T], *args: Any) -> Future[T]:
        return self._pool.submit(self._timed, name, step, *args)

    def _timed(self, name: str, step: Callable[..., T], *args: Any) -> T:
        with self._phases.timed(name):
            return step(*args)


def wait_all(futures: Sequence[Future[Any]]) -> None:
    """Wait for every step, then raise the first failure (no step is left running)."""
    wait(futures)
    for future in futures:
        future.result()
