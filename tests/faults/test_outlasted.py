"""Faults that outlast a run's patience with its S3 store, where the run must stop: in one
line naming the store, the path and what failed, exit 1, no traceback, its JVM gone with it;
a `failed` row in the ledger and the writer lease released where the store lets it write
them; and the next run right away makes every table exact.

The patience is shortened here by the config's S3A keys (a user's own choice:
docs/config.md, "Object storage"), so that a fault of seconds outlasts it: with the
defaults the same runs stop the same way, minutes later.

- The server gone for good from the main pass on: nothing can be recorded, the lease not
  released; it names a process of this host that no longer runs, so the next run takes it
  over at once.
- The hard case, a commit stalled: the PUT of a table's Delta commit is taken by the store
  and answered only after the run gave up on it; the run records its days `failed`, and the
  commit lands afterwards, whole. The next run restates the day: each table holds it once."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from conftest import (
    NIGHT,
    SLACK,
    Store,
    assert_ended_cleanly,
    assert_next_run_exact,
    ledger,
    record,
    run_through,
    settings,
)
from logmetrics import storage
from logmetrics.tables.lease import LEASE_FILE
from storage_faults import HttpFaultProxy

pytestmark = [pytest.mark.slow, pytest.mark.objectstore, pytest.mark.faults]

IMPATIENT = {
    # one attempt, no retry: a request that finds the store gone or silent fails at once
    "spark.hadoop.fs.s3a.attempts.maximum": "0",
    "spark.hadoop.fs.s3a.retry.limit": "0",
    "spark.hadoop.fs.s3a.connection.timeout": "15s",  # S3A's floor
    "spark.hadoop.fs.s3a.connection.request.timeout": "15s",
}
STORE_LINE = re.compile(
    r"^logmetrics: error: the S3 store at (?P<store>http://127\.0\.0\.1:\d+) failed the run at "
    r"(?P<path>s3a://\S+): (?P<what>[^,]+), after the retries its settings allow "
)


def _impatient(path: Path, store: Store, warehouse: str, endpoint: str) -> Path:
    config = settings(path, store.root, warehouse, endpoint)
    loaded = yaml.safe_load(config.read_text())
    loaded["spark"]["conf"].update(IMPATIENT)
    config.write_text(yaml.safe_dump(loaded, sort_keys=False))
    return config


def test_a_store_gone_for_good_stops_the_run_in_one_line(
    s3_spark: SparkSession, store: Store, warehouse: str, tmp_path: Path
) -> None:
    """The server killed in the main pass and started again only once the run has ended:
    exit 1 and one line naming the store, the path and `connection refused` (or, when a request
    was on a kept-alive connection as the server died, `connection closed unanswered`: which
    comes first is a race); no traceback, no JVM left; no `failed` row (the ledger cannot be
    written) and the run's log says so; the lease left names this host's process, gone, so the
    next run takes it over at once and publishes the night exactly. Fails on a hang, a
    traceback, another line, a JVM left, or a next run kept out or inexact."""
    server = store.server
    config = _impatient(tmp_path / "faulted.yaml", store, warehouse, server.endpoint)

    def fault(events: list[str]) -> Any:
        server.kill()
        return server.restart

    argv = ["run", "--config", str(config), "--date", str(NIGHT)]
    run = run_through(argv, "main-pass", fault, None, SLACK, tmp_path)
    record("vanished for good (S3A's patience cut short)", "main-pass", None, run)
    assert run.status == 1, run.said()
    line = STORE_LINE.match(run.stderr.strip())
    assert line is not None and len(run.stderr.strip().splitlines()) == 1, run.said()
    assert line["store"] == server.endpoint, run.said()
    assert line["what"] in ("connection refused", "connection closed unanswered"), run.said()
    assert line["path"].startswith(store.root), line["path"]
    assert "could not record the failed days in job_runs" in run.log
    assert not run.outlived, run.outlived
    storage.configure(server.spark_conf)
    assert [r.status for r in ledger(s3_spark, warehouse)] == ["started"]
    lease = storage.place(f"{warehouse}/{LEASE_FILE}")
    assert lease is not None and json.loads(lease.read_text())["host"]
    next_config = settings(tmp_path / "next.yaml", store.root, warehouse, server.endpoint)
    began = time.monotonic()
    assert_next_run_exact(s3_spark, store, ["--config", str(next_config)], warehouse)
    assert time.monotonic() - began < 120  # not kept out until the lease lapses
    assert not lease.exists()


def test_a_commit_answered_after_the_run_gave_up_lands_whole_and_is_restated(
    s3_spark: SparkSession, store: Store, warehouse: str, tmp_path: Path
) -> None:
    """Inside the first table commit, the store holds the PUT of the table's commit file
    (`_delta_log/<version>.json`) for 40 s, then takes it; the run gives up on it after 15 s:
    exit 1, one line naming the store, that commit file and `no answer in time`, the night's
    `failed` row in the ledger, the lease released. The commit lands afterwards: the table's
    log holds it whole (the stopped run's commit), readable, beside a ledger that never said
    `published`. The next run right away restates the night: every table as the
    uninterrupted nightly, the day once. Fails if a late commit leaves the day twice, if the
    run hangs on the held PUT, or on a traceback or a lease left held."""
    proxy = HttpFaultProxy(store.server.endpoint)
    try:
        config = _impatient(tmp_path / "faulted.yaml", store, warehouse, proxy.endpoint)

        def fault(events: list[str]) -> Any:
            table = events[-2].rsplit(" ", 1)[-1]  # `begins N append to <table>`
            assert events[-2].startswith("begins ") and table.startswith(warehouse), events
            where = storage.place(table)
            assert where is not None
            proxy.hold("PUT", rf"/{re.escape(where.path)}/_delta_log/\d{{20}}\.json$", 40.0)
            return lambda: None

        argv = ["run", "--config", str(config), "--date", str(NIGHT)]
        run = run_through(argv, "table-commit", fault, 40.0, 40.0 + SLACK, tmp_path)
        record("a commit's PUT held past the patience", "table-commit", 40.0, run)
        assert_ended_cleanly(run, warehouse)
        assert run.status == 1, run.said()
        line = STORE_LINE.match(run.stderr.strip())
        assert line is not None, run.said()
        assert re.search(r"/_delta_log/\d{20}\.json$", line["path"]), line["path"]
        assert line["what"] == "no answer in time"
        assert proxy.held and proxy.landed.wait(120), "the held commit never landed"
    finally:
        proxy.stop()
    storage.configure(store.server.spark_conf)
    rows = ledger(s3_spark, warehouse)
    assert [r.status for r in rows] == ["started", "failed"], rows
    stopped_run = rows[-1].run_id
    commit = storage.place(line["path"])  # the late commit: whole, the stopped run's
    assert commit is not None
    actions = [json.loads(text) for text in commit.read_text().splitlines()]
    info = next(action["commitInfo"] for action in actions if "commitInfo" in action)
    assert json.loads(info["userMetadata"])["logmetrics_run"] == stopped_run
    table = line["path"].rsplit("/_delta_log/", 1)[0]
    version = int(line["path"].rsplit("/", 1)[1].removesuffix(".json"))
    s3_spark.read.format("delta").option("versionAsOf", version).load(table).collect()
    next_config = settings(tmp_path / "next.yaml", store.root, warehouse, store.server.endpoint)
    assert_next_run_exact(s3_spark, store, ["--config", str(next_config)], warehouse)
