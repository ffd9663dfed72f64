"""The cluster table read by Spark: by path (Delta at a pinned or the latest version, or
Parquet) or by name, its columns named as the contract names them, and its state as the ledger
records it (the Delta version read, or a hash of its files' listing)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from logmetrics import storage
from logmetrics.config import (
    ClustersInput,
)
from logmetrics.console import did_you_mean
from logmetrics.errors import InputError
from logmetrics.inputs.files import (
    data_files,
    require_path,
)
from logmetrics.inputs.served_logs import catalog_table, error_condition, first_line
from logmetrics.inputs.shapes import string_conversion
from logmetrics.schemas import (
    CLUSTERS,
)
from logmetrics.storage import Place, absolute, delta_path_identifier


@dataclass(frozen=True)
class ClusterSnapshot:
    """The cluster table as read, and the Delta version it was read at (None for Parquet)."""

    df: DataFrame
    version: int | None


def read_clusters(spark: SparkSession, source: ClustersInput) -> ClusterSnapshot:
    """The cluster table, at the pinned Delta version or at the latest one (recorded), by path
    or by name, its columns named as the contract names them (`inputs.clusters.columns`)."""
    what = source.described
    try:
        if source.by_catalog:
            df, version = _catalog_clusters(spark, source, what)
        else:
            assert source.location is not None
            require_path(source.location, what)
            path = absolute(source.location)  # the history (SQL) and the read resolve it alike
            if source.data_format == "delta":
                version = source.version
                if version is None:
                    version = _latest_delta_version(spark, delta_path_identifier(path), what)
                df = spark.read.format("delta").option("versionAsOf", version).load(path)
            else:
                version = None
                df = spark.read.parquet(path)
        fields = {field.name: field.dataType for field in df.schema.fields}
    except AnalysisException as exc:
        raise InputError(f"cannot read {what}: {first_line(exc)}") from None
    mapped = source.columns.mapped()
    columns = []
    for name in CLUSTERS.fieldNames():
        own = mapped.get(name, name)
        if own not in fields:
            if name in mapped:
                raise InputError(
                    f"columns.{name}: no column {own!r} in the cluster table"
                    f"{did_you_mean(own, list(fields))}"
                )
            found = ", ".join(sorted(fields)) or "none"
            raise InputError(f"{what}: required column {own!r} is missing (found: {found})")
        columns.append(string_conversion(fields[own], own, what)(F.col(own)).alias(name))
    return ClusterSnapshot(df=df.select(*columns), version=version)


def _catalog_clusters(
    spark: SparkSession, source: ClustersInput, what: str
) -> tuple[DataFrame, int | None]:
    """A cluster table the catalog names, and its Delta version (pinned, or the latest one);
    None for a table that is not Delta (its files' listing is then its state)."""
    name = source.table
    assert name is not None
    version = source.version
    if version is None:
        try:
            version = _latest_delta_version(spark, name, what)
        except AnalysisException as exc:
            if error_condition(exc) == "TABLE_OR_VIEW_NOT_FOUND":
                raise InputError(f"{what}: the catalog has no table {name!r}") from None
            if error_condition(exc) != "DELTA_ONLY_OPERATION":
                raise
            return catalog_table(spark, name, what), None  # not a Delta table: no versions
    try:
        return spark.read.option("versionAsOf", version).table(name), version
    except AnalysisException as exc:
        if error_condition(exc) == "TABLE_OR_VIEW_NOT_FOUND":
            raise InputError(f"{what}: the catalog has no table {name!r}") from None
        raise


def clusters_state(spark: SparkSession, source: ClustersInput, clusters: ClusterSnapshot) -> str:
    """The cluster table's state, recorded beside every day computed from it: `v<version>` for a
    Delta table (the version read), else a hash of its file listing (path, size, mtime; on a
    store logmetrics has no reader for, or a table only the catalog places, the names Spark
    reads)."""
    if clusters.version is not None:
        return f"v{clusters.version}"
    root = storage.place(source.location) if source.location is not None else None
    if root is None:
        if source.location is not None:
            storage.say_no_reader(
                source.location, "the cluster table's listing", "Spark lists its files"
            )
        files = sorted(clusters.df.inputFiles())
        return hashlib.sha256("\n".join(files).encode()).hexdigest()
    return parquet_listing_state(root)


def parquet_listing_state(root: Place) -> str:
    """A hash of the data files Spark reads below `root`: each one's path relative to it, size
    and modification time (nanoseconds), in listing order."""
    entries = [
        f"{f.path[len(root.uri()) :].lstrip('/')}:{f.info.size}:{f.info.mtime_ns}"
        for f in data_files(root, None)
    ]
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


def _latest_delta_version(spark: SparkSession, table: str, what: str) -> int:
    """The latest version of a Delta table (a name, or ``delta.`/path` ``)."""
    # SQL, not DeltaTable.history: it runs on any Spark Connect server with Delta's extension.
    history = spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1")
    latest = history.select("version").first()
    if latest is None:  # a Delta table always has at least its creating commit
        raise InputError(f"{what}: the Delta log has no commits")
    return int(latest[0])
