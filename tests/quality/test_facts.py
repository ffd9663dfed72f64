"""`quality.facts.duplicate_request_ids`: the `unique_request_ids` gate's count, by hand."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import SparkSession

from logmetrics.quality.facts import duplicate_request_ids

D1, D2 = dt.date(2026, 1, 1), dt.date(2026, 1, 2)


def test_served_rows_beyond_one_per_request_id_and_day_are_counted(spark: SparkSession) -> None:
    rows = [
        (1, D1, "a", False),
        (1, D1, "a", False),
        (1, D1, "a", False),  # "a" three times on D1: 2 extra
        (2, D1, "b", False),
        (2, D1, "b", True),  # a malformed row of "b" is not a served copy
        (3, D2, "a", False),  # the same id on another day is another request
        (4, D2, "c", False),
        (4, D2, "c", False),  # 1 extra on D2
    ]
    df = spark.createDataFrame(
        rows, "request_key long, metric_date date, request_id string, is_malformed boolean"
    )
    got = {r.metric_date: r.duplicate_request_ids for r in duplicate_request_ids(df).collect()}
    assert got == {D1: 2, D2: 1}
    unique = df.dropDuplicates(["metric_date", "request_id", "is_malformed"])
    assert duplicate_request_ids(unique).count() == 0  # a day without any has no row
