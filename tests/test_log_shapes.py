"""Logs as they are, against the pure-Python reference: every shape and every mapping of the
served logs (docs/inputs.md, "Logs as they are") gives the numbers the rules give.

- `test_each_shape_and_mapping_equals_the_reference`: hypothesis draws awkward logs (redelivered
  copies, rank gaps, ties and nulls, shuffled lists, empty lists, chunks absent from the
  cluster table), a shape and the data's own names (some of them hostile), writes the logs in
  that shape, and reads them through the reader's own transforms; each request's numbers and
  set-aside entries equal the reference's on the same requests, the shape's rules applied by
  hand here (`as_nested`), and every row stored is accounted for (rows read, duplicate rows,
  quarantined rows: `reference.row_accounting` on the rows as stored).
- The end-to-end runs (the real `logmetrics backfill`, in process) read the same requests in
  the three shapes, from a catalog table by name (nested), JSON lines (ids) and date-partitioned
  Parquet (exploded), each with its own names and a cluster table of its own names: every
  table each publishes equals the reference, and the three publish identical tables but for
  the accounting of the exploded shape's rows, a row per result.
- docs/inputs.md's OpenSearch UBI example runs as written there.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import reference
from doc_blocks import fenced, markdown_rows, section
from logmetrics.cli import main
from logmetrics.inputs.layout import LogShape
from logmetrics.inputs.served_logs import filter_served_between
from logmetrics.inputs.shapes import (
    contract_plan,
    group_result_rows,
    to_contract,
    with_row_order,
)
from logmetrics.rules.cluster_keys import cluster_keys
from logmetrics.rules.per_request import explode_windows, filter_served_requests, requests_by_key
from logmetrics.schemas import CLUSTERS
from test_properties import END, START, clusters, ks, logs

pytestmark = [pytest.mark.slow, pytest.mark.reference]

Entry = tuple[int | None, str | None] | None


# --- the shapes' rules, by hand -------------------------------------------------------------


def as_nested(shape: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests the rules see in logs stored in `shape`, from the rows as that shape stores
    them (`stored`): the reference's input.
    - ids: rank = 1-based position; a null id is an entry without a chunk id.
    - exploded: the rows of one (request_id, served_at) are one copy, its entries in the order
      stored; rows identical in rank and chunk_id count once; a copy whose one row has a null
      chunk_id has no results."""
    if shape == "nested":
        return [_with_entries(r, r["results"]) for r in rows]
    if shape == "ids":
        return [
            _with_entries(
                r, None if r["results"] is None else list(enumerate(r["results"], start=1))
            )
            for r in rows
        ]
    copies: dict[tuple[Any, Any], list[tuple[Any, Any]]] = {}
    for row in rows:
        entries = copies.setdefault((row["request_id"], row["served_at"]), [])
        if (row["rank"], row["chunk_id"]) not in entries:
            entries.append((row["rank"], row["chunk_id"]))
    out = []
    for (request_id, served_at), entries in copies.items():
        if len(entries) == 1 and entries[0][1] is None:
            entries = []
        out.append(_with_entries({"request_id": request_id, "served_at": served_at}, entries))
    return out


def _with_entries(row: Mapping[str, Any], entries: Iterable[Entry] | None) -> dict[str, Any]:
    results = None
    if entries is not None:
        results = [None if e is None else {"rank": e[0], "chunk_id": e[1]} for e in entries]
    return {**row, "results": results}


def stored(shape: str, rows: list[dict[str, Any]], draw: st.DrawFn) -> list[dict[str, Any]]:
    """The nested rows as `shape` stores such requests: ids keep each list's chunk ids in its
    order; exploded writes a row per entry (a null entry as a row of nulls), an empty list as
    no row or one row without a chunk id, a list that is null as no row, and redelivers some
    rows."""
    if shape == "nested":
        return rows
    if shape == "ids":
        return [
            {**r, "results": None if r["results"] is None else [e and e[1] for e in r["results"]]}
            for r in rows
        ]
    out: list[dict[str, Any]] = []
    for row in rows:
        head = {"request_id": row["request_id"], "served_at": row["served_at"]}
        entries = row["results"]
        if entries == [] and draw(st.booleans()):
            entries = [(draw(st.one_of(st.none(), st.integers(1, 3))), None)]
        for entry in entries or []:
            rank, chunk_id = entry if entry is not None else (None, None)
            out.append({**head, "rank": rank, "chunk_id": chunk_id})
            if draw(st.integers(0, 5)) == 0:  # a redelivered row
                out.append({**head, "rank": rank, "chunk_id": chunk_id})
    return out


