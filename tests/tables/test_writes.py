"""How a table's rows are laid out for their write (`catalog.one_file_per_partition`)."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from pyspark.sql import SparkSession

from logmetrics.tables.catalog import BY_QUERY_TABLE, DAILY_TABLE, one_file_per_partition

DAYS = [dt.date(2026, 1, d) for d in range(1, 6)]


def _by_query_rows(spark: SparkSession):
    rows = [(d, f"r{i}", i % 3 + 5, 2, "not a column of the table") for i, d in enumerate(DAYS)]
    return spark.createDataFrame(
        rows, "metric_date date, request_id string, k int, unique_clusters int, extra string"
    )


def test_a_partitioned_table_is_shuffled_into_a_task_per_day_up_to_the_setting(
    spark: SparkSession,
) -> None:
    df = _by_query_rows(spark)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        spark.conf.set("spark.sql.shuffle.partitions", "3")
        capped = one_file_per_partition(spark, df, BY_QUERY_TABLE, partitions=len(DAYS))
        assert capped.rdd.getNumPartitions() == 3  # 5 days, at most the setting
        spark.conf.set("spark.sql.shuffle.partitions", "8")
        per_day = one_file_per_partition(spark, df, BY_QUERY_TABLE, partitions=len(DAYS))
        assert per_day.rdd.getNumPartitions() == len(DAYS)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", str(before))
    # Each day in one task: one file per table partition.
    days_per_task = per_day.rdd.glom().map(lambda rows: {r.metric_date for r in rows}).collect()
    assert sorted(d for days in days_per_task for d in days) == DAYS
    # Only the table's own columns cross the shuffle.
    assert per_day.columns == ["metric_date", "request_id", "k", "unique_clusters"]


def test_a_shuffle_setting_that_is_not_a_number_leaves_the_count_to_the_days(
    spark: SparkSession,
) -> None:
    auto = SimpleNamespace(conf=SimpleNamespace(get=lambda _: "auto"))  # Databricks' `auto`
    df = _by_query_rows(spark)
    assert one_file_per_partition(auto, df, BY_QUERY_TABLE, 4).rdd.getNumPartitions() == 4


def test_an_unpartitioned_table_is_written_as_one_file(spark: SparkSession) -> None:
    df = spark.createDataFrame([(d,) for d in DAYS], "metric_date date").repartition(4)
    assert one_file_per_partition(spark, df, DAILY_TABLE).rdd.getNumPartitions() == 1
