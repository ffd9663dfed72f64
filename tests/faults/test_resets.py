"""Connections reset: Toxiproxy between the runs and the S3 server resets every connection
(TCP RST, `reset_peer`) as soon as it carries a request, new ones and those open, while a
nightly on S3 reads its logs, in its main pass, inside a table commit, inside the ledger's
append, and while only the writer lease's renewals run: for 20 s in the main pass, 8 s at the
other points (like 20 s, every request reset until the window ends: what is proven is that
the patience outlasts it, and that a request whose answer was lost, a commit's or a lease
renewal's, may have landed).

Each run rides the resets out: it publishes, every table as the uninterrupted nightly, the
lease released, its JVM gone with it; and the next run right away leaves the tables so."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from conftest import Scenario, Store, check_nightly_rides_out, points

pytestmark = [pytest.mark.slow, pytest.mark.objectstore, pytest.mark.faults]

FULL, SHORT = 20.0, 8.0


@pytest.fixture
def resets(store: Store, toxiproxy: Any) -> Scenario:
    name = f"s3-{os.urandom(3).hex()}"
    endpoint = toxiproxy.proxy(name, store.server.endpoint)

    def fault(window: float | None) -> Any:
        toxiproxy.reset_connections(name)
        return lambda: toxiproxy.heal(name)

    return Scenario("connection resets", endpoint, fault)


@pytest.mark.parametrize("point", points("reading-logs", "table-commit", "lease-renewal"))
def test_connection_resets_are_ridden_out(
    s3_spark: SparkSession,
    store: Store,
    warehouse: str,
    tmp_path: Path,
    resets: Scenario,
    point: str,
) -> None:
    """Fails if the run hangs past its bound, leaves a traceback, the lease held (a renewal
    that landed unseen, its ETag not the one the run names) or its JVM behind, gives up, or
    publishes a wrong or doubled row."""
    window = FULL if point == "main-pass" else SHORT
    check_nightly_rides_out(s3_spark, store, warehouse, tmp_path, resets, point, window)