# --- the data's own names --------------------------------------------------------------------

OWN_NAMES = {
    "request_id": ["request_id", "query_id", "qid", "Query ID"],
    "served_at": ["served_at", "ts", "timestamp", "served.at"],
    "results": ["results", "hits", "query_response_hit_ids", "hit`s"],
    "rank": ["rank", "pos", "position"],
    "chunk_id": ["chunk_id", "doc", "chunk"],
}


@st.composite
def shapes(draw: st.DrawFn) -> LogShape:
    shape = draw(st.sampled_from(["nested", "ids", "exploded"]))
    names = {name: draw(st.sampled_from(own)) for name, own in OWN_NAMES.items()}
    if shape == "ids":
        del names["rank"], names["chunk_id"]
    if shape == "exploded":
        del names["results"]
        if len({names["request_id"], names["served_at"], names["rank"], names["chunk_id"]}) < 4:
            names["chunk_id"] = "chunk_of_result"
    return LogShape(shape, {c: n for c, n in names.items() if n != c or draw(st.booleans())})


def frame(spark: SparkSession, shape: LogShape, rows: list[dict[str, Any]]) -> DataFrame:
    """The stored rows as a DataFrame of the data's own names and types (a `score` field the
    contract does not read rides along in each nested entry)."""
    head = [
        StructField(shape.name("request_id"), StringType()),
        StructField(shape.name("served_at"), TimestampType()),
    ]
    if shape.exploded:
        schema = StructType(
            [
                *head,
                StructField(shape.name("rank"), LongType()),
                StructField(shape.name("chunk_id"), StringType()),
            ]
        )
        data = [(r["request_id"], r["served_at"], r["rank"], r["chunk_id"]) for r in rows]
        return spark.createDataFrame(data, schema)
    element: DataType = StringType()
    if shape.shape == "nested":
        element = StructType(
            [
                StructField("score", DoubleType()),
                StructField(shape.name("chunk_id"), StringType()),
                StructField(shape.name("rank"), LongType()),
            ]
        )
    schema = StructType([*head, StructField(shape.name("results"), ArrayType(element))])
    data = []
    for r in rows:
        results = r["results"]
        if shape.shape == "nested" and results is not None:
            results = [None if e is None else (0.5, e[1], e[0]) for e in results]
        data.append((r["request_id"], r["served_at"], results))
    return spark.createDataFrame(data, schema)


