"""End to end: generate -> backfill (the CLI, in process) -> read the Delta tables back -> check.

The expected numbers come from the pure-Python reference run over the same generated files.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import reference
from logmetrics.cli import main
from logmetrics.demo import generate_dataset
from logmetrics.errors import LogmetricsError
from logmetrics.flows import chunk as chunk_flow
from logmetrics.flows import keys as keys_flow
from logmetrics.schemas import BY_QUERY, DAILY, K_SWEEP, REDUNDANCY_COST
from logmetrics.tables.catalog import (
    BY_QUERY_TABLE,
    DAILY_TABLE,
    JOB_RUNS_TABLE,
    K_SWEEP_TABLE,
    OUTPUT_TABLES,
    REDUNDANCY_COST_TABLE,
    Table,
    TableRef,
    ensure_table,
)

pytestmark = pytest.mark.slow

START = dt.date(2026, 2, 1)
DAYS = 3
END = START + dt.timedelta(days=DAYS - 1)
KS = (1, 5, 10)
THRESHOLD = 4
RUN_COLUMNS = {"run_id", "computed_at"}
SEGMENT = {"segment", "segment_value"}
QUALITY = {"dq_passed", "rows_read", "duplicate_rows", "quarantined_rows", "quarantined_entries"}


@pytest.fixture(scope="module")
def dataset(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    generate_dataset(out, START, DAYS, queries_per_day=400, seed=3, spark=spark)
    return out


@pytest.fixture(scope="module")
def source_rows(dataset: Path) -> list[dict[str, Any]]:
    table = ds.dataset(dataset / "served_logs", format="parquet", partitioning="hive").to_table(
        columns=["request_id", "served_at", "results", "date"]
    )
    return table.to_pylist()


@pytest.fixture(scope="module")
def cluster_rows(dataset: Path) -> list[tuple]:
    table = ds.dataset(dataset / "clusters_parquet", format="parquet").to_table()
    return [(r["chunk_id"], r["cluster_id"]) for r in table.to_pylist()]


def _write_config(path: Path, dataset: Path, warehouse: Path, **extra: str) -> Path:
    lines = [
        "inputs:",
        f"  served_logs: {{path: '{dataset / 'served_logs'}', format: parquet}}",
        f"  clusters: {{path: '{dataset / 'clusters'}', format: delta}}",
        f"output: {{warehouse: '{warehouse}'}}",
        f"metrics: {{ks: {list(KS)}, threshold: {THRESHOLD}}}",
        "backfill: {days_per_chunk: 2}",
        # 400 queries a day: the generator's one malformed row would fail the default 0.1% gate.
        "quality: {max_malformed_rate: 0.01}",
    ]
    lines += [f"{key}: {value}" for key, value in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _backfill(
    config: Path, start: dt.date, end: dt.date, *overrides: str, force: bool = False
) -> int:
    sets = [arg for o in overrides for arg in ("--set", o)]
    sets += ["--force"] if force else []
    return main(
        ["backfill", "--config", str(config), "--start", str(start), "--end", str(end), *sets]
    )


def _table(spark: SparkSession, warehouse: Path, name: str) -> DataFrame:
    return spark.read.format("delta").load(str(warehouse / name))


def _rows(df: DataFrame, keys: list[str], drop: set[str] = RUN_COLUMNS) -> list[dict[str, Any]]:
    rows = [{k: v for k, v in r.asDict().items() if k not in drop} for r in df.collect()]
    return sorted(rows, key=lambda r: tuple(r[k] for k in keys))


def _utc(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "served_at": row["served_at"].replace(tzinfo=dt.UTC)}


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession, dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse backfilled once over the whole generated range, in chunks of two days, the
    cluster keys built in memory (never kept)."""
    warehouse = tmp_path_factory.mktemp("warehouse")
    config = _write_config(tmp_path_factory.mktemp("conf") / "job.yaml", dataset, warehouse)
    assert _backfill(config, START, END, "backfill.keep_cluster_keys=false") == 0
    return warehouse


