"""The served logs read by Spark, as the contract: a date range's rows from a path (Parquet,
Delta, JSON lines) or a table by name, in the data's own names and shape turned into the
contract's (`inputs.shapes`), date partitions pruned and served_at filtered at the files.

Each condition a user can cause (missing path, missing column, a type that cannot be read as
the contract says) is a one-line `InputError`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any

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
    StringType,
    StructField,
    StructType,
)

from logmetrics import storage
from logmetrics.config import (
    ServedLogsInput,
)
from logmetrics.console import span_text
from logmetrics.errors import InputError
from logmetrics.inputs.files import (
    data_files,
    date_partition_column,
    file_key,
    require_path,
    utc_window,
)
from logmetrics.inputs.json_lines import check_json_names, json_sample
from logmetrics.inputs.layout import LogShape
from logmetrics.inputs.otlp import LINE_SCHEMA, TIMES_SCHEMA, otlp_spans, read_otlp
from logmetrics.inputs.shapes import (
    contract_plan,
    group_result_rows,
    json_schema,
    to_contract,
    with_row_order,
)
from logmetrics.inputs.spans import (
    check_sample,
    sampled_documents,
    span_start,
    spans_json_schema,
    spans_plan,
    spans_served_at,
    spans_to_contract,
    started_between,
)
from logmetrics.schemas import (
    PARTITION_DATE,
    rows_frame,
)


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
    (`inputs.shapes`, `inputs.spans`: the data's names and shape, one row per served copy).

    Date partitions are pruned (with a day of margin either side, since a partition's date need
    not be the UTC date), and the exact served_at filter is pushed down to the files. Without a
    date partition layout, every file below the path is read, whatever the directory layout.
    The `segment_by` columns (metrics.segment_by) must be present. Files in `skip_files` (the
    corrupt ones `file_scan` found, when they are quarantined) are left out, and JSON lines
    that do not parse are dropped here: `file_scan` has already failed the run or quarantined
    them. Without `copies`, only the rows' served_at and files (a pass that needs nothing
    else, `inputs.narrow_pass.day_file_states`): exploded logs keep their row per result,
    spans every span, whatever its kind, and OTLP exports are read for their times alone.
    """
    spans = source.shape == "spans"
    raw, partition = _raw(spark, source, segment_by, skip_files, times=spans and not copies)
    if spans and copies:
        return _spans(raw, source, start, end, partition, segment_by)
    if spans:
        began = span_start(_fields(raw), source, source.described)
        return _spans_started(raw, began, partition, start, end, source.described)
    return _contract_rows(raw, source, start, end, segment_by, partition, copies)


def _raw(
    spark: SparkSession,
    source: ServedLogsInput,
    segment_by: Sequence[str],
    skip_files: Collection[str],
    times: bool = False,
) -> tuple[DataFrame, str | None]:
    """The logs as stored (lines that do not parse left out) and their date partition column;
    with `times`, an OTLP export's spans read for their ids and times alone."""
    what = source.described
    if source.location is not None:
        require_path(source.location, what)
    partition = date_partition_column(source)
    try:
        raw = load_raw_served_logs(spark, source, segment_by, partition, skip_files, times)
        columns = set(raw.columns)
    except AnalysisException as exc:
        raise InputError(f"cannot read {what}: {first_line(exc)}") from None
    if CORRUPT_RECORD in columns:
        raw = raw.where(F.col(CORRUPT_RECORD).isNull()).drop(CORRUPT_RECORD)
        columns.discard(CORRUPT_RECORD)
    if partition is not None and partition not in columns:
        raise InputError(f"{what}: date partition column {partition!r} not found")
    if source.data_format == "json" and source.location is not None:
        check_json_names(json_sample(source.location, partition), what, LogShape.of(source))
    return raw, partition


def _fields(df: DataFrame) -> dict[str, DataType]:
    return {f.name: f.dataType for f in df.schema.fields}


def _spans_started(
    raw: DataFrame,
    began: tuple[str, DataType],
    partition: str | None,
    start: dt.date,
    end: dt.date,
    what: str,
) -> DataFrame:
    """Every span that began on start..end (the column and type `began`), whatever its kind,
    with its served_at, the other columns riding along."""
    in_range = raw.where(started_between(*began, start, end))
    return _dated(spans_served_at(in_range, *began), in_range, partition, start, end, what)


def _spans(
    raw: DataFrame,
    source: ServedLogsInput,
    start: dt.date,
    end: dt.date,
    partition: str | None,
    segment_by: Sequence[str],
) -> DataFrame:
    """The retrieval spans of start..end as the contract's requests (`inputs.spans`)."""
    plan = spans_plan(_fields(raw), source, source.described)
    raw = raw.where(started_between(plan.start, plan.start_type, start, end))
    kept = [partition] if partition else []
    logs_df = spans_to_contract(raw, plan, source, segment_by, kept)
    return _dated(logs_df, raw, partition, start, end, source.described)


