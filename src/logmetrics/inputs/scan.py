"""Corrupt and drifted served-log files, found once per run, before anything is computed.

- **Parquet on a local path or S3** (`storage`): every file of the date range has its
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
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from logmetrics import storage
from logmetrics.config import ServedLogsInput
from logmetrics.errors import InputError
from logmetrics.inputs.damaged import (
    CORRUPT_LINE_SHOWN,
    CorruptInput,
    not_otlp,
    redacted,
    scan_needs_spark,
)
from logmetrics.inputs.files import DataFile, data_files, date_partition_column, file_key
from logmetrics.inputs.footers import READERS
from logmetrics.inputs.layout import LogShape
from logmetrics.inputs.otlp import TIMES_SCHEMA, read_otlp
from logmetrics.inputs.served_logs import CORRUPT_RECORD, first_line, load_raw_served_logs, widened
from logmetrics.inputs.shapes import contract_plan, json_schema, quoted, to_contract
from logmetrics.inputs.spans import (
    SpansPlan,
    span_start,
    spans_json_schema,
    spans_plan,
    spans_served_at,
)

MAX_CORRUPT_LINES = 10_000
"""More JSON lines than this that do not parse: the input is broken, not occasionally damaged,
and the run fails whatever `on_corrupt` says."""


def scan_served_logs(
    spark: SparkSession | None, source: ServedLogsInput, start: dt.date, end: dt.date
) -> list[CorruptInput]:
    """The corrupt files (Parquet) or lines (JSON) of the logs of start..end; an InputError
    for a file whose schema drifted off the contract. Only JSON lines need `spark`
    (`scan_needs_spark`): Parquet files are judged by their footers."""
    what = source.described
    if scan_needs_spark(source):
        if spark is None:
            raise ValueError("JSON lines are scanned with Spark")
        return _scan_json(spark, source, start, end, what)
    location = source.location if source.data_format == "parquet" else None
    root = storage.place(location) if location is not None else None
    if root is None:
        if location is not None:
            storage.say_no_reader(
                location, "the damaged-file scan", "a damaged file fails the run when read"
            )
        return []
    if not root.is_dir():
        return []
    return _scan_parquet(source, root, start, end, what)


def undated_rows(spark: SparkSession, source: ServedLogsInput) -> int:
    """Rows that no run can place on a day: no usable served_at (null, or text that is not a
    timestamp), in logs without a date partition layout that would place them. Parquet's and
    Delta's null counts let Spark skip the files that have none."""
    if date_partition_column(source) is not None:
        return 0
    raw = load_raw_served_logs(spark, source)
    if CORRUPT_RECORD in raw.columns:
        raw = raw.where(F.col(CORRUPT_RECORD).isNull())
    fields = {f.name: f.dataType for f in raw.schema.fields}
    if source.shape == "spans":
        logs = spans_served_at(raw, *span_start(fields, source, source.described))
    else:
        logs = to_contract(raw, contract_plan(fields, source.described, LogShape.of(source)))
    return logs.where(F.col("served_at").isNull()).count()


def _scan_parquet(
    source: ServedLogsInput, root: storage.Place, start: dt.date, end: dt.date, what: str
) -> list[CorruptInput]:
    from pyspark.sql.pandas.types import from_arrow_schema

    partition = date_partition_column(source)
    shape = LogShape.of(source)
    corrupt = []
    first: dict[str, tuple[str, str]] = {}  # the data's column -> (type, the first file with it)
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
        described = f"{what}: file {file_key(path)}"
        if shape.shape == "spans":
            types = _span_types(spans_plan(fields, source, described), fields)
        else:
            types = _contract_types(contract_plan(fields, described, shape).nested, shape)
        for name, kind in types.items():
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


def _span_types(plan: SpansPlan, fields: dict[str, Any]) -> dict[str, str]:
    """The types of the span columns a request is read from, as the widened read sees them."""
    names = (plan.span_id, plan.start, plan.attributes.column.split(".")[0])
    return {name: widened(fields[name]).simpleString() for name in names}


def _contract_types(nested: dict[str, Any], shape: LogShape) -> dict[str, str]:
    """The types of the contract's fields as the widened read sees them, by the data's own
    names (`hits.pos`, or `pos` in the exploded shape)."""
    types = {
        shape.label(name): widened(nested[name]).simpleString()
        for name in ("request_id", "served_at")
    }
    element = getattr(nested["results"], "elementType", None)
    for entry in getattr(element, "fields", []):
        types[shape.label(f"results.{entry.name}")] = widened(entry.dataType).simpleString()
    if shape.shape == "ids":
        types[shape.label("results")] = widened(nested["results"]).simpleString()
    return types