def read_as_contract(raw: DataFrame, shape: LogShape) -> DataFrame:
    """What `inputs.served_logs.read_served_logs` does to the rows it reads."""
    plan = contract_plan({f.name: f.dataType for f in raw.schema.fields}, "served logs", shape)
    logs_df = to_contract(with_row_order(raw) if shape.exploded else raw, plan)
    logs_df = logs_df.transform(filter_served_between, START, END)
    return logs_df.transform(group_result_rows) if shape.exploded else logs_df


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(rows=logs(), cluster_rows=clusters, ks=ks, shape=shapes(), data=st.data())
def test_each_shape_and_mapping_equals_the_reference(
    spark: SparkSession,
    rows: list[dict[str, Any]],
    cluster_rows: list[tuple],
    ks: tuple[int, ...],
    shape: LogShape,
    data: st.DataObject,
) -> None:
    kept = stored(shape.shape, rows, data.draw)
    logs_df = read_as_contract(frame(spark, shape, kept), shape)
    keys_df = cluster_keys(spark.createDataFrame(cluster_rows, CLUSTERS))
    every_df = requests_by_key(logs_df, keys_df, ks).cache()
    requests_df = every_df.transform(filter_served_requests)
    got = sorted(
        (r.asDict() for r in requests_df.transform(explode_windows).collect()),
        key=lambda r: (r["metric_date"], r["request_id"], r["k"]),
    )
    requests = as_nested(shape.shape, kept)
    expected = reference.by_query(requests, cluster_rows, ks, START, END)
    assert [_utc(r) for r in got] == expected

    counts = [c for c in ("rows_read", "kept_rows") if c in every_df.columns]  # exploded only
    per_request = every_df.select(
        "metric_date", "request_id", "is_malformed", "invalid_entries", "copies", *counts
    ).collect()
    every_df.unpersist()
    set_aside = {
        (r.metric_date, r.request_id): len(r.invalid_entries or [])
        for r in per_request
        if not r.is_malformed
    }
    served = reference.served_requests(requests, START, END)
    assert set_aside == {
        key: sum(1 for e in row["results"] if e is None or None in (e["rank"], e["chunk_id"]))
        for key, row in served.items()
    }

    # Every row stored accounted for, by the counts each request carries to `day_facts` (which
    # sums them: tests/quality/test_row_accounting.py): a nested or ids copy is a row; an
    # exploded request says its rows read and its kept copy's distinct rows.
    accounted = {day: [0, 0, 0] for day in reference.dates_between(START, END)}
    for r in per_request:
        read, kept_rows = (r.rows_read, r.kept_rows) if counts else (r.copies, 1)
        day = accounted[r.metric_date]
        day[0] += read
        if r.is_malformed:
            day[2] += read
        else:
            day[1] += read - kept_rows
    assert accounted == {
        day: [n["rows_read"], n["duplicate_rows"], n["quarantined_rows"]]
        for day, n in reference.row_accounting(kept, START, END, shape.shape).items()
    }


def _utc(row: dict[str, Any]) -> dict[str, Any]:
    served_at = row["served_at"]
    return {**row, "served_at": served_at.replace(tzinfo=dt.UTC)}


# --- the same requests in three shapes, end to end ----------------------------------------------

DAY1, DAY2 = dt.date(2026, 11, 2), dt.date(2026, 11, 3)
KS = (3, 5, 10)
CHUNK_POOL = [f"kb-{i}" for i in range(24)]
CLUSTER_ROWS: list[tuple[str | None, str | None]] = [
    *[(f"kb-{i}", f"g{i % 5}") for i in range(16)],
    ("kb-16", None),  # listed without a cluster: a singleton; kb-17..23 are absent
]
LATER_CLUSTERS = [(chunk, "one-cluster") for chunk, _ in CLUSTER_ROWS]  # version 1, not read
NESTED_NAMES = {
    "request_id": "query_id",
    "served_at": "ts",
    "results": "hits",
    "chunk_id": "doc",
    "rank": "pos",
}
IDS_NAMES = {
    "request_id": "query_id",
    "served_at": "timestamp",
    "results": "query_response_hit_ids",
}
EXPLODED_NAMES = {
    "request_id": "qid",
    "served_at": "served",
    "rank": "position",
    "chunk_id": "chunk",
}
CLUSTER_NAMES = {"chunk_id": "id", "cluster_id": "dup_group"}


