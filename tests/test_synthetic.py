"""Tests for the pure-Python reference (hand-worked cases) and the synthetic data generator."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference
from logmetrics.synthetic import (
    CLUSTERS_SCHEMA,
    SERVED_LOGS_SCHEMA,
    GeneratedData,
    PlantedChange,
    PlantedFlood,
    generate,
    true_clusters,
    weekly_shift,
)

UTC = dt.UTC
DAY = dt.date(2026, 3, 1)


def at(day: dt.date = DAY, hour: int = 12, minute: int = 0) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def row(request_id: str | None, results: Any, served_at: dt.datetime | None = None) -> dict:
    """A served-log row; ``results`` as (rank, chunk_id) pairs, or None for a null list."""
    if results is not None:
        results = [
            None if entry is None else {"rank": entry[0], "chunk_id": entry[1]} for entry in results
        ]
    return {"request_id": request_id, "served_at": served_at or at(), "results": results}


def one(rows: list[dict], clusters: list[tuple[str, str | None]], k: int) -> dict:
    """The single by_query record for one request at one k."""
    (record,) = reference.by_query(rows, clusters, [k], DAY, DAY)
    return record


def day_row(rows: list[dict], clusters: list[tuple[str, str | None]], k: int = 10) -> dict:
    (record,) = reference.daily(rows, clusters, [k], 4, DAY, DAY)
    return record


# --- reference: hand-worked cases -------------------------------------------------------------

SEED_CLUSTERS = [
    ("zendesk", "invoice"),
    ("confluence", "invoice"),
    ("pdf", "invoice"),
    ("mediawiki", "invoice"),
    ("handbook", "c-handbook"),
    ("policy", "c-policy"),
    ("faq", "c-faq"),
    ("ticket", None),
]  # plus "blog" and "forum": not in the table
SEED_WINDOW = [
    (1, "zendesk"),
    (2, "confluence"),
    (3, "pdf"),
    (4, "mediawiki"),
    (5, "handbook"),
    (6, "policy"),
    (7, "faq"),
    (8, "ticket"),
    (9, "blog"),
    (10, "forum"),
]


def test_seed_window_one_paragraph_four_times_plus_six_sources() -> None:
    rows = [row("q1", SEED_WINDOW)]
    assert one(rows, SEED_CLUSTERS, 10)["unique_clusters"] == 7
    assert one(rows, SEED_CLUSTERS, 4)["unique_clusters"] == 1
    assert one(rows, SEED_CLUSTERS, 5)["unique_clusters"] == 2
    record = one(rows, SEED_CLUSTERS, 10)
    assert record["results"] == 10
    assert record["missing_cluster_results"] == 2  # blog and forum; "ticket" is listed (null)


def test_rank_ties_keep_array_position() -> None:
    clusters = [("p", "A"), ("q", "A"), ("r", "B")]
    assert one([row("q1", [(1, "p"), (2, "q"), (2, "r")])], clusters, 2)["unique_clusters"] == 1
    assert one([row("q1", [(1, "p"), (2, "r"), (2, "q")])], clusters, 2)["unique_clusters"] == 2
    # A tie at the top: whichever comes first in the array is first.
    assert one([row("q1", [(1, "r"), (1, "p"), (1, "q")])], clusters, 1)["unique_clusters"] == 1


def test_rank_gaps_top_k_is_first_k_entries() -> None:
    clusters = [("a", "A"), ("b", "B"), ("c", "A"), ("d", "D")]
    rows = [row("q1", [(1, "a"), (5, "c"), (9, "b"), (20, "d")])]
    assert one(rows, clusters, 2)["unique_clusters"] == 1  # ranks 1 and 5, both cluster A
    assert one(rows, clusters, 3)["unique_clusters"] == 2
    assert one(rows, clusters, 4)["unique_clusters"] == 3


def test_shuffled_array_order_uses_rank() -> None:
    clusters = [("a", "A"), ("b", "A"), ("c", "C")]
    in_order = [(1, "a"), (2, "b"), (3, "c")]
    reversed_ = list(reversed(in_order))
    for entries in (in_order, reversed_, [(2, "b"), (3, "c"), (1, "a")]):
        assert one([row("q1", entries)], clusters, 2)["unique_clusters"] == 1
        assert one([row("q1", entries)], clusters, 3)["unique_clusters"] == 2


def test_null_entries_are_dropped_before_top_k() -> None:
    clusters = [("a", "A"), ("b", "B"), ("c", "C")]
    entries = [(1, None), (None, "z"), (2, "a"), None, (3, "a"), (4, "b"), (5, "c")]
    record = one([row("q1", entries)], clusters, 2)
    assert record["unique_clusters"] == 1  # top-2 is a, a: the nulls did not take slots
    assert record["results"] == 4
    assert record["missing_cluster_results"] == 0  # "z" had a null rank: not a valid entry
    assert one([row("q1", entries)], clusters, 3)["unique_clusters"] == 2


def test_same_chunk_twice_is_one_cluster() -> None:
    rows = [row("q1", [(1, "a"), (2, "a"), (3, "x"), (4, "x")])]
    record = one(rows, [("a", "A")], 10)
    assert record["unique_clusters"] == 2  # cluster A, and singleton x (absent) counted once
    assert record["results"] == 4
    assert record["missing_cluster_results"] == 2


def test_absent_and_null_cluster_are_singletons_only_absent_is_missing() -> None:
    clusters = [("nul1", None), ("nul2", None), ("a", "A")]
    rows = [row("q1", [(1, "absent1"), (2, "absent2"), (3, "nul1"), (4, "nul2"), (5, "a")])]
    record = one(rows, clusters, 10)
    assert record["unique_clusters"] == 5
    assert record["missing_cluster_results"] == 2


def test_singleton_keys_never_collide_with_cluster_ids() -> None:
    # Cluster ids that equal an unclustered chunk's id, or a string-concat fallback key.
    clusters = [("a", "x"), ("b", "single:x"), ("c", "s:x"), ("d", "sx"), ("x", None)]
    rows = [row("q1", [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "x")])]
    assert one(rows, clusters, 10)["unique_clusters"] == 5
    assert one(rows, clusters[:-1], 10)["unique_clusters"] == 5  # x absent from the table


def test_chunk_listed_twice_takes_smallest_non_null_cluster() -> None:
    clusters = [
        ("m", "B"),
        ("m", None),
        ("m", "A"),
        ("n", None),
        ("n", "C"),
        ("o", None),
        ("o", None),
        ("pa", "A"),
        ("pc", "C"),
    ]
    assert reference.cluster_lookup(clusters) == {
        "m": "A",
        "n": "C",
        "o": None,
        "pa": "A",
        "pc": "C",
    }
    rows = [row("q1", [(1, "m"), (2, "pa"), (3, "n"), (4, "pc"), (5, "o")])]
    record = one(rows, clusters, 10)
    assert record["unique_clusters"] == 3  # A, C and singleton o
    assert record["missing_cluster_results"] == 0


def test_smallest_cluster_id_is_python_string_order() -> None:
    assert reference.cluster_lookup([("m", "b"), ("m", "B"), ("m", "a10"), ("m", "a9")]) == {
        "m": "B"
    }
    assert reference.cluster_lookup([("m", "a9"), ("m", "a10")]) == {"m": "a10"}


def test_redelivered_copies_count_once_and_earliest_is_kept() -> None:
    entries = [(1, "a"), (2, "b")]
    rows = [
        row("q1", entries, at(hour=9)),
        row("q1", entries, at(hour=7)),
        row("q1", entries, at(hour=9)),
        row("q2", entries, at(hour=8)),
    ]
    records = reference.by_query(rows, [], [10], DAY, DAY)
    assert [(r["request_id"], r["served_at"]) for r in records] == [
        ("q1", at(hour=7)),
        ("q2", at(hour=8)),
    ]
    assert day_row(rows, [])["queries"] == 2
    assert day_row(rows, [])["results"] == 4


def test_copies_on_two_utc_dates_count_on_each_date() -> None:
    """Dedupe is per (metric_date, request_id), as the rules say."""
    nxt = DAY + dt.timedelta(days=1)
    rows = [row("q1", [(1, "a")], at(DAY, 23, 59)), row("q1", [(1, "a")], at(nxt, 0, 1))]
    out = reference.daily(rows, [], [10], 4, DAY, nxt)
    assert [r["queries"] for r in out] == [1, 1]


def test_malformed_rows_never_enter() -> None:
    rows = [
        row(None, [(1, "a")]),
        {"request_id": "q2", "served_at": None, "results": [{"rank": 1, "chunk_id": "a"}]},
        row("q3", None),
        # A malformed copy of a good request, served earlier: it must not shadow the good one.
        row("q4", None, at(hour=1)),
        row("q4", [(1, "a"), (2, "b")], at(hour=2)),
    ]
    records = reference.by_query(rows, [], [10], DAY, DAY)
    assert [(r["request_id"], r["unique_clusters"], r["served_at"]) for r in records] == [
        ("q4", 2, at(hour=2)),
    ]


def test_empty_list_gives_zero_and_counts_as_a_query() -> None:
    rows = [row("q1", []), row("q2", [(None, "a"), (1, None)]), row("q3", [(1, "a")])]
    assert one(rows[:1], [], 10)["unique_clusters"] == 0
    daily_row = day_row(rows, [], k=3)
    assert daily_row["queries"] == 3
    assert daily_row["empty_queries"] == 2
    assert daily_row["histogram"] == [2, 1, 0, 0]
    assert daily_row["median"] == 0.0
    assert daily_row["results"] == 1
    assert daily_row["missing_cluster_results"] == 1
    assert daily_row["missing_cluster_rate"] == 1.0
    only_empty = day_row(rows[:1], [], k=3)
    assert only_empty["results"] == 0
    assert only_empty["missing_cluster_rate"] is None
    assert only_empty["share_at_or_below_threshold"] == 1.0


def test_list_shorter_than_k_counts_what_is_there() -> None:
    rows = [row("q1", [(1, "a"), (2, "b"), (3, "c")])]
    assert one(rows, [], 10)["unique_clusters"] == 3
    assert one(rows, [], 2)["unique_clusters"] == 2
    assert day_row(rows, [], k=10)["histogram"] == [0, 0, 0, 1] + [0] * 7


def test_daily_statistics_by_hand() -> None:
    clusters = [("a1", "A"), ("a2", "A"), ("a3", "A")]
    rows = [
        row("q1", [(1, "a1"), (2, "a2"), (3, "a3")]),  # 1 cluster
        row("q2", [(1, "a1"), (2, "x")]),  # 2
        row("q3", [(1, "y"), (2, "a3")]),  # 2
        row("q4", [(i, f"s{i}") for i in range(1, 8)]),  # 7
    ]
    r = day_row(rows, clusters, k=10)
    assert r["queries"] == 4 and r["empty_queries"] == 0
    assert r["histogram"] == [0, 1, 2, 0, 0, 0, 0, 1, 0, 0, 0]
    # sorted [1, 2, 2, 7]; position = p * 3
    assert r["p10"] == pytest.approx(1.3)
    assert r["p25"] == pytest.approx(1.75)
    assert r["median"] == pytest.approx(2.0)
    assert r["p75"] == pytest.approx(3.25)
    assert r["p90"] == pytest.approx(5.5)
    assert r["mean"] == 3.0
    assert r["threshold"] == 4
    assert r["share_at_or_below_threshold"] == 0.75
    assert r["results"] == 14
    assert r["missing_cluster_results"] == 9
    assert r["missing_cluster_rate"] == pytest.approx(9 / 14)
    for key in ("median", "p10", "p25", "p75", "p90", "mean", "share_at_or_below_threshold"):
        assert type(r[key]) is float


def test_zero_query_day_still_gets_a_row() -> None:
    end = DAY + dt.timedelta(days=2)
    out = reference.daily([row("q1", [(1, "a")])], [], [3, 10], 4, DAY, end)
    assert [(r["metric_date"], r["k"]) for r in out] == [
        (DAY, 3),
        (DAY, 10),
        (DAY + dt.timedelta(days=1), 3),
        (DAY + dt.timedelta(days=1), 10),
        (end, 3),
        (end, 10),
    ]
    empty = out[-1]
    assert empty == {
        "metric_date": end,
        "k": 10,
        "queries": 0,
        "empty_queries": 0,
        "histogram": [0] * 11,
        "median": None,
        "p10": None,
        "p25": None,
        "p75": None,
        "p90": None,
        "mean": None,
        "threshold": 4,
        "share_at_or_below_threshold": None,
        "results": 0,
        "missing_cluster_results": 0,
        "missing_cluster_rate": None,
    }


def test_dates_outside_the_range_are_ignored_and_dates_are_utc() -> None:
    before, after = DAY - dt.timedelta(days=1), DAY + dt.timedelta(days=1)
    plus5 = dt.timezone(dt.timedelta(hours=5))
    rows = [
        row("early", [(1, "a")], at(before, 23, 59)),
        row("late", [(1, "a")], at(after, 0, 0)),
        row("in", [(1, "a")], at(DAY, 0, 0)),
        # 02:00 at +05:00 on the day after is 21:00 UTC on DAY.
        row("tz", [(1, "a")], dt.datetime(after.year, after.month, after.day, 2, tzinfo=plus5)),
        # 23:00 at -05:00 on DAY is 04:00 UTC the day after: outside.
        row(
            "tz-out",
            [(1, "a")],
            dt.datetime(
                DAY.year, DAY.month, DAY.day, 23, tzinfo=dt.timezone(dt.timedelta(hours=-5))
            ),
        ),
    ]
    records = reference.by_query(rows, [], [10], DAY, DAY)
    assert sorted(r["request_id"] for r in records) == ["in", "tz"]
    assert all(r["metric_date"] == DAY for r in records)


def test_by_query_shape_and_order() -> None:
    rows = [row("b", [(1, "a")]), row("a", [(1, "a"), (2, "b")])]
    records = reference.by_query(rows, [], [10, 1, 10], DAY, DAY)
    assert [(r["request_id"], r["k"]) for r in records] == [
        ("a", 1),
        ("a", 10),
        ("b", 1),
        ("b", 10),
    ]
    assert set(records[0]) == {
        "metric_date",
        "request_id",
        "served_at",
        "k",
        "unique_clusters",
        "results",
        "missing_cluster_results",
    }
    with pytest.raises(ValueError):
        reference.by_query(rows, [], [0], DAY, DAY)


@pytest.mark.parametrize("kind", ["int", "float"])
def test_percentile_matches_numpy(kind: str) -> None:
    rnd = random.Random(20260301)
    for _ in range(400):
        n = rnd.randint(1, 60)
        if kind == "int":
            values = [rnd.randint(0, 20) for _ in range(n)]
        else:
            values = [rnd.uniform(-1e3, 1e3) for _ in range(n)]
        ordered = sorted(values)
        for _name, fraction in reference.PERCENTILES:
            expected = float(np.percentile(values, fraction * 100))
            assert reference.percentile(ordered, fraction) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10), min_size=1, max_size=40), st.sampled_from([10, 25, 50, 75, 90]))
def test_percentile_matches_numpy_property(values: list[int], pct: int) -> None:
    assert reference.percentile(sorted(values), pct / 100) == float(np.percentile(values, pct))


entry_st = st.tuples(
    st.one_of(st.none(), st.integers(1, 6)), st.one_of(st.none(), st.sampled_from("abcdefg"))
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(entry_st, max_size=12),
    st.lists(st.tuples(st.sampled_from("abcdefg"), st.one_of(st.none(), st.sampled_from("XYZ")))),
)
def test_reference_invariants(entries: list, clusters: list) -> None:
    records = reference.by_query([row("q", entries)], clusters, [1, 3, 5, 20], DAY, DAY)
    values = [r["unique_clusters"] for r in records]
    assert values == sorted(values)  # monotone in k
    for r in records:
        assert r["unique_clusters"] <= min(r["k"], r["results"])
        assert r["missing_cluster_results"] <= r["results"]
    assert records[0]["unique_clusters"] == min(1, records[0]["results"])
    # Entries with distinct ranks may be stored in any order.
    valid = [e for e in entries if e[0] is not None and e[1] is not None]
    if len({e[0] for e in valid}) == len(valid):
        shuffled = list(reversed(entries))
        again = reference.by_query([row("q", shuffled)], clusters, [1, 3, 5, 20], DAY, DAY)
        assert [r["unique_clusters"] for r in again] == values


# --- generator -----------------------------------------------------------------------------

START = dt.date(2026, 1, 1)


def read_rows(data: GeneratedData) -> list[dict]:
    table = ds.dataset(data.served_logs, format="parquet", partitioning="hive").to_table()
    return table.to_pylist()


def read_clusters(data: GeneratedData) -> list[tuple[str, str | None]]:
    return [(r["chunk_id"], r["cluster_id"]) for r in pq.read_table(data.clusters).to_pylist()]


@pytest.fixture(scope="module")
def small_dirty(tmp_path_factory: pytest.TempPathFactory) -> GeneratedData:
    return generate(tmp_path_factory.mktemp("small_dirty"), START, 3, 2000, seed=11)


@pytest.fixture(scope="module")
def small_clean(tmp_path_factory: pytest.TempPathFactory) -> GeneratedData:
    return generate(tmp_path_factory.mktemp("small_clean"), START, 3, 2000, seed=11, dirty=False)


@pytest.fixture(scope="module")
def big_dirty(tmp_path_factory: pytest.TempPathFactory) -> tuple[GeneratedData, list, list]:
    data = generate(tmp_path_factory.mktemp("big_dirty"), START, 2, 20000, seed=5)
    return data, read_rows(data), read_clusters(data)


def table_content(data: GeneratedData) -> list:
    parts = sorted(data.served_logs.glob("date=*/part-00000.parquet"))
    return [(p.parent.name, pq.read_table(p)) for p in parts]


def test_generator_is_deterministic(tmp_path: Path, small_dirty: GeneratedData) -> None:
    again = generate(tmp_path / "again", START, 3, 2000, seed=11)
    first, second = table_content(small_dirty), table_content(again)
    assert [name for name, _ in first] == [name for name, _ in second]
    assert all(a.equals(b) for (_, a), (_, b) in zip(first, second, strict=True))
    assert pq.read_table(small_dirty.clusters).equals(pq.read_table(again.clusters))
    assert (again.requests, again.rows, again.entries, again.cluster_rows) == (
        small_dirty.requests,
        small_dirty.rows,
        small_dirty.entries,
        small_dirty.cluster_rows,
    )
    # Day i does not depend on how many days were asked for; another seed differs.
    shorter = generate(tmp_path / "shorter", START, 1, 2000, seed=11)
    assert table_content(shorter)[0][1].equals(first[0][1])
    other = generate(tmp_path / "other", START, 1, 2000, seed=12)
    assert not table_content(other)[0][1].equals(first[0][1])


def test_season_and_planted_changes_move_only_what_they_name(
    tmp_path: Path, small_dirty: GeneratedData
) -> None:
    """The alerts' knobs (issue 18): off, the files are what they always were; a change planted
    in one segment value on one day redraws that value's lists that day and nothing else."""
    off = generate(tmp_path / "off", START, 3, 2000, seed=11, weekly_amplitude=0.0, planted=())
    assert all(
        a.equals(b)
        for (_, a), (_, b) in zip(table_content(off), table_content(small_dirty), strict=True)
    )
    day = START + dt.timedelta(days=1)
    app = PlantedChange(day, 0.15, "surface", "app")
    planted = generate(tmp_path / "app", START, 3, 2000, seed=11, planted=[app])
    before, after = table_content(small_dirty), table_content(planted)
    assert before[0][1].equals(after[0][1]) and before[2][1].equals(after[2][1])
    old, new = before[1][1].to_pylist(), after[1][1].to_pylist()
    assert [r["surface"] for r in old] == [r["surface"] for r in new]
    assert [r for r in old if r["surface"] != "app"] == [r for r in new if r["surface"] != "app"]
    clusters = read_clusters(small_dirty)

    def mean_at_10(rows: list[dict], surface: str) -> float:
        mine = [r for r in rows if r["surface"] == surface]
        (record,) = reference.daily(mine, clusters, [10], 4, day, day)
        return float(record["mean"])

    assert mean_at_10(new, "app") < mean_at_10(old, "app") - 0.5  # more repeats: a regression
    assert weekly_shift(dt.date(2026, 1, 4), 0.04) == pytest.approx(0.04)  # a Sunday
    assert sum(weekly_shift(START + dt.timedelta(days=i), 0.04) for i in range(7)) == (
        pytest.approx(0.0, abs=1e-12)
    )
    with pytest.raises(ValueError, match="no segment value surface='tv'"):
        PlantedChange(day, 0.1, "surface", "tv")


