"""The rows a run builds on its driver (`schemas.rows_frame`: its ledger rows, its days and
calendar, its check results, its alerts and calibration), sent to Spark as Arrow: the same rows
and schema as Spark's own `createDataFrame` of those Python rows gives, every type the run's
schemas hold (dates, UTC timestamps, arrays, nulls) included."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from logmetrics.schemas import (
    ALERTS,
    CALENDAR,
    DATA_QUALITY_ROWS,
    DAY_STATUS,
    DAYS,
    DETECTOR_CALIBRATION,
    JOB_RUNS,
    QUARANTINE_ROWS,
    rows_frame,
)
from logmetrics.tables.keys_cache import CACHE_ENTRY

# A moment whose UTC and local wall times differ anywhere but UTC, microseconds included.
MOMENT = dt.datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=dt.UTC)


def _value(data_type: DataType, n: int) -> Any:
    """A value of `data_type`, different for each n."""
    if isinstance(data_type, ArrayType):
        return [_value(data_type.elementType, n + i) for i in range(n % 3)]
    if isinstance(data_type, StructType):
        return tuple(_value(f.dataType, n) for f in data_type.fields)
    return {
        DateType: lambda: dt.date(2026, 1, 1) + dt.timedelta(days=n),
        TimestampType: lambda: MOMENT + dt.timedelta(hours=n),
        StringType: lambda: f"value {n} é",
        IntegerType: lambda: n - 1,
        LongType: lambda: 2**40 + n,
        DoubleType: lambda: n / 3,
        BooleanType: lambda: n % 2 == 0,
    }[type(data_type)]()


def _rows(schema: StructType) -> list[tuple[Any, ...]]:
    """Three rows: two of values, and one with every nullable field null."""
    full = [tuple(_value(f.dataType, n) for f in schema.fields) for n in (1, 2)]
    nulls = tuple(None if f.nullable else _value(f.dataType, 3) for f in schema.fields)
    return [*full, nulls]


SCHEMAS = {
    "job_runs": JOB_RUNS,
    "quarantine": QUARANTINE_ROWS,
    "data_quality": DATA_QUALITY_ROWS,
    "day_status": DAY_STATUS,
    "days": DAYS,
    "calendar": CALENDAR,
    "alerts": ALERTS,
    "detector_calibration": DETECTOR_CALIBRATION,
    "kept_keys_entry": CACHE_ENTRY,
}


@pytest.mark.parametrize("name", SCHEMAS)
def test_driver_rows_are_the_rows_spark_makes_of_them(spark: SparkSession, name: str) -> None:
    schema = SCHEMAS[name]
    rows = _rows(schema)
    ours = rows_frame(spark, rows, schema)
    theirs = spark.createDataFrame(rows, schema)
    assert ours.schema == theirs.schema == schema
    assert ours.collect() == theirs.collect()


def test_no_rows_is_an_empty_frame_of_the_schema(spark: SparkSession) -> None:
    empty = rows_frame(spark, [], JOB_RUNS)
    assert empty.schema == JOB_RUNS and empty.count() == 0


@pytest.mark.parametrize("ignore_timezone", ["1", None])
def test_a_timestamp_is_its_utc_moment(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, ignore_timezone: str | None
) -> None:
    """An aware timestamp keeps its moment whatever the offset it is written with, and whether
    or not PYARROW_IGNORE_TIMEZONE is set (pandas-on-Spark asks for it; with it, pyarrow
    reads an aware datetime's wall time as UTC)."""
    if ignore_timezone is None:
        monkeypatch.delenv("PYARROW_IGNORE_TIMEZONE", raising=False)
    else:
        monkeypatch.setenv("PYARROW_IGNORE_TIMEZONE", ignore_timezone)
    schema = StructType().add("at", TimestampType())
    paris = MOMENT.astimezone(dt.timezone(dt.timedelta(hours=2)))
    (row,) = rows_frame(spark, [(paris,)], schema).selectExpr("CAST(at AS STRING) AS at").collect()
    assert row.at == "2026-03-29 01:30:15.123456"