def check_retrieval_spans(
    spark: SparkSession,
    source: ServedLogsInput,
    start: dt.date,
    end: dt.date,
    skip_files: Collection[str] = (),
) -> None:
    """Before a run's main pass, on spans: its convention finds retrieval spans in start..end
    where the other convention's are, and its chunk-id (and tokens) path names a field the
    documents have (`spans.check_sample`); nothing for other shapes."""
    if source.shape != "spans":
        return
    raw, partition = _raw(spark, source, (), skip_files)
    plan = spans_plan(_fields(raw), source, source.described)
    began = (plan.start, plan.start_type)
    spans_df = _spans_started(raw, began, partition, start, end, source.described)
    sample = sampled_documents(spans_df, plan, source.spans.convention).collect()
    check_sample([(r.this, r.other, r.documents) for r in sample], source, span_text(start, end))


def _contract_rows(
    raw: DataFrame,
    source: ServedLogsInput,
    start: dt.date,
    end: dt.date,
    segment_by: Sequence[str],
    partition: str | None,
    copies: bool,
) -> DataFrame:
    """The rows of a nested, ids or exploded shape as the contract (`read_served_logs`)."""
    what, shape = source.described, LogShape.of(source)
    columns = set(raw.columns)
    plan = contract_plan({f.name: f.dataType for f in raw.schema.fields}, what, shape)
    for name in segment_by:
        if name not in columns:
            found = ", ".join(sorted(columns))
            raise InputError(
                f"{what}: segment column {name!r} (metrics.segment_by) is missing (found: {found})"
            )
    grouped = shape.exploded and copies
    logs_df = to_contract(with_row_order(raw) if grouped else raw, plan)
    logs_df = _dated(logs_df, raw, partition, start, end, what)
    return logs_df.transform(group_result_rows, segment_by) if grouped else logs_df


def _dated(
    logs_df: DataFrame,
    raw: DataFrame,
    partition: str | None,
    start: dt.date,
    end: dt.date,
    what: str,
) -> DataFrame:
    """The rows of start..end: their date partitions pruned (and their date kept, for rows
    without a served_at), served_at filtered."""
    if partition is not None:
        logs_df = logs_df.where(_partition_filter(raw, partition, start, end, what)).withColumn(
            PARTITION_DATE, _partition_as_date(raw, partition)
        )
    return logs_df.transform(filter_served_between, start, end)


CORRUPT_RECORD = "_corrupt_record"
"""The column Spark's JSON reader fills with a line that does not parse (or does not fit the
read schema); such lines are found by the damaged-file scan (`inputs.scan`) and never reach the
metrics."""


def load_raw_served_logs(
    spark: SparkSession,
    source: ServedLogsInput,
    segment_by: Sequence[str] = (),
    partition: str | None = None,
    skip_files: Collection[str] = (),
    times: bool = False,
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
    if fmt == "otlp":
        lines = read_otlp(reader, path, CORRUPT_RECORD, TIMES_SCHEMA if times else LINE_SCHEMA)
        lines = lines.where(F.col(CORRUPT_RECORD).isNull())
        return otlp_spans(lines, carried=(partition,) if partition is not None else ())
    if fmt == "json" and source.shape == "spans":
        columns = [*spans_json_schema(source).fields, StructField(CORRUPT_RECORD, StringType())]
        reader = reader.schema(StructType(columns))
        return reader.option("columnNameOfCorruptRecord", CORRUPT_RECORD).json(path)
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


def _partition_as_date(df: DataFrame, column: str) -> Column:
    data_type = df.schema[column].dataType
    if isinstance(data_type, DateType):
        return F.col(column)
    if isinstance(data_type, IntegralType):
        return F.to_date(F.col(column).cast("string"), "yyyyMMdd")
    return F.to_date(F.col(column))


def catalog_table(spark: SparkSession, name: str, what: str) -> DataFrame:
    """The table the session's catalog names so; an InputError naming it when it has none."""
    try:
        return spark.table(name)
    except AnalysisException as exc:
        if error_condition(exc) == "TABLE_OR_VIEW_NOT_FOUND":
            raise InputError(f"{what}: the catalog has no table {name!r}") from None
        raise


def error_condition(exc: AnalysisException) -> str | None:
    """The error's condition (class), e.g. TABLE_OR_VIEW_NOT_FOUND."""
    getter = getattr(exc, "getCondition", None) or exc.getErrorClass
    return getter()


def first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