def test_layout_and_schema(small_dirty: GeneratedData) -> None:
    parts = sorted(small_dirty.served_logs.iterdir())
    assert [p.name for p in parts] == ["date=2026-01-01", "date=2026-01-02", "date=2026-01-03"]
    for part in parts:
        assert [f.name for f in part.iterdir()] == ["part-00000.parquet"]
        schema = pq.read_schema(part / "part-00000.parquet")
        assert schema.equals(SERVED_LOGS_SCHEMA)
        assert "date" not in schema.names
        served = pq.read_table(part / "part-00000.parquet").column("served_at").drop_null()
        day = dt.date.fromisoformat(part.name.removeprefix("date="))
        assert {t.date() for t in served.to_pylist()} == {day}  # the directory is the UTC date
    assert small_dirty.clusters == small_dirty.out_dir / "clusters_parquet" / "part-00000.parquet"
    assert pq.read_schema(small_dirty.clusters).equals(CLUSTERS_SCHEMA)
    assert small_dirty.end == dt.date(2026, 1, 3)


def test_counts_match_what_was_written(small_dirty: GeneratedData) -> None:
    rows = read_rows(small_dirty)
    assert small_dirty.rows == len(rows)
    assert small_dirty.entries == sum(len(r["results"] or []) for r in rows)
    assert small_dirty.requests == 3 * 2000
    assert small_dirty.requests == len({r["request_id"] for r in rows} - {None})
    assert small_dirty.cluster_rows == pq.read_metadata(small_dirty.clusters).num_rows
    assert {r["surface"] for r in rows} == {"web", "app", "api"}
    assert {r["index_version"] for r in rows} == {"v1", "v2"}


