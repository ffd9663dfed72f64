"""Hostile values and fuzzing: odd ids, huge lists, empty days, far timestamps, malformed rows.

- `test_backfill_survives_hostile_values`: the real job (`logmetrics backfill`, in process) over
  hand-built Parquet logs full of hostile values; every published table equals the reference.
- `test_every_adversarial_row_is_accounted_for`: hypothesis generates malformed and adversarial
  rows; the pipeline's transforms never raise, every row read is used, a duplicate or
  quarantined, and each request's numbers equal the reference's for its kept copy.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StringType, StructField, StructType

import reference
from contract import SERVED_LOGS
from logmetrics.cli import main
from logmetrics.inputs.served_logs import filter_served_between
from logmetrics.quality.facts import day_facts, quarantined_rows
from logmetrics.rules.per_request import requests_by_key
from logmetrics.schemas import CLUSTERS, PARTITION_DATE
from spark_reference import keyed_clusters

pytestmark = [pytest.mark.slow, pytest.mark.reference]

UTC = dt.UTC

# --- hostile strings ------------------------------------------------------------------------

LONG_ID = "L" + "0123456789" * 10_000  # 100,001 characters
HOSTILE = [
    "single'quote",
    'double"quote',
    "back`tick",
    "back\\slash\\",
    "'; DROP TABLE unique_clusters_daily; --",
    "${env:HOME} %s {0} $1",
    "emoji 🤖🧪👩‍👩‍👧",
    "\u05e9\u05dc\u05d5\u05dd RTL \u202eoverride\u202c",
    "e\u0301 combining",  # NFD
    "\u00e9 combining",  # NFC: the same text to a reader, a different id
    "new\nline\ttab\rcr",
    "",
    " ",
    "nul\x00byte",
    "s:singleton-looking",
    "c:cluster-looking",
    LONG_ID,
]


# --- 1. the real job over hostile Parquet logs ------------------------------------------------

START = dt.date(2026, 4, 1)
EMPTY_DAY = dt.date(2026, 4, 2)
END = dt.date(2026, 4, 4)
KS = (1, 5, 20)
THRESHOLD = 3
FAR = [
    dt.datetime(1, 1, 2, 12, tzinfo=UTC),
    dt.datetime(1900, 1, 1, tzinfo=UTC),
    dt.datetime(9999, 12, 30, 23, 59, 59, tzinfo=UTC),
]

ENTRY_TYPE = pa.struct([("rank", pa.int32()), ("chunk_id", pa.string())])
LOGS_SCHEMA = pa.schema(
    [
        ("request_id", pa.string()),
        ("served_at", pa.timestamp("us", tz="UTC")),
        ("results", pa.list_(ENTRY_TYPE)),
        ("note", pa.string()),  # an extra column, carried along
    ]
)


def _entries(*pairs: tuple[int | None, str | None]) -> list[dict[str, Any] | None]:
    return [{"rank": rank, "chunk_id": chunk} for rank, chunk in pairs]


def _hostile_clusters() -> list[tuple[str | None, str | None]]:
    rows: list[tuple[str | None, str | None]] = [
        ("Doc-A", "cluster-upper"),
        ("doc-a", "cluster-lower"),
        ("DOC-A", "cluster-upper"),
    ]
    for i, value in enumerate(HOSTILE):
        rows.append((value, HOSTILE[(i + 3) % len(HOSTILE)]))  # hostile chunk and cluster ids
    rows.append((None, "orphan"))
    rows.append(("plain-1", None))  # listed with a null cluster id: its own singleton
    # The big list's chunks: 3,000 chunks in 40 clusters, a third left out of the table.
    rows += [(f"big-{i}", f"bc-{i % 40}") for i in range(3000) if i % 3]
    return rows


def _hostile_logs() -> dict[dt.date | str, list[dict[str, Any]]]:
    """Rows per date partition (`date=...`); the `EMPTY_DAY` partition does not exist."""
    rng = random.Random(11)
    day1 = dt.datetime.combine(START, dt.time(), tzinfo=UTC)
    day3 = dt.datetime.combine(START + dt.timedelta(days=2), dt.time(), tzinfo=UTC)
    day4 = dt.datetime.combine(END, dt.time(), tzinfo=UTC)
    big = [
        {"rank": rng.randint(1, 12_000), "chunk_id": f"big-{rng.randrange(3000)}"}
        for _ in range(10_000)
    ]
    big[17] = {"rank": None, "chunk_id": "big-1"}
    big[4242] = {"rank": 5, "chunk_id": None}
    first: list[dict[str, Any]] = []
    for i, value in enumerate(HOSTILE):
        first.append(
            {
                "request_id": value,
                "served_at": day1 + dt.timedelta(minutes=i),
                "results": _entries(
                    (1, value),
                    (2, HOSTILE[(i + 1) % len(HOSTILE)]),
                    (2, HOSTILE[(i + 5) % len(HOSTILE)]),
                    (3, "Doc-A"),
                    (4, "doc-a"),
                    (5, "DOC-A"),
                    (6, "doc-A"),  # absent from the table: a singleton of its own
                    (7, value.upper()),
                ),
                "note": value,
            }
        )
    first += [
        {
            "request_id": "case-matters",
            "served_at": day1 + dt.timedelta(hours=3),
            "results": _entries((1, "Doc-A"), (2, "doc-a")),
            "note": None,
        },
        {
            "request_id": "big-list",
            "served_at": day1 + dt.timedelta(hours=4),
            "results": big,
            "note": "10,000 results",
        },
        {
            "request_id": "last-instant",
            "served_at": day1 + dt.timedelta(days=1, microseconds=-1),
            "results": _entries((1, "plain-1"), (1, "plain-2")),
            "note": None,
        },
        {
            "request_id": "empty-list",
            "served_at": day1 + dt.timedelta(hours=5),
            "results": [],
            "note": None,
        },
        # Redelivered copies of a hostile request: counted once, the earliest kept.
        {
            "request_id": HOSTILE[0],
            "served_at": day1 + dt.timedelta(hours=6),
            "results": _entries((1, "doc-a")),
            "note": "later copy",
        },
        # Malformed rows with hostile ids, and an entry-level problem.
        {"request_id": None, "served_at": day1, "results": _entries((1, "x")), "note": "'"},
        {"request_id": HOSTILE[10], "served_at": None, "results": [], "note": '"'},
        {"request_id": LONG_ID + "!", "served_at": day1, "results": None, "note": "\n"},
    ]
    # Far past and far future rows in an in-range partition, some sharing in-range ids.
    for i, when in enumerate(FAR):
        first.append(
            {
                "request_id": f"far-{when.year}",
                "served_at": when,
                "results": _entries((1, "Doc-A")),
                "note": None,
            }
        )
        first.append(
            {
                "request_id": HOSTILE[i],
                "served_at": when,
                "results": _entries((1, "doc-a"), (2, "Doc-A")),
                "note": None,
            }
        )
    third = [
        {
            "request_id": value,  # the same ids two days later: another day, another request
            "served_at": day3 + dt.timedelta(seconds=i),
            "results": _entries((1, value), (2, "Doc-A"), (3, None), (None, "doc-a")),
            "note": None,
        }
        for i, value in enumerate(HOSTILE)
    ]
    third.append({"request_id": "no-time", "served_at": None, "results": None, "note": "all null"})
    fourth = [
        {
            "request_id": f"plain-{i}",
            "served_at": day4 + dt.timedelta(hours=i),
            "results": _entries((1, f"big-{i}"), (2, f"big-{i + 40}"), (3, "Doc-A")),
            "note": None,
        }
        for i in range(5)
    ]
    # A row at the first instant after the range: the next day, not this run's.
    fourth.append(
        {
            "request_id": "after-range",
            "served_at": day4 + dt.timedelta(days=1),
            "results": _entries((1, "Doc-A")),
            "note": None,
        }
    )
    far_partition = [
        {"request_id": f"far-own-{w.year}", "served_at": w, "results": [], "note": None}
        for w in FAR
    ]
    return {
        START: first,
        START + dt.timedelta(days=2): third,
        END: fourth,
        "1900-01-01": far_partition[:2],
        "9999-12-30": far_partition[2:],
    }


def _write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=LOGS_SCHEMA), path)


@pytest.fixture(scope="module")
def hostile_run(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[dict[str, Any]], list[tuple[str | None, str | None]]]:
    root = tmp_path_factory.mktemp("hostile")
    partitions = _hostile_logs()
    rows: list[dict[str, Any]] = []
    for day, day_rows in partitions.items():
        _write_parquet(day_rows, root / "served_logs" / f"date={day}" / "part-0.parquet")
        rows += [{**r, "date": str(day)} for r in day_rows]
    cluster_rows = _hostile_clusters()
    pq.write_table(
        pa.Table.from_pylist(
            [{"chunk_id": c, "cluster_id": k} for c, k in cluster_rows],
            schema=pa.schema([("chunk_id", pa.string()), ("cluster_id", pa.string())]),
        ),
        root / "clusters.parquet",
    )
    warehouse = root / "warehouse"
    config = root / "job.yaml"
    # Days whose only rows are hostile ones (no usable served_at) are days without a row: the
    # hostile values are tested here, not readiness, so such days are computed.
    config.write_text(
        "inputs:\n"
        f"  served_logs: {{path: '{root / 'served_logs'}', allow_empty_days: true}}\n"
        f"  clusters: {{path: '{root / 'clusters.parquet'}', format: parquet}}\n"
        f"output: {{warehouse: '{warehouse}'}}\n"
        f"metrics: {{ks: {list(KS)}, threshold: {THRESHOLD}}}\n"
        "backfill: {days_per_chunk: 2}\n"
        "quality: {on_failure: warn}\n"
        "spark: {master: 'local[1]', driver_memory: 1g}\n"
    )
    argv = ["backfill", "--config", str(config), "--start", str(START), "--end", str(END)]
    assert main(argv) == 0
    return warehouse, rows, cluster_rows


def _table(spark: SparkSession, warehouse: Path, name: str) -> DataFrame:
    return spark.read.format("delta").load(str(warehouse / name))


def _collect(df: DataFrame, keys: list[str], drop: set[str]) -> list[dict[str, Any]]:
    rows = [{k: v for k, v in r.asDict().items() if k not in drop} for r in df.collect()]
    return sorted(rows, key=lambda r: tuple(r[k] for k in keys))


PROVENANCE = {"run_id", "computed_at", "cluster_table_version"}
DAY_COUNTS = {"dq_passed", "rows_read", "duplicate_rows", "quarantined_rows", "quarantined_entries"}


def _read_on(row: Mapping[str, Any], day: dt.date) -> bool:
    """Whether the job reads `row` for `day`: served on it, or undated in its partition."""
    if row["served_at"] is None:
        return row["date"] == str(day)
    return reference.utc_date(row["served_at"]) == day


def test_backfill_survives_hostile_values(
    spark: SparkSession,
    hostile_run: tuple[Path, list[dict[str, Any]], list[tuple[str | None, str | None]]],
) -> None:
    warehouse, rows, cluster_rows = hostile_run
    days = reference.dates_between(START, END)

    by_query = _collect(
        _table(spark, warehouse, "unique_clusters_by_query"),
        ["metric_date", "request_id", "k"],
        PROVENANCE,
    )
    expected = reference.by_query(rows, cluster_rows, KS, START, END)
    got = [{**r, "served_at": r["served_at"].replace(tzinfo=UTC)} for r in by_query]
    assert len(got) == len(expected)
    assert got == expected
    # Ids round-trip byte for byte: every hostile id is a request of the first and third day.
    for day in (START, START + dt.timedelta(days=2)):
        ids = {r["request_id"] for r in by_query if r["metric_date"] == day}
        assert set(HOSTILE) <= ids
        assert {i.encode() for i in HOSTILE} <= {i.encode() for i in ids}
    assert LONG_ID in {r["request_id"] for r in by_query}
    # Case matters: Doc-A and doc-a are two clusters, doc-A is its own (absent from the table).
    case = {r["k"]: r["unique_clusters"] for r in by_query if r["request_id"] == "case-matters"}
    assert case == {1: 1, 5: 2, 20: 2}
    big = [r for r in by_query if r["request_id"] == "big-list"]
    assert {r["results"] for r in big} == {9_998}
    # Nothing from outside the range lands on a day.
    assert all(START <= r["metric_date"] <= END for r in by_query)
    assert not {r["request_id"] for r in by_query} & {
        "after-range",
        *(f"far-{w.year}" for w in FAR),
        *(f"far-own-{w.year}" for w in FAR),
    }

    daily_df = _table(spark, warehouse, "unique_clusters_daily")
    assert daily_df.where("segment != 'all' OR segment_value != 'all'").isEmpty()
    daily = _collect(daily_df, ["metric_date", "k"], PROVENANCE | {"segment", "segment_value"})
    expected_daily = reference.daily(rows, cluster_rows, KS, THRESHOLD, START, END)
    assert [{k: v for k, v in r.items() if k not in DAY_COUNTS} for r in daily] == expected_daily
    empty = [r for r in daily if r["metric_date"] == EMPTY_DAY]
    assert [(r["k"], r["queries"], r["rows_read"]) for r in empty] == [(k, 0, 0) for k in KS]
    for day in days:
        read = [r for r in rows if _read_on(r, day)]
        malformed = [r for r in read if reference.is_malformed(r)]
        queries = len(reference.served_requests(read, day, day))
        day_rows = [r for r in daily if r["metric_date"] == day]
        assert {(r["rows_read"], r["quarantined_rows"], r["duplicate_rows"]) for r in day_rows} == {
            (len(read), len(malformed), len(read) - len(malformed) - queries)
        }, day

    sweep = _collect(
        _table(spark, warehouse, "unique_clusters_k_sweep"),
        ["metric_date", "k"],
        PROVENANCE | {"segment", "segment_value"},
    )
    expected_sweep = reference.k_sweep(rows, cluster_rows, max(KS), START, END)
    assert [{c: r[c] for c in expected_sweep[0]} for r in sweep] == expected_sweep
    cost = _collect(
        _table(spark, warehouse, "redundancy_cost_daily"),
        ["metric_date", "k"],
        PROVENANCE | {"segment", "segment_value"},
    )
    every_k = range(1, max(KS) + 1)  # the default cost: 510 tokens a slot, $3 per million
    expected_cost = reference.redundancy_cost(rows, cluster_rows, every_k, 510, 3.0, START, END)
    assert [{c: r[c] for c in expected_cost[0]} for r in cost] == expected_cost

    # The quarantine: the malformed rows read, and the bad entries of the kept copies.
    quarantine = _table(spark, warehouse, "quarantine").collect()
    assert all(START <= r.metric_date <= END for r in quarantine)
    got_reasons = Counter((r.metric_date, r.reason, r.request_id) for r in quarantine)
    expected_reasons: Counter[tuple[Any, ...]] = Counter()
    for day in days:
        read = [r for r in rows if _read_on(r, day)]
        for r in read:
            if reference.is_malformed(r):
                expected_reasons[(day, _malformed_reason(r), r["request_id"])] += 1
        for row in reference.served_requests(read, day, day).values():
            for entry in row["results"]:
                if entry["chunk_id"] is None:
                    expected_reasons[(day, "null_chunk_id", row["request_id"])] += 1
                elif entry["rank"] is None:
                    expected_reasons[(day, "null_rank", row["request_id"])] += 1
    assert got_reasons == expected_reasons
    for r in quarantine:
        assert json.loads(r.raw).get("request_id") == r.request_id

    # The unknown chunks served most, hostile ids sorted as Spark sorts them (UTF-8 bytes,
    # which is code point order, Python's).
    missing = _collect(
        _table(spark, warehouse, "missing_cluster_chunks"),
        ["metric_date", "rank"],
        PROVENANCE,
    )
    table = reference.cluster_lookup(cluster_rows)
    expected_missing = []
    for day in days:
        serves = Counter(
            entry["chunk_id"]
            for row in reference.served_requests(rows, day, day).values()
            for entry in reference.valid_entries_in_rank_order(row["results"])
            if entry["chunk_id"] not in table
        )
        top = sorted(serves.items(), key=lambda item: (-item[1], item[0]))[:100]
        expected_missing += [
            {"metric_date": day, "rank": i, "chunk_id": chunk, "serves": n}
            for i, (chunk, n) in enumerate(top, start=1)
        ]
    assert missing == expected_missing
    assert "doc-A" in {r["chunk_id"] for r in missing if r["metric_date"] == START}
    runs = _table(spark, warehouse, "job_runs").where("status = 'published'").collect()
    assert sorted(r.metric_date for r in runs) == days


def _malformed_reason(row: Mapping[str, Any]) -> str:
    for column in ("request_id", "served_at", "results"):
        if row[column] is None:
            return f"null_{column}"
    raise AssertionError(row)


# --- 2. fuzzing: malformed and adversarial rows through the pipeline's transforms ------------

F_START, F_END = dt.date(2026, 3, 1), dt.date(2026, 3, 2)
F_DAY = dt.datetime.combine(F_START, dt.time(), tzinfo=UTC)
SHORT_HOSTILE = [h for h in HOSTILE if h is not LONG_ID] + ["M" * 10_000]
REQUEST_IDS = ["r0", "r1", "R0", *SHORT_HOSTILE]
CHUNK_IDS = ["Doc-A", "doc-a", "DOC-A", "ch1", "ch2", "absent", *SHORT_HOSTILE[:12]]
CLUSTER_IDS = ["A", "a", "s:ch1", "c:A", *SHORT_HOSTILE[:8]]
FUZZ_LOGS = StructType(
    [
        *SERVED_LOGS.fields,
        StructField("note", StringType()),  # an extra column, carried along into `raw`
        StructField(PARTITION_DATE, DateType()),  # places rows without a served_at on a day
    ]
)

texts = st.text(max_size=6)


def _weighted(draw: st.DrawFn, common: st.SearchStrategy[Any], *rare: Any) -> Any:
    """Mostly `common`, else one of the `rare` strategies, each about 1 in 10. Hypothesis
    draws small integers first, so the common case is 0 (few examples must still be mostly
    well formed, or nothing reaches the metrics)."""
    choice = draw(st.integers(0, 9))
    return draw(rare[choice - 1] if 1 <= choice <= len(rare) else common)


def _at(seconds: int) -> dt.datetime:
    return F_DAY + dt.timedelta(seconds=seconds)


@st.composite
def fuzz_entry(draw: st.DrawFn) -> dict[str, Any] | None:
    chunk_ids = st.sampled_from(CHUNK_IDS)
    return _weighted(
        draw,
        st.builds(
            lambda rank, chunk: {"rank": rank, "chunk_id": chunk}, st.integers(1, 12), chunk_ids
        ),
        st.none(),  # a null entry in the list
        st.builds(lambda c: {"rank": None, "chunk_id": c}, chunk_ids),
        st.builds(lambda r: {"rank": r, "chunk_id": None}, st.integers(-3, 12)),
        st.builds(  # non-positive and extreme ranks
            lambda r, c: {"rank": r, "chunk_id": c},
            st.sampled_from([-(2**31), -1, 0, 2**31 - 1]),
            chunk_ids,
        ),
        st.builds(lambda c: {"rank": 1, "chunk_id": c}, texts),  # unknown, odd chunk ids
    )


@st.composite
def fuzz_row(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "request_id": _weighted(draw, st.sampled_from(REQUEST_IDS), st.none(), texts),
        "served_at": _weighted(
            draw,
            st.integers(0, 172_799).map(_at),
            st.none(),
            st.sampled_from(FAR),
            st.sampled_from([-1, 0, 86_399, 86_400, 172_799, 172_800]).map(_at),
            st.integers(-7_200, 180_000).map(_at),
        ),
        "results": _weighted(
            draw, st.lists(fuzz_entry(), min_size=1, max_size=10), st.none(), st.just([])
        ),
        "note": draw(st.one_of(st.none(), texts)),
        PARTITION_DATE: draw(
            st.sampled_from([F_START, F_END, F_START - dt.timedelta(days=1), None])
        ),
    }


@st.composite
def fuzz_logs(draw: st.DrawFn) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 16))):
        if rows and draw(st.integers(0, 2)) == 2:  # a redelivery, identical or not
            row = dict(draw(st.sampled_from(rows)))
            change = draw(st.sampled_from(["none", "served_at", "results", "both"]))
            # A copy at another time, within a day of it; not for the calendar's edge times
            # (FAR), which a day's shift would carry out of Python's datetime range.
            if change in ("served_at", "both") and row["served_at"] not in (None, *FAR):
                row["served_at"] += dt.timedelta(seconds=draw(st.integers(-90_000, 90_000)))
            if change in ("results", "both"):
                row["results"] = draw(st.lists(fuzz_entry(), max_size=10))
        else:
            row = draw(fuzz_row())
        rows.append(row)
    return rows


fuzz_clusters = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from(CHUNK_IDS)),
        st.one_of(st.none(), st.sampled_from(CLUSTER_IDS)),
    ),
    max_size=16,
)


def _fuzz_read_on(row: Mapping[str, Any], day: dt.date) -> bool:
    """Whether `filter_served_between` hands `row` to `day`."""
    if row["served_at"] is None:
        return row[PARTITION_DATE] == day
    return reference.utc_date(row["served_at"]) == day


def _request_numbers(
    results: list[Any], table: Mapping[str, str | None], ks: tuple[int, ...]
) -> tuple[Any, ...]:
    """(results, missing_cluster_results, [(k, unique_clusters)], [(pos, rank, chunk_id)]) of
    one copy of a request, from the reference's rules."""
    valid = reference.valid_entries_in_rank_order(results)
    windows = [
        (k, len({reference.cluster_key(e["chunk_id"], table) for e in valid[:k]})) for k in ks
    ]
    invalid = [
        (pos, None if e is None else e["rank"], None if e is None else e["chunk_id"])
        for pos, e in enumerate(results)
        if e is None or e["rank"] is None or e["chunk_id"] is None
    ]
    missing = sum(1 for e in valid if e["chunk_id"] not in table)
    return (len(valid), missing, windows, invalid)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    rows=fuzz_logs(),
    cluster_rows=fuzz_clusters,
    ks=st.lists(st.integers(1, 12), min_size=1, max_size=3, unique=True).map(
        lambda v: tuple(sorted(v))
    ),
)
def test_every_adversarial_row_is_accounted_for(
    spark: SparkSession,
    rows: list[dict[str, Any]],
    cluster_rows: list[tuple[str | None, str | None]],
    ks: tuple[int, ...],
) -> None:
    days = reference.dates_between(F_START, F_END)
    logs_df = spark.createDataFrame(
        [tuple(r[f.name] for f in FUZZ_LOGS.fields) for r in rows], FUZZ_LOGS
    ).transform(filter_served_between, F_START, F_END)
    keys_df, salt = keyed_clusters(spark.createDataFrame(cluster_rows, CLUSTERS))
    requests_df = requests_by_key(logs_df, keys_df, ks, salt).persist()
    try:
        days_df = spark.createDataFrame([(d,) for d in days], "metric_date date")
        facts = {r.metric_date: r.asDict() for r in day_facts(requests_df, days_df).collect()}
        quarantine = quarantined_rows(requests_df).collect()
        served = requests_df.where(~F.col("is_malformed")).collect()
    finally:
        requests_df.unpersist()
        keys_df.unpersist()

    table = reference.cluster_lookup(cluster_rows)
    assert sorted(facts) == days
    assert all(F_START <= r.metric_date <= F_END for r in [*quarantine, *served])
    expected_quarantine: Counter[tuple[Any, ...]] = Counter()
    for day in days:
        read = [r for r in rows if _fuzz_read_on(r, day)]
        malformed = [r for r in read if reference.is_malformed(r)]
        well_formed = [r for r in read if not reference.is_malformed(r)]
        requests = {r["request_id"] for r in well_formed}
        fact = facts[day]
        assert fact["rows_read"] == len(read), day
        assert fact["malformed_rows"] == len(malformed), day
        assert fact["queries"] == len(requests), day
        assert fact["duplicate_rows"] == len(well_formed) - len(requests), day
        assert (
            fact["rows_read"] == fact["queries"] + fact["duplicate_rows"] + fact["malformed_rows"]
        )
        assert fact["duplicate_request_ids"] == 0, day
        for r in malformed:
            expected_quarantine[(day, _malformed_reason(r), r["request_id"], None)] += 1

        got = {r.request_id: r for r in served if r.metric_date == day}
        assert set(got) == requests, day
        for request_id, request in got.items():
            copies = [r for r in well_formed if r["request_id"] == request_id]
            first = min(r["served_at"] for r in copies)
            candidates = [
                _request_numbers(r["results"], table, ks) for r in copies if r["served_at"] == first
            ]
            actual = (
                request.results,
                request.missing_cluster_results,
                [(w.k, w.unique_clusters) for w in request.windows],
                [(e.pos, e.rank, e.chunk_id) for e in request.invalid_entries or []],
            )
            assert actual in candidates, (day, request_id)
            assert request.copies == len(copies)
            for pos, _, chunk_id in actual[3]:
                reason = "null_chunk_id" if chunk_id is None else "null_rank"
                expected_quarantine[(day, reason, request_id, pos)] += 1
        assert fact["valid_entries"] == sum(r.results for r in got.values())
        assert fact["quarantined_entries"] == sum(
            len(r.invalid_entries or []) for r in got.values()
        )

    got_quarantine = Counter(
        (r.metric_date, r.reason, r.request_id, json.loads(r.raw).get("position"))
        for r in quarantine
    )
    assert got_quarantine == expected_quarantine
    for r in quarantine:
        assert json.loads(r.raw).get("request_id") == r.request_id


