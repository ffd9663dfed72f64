"""Readers: the served logs (parquet / delta / json), the cluster table (delta, version pinned),
the judged-evaluation runs and judgments, and the inputs' state the ledger records.

Each reader checks its input against the contract in `schemas.py`, converts types that convert
losslessly, and turns the conditions a user can cause (missing path, missing column, a type
that cannot be read as the contract says) into one-line `InputError`s.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyarrow import fs as pafs
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegralType,
    LongType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from logmetrics.config import (
    CalibrationInput,
    ClustersInput,
    InputsConfig,
    JudgmentsInput,
    RunInput,
    ServedLogsInput,
)
from logmetrics.console import did_you_mean
from logmetrics.errors import InputError
from logmetrics.schemas import (
    CALIBRATION,
    CALIBRATION_KEYS,
    CLUSTERS,
    INPUT_FILE,
    INPUT_ROW,
    JUDGMENTS,
    PARTITION_DATE,
    RUN,
    rows_frame,
)
from logmetrics.tables import storage
from logmetrics.tables.delta_paths import absolute, delta_path_identifier, local_path
from logmetrics.tables.shapes import (
    JSON_SAMPLE_LINES,
    LogShape,
    check_json_names,
    contract_plan,
    group_result_rows,
    json_schema,
    string_conversion,
    to_contract,
    with_row_order,
)
from logmetrics.tables.storage import Place

_PARTITION_DIR = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(\d{4}-\d{2}-\d{2})$")


@dataclass(frozen=True)
class ClusterSnapshot:
    """The cluster table as read, and the Delta version it was read at (None for Parquet)."""

    df: DataFrame
    version: int | None


def utc_window(start: dt.date, end: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """[start 00:00 UTC, end+1 00:00 UTC): the served_at range of the dates start..end."""
    lo = dt.datetime.combine(start, dt.time(), tzinfo=dt.UTC)
    hi = dt.datetime.combine(end + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    return lo, hi


def read_served_logs(
    spark: SparkSession,
    source: ServedLogsInput,
    start: dt.date,
    end: dt.date,
    segment_by: Sequence[str] = (),
    skip_files: Collection[str] = (),
    copies: bool = True,
) -> DataFrame:
    """The served-log rows whose served_at falls on start..end (UTC), turned into the contract
    (`tables.shapes`: the data's names and shape, one row per served copy).

    Date partitions are pruned (with a day of margin either side, since a partition's date need
    not be the UTC date), and the exact served_at filter is pushed down to the files. Without a
    date partition layout, every file below the path is read, whatever the directory layout.
    The `segment_by` columns (metrics.segment_by) must be present. Files in `skip_files` (the
    corrupt ones `file_scan` found, when they are quarantined) are left out, and JSON lines
    that do not parse are dropped here: `file_scan` has already failed the run or quarantined
    them. Without `copies`, exploded logs keep their row per result (a pass that needs only
    served_at and the files, `rules.per_request.day_file_states`).
    """
    what = source.described
    if source.location is not None:
        _require_path(source.location, what)
    partition = date_partition_column(source)
    shape = LogShape.of(source)
    try:
        raw = load_raw_served_logs(spark, source, segment_by, partition, skip_files)
        columns = set(raw.columns)
    except AnalysisException as exc:
        raise InputError(f"cannot read {what}: {first_line(exc)}") from None
    if CORRUPT_RECORD in columns:
        raw = raw.where(F.col(CORRUPT_RECORD).isNull()).drop(CORRUPT_RECORD)
        columns.discard(CORRUPT_RECORD)

    if partition is not None and partition not in columns:
        raise InputError(f"{what}: date partition column {partition!r} not found")
    if source.data_format == "json" and source.location is not None:
        check_json_names(json_sample(source.location, partition), what, shape)
    plan = contract_plan({f.name: f.dataType for f in raw.schema.fields}, what, shape)
    for name in segment_by:
        if name not in columns:
            found = ", ".join(sorted(columns))
            raise InputError(
                f"{what}: segment column {name!r} (metrics.segment_by) is missing (found: {found})"
            )
    grouped = shape.exploded and copies
    logs_df = to_contract(with_row_order(raw) if grouped else raw, plan)
    if partition is not None:
        logs_df = logs_df.where(_partition_filter(raw, partition, start, end, what)).withColumn(
            PARTITION_DATE, _partition_as_date(raw, partition)
        )
    logs_df = logs_df.transform(filter_served_between, start, end)
    return logs_df.transform(group_result_rows, segment_by) if grouped else logs_df


CORRUPT_RECORD = "_corrupt_record"
"""The column Spark's JSON reader fills with a line that does not parse (or does not fit the
read schema); such lines are found by `file_scan` and never reach the metrics."""


def load_raw_served_logs(
    spark: SparkSession,
    source: ServedLogsInput,
    segment_by: Sequence[str] = (),
    partition: str | None = None,
    skip_files: Collection[str] = (),
) -> DataFrame:
    """The logs as stored, before the contract is checked.

    - A table by name is the catalog's (`spark.table`); a ``delta.`/path` `` one is read by
      path, as Delta.
    - JSON lines are read with the shape's schema (`shapes.json_schema`: the contract's columns
      at their widest types, in the data's names) plus the segment columns (as text) and
      `CORRUPT_RECORD`: reading JSON never infers a schema (a pass over all the data).
    - Parquet is read with its inferred schema widened (every integer to bigint, float to
      double), so files that store a rank as int32 and others as int64 read alike.
    """
    if source.by_catalog:
        assert source.table is not None
        return catalog_table(spark, source.table, source.described)
    path, fmt = source.location, source.data_format
    assert path is not None
    reader = spark.read
    if partition is None and fmt != "delta":
        reader = reader.option("recursiveFileLookup", "true")
    if fmt == "json":
        read = json_schema(LogShape.of(source))
        extra = [StructField(n, StringType()) for n in segment_by if n not in read.names]
        schema = StructType([*read.fields, *extra, StructField(CORRUPT_RECORD, StringType())])
        reader = reader.schema(schema).option("columnNameOfCorruptRecord", CORRUPT_RECORD)
        return reader.json(path)
    if fmt != "parquet":
        return reader.format(fmt).load(path)
    paths = [path]
    root = storage.place(path)
    if skip_files and root is not None:  # the scan's corrupt files: listed here, not by Spark
        skipped = {file_key(f) for f in skip_files}
        paths = [f.path for f in data_files(root, partition) if file_key(f.path) not in skipped]
        reader = reader.option("basePath", path)
        if not paths:  # every file is corrupt: no rows
            columns = list(json_schema(LogShape.of(source)).fields)
            if partition is not None:
                columns.append(StructField(partition, StringType()))
            return rows_frame(spark, [], StructType(columns))
    inferred = reader.parquet(*paths).schema  # one file's footer (Spark's rule)
    return reader.schema(widened(inferred)).parquet(*paths)


def json_sample(location: str, partition: str | None) -> list[dict[str, Any]]:
    """The first JSON objects of the first data file below `location` (`shapes.JSON_SAMPLE_LINES`
    lines at most; lines that do not parse are left to `file_scan`); none where the store has
    no reader here or no file holds a line."""
    root = storage.place(location)
    if root is None:
        return []
    try:
        for file in data_files(root, partition):
            with file.place.fs.open_input_stream(file.info.path) as stream:
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


def widened(data_type: DataType) -> Any:
    """`data_type` with every integer widened to bigint and float to double (all nullable):
    what Parquet files of one dataset are read as, whatever width each file stores."""
    if isinstance(data_type, StructType):
        return StructType(
            [StructField(f.name, widened(f.dataType), True) for f in data_type.fields]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(widened(data_type.elementType), True)
    if isinstance(data_type, IntegralType):
        return LongType()
    if isinstance(data_type, FloatType):
        return DoubleType()
    return data_type


def filter_served_between(logs_df: DataFrame, start: dt.date, end: dt.date) -> DataFrame:
    """Rows served on the UTC dates start..end (a filter Spark pushes down to the files), and
    rows without a served_at whose date partition is one of those dates."""
    lo, hi = utc_window(start, end)
    served = F.col("served_at")
    in_window = (served >= F.lit(lo)) & (served < F.lit(hi))
    if PARTITION_DATE in logs_df.columns:
        undated = served.isNull() & F.col(PARTITION_DATE).between(F.lit(start), F.lit(end))
        in_window = in_window | undated
    return logs_df.where(in_window)


def read_clusters(spark: SparkSession, source: ClustersInput) -> ClusterSnapshot:
    """The cluster table, at the pinned Delta version or at the latest one (recorded), by path
    or by name, its columns named as the contract names them (`inputs.clusters.columns`)."""
    what = source.described
    try:
        if source.by_catalog:
            df, version = _catalog_clusters(spark, source, what)
        else:
            assert source.location is not None
            _require_path(source.location, what)
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
        columns.append(_as_string(fields[own], own, what).alias(name))
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
            if _condition(exc) == "TABLE_OR_VIEW_NOT_FOUND":
                raise InputError(f"{what}: the catalog has no table {name!r}") from None
            if _condition(exc) != "DELTA_ONLY_OPERATION":
                raise
            return catalog_table(spark, name, what), None  # not a Delta table: no versions
    try:
        return spark.read.option("versionAsOf", version).table(name), version
    except AnalysisException as exc:
        if _condition(exc) == "TABLE_OR_VIEW_NOT_FOUND":
            raise InputError(f"{what}: the catalog has no table {name!r}") from None
        raise


def catalog_table(spark: SparkSession, name: str, what: str) -> DataFrame:
    """The table the session's catalog names so; an InputError naming it when it has none."""
    try:
        return spark.table(name)
    except AnalysisException as exc:
        if _condition(exc) == "TABLE_OR_VIEW_NOT_FOUND":
            raise InputError(f"{what}: the catalog has no table {name!r}") from None
        raise


