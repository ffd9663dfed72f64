"""Ready markers: whether a day's date-partition directory holds the file that says its logs have
all landed (`inputs.served_logs.ready_marker`). A local or S3 path is looked at directly, without
Spark or PySpark; another store through a Spark session's Hadoop file system."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

from logmetrics import storage
from logmetrics.config import ServedLogsInput
from logmetrics.errors import InputError
from logmetrics.inputs.files import detected_partition_column

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def missing_ready_markers(
    source: ServedLogsInput, dates: Sequence[dt.date], spark: SparkSession | None = None
) -> dict[dt.date, str]:
    """The days of `dates` whose date-partition directory lacks `source.ready_marker`, each with
    the marker's path; none when no marker is configured. A local path is looked at directly,
    without Spark; a remote one through `spark`'s Hadoop file system."""
    marker = source.ready_marker
    if marker is None or not dates:
        return {}
    column = _marker_partition_column(source)
    assert source.path is not None  # a marker needs a path (config)
    if column is None:
        raise InputError(
            f"served logs at {source.path}: inputs.served_logs.ready_marker is looked for in "
            "each day's `<column>=YYYY-MM-DD` directory, and none was found (set "
            "inputs.served_logs.date_partition to the column)"
        )
    paths = {d: f"{source.path.rstrip('/')}/{column}={d.isoformat()}/{marker}" for d in dates}
    if storage.place(source.path) is not None:
        return {d: p for d, p in paths.items() if not _is_file(p)}
    if spark is None:
        raise InputError(f"served logs at {source.path}: a remote path needs Spark to look at")
    return {d: p for d, p in paths.items() if not _remote_file_exists(spark, p)}


def _is_file(path: str) -> bool:
    where = storage.place(path)
    assert where is not None  # the logs' store has a reader
    try:
        return where.is_file()
    except OSError as exc:
        raise InputError(f"{path}: {storage.problem(path, exc)}") from None


def needs_spark_for_readiness(source: ServedLogsInput) -> bool:
    """Whether `missing_ready_markers` must look through Spark (a marker on a store
    logmetrics has no reader for)."""
    return source.ready_marker is not None and storage.place(source.path or "") is None


def _marker_partition_column(source: ServedLogsInput) -> str | None:
    """The date-partition column whose directories hold the markers, of any format."""
    if source.date_partition not in {"auto", "none"}:
        return source.date_partition
    if source.date_partition == "none" or source.path is None:
        return None
    return detected_partition_column(source.path)


def _remote_file_exists(spark: SparkSession, path: str) -> bool:
    """Whether a file exists on remote storage, through the session's Hadoop file system."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no JVM in this process
        raise InputError(f"{path}: ready markers on remote storage need a classic Spark session")
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    conf = spark._jsc.hadoopConfiguration()
    return bool(hadoop_path.getFileSystem(conf).isFile(hadoop_path))
