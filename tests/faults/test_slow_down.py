"""The S3 store throttles: every request answered `503 SlowDown` (an HTTP proxy in front of
the server: Toxiproxy cannot answer in HTTP) while a nightly on S3 reads its logs, in its main
pass, inside a table commit, inside the ledger's append, and while only the writer lease's
renewals run. The issue's window is 20 s: the main pass meets it whole; the other points 8 s,
which like 20 s turns every request away until it ends (S3A's throttle retries and the direct
reads' back-off then find the store answering): what is proven is that the patience
outlasts the window (20 s is the full-length figure).

Each run rides the throttling out: it publishes, every table as the uninterrupted nightly, the
lease released, its JVM gone with it; and the next run right away leaves the tables so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from conftest import Scenario, Store, check_nightly_rides_out, points
from storage_faults import HttpFaultProxy

pytestmark = [pytest.mark.slow, pytest.mark.objectstore, pytest.mark.faults]

FULL, SHORT = 20.0, 8.0


@pytest.fixture
def slow_down(store: Store) -> Iterator[Scenario]:
    proxy = HttpFaultProxy(store.server.endpoint)

    def fault(window: float | None) -> Any:
        proxy.slow_down(window or 0.0)
        return lambda: None

    yield Scenario("503 SlowDown", proxy.endpoint, fault, met=lambda: proxy.answered > 0)
    proxy.stop()


@pytest.mark.parametrize("point", points("reading-logs", "main-pass"))
def test_throttling_is_ridden_out(
    s3_spark: SparkSession,
    store: Store,
    warehouse: str,
    tmp_path: Path,
    slow_down: Scenario,
    point: str,
) -> None:
    """Fails if the run hangs past its bound, leaves a traceback, the lease held or its JVM
    behind, gives up (the patience shorter than the window: S3A's default throttle retries
    or the direct reads' three tries), or publishes a wrong or doubled row."""
    window = FULL if point == "main-pass" else SHORT
    check_nightly_rides_out(s3_spark, store, warehouse, tmp_path, slow_down, point, window)
