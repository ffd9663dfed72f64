"""The S3 server stalls (SIGSTOP: its kernel still takes connections and requests, nothing is
answered; SIGCONT answers every request it took meanwhile) while a nightly on S3 reads its
logs, in its main pass, inside a table commit, inside the ledger's append, and while only the
writer lease's renewals run. The issue's stall is 45 s; the points but one stall 35 s: like
45 s, past S3A's 30 s for an answer (connection.request.timeout and connection.timeout) and
the direct reads' 20 s, so that an attempt times out and a retry waits out the rest, within
the patience of either, which is all a 45 s stall proves. The main pass stalls 45 s.

Each run rides the stall out: it publishes, every table as the uninterrupted nightly, the
lease released, its JVM gone with it; and the next run right away leaves the tables so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from conftest import Scenario, Store, check_nightly_rides_out, points

pytestmark = [pytest.mark.slow, pytest.mark.objectstore, pytest.mark.faults]

FULL, SHORT = 45.0, 35.0


@pytest.fixture
def stall(store: Store) -> Scenario:
    server = store.server

    def fault(window: float | None) -> Any:
        server.pause()
        return server.resume

    return Scenario("stall", server.endpoint, fault)


@pytest.mark.parametrize(
    "point", points("reading-logs", "main-pass", "table-commit", "lease-renewal")
)
def test_a_stall_is_ridden_out(
    s3_spark: SparkSession,
    store: Store,
    warehouse: str,
    tmp_path: Path,
    stall: Scenario,
    point: str,
) -> None:
    """Fails if the run hangs past its bound, leaves a traceback, the lease held or its JVM
    behind, gives up (the patience shorter than the stall), or publishes a wrong or doubled
    row (a commit retried after its first PUT landed late)."""
    window = FULL if point == "main-pass" else SHORT
    check_nightly_rides_out(s3_spark, store, warehouse, tmp_path, stall, point, window)