@pytest.mark.parametrize("which", ["small_dirty", "small_clean"])
def test_calibration_at_k10(which: str, request: pytest.FixtureRequest) -> None:
    data: GeneratedData = request.getfixturevalue(which)
    out = reference.daily(read_rows(data), read_clusters(data), [10], 4, data.start, data.end)
    assert [r["queries"] for r in out] == [2000] * 3
    assert all(r["median"] == 6.0 for r in out)
    share = sum(r["share_at_or_below_threshold"] for r in out) / len(out)
    assert 0.12 <= share <= 0.16
    assert all(0.11 <= r["share_at_or_below_threshold"] <= 0.17 for r in out)


def list_stats(rows: list[dict]) -> dict[str, float]:
    """Measured rates of the dirty cases among well-formed rows."""
    good = [r for r in rows if not reference.is_malformed(r)]
    lists = [r["results"] for r in good]
    entries = [e for lst in lists for e in lst]
    copies = Counter((r["request_id"], r["served_at"], repr(r["results"])) for r in good)
    ranks = [[e["rank"] for e in lst if e["rank"] is not None] for lst in lists if lst]
    return {
        "duplicate": sum(1 for n in copies.values() if n > 1) / len(copies),
        "shuffled": sum(1 for rk in ranks if rk != sorted(rk)) / len(lists),
        "gap": sum(
            1
            for lst, rk in zip([x for x in lists if x], ranks, strict=True)
            if rk and max(rk) > len(lst)
        )
        / len(lists),
        "tie": sum(1 for rk in ranks if len(set(rk)) < len(rk)) / len(lists),
        "null_chunk": sum(1 for e in entries if e["chunk_id"] is None) / len(entries),
        "null_rank": sum(1 for e in entries if e["rank"] is None) / len(entries),
        "empty": sum(1 for lst in lists if not lst) / len(lists),
        "malformed": (len(rows) - len(good)) / len(rows),
    }