def _requests(seed: int = 7) -> tuple[list[dict[str, Any]], set[str]]:
    """Two days of served requests as nested rows (`results` as (rank, chunk_id) pairs in
    stored order, with `surface` and the partition `date`), and the ids of the empty requests
    the exploded shape stores as no row at all.

    Day one holds only what every shape can store: ranks 1..n (the nested lists shuffled), a
    chunk twice in a list, entries without a chunk id beside others, empty lists, redelivered
    and conflicting copies, a row without a request id and one without served_at. Day two adds
    what ids cannot store: rank gaps, ties and null ranks."""
    import random

    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    no_row: set[str] = set()
    for day, count in ((DAY1, 60), (DAY2, 40)):
        start = dt.datetime.combine(day, dt.time(6), tzinfo=dt.UTC)
        for i in range(count):
            request_id = f"{day:%d}-q{i}"
            length = rng.choice([0, 1, 2, 3, 5, 8, 10, 12])
            chunks: list[str | None] = [rng.choice(CHUNK_POOL) for _ in range(length)]
            if length >= 2 and rng.random() < 0.2:
                chunks[rng.randrange(length)] = None
            if day == DAY1:
                entries = list(enumerate(chunks, start=1))
                rng.shuffle(entries)
            else:
                entries = []
                for chunk in chunks:
                    rank = rng.choice([None, *range(1, 16)]) if rng.random() < 0.9 else None
                    if (rank, chunk) not in entries:
                        entries.append((rank, chunk))
                if len(entries) == 1 and entries[0][1] is None:
                    entries = []
            row = {
                "request_id": request_id,
                "served_at": start + dt.timedelta(minutes=7 * i),
                "results": entries,
                "surface": rng.choice(["web", "app"]),
                "date": str(day),
            }
            rows.append(row)
            if not entries and day == DAY1 and rng.random() < 0.5:
                no_row.add(request_id)
            elif rng.random() < 0.15:  # redelivered 30 s later
                rows.append({**row, "served_at": row["served_at"] + dt.timedelta(seconds=30)})
            elif entries and rng.random() < 0.1:  # another list under the same id, later
                rows.append(
                    {
                        **row,
                        "served_at": row["served_at"] + dt.timedelta(minutes=1),
                        "results": entries[:-1] or [(1, "kb-0")],
                    }
                )
        rows.append(
            {
                "request_id": None,
                "served_at": start,
                "results": [(1, "kb-1")],
                "surface": "web",
                "date": str(day),
            }
        )
        rows.append(
            {
                "request_id": f"{day:%d}-no-time",
                "served_at": None,
                "results": [(1, "kb-2")],
                "surface": "app",
                "date": str(day),
            }
        )
    return rows, no_row


def _reference_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [_with_entries(r, r["results"]) for r in rows]


def _write_nested_table(spark: SparkSession, name: str, rows: list[dict[str, Any]]) -> None:
    """A Delta table in the catalog, partitioned by `event_date`: query_id, ts, hits of
    {doc, pos, score}, surface."""
    data = [
        (
            r["request_id"],
            r["served_at"],
            [(chunk, rank, 0.25) for rank, chunk in r["results"]],
            r["surface"],
            r["date"],
        )
        for r in rows
    ]
    schema = (
        "query_id string, ts timestamp, hits array<struct<doc: string, pos: int, score: double>>,"
        " surface string, event_date string"
    )
    spark.createDataFrame(data, schema).write.format("delta").partitionBy("event_date").saveAsTable(
        name
    )


def _write_ids(root: Path, rows: list[dict[str, Any]]) -> None:
    """JSON lines of an OpenSearch UBI export, one file per `date=` partition; served_at as
    ISO 8601 text."""
    for row in rows:
        if row["date"] != str(DAY1):
            continue
        folder = root / f"date={row['date']}"
        folder.mkdir(parents=True, exist_ok=True)
        entries = sorted(row["results"])  # ranks 1..n: the ids in rank order
        line = {
            "application": "docs-search",
            "query_id": row["request_id"],
            "user_query": "q",
            "query_response_hit_ids": [chunk for _, chunk in entries],
            "timestamp": None if row["served_at"] is None else row["served_at"].isoformat(),
            "surface": row["surface"],
        }
        with open(folder / "ubi_queries.jsonl", "a") as out:
            out.write(json.dumps(line) + "\n")


