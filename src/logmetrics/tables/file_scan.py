"""Corrupt and drifted served-log files, found once per run, before anything is computed.

- **Parquet on a local path or S3** (`tables.storage`): every file of the date range has its
  footer read (pyarrow reads the footer only: about a millisecond a file locally, a round trip
  or two on S3, read side by side). A file whose footer cannot be read (truncated,
  not Parquet) is corrupt. A file whose schema breaks the contract (a rank stored as text, a
  `results` that is not a list) is an `InputError` naming the file and the column, whatever
  `inputs.on_corrupt` says: that is drift, not damage, and no day may be computed from it.
- **JSON lines**: one Spark pass lists the lines the reader could not take. A line that is not
  JSON is corrupt; a line that is JSON but off-contract (a rank "first", a `results` that is a
  string) is an `InputError` naming the file and the column.
- **Delta** tables are written whole by Delta's log: nothing to scan. Parquet on a store with
  no reader here (abfss://, gs://, ...) is not scanned (the run's log says so); a damaged file
  there fails the run when Spark reads it, and the CLI names the file in one line.

What is done with the corrupt ones is `inputs.on_corrupt`'s: `fail` (the run stops before it
publishes anything) or `quarantine` (the file, or the line, goes to the quarantine table on
every day it may hold, those days fail the `readable_inputs` check, and the rest is computed).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from logmetrics.config import ServedLogsInput
from logmetrics.errors import InputError
from logmetrics.tables import storage
from logmetrics.tables.footers import READERS
from logmetrics.tables.sources import (
    CORRUPT_RECORD,
    JSON_LOGS,
    DataFile,
    check_contract,
    conform_served_logs,
    data_files,
    date_partition_column,
    file_key,
    first_line,
    load_raw_served_logs,
    widened,
)

MAX_CORRUPT_LINES = 10_000
"""More JSON lines than this that do not parse: the input is broken, not occasionally damaged,
and the run fails whatever `on_corrupt` says."""

_LINE_SHOWN = 500  # characters of a corrupt line kept in the quarantine and in errors


@dataclass(frozen=True)
class CorruptInput:
    """A served-log file (or one line of a JSON file) that cannot be read."""

    file: str
    error: str
    partition_date: dt.date | None  # the date of its date partition; None: any day of the run
    line: str | None = None  # the line, for JSON; None: the whole file

    @property
    def reason(self) -> str:
        return "corrupt_line" if self.line is not None else "corrupt_file"

    def days(self, dates: Sequence[dt.date]) -> list[dt.date]:
        """The days of `dates` whose numbers it may have belonged to."""
        if self.partition_date is None:
            return list(dates)
        # A partition's rows may be served a day either side of its date (sources).
        near = {self.partition_date + dt.timedelta(days=d) for d in (-1, 0, 1)}
        return [d for d in dates if d in near]

    def raw(self) -> str:
        entry = {"file": self.file, "error": self.error}
        if self.line is not None:
            entry["line"] = self.line
        return json.dumps(entry, ensure_ascii=False)

    def describe(self) -> str:
        what = "a line of " if self.line is not None else ""
        shown = f": {self.line[:120]!r}" if self.line is not None else ""
        return f"{what}{self.file} cannot be read ({self.error}){shown}"


def scan_served_logs(
    spark: SparkSession | None, source: ServedLogsInput, start: dt.date, end: dt.date
) -> list[CorruptInput]:
    """The corrupt files (Parquet) or lines (JSON) of the logs of start..end; an InputError
    for a file whose schema drifted off the contract. Only JSON lines need `spark`
    (`scan_needs_spark`): Parquet files are judged by their footers."""
    what = f"served logs at {source.path}"
    if scan_needs_spark(source):
        if spark is None:
            raise ValueError("JSON lines are scanned with Spark")
        return _scan_json(spark, source, start, end, what)
    root = storage.place(source.path) if source.format == "parquet" else None
    if root is None:
        if source.format == "parquet":
            storage.say_no_reader(
                source.path, "the damaged-file scan", "a damaged file fails the run when read"
            )
        return []
    if not root.is_dir():
        return []
    return _scan_parquet(source, root, start, end, what)


def scan_needs_spark(source: ServedLogsInput) -> bool:
    """Whether `scan_served_logs` needs a session for these logs (JSON lines do)."""
    return source.format == "json"


def undated_rows(spark: SparkSession, source: ServedLogsInput) -> int:
    """Rows that no run can place on a day: no usable served_at (null, or text that is not a
    timestamp), in logs without a date partition layout that would place them. Parquet's and
    Delta's null counts let Spark skip the files that have none."""
    if date_partition_column(source) is not None:
        return 0
    raw = load_raw_served_logs(spark, source)
    if CORRUPT_RECORD in raw.columns:
        raw = raw.where(F.col(CORRUPT_RECORD).isNull())
    logs = conform_served_logs(raw, f"served logs at {source.path}")
    return logs.where(F.col("served_at").isNull()).count()