def _scan_json(
    spark: SparkSession, source: ServedLogsInput, start: dt.date, end: dt.date, what: str
) -> list[CorruptInput]:
    partition = date_partition_column(source)
    shape = LogShape.of(source)
    spans = shape.shape == "spans"
    try:
        if source.data_format == "otlp":
            assert source.location is not None
            reader = spark.read if partition else spark.read.option("recursiveFileLookup", "true")
            raw = read_otlp(reader, source.location, CORRUPT_RECORD, TIMES_SCHEMA)
        else:
            raw = load_raw_served_logs(spark, source, partition=partition)
    except AnalysisException:
        return []  # read_served_logs reports it, in one line
    # A line that parses but holds no OTLP export: another kind of JSON lines, found in the same
    # pass as the lines that do not parse.
    other = F.lit(False)
    if source.data_format == "otlp":
        read_names = ["resourceSpans"]
        other = F.col(CORRUPT_RECORD).isNull() & F.col("resourceSpans").isNull()
    else:
        read_names = (spans_json_schema(source) if spans else json_schema(shape)).names
    day = F.lit(None).cast("date")
    if partition is not None and partition in raw.columns:
        lo, hi = start - dt.timedelta(days=1), end + dt.timedelta(days=1)
        day = F.to_date(F.col(partition).cast("string"))
        raw = raw.where(day.isNull() | day.between(F.lit(lo), F.lit(hi)))
    # The contract's columns ride along: Spark parses only the fields a query uses (so a line
    # is only found off-contract if they are used), and refuses a query of the corrupt-record
    # column alone.
    rows = (
        raw.where(F.col(CORRUPT_RECORD).isNotNull() | other)
        .select(
            F.input_file_name().alias("file"),
            day.alias("day"),
            F.col(CORRUPT_RECORD).alias("line"),
            *[quoted(name) for name in read_names],
        )
        .limit(MAX_CORRUPT_LINES + 1)
        .collect()
    )
    not_an_export = next((row.file for row in rows if row.line is None), None)
    if not_an_export is not None:
        raise InputError(not_otlp(what, file_key(not_an_export)))
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
            line = redacted(row.line) if spans else row.line[:CORRUPT_LINE_SHOWN]
            corrupt.append(CorruptInput(file, f"not JSON: {exc}", row.day, line))
            continue
        problem = _span_problem(source) if spans else _json_problem(parsed, shape)
        raise InputError(f"{what}: file {file}: {problem}")
    return corrupt


def _span_problem(source: ServedLogsInput) -> str:
    """What a JSON line of spans that does not fit its read is, without its contents (spans
    carry users' text)."""
    if source.data_format == "otlp":
        return (
            "a line is JSON but not an OTLP/JSON ExportTraceServiceRequest (resourceSpans -> "
            "scopeSpans -> spans)"
        )
    return "a line is JSON but not a span row (an object of a span's columns)"


def _json_problem(entry: Any, shape: LogShape) -> str:
    """Which column of a JSON line breaks the contract, in the words of `inputs.shapes` and the
    data's own names."""
    if not isinstance(entry, dict):
        return f"a line is {type(entry).__name__}, not an object"
    request_id, served_at = shape.name("request_id"), shape.name("served_at")
    if not isinstance(entry.get(request_id, ""), str | int | None):
        return f"column {request_id!r} must be a string, got {entry[request_id]!r}"
    if not isinstance(entry.get(served_at, ""), str | None):
        return f"column {served_at!r} must be ISO 8601 text, got {entry[served_at]!r}"
    if shape.exploded:
        return _entry_problem(entry, shape) or "a line does not fit the contract"
    label = shape.name("results")
    results = entry.get(label)
    if shape.shape == "ids":
        if not isinstance(results, list | None):
            return f"column {label!r} must be a list of chunk ids, got {results!r:.80}"
        for item in results or []:
            if isinstance(item, dict):
                return (
                    f"column {label!r} holds entries ({item!r:.40}), a list which `shape: "
                    "nested` reads (inputs.served_logs.shape is 'ids')"
                )
            if isinstance(item, bool) or not isinstance(item, str | int | None):
                return f"column {label!r} must hold chunk ids (text or integers), got {item!r:.80}"
        return "a line does not fit the contract"
    if not isinstance(results, list | None):
        return f"column {label!r} must be a list of {{rank, chunk_id}}, got {results!r:.80}"
    for item in results or []:
        if isinstance(item, str | int) and not isinstance(item, bool):
            return (
                f"column {label!r} holds chunk ids ({item!r:.40}), a list which `shape: ids` "
                f"reads (inputs.served_logs.shape is {shape.shape!r})"
            )
        if not isinstance(item, dict | None):
            return f"column {label!r} must hold objects, got {item!r:.80}"
        problem = _entry_problem(item or {}, shape)
        if problem:
            return problem
    return "a line does not fit the contract"


def _entry_problem(item: dict[str, Any], shape: LogShape) -> str | None:
    """What of an entry (a nested one, or an exploded row) is off the contract, or None."""
    rank = item.get(shape.name("rank"))
    if isinstance(rank, bool) or not isinstance(rank, int | None):
        return f"column {shape.label('results.rank')!r} must be an integer, got {rank!r:.80}"
    chunk_id = item.get(shape.name("chunk_id"))
    if not isinstance(chunk_id, str | None):
        return f"column {shape.label('results.chunk_id')!r} must be a string, got {chunk_id!r:.80}"
    tokens = item.get(shape.name("tokens"))
    if isinstance(tokens, bool) or not isinstance(tokens, int | float | None):
        return f"column {shape.label('results.tokens')!r} must be a number, got {tokens!r:.80}"
    return None
