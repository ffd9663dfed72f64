"""A chunk's writes (flows/writes.py) beside another run's writes of the same day, one commit at
a time in this process, in the orders two runs' commits can take: the sole run to which the
day was new appends it, any other run replaces it, and an appending run that finds a later
run began the day deletes its own rows of it and leaves it to that run. The table holds the
day once. The processes racing for real are tests/flows/test_nightly_commits.py's."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
)

from logmetrics.config import OutputConfig
from logmetrics.flows import ledger
from logmetrics.flows.side_steps import SideSteps
from logmetrics.flows.writes import ChunkWrites, Position, RunWrites
from logmetrics.phases import Phases
from logmetrics.schemas import JOB_RUNS
from logmetrics.tables.catalog import (
    DAILY_TABLE,
    DATA_QUALITY_TABLE,
    JOB_RUNS_TABLE,
    RunStamp,
    WriteMark,
    append,
    read_table,
    recent_commits,
    replace_dates,
)

TABLE = DATA_QUALITY_TABLE
DAY = dt.date(2026, 5, 2)
OTHER = dt.date(2026, 5, 1)  # a day published before the runs below
STARTED_AT = dt.datetime(2026, 5, 3, 1, 0)

# Two runs' writes, each several Delta commits on fresh tables (about 10 s a test): `make test`,
# not the inner loop.
pytestmark = pytest.mark.slow


@pytest.fixture
def side() -> Iterator[SideSteps]:
    with SideSteps(Phases()) as steps:
        yield steps


@pytest.fixture
def output(spark: SparkSession, tmp_path: Path) -> OutputConfig:
    """A warehouse whose ledger began OTHER (run `first`) and whose table holds it."""
    output = OutputConfig(warehouse=str(tmp_path / "wh"))
    position = _started(spark, output, "first", OTHER)
    mark = WriteMark("first", position, (OTHER,))
    replace_dates(spark, _rows(spark, OTHER), output, TABLE, [OTHER], _stamp("first"), mark)
    return output


def _stamp(run_id: str) -> RunStamp:
    return RunStamp(run_id, STARTED_AT, None)


def _started(spark: SparkSession, output: OutputConfig, run_id: str, day: dt.date) -> int:
    """A run's `started` row of the day, committed and marked as `ledger.record` marks it:
    the ledger's version holding it (the run's position)."""
    row = {f.name: None if f.nullable else "-" for f in JOB_RUNS.fields}
    row.update(run_id=run_id, metric_date=day, status="started", started_at=STARTED_AT)
    mark = {"logmetrics_run": run_id, "status": "started", "days": [day.isoformat()]}
    df = spark.createDataFrame([tuple(row.values())], JOB_RUNS)
    append(spark, df, output, JOB_RUNS_TABLE, json.dumps(mark))
    return recent_commits(spark, output, JOB_RUNS_TABLE, limit=1)[0].version


def _rows(spark: SparkSession, day: dt.date) -> DataFrame:
    """A day's two rows of the table (the run's id comes from its stamp)."""
    rows = [(day, check, True, 0.0, 1.0, "warning", "-", STARTED_AT, "{}") for check in "ab"]
    return spark.createDataFrame(rows, TABLE.schema)


def _run(
    spark: SparkSession,
    output: OutputConfig,
    side: SideSteps,
    run_id: str,
    read: int,
    started: int,
    new: bool = True,
) -> ChunkWrites:
    """The one-day chunk of a run that read the ledger at version `read` and committed its
    `started` row at `started`, the day new to the ledger it read or not."""
    position: Future[Position] = Future()
    position.set_result(Position(read, started))
    run = RunWrites(spark, output, _stamp(run_id), frozenset([DAY] if new else []), position, side)
    return run.for_chunk([DAY], [TABLE])


def _write(writes: ChunkWrites) -> None:
    writes.write(_rows(writes.run.spark, DAY), TABLE, [DAY])


def _table(spark: SparkSession, output: OutputConfig) -> list[tuple[dt.date, str, str]]:
    df = read_table(spark, output, TABLE)
    assert df is not None
    return sorted((r.metric_date, r.check, r.run_id) for r in df.collect())


def _by(run_id: str, day: dt.date = DAY) -> list[tuple[dt.date, str, str]]:
    return [(day, "a", run_id), (day, "b", run_id)]


def _modes(spark: SparkSession, output: OutputConfig, since: int) -> list[str]:
    """Each commit of the table after version `since`, oldest first: its run and its mode."""
    target = f"delta.`{output.warehouse}/{TABLE.name}`"
    history = spark.sql(f"DESCRIBE HISTORY {target}").collect()
    return [
        f"{(WriteMark.parse(r.userMetadata) or WriteMark('-', 0, ())).run_id} {r.operation}"
        f" {r.operationParameters.get('mode', '')}".rstrip()
        for r in sorted(history, key=lambda r: r.version)
        if r.version > since
    ]


def test_the_sole_run_appends_a_new_day_and_a_later_run_replaces_it(
    spark: SparkSession, output: OutputConfig, side: SideSteps
) -> None:
    """Run A, sole (its `started` row the ledger's next commit after the version it read),
    appends the day; run B, which began it after A (not sole: A's row lies between its read
    and its own), replaces it. B's rows, once; A, rechecking, leaves the day to B. Fails if
    the later run appends too (the day twice) or if A publishes over B."""
    read = 1
    a = _run(spark, output, side, "A", read, _started(spark, output, "A", DAY))
    b = _run(spark, output, side, "B", read, _started(spark, output, "B", DAY))
    _write(a)
    _write(b)
    assert _table(spark, output) == sorted(_by("first", OTHER) + _by("B"))
    assert _modes(spark, output, since=1) == ["A WRITE Append", "B WRITE Overwrite"]
    assert b.recheck([DAY]) == {}  # B replaced: nothing to recheck
    assert a.recheck([DAY]) == {DAY: "B"}
    assert _table(spark, output) == sorted(_by("first", OTHER) + _by("B"))


def test_an_append_landing_after_a_later_runs_replace_is_taken_back(
    spark: SparkSession, output: OutputConfig, side: SideSteps
) -> None:
    """B, which began the day after A, replaces it before A's append lands: the day is in the
    table twice until A rechecks, finds B's `started` row after its own and deletes its own
    rows: B's rows, once. Fails without the recheck (the day twice) or if the recheck deleted
    more than A's rows."""
    read = 1
    a = _run(spark, output, side, "A", read, _started(spark, output, "A", DAY))
    b = _run(spark, output, side, "B", read, _started(spark, output, "B", DAY))
    assert a.looks[TABLE.name].result() is None  # A may append, as far as it could see
    _write(b)
    _write(a)
    assert _table(spark, output) == sorted(_by("first", OTHER) + _by("A") + _by("B"))
    assert a.recheck([DAY]) == {DAY: "B"}
    assert _table(spark, output) == sorted(_by("first", OTHER) + _by("B"))


def test_a_table_written_by_what_the_ledger_does_not_know_of_is_replaced(
    spark: SparkSession, output: OutputConfig, side: SideSteps
) -> None:
    """A write the ledger has no `started` row for (an older logmetrics, a write by hand, a
    ledger made anew) left rows of the day: its commit has no mark, and the sole run to which
    the day is new replaces the day instead of appending beside those rows. Fails if the run
    trusted the ledger alone."""
    replace_dates(spark, _rows(spark, DAY), output, TABLE, [DAY], _stamp("foreign"))
    read = 1
    writes = _run(spark, output, side, "A", read, _started(spark, output, "A", DAY))
    assert "not one the ledger knows of" in str(writes.looks[TABLE.name].result())
    _write(writes)
    assert _table(spark, output) == sorted(_by("first", OTHER) + _by("A"))
    assert writes.recheck([DAY]) == {}


def test_a_run_that_is_not_sole_replaces(
    spark: SparkSession, output: OutputConfig, side: SideSteps
) -> None:
    """Another run's `started` rows landed between A's read of the ledger and A's own: A
    replaces, though the day was new to what it read."""
    read = 1
    _started(spark, output, "B", OTHER)
    writes = _run(spark, output, side, "A", read, _started(spark, output, "A", DAY))
    assert "another run began days" in str(writes.looks[TABLE.name].result())
    _write(writes)
    assert _modes(spark, output, since=1) == ["A WRITE Overwrite"]
    assert _table(spark, output) == sorted(_by("first", OTHER) + _by("A"))


def _first_runs(
    spark: SparkSession, tmp_path: Path, side: SideSteps, before: str | None
) -> ChunkWrites:
    """Run A's one-day chunk in a warehouse that had no ledger when A read it, A's `started`
    row committed after run `before`'s (if any), its position as `run_position` reads it."""
    output = OutputConfig(warehouse=str(tmp_path / "new"))
    if before is not None:
        _started(spark, output, before, DAY)
    _started(spark, output, "A", DAY)
    started = ledger.started_commit(spark, output, "A")
    position: Future[Position] = Future()
    position.set_result(Position(None, started.version, started.rows_before))
    run = RunWrites(spark, output, _stamp("A"), frozenset([DAY]), position, side)
    return run.for_chunk([DAY], [TABLE, DAILY_TABLE])


def _write_both(writes: ChunkWrites, caplog: pytest.LogCaptureFixture) -> list[str]:
    """The chunk's rows of TABLE and DAILY_TABLE written; what the writes logged."""
    spark = writes.run.spark
    with caplog.at_level("INFO", logger="logmetrics.flows.writes"):
        writes.write(_rows(spark, DAY), TABLE, [DAY])
        writes.write(_daily_rows(spark, DAY), DAILY_TABLE, [DAY])
    return [r.getMessage() for r in caplog.records if r.name == "logmetrics.flows.writes"]


def test_the_first_run_into_a_new_warehouse_appends(
    spark: SparkSession, tmp_path: Path, side: SideSteps, caplog: pytest.LogCaptureFixture
) -> None:
    """No ledger when the run read it, and none of its commits before the run's `started` one
    changed a row (its creation): the run is sole, and appends to its new tables. Fails if it
    replaces (a state rebuild per table for days no table holds) or says another run began."""
    writes = _first_runs(spark, tmp_path, side, before=None)
    assert writes.run.position.result() == Position(None, 1, False)
    said = _write_both(writes, caplog)
    assert said == [
        f"{table.name}: appended {DAY} (new to the table)" for table in (TABLE, DAILY_TABLE)
    ]
    output = writes.run.output
    assert _table(spark, output) == _by("A")
    assert _modes(spark, output, since=0) == ["A WRITE Append"]


def test_a_run_that_found_no_ledger_after_another_runs_rows_replaces(
    spark: SparkSession, tmp_path: Path, side: SideSteps, caplog: pytest.LogCaptureFixture
) -> None:
    """Two runs found no ledger; B's `started` row landed before A's: A cannot know it is
    sole, replaces, and says why once for the chunk's two tables."""
    writes = _first_runs(spark, tmp_path, side, before="B")
    assert writes.run.position.result() == Position(None, 2, True)
    said = _write_both(writes, caplog)
    assert said == [
        f"{DAY}: replaced in every table "
        "(another run began days between this run's read of the ledger and its own)"
    ]
    output = writes.run.output
    assert _table(spark, output) == _by("A")
    assert _modes(spark, output, since=-1)[-1] == "A WRITE Overwrite"


def test_a_local_tables_commits_read_from_its_log_are_delta_s_history(
    spark: SparkSession, output: OutputConfig, side: SideSteps
) -> None:
    """A local table's newest commits, read from its log's files (no Spark job), are what
    `DESCRIBE HISTORY` says of them: version, operation, userMetadata, newest first. Fails if
    the commit files were read in the wrong order or the wrong action's fields were taken."""
    _write(_run(spark, output, side, "A", 1, _started(spark, output, "A", DAY)))
    for table in (TABLE, JOB_RUNS_TABLE):
        target = f"delta.`{output.warehouse}/{table.name}`"
        history = spark.sql(f"DESCRIBE HISTORY {target} LIMIT 3").collect()
        expected = [(r.version, r.operation, r.userMetadata) for r in history]
        read = recent_commits(spark, output, table, limit=3)
        assert [(c.version, c.operation, c.user_metadata) for c in read] == expected
        assert len(expected) == 3


def _published_daily(spark: SparkSession, output: OutputConfig, run_id: str, day: dt.date) -> None:
    """A day's row of unique_clusters_daily, written by `run_id`: its numbers, published."""
    replace_dates(spark, _daily_rows(spark, day), output, DAILY_TABLE, [day], _stamp(run_id))


def _daily_rows(spark: SparkSession, day: dt.date) -> DataFrame:
    """A row of unique_clusters_daily for the day (the run's id comes from its stamp)."""
    values = {
        StringType: "all",
        IntegerType: 10,
        LongType: 0,
        DoubleType: 0.0,
        BooleanType: True,
        DateType: day,
        ArrayType: [0],
        TimestampType: STARTED_AT,
    }
    row = tuple(None if f.nullable else values[type(f.dataType)] for f in DAILY_TABLE.schema)
    return spark.createDataFrame([row], DAILY_TABLE.schema).drop("run_id", "computed_at")


def test_a_held_day_keeps_the_rows_of_the_run_that_published_it(
    spark: SparkSession, output: OutputConfig, side: SideSteps
) -> None:
    """OTHER and DAY published by run `first` (its rows in the table and in the daily table).
    Run A publishes OTHER again and holds DAY back, in one commit: OTHER is A's, and DAY keeps
    `first`'s rows beside A's. Run B holds DAY back again: B's rows replace A's, `first`'s
    stay. Fails if a held write replaces the published run's rows, or piles up held rows."""
    replace_dates(spark, _rows(spark, DAY), output, TABLE, [DAY], _stamp("first"))
    for day in (OTHER, DAY):
        _published_daily(spark, output, "first", day)
    read = recent_commits(spark, output, JOB_RUNS_TABLE, limit=1)[0].version
    for run_id in ("A", "B"):  # restatements: the days are not new to the ledger
        started = _started(spark, output, run_id, DAY)
        writes = _run(spark, output, side, run_id, read, started, new=False)
        both = _rows(spark, OTHER).unionByName(_rows(spark, DAY))
        writes.write(both, TABLE, [OTHER, DAY], held=[DAY])
        assert _table(spark, output) == sorted(_by(run_id, OTHER) + _by("first") + _by(run_id))
    assert _modes(spark, output, since=2) == ["A WRITE Overwrite", "B WRITE Overwrite"]