def _condition(exc: AnalysisException) -> str | None:
    """The error's condition (class), e.g. TABLE_OR_VIEW_NOT_FOUND."""
    getter = getattr(exc, "getCondition", None) or exc.getErrorClass
    return getter()


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


# --- judged evaluation: runs and judgments ---------------------------------------------------


def read_run(spark: SparkSession, name: str, source: RunInput) -> DataFrame:
    """(query_id, rank, chunk_id, input_file, input_row) of one retrieval run, conformed to
    `schemas.RUN`. A TREC run file's lines are `qid Q0 docno rank score tag`: the rank column
    is used and the score is ignored (trec_eval orders by score instead)."""
    what = f"run {name!r} at {source.path}"
    if source.format == "trec":
        fields = _read_whitespace_columns(
            spark,
            source.path,
            what,
            ("query_id", "chunk_id", "rank"),
            {"query_id": 0, "chunk_id": 2, "rank": 3},
            width=6,
            layout="qid Q0 docno rank score tag",
        )
    else:
        fields = _read_table_input(spark, source.path, source.format, what)
    return _conform_columns(fields, what, RUN).select(*RUN.fieldNames(), INPUT_FILE, INPUT_ROW)


def read_judgments(spark: SparkSession, source: JudgmentsInput) -> DataFrame:
    """(query_id, chunk_id, grade) of the relevance judgments, conformed to
    `schemas.JUDGMENTS`. TREC qrels lines are `qid 0 docno grade`."""
    what = f"judgments at {source.path}"
    if source.format == "trec":
        fields = _read_whitespace_columns(
            spark,
            source.path,
            what,
            ("query_id", "chunk_id", "grade"),
            {"query_id": 0, "chunk_id": 2, "grade": 3},
            width=4,
            layout="qid 0 docno grade",
        )
    else:
        fields = _read_table_input(spark, source.path, source.format, what)
    return _conform_columns(fields, what, JUDGMENTS).select(*JUDGMENTS.fieldNames())


