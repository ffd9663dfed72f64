"""Property tests: on random logs and cluster tables, Spark equals the pure-Python reference."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

import reference
from contract import SERVED_LOGS
from logmetrics.inputs.served_logs import filter_served_between
from logmetrics.rules.cluster_keys import cluster_keys
from logmetrics.rules.crowding import crowding_candidates, crowding_rows
from logmetrics.rules.daily import (
    daily_from_sums,
    day_sums,
    k_sweep,
    redundancy_cost,
    with_segments,
)
from logmetrics.rules.per_request import explode_windows, filter_served_requests, requests_by_key
from logmetrics.schemas import CLUSTERS
from spark_reference import daily_distributions, unique_clusters_by_request

pytestmark = [pytest.mark.slow, pytest.mark.reference]

START, END = dt.date(2026, 3, 1), dt.date(2026, 3, 2)
DAY_START = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)

CHUNKS = [f"ch{i}" for i in range(9)] + ["s:ch1", "ÜNI'\"\n"]
CLUSTER_IDS = ["A", "B", "C", "s:ch2", "ch3"]

entries = st.lists(
    st.one_of(
        st.none(),
        st.tuples(
            st.one_of(st.none(), st.integers(-2, 12)),
            st.one_of(st.none(), st.sampled_from(CHUNKS)),
        ),
    ),
    max_size=14,
)
# Seconds from the window's start, at the midnight boundaries too, and a little outside it.
offsets = st.one_of(
    st.sampled_from([-1, 0, 86_399, 86_400, 172_799, 172_800]), st.integers(-3600, 176_400)
)


@st.composite
def logs(draw: st.DrawFn) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i in range(draw(st.integers(0, 14))):
        row = {
            "request_id": draw(st.one_of(st.just(f"r{i}"), st.sampled_from(["r0", "r1", None]))),
            "served_at": DAY_START + dt.timedelta(seconds=draw(offsets)),
            "results": draw(st.one_of(entries, st.none())),
        }
        if draw(st.integers(0, 9)) == 0:
            row["served_at"] = None
        rows.append(row)
        if rows and draw(st.booleans()):  # a redelivery: identical, or served at another second
            copy = dict(draw(st.sampled_from(rows)))
            if copy["served_at"] is not None and draw(st.booleans()):
                copy["served_at"] += dt.timedelta(seconds=draw(st.integers(1, 3600)))
            rows.append(copy)
    return _without_same_time_conflicts(rows)


def _without_same_time_conflicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules keep the earliest copy; copies at the same instant must then be identical."""
    seen: dict[tuple[Any, Any], Any] = {}
    out = []
    for row in rows:
        key = (row["request_id"], row["served_at"])
        if key in seen and seen[key] != row["results"]:
            continue
        seen[key] = row["results"]
        out.append(row)
    return out


clusters = st.lists(
    st.tuples(
        st.one_of(st.sampled_from(CHUNKS), st.none()),
        st.one_of(st.sampled_from(CLUSTER_IDS), st.none()),
    ),
    max_size=14,
)
ks = st.lists(st.integers(1, 12), min_size=1, max_size=4, unique=True).map(
    lambda values: tuple(sorted(values))
)


def _spark_rows(rows: list[dict[str, Any]]) -> list[tuple]:
    return [
        (
            r["request_id"],
            r["served_at"],
            None
            if r["results"] is None
            else [None if e is None else {"rank": e[0], "chunk_id": e[1]} for e in r["results"]],
        )
        for r in rows
    ]


def _reference_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **r,
            "results": None
            if r["results"] is None
            else [None if e is None else {"rank": e[0], "chunk_id": e[1]} for e in r["results"]],
        }
        for r in rows
    ]


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(rows=logs(), cluster_rows=clusters, ks=ks, threshold=st.integers(0, 6))
def test_spark_equals_reference(
    spark: SparkSession,
    rows: list[dict[str, Any]],
    cluster_rows: list[tuple],
    ks: tuple[int, ...],
    threshold: int,
) -> None:
    logs_df = spark.createDataFrame(_spark_rows(rows), SERVED_LOGS).transform(
        filter_served_between, START, END
    )
    clusters_df = spark.createDataFrame(cluster_rows, CLUSTERS)
    by_query_df = (
        unique_clusters_by_request(logs_df, cluster_keys(clusters_df), ks)
        .transform(explode_windows)
        .cache()  # collected, then aggregated
    )
    got = sorted(
        (r.asDict() for r in by_query_df.collect()),
        key=lambda r: (r["metric_date"], r["request_id"], r["k"]),
    )
    expected = reference.by_query(_reference_rows(rows), cluster_rows, ks, START, END)
    assert [_comparable(r) for r in got] == [_comparable(r) for r in expected]

    calendar = spark.createDataFrame(
        [(d, k) for d in reference.dates_between(START, END) for k in ks],
        "metric_date date, k int",
    )
    daily = [
        r.asDict() for r in daily_distributions(by_query_df, calendar, max(ks), threshold).collect()
    ]
    assert all((r["segment"], r["segment_value"]) == ("all", "all") for r in daily)
    got_daily = sorted(map(_without_segment, daily), key=lambda r: (r["metric_date"], r["k"]))
    by_query_df.unpersist()
    expected_daily = reference.daily(_reference_rows(rows), cluster_rows, ks, threshold, START, END)
    assert got_daily == expected_daily


