"""What an operator meets around the numbers: an empty day is never published as a real one,
`run` skips a day that is done, `views` does not claim views that vanish, and the config is
found without --config. Each test runs the real commands in this process (the suite's session)
on a small generated dataset."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from logmetrics.cli import main
from logmetrics.synthetic import generate

pytestmark = pytest.mark.slow

START = dt.date(2026, 5, 1)
DAYS = 2
QUERIES = 40


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("operator")
    generate(root / "data", START, days=DAYS, queries_per_day=QUERIES, seed=3, dirty=False)
    return root / "data"


def _config(data: Path, tmp_path: Path, name: str = "job.yaml") -> Path:
    config = tmp_path / name
    config.write_text(
        "inputs:\n"
        f"  served_logs: {{path: '{data / 'served_logs'}'}}\n"
        f"  clusters: {{path: '{data / 'clusters_parquet'}', format: parquet}}\n"
        f"output: {{warehouse: '{tmp_path / 'wh'}'}}\n"
        "metrics: {ks: [5, 10]}\n"
        "nightly: {lookback_days: 1}\n"
    )
    return config


def _ledger(spark: SparkSession, tmp_path: Path) -> list[tuple[dt.date, str, str | None, str]]:
    rows = spark.read.format("delta").load(str(tmp_path / "wh" / "job_runs")).collect()
    return sorted((r.metric_date, r.status, r.error, r.reason) for r in rows)


def test_a_day_without_log_files_is_not_ready_for_run_and_ready(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No ready marker configured and no log file holding a row of the day: `ready` and `run`
    both exit 5 naming the day, and nothing is written (the bug: a zero day published with
    dq_passed = true and exit 0)."""
    config = str(_config(data, tmp_path))
    empty = START + dt.timedelta(days=DAYS + 3)
    assert main(["ready", "--config", config, "--date", str(empty)]) == 5
    assert capsys.readouterr().err.strip() == (
        f"logmetrics: error: input not ready: {empty}: no log file holds a row of it; no ready "
        "marker is configured, so its files were judged"
    )
    assert main(["run", "--config", config, "--date", str(empty)]) == 5
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"logmetrics: error: input not ready: {empty}: no log file holds a row of it; "
        "nothing was computed"
    )
    assert not list((tmp_path / "wh").glob("*/_delta_log"))  # no table, no ledger row

    assert main(["ready", "--config", config, "--date", str(START)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"{START}: ready (no ready marker configured: judged by its files, 1 file(s) hold rows "
        f"of it, {QUERIES} rows in them by their footers)"
    )


def test_quiet_days_can_be_allowed(
    spark: SparkSession, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`inputs.served_logs.allow_empty_days`: a day without files is published as a day of 0
    queries, and `non_empty_day` passes it."""
    config = str(_config(data, tmp_path))
    quiet = START + dt.timedelta(days=DAYS)
    allow = ["--set", "inputs.served_logs.allow_empty_days=true"]
    assert main(["ready", "--config", config, "--date", str(quiet), *allow]) == 0
    assert main(["run", "--config", config, "--date", str(quiet), *allow]) == 0
    capsys.readouterr()
    daily = spark.read.format("delta").load(str(tmp_path / "wh" / "unique_clusters_daily"))
    assert {(r.metric_date, r.queries, r.dq_passed) for r in daily.collect()} == {(quiet, 0, True)}
    checks = spark.read.format("delta").load(str(tmp_path / "wh" / "data_quality"))
    (row,) = checks.where("check = 'non_empty_day'").collect()
    assert (row.metric_date, row.success, row.observed_value, row.threshold) == (
        quiet,
        True,
        0.0,
        0.0,
    )


def test_a_day_whose_files_hold_no_valid_row_is_held_by_non_empty_day(
    spark: SparkSession, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A day whose one file holds only rows without a served_at (placed on the day by its date
    partition): exit 3, nothing published, and the ledger's `held` row says which checks held
    it (the bug: published as 0 queries with exit 0)."""
    logs = tmp_path / "logs"
    shutil.copytree(data / "served_logs", logs)
    day = START + dt.timedelta(days=DAYS)
    (logs / f"date={day}").mkdir()
    results = pa.array([[{"rank": 1, "chunk_id": "c1"}]] * 3)
    table = pa.table(
        {
            "request_id": ["r1", "r2", "r3"],
            "served_at": pa.array([None, None, None], pa.timestamp("us", tz="UTC")),
            "results": results,
        }
    )
    pq.write_table(table, logs / f"date={day}" / "part-00000.parquet")
    config = str(_config(data, tmp_path))
    argv = [
        "run",
        "--config",
        config,
        "--date",
        str(day),
        "--set",
        f"inputs.served_logs.path={logs}",
    ]
    assert main(argv) == 3
    held = [line for line in capsys.readouterr().err.splitlines() if "not published:" in line]
    assert held == [
        f"  not published: {day} malformed_rate = 1 (threshold 0.001); "
        f"{day} non_empty_day = 0 (threshold 1)"
    ]
    assert not (tmp_path / "wh" / "unique_clusters_daily").exists()
    finished = [row for row in _ledger(spark, tmp_path) if row[1] != "started"]
    assert finished == [
        (
            day,
            "held",
            f"{day} malformed_rate = 1 (threshold 0.001); {held[0].split('; ')[1]}",
            "new",
        )
    ]


def test_run_skips_a_day_that_is_done_and_force_restates_it(
    spark: SparkSession, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run` computes its day once; run again on the same inputs and config it skips it and
    says so (the bug: recomputed and logged as `forced` without --force); --force restates it
    with the reason `forced`. The closing line says what happened."""
    config = str(_config(data, tmp_path))
    argv = ["run", "--config", config, "--date", str(START)]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"computing {START}: k in 5, 10" in out
    assert out[-1].startswith("done in ")
    assert ": 1 day(s) published; 0 alert(s); tables in " in out[-1]

    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        f"{START}: already done from the same inputs and config, skipped (--force restates)" in out
    )
    assert ": 0 day(s) published, 1 skipped (already done); 0 alert(s)" in out[-1]
    assert [r[1:] for r in _ledger(spark, tmp_path)] == [
        ("published", None, "new"),
        ("started", None, "new"),
    ]

    assert main([*argv, "--force"]) == 0
    assert f"restating {START}: forced" in capsys.readouterr().out.splitlines()
    reasons = sorted(r[3] for r in _ledger(spark, tmp_path) if r[1] == "published")
    assert reasons == ["forced", "new"]


def test_views_on_a_path_warehouse_are_not_claimed_and_their_sql_runs(
    spark: SparkSession, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a metastore the views end with the session: `views` says so, never a bare
    `view: name` line, and writes their SQL to a file that creates them in another session."""
    config = str(_config(data, tmp_path))
    assert main(["run", "--config", config, "--date", str(START)]) == 0
    capsys.readouterr()
    assert main(["views", "--config", config]) == 0  # beside the warehouse's tables
    sql = tmp_path / "wh" / "views.sql"
    assert f"Their SQL is in {sql}" in capsys.readouterr().out
    sql = tmp_path / "elsewhere.sql"
    assert main(["views", "--config", config, "--out", str(sql)]) == 0
    out = capsys.readouterr().out
    views = [
        "data_quality_outcomes", "job_runs_last_status", "redundancy_cost_latest_90_days",
        "unique_clusters_alert_culprits", "unique_clusters_k_sweep_latest_90_days",
        "unique_clusters_latest_90_days", "unique_clusters_weekly",
    ]  # fmt: skip
    named = ", ".join(f"`{view}`" for view in views)
    assert out.startswith(f"views NOT kept: {named} ran against the tables, but ")
    assert "this session's catalog is in memory (no metastore)" in out
    assert f"Their SQL is in {sql}" in out
    assert "view: " not in out
    for view in views:
        spark.sql(f"DROP VIEW IF EXISTS {view}")
    statements = [s for s in sql.read_text().split(";\n") if s.strip()]
    assert len(statements) == len(views)
    for statement in statements:
        spark.sql(statement)
    assert spark.table("unique_clusters_weekly").count() > 0


def test_the_config_is_found_without_config(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--config left out: $LOGMETRICS_CONFIG, then ./conf/local.yaml, then ./logmetrics.yaml;
    with none, one line naming what was searched (exit 2)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOGMETRICS_CONFIG", raising=False)
    assert main(["ready", "--date", str(START)]) == 2
    assert capsys.readouterr().err.strip() == (
        "logmetrics: error: no config: none of --config, $LOGMETRICS_CONFIG, ./conf/local.yaml, "
        "./logmetrics.yaml"
    )
    _config(data, tmp_path, "logmetrics.yaml")
    assert main(["ready", "--date", str(START)]) == 0
    (tmp_path / "conf").mkdir()
    local = _config(data, tmp_path / "conf", "local.yaml")
    local.write_text(local.read_text().replace(str(data / "served_logs"), "nowhere"))
    assert main(["ready", "--date", str(START)]) == 1  # conf/local.yaml first: its path is wrong
    assert capsys.readouterr().err.strip() == (
        "logmetrics: error: served logs at nowhere: path does not exist"
    )
    monkeypatch.setenv("LOGMETRICS_CONFIG", str(tmp_path / "logmetrics.yaml"))
    assert main(["ready", "--date", str(START)]) == 0
    capsys.readouterr()


def _damage_the_chunk_ids(path: Path) -> None:
    """Overwrite the data pages of the file's `results.chunk_id` column with noise: its footer
    (so its day, from served_at's statistics) and its other columns stay readable; a read of
    the results fails inside a Spark task, as a file damaged on storage does."""
    group = pq.ParquetFile(path).metadata.row_group(0)
    (column,) = [
        group.column(i)
        for i in range(group.num_columns)
        if group.column(i).path_in_schema == "results.list.element.chunk_id"
    ]
    start = column.data_page_offset
    data = bytearray(path.read_bytes())
    end = (column.dictionary_page_offset or start) + column.total_compressed_size
    data[start + 16 : end] = bytes([0x55]) * (end - start - 16)
    path.write_bytes(bytes(data))


def test_a_spark_task_that_fails_is_one_line_with_its_root_cause_and_the_trace_in_the_log(
    spark: SparkSession, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log file whose pages are damaged (its footer intact) fails the main pass's task: the
    terminal gets one line, `Spark failed:`, the error's first line with its root cause and
    the run's log file, which holds the whole trace; the days' `failed` ledger rows hold the
    same line. Fails if a second line reports the failed days, if the root cause or the log
    file is not named, or if the trace is not in the log."""
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    damaged = next(
        (copy / "served_logs" / f"date={START + dt.timedelta(days=1)}").glob("*.parquet")
    )
    _damage_the_chunk_ids(damaged)
    config = str(_config(copy, tmp_path))
    end = START + dt.timedelta(days=DAYS - 1)
    assert main(["backfill", "--config", config, "--start", str(START), "--end", str(end)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    prefix = "logmetrics: error: Spark failed: "
    assert line.startswith(prefix), line
    error = line.removeprefix(prefix)
    assert str(damaged) in error and "(root cause: " in error, error
    where = re.search(r"; full trace in (\S+)$", error)
    assert where is not None, error
    trace = Path(where.group(1)).read_text()
    assert "Traceback (most recent call last)" in trace and "Py4JJavaError" in trace
    failed = [(d, e) for d, status, e, _ in _ledger(spark, tmp_path) if status == "failed"]
    assert failed == [(START + dt.timedelta(days=i), error) for i in range(DAYS)]


def test_a_stop_before_the_started_rows_says_no_day_began(
    spark: SparkSession,
    data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Ctrl-C after `computing` but before the run's `started` rows commit: no table and no
    ledger row is written, and the line says no day began (it named the days `not published`
    while job_runs stayed empty). The suite's session, there before the run, is left running."""
    import signal

    from logmetrics import interrupt
    from logmetrics.flows import ledger

    real = ledger.record

    def signalled_first(*args: object, **kwargs: object) -> None:
        if interrupt._command is not None:  # the signal arrives as the commit is about to begin
            interrupt._command.signum = signal.SIGINT
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ledger, "record", signalled_first)
    config = str(_config(data, tmp_path))
    argv = [
        "backfill",
        "--config",
        config,
        "--start",
        str(START),
        "--end",
        str(START + dt.timedelta(days=1)),
    ]
    assert main(argv) == 130
    captured = capsys.readouterr()
    assert f"computing {START}, {START + dt.timedelta(days=1)}: k in 5, 10" in captured.out
    assert captured.err.splitlines()[-1] == (
        f"logmetrics: interrupted (SIGINT): no day began ({START}, "
        f"{START + dt.timedelta(days=1)}); run again to resume"
    )
    assert not list((tmp_path / "wh").glob("*/_delta_log/*.json"))  # no table, no ledger row


def test_progress_lines_keep_the_days_in_order(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A chunk's tables are written while the next chunk computes; the progress lines said in
    that time name the chunk being written, never the next one before the first is said
    published (the first chunk's writes held back here, so lines fall in that time)."""
    from logmetrics.flows import backfill, chunk

    monkeypatch.setattr(backfill, "PROGRESS_SECONDS", 0.0)
    real = chunk.Writing.finish
    held: list[bool] = []

    def slow_first(self: chunk.Writing) -> object:
        if not held:
            held.append(True)
            time.sleep(4)
        return real(self)

    monkeypatch.setattr(chunk.Writing, "finish", slow_first)
    config = _config(data, tmp_path)
    config.write_text(config.read_text() + "backfill: {days_per_chunk: 1}\n")
    second = START + dt.timedelta(days=1)
    argv = ["backfill", "--config", str(config), "--start", str(START), "--end", str(second)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    first_said = next(
        i for i, line in enumerate(lines) if line.startswith(f"{START}: 1 day(s) published")
    )
    progress = [(i, line) for i, line in enumerate(lines) if line.startswith("  ")]
    assert any(line.startswith(f"  {START}: ") for i, line in progress if i < first_said), lines
    assert not [line for i, line in progress if i < first_said and str(second) in line], lines
