"""The judged evaluation's inputs read by Spark: retrieval runs and relevance judgments
(Parquet, Delta, CSV, TREC files) and the detector's calibration, each conformed to its contract
in `schemas.py`, a value that is not of its type an `InputError` naming it."""

from __future__ import annotations

import pandas as pd
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DateType,
    IntegralType,
    NumericType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from logmetrics.config import (
    CalibrationInput,
    JudgmentsInput,
    RunInput,
)
from logmetrics.errors import InputError
from logmetrics.inputs.files import (
    require_path,
)
from logmetrics.inputs.served_logs import first_line
from logmetrics.inputs.shapes import (
    string_conversion,
)
from logmetrics.schemas import (
    CALIBRATION,
    CALIBRATION_KEYS,
    INPUT_FILE,
    INPUT_ROW,
    JUDGMENTS,
    RUN,
)


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
    require_path(path, what)
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
    require_path(path, what)
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


def _as_string(data_type: DataType, name: str, what: str) -> Column:
    """The column called `name` as text (integer ids convert); an InputError otherwise."""
    return string_conversion(data_type, name, what)(F.col(name))