def read_calibration(spark: SparkSession, source: CalibrationInput) -> pd.DataFrame:
    """The detector's calibration rows (a handful), conformed to `schemas.CALIBRATION` and
    brought to the driver; `rules.calibration.problem` then checks their values. A key column
    the file lacks is null; a required column missing, or a value that is not of its type
    (text in csv or json), is an InputError naming it."""
    what = f"calibration at {source.path}"
    df = _read_table_input(spark, source.path, source.format, what)
    fields = {field.name: field.dataType for field in df.schema.fields}
    if not any(key in fields for key in CALIBRATION_KEYS):
        raise InputError(f"{what}: needs a column 'cluster_table_version' or 'detector'")
    columns = {}
    for field in CALIBRATION.fields:
        if field.name not in fields:
            if field.name in CALIBRATION_KEYS:
                columns[field.name] = F.lit(None).cast(field.dataType)
                continue
            found = ", ".join(sorted(set(fields) - {INPUT_FILE, INPUT_ROW})) or "none"
            raise InputError(f"{what}: required column {field.name!r} is missing (found: {found})")
        source_type = fields[field.name]
        column = F.col(field.name)
        if isinstance(field.dataType, StringType):
            columns[field.name] = _as_string(source_type, field.name, what)
            continue
        if isinstance(source_type, StringType):
            parsed = column.try_cast(field.dataType)
            bad = df.where(column.isNotNull() & parsed.isNull()).select(field.name).first()
            if bad is not None:
                wanted = field.dataType.simpleString()
                raise InputError(
                    f"{what}: column {field.name!r} must hold {wanted}s, got {bad[0]!r}"
                )
            columns[field.name] = parsed
        elif isinstance(source_type, NumericType | DateType | TimestampType | TimestampNTZType):
            columns[field.name] = column.cast(field.dataType)
        else:
            raise InputError(
                f"{what}: column {field.name!r} must be a {field.dataType.simpleString()}, "
                f"found {source_type.simpleString()}"
            )
    rows = df.select(*[columns[f.name].alias(f.name) for f in CALIBRATION.fields])
    return pd.DataFrame(rows.toPandas(), columns=CALIBRATION.fieldNames())


