"""The real command in its own process: local Spark starts with Delta and writes nothing into the
working directory, errors stay one line (and an input file off the contract is named before
Spark starts), and what the files on disk can answer is answered without a JVM."""

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
from pyspark.sql import SparkSession

from logmetrics.synthetic import generate, unserved_chunks

pytestmark = pytest.mark.slow

START = dt.date(2026, 4, 1)
LOCAL_JOB = (
    "inputs:\n"
    "  served_logs: {path: data/served_logs}\n"
    "  clusters: {path: data/clusters_parquet, format: parquet}\n"
    "output: {warehouse: wh}\n"
    "spark: {master: 'local[1]', driver_memory: 1g}\n"
)
"""The job a test's generated data (`generate(tmp_path / "data", ...)`) runs with, from
tmp_path: local Parquet logs without a ready marker."""


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
    """A backfill in its own process, its session's catalog a local Hive metastore (as a user's
    `spark.conf` may ask): it publishes, the JVM's output goes to its log, and the working
    directory gains only the warehouse and the logs the config names, nothing of Spark's own
    (`spark-warehouse/`, Derby's `metastore_db/` and `derby.log`: each landed there once).
    Then a log file without a required column is named in one line, before Spark starts."""
    generate(tmp_path / "data", START, days=2, queries_per_day=50, seed=5)
    config = tmp_path / "job.yaml"
    config.write_text(LOCAL_JOB)
    env = _path_with_a_foreign_python3(tmp_path)
    before = {path.name for path in tmp_path.iterdir()}
    ok = _logmetrics(
        "backfill",
        "--config",
        "job.yaml",
        "--start",
        "2026-04-01",
        "--end",
        "2026-04-02",
        "--set",
        'spark.conf={"spark.sql.catalogImplementation": "hive"}',
        cwd=tmp_path,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    assert "2/2 days done" in ok.stdout
    assert (tmp_path / "wh" / "unique_clusters_daily" / "_delta_log").is_dir()
    assert list((tmp_path / "logs").glob("spark-*.log"))  # the JVM's output went to the log
    assert ":: resolution report ::" not in ok.stderr + ok.stdout
    assert {path.name for path in tmp_path.iterdir()} - before == {"wh", "logs"}

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
    (tmp_path / "job.yaml").write_text(LOCAL_JOB)
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


def test_ready_and_a_run_over_a_damaged_parquet_file_name_it_without_spark(
    tmp_path: Path,
) -> None:
    """A day whose log file is truncated (its footer unreadable): `ready` and `run` name the
    file by its full path in one line and exit 1 under `on_corrupt: fail` (a run would stop on
    it, and waiting does not mend it: a sensor fails at once instead of poking until its
    timeout); under `quarantine`, `ready` says the day is ready and that the file goes to the
    quarantine. No `java` process under any of them: the damaged-file scan reads footers. A
    `ready` that started Spark to read the file (and printed `[FAILED_READ_FILE.NO_HINT] ...
    reading file .`) fails."""
    generate(tmp_path / "data", START, days=1, queries_per_day=5, seed=5)
    (damaged,) = (tmp_path / "data" / "served_logs").rglob("*.parquet")
    damaged.write_bytes(damaged.read_bytes()[:100])
    (tmp_path / "job.yaml").write_text(LOCAL_JOB)
    day = ("--config", "job.yaml", "--date", str(START))
    ready = _watched("ready", *day, cwd=tmp_path)
    run = _watched("run", *day, cwd=tmp_path)
    held = _watched(
        "ready", *day, "--set", "inputs.served_logs.on_corrupt=quarantine", cwd=tmp_path
    )
    assert [status for status, _, _ in (ready, run, held)] == [1, 1, 0], held[1]
    named = f"served logs at data/served_logs: {damaged} cannot be read ("
    for _, err, _ in (ready, run):
        (line,) = err.splitlines()
        assert line.startswith(f"logmetrics: error: {named}"), line
    assert (
        ready[1]
        .rstrip()
        .endswith(
            "; a run stops on it: replace or remove it "
            "(inputs.served_logs.on_corrupt: quarantine computes the rest)"
        )
    )
    said = (tmp_path / "cli.out").read_text()
    assert said.startswith(f"{START}: ready (") and "go to the quarantine" in said
    assert str(damaged) in said
    for _, err, seen in (ready, run, held):
        assert not any("java" in name for name in seen), seen
        assert "starting local Spark" not in err
    assert not list((tmp_path / "logs").glob("spark-*.log"))
    assert not (tmp_path / "wh").exists()


@pytest.mark.reliability
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


@pytest.fixture(scope="module")
def published(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two days of generated logs, START and the day after, published by a backfill in the
    suite's session, with a config of absolute paths (the suite's JVM does not resolve paths
    from the tests' directory): the directory the processes of the tests below run in."""
    root = tmp_path_factory.mktemp("published")
    generate(root / "data", START, days=2, queries_per_day=20, seed=5)
    (root / "job.yaml").write_text(
        "inputs:\n"
        f"  served_logs: {{path: '{root / 'data' / 'served_logs'}'}}\n"
        f"  clusters: {{path: '{root / 'data' / 'clusters_parquet'}', format: parquet}}\n"
        f"output: {{warehouse: '{root / 'wh'}'}}\n"
        "spark: {master: 'local[1]', driver_memory: 1g}\n"
    )
    from logmetrics.cli import main

    second = START + dt.timedelta(days=1)
    argv = ["backfill", "--config", str(root / "job.yaml"), "--start", str(START)]
    assert main([*argv, "--end", str(second)]) == 0
    return root


def test_a_done_day_and_a_range_without_logs_are_answered_without_spark(published: Path) -> None:
    """`run` for a day published from the same files, cluster table and config says it is
    done, and `backfill` over days no log file holds a row of says none of them is ready, each
    counting its days once, with no `java` process under them: the ledger (read with delta-rs),
    the footers and the cluster table's listing answer. A CLI that starts Spark to find there
    is nothing to do fails, however fast the machine."""
    tmp_path = published
    config = ("--config", "job.yaml")
    second = START + dt.timedelta(days=1)
    done = _watched("run", *config, "--date", str(second), cwd=tmp_path)
    assert done[0] == 0, done[1]
    said = (tmp_path / "cli.out").read_text()
    assert f"{START}, {second}: already done from the same inputs and config, skipped" in said
    assert "0 day(s) published, 2 skipped (already done)" in said
    later = [START + dt.timedelta(days=d) for d in (30, 31, 32)]
    empty = _watched(
        "backfill", *config, "--start", str(later[0]), "--end", str(later[-1]), cwd=tmp_path
    )
    assert empty[0] == 5, empty[1]
    assert empty[1].splitlines()[-1] == (
        f"logmetrics: error: input not ready: no day of {later[0]}..{later[-1]} is ready: no log "
        "file holds a row of any of them; nothing was computed"
    )
    for _, err, seen in (done, empty):
        assert not any("java" in name for name in seen), seen
        assert "starting local Spark" not in err
    assert not list((tmp_path / "logs").glob("spark-*.log"))


def test_alerts_and_report_over_nothing_published_are_answered_without_spark(
    published: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`alerts` and `report` over days nothing is published for, and over a warehouse that does
    not exist, answer from the daily table's files (delta-rs) before Spark starts: the same one
    line from both, exit 1 each, no `java` process under them, no report written. They once
    started Spark to find nothing (19 s, then `alerts` exited 0 with "0 day(s) judged"; the
    missing warehouse 15 s): a CLI that starts it fails, however fast the machine."""
    config = ("--config", "job.yaml")
    later = ("--start", "2026-05-01", "--end", "2026-05-03")
    nowhere = ("--set", f"output.warehouse={published / 'nowhere'}")
    out = ("--out", "report")
    answers = [
        _watched("alerts", *config, *later, cwd=published),
        _watched("report", *config, *later, *out, cwd=published),
        _watched("alerts", *config, *later, *nowhere, cwd=published),
        _watched("report", *config, *nowhere, *out, cwd=published),
    ]
    empty = (
        "logmetrics: error: nothing is published for 2026-05-01..2026-05-03: "
        "unique_clusters_daily has no rows of those days"
    )
    missing = (
        f"logmetrics: error: no unique_clusters_daily table at "
        f"{published / 'nowhere' / 'unique_clusters_daily'}: run `logmetrics backfill` first"
    )
    assert [(status, err.splitlines()) for status, err, _ in answers] == [
        (1, [empty]),
        (1, [empty]),
        (1, [missing]),
        (1, [missing]),
    ]
    for _, _, seen in answers:
        assert not any("java" in name for name in seen), seen
    assert not (published / "report").exists()
    # A range of one day is that day (it was `2026-05-01..2026-05-01`), here in this process.
    from logmetrics.cli import main

    argv = ["alerts", "--config", str(published / "job.yaml"), "--day-before", "2026-05-02"]
    assert main(argv) == 1
    assert capsys.readouterr().err.splitlines() == [
        "logmetrics: error: nothing is published for 2026-05-01: unique_clusters_daily has no "
        "rows of that day"
    ]
    assert not list((published / "logs").glob("spark-*.log"))


def test_a_line_logged_by_a_library_on_the_root_logger_prints_nothing_twice(
    tmp_path: Path,
) -> None:
    """Py4J logs on the root logger (`logging.exception` when a call into the JVM is
    interrupted), and the first such call gives the root logger a handler of its own when it
    has none: every later line of the run then printed twice, once as
    `INFO:logmetrics...`. After the CLI's logging is set up, the run's lines print once, and
    the library's record goes to the run's log file, not the terminal."""
    program = (
        "import logging\n"
        "from logmetrics.cli import logs\n"
        "from logmetrics.console import say\n"
        "logs.setup_logging('INFO', 'text', 'once')\n"
        "try:\n"
        "    raise KeyboardInterrupt\n"
        "except KeyboardInterrupt:\n"
        "    logging.exception('KeyboardInterrupt while sending command.')  # as py4j does\n"
        "flows = logging.getLogger('logmetrics.flows')\n"
        "say(flows, 'computing 2026-04-01')\n"
        "flows.info('a record for the log')\n"
        "flows.warning('a warning')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["computing 2026-04-01"]
    assert done.stderr.splitlines() == ["warning: a warning"]
    log = (tmp_path / "logs" / "logmetrics-once.log").read_text()
    for line in ("KeyboardInterrupt while sending command.", "computing", "a record", "a warning"):
        assert log.count(line) == 1, line