def test_dirty_rates_within_bands(big_dirty: tuple[GeneratedData, list, list]) -> None:
    data, rows, clusters = big_dirty
    stats = list_stats(rows)
    assert 0.003 <= stats["duplicate"] <= 0.007
    assert 0.03 <= stats["shuffled"] <= 0.07
    assert 0.01 <= stats["gap"] <= 0.03
    assert 0.002 <= stats["tie"] <= 0.008
    assert 0.0005 <= stats["null_chunk"] <= 0.0015
    assert 0.0005 <= stats["null_rank"] <= 0.0015
    assert 0.001 <= stats["empty"] <= 0.003
    assert 0.0 < stats["malformed"] < 0.0005
    kinds = {
        (r["request_id"] is None, r["served_at"] is None, r["results"] is None)
        for r in rows
        if reference.is_malformed(r)
    }
    assert kinds == {(True, False, False), (False, True, False), (False, False, True)}

    # Chunks absent from the table stay under 1% of valid served entries, every day.
    table = reference.cluster_lookup(clusters)
    for day in (data.start, data.end):
        valid = [
            e["chunk_id"]
            for r in rows
            if not reference.is_malformed(r) and r["served_at"].date() == day
            for e in reference.valid_entries_in_rank_order(r["results"])
        ]
        missing = sum(1 for c in valid if c not in table) / len(valid)
        assert 0.002 <= missing < 0.01

    listed = Counter(chunk for chunk, _ in clusters)
    assert sum(1 for n in listed.values() if n > 1) >= 3
    for chunk, n in listed.items():
        if n > 1:
            assert len({cid for c, cid in clusters if c == chunk}) == n  # they differ
    null_listed = {c for c, cid in clusters if cid is None and listed[c] == 1}
    assert null_listed
    served = {e["chunk_id"] for r in rows if r["results"] for e in r["results"]}
    assert served & null_listed  # some served chunks have a null cluster_id


