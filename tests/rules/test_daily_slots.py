"""The k-sweep and the redundancy cost on a hand-worked day."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import DataFrame, SparkSession

from logmetrics.rules.cluster_keys import cluster_keys
from logmetrics.rules.daily import k_sweep, redundancy_cost, with_segments
from logmetrics.rules.per_request import filter_served_requests, requests_by_key
from logmetrics.schemas import CLUSTERS
from spark_reference import slot_sums

DAY = dt.date(2026, 1, 5)
NEXT_DAY = dt.date(2026, 1, 6)
T0 = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC)
LOGS = (
    "request_id string, served_at timestamp, "
    "results array<struct<rank:int, chunk_id:string, tokens:double>>, surface string"
)


@pytest.fixture(scope="module")
def sums(spark: SparkSession) -> DataFrame:
    # r1 in rank order: a1 (A), a2 (A, 100.4 tokens), b (B), a3 (A, no tokens); r2 is empty.
    rows = [
        (
            "r1",
            T0,
            [(4, "a3", None), (1, "a1", 7.0), (3, "b", 9.0), (2, "a2", 100.4)],
            "web",
        ),
        ("r2", T0, [], None),
    ]
    clusters = [("a1", "A"), ("a2", "A"), ("a3", "A"), ("b", "B")]
    segmented = (
        requests_by_key(
            spark.createDataFrame(rows, LOGS),
            cluster_keys(spark.createDataFrame(clusters, CLUSTERS)),
            ks=(2, 4),
            segment_by=("surface",),
        )
        .transform(filter_served_requests)
        .transform(with_segments, ("surface",))
    )
    return slot_sums(segmented, max_k=4, tokens_per_slot=510)


def _calendar(spark: SparkSession, ks: list[int]) -> DataFrame:
    return spark.createDataFrame(
        [(d, k) for d in (DAY, NEXT_DAY) for k in ks], "metric_date date, k int"
    )


def test_k_sweep_by_hand(spark: SparkSession, sums: DataFrame) -> None:
    got = {
        (r.metric_date, r.segment_value, r.k): (
            r.queries,
            r.unique_clusters_total,
            r.mean_unique_clusters,
            r.distinct_fraction,
            r.marginal_rate,
        )
        for r in k_sweep(sums, _calendar(spark, [1, 2, 3, 4])).collect()
    }
    # All traffic: unique clusters of r1 at k = 1..4 are 1, 1, 2, 2; r2 has 0.
    assert got[(DAY, "all", 1)] == (2, 1, 0.5, 0.5, 0.5)
    assert got[(DAY, "all", 2)] == (2, 1, 0.5, 0.25, 0.0)
    assert got[(DAY, "all", 3)] == (2, 2, 1.0, 1 / 3, 0.5)
    assert got[(DAY, "all", 4)] == (2, 2, 1.0, 0.25, 0.0)
    assert got[(DAY, "web", 3)] == (1, 2, 2.0, 2 / 3, 1.0)
    assert got[(DAY, "(null)", 4)] == (1, 0, 0.0, 0.0, 0.0)
    # A day without queries keeps its all-traffic rows, with null ratios.
    assert got[(NEXT_DAY, "all", 2)] == (0, 0, None, None, None)
    assert len(got) == 4 * 3 + 4


def test_redundancy_cost_by_hand(spark: SparkSession, sums: DataFrame) -> None:
    got = {
        (r.metric_date, r.segment_value, r.k): (
            r.slots,
            r.redundant_slots,
            r.redundant_tokens,
            r.redundant_usd,
        )
        for r in redundancy_cost(sums, _calendar(spark, [2, 4]), 510, 3.0).collect()
    }
    # Top-2 of r1: a1, a2 -> a2 is redundant, its own 100.4 tokens rounded to 100.
    assert got[(DAY, "all", 2)] == (2, 1, 100, pytest.approx(100 * 3.0 / 1e6))
    # Top-4 adds a3: redundant, without tokens -> 510.
    assert got[(DAY, "all", 4)] == (4, 2, 610, pytest.approx(610 * 3.0 / 1e6))
    assert got[(DAY, "web", 4)] == got[(DAY, "all", 4)]
    assert got[(DAY, "(null)", 4)] == (0, 0, 0, 0.0)
    assert got[(NEXT_DAY, "all", 4)] == (0, 0, 0, 0.0)