def _read_table_input(spark: SparkSession, path: str, fmt: str, what: str) -> DataFrame:
    _require_path(path, what)
    try:
        if fmt == "csv":  # every column as text; the contract's columns are converted below
            df = spark.read.option("header", "true").csv(path)
        else:
            df = spark.read.format(fmt).load(path)
        df.schema  # noqa: B018 - resolve the files now, so a bad input fails here, in one line
    except AnalysisException as exc:
        raise InputError(f"cannot read {what}: {first_line(exc)}") from None
    return df.withColumns(
        {INPUT_FILE: F.input_file_name(), INPUT_ROW: F.monotonically_increasing_id()}
    )


def _read_whitespace_columns(
    spark: SparkSession,
    path: str,
    what: str,
    names: tuple[str, ...],
    positions: dict[str, int],
    width: int,
    layout: str,
) -> DataFrame:
    """A TREC file's whitespace-separated fields, as text columns; blank lines are skipped and
    a line with the wrong number of fields is an InputError naming the first such line."""
    _require_path(path, what)
    try:
        lines = spark.read.text(path)
    except AnalysisException as exc:
        raise InputError(f"cannot read {what}: {first_line(exc)}") from None
    parts = F.split(F.trim(F.col("value")), r"\s+")
    lines = lines.select(
        "value",
        parts.alias("parts"),
        F.input_file_name().alias(INPUT_FILE),
        F.monotonically_increasing_id().alias(INPUT_ROW),
    ).where(F.trim(F.col("value")) != "")
    bad = lines.where(F.size("parts") != width).select("value").first()
    if bad is not None:
        raise InputError(f"{what}: expected lines of {width} fields ({layout}), got {bad[0]!r}")
    return lines.select(
        *[F.col("parts")[positions[n]].alias(n) for n in names], INPUT_FILE, INPUT_ROW
    )