def _comparable(row: dict[str, Any]) -> dict[str, Any]:
    """Spark hands timestamps back naive, in the process's time zone (UTC in tests)."""
    served_at = row["served_at"]
    if served_at.tzinfo is None:
        served_at = served_at.replace(tzinfo=dt.UTC)
    return {**row, "served_at": served_at}


def _without_segment(row: dict[str, Any]) -> dict[str, Any]:
    return {c: v for c, v in row.items() if c not in ("segment", "segment_value")}


# --- the k-sweep, the redundancy cost and segments ----------------------------------------

SURFACES = ["web", "app", None]
TOKENS_PER_SLOT = 510
USD_PER_MILLION = 3.0


@st.composite
def segmented_logs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """`logs()` with a `surface` per (request_id, served_at) and a `tokens` per chunk id
    (sometimes null), so that identical copies stay identical."""
    rows = draw(logs())
    surfaces: dict[tuple[Any, Any], Any] = {}
    tokens = {c: draw(st.one_of(st.none(), st.integers(0, 900))) for c in CHUNKS}
    out = []
    for row in rows:
        key = (row["request_id"], row["served_at"])
        if key not in surfaces:
            surfaces[key] = draw(st.sampled_from(SURFACES))
        results = row["results"]
        if results is not None:
            results = [None if e is None else (*e, tokens.get(e[1])) for e in results]
        out.append({**row, "surface": surfaces[key], "results": results})
    return out


SEGMENTED_LOGS = (
    "request_id string, served_at timestamp, "
    "results array<struct<rank:int, chunk_id:string, tokens:int>>, surface string"
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(rows=segmented_logs(), cluster_rows=clusters, ks=ks)
def test_sweep_cost_and_segments_equal_reference(
    spark: SparkSession, rows: list[dict[str, Any]], cluster_rows: list[tuple], ks: tuple[int, ...]
) -> None:
    spark_rows = [
        (
            r["request_id"],
            r["served_at"],
            None
            if r["results"] is None
            else [
                None if e is None else {"rank": e[0], "chunk_id": e[1], "tokens": e[2]}
                for e in r["results"]
            ],
            r["surface"],
        )
        for r in rows
    ]
    logs_df = spark.createDataFrame(spark_rows, SEGMENTED_LOGS).transform(
        filter_served_between, START, END
    )
    clusters_df = spark.createDataFrame(cluster_rows, CLUSTERS)
    max_k = max(ks)
    served_df = requests_by_key(
        logs_df, cluster_keys(clusters_df), ks, segment_by=("surface",), slot_keys=True
    ).transform(filter_served_requests)
    segmented_df = served_df.transform(with_segments, ("surface",))
    dates = reference.dates_between(START, END)
    calendar = spark.createDataFrame([(d, k) for d in dates for k in ks], "metric_date date, k int")
    sweep_calendar = spark.createDataFrame(
        [(d, k) for d in dates for k in range(1, max_k + 1)], "metric_date date, k int"
    )
    # The pipeline's path: one aggregation (`day_sums`), brought to the driver as Arrow, from
    # which the three tables are derived; each table is collected once.
    sums_df = spark.createDataFrame(day_sums(segmented_df, ks, TOKENS_PER_SLOT).toArrow())
    # Crowding as the chunk builds it: the few candidates collected, then named (top_n 2: ties
    # at the cut-off are frequent).
    found = crowding_candidates(served_df, ks, 2, ("surface",), TOKENS_PER_SLOT, USD_PER_MILLION)
    candidates = spark.createDataFrame(found.toArrow(), schema=found.schema)
    got = {
        table: [r.asDict() for r in df.collect()]
        for table, df in {
            "daily": daily_from_sums(sums_df, calendar, threshold=2),
            "sweep": k_sweep(sums_df, sweep_calendar),
            "cost": redundancy_cost(sums_df, calendar, TOKENS_PER_SLOT, USD_PER_MILLION),
            "crowding": crowding_rows(candidates, cluster_keys(clusters_df), 2),
        }.items()
    }
    ref_rows = [
        {
            **r,
            "results": None
            if r["results"] is None
            else [
                None if e is None else {"rank": e[0], "chunk_id": e[1], "tokens": e[2]}
                for e in r["results"]
            ],
        }
        for r in rows
    ]
    segments: list[tuple[str, str] | None] = [None] + [
        ("surface", reference.segment_of({"surface": s}, "surface")) for s in SURFACES
    ]
    for segment in segments:
        name, value = segment or ("all", "all")
        expected = {
            "daily": reference.daily(ref_rows, cluster_rows, ks, 2, START, END, segment),
            "sweep": reference.k_sweep(ref_rows, cluster_rows, max_k, START, END, segment),
            "cost": reference.redundancy_cost(
                ref_rows, cluster_rows, ks, TOKENS_PER_SLOT, USD_PER_MILLION, START, END, segment
            ),
            "crowding": reference.crowding(
                ref_rows,
                cluster_rows,
                ks,
                2,
                START,
                END,
                segment,
                TOKENS_PER_SLOT,
                USD_PER_MILLION,
            ),
        }
        for table, rows_of_table in got.items():
            rows_of_segment = [
                r for r in rows_of_table if (r["segment"], r["segment_value"]) == (name, value)
            ]
            actual = sorted(
                (
                    {c: r[c] for c in expected[table][0]}
                    if expected[table]
                    else _without_segment(r)
                    for r in rows_of_segment
                ),
                key=lambda r: (r["metric_date"], r["k"], r.get("rank")),
            )
            assert actual == expected[table], (table, segment)
