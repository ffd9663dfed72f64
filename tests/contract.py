"""The served-logs contract as a Spark schema, for the tests that build logs in it: docs/inputs.md's
table (request_id string, served_at timestamp, results a list of {rank, chunk_id}). logmetrics
itself reads logs in any shape and names (`inputs.shapes`) and never builds them."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

RESULT_ENTRY = StructType(
    [
        StructField("rank", IntegerType()),
        StructField("chunk_id", StringType()),
    ]
)
"""A served result. An optional integer `tokens` field (its prompt tokens) prices redundancy."""

SERVED_LOGS = StructType(
    [
        StructField("request_id", StringType()),
        StructField("served_at", TimestampType()),
        StructField("results", ArrayType(RESULT_ENTRY)),
    ]
)
"""The served-logs contract. Other columns are carried along and ignored."""