def _scan_parquet(
    source: ServedLogsInput, root: storage.Place, start: dt.date, end: dt.date, what: str
) -> list[CorruptInput]:
    from pyspark.sql.pandas.types import from_arrow_schema

    partition = date_partition_column(source)
    corrupt = []
    first: dict[str, tuple[str, str]] = {}  # contract field -> (type, the first file with it)
    lo, hi = start - dt.timedelta(days=1), end + dt.timedelta(days=1)  # the reader's margin
    files = list(data_files(root, partition, lo, hi))
    with ThreadPoolExecutor(READERS) as pool:
        schemas = list(pool.map(_schema, files))
    for file, schema in zip(files, schemas, strict=True):
        path = file.path
        if isinstance(schema, Exception):  # whatever pyarrow says, the file is unreadable
            corrupt.append(CorruptInput(file_key(path), first_line(schema), file.day))
            continue
        try:
            fields = {f.name: f.dataType for f in from_arrow_schema(schema).fields}
        except Exception:  # a type Spark has no name for: Spark will judge it
            continue
        fields.pop(partition or "", None)
        check_contract(fields, f"{what}: file {file_key(path)}")
        for name, kind in _contract_types(fields).items():
            seen = first.setdefault(name, (kind, file_key(path)))
            if seen[0] != kind:
                raise InputError(
                    f"{what}: file {file_key(path)} stores {name!r} as {kind}, but "
                    f"{seen[1]} as {seen[0]}: the files of one dataset must agree"
                )
    return corrupt


def _schema(file: DataFile) -> Any:
    """The file's Arrow schema, from its footer; the exception when it cannot be read."""
    import pyarrow.parquet as pq

    try:
        with file.place.fs.open_input_file(file.info.path) as handle:
            return pq.read_schema(handle)
    except Exception as exc:
        return exc


def _contract_types(fields: dict[str, Any]) -> dict[str, str]:
    """The types of the contract's fields as the widened read sees them."""
    types = {name: widened(fields[name]).simpleString() for name in ("request_id", "served_at")}
    element = getattr(fields["results"], "elementType", None)
    for entry in getattr(element, "fields", []):
        if entry.name in ("rank", "chunk_id", "tokens"):
            types[f"results.{entry.name}"] = widened(entry.dataType).simpleString()
    return types


def _scan_json(
    spark: SparkSession, source: ServedLogsInput, start: dt.date, end: dt.date, what: str
) -> list[CorruptInput]:
    partition = date_partition_column(source)
    try:
        raw = load_raw_served_logs(spark, source, partition=partition)
    except AnalysisException:
        return []  # read_served_logs reports it, in one line
    day = F.lit(None).cast("date")
    if partition is not None and partition in raw.columns:
        lo, hi = start - dt.timedelta(days=1), end + dt.timedelta(days=1)
        day = F.to_date(F.col(partition).cast("string"))
        raw = raw.where(day.isNull() | day.between(F.lit(lo), F.lit(hi)))
    # The contract's columns ride along: Spark parses only the fields a query uses (so a line
    # is only found off-contract if they are used), and refuses a query of the corrupt-record
    # column alone.
    rows = (
        raw.where(F.col(CORRUPT_RECORD).isNotNull())
        .select(
            F.input_file_name().alias("file"),
            day.alias("day"),
            F.col(CORRUPT_RECORD).alias("line"),
            *JSON_LOGS.names,
        )
        .limit(MAX_CORRUPT_LINES + 1)
        .collect()
    )
    if len(rows) > MAX_CORRUPT_LINES:
        raise InputError(
            f"{what}: more than {MAX_CORRUPT_LINES} lines cannot be read "
            f"(the first in {file_key(rows[0].file)}): the input is broken, not damaged"
        )
    corrupt = []
    for row in rows:
        file = file_key(row.file)
        try:
            parsed = json.loads(row.line)
        except ValueError as exc:
            line = row.line[:_LINE_SHOWN]
            corrupt.append(CorruptInput(file, f"not JSON: {exc}", row.day, line))
            continue
        raise InputError(f"{what}: file {file}: {_json_problem(parsed)}")
    return corrupt


def _json_problem(entry: Any) -> str:
    """Which column of a JSON line breaks the contract, in the words of `sources`."""
    if not isinstance(entry, dict):
        return f"a line is {type(entry).__name__}, not an object"
    if not isinstance(entry.get("request_id", ""), str | int | None):
        return f"column 'request_id' must be a string, got {entry['request_id']!r}"
    if not isinstance(entry.get("served_at", ""), str | None):
        return f"column 'served_at' must be ISO 8601 text, got {entry['served_at']!r}"
    results = entry.get("results")
    if not isinstance(results, list | None):
        return f"column 'results' must be a list of {{rank, chunk_id}}, got {results!r:.80}"
    for item in results or []:
        if not isinstance(item, dict | None):
            return f"column 'results' must hold objects, got {item!r:.80}"
        item = item or {}
        rank = item.get("rank")
        if isinstance(rank, bool) or not isinstance(rank, int | None):
            return f"column 'results.rank' must be an integer, got {rank!r:.80}"
        chunk_id = item.get("chunk_id")
        if not isinstance(chunk_id, str | None):
            return f"column 'results.chunk_id' must be a string, got {chunk_id!r:.80}"
        tokens = item.get("tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int | float | None):
            return f"column 'results.tokens' must be a number, got {tokens!r:.80}"
    return "a line does not fit the contract"
