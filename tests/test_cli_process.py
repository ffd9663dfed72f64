"""The real command in its own process: local Spark starts with Delta, errors stay one line (and
an input file off the contract is named before Spark starts)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logmetrics.synthetic import generate, unserved_chunks

pytestmark = pytest.mark.slow

START = dt.date(2026, 4, 1)


def _logmetrics(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "logmetrics.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _path_with_a_foreign_python3(tmp_path: Path) -> dict[str, str]:
    """The environment with a `python3` first on PATH that is not this Python (it cannot even
    start) and no PYSPARK_PYTHON: local Spark's Python workers must not depend on PATH."""
    foreign = tmp_path / "foreign-bin"
    foreign.mkdir()
    (foreign / "python3").write_text(
        "#!/bin/sh\necho 'not the Python logmetrics runs' >&2\nexit 3\n"
    )
    (foreign / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["PATH"] = f"{foreign}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_backfill_in_a_fresh_process_then_a_missing_column(tmp_path: Path) -> None:
    generate(tmp_path / "data", START, days=2, queries_per_day=50, seed=5)
    config = tmp_path / "job.yaml"
    config.write_text(
        "inputs:\n"
        "  served_logs: {path: data/served_logs}\n"
        "  clusters: {path: data/clusters_parquet, format: parquet}\n"
        "output: {warehouse: wh}\n"
        "spark: {master: 'local[1]', driver_memory: 1g}\n"
    )
    ok = _logmetrics(
        "backfill",
        "--config",
        "job.yaml",
        "--start",
        "2026-04-01",
        "--end",
        "2026-04-02",
        cwd=tmp_path,
        env=_path_with_a_foreign_python3(tmp_path),
    )
    assert ok.returncode == 0, ok.stderr
    assert "2/2 days done" in ok.stdout
    assert (tmp_path / "wh" / "unique_clusters_daily" / "_delta_log").is_dir()
    assert list((tmp_path / "logs").glob("spark-*.log"))  # the JVM's output went to the log
    assert ":: resolution report ::" not in ok.stderr + ok.stdout

    broken = tmp_path / "broken"
    broken.mkdir()
    pq.write_table(pa.table({"request_id": ["r"], "served_at": [1]}), broken / "part.parquet")
    bad = _logmetrics(
        "run",
        "--config",
        "job.yaml",
        "--date",
        "2026-04-01",
        "--set",
        "inputs.served_logs.path=broken",
        cwd=tmp_path,
    )
    assert bad.returncode == 1
    lines = bad.stderr.strip().splitlines()
    assert lines[-1] == (
        f"logmetrics: error: served logs at broken: file {broken / 'part.parquet'}: "
        "required column 'results' is missing (found: request_id, served_at)"
    )
    assert not any("Traceback" in line or "\tat " in line for line in lines)
    assert "starting local Spark" not in bad.stderr  # a footer says it: no JVM started


def _watched(*args: str, cwd: Path) -> tuple[int, str, set[str]]:
    """The command in its own process, its descendants listed every 20 ms while it runs: its
    exit status, its stderr, and the names of every descendant seen (a local Spark is a `java`
    child of its `spark-submit` script, alive for seconds)."""
    out, err = cwd / "cli.out", cwd / "cli.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "logmetrics.cli", *args],
            cwd=cwd,
            stdout=stdout,
            stderr=stderr,
        )
    seen: set[str] = set()
    watched = psutil.Process(process.pid)
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        try:
            children = watched.children(recursive=True)
        except psutil.Error:  # it has just ended
            children = []
        for child in children:
            try:
                seen.add(child.name())
            except psutil.Error:  # it came and went between the listing and its name
                continue
        time.sleep(0.02)
    status = process.wait(timeout=60)
    return status, err.read_text(), seen