def _write_exploded(root: Path, rows: list[dict[str, Any]], no_row: set[str]) -> None:
    """A row per served result, Parquet in `date=` partitions; an empty list as one row without
    a chunk id (or none at all, for `no_row`); every fifth row redelivered."""
    per_day: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        entries = row["results"] or ([] if row["request_id"] in no_row else [(None, None)])
        for n, (rank, chunk) in enumerate(entries):
            out = {
                "qid": row["request_id"],
                "served": row["served_at"],
                "position": rank,
                "chunk": chunk,
                "surface": row["surface"],
            }
            per_day.setdefault(row["date"], []).append(out)
            if n % 5 == 4:
                per_day[row["date"]].append(dict(out))
    schema = pa.schema(
        [
            ("qid", pa.string()),
            ("served", pa.timestamp("us", "UTC")),
            ("position", pa.int32()),
            ("chunk", pa.string()),
            ("surface", pa.string()),
        ]
    )
    for day, day_rows in per_day.items():
        (root / f"date={day}").mkdir(parents=True)
        pq.write_table(
            pa.Table.from_pylist(day_rows, schema), root / f"date={day}" / "part-0.parquet"
        )


def _cluster_frame(spark: SparkSession, rows: list[tuple[str | None, str | None]]) -> DataFrame:
    return spark.createDataFrame(rows, "id string, dup_group string")


def _backfill(config: dict[str, Any], path: Path, end: dt.date) -> int:
    base = {
        "metrics": {"ks": list(KS), "threshold": 3, "segment_by": ["surface"]},
        "quality": {"on_failure": "warn"},
        "backfill": {"keep_cluster_keys": False},
    }
    path.write_text(yaml.safe_dump({**base, **config}))
    return main(["backfill", "--config", str(path), "--start", str(DAY1), "--end", str(end)])


