"""Every input row accounted for, in every shape (`quality.facts.day_facts`, the quarantine),
on small logs worked by hand and read as `inputs.served_logs.read_served_logs` reads them.

A row is a row of the logs as stored: a request's row in the nested and ids shapes, a result's
row in the exploded shape. Per day, rows_read = kept rows + duplicate_rows + quarantined rows
(`malformed_rows`), where the kept rows are the rows of the copies kept: one row each in the
nested and ids shapes (kept rows = queries), its distinct rows in the exploded shape. Each
case below is a day of its own, so that each day's counts are the case's.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from logmetrics.inputs.layout import LogShape
from logmetrics.inputs.served_logs import filter_served_between
from logmetrics.inputs.shapes import contract_plan, group_result_rows, to_contract, with_row_order
from logmetrics.quality.facts import DAY_FACT_COLUMNS, day_facts, quarantined_rows
from logmetrics.rules.cluster_keys import cluster_keys
from logmetrics.rules.per_request import requests_by_key
from logmetrics.schemas import CLUSTERS, PARTITION_DATE

DAYS = [dt.date(2026, 11, 1) + dt.timedelta(days=i) for i in range(9)]
REPEATED, REDELIVERED, CONFLICT, MALFORMED, EMPTY, NULL_ROW, SET_ASIDE, SPLIT, NO_ROWS = DAYS
RAW = {  # the logs as stored (served_at as text: one that does not parse is malformed)
    "nested": "results array<struct<rank:int, chunk_id:string>>",
    "ids": "results array<string>",
    "exploded": "rank int, chunk_id string",
}
CLUSTER_ROWS = [("a", "g"), ("b", "g"), ("c", "h")]
BAD_TIME = "yesterday-ish"


def _at(day: dt.date, minute: int = 0) -> str:
    return f"{day}T09:{minute:02d}:00Z"


def _accounting(
    spark: SparkSession, shape: str, rows: list[tuple[Any, ...]]
) -> tuple[dict[dt.date, dict[str, int]], list[tuple[Any, ...]]]:
    """Each day's facts, and the quarantine's rows as (metric_date, reason, request_id, raw),
    of `rows` (request_id, served_at, the shape's own columns..., date partition) stored in
    `shape`."""
    schema = f"request_id string, served_at string, {RAW[shape]}, date string"
    raw = spark.createDataFrame(rows, schema)
    log_shape = LogShape(shape)
    plan = contract_plan({f.name: f.dataType for f in raw.schema.fields}, "served logs", log_shape)
    logs_df = (
        to_contract(with_row_order(raw) if log_shape.exploded else raw, plan)
        .withColumn(PARTITION_DATE, F.to_date("date"))
        .transform(filter_served_between, DAYS[0], DAYS[-1])
    )
    if log_shape.exploded:
        logs_df = logs_df.transform(group_result_rows)
    keys_df = cluster_keys(spark.createDataFrame(CLUSTER_ROWS, CLUSTERS))
    requests_df = requests_by_key(logs_df, keys_df, (3,)).persist()
    try:
        days_df = spark.createDataFrame([(d,) for d in DAYS], "metric_date date")
        facts = day_facts(requests_df, days_df).collect()
        quarantine = quarantined_rows(requests_df).collect()
    finally:
        requests_df.unpersist()
    return (
        {r.metric_date: {c: r[c] for c in DAY_FACT_COLUMNS} for r in facts},
        sorted(
            ((r.metric_date, r.reason, r.request_id, json.loads(r.raw)) for r in quarantine),
            key=repr,
        ),
    )


def _facts(**counts: int) -> dict[str, int]:
    return {c: counts.get(c, 0) for c in DAY_FACT_COLUMNS}


def _accounted_for(facts: dict[dt.date, dict[str, int]], kept_rows: dict[dt.date, int]) -> None:
    """rows_read = kept rows + duplicate_rows + malformed_rows, on every day."""
    for day, fact in facts.items():
        assert fact["rows_read"] == (
            kept_rows.get(day, 0) + fact["duplicate_rows"] + fact["malformed_rows"]
        ), day


def test_exploded_rows_are_each_accounted_for(spark: SparkSession) -> None:
    """A result's row is a row: each repeat of a kept copy's row, and every row of another
    copy, is a duplicate row; each malformed row is a quarantine row of its own."""

    def row(request_id: str | None, served_at: str | None, rank: Any, chunk_id: Any, day: Any):
        return (request_id, served_at, rank, chunk_id, str(day))

    three = [(1, "a"), (2, "b"), (3, "c")]
    rows = [
        # a request's three rows, each stored twice: 3 kept, 3 duplicate rows
        *[row("q1", _at(REPEATED), r, c, REPEATED) for _ in range(2) for r, c in three],
        # redelivered five minutes later: the later copy's 2 rows are duplicates
        *[row("q2", _at(REDELIVERED, m), r, c, REDELIVERED) for m in (0, 5) for r, c in three[:2]],
        # served again with another list (a conflict): the later copy's row is a duplicate
        row("q3", _at(CONFLICT), 1, "a", CONFLICT),
        row("q3", _at(CONFLICT), 2, "b", CONFLICT),
        row("q3", _at(CONFLICT, 1), 1, "c", CONFLICT),
        # two rows of a copy whose served_at does not parse, two of a copy without a request
        # id: four quarantine rows
        row("q4", BAD_TIME, 1, "a", MALFORMED),
        row("q4", BAD_TIME, 2, "b", MALFORMED),
        row(None, _at(MALFORMED), 1, "a", MALFORMED),
        row(None, _at(MALFORMED), 2, "b", MALFORMED),
        # requests with no results, each stored as one row without a chunk id (q6's twice)
        row("q5", _at(EMPTY), None, None, EMPTY),
        row("q6", _at(EMPTY, 1), 1, None, EMPTY),
        row("q6", _at(EMPTY, 1), 1, None, EMPTY),
        # a row of nulls, in its day's date partition
        row(None, None, None, None, NULL_ROW),
        # an entry without a chunk id beside a valid one, stored twice: set aside once
        row("q7", _at(SET_ASIDE), 1, "a", SET_ASIDE),
        row("q7", _at(SET_ASIDE), 2, None, SET_ASIDE),
        row("q7", _at(SET_ASIDE), 2, None, SET_ASIDE),
        # one copy, its second row in the next day's date partition and its served_at spelled
        # otherwise: still one copy of two rows (its day is its served_at's)
        row("q8", _at(SPLIT), 1, "a", SPLIT),
        row("q8", _json_time(_at(SPLIT)), 2, "b", NO_ROWS),
    ]
    facts, quarantine = _accounting(spark, "exploded", rows)
    assert facts == {
        REPEATED: _facts(rows_read=6, duplicate_rows=3, queries=1, valid_entries=3),
        REDELIVERED: _facts(rows_read=4, duplicate_rows=2, queries=1, valid_entries=2),
        CONFLICT: _facts(
            rows_read=3, duplicate_rows=1, conflicting_requests=1, queries=1, valid_entries=2
        ),
        MALFORMED: _facts(rows_read=4, malformed_rows=4),
        EMPTY: _facts(rows_read=3, duplicate_rows=1, queries=2),
        NULL_ROW: _facts(rows_read=1, malformed_rows=1),
        SET_ASIDE: _facts(
            rows_read=3, duplicate_rows=1, queries=1, valid_entries=1, quarantined_entries=1
        ),
        SPLIT: _facts(rows_read=2, queries=1, valid_entries=2),
        NO_ROWS: _facts(),
    }
    kept = {REPEATED: 3, REDELIVERED: 2, CONFLICT: 2, EMPTY: 2, SET_ASIDE: 2, SPLIT: 2}
    _accounted_for(facts, kept)
    assert quarantine == sorted(
        [
            (MALFORMED, "invalid_served_at", "q4", _raw("q4", None, BAD_TIME, 1, "a")),
            (MALFORMED, "invalid_served_at", "q4", _raw("q4", None, BAD_TIME, 2, "b")),
            (MALFORMED, "null_request_id", None, _raw(None, *[_at(MALFORMED)] * 2, 1, "a")),
            (MALFORMED, "null_request_id", None, _raw(None, *[_at(MALFORMED)] * 2, 2, "b")),
            (NULL_ROW, "null_request_id", None, {"results": [{}]}),
            (
                SET_ASIDE,
                "null_chunk_id",
                "q7",
                {"request_id": "q7", "served_at": _json_time(_at(SET_ASIDE)), "position": 1}
                | {"rank": 2},
            ),
        ],
        key=repr,
    )


def _raw(
    request_id: str | None, served_at: str | None, text: str, rank: int, chunk_id: str
) -> dict[str, Any]:
    """A malformed exploded row as the quarantine keeps it: the row in the contract's names,
    its one entry as its results (Spark's JSON leaves out what is null)."""
    row = {"request_id": request_id, "served_at": served_at and _json_time(served_at)}
    row |= {"_served_at_text": text, "results": [{"rank": rank, "chunk_id": chunk_id}]}
    return {k: v for k, v in row.items() if v is not None}


def _json_time(served_at: str) -> str:
    return served_at.replace("Z", ".000Z")


@pytest.mark.parametrize("shape", ["nested", "ids"])
def test_a_request_s_row_is_a_row(spark: SparkSession, shape: str) -> None:
    """The same cases stored a row per request: a repeated row, another copy and a conflict
    are a duplicate row each; each malformed row is a quarantine row."""

    def results(*chunks: str | None) -> list[Any]:
        if shape == "ids":
            return list(chunks)
        return [(rank, chunk) for rank, chunk in enumerate(chunks, start=1)]

    def row(request_id: str | None, served_at: str | None, chunks: Any, day: dt.date):
        return (request_id, served_at, None if chunks is None else results(*chunks), str(day))

    rows = [
        row("q1", _at(REPEATED), "abc", REPEATED),
        row("q1", _at(REPEATED), "abc", REPEATED),  # the same row twice
        row("q2", _at(REDELIVERED), "ab", REDELIVERED),
        row("q2", _at(REDELIVERED, 5), "ab", REDELIVERED),  # five minutes later
        row("q3", _at(CONFLICT), "ab", CONFLICT),
        row("q3", _at(CONFLICT, 1), "c", CONFLICT),  # another list
        row("q4", BAD_TIME, "ab", MALFORMED),
        row("q4", BAD_TIME, "ab", MALFORMED),
        row(None, _at(MALFORMED), "a", MALFORMED),
        row(None, _at(MALFORMED), "b", MALFORMED),
        row("q5", _at(EMPTY), "", EMPTY),  # no results
        row("q6", _at(EMPTY, 1), "", EMPTY),
        row("q6", _at(EMPTY, 1), "", EMPTY),
        (None, None, None, str(NULL_ROW)),
        row("q7", _at(SET_ASIDE), ["a", None], SET_ASIDE),
        row("q7", _at(SET_ASIDE, 1), ["a", None], SET_ASIDE),  # redelivered
        row("q8", _at(SPLIT), "ab", SPLIT),
        row("q8", _json_time(_at(SPLIT)), "ab", NO_ROWS),  # the same instant: another copy
    ]
    facts, quarantine = _accounting(spark, shape, rows)
    assert facts == {
        REPEATED: _facts(rows_read=2, duplicate_rows=1, queries=1, valid_entries=3),
        REDELIVERED: _facts(rows_read=2, duplicate_rows=1, queries=1, valid_entries=2),
        CONFLICT: _facts(
            rows_read=2, duplicate_rows=1, conflicting_requests=1, queries=1, valid_entries=2
        ),
        MALFORMED: _facts(rows_read=4, malformed_rows=4),
        EMPTY: _facts(rows_read=3, duplicate_rows=1, queries=2),
        NULL_ROW: _facts(rows_read=1, malformed_rows=1),
        SET_ASIDE: _facts(
            rows_read=2, duplicate_rows=1, queries=1, valid_entries=1, quarantined_entries=1
        ),
        SPLIT: _facts(rows_read=2, duplicate_rows=1, queries=1, valid_entries=2),
        NO_ROWS: _facts(),
    }
    _accounted_for(facts, {day: fact["queries"] for day, fact in facts.items()})
    assert [q[:3] for q in quarantine] == sorted(
        [
            (MALFORMED, "invalid_served_at", "q4"),
            (MALFORMED, "invalid_served_at", "q4"),
            (MALFORMED, "null_request_id", None),
            (MALFORMED, "null_request_id", None),
            (NULL_ROW, "null_request_id", None),
            (SET_ASIDE, "null_chunk_id", "q7"),
        ],
        key=repr,
    )


@pytest.mark.parametrize("shape", ["nested", "ids", "exploded"])
def test_no_rows_no_counts(spark: SparkSession, shape: str) -> None:
    facts, quarantine = _accounting(spark, shape, [])
    assert facts == {day: _facts() for day in DAYS}
    assert quarantine == []
