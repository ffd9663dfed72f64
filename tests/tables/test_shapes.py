"""Logs as they are (`inputs.shapes`): the three shapes and a team's own names read into the
contract, and each bad input a one-line error naming the data's own column, before anything is
computed. The shapes' numbers against the reference: tests/test_log_shapes.py."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from logmetrics.cli import main
from logmetrics.config import ServedLogsInput
from logmetrics.errors import InputError
from logmetrics.inputs.layout import LogShape
from logmetrics.inputs.served_logs import read_served_logs
from logmetrics.inputs.shapes import contract_plan

DAY = dt.date(2026, 11, 2)
AT = dt.datetime(2026, 11, 2, 9, 14, tzinfo=dt.UTC)
HITS = pa.list_(pa.struct([("doc", pa.string()), ("pos", pa.int32()), ("score", pa.float64())]))
NESTED = {"request_id": "query_id", "served_at": "ts", "results": "hits"}
NESTED_FIELDS = {**NESTED, "chunk_id": "doc", "rank": "pos"}
UBI = {"request_id": "query_id", "served_at": "timestamp", "results": "query_response_hit_ids"}
EXPLODED = {"request_id": "qid", "served_at": "served", "rank": "position", "chunk_id": "chunk"}


def _results(spark: SparkSession, source: ServedLogsInput) -> dict[str, list[tuple[Any, ...]]]:
    """request_id -> its results as (rank, chunk_id) pairs, in the order read."""
    df = read_served_logs(spark, source, DAY, DAY)
    return {
        r.request_id: [(e["rank"], e["chunk_id"]) for e in r.results]
        for r in df.select("request_id", "results").collect()
    }


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One team's logs in each shape, and a cluster table of their own names."""
    root = tmp_path_factory.mktemp("shapes")
    nested = [
        {
            "query_id": "q1",
            "ts": AT,
            "hits": [
                {"doc": "b", "pos": 2, "score": 0.5},
                {"doc": "a", "pos": 1, "score": 0.9},
            ],
        },
        {"query_id": "q2", "ts": AT, "hits": []},
    ]
    (root / "nested").mkdir()
    pq.write_table(
        pa.Table.from_pylist(
            nested,
            schema=pa.schema(
                [("query_id", pa.string()), ("ts", pa.timestamp("us", "UTC")), ("hits", HITS)]
            ),
        ),
        root / "nested" / "part-0.parquet",
    )
    (root / "ids").mkdir()
    ubi = [
        {
            "query_id": "q1",
            "timestamp": "2026-11-02T09:14:00Z",
            "query_response_hit_ids": ["a", None, 7],
        },
        {"query_id": "q2", "timestamp": "2026-11-02T09:15:00.250Z", "query_response_hit_ids": []},
    ]
    (root / "ids" / "ubi.jsonl").write_text("".join(json.dumps(line) + "\n" for line in ubi))
    rows = [
        ("q1", 2, "b"),
        ("q1", 1, "a"),
        ("q1", 1, "a"),  # redelivered: counts once
        ("q1", 1, "t"),  # a tie of rank 1: after 'a', in the order stored
        ("q2", None, None),  # a request with no results
        ("q3", 1, "c"),
        ("q3", 2, None),  # an entry without a chunk id, beside another
    ]
    table = pa.table(
        {
            "qid": [r[0] for r in rows],
            "served": pa.array([AT] * len(rows), pa.timestamp("us", "UTC")),
            "position": pa.array([r[1] for r in rows], pa.int16()),
            "chunk": [r[2] for r in rows],
            "surface": ["web", "app", "web", "web", "app", "web", "web"],
        }
    )
    (root / "exploded" / f"date={DAY}").mkdir(parents=True)
    pq.write_table(table, root / "exploded" / f"date={DAY}" / "part-0.parquet")
    clusters = pa.table({"id": ["a", "b"], "dup_group": ["g", "g"]})
    pq.write_table(clusters, root / "clusters.parquet")
    return root


def test_nested_logs_read_in_their_own_names(spark: SparkSession, logs: Path) -> None:
    source = ServedLogsInput(path=str(logs / "nested"), columns=NESTED_FIELDS)
    assert _results(spark, source) == {"q1": [(2, "b"), (1, "a")], "q2": []}


def test_ids_rank_by_position_and_keep_an_entry_without_a_chunk_id(
    spark: SparkSession, logs: Path
) -> None:
    """rank = 1-based position; a null id is an entry without a chunk id (set aside later, as
    in the nested shape); an integer id is read as its text."""
    source = ServedLogsInput(path=str(logs / "ids"), format="json", shape="ids", columns=UBI)
    assert _results(spark, source) == {"q1": [(1, "a"), (2, None), (3, "7")], "q2": []}


def test_exploded_rows_become_one_copy_per_request_and_time(
    spark: SparkSession, logs: Path
) -> None:
    """A redelivered row counts once; a tie keeps the stored order; a copy whose one row has a
    null chunk_id is an empty list; a null chunk_id beside other rows is an entry; a segment
    column takes its smallest value among the copy's rows."""
    source = ServedLogsInput(path=str(logs / "exploded"), shape="exploded", columns=EXPLODED)
    assert _results(spark, source) == {
        "q1": [(2, "b"), (1, "a"), (1, "t")],
        "q2": [],
        "q3": [(1, "c"), (2, None)],
    }
    df = read_served_logs(spark, source, DAY, DAY, segment_by=("surface",))
    surfaces = {r.request_id: r.surface for r in df.collect()}
    assert surfaces == {"q1": "app", "q2": "app", "q3": "web"}