def _conform_columns(df: DataFrame, what: str, contract: StructType) -> DataFrame:
    """Check the contract's columns are there; ids become text, numbers integers. Text that is
    not an integer (csv, TREC files) is an InputError naming the first such value."""
    strings = [f.name for f in contract.fields if isinstance(f.dataType, StringType)]
    integers = {
        f.name: f.dataType.simpleString()
        for f in contract.fields
        if isinstance(f.dataType, IntegralType)
    }
    fields = {field.name: field.dataType for field in df.schema.fields}
    for name in (*strings, *integers):
        if name not in fields:
            found = ", ".join(sorted(set(fields) - {INPUT_FILE, INPUT_ROW})) or "none"
            raise InputError(f"{what}: required column {name!r} is missing (found: {found})")
    columns = {name: _as_string(fields[name], name, what) for name in strings}
    for name, target in integers.items():
        data_type = fields[name]
        if isinstance(data_type, IntegralType):
            columns[name] = F.col(name).cast(target)
        elif isinstance(data_type, StringType):
            parsed = F.col(name).try_cast(target)
            bad = df.where(F.col(name).isNotNull() & parsed.isNull()).select(name).first()
            if bad is not None:
                raise InputError(f"{what}: column {name!r} must hold integers, got {bad[0]!r}")
            columns[name] = parsed
        else:
            raise InputError(
                f"{what}: column {name!r} must be an integer, found {data_type.simpleString()}"
            )
    return df.withColumns(columns)


def check_path_exists(path: str, what: str) -> None:
    """Fail fast, before Spark starts, when a local input path does not exist."""
    _require_path(path, f"{what} at {path}")


def check_evaluation_inputs_exist(runs: dict[str, RunInput], judgments: JudgmentsInput) -> None:
    """Fail fast, before Spark starts, when a local run or judgments path does not exist."""
    for name, run in runs.items():
        _require_path(run.path, f"run {name!r} at {run.path}")
    _require_path(judgments.path, f"judgments at {judgments.path}")


# --- type conversions ---------------------------------------------------------------------


def _as_string(data_type: DataType, name: str, what: str) -> Column:
    """The column called `name` as text (integer ids convert); an InputError otherwise."""
    return string_conversion(data_type, name, what)(F.col(name))


# --- partitions and paths -----------------------------------------------------------------


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
    return _detected_partition_column(source.location)


def _detected_partition_column(path: str) -> str | None:
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


def _partition_filter(
    df: DataFrame, column: str, start: dt.date, end: dt.date, what: str
) -> Column:
    lo, hi = start - dt.timedelta(days=1), end + dt.timedelta(days=1)
    data_type = df.schema[column].dataType
    col = F.col(column)
    if isinstance(data_type, DateType):
        return col.between(F.lit(lo), F.lit(hi))
    if isinstance(data_type, StringType):  # YYYY-MM-DD text sorts as dates do
        return col.between(F.lit(lo.isoformat()), F.lit(hi.isoformat()))
    if isinstance(data_type, IntegralType):  # YYYYMMDD
        return col.between(F.lit(int(lo.strftime("%Y%m%d"))), F.lit(int(hi.strftime("%Y%m%d"))))
    raise InputError(
        f"{what}: date partition column {column!r} has type {data_type.simpleString()}, "
        "expected a date, YYYY-MM-DD text or a YYYYMMDD integer"
    )


def check_inputs_exist(inputs: InputsConfig) -> None:
    """Fail fast, before Spark starts, when an input path does not exist, or its store cannot be
    reached (`storage.check_exists`)."""
    for source in (inputs.logs(), inputs.clusters):
        if source.location is not None:
            _require_path(source.location, source.described)
    if inputs.calibration is not None:
        _require_path(inputs.calibration.path, f"calibration at {inputs.calibration.path}")


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


def _partition_as_date(df: DataFrame, column: str) -> Column:
    data_type = df.schema[column].dataType
    if isinstance(data_type, DateType):
        return F.col(column)
    if isinstance(data_type, IntegralType):
        return F.to_date(F.col(column).cast("string"), "yyyyMMdd")
    return F.to_date(F.col(column))


def _require_path(path: str, what: str) -> None:
    storage.check_exists(path, what)


def first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# --- readiness: a day's logs have all landed ---------------------------------------------------


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
    return _detected_partition_column(source.path)


def _remote_file_exists(spark: SparkSession, path: str) -> bool:
    """Whether a file exists on remote storage, through the session's Hadoop file system."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no JVM in this process
        raise InputError(f"{path}: ready markers on remote storage need a classic Spark session")
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    conf = spark._jsc.hadoopConfiguration()
    return bool(hadoop_path.getFileSystem(conf).isFile(hadoop_path))