@pytest.mark.reference
def test_by_query_equals_the_reference(
    spark: SparkSession,
    warehouse: Path,
    source_rows: list[dict[str, Any]],
    cluster_rows: list[tuple],
) -> None:
    table = _table(spark, warehouse, "unique_clusters_by_query")
    assert table.columns == BY_QUERY.fieldNames()
    got = [_utc(r) for r in _rows(table, ["metric_date", "request_id", "k"])]
    expected = reference.by_query(source_rows, cluster_rows, KS, START, END)
    assert len(got) == len(expected) == 400 * DAYS * len(KS)
    assert [{k: v for k, v in r.items() if k != "cluster_table_version"} for r in got] == expected
    assert {r["cluster_table_version"] for r in got} == {0}


@pytest.mark.reference
def test_daily_equals_the_reference(
    spark: SparkSession,
    warehouse: Path,
    source_rows: list[dict[str, Any]],
    cluster_rows: list[tuple],
) -> None:
    table = _table(spark, warehouse, "unique_clusters_daily")
    assert table.columns == DAILY.fieldNames()
    assert table.where("segment != 'all' OR segment_value != 'all'").isEmpty()
    got = _rows(
        table, ["metric_date", "k"], RUN_COLUMNS | {"cluster_table_version"} | QUALITY | SEGMENT
    )
    expected = reference.daily(source_rows, cluster_rows, KS, THRESHOLD, START, END)
    assert got == expected
    at_10 = [r for r in got if r["k"] == 10]
    # The generator's calibration, read back through the whole job.
    assert all(r["median"] == 6.0 for r in at_10)
    assert all(0.08 < r["share_at_or_below_threshold"] < 0.22 for r in at_10)


@pytest.mark.reference
def test_k_sweep_equals_the_reference(
    spark: SparkSession,
    warehouse: Path,
    source_rows: list[dict[str, Any]],
    cluster_rows: list[tuple],
) -> None:
    table = _table(spark, warehouse, "unique_clusters_k_sweep")
    assert table.columns == K_SWEEP.fieldNames()
    got = _rows(table, ["metric_date", "k"], RUN_COLUMNS | {"cluster_table_version"} | SEGMENT)
    expected = reference.k_sweep(source_rows, cluster_rows, max(KS), START, END)
    assert got == expected
    assert len(got) == DAYS * max(KS)
    # The chapter's reading: the first slot is new in every non-empty list (1 in 400 is
    # empty here), and the distinct fraction falls from there.
    for day in {r["metric_date"] for r in got}:
        fractions = [r["distinct_fraction"] for r in got if r["metric_date"] == day]
        assert fractions[0] > 0.99 and fractions[-1] < 0.8


@pytest.mark.reference
def test_redundancy_cost_equals_the_reference(
    spark: SparkSession,
    warehouse: Path,
    source_rows: list[dict[str, Any]],
    cluster_rows: list[tuple],
) -> None:
    table = _table(spark, warehouse, "redundancy_cost_daily")
    assert table.columns == REDUNDANCY_COST.fieldNames()
    prices = {"tokens_per_slot", "usd_per_million_input_tokens"}
    got = _rows(
        table, ["metric_date", "k"], RUN_COLUMNS | {"cluster_table_version"} | SEGMENT | prices
    )
    # The defaults: 510 tokens a slot (no `tokens` in these logs), 3 USD per million.
    every_k = range(1, max(KS) + 1)
    expected = reference.redundancy_cost(source_rows, cluster_rows, every_k, 510, 3.0, START, END)
    assert got == expected
    assert all(r["redundant_slots"] > 0 for r in got if r["k"] == 10)


@pytest.mark.parametrize(
    "table",
    [BY_QUERY_TABLE, DAILY_TABLE, K_SWEEP_TABLE, REDUNDANCY_COST_TABLE],
    ids=lambda t: t.name,
)
def test_tables_carry_their_column_comments(
    spark: SparkSession, warehouse: Path, table: Table
) -> None:
    """BI tools show the Delta column comments: each is the schema's (docs/tables.md)."""
    described = spark.sql(f"DESCRIBE TABLE delta.`{warehouse / table.name}`").collect()
    comments = {r.col_name: r.comment for r in described if not r.col_name.startswith("#")}
    assert {f.name: f.metadata["comment"] for f in table.schema.fields}.items() <= comments.items()


