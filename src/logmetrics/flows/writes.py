"""How a chunk's rows reach each table: appended where the days are new, replaced otherwise,
and what an appending run does when another run began the same days meanwhile.

A `replaceWhere` runs in Delta as a DELETE whose first step rebuilds the table's whole state:
most of a nightly's write time, for days that no table holds yet. So a run appends a chunk's
rows to a table, in one commit, when all of these hold, known without reading the table's
rows (which would cost what the append saves):

- every day of the chunk is new to the ledger as the run read it (no row of any status: no run
  had begun it, since no table is written before its run's `started` rows are committed);
- the run is *sole*: its `started` commit is the ledger's next version after the one its read
  began at, or, where the run found no ledger (the first run into a new warehouse), every
  commit before its own changed no row (the ledger's creation): no run began a day between its
  read and its `started` rows (`Position.not_sole` says why not);
- the table's newest commit that changed rows is a logmetrics write (`WriteMark`) by a run the
  ledger the run read already held, or by this run (an earlier chunk): nothing the ledger does
  not know of wrote the table (`catalog.newest_write`: an older logmetrics, a hand-made write,
  a ledger made anew).

Every other write is a `replaceWhere`, which leaves the day once whatever the table held; of
a day the run holds back (a blocking check failed), the quality tables keep the rows behind its
published numbers, those of the run whose rows `unique_clusters_daily` holds, and the rest of
the day's rows are replaced (`kept_published_predicate`).
Each write says which run and days it is, and the run's position (its `started` commit's
version), in its commit (`WriteMark`), and the choice is logged: once per chunk where its
reason is the chunk's or the run's (every table is replaced alike), else per table.

Two appends of one day cannot both land: the later of two sole runs would have read the
earlier one's `started` row. Any other run that writes the day began it after the appending
run (its `started` commit is later), and writes a `replaceWhere`: landing after the append, it
replaces it; landing before it, the two would be in the table together. So before its
`published` rows an appending run reads the ledger's commits after its own `started` one
(`recheck`): a later run that began one of its appended days takes that day: the appending
run deletes its own rows of the day from the tables it appended to and records no `published`
row for it (the later run computes, writes and publishes it).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from logmetrics.config import OutputConfig
from logmetrics.console import days_text
from logmetrics.flows import ledger
from logmetrics.flows.side_steps import SideSteps
from logmetrics.tables.catalog import (
    DAILY_TABLE,
    RunStamp,
    Table,
    WriteMark,
    append_dates,
    dates_predicate,
    delete_run_rows,
    newest_write,
    read_table,
    replace_dates,
    replace_where,
    sql_string,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Position:
    """Where a run's `started` rows are in the ledger."""

    read: int | None  # the ledger's version when the run's read began (None: no ledger yet)
    started: int  # the version holding the run's `started` rows
    rows_before: bool = True  # whether a commit before `started` may have written rows

    @property
    def not_sole(self) -> str | None:
        """Why the run cannot know that nothing was begun between its read of the ledger and
        its `started` rows; None when it knows: they are consecutive versions, or the run
        found no ledger and every commit before its own changed no row (the ledger's
        creation), as for the first run into a new warehouse."""
        if self.read is None and not self.rows_before:
            return None
        if self.read is None or self.started != self.read + 1:
            return "another run began days between this run's read of the ledger and its own"
        return None


def run_position(
    spark: SparkSession, output: OutputConfig, read: ledger.LedgerRead, run_id: str
) -> Position:
    """The run's `Position`, once its `started` rows are committed."""
    started = ledger.started_commit(spark, output, run_id)
    return Position(read.version, started.version, started.rows_before)


@dataclass(frozen=True)
class RunWrites:
    """The writes of one run: its stamp, the days the ledger had no row of when the run read
    it, and its position (a side step once the `started` rows are committed)."""

    spark: SparkSession
    output: OutputConfig
    stamp: RunStamp
    new_days: frozenset[dt.date]
    position: Future[Position]
    side: SideSteps

    def for_chunk(self, dates: Sequence[dt.date], tables: Collection[Table]) -> ChunkWrites:
        """A chunk's writes. When every day of it is new to the ledger, each table's newest
        write is looked at beside the main pass, once the run's position is known
        (`_may_append`)."""
        begun = [d for d in dates if d not in self.new_days]
        if begun:
            return ChunkWrites(self, {}, f"the ledger has rows of {days_text(begun)}")
        looks = {
            t.name: self.side.submit(
                f"newest write {t.name}", self._may_append, t, after=self.position
            )
            for t in tables
        }
        return ChunkWrites(self, looks, "")

    def _may_append(self, table: Table) -> str | None:
        """None when the run may append to the table, else why not."""
        position = self.position.result()
        if position.not_sole:
            return position.not_sole
        newest = newest_write(self.spark, self.output, table)
        if newest is None:  # no row written yet
            return None
        mark = newest.mark
        if mark is None:
            return f"its newest write (version {newest.version}) is not one the ledger knows of"
        ours = mark.run_id == self.stamp.run_id  # an earlier chunk of this run
        if not ours and (position.read is None or mark.position > position.read):
            return f"run {mark.run_id} wrote it after this run read the ledger"
        return None


