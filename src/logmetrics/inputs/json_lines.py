"""JSON-lines logs read without Spark or PySpark: the first lines' keys (a mapped name none of
them holds is a misspelling, said before Spark starts) and the UTC days of the files' served_at
values, which answer `logmetrics ready` for logs with no ready marker.

The days come from the `served_at` text alone (pyarrow's JSON reader, the other fields skipped;
a file with a line pyarrow cannot take is read line by line): ISO 8601 text is a moment (an
offset moves it, none means UTC, as the run reads it), and a value that is not one places its
row on its date partition's day, or on none. Every file of the days asked about (a day either
side, as the run reads them) is read whole: a large single-file export costs a read of the
file per question (docs/running.md).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from logmetrics import storage
from logmetrics.config import ServedLogsInput
from logmetrics.console import did_you_mean
from logmetrics.errors import InputError
from logmetrics.inputs.damaged import CORRUPT_LINE_SHOWN, CorruptInput, not_otlp, redacted
from logmetrics.inputs.files import DataFile, data_files, date_partition_column, file_key
from logmetrics.inputs.layout import LogShape, noun

JSON_SAMPLE_LINES = 100
"""JSON lines looked at for the mapped names (`check_json_names`): a name in none of them is
taken for a misspelling."""

READERS = 4
"""Files read at once (pyarrow's reader uses threads of its own within a file)."""


def json_sample(location: str, partition: str | None) -> list[dict[str, Any]]:
    """The first JSON objects of the first data file below `location` (`JSON_SAMPLE_LINES`
    lines at most; lines that do not parse are left to the damaged-file scan); none where the
    store has no reader here or no file holds a line."""
    root = storage.place(location)
    if root is None:
        return []
    try:
        for file in data_files(root, partition):
            with file.place.fs.open_input_stream(file.info.path, compression="detect") as stream:
                head = stream.read(1 << 20).decode("utf-8", errors="replace")
            sample = []
            for line in head.splitlines()[:JSON_SAMPLE_LINES]:
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    sample.append(value)
            if sample:
                return sample
    except OSError:
        return []  # the read says what is wrong, in one line
    return []


def check_json_names(sample: Sequence[Mapping[str, object]], what: str, shape: LogShape) -> None:
    """JSON lines carry no schema: a mapped name (`inputs.served_logs.columns`) that none of the
    first lines holds (as a key, or as a key of the entries of a nested list) is an InputError
    naming it and the nearest name they hold."""
    if not sample:
        return
    keys = {key for line in sample for key in line}
    for contract in shape.read_columns():
        own = shape.name(contract)
        if shape.is_mapped(contract) and own not in keys:
            raise InputError(
                f"columns.{contract}: no column {own!r} in the {noun(what)}"
                f"{did_you_mean(own, sorted(keys))}"
            )
    if shape.shape != "nested":
        return
    lists = [line.get(shape.name("results")) for line in sample]
    entries = [e for value in lists if isinstance(value, list) for e in value]
    fields = {key for e in entries if isinstance(e, dict) for key in e}
    for name in ("rank", "chunk_id", "tokens"):
        own = shape.name(name)
        if fields and shape.is_mapped(name) and own not in fields:
            raise InputError(
                f"columns.{name}: no field {own!r} in the entries of "
                f"{shape.name('results')!r} in the {noun(what)}"
                f"{did_you_mean(own, sorted(fields))}"
            )


def check_json_source(source: ServedLogsInput) -> None:
    """`check_json_names` on JSON-lines logs at a path; under `format: otlp`, an InputError
    naming a file whose first line is not an OTLP/JSON export (nothing for other logs)."""
    if source.location is None:
        return
    if source.data_format == "otlp":
        _check_otlp_files(source, source.location)
    if source.data_format != "json":
        return
    sample = json_sample(source.location, date_partition_column(source))
    check_json_names(sample, source.described, LogShape.of(source))


def _check_otlp_files(source: ServedLogsInput, location: str) -> None:
    """Each file's first line, read without Spark, is an `ExportTraceServiceRequest`: a JSON
    object with `resourceSpans`. (A later line that does not parse is the damaged-file scan's.)"""
    root = storage.place(location)
    if root is None:
        return
    try:
        files = list(data_files(root, date_partition_column(source)))
    except OSError:
        return  # the read says what is wrong, in one line
    with ThreadPoolExecutor(READERS) as pool:
        firsts = list(pool.map(_first_line, files))
    for file, first in zip(files, firsts, strict=True):
        if first is None:
            continue  # empty, or unreadable here: Spark judges it
        try:
            export = json.loads(first)
        except ValueError:
            export = None
        if not isinstance(export, dict) or "resourceSpans" not in export:
            raise InputError(not_otlp(source.described, file_key(file.path)))


def _first_line(file: DataFile) -> str | None:
    """The first line of a file that holds text, as far as its first MiB goes."""
    try:
        with file.place.fs.open_input_stream(file.info.path, compression="detect") as stream:
            head = stream.read(1 << 20)
    except OSError:
        return None
    text = head.decode("utf-8", errors="replace")
    return next((line for line in text.splitlines() if line.strip()), None)


@dataclass
class JsonDays:
    """What the JSON lines' served_at values said: per day, the files holding rows of it and
    its rows; the lines that do not parse; the files pyarrow cannot open (left to Spark)."""

    files: dict[dt.date, list[str]] = field(default_factory=dict)  # day -> paths
    rows: dict[dt.date, int] = field(default_factory=dict)
    bad_lines: list[CorruptInput] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)