def _expected_accounting(rows: list[dict[str, Any]]) -> dict[dt.date, dict[str, int]]:
    """Per day, from the raw rows: rows read, duplicates, malformed rows, entries set aside."""
    out: dict[dt.date, dict[str, int]] = {}
    kept: dict[tuple[dt.date, str], dict[str, Any]] = {}
    for row in rows:
        served_at = row["served_at"]
        day = (
            served_at.astimezone(dt.UTC).date() if served_at else dt.date.fromisoformat(row["date"])
        )
        if not START <= day <= END:
            continue
        counts = out.setdefault(day, dict.fromkeys(["rows", "dup", "malformed", "entries"], 0))
        counts["rows"] += 1
        if row["request_id"] is None or served_at is None or row["results"] is None:
            counts["malformed"] += 1
        elif (day, row["request_id"]) in kept:
            counts["dup"] += 1
        else:
            kept[(day, row["request_id"])] = row
            counts["entries"] += sum(
                1 for e in row["results"] if e is None or None in (e["rank"], e["chunk_id"])
            )
    return out


def test_every_row_is_accounted_for_and_quarantined_with_a_reason(
    spark: SparkSession, warehouse: Path, source_rows: list[dict[str, Any]]
) -> None:
    expected = _expected_accounting(source_rows)
    daily = _table(spark, warehouse, "unique_clusters_daily").where("k = 10").collect()
    for row in daily:
        want = expected[row.metric_date]
        assert (row.rows_read, row.duplicate_rows, row.quarantined_rows) == (
            want["rows"],
            want["dup"],
            want["malformed"],
        )
        assert row.quarantined_entries == want["entries"]
        assert row.rows_read == row.queries + row.duplicate_rows + row.quarantined_rows
        assert row.dq_passed is True
    quarantine = _table(spark, warehouse, "quarantine")
    by_day = {
        (r.metric_date, r.kind): r["count"]
        for r in quarantine.withColumn(
            "kind",
            F.when(F.col("reason").isin("null_chunk_id", "null_rank"), "entry").otherwise("row"),
        )
        .groupBy("metric_date", "kind")
        .count()
        .collect()
    }
    for day, want in expected.items():
        assert by_day.get((day, "row"), 0) == want["malformed"]
        assert by_day.get((day, "entry"), 0) == want["entries"]
    assert sum(want["malformed"] for want in expected.values()) > 0  # the data has some
    reasons = {r.reason for r in quarantine.select("reason").distinct().collect()}
    assert reasons <= {
        "null_request_id",
        "null_served_at",
        "null_results",
        "null_chunk_id",
        "null_rank",
    }


DOCS_TABLES = Path(__file__).resolve().parents[1] / "docs" / "tables.md"
CONSTRAINTS = Path(__file__).resolve().parents[1] / "constraints.txt"