# --- extra columns with hostile names -------------------------------------------------------


@pytest.mark.parametrize(
    "column",
    [
        "user agent ü'\"",
        "meta.source",  # a dot: not a nested field
        "back`tick",
    ],
)
def test_extra_columns_with_hostile_names_are_carried_along(
    spark: SparkSession, tmp_path: Path, column: str
) -> None:
    """docs/inputs.md: other columns are carried along and ignored, whatever their names (Parquet
    allows dots, backticks and spaces in them). A malformed row keeps them in its raw JSON."""
    day = dt.datetime.combine(START, dt.time(), tzinfo=UTC)
    schema = pa.schema([*LOGS_SCHEMA][:3] + [(column, pa.string())])
    rows = [
        {"request_id": "ok", "served_at": day, "results": _entries((1, "c1")), column: "x"},
        {"request_id": None, "served_at": day, "results": [], column: "y"},
    ]
    logs = tmp_path / "served_logs" / f"date={START}"
    logs.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), logs / "part-0.parquet")
    pq.write_table(
        pa.Table.from_pylist([{"chunk_id": "c1", "cluster_id": "k1"}]), tmp_path / "clusters"
    )
    warehouse = tmp_path / "warehouse"
    config = tmp_path / "job.yaml"
    config.write_text(
        "inputs:\n"
        f"  served_logs: {{path: '{tmp_path / 'served_logs'}'}}\n"
        f"  clusters: {{path: '{tmp_path / 'clusters'}', format: parquet}}\n"
        f"output: {{warehouse: '{warehouse}'}}\n"
        "metrics: {ks: [1]}\n"
        "quality: {on_failure: warn}\n"
        "spark: {master: 'local[1]', driver_memory: 1g}\n"
    )
    argv = ["backfill", "--config", str(config), "--start", str(START), "--end", str(START)]
    assert main(argv) == 0
    by_query = _table(spark, warehouse, "unique_clusters_by_query").collect()
    assert [(r.request_id, r.unique_clusters) for r in by_query] == [("ok", 1)]
    (quarantined,) = _table(spark, warehouse, "quarantine").collect()
    assert quarantined.reason == "null_request_id"
    assert json.loads(quarantined.raw)[column] == "y"