def test_ready_and_a_run_for_a_day_not_ready_start_no_spark(tmp_path: Path) -> None:
    """On a local path, `ready` (ready or not) and `run` for a day without its ready marker
    answer from the file system alone: no `java` process appears under them, no Spark log is
    written, nothing is published. A CLI that started Spark before looking (or to look) fails,
    however fast the machine."""
    generate(tmp_path / "data", START, days=2, queries_per_day=5, seed=5)
    logs = tmp_path / "data" / "served_logs"
    (logs / f"date={START}" / "_SUCCESS").touch()
    second = START + dt.timedelta(days=1)
    (tmp_path / "job.yaml").write_text(
        "inputs:\n"
        "  served_logs: {path: data/served_logs, ready_marker: _SUCCESS}\n"
        "  clusters: {path: data/clusters_parquet, format: parquet}\n"
        "output: {warehouse: wh}\n"
        "spark: {master: 'local[1]', driver_memory: 1g}\n"
    )
    config = ("--config", "job.yaml")
    ready = _watched("ready", *config, "--date", str(START), cwd=tmp_path)
    not_ready = _watched("ready", *config, "--date", str(second), cwd=tmp_path)
    run = _watched("run", *config, "--date", str(second), cwd=tmp_path)
    assert [status for status, _, _ in (ready, not_ready, run)] == [0, 5, 5]
    missing = f"input not ready: {second}: no data/served_logs/date={second}/_SUCCESS"
    assert not_ready[1].splitlines()[-1] == (
        f"logmetrics: error: {missing}; its logs have not all landed"
    )
    assert run[1].splitlines()[-1] == f"logmetrics: error: {missing}; nothing was computed"
    for _, err, seen in (ready, not_ready, run):
        assert not any("java" in name for name in seen), seen
        assert "starting local Spark" not in err
    assert not list((tmp_path / "logs").glob("spark-*.log"))  # no JVM, so no Spark log
    assert not (tmp_path / "wh").exists()


def test_without_a_marker_ready_and_a_run_for_a_day_without_files_start_no_spark(
    tmp_path: Path,
) -> None:
    """With no ready marker configured (the default), a local Parquet day is judged by its
    files' footers: `ready` for a day with files (0) and one without (5), and `run` for the day
    without (5, nothing computed), all with no `java` process under them and no Spark log. A
    `run` that started Spark to find the day empty (as it once did), or a `ready` that read
    the files through Spark, fails."""
    generate(tmp_path / "data", START, days=1, queries_per_day=5, seed=5)
    empty = START + dt.timedelta(days=3)
    (tmp_path / "job.yaml").write_text(
        "inputs:\n"
        "  served_logs: {path: data/served_logs}\n"
        "  clusters: {path: data/clusters_parquet, format: parquet}\n"
        "output: {warehouse: wh}\n"
        "spark: {master: 'local[1]', driver_memory: 1g}\n"
    )
    config = ("--config", "job.yaml")
    ready = _watched("ready", *config, "--date", str(START), cwd=tmp_path)
    not_ready = _watched("ready", *config, "--date", str(empty), cwd=tmp_path)
    run = _watched("run", *config, "--date", str(empty), cwd=tmp_path)
    assert [status for status, _, _ in (ready, not_ready, run)] == [0, 5, 5], run[1]
    missing = f"input not ready: {empty}: no log file holds a row of it"
    assert run[1].splitlines()[-1] == f"logmetrics: error: {missing}; nothing was computed"
    for _, err, seen in (ready, not_ready, run):
        assert not any("java" in name for name in seen), seen
        assert "starting local Spark" not in err
    assert not list((tmp_path / "logs").glob("spark-*.log"))
    assert not (tmp_path / "wh").exists()


def test_a_broadcast_too_large_for_the_driver_takes_the_next_plan(tmp_path: Path) -> None:
    """A small driver (512m: with Comet, a 0.2 GiB native pool) told to broadcast a whole
    cluster table of 1M chunks it cannot hold: the broadcast runs out of memory, the run says
    so in one warning that names the setting and the memory, computes the day again with the
    keys of the chunks it serves, and publishes it. No trace on the terminal."""
    data = generate(tmp_path / "data", START, days=1, queries_per_day=300, seed=5)
    corpus = pq.read_metadata(data.clusters).num_rows
    more = unserved_chunks(10**6, 10**6 - corpus, multi_member_share=0.4, seed=5)
    pq.write_table(pa.concat_tables(more), data.clusters.with_name("part-00001.parquet"))
    config = tmp_path / "job.yaml"
    config.write_text(
        "inputs:\n"
        "  served_logs: {path: data/served_logs}\n"
        "  clusters: {path: data/clusters_parquet, format: parquet}\n"
        "output: {warehouse: wh}\n"
        "spark: {master: 'local[2]', driver_memory: 512m}\n"
        "backfill: {broadcast_max_chunks: 1000000}\n"
    )
    done = _logmetrics("run", "--config", "job.yaml", "--date", START.isoformat(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    terminal = (done.stdout + done.stderr).splitlines()
    warned = [line for line in terminal if "ran out of memory" in line]
    assert len(warned) == 1, terminal
    assert "the whole cluster table's keys (1,000,000 rows)" in warned[0]
    assert "lower backfill.broadcast_max_chunks" in warned[0]
    assert "raise spark.driver_memory" in warned[0]
    assert not any("Traceback" in line or "\tat " in line for line in terminal)
    assert "1 day(s) published" in done.stdout
