"""The warehouse's writer lease on a real S3 server: created only if absent (S3's conditional
write through S3A), refused to a second writer in one line naming the holder, taken over once
its holder is gone or it lapsed, renewed, lost to a takeover (no commit after), released."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time

import pytest
from pyspark.sql import SparkSession

from logmetrics import storage
from logmetrics.config import OutputConfig
from logmetrics.errors import LogmetricsError
from logmetrics.tables import lease
from logmetrics.tables.catalog import JOB_RUNS_TABLE, append
from logmetrics.tables.lease import LEASE_FILE, LeaseLost, held, needs_lease


def test_which_warehouses_need_a_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    s3 = OutputConfig(warehouse="s3a://bucket/wh")
    assert needs_lease(s3, {})
    assert needs_lease(OutputConfig(warehouse="s3://bucket/wh"), {})
    assert not needs_lease(OutputConfig(warehouse="/data/wh"), {})
    assert not needs_lease(OutputConfig(warehouse="abfss://c@acct.dfs.core.windows.net/wh"), {})
    assert not needs_lease(OutputConfig(catalog="main", schema="m"), {})
    dynamo = {"spark.delta.logStore.s3a.impl": "io.delta.storage.S3DynamoDBLogStore"}
    assert not needs_lease(s3, dynamo)
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    assert not needs_lease(s3, {})


def _holder(uri: str) -> dict[str, object]:
    where = storage.place(uri)
    assert where is not None
    return json.loads(where.read_text())


def _plant(uri: str, **fields: object) -> None:
    """A lease another run left (written directly, as that run would have)."""
    holder = {
        "run_id": "0ther0run0id",
        "command": "backfill",
        "host": "another-host",
        "pid": 1,
        "acquired_at": "2026-12-01T00:00:00+00:00",
        "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)).isoformat(),
        **fields,
    }
    where = storage.place(uri)
    assert where is not None
    where.write_text(json.dumps(holder))


def test_a_second_writer_is_refused_and_a_released_lease_is_gone(
    s3_spark: SparkSession, s3: str
) -> None:
    output = OutputConfig(warehouse=f"{s3}/wh")
    uri = f"{s3}/wh/{LEASE_FILE}"
    with held(s3_spark, output, "run0000first", "backfill") as first:
        assert first is not None
        assert _holder(uri)["run_id"] == "run0000first"
        with (
            pytest.raises(LogmetricsError) as refused,
            held(s3_spark, output, "run00second", "run"),
        ):
            pass
        message = str(refused.value)
        assert message.startswith(f"another logmetrics run writes the warehouse {s3}/wh: ")
        assert "run run0000first (backfill, pid" in message and "\n" not in message
    where = storage.place(uri)
    assert where is not None and not where.exists()


def test_a_lease_left_by_a_run_that_is_gone_is_taken_over(
    s3_spark: SparkSession, s3: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its process of this host no longer runs (a SIGKILL): taken at once. Another host's: held
    until it lapses, then taken."""
    import socket

    output = OutputConfig(warehouse=f"{s3}/wh")
    uri = f"{s3}/wh/{LEASE_FILE}"
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    _plant(uri, host=socket.gethostname(), pid=int(finished.stdout))
    with (
        caplog.at_level("WARNING", logger="logmetrics"),
        held(s3_spark, output, "run0000after", "run"),
    ):
        assert _holder(uri)["run_id"] == "run0000after"
    assert "took over the writer lease" in caplog.text and "0ther0run0id" in caplog.text

    _plant(uri)  # another host's, still valid
    with (
        pytest.raises(LogmetricsError, match="0ther0run0id"),
        held(s3_spark, output, "run000second", "run"),
    ):
        pass
    _plant(uri, expires_at=(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)).isoformat())
    with held(s3_spark, output, "run0000third", "run"):
        assert _holder(uri)["run_id"] == "run0000third"


def test_a_lease_taken_over_stops_its_old_holder_before_its_next_commit(
    s3_spark: SparkSession, s3: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder's renewal finds the lease changed (another run took it over after it lapsed):
    no commit begins after that."""
    monkeypatch.setattr(lease, "RENEW_SECONDS", 0.5)
    output = OutputConfig(warehouse=f"{s3}/wh")
    uri = f"{s3}/wh/{LEASE_FILE}"
    rows = s3_spark.createDataFrame([], JOB_RUNS_TABLE.schema)
    with held(s3_spark, output, "run000slowly", "backfill") as mine:
        assert mine is not None
        before = _holder(uri)["expires_at"]
        time.sleep(1.5)
        assert _holder(uri)["expires_at"] > before  # renewed
        _plant(uri, run_id="run0takeover")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                mine.check()
            except LeaseLost:
                break
            time.sleep(0.2)
        with pytest.raises(LeaseLost, match="run0takeover"):
            append(s3_spark, rows, output, JOB_RUNS_TABLE)
    assert _holder(uri)["run_id"] == "run0takeover"  # not released by the run that lost it


def test_two_creators_of_the_lease_at_once_the_store_takes_one(
    s3_spark: SparkSession, s3: str
) -> None:
    """Two runs that both found no lease, their writes in flight at once: the store takes the
    first to land and refuses the other (S3's If-None-Match, as S3A sends it): a check made
    before the write could not tell them apart."""
    uri = f"{s3}/wh/{LEASE_FILE}"
    first = lease._open(s3_spark, uri, None)
    second = lease._open(s3_spark, uri, None)
    lease._close(s3_spark, uri, first, '{"run_id": "first"}')
    with pytest.raises(lease._Refused):
        lease._close(s3_spark, uri, second, '{"run_id": "second"}')
    assert _holder(uri) == {"run_id": "first"}
    etag = lease._write(s3_spark, uri, '{"run_id": "first, renewed"}', _etag(s3_spark, uri))
    stale = lease._open(s3_spark, uri, '"' + "0" * 32 + '"')
    with pytest.raises(lease._Refused):  # a renewal over an ETag that is no longer the lease's
        lease._close(s3_spark, uri, stale, '{"run_id": "stale"}')
    assert _etag(s3_spark, uri) == etag


def _etag(spark: SparkSession, uri: str) -> str:
    found = lease._read(spark, uri)
    assert found is not None
    return found[1]