def test_clean_data_has_none_of_the_awkward_cases(small_clean: GeneratedData) -> None:
    rows = read_rows(small_clean)
    clusters = read_clusters(small_clean)
    assert small_clean.rows == small_clean.requests == len(rows)
    assert len({r["request_id"] for r in rows}) == len(rows)
    assert not any(reference.is_malformed(r) for r in rows)
    assert all([e["rank"] for e in r["results"]] == list(range(1, 11)) for r in rows)
    assert all(e["chunk_id"] is not None for r in rows for e in r["results"])
    chunks = [c for c, _ in clusters]
    assert len(set(chunks)) == len(chunks)
    assert all(cid is not None for _, cid in clusters)
    served = {e["chunk_id"] for r in rows for e in r["results"]}
    assert served <= set(chunks)
    assert list_stats(rows) == {
        "duplicate": 0.0,
        "shuffled": 0.0,
        "gap": 0.0,
        "tie": 0.0,
        "null_chunk": 0.0,
        "null_rank": 0.0,
        "empty": 0.0,
        "malformed": 0.0,
    }


def test_realistic_shape(small_clean: GeneratedData) -> None:
    """Many singleton clusters with a long tail, and repeats mostly use another member chunk."""
    clusters = read_clusters(small_clean)
    sizes = Counter(Counter(cid for _, cid in clusters).values())
    singletons = sizes[1] / sum(sizes.values())
    assert 0.5 <= singletons <= 0.8
    assert max(sizes) >= 50
    rows = read_rows(small_clean)
    same_chunk = sum(len(r["results"]) - len({e["chunk_id"] for e in r["results"]}) for r in rows)
    lookup = dict(clusters)
    same_cluster = sum(
        len(r["results"]) - len({lookup[e["chunk_id"]] for e in r["results"]}) for r in rows
    )
    assert 0 < same_chunk < 0.1 * same_cluster


