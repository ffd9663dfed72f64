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
from logmetrics.inputs.damaged import CORRUPT_LINE_SHOWN, CorruptInput
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
    """`check_json_names` on JSON-lines logs at a path (nothing for other logs)."""
    if source.data_format != "json" or source.location is None:
        return
    sample = json_sample(source.location, date_partition_column(source))
    check_json_names(sample, source.described, LogShape.of(source))


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
    """The days start..end of JSON-lines logs on a local path or S3, read from their files;
    None for other logs (not JSON, a table, a store with no reader here)."""
    if source.data_format != "json" or source.location is None:
        return None
    root = storage.place(source.location)
    if root is None:
        storage.say_no_reader(source.location, "the JSON lines' days", "Spark reads them")
        return None
    partition = date_partition_column(source)
    skipped = {file_key(f) for f in skip_files}
    lo, hi = start - dt.timedelta(days=1), end + dt.timedelta(days=1)  # the reader's margin
    files = [f for f in data_files(root, partition, lo, hi) if file_key(f.path) not in skipped]
    served_at = source.columns.served_at or "served_at"
    with ThreadPoolExecutor(READERS) as pool:
        found = list(pool.map(lambda f: _file_days(f, served_at), files))
    days = JsonDays()
    for file, result in zip(files, found, strict=True):
        if result is None:
            days.unread.append(file.path)
            continue
        counts, bad = result
        days.bad_lines.extend(bad)
        for day, rows in sorted(counts.items(), key=lambda item: (item[0] is None, item[0])):
            day = day if day is not None else file.day  # no usable served_at: its partition's
            if day is None or not start <= day <= end:
                continue
            days.files.setdefault(day, []).append(file.path)
            days.rows[day] = days.rows.get(day, 0) + rows
    return days


def _file_days(file: DataFile, served_at: str) -> tuple[Counter[Any], list[CorruptInput]] | None:
    """The file's rows per UTC day of served_at (None: no usable value), and its lines that do
    not parse; None when the file cannot be read here."""
    import pyarrow as pa
    import pyarrow.json as pajson

    schema = pa.schema([(served_at, pa.string())])
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        with file.place.fs.open_input_stream(file.info.path, compression="detect") as stream:
            table = pajson.read_json(stream, parse_options=options)
        return _days_of(table.column(served_at).to_pylist()), []
    except pa.ArrowInvalid:  # a line pyarrow cannot take (not JSON, not text): line by line
        pass
    except OSError:
        return None
    try:
        return _days_line_by_line(file, served_at)
    except (OSError, UnicodeDecodeError):
        return None


def _days_line_by_line(file: DataFile, served_at: str) -> tuple[Counter[Any], list[CorruptInput]]:
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
            bad.append(
                CorruptInput(
                    file_key(file.path), f"not JSON: {exc}", file.day, line[:CORRUPT_LINE_SHOWN]
                )
            )
            continue
        value = row.get(served_at) if isinstance(row, dict) else None
        values.append(value if value is None or isinstance(value, str) else json.dumps(value))
    return _days_of(values), bad


_UTC_TEXT = re.compile(
    r"^(\d{4}-\d{2}-\d{2})([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?\s*([Zz]|[+-]00(:?00)?)?$"
)


def _days_of(values: Sequence[str | None]) -> Counter[Any]:
    """How many of the served_at texts fall on each UTC day (None: not a timestamp)."""
    counts: Counter[Any] = Counter()
    for value in values:
        counts[_utc_day(value)] += 1
    return counts


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
