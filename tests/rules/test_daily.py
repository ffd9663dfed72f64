"""Daily distributions: exact quantiles from histograms, checked against numpy to the last bit."""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from logmetrics.rules.daily import QUANTILES, with_histogram_statistics
from spark_reference import daily_distributions

D1, D2 = dt.date(2026, 1, 5), dt.date(2026, 1, 6)
BY_QUERY = (
    "metric_date date, request_id string, k int, unique_clusters int, results int, "
    "missing_cluster_results int"
)


def test_quantiles_equal_numpy_percentile_bit_for_bit(spark: SparkSession) -> None:
    rng = random.Random(11)
    cases = []
    for _ in range(300):
        k = rng.choice([1, 3, 10, 20])
        n = rng.choice([1, 2, 3, 4, 5, 7, 10, 99, 1000])
        values = [rng.randint(0, k) for _ in range(n)]
        cases.append(values)
    cases += [[0], [5, 5], [0, 10], [3] * 7]
    hists = [[sum(1 for v in vals if v == i) for i in range(max(vals) + 1)] for vals in cases]
    got = _statistics(spark, hists).collect()
    for values, row in zip(cases, got, strict=True):
        for name, p in QUANTILES.items():
            expected = float(np.percentile(np.array(values), 100 * p))
            assert row[name] == expected, (values, name, row[name], expected)


def test_empty_histogram_has_no_quantile(spark: SparkSession) -> None:
    row = _statistics(spark, [[0, 0, 0]]).first()
    assert [row[name] for name in QUANTILES] == [None] * len(QUANTILES)


def _statistics(spark: SparkSession, hists: list[list[int]]) -> DataFrame:
    """`with_histogram_statistics` (the daily rows' path) of one row per histogram."""
    rows = [(hist, sum(hist), 0, 0) for hist in hists]
    schema = "histogram array<long>, queries long, results long, missing_cluster_results long"
    return spark.createDataFrame(rows, schema).transform(with_histogram_statistics, 2)


def test_daily_rows_including_a_day_without_queries(spark: SparkSession) -> None:
    # Day 1, k=3: unique values 0, 1, 3, 3 (one empty list); day 2 has no queries at all.
    by_query = spark.createDataFrame(
        [
            (D1, "a", 3, 0, 0, 0),
            (D1, "b", 3, 1, 4, 1),
            (D1, "c", 3, 3, 3, 0),
            (D1, "d", 3, 3, 5, 2),
        ],
        BY_QUERY,
    )
    calendar = spark.createDataFrame([(D1, 3), (D2, 3)], "metric_date date, k int")
    got = daily_distributions(by_query, calendar, max_k=3, threshold=1)
    values = np.array([0, 1, 3, 3])
    q = {name: float(np.percentile(values, 100 * p)) for name, p in QUANTILES.items()}
    expected = spark.createDataFrame(
        [
            (D1, 3, 4, 1, 12, 3, [1, 1, 0, 2], q["p10"], q["p25"], q["median"], q["p75"])
            + (q["p90"], 7 / 4, 1, 2 / 4, 3 / 12),
            (D2, 3, 0, 0, 0, 0, [0, 0, 0, 0], None, None, None, None, None, None, 1, None, None),
        ],
        "metric_date date, k int, queries long, empty_queries long, results long, "
        "missing_cluster_results long, histogram array<long>, p10 double, p25 double, "
        "median double, p75 double, p90 double, mean double, threshold int, "
        "share_at_or_below_threshold double, missing_cluster_rate double",
    )
    assertDataFrameEqual(got.select(*expected.columns), expected)


def test_histogram_length_is_k_plus_one_per_k(spark: SparkSession) -> None:
    by_query = spark.createDataFrame([(D1, "a", 2, 2, 2, 0), (D1, "a", 5, 4, 4, 0)], BY_QUERY)
    calendar = spark.createDataFrame([(D1, 2), (D1, 5)], "metric_date date, k int")
    got = daily_distributions(by_query, calendar, max_k=5, threshold=4)
    histograms = {row.k: row.histogram for row in got.collect()}
    assert histograms == {2: [0, 0, 1], 5: [0, 0, 0, 0, 1, 0]}