def test_the_demo_plants_one_regression_it_can_judge() -> None:
    """`make demo` (30 days by default) plants a regression in surface=app on its second-to-last
    day, which has 4 same-weekday baseline days: three named clusters flooding app's lists; a
    month too short to judge it plants none."""
    from logmetrics.demo import DEMO_START, demo_regression

    floods = demo_regression(30)
    assert {(f.date, f.segment, f.value) for f in floods} == {
        (dt.date(2026, 10, 29), "surface", "app")
    }
    assert [f.cluster_id for f in floods] == [
        "kb-reset-password",
        "kb-sso-setup-guide",
        "kb-billing-faq",
    ]
    assert (floods[0].date - DEMO_START).days == 28  # 4 weeks of the same weekday before it
    assert demo_regression(22) == []


def test_a_planted_flood_fills_its_share_of_one_segments_lists(
    tmp_path: Path, small_dirty: GeneratedData
) -> None:
    """Issue 26: a flood serves its cluster's copies in slots 2.. of its share of a segment's
    lists that day; every other list, day and cluster row is what it was without it."""
    day = START + dt.timedelta(days=1)
    flood = PlantedFlood(day, "kb-reset-password", 0.5, 4, "surface", "app")
    flooded = generate(tmp_path / "flood", START, 3, 2000, seed=11, floods=[flood])
    before, after = table_content(small_dirty), table_content(flooded)
    assert before[0][1].equals(after[0][1]) and before[2][1].equals(after[2][1])
    copies = flood.chunk_ids()
    clusters = read_clusters(flooded)
    assert clusters[: len(read_clusters(small_dirty))] == read_clusters(small_dirty)
    assert clusters[len(read_clusters(small_dirty)) :] == [(c, flood.cluster_id) for c in copies]
    old, new = before[1][1].to_pylist(), after[1][1].to_pylist()
    hit = 0
    for was, now in zip(old, new, strict=True):
        assert {k: v for k, v in was.items() if k != "results"} == {
            k: v for k, v in now.items() if k != "results"
        }
        chunks = [e["chunk_id"] for e in now["results"] or []]
        if now["surface"] != "app" or chunks[1:5] != copies:
            assert now == was and not set(chunks) & set(copies)
            continue
        hit += 1
        assert [e["rank"] for e in now["results"]] == [e["rank"] for e in was["results"]]
        assert (
            chunks[:1] + chunks[5:]
            == [e["chunk_id"] for e in was["results"]][:1]
            + [e["chunk_id"] for e in was["results"]][5:]
        )
    apps = sum(r["surface"] == "app" and bool(r["results"]) for r in old)
    assert 0.4 * apps < hit < 0.6 * apps
    with pytest.raises(ValueError, match="more than all queries"):
        generate(
            tmp_path / "two", START, 2, 100, seed=1, floods=[flood, PlantedFlood(day, "x", 0.6)]
        )