def json_days(
    source: ServedLogsInput, start: dt.date, end: dt.date, skip_files: Collection[str] = ()
) -> JsonDays | None:
    """The days start..end of JSON-lines logs (OTLP/JSON too) on a local path or S3, read from
    their files; None for other logs (Parquet, Delta, a table, a store with no reader here)."""
    if source.data_format not in ("json", "otlp") or source.location is None:
        return None
    root = storage.place(source.location)
    if root is None:
        storage.say_no_reader(source.location, "the JSON lines' days", "Spark reads them")
        return None
    partition = date_partition_column(source)
    skipped = {file_key(f) for f in skip_files}
    lo, hi = start - dt.timedelta(days=1), end + dt.timedelta(days=1)  # the reader's margin
    files = [f for f in data_files(root, partition, lo, hi) if file_key(f.path) not in skipped]
    times = _Times.of(source)
    with ThreadPoolExecutor(READERS) as pool:
        found = list(pool.map(times.file_days, files))
    days = JsonDays()
    for file, result in zip(files, found, strict=True):
        if result is None:
            days.unread.append(file.path)
            continue
        counts, bad = result
        days.bad_lines.extend(bad)
        for day, rows in sorted(counts.items(), key=lambda item: (item[0] is None, item[0])):
            day = day if day is not None else file.day  # no usable time: its partition's
            if day is None or not start <= day <= end:
                continue
            days.files.setdefault(day, []).append(file.path)
            days.rows[day] = days.rows.get(day, 0) + rows
    return days


NANOS_PER_DAY = 86_400 * 10**9