@pytest.fixture(scope="module")
def shape_runs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same requests backfilled from the three shapes: nested (catalog tables by name, the
    cluster table pinned at version 0 of two), ids (JSON lines, day one; the cluster table as
    delta.`path`) and exploded (Parquet; the cluster table's Parquet by path)."""
    root = tmp_path_factory.mktemp("three-shapes")
    rows, no_row = _requests()
    schema = f"shapes_{root.name.replace('-', '_')}"
    spark.sql(f"CREATE SCHEMA {schema}")
    _write_nested_table(spark, f"{schema}.retrieval_log", rows)
    clusters = _cluster_frame(spark, CLUSTER_ROWS)
    clusters.write.format("delta").saveAsTable(f"{schema}.chunk_clusters")
    _cluster_frame(spark, LATER_CLUSTERS).write.format("delta").mode("overwrite").saveAsTable(
        f"{schema}.chunk_clusters"
    )
    clusters.write.format("delta").save(str(root / "clusters-delta"))
    clusters.write.parquet(str(root / "clusters-parquet"))
    _write_ids(root / "ubi", rows)
    _write_exploded(root / "exploded", rows, no_row)
    runs = {
        "nested": {
            "served_logs": {
                "table": f"spark_catalog.{schema}.retrieval_log",
                "columns": NESTED_NAMES,
                "date_partition": "event_date",
            },
            "clusters": {
                "table": f"{schema}.chunk_clusters",
                "version": 0,
                "columns": CLUSTER_NAMES,
            },
        },
        "ids": {
            "served_logs": {
                "path": str(root / "ubi"),
                "format": "json",
                "shape": "ids",
                "columns": IDS_NAMES,
            },
            "clusters": {"table": f"delta.`{root / 'clusters-delta'}`", "columns": CLUSTER_NAMES},
        },
        "exploded": {
            "served_logs": {
                "path": str(root / "exploded"),
                "shape": "exploded",
                "columns": EXPLODED_NAMES,
            },
            "clusters": {
                "path": str(root / "clusters-parquet"),
                "format": "parquet",
                "columns": CLUSTER_NAMES,
            },
        },
    }
    warehouses = {}
    for shape, inputs in runs.items():
        warehouses[shape] = root / f"warehouse-{shape}"
        config = {"inputs": inputs, "output": {"warehouse": str(warehouses[shape])}}
        end = DAY1 if shape == "ids" else DAY2
        assert _backfill(config, root / f"{shape}.yaml", end) == 0, shape
    return {
        "warehouses": warehouses,
        "rows": rows,
        "no_row": no_row,
        "root": root,
        "configs": {s: root / f"{s}.yaml" for s in runs},
    }


def _published(spark: SparkSession, warehouse: Path, table: str) -> list[dict[str, Any]]:
    df = spark.read.format("delta").load(str(warehouse / table))
    # What says which run it was, the raw rows (in each data's own names), and the gates'
    # details of the run's batch (how many days it judged: the ids run has one)
    drop = {"run_id", "computed_at", "checked_at", "quarantined_at", "cluster_table_version"}
    drop |= {"raw", "details"}
    rows = [
        {k: v for k, v in r.asDict(recursive=True).items() if k not in drop} for r in df.collect()
    ]
    return sorted(rows, key=repr)


def _stored_rows(shape: str, runs: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows each shape's logs hold as the fixture wrote them, with their date partition
    (`date`), for `reference.row_accounting`: a row per request in the nested table and the
    JSON lines (day one only); the exploded Parquet's rows, a row per result and repeats
    included, read back by pyarrow."""
    if shape == "nested":
        return runs["rows"]
    if shape == "ids":
        return [r for r in runs["rows"] if r["date"] == str(DAY1)]
    rows = []
    for path in sorted((runs["root"] / "exploded").glob("date=*/*.parquet")):
        for r in pq.read_table(path).to_pylist():
            rows.append(
                {
                    "request_id": r["qid"],
                    "served_at": r["served"],
                    "rank": r["position"],
                    "chunk_id": r["chunk"],
                    "date": path.parent.name.removeprefix("date="),
                }
            )
    return rows


def _row_counts(daily: list[dict[str, Any]]) -> dict[dt.date, set[tuple[int, int, int]]]:
    """Per day, the (rows_read, duplicate_rows, quarantined_rows) its daily rows publish."""
    counts: dict[dt.date, set[tuple[int, int, int]]] = {}
    for r in daily:
        row = (r["rows_read"], r["duplicate_rows"], r["quarantined_rows"])
        counts.setdefault(r["metric_date"], set()).add(row)
    return counts


def _expected_row_counts(
    shape: str, runs: dict[str, Any], start: dt.date, end: dt.date
) -> dict[dt.date, set[tuple[int, int, int]]]:
    accounted = reference.row_accounting(_stored_rows(shape, runs), start, end, shape)
    return {
        day: {(n["rows_read"], n["duplicate_rows"], n["quarantined_rows"])}
        for day, n in accounted.items()
    }


def _reference_input(shape: str, runs: dict[str, Any]) -> list[dict[str, Any]]:
    rows = _reference_rows(runs["rows"])
    if shape == "exploded":
        rows = [r for r in rows if r["request_id"] not in runs["no_row"]]
    return rows


@pytest.mark.parametrize("shape", ["nested", "ids", "exploded"])
def test_every_shape_publishes_the_reference_numbers(
    spark: SparkSession, shape_runs: dict[str, Any], shape: str
) -> None:
    end = DAY1 if shape == "ids" else DAY2
    rows = _reference_input(shape, shape_runs)
    warehouse = shape_runs["warehouses"][shape]
    by_query = [
        {k: v for k, v in r.items() if k != "surface"}
        for r in _published(spark, warehouse, "unique_clusters_by_query")
    ]
    expected = reference.by_query(rows, CLUSTER_ROWS, KS, DAY1, end)
    assert sorted(map(_utc, by_query), key=repr) == sorted(expected, key=repr)
    daily = _published(spark, warehouse, "unique_clusters_daily")
    every_query = [
        {k: v for k, v in r.items() if k in expected_daily_keys()}
        for r in daily
        if r["segment"] == "all"
    ]
    expected_daily = reference.daily(rows, CLUSTER_ROWS, KS, 3, DAY1, end)
    assert sorted(every_query, key=repr) == sorted(expected_daily, key=repr)
    # Every row stored accounted for: a request's row (nested, ids), a result's (exploded).
    assert _row_counts(daily) == _expected_row_counts(shape, shape_runs, DAY1, end)
    sweep = [
        {k: v for k, v in r.items() if k not in {"segment", "segment_value"}}
        for r in _published(spark, warehouse, "unique_clusters_k_sweep")
        if r["segment"] == "all"
    ]
    assert sorted(sweep, key=repr) == sorted(
        reference.k_sweep(rows, CLUSTER_ROWS, max(KS), DAY1, end), key=repr
    )


def expected_daily_keys() -> set[str]:
    row = reference.daily([], CLUSTER_ROWS, KS, 3, DAY1, DAY1)[0]
    return set(row)


TABLES = (
    "unique_clusters_by_query",
    "unique_clusters_daily",
    "unique_clusters_k_sweep",
    "redundancy_cost_daily",
    "unique_clusters_crowding",
    "unique_clusters_alerts",
    "data_quality",
    "quarantine",
    "missing_cluster_chunks",
)


@pytest.mark.parametrize("table", TABLES)
def test_the_three_shapes_publish_identical_tables(
    spark: SparkSession, shape_runs: dict[str, Any], table: str
) -> None:
    """Day one, which every shape stores: nested and ids alike; day two (rank gaps and ties):
    nested and exploded alike, but for the rows they count: a row per result in the exploded
    shape (repeated rows included) is what its `rows_read` and `duplicate_rows`, and its
    malformed rate (quarantined rows / rows read), count. The exploded shape lacks only the
    requests it stores no row of: its by-query rows are nested's without them."""
    published = {
        shape: _published(spark, warehouse, table)
        for shape, warehouse in shape_runs["warehouses"].items()
    }

    def on(shape: str, day: dt.date) -> list[dict[str, Any]]:
        # Day two's volume gate looks back on day one, where exploded lacks its no-row requests.
        return [
            r
            for r in published[shape]
            if r["metric_date"] == day and not (day == DAY2 and r.get("check") == "volume")
        ]

    def but_row_counts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        counted = [
            {
                k: v
                for k, v in r.items()
                if k not in {"rows_read", "duplicate_rows"}
                and not (k == "observed_value" and r.get("check") == "malformed_rate")
            }
            for r in rows
        ]
        return sorted(counted, key=repr)

    assert on("nested", DAY1) and on("nested", DAY1) == on("ids", DAY1)
    assert on("nested", DAY2) and but_row_counts(on("nested", DAY2)) == but_row_counts(
        on("exploded", DAY2)
    )
    (exploded,) = _expected_row_counts("exploded", shape_runs, DAY2, DAY2)[DAY2]
    (nested,) = _expected_row_counts("nested", shape_runs, DAY2, DAY2)[DAY2]
    assert exploded[0] > nested[0] and exploded[1] > nested[1] and exploded[2] == nested[2]
    if table == "unique_clusters_daily":
        assert _row_counts(on("exploded", DAY2)) == {DAY2: {exploded}}
        assert _row_counts(on("nested", DAY2)) == {DAY2: {nested}}
    if table == "data_quality":
        rates = {
            s: [r["observed_value"] for r in on(s, DAY2) if r["check"] == "malformed_rate"]
            for s in ("nested", "exploded")
        }
        assert rates == {"nested": [nested[2] / nested[0]], "exploded": [exploded[2] / exploded[0]]}
    if table == "unique_clusters_by_query":
        kept = [r for r in on("nested", DAY1) if r["request_id"] not in shape_runs["no_row"]]
        assert kept != on("nested", DAY1) and kept == on("exploded", DAY1)


def test_a_cluster_table_by_name_is_read_at_its_pinned_version(
    spark: SparkSession, shape_runs: dict[str, Any]
) -> None:
    """The nested run pinned version 0 of a table whose latest is 1: 0 is read and recorded;
    the delta.`path` run recorded its latest, the Parquet one none."""
    versions = {
        shape: {
            r.cluster_table_version
            for r in spark.read.format("delta").load(str(w / "unique_clusters_daily")).collect()
        }
        for shape, w in shape_runs["warehouses"].items()
    }
    assert versions == {"nested": {0}, "ids": {0}, "exploded": {None}}


def test_exploded_parquet_keeps_the_answers_without_spark(shape_runs: dict[str, Any]) -> None:
    """The exploded logs' own `served` column places every file by its footer, and the days
    just published are answered done from the footers and the ledger, without Spark."""
    from logmetrics.config import load_config
    from logmetrics.flows.backfill import answer_without_spark
    from logmetrics.inputs.footers import footer_days

    config = load_config([shape_runs["configs"]["exploded"]])
    footers = footer_days(config.inputs.logs(), DAY1, DAY2)
    assert footers is not None and footers.placed and not footers.unplaced
    summary = answer_without_spark(config, DAY1, DAY2, "a-rerun", scanned=[])
    assert summary is not None and not summary.not_ready


# --- docs/inputs.md's OpenSearch UBI example, as written there ---------------------------------

INPUTS_DOC = Path(__file__).resolve().parents[1] / "docs" / "inputs.md"


def _ubi_section() -> str:
    return section(INPUTS_DOC.read_text(), "Worked example: an OpenSearch UBI export")


def test_the_ubi_example_runs_as_written(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export's lines, the detector's table and the config as docs/inputs.md shows them,
    the command as it gives it: the published rows are the doc's table, and the reference's."""
    ubi = _ubi_section()
    export = tmp_path / "data" / "ubi" / "ubi_queries" / "export.jsonl"
    export.parent.mkdir(parents=True)
    export.write_text(fenced(ubi, "jsonl"))
    clusters = [(chunk, group or None) for chunk, group in markdown_rows(ubi, "| id | dup_group |")]
    _cluster_frame(spark, clusters).write.format("delta").save(str(tmp_path / "data/ubi/clusters"))
    (tmp_path / "ubi.yaml").write_text(fenced(ubi, "yaml"))
    # The suite's JVM started elsewhere: the config's relative paths, anchored here, in a layer
    # over the doc's file (as tests/test_readme.py does for the shipped config).
    written = yaml.safe_load(fenced(ubi, "yaml"))
    inputs = {name: {"path": str(tmp_path / s["path"])} for name, s in written["inputs"].items()}
    anchored = {
        "inputs": inputs,
        "output": {"warehouse": str(tmp_path / written["output"]["warehouse"])},
    }
    (tmp_path / "anchored.yaml").write_text(yaml.safe_dump(anchored))
    command = re.search(r"`(logmetrics backfill --config ubi\.yaml [^`]+)`", ubi)
    assert command is not None
    monkeypatch.chdir(tmp_path)
    argv = command.group(1).split()[1:] + ["--config", "anchored.yaml"]
    assert main(argv) == 0

    by_query = spark.read.format("delta").load(
        str(tmp_path / "warehouse-ubi/unique_clusters_by_query")
    )
    got = sorted((r.request_id, r.k, r.unique_clusters) for r in by_query.collect())
    shown = sorted(
        (request_id, int(k), int(n))
        for request_id, k, n in markdown_rows(ubi, "| request_id | k | unique_clusters |")
    )
    assert got == shown
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    requests = [
        {
            "request_id": line["query_id"],
            "served_at": dt.datetime.fromisoformat(line["timestamp"]),
            "results": [
                {"rank": i, "chunk_id": chunk}
                for i, chunk in enumerate(line["query_response_hit_ids"], start=1)
            ],
        }
        for line in lines
    ]
    day = dt.date(2026, 11, 2)
    expected = reference.by_query(requests, clusters, written["metrics"]["ks"], day, day)
    assert shown == sorted((r["request_id"], r["k"], r["unique_clusters"]) for r in expected)


def test_the_databricks_example_is_a_valid_config() -> None:
    """docs/inputs.md's Unity Catalog example loads as a config: tables by name in other
    schemas, their own column names."""
    from logmetrics.config import Config

    databricks = INPUTS_DOC.read_text().split("### On Databricks: Unity Catalog tables", 1)[1]
    config = Config.model_validate(yaml.safe_load(fenced(databricks, "yaml")))
    logs = config.inputs.logs()
    assert (logs.table, logs.by_catalog, logs.columns.results) == (
        "main.serving.retrieval_log",
        True,
        "hits",
    )
    assert config.inputs.clusters.columns.cluster_id == "dup_group"
