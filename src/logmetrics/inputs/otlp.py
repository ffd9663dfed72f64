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

from pyspark.sql import Column, DataFrame, DataFrameReader
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

TIMES_SCHEMA = (
    "resourceSpans array<struct<scopeSpans: array<struct<spans: "
    "array<struct<spanId: string, startTimeUnixNano: string>>>>>>"
)
"""A line read for its spans' ids and times alone (which days a file holds; the damaged-file
scan): Spark's parser skips every other field's value rather than keeping it."""


def read_otlp(
    reader: DataFrameReader, path: str, corrupt_record: str, schema: str = LINE_SCHEMA
) -> DataFrame:
    """The lines of the OTLP/JSON files at `path` read as `schema`, with `corrupt_record`
    holding a line that does not parse (or does not fit the schema)."""
    return (
        reader.schema(f"{schema}, {corrupt_record} string")
        .option("columnNameOfCorruptRecord", corrupt_record)
        .json(path)
    )


def otlp_spans(lines_df: DataFrame, carried: tuple[str, ...] = ()) -> DataFrame:
    """One row per span of the lines (`read_otlp`), in OpenTelemetry's column names: ids as
    written (hex), times as integers, `attributes` and `resource` (its attributes) as key-value
    arrays of `ANY_VALUE`s, those the lines were read with (`TIMES_SCHEMA`: the ids and start
    times alone). The `carried` columns (a date partition) ride along."""
    exports = lines_df.schema["resourceSpans"].dataType.elementType  # type: ignore[attr-defined]
    resource = ["_resource_spans.resource.attributes"] if "resource" in exports.names else []
    resources = lines_df.select(*carried, F.explode("resourceSpans").alias("_resource_spans"))
    scopes = resources.select(
        *carried,
        *[F.col(c).alias("resource") for c in resource],
        F.explode("_resource_spans.scopeSpans").alias("_scope_spans"),
    )
    kept = [*carried, *(["resource"] if resource else [])]
    spans = scopes.select(*kept, F.explode("_scope_spans.spans").alias("_span"))
    read = spans.schema["_span"].dataType.names  # type: ignore[attr-defined]
    return spans.select(
        *kept,
        *[_span_field(field).alias(name) for name, field in SPAN_COLUMNS.items() if field in read],
    )


SPAN_COLUMNS = {
    "trace_id": "traceId",
    "span_id": "spanId",
    "parent_span_id": "parentSpanId",
    "name": "name",
    "start_time_unix_nano": "startTimeUnixNano",
    "end_time_unix_nano": "endTimeUnixNano",
    "attributes": "attributes",
}
"""A span row's columns (OpenTelemetry's names) and the OTLP/JSON fields they are read from."""


def _span_field(field: str) -> Column:
    """An OTLP/JSON span's field: its times (integers written as strings) as longs."""
    column = F.col(f"_span.{field}")
    return column.cast("long") if field.endswith("UnixNano") else column
