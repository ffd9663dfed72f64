"""The files of an input path, without Spark or PySpark: which data files Spark would read below a
location (local or S3, `storage`), their date partitions, and whether the configured paths are
there at all, answered before a session starts."""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyarrow import fs as pafs

from logmetrics import storage
from logmetrics.config import InputsConfig, JudgmentsInput, RunInput, ServedLogsInput
from logmetrics.storage import Place, local_path

_PARTITION_DIR = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(\d{4}-\d{2}-\d{2})$")


def utc_window(start: dt.date, end: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """[start 00:00 UTC, end+1 00:00 UTC): the served_at range of the dates start..end."""
    lo = dt.datetime.combine(start, dt.time(), tzinfo=dt.UTC)
    hi = dt.datetime.combine(end + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    return lo, hi


@dataclass(frozen=True)
class DataFile:
    """A data file Spark reads below a location (`data_files`): its path as Spark lists it
    (an absolute local path, or `s3a://bucket/key`), its listing, and its date partition's
    date."""

    path: str
    info: Any  # pyarrow.fs.FileInfo: size and modification time, as listed
    day: dt.date | None
    place: Place


def data_files(
    root: Place, partition: str | None, lo: dt.date | None = None, hi: dt.date | None = None
) -> Iterator[DataFile]:
    """The data files below `root` that Spark reads (Spark's rule: names starting with `.`,
    or with `_` unless they hold `=`, and `._COPYING_` ones skipped), each with its date
    partition's date; partitions outside lo..hi are pruned, never listed. A directory's files
    come before its subdirectories', each in name order. A root that is a file is that one
    file, as Spark reads it."""
    top = root.info()
    if top.type == pafs.FileType.File:
        yield DataFile(root.uri(), top, None, root)
        return
    todo = [root.path]
    while todo:
        folder = todo.pop()
        relative = folder[len(root.path) :].strip("/")
        day = None
        if partition is not None and relative:
            day = partition_dir_date(relative, partition)
            if day is not None and lo is not None and hi is not None and not lo <= day <= hi:
                continue
        entries = root.at(folder).listing()
        for info in entries:
            if info.type == pafs.FileType.File and _read_by_spark(info.base_name):
                yield DataFile(root.uri(info.path), info, day, root)
        todo.extend(
            reversed(
                [
                    info.path
                    for info in entries
                    if info.type == pafs.FileType.Directory and _read_by_spark(info.base_name)
                ]
            )
        )


def _read_by_spark(name: str) -> bool:
    """Whether Spark's file listing keeps a file or directory of this name."""
    hidden = name.startswith(".") or (name.startswith("_") and "=" not in name)
    return not hidden and not name.endswith("._COPYING_")


def file_key(path: str) -> str:
    """A file's path as the scan and Spark's file listing can both give it (file:/x, /x)."""
    local = local_path(path)
    return os.path.normpath(os.path.abspath(local)) if local is not None else path


def date_partition_column(source: ServedLogsInput) -> str | None:
    """The logs' date partition column: named by `date_partition`, or detected (`auto`) in the
    directories of a path of files; a Delta table prunes its own partitions, and a table by
    name is pruned only by a column `date_partition` names."""
    if source.date_partition == "none":
        return None
    if source.date_partition != "auto":
        return (
            None
            if source.data_format == "delta" and not source.by_catalog
            else (source.date_partition)
        )
    if source.data_format == "delta" or source.location is None:
        return None
    return detected_partition_column(source.location)


def detected_partition_column(path: str) -> str | None:
    """The one `<column>=YYYY-MM-DD` name of the directories right below `path` (local or S3),
    or None (none, several, or a store logmetrics has no reader for)."""
    root = storage.place(path)
    if root is None:
        return None
    try:
        entries = root.listing()
    except OSError:
        return None  # the read says what is wrong, in one line
    names = {
        m.group(1)
        for info in entries
        if info.type == pafs.FileType.Directory and (m := _PARTITION_DIR.match(info.base_name))
    }
    return names.pop() if len(names) == 1 else None


def check_inputs_exist(inputs: InputsConfig) -> None:
    """Fail fast, before Spark starts, when an input path does not exist, or its store cannot be
    reached (`storage.check_exists`)."""
    for source in (inputs.logs(), inputs.clusters):
        if source.location is not None:
            require_path(source.location, source.described)
    if inputs.calibration is not None:
        require_path(inputs.calibration.path, f"calibration at {inputs.calibration.path}")


def partition_dir_date(relative_dir: str, column: str) -> dt.date | None:
    """The date of a `<column>=YYYY-MM-DD` directory (the first such level of a path relative
    to the logs' root), or None."""
    for part in relative_dir.replace(os.sep, "/").split("/"):
        match = _PARTITION_DIR.match(part)
        if match and match.group(1) == column:
            try:
                return dt.date.fromisoformat(match.group(2))
            except ValueError:
                return None
    return None


def require_path(path: str, what: str) -> None:
    storage.check_exists(path, what)


def check_path_exists(path: str, what: str) -> None:
    """Fail fast, before Spark starts, when a local input path does not exist."""
    require_path(path, f"{what} at {path}")


def check_evaluation_inputs_exist(runs: dict[str, RunInput], judgments: JudgmentsInput) -> None:
    """Fail fast, before Spark starts, when a local run or judgments path does not exist."""
    for name, run in runs.items():
        require_path(run.path, f"run {name!r} at {run.path}")
    require_path(judgments.path, f"judgments at {judgments.path}")