def _pairs_by_hand(chunks: list[str], key_of: dict[str, str | None]) -> set[tuple[str, str]]:
    """Every pair of `chunks` with one cluster id under `key_of` (None: alone), by brute force."""
    return {
        (a, b)
        for a, b in itertools.combinations(sorted(chunks), 2)
        if key_of.get(a) is not None and key_of.get(a) == key_of.get(b)
    }


def test_the_demo_s_calibration_is_its_tables_pair_precision_and_recall_against_the_truth(
    tmp_path: Path,
) -> None:
    """The demo's calibration row (`inputs.calibration`, published as detector_calibration)
    measures the cluster table it generated against the generator's truth: on a small set, a
    sample as large as the pairs is all of them, so pair precision and recall are exactly those
    counted by hand over every pair of chunks, the truth taken from the clean table of the same
    seed and each table read by the job's rule (reference.cluster_lookup). The dirty table's
    faults (chunks left out, chunks listed twice under another id) cost both. A sample smaller
    than the pairs estimates them within its binomial error."""
    from logmetrics.demo import DEMO_DETECTOR, DEMO_DETECTOR_THRESHOLD, demo_calibration
    from logmetrics.schemas import CALIBRATION

    seed, queries, corpus = 11, 50, 400
    floods = [PlantedFlood(START, "kb-reset-password", 0.3, 4, "surface", "app")]
    dirty = generate(
        tmp_path / "dirty", START, 1, queries, seed, floods=floods, corpus_chunks=corpus
    )
    clean = generate(
        tmp_path / "clean",
        START,
        1,
        queries,
        seed,
        dirty=False,
        floods=floods,
        corpus_chunks=corpus,
    )
    truth = reference.cluster_lookup(read_clusters(clean))
    found = reference.cluster_lookup(read_clusters(dirty))
    chunks = list(truth)
    assert len(chunks) == corpus + 4 and None not in truth.values()
    copies, detected = _pairs_by_hand(chunks, truth), _pairs_by_hand(chunks, found)
    both = copies & detected
    on = dt.date(2026, 10, 1)

    row = demo_calibration(
        dirty.out_dir, queries, floods, 3, on, pairs=10**6, seed=seed, corpus_chunks=corpus
    )
    assert list(row) == CALIBRATION.fieldNames()
    assert row == {
        "cluster_table_version": 3,
        "detector": DEMO_DETECTOR,
        "threshold": DEMO_DETECTOR_THRESHOLD,
        "pair_precision": len(both) / len(detected),
        "pair_recall": len(both) / len(copies),
        "measured_on": "2026-10-01",
        "sample_pairs": len(copies | detected),
    }
    assert 0.9 < row["pair_precision"] < 1 and 0.9 < row["pair_recall"] < 1

    sampled = demo_calibration(
        dirty.out_dir, queries, floods, 3, on, pairs=300, seed=seed, corpus_chunks=corpus
    )
    assert 300 <= sampled["sample_pairs"] <= 600
    for name, exact in (
        ("pair_precision", row["pair_precision"]),
        ("pair_recall", row["pair_recall"]),
    ):
        assert abs(sampled[name] - exact) <= 4 * (exact * (1 - exact) / 300) ** 0.5 + 1 / 300


def test_the_truth_is_the_clean_cluster_table_whatever_the_days(tmp_path: Path) -> None:
    """`true_clusters` is the cluster table `generate` writes without faults, for any number of
    days (the corpus is drawn before the days), flood copies included."""
    floods = [PlantedFlood(START, "kb-billing-faq", 0.2, 3)]
    clean = generate(tmp_path / "clean", START, 2, 300, seed=4, dirty=False, floods=floods)
    assert true_clusters(4, 300, floods).equals(pq.read_table(clean.clusters))
    assert not true_clusters(5, 300, floods).equals(pq.read_table(clean.clusters))