@dataclass
class ChunkWrites:
    """A chunk's writes: `write` each table, then `recheck` the appended days."""

    run: RunWrites
    looks: dict[str, Future[str | None]]  # per table: None when it may be appended to
    replaced: str  # why every table of the chunk is replaced, if it is
    appended: dict[str, Table] = field(default_factory=dict)  # the tables appended to
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _published: dict[dt.date, frozenset[str]] | None = None  # `published_runs` of held days
    _said: bool = False  # the chunk's reason for replacing every table, logged

    def write(
        self,
        df: DataFrame,
        table: Table,
        dates: Sequence[dt.date],
        held: Sequence[dt.date] = (),
    ) -> None:
        """The table's rows of `dates`, in one commit: an append where they are new to it,
        else a replaceWhere; the choice is logged (`_log`). Of the `held` days (held back by a
        blocking check), the rows of the run whose numbers are published stay
        (`published_runs`)."""
        run = self.run
        position = run.position.result()
        mark = WriteMark(run.stamp.run_id, position.started, tuple(sorted(dates)))
        shared = self.replaced or position.not_sole  # every table's reason, if any
        look = self.looks.get(table.name)
        why = shared or ("not looked at" if look is None else look.result())
        if why is None:
            append_dates(run.spark, df, run.output, table, dates, run.stamp, mark)
            with self._lock:
                self.appended[table.name] = table
            how, why = "appended", "new to the table"
        elif kept := self._published_runs(held):
            predicate = kept_published_predicate(dates, kept)
            partitions = len(set(dates))
            replace_where(run.spark, df, run.output, table, predicate, run.stamp, partitions, mark)
            how = "replaced"
            kept_text = f"held back, {days_text(sorted(kept))} keep the rows behind their numbers"
            why = kept_text if shared else f"{why}; {kept_text}"
        else:
            replace_dates(run.spark, df, run.output, table, dates, run.stamp, mark)
            how = "replaced"
        self._log(table, how, dates, why, shared)

    def _log(
        self, table: Table, how: str, dates: Sequence[dt.date], why: str, shared: str | None
    ) -> None:
        """`<table>: appended|replaced <days> (<why>)`; a reason every table of the chunk
        shares (the ledger's rows of its days, or the run's position) once per chunk instead,
        and a table's line then only for what is its own (a held day's kept rows)."""
        fields = {"table": table.name, "write": how, "days": len(dates)}
        if shared:
            with self._lock:
                said, self._said = self._said, True
            if not said:
                log.info(
                    "%s: replaced in every table (%s)",
                    days_text(dates),
                    shared,
                    extra={"fields": {"write": how, "days": len(dates)}},
                )
            if why == shared:
                return
        log.info("%s: %s %s (%s)", table.name, how, days_text(dates), why, extra={"fields": fields})

    def _published_runs(self, held: Sequence[dt.date]) -> dict[dt.date, frozenset[str]]:
        """`published_runs` of the `held` days, read once for the chunk's tables."""
        if not held:
            return {}
        with self._lock:
            if self._published is None:
                self._published = published_runs(self.run.spark, self.run.output, held)
            return {d: runs for d, runs in self._published.items() if d in set(held)}

    def recheck(self, dates: Sequence[dt.date]) -> dict[dt.date, str]:
        """After the chunk's writes, before its `published` rows: the days of `dates` this run
        appended that a later run has begun (`ledger.begun_since`), each with that run's id.
        This run's own rows of those days are deleted from the tables it appended to: the
        later run's rows stand, or will."""
        if not self.appended:
            return {}
        run = self.run
        later = ledger.begun_since(
            run.spark, run.output, run.position.result().started, dates, run.stamp.run_id
        )
        if later:
            for table in self.appended.values():
                delete_run_rows(run.spark, run.output, table, sorted(later), run.stamp.run_id)
            log.info(
                "%s: begun by run %s after this one: this run's appended rows deleted",
                days_text(sorted(later)),
                ", ".join(sorted(set(later.values()))),
            )
        return later


def published_runs(
    spark: SparkSession, output: OutputConfig, days: Sequence[dt.date]
) -> dict[dt.date, frozenset[str]]:
    """Of `days`, those with published numbers, each with the run that wrote them: the run ids
    of its `unique_clusters_daily` rows (one run, but while two restatements race)."""
    daily = read_table(spark, output, DAILY_TABLE)
    if daily is None:
        return {}
    rows = daily.where(F.col("metric_date").isin(list(days))).select("metric_date", "run_id")
    runs: dict[dt.date, set[str]] = {}
    for row in rows.distinct().collect():
        runs.setdefault(row.metric_date, set()).add(row.run_id)
    return {day: frozenset(ids) for day, ids in runs.items()}


def kept_published_predicate(
    dates: Sequence[dt.date], kept: Mapping[dt.date, Collection[str]]
) -> str:
    """The replaceWhere of a write of `dates` of which the `kept` ones were held back while
    numbers of theirs stand published: every row of the other days, and of a kept day every
    row but those of the runs that published its numbers. A held day computed again so
    replaces the earlier held run's rows, not the published run's. One commit, as every
    write."""
    replaced = [d for d in dates if d not in kept]
    parts = [f"({dates_predicate(replaced)})"] if replaced else []
    for day, runs in sorted(kept.items()):
        others = ", ".join(sql_string(run) for run in sorted(runs))
        parts.append(f"({dates_predicate([day])} AND run_id NOT IN ({others}))")
    return " OR ".join(parts)