def _reader_snippets() -> list[str]:
    """The python code blocks of docs/tables.md's "Read it without Spark", in order."""
    text = DOCS_TABLES.read_text()
    section = re.search(r"^## Read it without Spark\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, "docs/tables.md has no 'Read it without Spark' section"
    return re.findall(r"^```python\n(.*?)^```$", section.group(1), re.M | re.S)


def _run_alone(snippet: str) -> tuple[dict[str, Any], str]:
    """A snippet run on its own, in this process, from the working directory: the names it
    binds and what it prints."""
    names: dict[str, Any] = {}
    printed = io.StringIO()
    with redirect_stdout(printed):
        exec(compile(snippet, str(DOCS_TABLES), "exec"), names)
    return names, printed.getvalue()


@pytest.fixture
def beside_the_warehouse(warehouse: Path, tmp_path: Path) -> Path:
    """A directory holding this module's warehouse as ./warehouse, as the snippets read it."""
    (tmp_path / "warehouse").symlink_to(warehouse)
    return tmp_path


def test_the_docs_read_the_tables_without_spark(
    spark: SparkSession,
    warehouse: Path,
    beside_the_warehouse: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/tables.md's deltalake, pandas and DuckDB snippets, each run on its own as written
    over this module's warehouse (as ./warehouse), give and print what Spark reads: pandas'
    0-based histogram[0] is DuckDB's 1-based histogram[1], a slice of it gives the share at or
    below 3, and `check` is quoted. Fails on a snippet that leans on another's names or prints
    nothing."""
    snippets = _reader_snippets()
    assert len(snippets) == 3
    monkeypatch.chdir(beside_the_warehouse)
    (pandas, pandas_printed), (duck, duck_printed), (checks, checks_printed) = map(
        _run_alone, snippets
    )

    daily = (
        _table(spark, warehouse, "unique_clusters_daily")
        .where("k = 10 AND segment = 'all'")
        .orderBy("metric_date")
        .collect()
    )
    assert len(daily) == DAYS
    frame = pandas["daily"]
    assert frame["metric_date"].tolist() == [r.metric_date for r in daily]
    assert [list(h) for h in frame["histogram"]] == [r.histogram for r in daily]
    assert frame["zero_clusters"].tolist() == [r.histogram[0] for r in daily]
    assert frame["mean"].tolist() == [r.mean for r in daily]
    total = [sum(column) for column in zip(*(r.histogram for r in daily), strict=True)]
    assert pandas["total"].tolist() == total
    assert pandas["share_at_or_below"][-1] == pytest.approx(1.0)
    printed = pandas_printed.splitlines()
    assert len(printed) == 1 + DAYS + 1 and all(
        str(r.metric_date) in printed[1 + i] for i, r in enumerate(daily)
    )
    assert (
        printed[-1].startswith("share at or below 0, 1, 2, ... clusters: [")
        and "1.0]" in printed[-1]
    )

    def share_at_or_below(histogram: list[int], threshold: int) -> float:
        return sum(histogram[: threshold + 1]) / sum(histogram)

    assert duck["by_day"] == [
        (r.metric_date, r.histogram[0], pytest.approx(share_at_or_below(r.histogram, 3)))
        for r in daily
    ]
    assert duck_printed.splitlines() == [
        f"{r.metric_date} {r.histogram[0]} {share_at_or_below(r.histogram, 3):.3f}" for r in daily
    ]
    # The data tells a 1-based slice from a 0-based one: [1:4] is not the 1..4 clusters' counts.
    assert any(sum(r.histogram[:4]) != sum(r.histogram[1:5]) for r in daily)

    quality = (
        _table(spark, warehouse, "data_quality")
        .where("severity = 'blocking'")
        .orderBy("metric_date", "check")
        .select("metric_date", "check", "success", "observed_value", "threshold")
        .collect()
    )
    assert len(quality) >= DAYS * 4
    assert checks["blocking"] == [tuple(r) for r in quality]
    assert len(checks_printed.splitlines()) == len(quality)
    assert checks_printed.splitlines()[0].startswith(
        f"{quality[0].metric_date} {quality[0].check} "
    )


@pytest.mark.snippets
def test_each_docs_snippet_runs_in_a_venv_of_its_own_pip_line(
    beside_the_warehouse: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Each snippet of "Read it without Spark" in a fresh venv holding only what its first line
    (`# pip install ...`) installs, pinned by constraints.txt, run as a script from the
    warehouse's directory: it exits 0 and prints what it prints in this process (whose values
    test_the_docs_read_the_tables_without_spark checks). Fails on a pip line that misses a
    package (`pip install deltalake duckdb pandas`: deltalake's readers need pyarrow) or a
    snippet that needs another's names. Slow (pip into fresh venvs): make test-release."""
    monkeypatch.chdir(beside_the_warehouse)
    venvs: dict[tuple[str, ...], Path] = {}
    for snippet in _reader_snippets():
        first = snippet.splitlines()[0]
        assert first.startswith("# pip install "), first
        packages = tuple(shlex.split(first.removeprefix("# pip install ")))
        if packages not in venvs:
            venvs[packages] = _venv(tmp_path_factory.mktemp("snippet-venv"), packages)
        environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        done = subprocess.run(
            [str(venvs[packages] / "bin" / "python"), "-I", "-c", snippet],
            cwd=beside_the_warehouse,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        _, printed = _run_alone(snippet)
        assert done.stdout == printed and printed.strip()
    assert len(venvs) == 2


def _venv(where: Path, packages: tuple[str, ...]) -> Path:
    """A fresh venv at `where` holding `packages` (and what they need), pinned by
    constraints.txt."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    subprocess.run(
        [str(where / "bin" / "python"), "-m", "pip", "install", "--quiet",
         "--disable-pip-version-check", "-c", str(CONSTRAINTS), *packages],
        check=True,
        timeout=900,
    )  # fmt: skip
    return where


def test_rerunning_a_range_or_a_day_changes_nothing_and_touches_no_other_day(
    spark: SparkSession, dataset: Path, warehouse: Path, tmp_path: Path
) -> None:
    backfilled, warehouse = warehouse, tmp_path / "wh"
    shutil.copytree(backfilled, warehouse)  # the range backfilled once, as `warehouse` did
    config = _write_config(tmp_path / "job.yaml", dataset, warehouse)
    by_query, daily = (
        _table(spark, warehouse, "unique_clusters_by_query"),
        _table(spark, warehouse, "unique_clusters_daily"),
    )
    first_runs = {r.metric_date: r.run_id for r in daily.select("metric_date", "run_id").collect()}
    first = (
        _rows(by_query, ["metric_date", "request_id", "k"]),
        _rows(daily, ["metric_date", "k"]),
    )

    def run_ids() -> dict[dt.date, str]:
        table = _table(spark, warehouse, "unique_clusters_daily")
        return {r.metric_date: r.run_id for r in table.select("metric_date", "run_id").collect()}

    assert _backfill(config, START, END, force=True) == 0  # the same range again
    forced = run_ids()
    middle = START + dt.timedelta(days=1)
    run = ["run", "--config", str(config), "--date", str(middle)]
    assert main(run) == 0  # one day in it, done from the same inputs: skipped, not rewritten
    assert run_ids() == forced
    assert main([*run, "--force"]) == 0  # and restated

    again = (
        _rows(by_query, ["metric_date", "request_id", "k"]),
        _rows(daily, ["metric_date", "k"]),
    )
    assert again == first
    runs = {r.metric_date: r.run_id for r in daily.select("metric_date", "run_id").collect()}
    # Only the re-run day was rewritten by the last run; its neighbours keep the second run's id.
    assert runs[START] == runs[END] != runs[middle]
    assert runs[START] != first_runs[START]
    history = DeltaTable.forPath(spark, str(warehouse / "unique_clusters_daily")).history()
    last = history.orderBy(F.desc("version")).first()
    assert last is not None
    assert last.operation == "WRITE"
    assert middle.isoformat() in last.operationParameters["predicate"]


def test_a_hash_collision_is_caught_and_the_day_computed_again_under_another_salt(
    spark: SparkSession,
    dataset: Path,
    warehouse: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The cluster keys of salt 0 are used at once and checked beside the main pass: with every
    cluster key forced onto one hash under salt 0, the check catches it before anything is
    written, and the day is computed again under salt 1, to the very rows of a normal run."""
    real = keys_flow.cluster_keys

    def colliding(clusters_df: DataFrame, salt: int = 0) -> DataFrame:
        keys = real(clusters_df, salt)
        return keys.withColumn("cluster_hash", F.lit(7).cast("long")) if salt == 0 else keys

    monkeypatch.setattr(keys_flow, "cluster_keys", colliding)
    other = tmp_path / "wh"
    config = _write_config(tmp_path / "job.yaml", dataset, other)
    with caplog.at_level(logging.WARNING, logger="logmetrics"):
        assert _backfill(config, START, START) == 0
    assert "hash collision in the cluster table with salt 0" in caplog.text
    for name, keys in (
        ("unique_clusters_by_query", ["metric_date", "request_id", "k"]),
        ("unique_clusters_daily", ["metric_date", "k"]),
    ):
        day = F.col("metric_date") == F.lit(START)
        expected = _rows(_table(spark, warehouse, name).where(day), keys)
        assert _rows(_table(spark, other, name), keys) == expected


@pytest.mark.plans
@pytest.mark.parametrize("path", ["cut down", "shuffle join"])
def test_a_cluster_table_too_large_to_broadcast_publishes_the_same_tables(
    spark: SparkSession,
    dataset: Path,
    warehouse: Path,
    source_rows: list[dict[str, Any]],
    cluster_rows: list[tuple],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    path: str,
) -> None:
    """docs/cluster-scale.md: with `backfill.broadcast_max_chunks` below the cluster table's
    rows, each chunk of days broadcasts only the keys of the chunks it serves, or, when even
    those are too many, shuffles its entries to the whole table. Every table gets the rows the
    whole table broadcast gave (the module's warehouse), but for the run's own ids and times."""
    # Every day's served chunk ids: a bound on each chunk's (a null id has one hash too).
    served = len({e["chunk_id"] for r in source_rows for e in r["results"] or []})
    assert served < len(cluster_rows)
    max_chunks = served if path == "cut down" else 0
    other = tmp_path / "wh"
    config = _write_config(tmp_path / "job.yaml", dataset, other)
    with caplog.at_level(logging.INFO, logger="logmetrics"):
        assert _backfill(config, START, END, f"backfill.broadcast_max_chunks={max_chunks}") == 0
    taken = "cluster keys cut down" if path == "cut down" else "its entries are shuffled"
    assert caplog.text.count(taken) == 2  # both chunks of days took the path
    _assert_same_tables(spark, other, warehouse)


def _assert_same_tables(
    spark: SparkSession, other: Path, warehouse: Path, ledger: bool = True
) -> None:
    """Every table `warehouse` holds, `other` holds with the same rows (floats exactly), but
    for the run's own ids and times (and without the ledger, `job_runs`, unless `ledger`)."""
    written = [t for t in OUTPUT_TABLES if (warehouse / t.name).exists()]
    # Not written here: the judged evaluation and the detector's calibration.
    unwritten = {"evaluation_results", "detector_calibration"}
    assert {t.name for t in OUTPUT_TABLES} - {t.name for t in written} == unwritten
    run_columns = [*RUN_COLUMNS, "checked_at", "quarantined_at", "started_at", "finished_at"]
    for table in written:
        if table is JOB_RUNS_TABLE and not ledger:
            continue

        def rows(root: Path, name: str = table.name) -> list[str]:
            df = _table(spark, root, name).drop(*run_columns)
            return sorted(repr(tuple(r)) for r in df.collect())  # exact, floats included

        assert rows(other) == rows(warehouse), table.name


@pytest.mark.plans
def test_kept_cluster_keys_publish_the_tables_of_keys_built_every_run(
    spark: SparkSession,
    dataset: Path,
    warehouse: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The module's warehouse was computed with the keys built in memory (their reuse off). With
    reuse on, a first backfill builds the keys, writes them beside its warehouse and keeps them
    with their check's verdict and facts; a second one (forced) reads them and builds nothing.
    Both publish every table as the module's warehouse holds it."""
    monkeypatch.setattr(keys_flow, "KEEP_KEYS_MIN_CHUNKS", 0)  # the generated table is small
    other = tmp_path / "wh"
    config = _write_config(tmp_path / "job.yaml", dataset, other)
    assert _backfill(config, START, END) == 0
    assert len(list((other / "_cluster_keys").glob("*/*/_entry.json"))) == 1
    _assert_same_tables(spark, other, warehouse)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="logmetrics"):
        # The first chunk of days again, as the first run chunked it (its checks count its days).
        assert _backfill(config, START, START + dt.timedelta(days=1), force=True) == 0
    assert "cluster keys of this table version reused" in caplog.text
    assert "cluster keys check" not in caplog.text  # nothing was checked again
    _assert_same_tables(spark, other, warehouse, ledger=False)  # it holds the forced run too


def test_a_chunk_that_fails_leaves_the_chunk_before_it_written_and_recorded(
    spark: SparkSession,
    dataset: Path,
    warehouse: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chunk's tables are written while the next chunk is computed: when that computation
    fails, the chunk before it is still written whole and its `published` ledger rows appended,
    as when chunks ran one after the other; the failed chunk's day has nothing."""
    second = START + dt.timedelta(days=1)
    real = chunk_flow.Chunk.compute

    def failing(chunk: chunk_flow.Chunk, *args: Any) -> Any:
        if chunk.dates[0] == second:
            raise LogmetricsError("planted failure in the second chunk")
        return real(chunk, *args)

    monkeypatch.setattr(chunk_flow.Chunk, "compute", failing)
    other = tmp_path / "wh"
    config = _write_config(tmp_path / "job.yaml", dataset, other)
    assert _backfill(config, START, second, "backfill.days_per_chunk=1") != 0
    ledger_rows = _table(spark, other, JOB_RUNS_TABLE.name).where(F.col("status") == "published")
    assert [r.metric_date for r in ledger_rows.collect()] == [START]
    for name, keys in (
        ("unique_clusters_by_query", ["metric_date", "request_id", "k"]),
        ("unique_clusters_daily", ["metric_date", "k"]),
    ):
        expected = _table(spark, warehouse, name).where(F.col("metric_date") == F.lit(START))
        assert _rows(_table(spark, other, name), keys) == _rows(expected, keys)


# The tables replaced per day that the old layout partitioned by metric_date (not the ledger).
SMALL_TABLES = tuple(
    t
    for t in OUTPUT_TABLES
    if not t.partition_by and t is not JOB_RUNS_TABLE and "metric_date" in t.schema.fieldNames()
)


def test_a_warehouse_of_the_partitioned_layout_keeps_working(
    spark: SparkSession, dataset: Path, warehouse: Path, tmp_path: Path
) -> None:
    """Before the daily tables went unpartitioned, every table was partitioned by metric_date:
    such a warehouse is written as before (its tables keep their layout) and gets the rows a
    new warehouse gets."""
    old = tmp_path / "wh"
    for table in SMALL_TABLES:
        partitioned = dataclasses.replace(table, partition_by=("metric_date",))
        ensure_table(spark, TableRef(partitioned, location=str(old / table.name)))
    config = _write_config(tmp_path / "job.yaml", dataset, old)
    assert _backfill(config, START, START) == 0
    for table in SMALL_TABLES:
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{old / table.name}`").first()
        assert detail is not None and list(detail.partitionColumns) == ["metric_date"]
    day = F.col("metric_date") == F.lit(START)
    for name, keys in (
        ("unique_clusters_daily", ["metric_date", "k"]),
        ("unique_clusters_k_sweep", ["metric_date", "k"]),
    ):
        expected = _rows(_table(spark, warehouse, name).where(day), keys)
        assert _rows(_table(spark, old, name), keys) == expected


def test_maintain_compacts_every_table_without_changing_a_row(
    spark: SparkSession,
    dataset: Path,
    warehouse: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    backfilled, warehouse = warehouse, tmp_path / "wh"
    shutil.copytree(backfilled, warehouse)  # two chunks of days: two files a daily table
    config = _write_config(tmp_path / "job.yaml", dataset, warehouse)
    daily = f"delta.`{warehouse / 'unique_clusters_daily'}`"

    def files() -> int:
        detail = spark.sql(f"DESCRIBE DETAIL {daily}").first()
        assert detail is not None
        return int(detail.numFiles)

    before = _rows(_table(spark, warehouse, "unique_clusters_daily"), ["metric_date", "k"])
    assert files() == 2
    capsys.readouterr()
    retention = "output.table_properties={delta.logRetentionDuration: interval 60 days}"
    assert main(["maintain", "--config", str(config), "--set", retention]) == 0
    out = capsys.readouterr().out
    assert (
        "unique_clusters_daily: OPTIMIZE compacted 2 file(s) into 1; table properties set"
    ) in out  # the tables written before the property was configured get it
    assert "evaluation_results: not written yet" in out
    assert files() == 1
    properties = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {daily}").collect()}
    assert properties["delta.logRetentionDuration"] == "interval 60 days"
    after = _rows(_table(spark, warehouse, "unique_clusters_daily"), ["metric_date", "k"])
    assert after == before
    assert main(["maintain", "--config", str(config), "--vacuum-retain-hours", "1"]) == 2


def test_a_day_without_traffic_is_published_as_zero_queries_where_quiet_days_are_allowed(
    spark: SparkSession, dataset: Path, tmp_path: Path
) -> None:
    """A day no log file holds a row of is not ready (exit 5, nothing written); a source
    that has real quiet days (`allow_empty_days`) publishes it as 0 queries, so the gap is
    visible rather than missing."""
    warehouse = tmp_path / "wh"
    config = _write_config(tmp_path / "job.yaml", dataset, warehouse)
    later = END + dt.timedelta(days=5)
    assert _backfill(config, later, later) == 5
    assert not warehouse.exists() or not list(warehouse.glob("*/_delta_log"))
    assert _backfill(config, later, later, "inputs.served_logs.allow_empty_days=true") == 0
    daily = _table(spark, warehouse, "unique_clusters_daily").collect()
    assert sorted((r.metric_date, r.k, r.queries, r.median) for r in daily) == [
        (later, k, 0, None) for k in KS
    ]
    assert _table(spark, warehouse, "unique_clusters_by_query").count() == 0


@pytest.mark.reference
def test_pinned_cluster_table_version_is_read_and_recorded(
    spark: SparkSession,
    dataset: Path,
    tmp_path: Path,
    source_rows: list[dict[str, Any]],
    cluster_rows: list[tuple],
) -> None:
    clusters = tmp_path / "clusters"
    spark.createDataFrame(cluster_rows, "chunk_id string, cluster_id string").write.format(
        "delta"
    ).save(str(clusters))
    # Version 1 merges everything into one cluster: unique_clusters would be 1 for every list.
    spark.read.format("delta").load(str(clusters)).withColumn(
        "cluster_id", F.lit("ONE")
    ).write.format("delta").mode("overwrite").save(str(clusters))
    warehouse = tmp_path / "wh"
    config = _write_config(tmp_path / "job.yaml", dataset, warehouse)
    assert _backfill(config, START, START, f"inputs.clusters.path={clusters}") == 0
    latest = _table(spark, warehouse, "unique_clusters_daily").where("k = 10").first()
    assert latest is not None
    assert latest.cluster_table_version == 1
    assert latest.median == 1.0

    pinned = ("inputs.clusters.path=" + str(clusters), "inputs.clusters.version=0")
    assert _backfill(config, START, START, *pinned) == 0
    got = _rows(_table(spark, warehouse, "unique_clusters_daily"), ["metric_date", "k"], set())
    assert {r["cluster_table_version"] for r in got} == {0}
    expected = reference.daily(source_rows, cluster_rows, KS, THRESHOLD, START, START)
    drop = RUN_COLUMNS | {"cluster_table_version"} | QUALITY | SEGMENT
    assert [{k: v for k, v in r.items() if k not in drop} for r in got] == expected


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "inputs.served_logs.path=/nonexistent/logs",
            "served logs at /nonexistent/logs: path does not exist",
        ),
        ("inputs.clusters.version=99", "cannot read cluster table"),
        ("inputs.clusters.path={dataset}/clusters_parquet", "cannot read cluster table"),
    ],
)
def test_bad_inputs_are_one_line_and_exit_1(
    dataset: Path,
    tmp_path: Path,
    override: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _write_config(tmp_path / "job.yaml", dataset, tmp_path / "wh")
    assert _backfill(config, START, START, override.format(dataset=dataset)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("logmetrics: error:")]
    assert len(errors) == 1 and message in errors[0], err
    assert not any("Traceback" in line or "\tat " in line for line in err)


def test_missing_required_column_names_it(
    spark: SparkSession, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    spark.createDataFrame(
        [("r1", dt.datetime(2026, 2, 1, 1, tzinfo=dt.UTC))],
        "request_id string, served_at timestamp",
    ).write.parquet(str(logs))
    config = _write_config(tmp_path / "job.yaml", dataset, tmp_path / "wh")
    assert _backfill(config, START, START, f"inputs.served_logs.path={logs}") == 1
    err = capsys.readouterr().err
    assert "required column 'results' is missing" in err
