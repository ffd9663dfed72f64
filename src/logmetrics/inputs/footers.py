"""The days each Parquet log file holds rows of, read from its footer: the narrow pass's answer
for a file without reading a row of it (`inputs.days`). Local files and files on S3 are read
alike (`storage`: a footer is two small ranged reads on S3, read side by side); the
logs on a store logmetrics has no reader for are left to the narrow pass.

A footer keeps, for every row group, the smallest and the largest `served_at` and how many are
null. A file is **placed** from them when the answer is certain, and exactly what the narrow
pass over its rows would say (`inputs.narrow_pass.day_file_states`, the reader's rules in
`sources`):
- a row group whose served_at values span one UTC day, or two consecutive days (its minimum
  and its maximum are rows, so both days hold one), places the file on those days;
- null served_at values place it on its date partition's day, and nowhere without one;
- only the days of the run count, and a date partition outside the reader's margin of a day
  either side is never read.
Anything else (no statistics, a row group spanning three days or more, served_at stored as
text or INT96, a legacy Spark calendar, a partition directory that is not `YYYY-MM-DD`, a path
whose characters Spark would escape) leaves the file to the narrow pass, which reads its rows.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from logmetrics import storage
from logmetrics.config import ServedLogsInput
from logmetrics.inputs.files import DataFile, data_files, date_partition_column, file_key

_PER_DAY = {"milliseconds": 86_400_000, "microseconds": 86_400_000_000}
_NANOS_PER_DAY = 86_400_000_000_000
_LEGACY_CALENDAR = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")
_PLAIN_PATH = re.compile(r"^/?[A-Za-z0-9/._=+,~-]*$")  # nothing Hadoop's URI would escape
_EPOCH = dt.datetime(1970, 1, 1)
READERS = 8
"""Footers read at once: on S3 each is a round trip or two, spent waiting."""


@dataclass
class FooterDays:
    """What the footers said: the files placed and the file state text of each on its days;
    the files left to the narrow pass."""

    states: dict[dt.date, list[str]] = field(default_factory=dict)  # day -> `path|size|mtime`
    rows: dict[dt.date, int] = field(default_factory=dict)  # day -> rows in its files
    placed: list[str] = field(default_factory=list)  # paths, as Spark lists them
    unplaced: list[str] = field(default_factory=list)
    undated: int = 0  # rows without served_at in logs without a date partition: no day's


def footer_days(
    source: ServedLogsInput, start: dt.date, end: dt.date, skip_files: Collection[str] = ()
) -> FooterDays | None:
    """The log files of start..end placed on their days from their footers; None where the
    logs are not Parquet files on a local path or S3 (the narrow pass reads them all)."""
    location = source.location if source.data_format == "parquet" else None
    root = storage.place(location) if location is not None else None
    if root is None:
        if location is not None:
            storage.say_no_reader(location, "the log files' footers", "the narrow pass reads them")
        return None
    if not root.is_dir():
        return None
    partition = date_partition_column(source)
    skipped = {file_key(f) for f in skip_files}
    lo, hi = start - dt.timedelta(days=1), end + dt.timedelta(days=1)  # the reader's margin
    files = [f for f in data_files(root, partition, lo, hi) if file_key(f.path) not in skipped]
    spans = source.shape == "spans"
    names = source.columns
    time = (names.start_time_unix_nano or "start_time_unix_nano") if spans else names.served_at
    served_at = time or "served_at"
    with ThreadPoolExecutor(READERS) as pool:
        placements = list(
            pool.map(lambda f: _days(f, partition is not None, served_at, spans), files)
        )
    found = FooterDays()
    for file, placed in zip(files, placements, strict=True):
        state = _file_state(file) if placed is not None else None
        if placed is None or state is None:
            found.unplaced.append(file.path)
            continue
        days, rows, nulls = placed
        found.undated += 0 if partition is not None else nulls
        found.placed.append(file.path)
        for day in sorted(d for d in days if start <= d <= end):
            found.states.setdefault(day, []).append(state)
            found.rows[day] = found.rows.get(day, 0) + rows
    return found


def _days(
    file: DataFile, partitioned: bool, served_at: str, nanos: bool = False
) -> tuple[set[dt.date], int, int] | None:
    """The UTC days of the file's served_at values (the column of that name: null ones on its
    partition's day; with `nanos`, a span's start: an INT64 of nanoseconds since the epoch), its
    rows and its null served_at values, or None when the footer cannot say for certain."""
    import pyarrow.parquet as pq

    partition_day = file.day
    if partitioned and partition_day is None:
        return None
    try:
        with file.place.fs.open_input_file(file.info.path) as handle:
            metadata = pq.read_metadata(handle)
    except Exception:  # unreadable here: the narrow pass (or the scan) will judge it
        return None
    if any(key in (metadata.metadata or {}) for key in _LEGACY_CALENDAR):
        return None
    schema = metadata.schema
    index = next((i for i in range(len(schema)) if schema.column(i).path == served_at), None)
    if index is None or schema.column(index).physical_type != "INT64":
        return None
    logical = json.loads(schema.column(index).logical_type.to_json())
    per_day = (
        _PER_DAY.get(logical.get("timeUnit", "")) if logical.get("Type") == "Timestamp" else None
    )
    if nanos and logical.get("Type") in ("None", "Int"):  # a span's start, in nanoseconds
        per_day = _NANOS_PER_DAY
    if per_day is None:
        return None
    days: set[dt.date] = set()
    nulls = 0
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        stats = row_group.column(index).statistics
        if row_group.num_rows == 0:
            continue
        if stats is None or not stats.has_null_count:
            return None
        nulls += stats.null_count
        if stats.null_count > 0 and partition_day is not None:
            days.add(partition_day)
        if stats.null_count < row_group.num_rows:
            if not stats.has_min_max:
                return None
            first = _EPOCH.date() + dt.timedelta(days=stats.min_raw // per_day)
            last = _EPOCH.date() + dt.timedelta(days=stats.max_raw // per_day)
            if (last - first).days > 1:  # the days between may hold no row
                return None
            days.update((first, last))
    return days, metadata.num_rows, nulls


def _file_state(file: DataFile) -> str | None:
    """`path|size|modification time` as Spark's file metadata gives them in the narrow pass (the
    path as Spark's URI: `file:/abs` or `s3a://bucket/key`; the time in milliseconds as UTC
    timestamp text), or None for a path Spark would escape."""
    if not _PLAIN_PATH.match(file.info.path):
        return None
    uri = file.place.spark_uri(file.info.path)
    return f"{uri}|{file.info.size}|{storage.mtime_text(file.info)}"
