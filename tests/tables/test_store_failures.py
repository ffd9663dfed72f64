"""A run stopped by its S3 store says in one line which store, which path and what failed
(`storage.store_failure`), from the errors the direct reads (pyarrow) raise when the suite's
real S3 server is refused, throttles or resets; an error on S3 that is not the store's is left
to the other messages. No Spark: S3A's errors of the same faults are the fault tests'
(tests/faults/)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from benchmarks import s3_server

from logmetrics import storage
from storage_faults import HttpFaultProxy


@pytest.fixture
def proxy(s3_server_running: s3_server.S3Server) -> Iterator[HttpFaultProxy]:
    front = HttpFaultProxy(s3_server_running.endpoint)
    yield front
    front.stop()


def _failure(endpoint: str, uri: str) -> str | None:
    """`store_failure` of the error a quick read of `uri` at `endpoint` raises."""
    storage.configure(
        {
            "spark.hadoop.fs.s3a.endpoint": endpoint,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.endpoint.region": s3_server.REGION,
        }
    )
    where = storage.place(uri)
    assert where is not None
    quick = storage.Place(where.path, where.prefix, quick=True)
    with pytest.raises(OSError) as raised:
        quick.read_bytes()
    return storage.store_failure(raised.value)


def _dead_endpoint() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_refused_or_throttling_store_is_one_line_naming_it_and_the_path(
    s3: str, proxy: HttpFaultProxy
) -> None:
    dead = _dead_endpoint()
    line = _failure(dead, f"{s3}/wh/job_runs/_delta_log/00000000000000000000.json")
    assert line is not None and line.startswith(
        f"the S3 store at {dead} failed the run at {s3}/wh/job_runs/_delta_log/"
        "00000000000000000000.json: connection refused, after the retries its settings allow"
    ), line
    proxy.slow_down(60)
    line = _failure(proxy.endpoint, f"{s3}/logs/date=2026-08-01/part-0.parquet")
    assert line is not None and line.startswith(
        f"the S3 store at {proxy.endpoint} failed the run at {s3}/logs/date=2026-08-01/"
        "part-0.parquet: 503 SlowDown (throttled)"
    ), line
    assert proxy.answered == storage.S3_CHECK_ATTEMPTS


def test_an_error_on_s3_that_is_not_the_stores_is_left_alone(
    s3: str, s3_server_running: s3_server.S3Server
) -> None:
    """A key that is not there: the store answered; not a store failure."""
    storage.configure(s3_server_running.spark_conf)
    where = storage.place(f"{s3}/missing.json")
    assert where is not None
    with pytest.raises(OSError) as raised:
        where.read_bytes()
    assert storage.store_failure(raised.value) is None
    assert storage.store_failure(ValueError("s3a://b/k: bad row")) is None


# What a Spark action raised in a fault test's run when the store was killed while S3A held a
# kept-alive connection to it (the request sent on it got no answer), as the run logged it,
# most frames left out. Every AWS SDK trace has frames named `...TimeoutTrackingStage`.
DROPPED_TRACE = (Path(__file__).parent / "s3a_dropped_connection.txt").read_text()
DROPPED = "software.amazon.awssdk.thirdparty.org.apache.http.NoHttpResponseException"


@pytest.mark.parametrize(
    ("cause", "said", "what"),
    [
        (DROPPED, "The target server failed to respond", "connection closed unanswered"),
        (
            "java.net.ConnectException",
            "Connect to 127.0.0.1:56973 [/127.0.0.1] failed: Connection refused",
            "connection refused",
        ),
        ("java.net.SocketTimeoutException", "Read timed out", "no answer in time"),
    ],
)
def test_what_failed_is_read_from_the_messages_not_the_stack_frames(
    cause: str, said: str, what: str
) -> None:
    """A killed store's dropped connection was called `no answer in time` from the SDK's frame
    names; what the store said decides, whatever the frames are called."""
    trace = DROPPED_TRACE.replace(DROPPED, cause).replace(
        "The target server failed to respond", said
    )
    line = storage.store_failure(RuntimeError(trace))
    assert (
        line is not None
        and (
            " failed the run at s3a://faults/gw0-4d677f/served_logs/date=2026-08-04/part-00000.parquet:"
            f" {what}, after the retries"
        )
        in line
    ), line
