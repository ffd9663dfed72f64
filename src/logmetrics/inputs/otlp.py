"""OTLP/JSON files read by Spark as span rows: each line an `ExportTraceServiceRequest`, as an
OpenTelemetry Collector's file exporter writes it (`resourceSpans` -> `scopeSpans` -> `spans`;
ids in hex, times as integer strings, attribute values as OTLP `AnyValue`s).

The lines are read with a fixed schema (no inference, no Python per row): every field of an
`AnyValue` as text, an array or a key-value list as its raw JSON, which `spans` turns into plain
JSON only for the attributes it reads. A line that does not parse fills `CORRUPT_RECORD` and is
left to the damaged-file scan (`inputs.on_corrupt`). The span rows carry OpenTelemetry's column
names (`trace_id`, `span_id`, `parent_span_id`, `name`, `start_time_unix_nano`,
`end_time_unix_nano`, `attributes`, `resource`), as a spans table names them.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, DataFrameReader
from pyspark.sql import functions as F

ANY_VALUE = (
    "struct<stringValue: string, boolValue: string, intValue: string, doubleValue: string, "
    "arrayValue: string, kvlistValue: string, bytesValue: string>"
)
"""An OTLP `AnyValue` as read: each kind as text (a number or a boolean as its JSON text), an
array or a key-value list as its raw JSON."""

KEY_VALUES = f"array<struct<key: string, value: {ANY_VALUE}>>"

SPAN = (
    "struct<traceId: string, spanId: string, parentSpanId: string, name: string, "
    f"startTimeUnixNano: string, endTimeUnixNano: string, attributes: {KEY_VALUES}>"
)

LINE_SCHEMA = (
    "resourceSpans array<struct<resource: struct<attributes: "
    f"{KEY_VALUES}>, scopeSpans: array<struct<spans: array<{SPAN}>>>>>"
)
"""What an OTLP/JSON line is read as: the fields of a span a request is read from."""


def read_otlp(reader: DataFrameReader, path: str, corrupt_record: str) -> DataFrame:
    """The lines of the OTLP/JSON files at `path`, with `corrupt_record` holding a line that does
    not parse (or does not fit the schema)."""
    return (
        reader.schema(f"{LINE_SCHEMA}, {corrupt_record} string")
        .option("columnNameOfCorruptRecord", corrupt_record)
        .json(path)
    )


def otlp_spans(lines_df: DataFrame, carried: tuple[str, ...] = ()) -> DataFrame:
    """One row per span of the lines (`read_otlp`), in OpenTelemetry's column names: ids as
    written (hex), times as integers, `attributes` and `resource` (its attributes) as key-value
    arrays of `ANY_VALUE`s. The `carried` columns (a date partition) ride along."""
    resources = lines_df.select(*carried, F.explode("resourceSpans").alias("_resource_spans"))
    scopes = resources.select(
        *carried,
        F.col("_resource_spans.resource.attributes").alias("resource"),
        F.explode("_resource_spans.scopeSpans").alias("_scope_spans"),
    )
    spans = scopes.select(*carried, "resource", F.explode("_scope_spans.spans").alias("_span"))
    return spans.select(
        *carried,
        F.col("_span.traceId").alias("trace_id"),
        F.col("_span.spanId").alias("span_id"),
        F.col("_span.parentSpanId").alias("parent_span_id"),
        F.col("_span.name").alias("name"),
        F.col("_span.startTimeUnixNano").cast("long").alias("start_time_unix_nano"),
        F.col("_span.endTimeUnixNano").cast("long").alias("end_time_unix_nano"),
        F.col("_span.attributes").alias("attributes"),
        "resource",
    )
