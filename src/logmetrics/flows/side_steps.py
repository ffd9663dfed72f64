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
        # A run's side steps at most at once: a chunk's nine table writes (or, for the first
        # chunk, the tables' states), the ledger's and the history's reads, the `started` rows
        # and the run's position, the cluster keys and their check; threads that mostly wait
        # on the JVM.
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="logmetrics")

    def __enter__(self) -> SideSteps:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)

    def submit(
        self, name: str, step: Callable[..., T], *args: Any, after: Future[Any] | None = None
    ) -> Future[T]:
        """Run `step(*args)` in a thread, timed as the phase `name`; with `after`, once that
        step has succeeded (its failure is this step's, and the wait is not timed)."""
        return self._pool.submit(self._timed, name, step, after, *args)

    def _timed(self, name: str, step: Callable[..., T], after: Future[Any] | None, *args: Any) -> T:
        if after is not None:
            after.result()
        with self._phases.timed(name):
            return step(*args)


def wait_all(futures: Sequence[Future[Any]]) -> None:
    """Wait for every step, then raise the first failure (no step is left running)."""
    wait(futures)
    for future in futures:
        future.result()