@dataclass(frozen=True)
class _Times:
    """Where a line's times are and what they are: `served_at` ISO 8601 text (the contract's
    shapes), a span's `start_time_unix_nano` (a spans table as JSON lines), or every span's
    `startTimeUnixNano` of an OTLP export; a line of spans that does not parse is kept by its
    hash, never its text."""

    name: str
    otlp: bool = False
    nanos: bool = False

    @classmethod
    def of(cls, source: ServedLogsInput) -> _Times:
        if source.data_format == "otlp":
            return cls("startTimeUnixNano", otlp=True, nanos=True)
        if source.shape == "spans":
            return cls(source.columns.start_time_unix_nano or "start_time_unix_nano", nanos=True)
        return cls(source.columns.served_at or "served_at")

    def file_days(self, file: DataFile) -> tuple[Counter[Any], list[CorruptInput]] | None:
        """The file's rows per UTC day (None: no usable time), and its lines that do not
        parse; None when the file cannot be read here."""
        import pyarrow as pa

        for kind in (pa.int64(), pa.string()) if self.nanos else (pa.string(),):
            try:
                return self._days(self._read(file, kind)), []
            except pa.ArrowInvalid:  # not of this kind, or a line pyarrow cannot take
                continue
            except OSError:
                return None
        try:
            return self._line_by_line(file)
        except (OSError, UnicodeDecodeError):
            return None

    def _read(self, file: DataFile, kind: Any) -> list[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json as pajson

        field = pa.field(self.name, kind)
        if self.otlp:
            spans = pa.list_(pa.struct([field]))
            scopes = pa.list_(pa.struct([pa.field("spans", spans)]))
            field = pa.field("resourceSpans", pa.list_(pa.struct([("scopeSpans", scopes)])))
        options = pajson.ParseOptions(
            explicit_schema=pa.schema([field]), unexpected_field_behavior="ignore"
        )
        with file.place.fs.open_input_stream(file.info.path, compression="detect") as stream:
            column = pajson.read_json(stream, parse_options=options).column(field.name)
        if not self.otlp:
            return column.to_pylist()
        for _ in range(3):  # resourceSpans -> scopeSpans -> spans
            column = pc.list_flatten(column)
            if _ < 2:
                column = pc.struct_field(column, 0)
        return pc.struct_field(column, 0).to_pylist()

    def _line_by_line(self, file: DataFile) -> tuple[Counter[Any], list[CorruptInput]]:
        values: list[Any] = []
        bad: list[CorruptInput] = []
        with file.place.fs.open_input_stream(file.info.path, compression="detect") as stream:
            text = stream.read().decode("utf-8", errors="replace")
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                kept = redacted(line) if self.nanos else line[:CORRUPT_LINE_SHOWN]
                bad.append(CorruptInput(file_key(file.path), f"not JSON: {exc}", file.day, kept))
                continue
            values.extend(self._values(row))
        return self._days(values), bad

    def _values(self, row: Any) -> list[Any]:
        if not isinstance(row, dict):
            return [None] if not self.otlp else []
        if not self.otlp:
            value = row.get(self.name)
            if self.nanos or value is None or isinstance(value, str):
                return [value]
            return [json.dumps(value)]
        return [
            span.get(self.name) if isinstance(span, dict) else None
            for resource in _list(row.get("resourceSpans"))
            for scope in _list(resource.get("scopeSpans") if isinstance(resource, dict) else None)
            for span in _list(scope.get("spans") if isinstance(scope, dict) else None)
        ]

    def _days(self, values: Sequence[Any]) -> Counter[Any]:
        counts: Counter[Any] = Counter()
        for value in values:
            counts[_nanos_day(value) if self.nanos else _utc_day(value)] += 1
        return counts


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _nanos_day(value: Any) -> dt.date | None:
    """The UTC day of a time in nanoseconds since the epoch (a number or its text), or None."""
    try:
        nanos = int(value)
    except (TypeError, ValueError):
        return None
    return dt.date(1970, 1, 1) + dt.timedelta(days=nanos // NANOS_PER_DAY)


_UTC_TEXT = re.compile(
    r"^(\d{4}-\d{2}-\d{2})([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?\s*([Zz]|[+-]00(:?00)?)?$"
)


def _utc_day(value: str | None) -> dt.date | None:
    """The UTC day of an ISO 8601 timestamp text (no offset: UTC), or None."""
    if value is None:
        return None
    text = value.strip()
    match = _UTC_TEXT.match(text)
    try:
        if match is not None:  # UTC or no offset: the day is the text's own
            return dt.date.fromisoformat(match.group(1))
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return moment.date()
    return moment.astimezone(dt.UTC).date()
