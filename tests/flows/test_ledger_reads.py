"""The ledger read without Spark (delta-rs, before a run starts Spark to find it has nothing to
do) picks, for every day, the row Spark's read picks: on local files and on a real S3 server;
its files read through pyarrow's own file system, never as Python file objects."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from deltalake.fs import DeltaStorageHandler
from pyspark.sql import SparkSession

from logmetrics.config import OutputConfig
from logmetrics.flows import ledger
from logmetrics.schemas import JOB_RUNS
from logmetrics.tables.catalog import JOB_RUNS_TABLE, append

D1, D2, D3, D4, D5, D6 = (dt.date(2026, 6, d) for d in range(1, 7))
T = dt.datetime(2026, 6, 10, 8, 0)


def _row(run: str, day: dt.date, status: str, started: int, finished: int | None) -> tuple:
    at = T + dt.timedelta(minutes=started)
    done = None if finished is None else T + dt.timedelta(minutes=finished)
    fingerprint = f"{run}-{day.day}-{status}"
    return (
        run, day, status, at, done, 1, 1, 1, None, fingerprint, f"cfg-{run}", "0.1.0", "new",
        f"logs-{run}", 1, f"clusters-{run}", None,
    )  # fmt: skip


ROWS = [
    # D1: published, then a later run began it and was killed (started only): the published
    _row("r1", D1, "started", 0, None),
    _row("r1", D1, "published", 0, 5),
    _row("r2", D1, "started", 10, None),
    # D2: published, then held by a later run: the held (the latest finished)
    _row("r1", D2, "started", 0, None),
    _row("r1", D2, "published", 0, 5),
    _row("r3", D2, "started", 20, None),
    _row("r3", D2, "held", 20, 25),
    # D3: only started rows: the latest started
    _row("r4", D3, "started", 30, None),
    _row("r5", D3, "started", 40, None),
    # D4: two runs finishing at the same minute: the later started; D5: failed then published
    _row("r6", D4, "published", 50, 60),
    _row("r7", D4, "failed", 55, 60),
    _row("r8", D5, "failed", 60, 61),
    _row("r9", D5, "published", 62, 70),
    # D6: a finished row without finished_at (a hand-made row): the one with a time comes first
    _row("r10", D6, "published", 80, 81),
    _row("r11", D6, "published", 82, None),
]


@pytest.mark.parametrize("store", ["local", "s3"])
def test_the_ledger_read_without_spark_picks_sparks_rows(
    spark: SparkSession,
    tmp_path: Path,
    store: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same rows as Spark's, and no file opened through delta-rs's Python file system
    (its default for pyarrow): a Python file the scan's threads let go of after the
    interpreter began to exit aborted the process of a `run` that had found its day done
    (exit status 134, `terminate called without an active exception`, on a busy machine)."""

    def python_file(*args: object) -> None:
        raise AssertionError("a Delta file opened as a Python file object")

    for method in ("open_input_file", "open_input_stream"):
        monkeypatch.setattr(DeltaStorageHandler, method, python_file)
    if store == "s3":
        request.getfixturevalue("s3_spark")
        warehouse = f"{request.getfixturevalue('s3')}/wh"
    else:
        warehouse = str(tmp_path / "wh")
    output = OutputConfig(warehouse=warehouse)
    days = [D1, D2, D3, D4, D5, D6, D6 + dt.timedelta(days=1)]
    assert ledger.previous_runs_without_spark(output, days) == {}  # no ledger yet
    append(spark, spark.createDataFrame(ROWS, JOB_RUNS), output, JOB_RUNS_TABLE)
    by_spark = ledger.previous_runs(spark, output, days)
    without = ledger.previous_runs_without_spark(output, days)
    assert without == by_spark
    assert {day: previous.status for day, previous in by_spark.items()} == {
        D1: "published",
        D2: "held",
        D3: "started",
        D4: "failed",
        D5: "published",
        D6: "published",
    }
    assert by_spark[D3].inputs_fingerprint == "r5-3-started"
    assert by_spark[D4].inputs_fingerprint == "r7-4-failed"
    assert by_spark[D6].inputs_fingerprint == "r10-6-published"
    assert ledger.previous_runs_without_spark(output, [D2, D3]) == {
        d: by_spark[d] for d in (D2, D3)
    }