def test_a_field_named_like_the_contract_but_not_mapped_to_it_is_left_aside() -> None:
    """Entries whose own `chunk_id` means something else, and `doc` holds the chunk: the
    mapped field is read, the other renamed out of the way."""
    entry = pa.struct([("chunk_id", pa.int64()), ("doc", pa.string()), ("pos", pa.int64())])
    from pyspark.sql.pandas.types import from_arrow_type

    fields = {
        "query_id": from_arrow_type(pa.string()),
        "ts": from_arrow_type(pa.timestamp("us", "UTC")),
        "hits": from_arrow_type(pa.list_(entry)),
    }
    plan = contract_plan(fields, "served logs at x", LogShape("nested", NESTED_FIELDS))
    assert plan.nested["results"].elementType.names == ["rank", "chunk_id"]
    assert plan.nested["results"].elementType["chunk_id"].dataType.simpleString() == "string"


# --- bad inputs: one line, exit 1, before anything is computed -----------------------------


def _config(tmp: Path, logs: Path, served: dict[str, Any], clusters: dict[str, Any]) -> Path:
    config = tmp / "job.yaml"
    config.write_text(
        json.dumps(
            {
                "inputs": {
                    "served_logs": served,
                    "clusters": {
                        "path": str(logs / "clusters.parquet"),
                        "format": "parquet",
                        **clusters,
                    },
                },
                "output": {"warehouse": str(tmp / "warehouse")},
                "quality": {"on_failure": "warn"},
            }
        )
    )
    return config


BAD_INPUTS = {
    "a mapped column the data lacks": (
        {"path": "exploded", "shape": "exploded", "columns": {**EXPLODED, "request_id": "qids"}},
        {"columns": {"chunk_id": "id", "cluster_id": "dup_group"}},
        "columns.request_id: no column 'qids' in the served logs; did you mean 'qid'?",
    ),
    "a mapped field the entries lack": (
        {"path": "nested", "columns": {**NESTED_FIELDS, "rank": "poss"}},
        {"columns": {"chunk_id": "id", "cluster_id": "dup_group"}},
        "columns.rank: no field 'poss' in the entries of 'hits' in the served logs; "
        "did you mean 'pos'?",
    ),
    "a mapped column the cluster table lacks": (
        {"path": "nested", "columns": NESTED_FIELDS},
        {"columns": {"chunk_id": "ids", "cluster_id": "dup_group"}},
        "columns.chunk_id: no column 'ids' in the cluster table; did you mean 'id'?",
    ),
    "ids on a list of entries": (
        {"path": "nested", "shape": "ids", "columns": NESTED},
        {"columns": {"chunk_id": "id", "cluster_id": "dup_group"}},
        "column 'hits' is array<struct<doc:string,pos:int,score:double>>, which "
        "`shape: nested` reads",
    ),
    "nested on a list of ids": (
        {"path": "ids", "format": "json", "columns": UBI},
        {"columns": {"chunk_id": "id", "cluster_id": "dup_group"}},
        "column 'query_response_hit_ids' holds chunk ids ('a'), a list which `shape: ids` "
        "reads (inputs.served_logs.shape is 'nested')",
    ),
    "exploded without a rank column": (
        {"path": "nested", "shape": "exploded", "columns": NESTED},
        {"columns": {"chunk_id": "id", "cluster_id": "dup_group"}},
        "required column 'rank' is missing (found: hits, query_id, ts); column 'hits' is "
        "array<struct<doc:string,pos:int,score:double>>, which `shape: nested` reads",
    ),
    "a logs table the catalog cannot resolve": (
        {"table": "nowhere.retrieval_log", "columns": NESTED_FIELDS},
        {"columns": {"chunk_id": "id", "cluster_id": "dup_group"}},
        "served logs table nowhere.retrieval_log: the catalog has no table 'nowhere.retrieval_log'",
    ),
    "a cluster table the catalog cannot resolve": (
        {"path": "nested", "columns": NESTED_FIELDS},
        {"table": "nowhere.clusters", "path": None},
        "cluster table table nowhere.clusters: the catalog has no table 'nowhere.clusters'",
    ),
}


@pytest.mark.parametrize(
    ("served", "clusters", "message"), BAD_INPUTS.values(), ids=list(BAD_INPUTS)
)
def test_a_bad_input_is_one_line_naming_the_data_s_own_column(
    logs: Path,
    tmp_path: Path,
    served: dict[str, Any],
    clusters: dict[str, Any],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if "path" in served:
        served = {**served, "path": str(logs / served["path"])}
    config = _config(tmp_path, logs, served, clusters)
    argv = ["backfill", "--config", str(config), "--start", str(DAY), "--end", str(DAY)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("logmetrics: error:")]
    assert len(errors) == 1 and message in errors[0], err
    assert not any("Traceback" in line or "\tat " in line for line in err)
    published = tmp_path / "warehouse"
    assert not published.exists() or not any(
        p.name != "job_runs" for p in published.iterdir() if p.is_dir()
    )


def test_a_json_mapping_names_what_the_lines_hold(logs: Path) -> None:
    """JSON lines carry no schema: a mapped name none of the first lines holds is named."""
    from logmetrics.inputs.json_lines import check_json_names

    lines = [json.loads(line) for line in (logs / "ids" / "ubi.jsonl").read_text().splitlines()]
    shape = LogShape("ids", {**UBI, "results": "query_response_hits"})
    with pytest.raises(
        InputError,
        match=r"columns.results: no column 'query_response_hits' in "
        r"the served logs; did you mean 'query_response_hit_ids'\?",
    ):
        check_json_names(lines, "served logs at x", shape)
    check_json_names(lines, "served logs at x", LogShape("ids", UBI))  # the right names pass
