"""Traces end to end (docs/inputs.md, "Traces"): whole backfills of spans the real SDKs made,
every published table against the pure-Python reference and against the same retrievals kept
as the contract; a marker planted in every text of every span found nowhere in the warehouse,
the quarantine or the logs; docs/inputs.md's worked OTLP example as written.

- MLflow's spans as a table by name (Delta in the session's catalog, as MLflow keeps them in
  Unity Catalog: a map of its JSON-encoded values), segmented by the span's name, a malformed
  retrieval span (its outputs not a list) among them;
- OpenInference's spans as OTLP/JSON lines in date partitions, one line that does not parse
  (quarantined);
- the MLflow run's retrievals written in the contract's own shape (nested Parquet): the two
  runs publish identical tables (but what says which run wrote them, and the quarantine's raw
  rows, whose names differ).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import reference
import traces_reference
import traces_sdk
from doc_blocks import fenced, markdown_rows, section
from logmetrics.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.reference]

START = dt.datetime(2026, 11, 30, 23, 0, tzinfo=dt.UTC)  # 90 requests a minute apart: two days
FIRST, LAST = START.date(), START.date() + dt.timedelta(days=1)
KS = (3, 5)
THRESHOLD = 2
MARKER = "MARKER-9c41-users-own-words"
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


def _clusters() -> list[tuple[str | None, str | None]]:
    chunks = [f"chunk-{i:02d}" for i in range(40)]
    return [(c, f"g{i % 7}") for i, c in enumerate(chunks) if i % 5]


def _malformed_span(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A retrieval span whose outputs are text, not a list: a malformed request (null_results),
    an exception event and an error status beside it (both with users' words)."""
    retrieval = next(
        r for r in rows if json.loads(r["attributes"]["mlflow.spanType"]) == "RETRIEVER"
    )
    attributes = {**retrieval["attributes"], "mlflow.spanOutputs": json.dumps(f"{MARKER} answer")}
    event = {
        "time_unix_nano": retrieval["start_time_unix_nano"],
        "name": "exception",
        "attributes": {"exception.message": f"{MARKER} in an event"},
        "dropped_attributes_count": 0,
    }
    return {
        **retrieval,
        "span_id": "00000000000000ff",
        "attributes": attributes,
        "events": [event],
        "status": {"message": f"{MARKER} in a status", "code": "STATUS_CODE_ERROR"},
    }


def _contract_rows(requests: list[dict[str, Any]]) -> pa.Table:
    """The retrievals as the contract stores them (nested), a column `name` for the segment."""
    return pa.Table.from_pylist(
        [
            {
                "request_id": r["request_id"],
                "served_at": r["served_at"],
                "results": r["results"],
                "name": "retrieve",
            }
            for r in requests
        ],
        schema=pa.schema(
            [
                ("request_id", pa.string()),
                ("served_at", pa.timestamp("us", "UTC")),
                ("results", pa.list_(pa.struct([("rank", pa.int64()), ("chunk_id", pa.string())]))),
                ("name", pa.string()),
            ]
        ),
    )


def _backfill(root: Path, name: str, served_logs: dict[str, Any], segment_by: list[str]) -> int:
    config = {
        "inputs": {
            "served_logs": served_logs,
            "clusters": {"path": str(root / "clusters"), "format": "parquet"},
        },
        "output": {"warehouse": str(root / f"warehouse-{name}")},
        "metrics": {"ks": list(KS), "threshold": THRESHOLD, "segment_by": segment_by},
        "quality": {"on_failure": "warn"},
        "backfill": {"keep_cluster_keys": False},
        "spark": {"log_dir": str(root / f"logs-{name}")},
    }
    (root / f"{name}.yaml").write_text(yaml.safe_dump(config))
    argv = ["backfill", "--config", str(root / f"{name}.yaml")]
    return main([*argv, "--start", str(FIRST), "--end", str(LAST)])


@pytest.fixture(scope="module")
def runs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("traces")
    clusters = _clusters()
    spark.createDataFrame(clusters, "chunk_id string, cluster_id string").write.parquet(
        str(root / "clusters")
    )
    mlflow = traces_sdk.mlflow_traces(
        traces_sdk.sample_requests(90, START, seed=11), redeliver=[5, 50], marker=MARKER
    )
    rows = [*mlflow.rows(), _malformed_span(mlflow.rows())]
    schema = f"traces_{root.name.replace('-', '_')}"
    spark.sql(f"CREATE SCHEMA {schema}")
    table = f"spark_catalog.{schema}.mlflow_experiment_trace_otel_spans"
    spark.createDataFrame(rows, traces_sdk.SPANS_DDL).write.format("delta").saveAsTable(table)
    mlflow_requests = traces_reference.requests_from_spans(rows, "mlflow")

    openinference = traces_sdk.openinference_traces(
        traces_sdk.sample_requests(90, START, seed=12), redeliver=[7], marker=MARKER
    )
    lines = openinference.otlp_lines()
    otel = root / "otel"
    for line in lines:  # each export in its first span's day's partition, as a shipper files it
        first = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        day = dt.date(1970, 1, 1) + dt.timedelta(
            days=int(first["startTimeUnixNano"]) // 86_400 // 10**9
        )
        folder = otel / f"date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "traces.jsonl", "a") as out:
            out.write(line + "\n")
    with open(otel / f"date={FIRST}" / "traces.jsonl", "a") as out:
        out.write(f'{{"resourceSpans": [{{"{MARKER}": \n')  # a line cut short: quarantined
    openinference_requests = traces_reference.requests_from_otlp_lines(lines, "openinference")

    contract = root / "contract"
    contract.mkdir()
    pq.write_table(_contract_rows(mlflow_requests), contract / "part-0.parquet")

    statuses = {
        "mlflow": _backfill(root, "mlflow", {"table": table, "shape": "spans"}, ["name"]),
        "openinference": _backfill(
            root,
            "openinference",
            {
                "path": str(otel),
                "format": "otlp",
                "shape": "spans",
                "on_corrupt": "quarantine",
                "spans": {"convention": "openinference"},
            },
            ["service.name"],
        ),
        "contract": _backfill(root, "contract", {"path": str(contract)}, ["name"]),
    }
    return {
        "root": root,
        "statuses": statuses,
        "clusters": clusters,
        "requests": {"mlflow": mlflow_requests, "openinference": openinference_requests},
    }


def _published(spark: SparkSession, root: Path, run: str, table: str) -> list[dict[str, Any]]:
    df = spark.read.format("delta").load(str(root / f"warehouse-{run}" / table))
    drop = {"run_id", "computed_at", "checked_at", "quarantined_at", "raw", "details"}
    drop.add("cluster_table_version")  # Parquet: none
    rows = [
        {k: v for k, v in r.asDict(recursive=True).items() if k not in drop} for r in df.collect()
    ]
    return sorted(rows, key=repr)


def test_every_run_finished(runs: dict[str, Any]) -> None:
    assert runs["statuses"] == {"mlflow": 0, "openinference": 0, "contract": 0}


@pytest.mark.parametrize("run", ["mlflow", "openinference"])
def test_spans_publish_the_reference_numbers(
    spark: SparkSession, runs: dict[str, Any], run: str
) -> None:
    root, clusters, requests = runs["root"], runs["clusters"], runs["requests"][run]
    by_query = [
        {k: v for k, v in r.items() if k not in {"name", "service.name"}}
        for r in _published(spark, root, run, "unique_clusters_by_query")
    ]
    expected = reference.by_query(requests, clusters, KS, FIRST, LAST)
    assert sorted(({**r, "served_at": r["served_at"].replace(tzinfo=dt.UTC)} for r in by_query),
                  key=repr) == sorted(expected, key=repr)  # fmt: skip
    daily = [
        r for r in _published(spark, root, run, "unique_clusters_daily") if r["segment"] == "all"
    ]
    expected_daily = reference.daily(requests, clusters, KS, THRESHOLD, FIRST, LAST)
    keys = set(expected_daily[0])
    assert sorted(({k: v for k, v in r.items() if k in keys} for r in daily), key=repr) == sorted(
        expected_daily, key=repr
    )
    accounting = reference.row_accounting(requests, FIRST, LAST)
    for row in daily:
        counted = accounting[row["metric_date"]]
        assert (row["rows_read"], row["duplicate_rows"], row["quarantined_rows"]) == (
            counted["rows_read"],
            counted["duplicate_rows"],
            counted["quarantined_rows"],
        )
    sweep = [
        {k: v for k, v in r.items() if k not in {"segment", "segment_value"}}
        for r in _published(spark, root, run, "unique_clusters_k_sweep")
        if r["segment"] == "all"
    ]
    assert sorted(sweep, key=repr) == sorted(
        reference.k_sweep(requests, clusters, max(KS), FIRST, LAST), key=repr
    )


@pytest.mark.parametrize("table", TABLES)
def test_spans_and_the_contract_publish_identical_tables(
    spark: SparkSession, runs: dict[str, Any], table: str
) -> None:
    """The MLflow spans and the same retrievals in the contract's shape: the same rows, the
    malformed span's quarantine row and the redeliveries' duplicate rows included."""
    root = runs["root"]
    spans, contract = (_published(spark, root, run, table) for run in ("mlflow", "contract"))
    assert spans and spans == contract


def test_no_text_of_a_span_reaches_the_warehouse_or_the_logs(
    spark: SparkSession, runs: dict[str, Any]
) -> None:
    """The marker is in every prompt, question, document content and answer of both runs'
    spans, in a malformed span's outputs and in a line that does not parse: no table's rows,
    no Delta log and no log file holds it. The quarantine keeps the spans' ids and reasons."""
    root = runs["root"]
    for run in ("mlflow", "openinference"):
        for table in TABLES:
            df = spark.read.format("delta").load(str(root / f"warehouse-{run}" / table))
            rows = df.select(F.to_json(F.struct("*")).alias("row")).collect()
            assert not [r.row for r in rows if MARKER in r.row], (run, table)
        for path in (root / f"warehouse-{run}").rglob("*.json"):  # the Delta logs
            assert MARKER not in path.read_text(errors="replace"), path
        for path in (root / f"logs-{run}").rglob("*"):
            if path.is_file():
                assert MARKER not in path.read_text(errors="replace"), path
    quarantine = spark.read.format("delta").load(str(root / "warehouse-mlflow" / "quarantine"))
    malformed = [r for r in quarantine.collect() if r.reason == "null_results"]
    assert [json.loads(r.raw)["request_id"] for r in malformed] == ["00000000000000ff"]
    corrupt = spark.read.format("delta").load(str(root / "warehouse-openinference" / "quarantine"))
    lines = [json.loads(r.raw) for r in corrupt.collect() if r.reason == "corrupt_line"]
    assert lines and all(
        re.fullmatch(r"sha256 [0-9a-f]{16}, \d+ characters", e["line"]) for e in lines
    )


# --- docs/inputs.md's worked example, as written -----------------------------------------------

INPUTS_DOC = Path(__file__).resolve().parents[1] / "docs" / "inputs.md"


def _section() -> str:
    return section(INPUTS_DOC.read_text(), "An OpenTelemetry Collector's files")


def test_the_otlp_example_runs_as_written(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export's lines, the detector's table, the config and the command as docs/inputs.md
    gives them: the published rows are the doc's table and the reference's; the retry is one
    duplicate row."""
    example = _section()
    export = tmp_path / "data" / "otel" / "traces.jsonl"
    export.parent.mkdir(parents=True)
    export.write_text(fenced(example, "jsonl"))
    clusters = [tuple(row) for row in markdown_rows(example, "| chunk_id | cluster_id |")]
    spark.createDataFrame(clusters, "chunk_id string, cluster_id string").write.format(
        "delta"
    ).save(str(tmp_path / "data" / "clusters"))
    written = yaml.safe_load(fenced(example, "yaml", 1))
    anchored = {
        "inputs": {n: {"path": str(tmp_path / s["path"])} for n, s in written["inputs"].items()},
        "output": {"warehouse": str(tmp_path / written["output"]["warehouse"])},
    }
    (tmp_path / "traces.yaml").write_text(fenced(example, "yaml", 1))
    (tmp_path / "anchored.yaml").write_text(yaml.safe_dump(anchored))
    command = re.search(r"`(logmetrics backfill --config traces\.yaml [^`]+)`", example)
    assert command is not None
    monkeypatch.chdir(tmp_path)
    assert main([*command.group(1).split()[1:], "--config", "anchored.yaml"]) == 0

    warehouse = tmp_path / written["output"]["warehouse"]
    by_query = spark.read.format("delta").load(str(warehouse / "unique_clusters_by_query"))
    got = sorted((r.request_id, r.k, r.unique_clusters) for r in by_query.collect())
    shown = sorted(
        (request_id, int(k), int(n))
        for request_id, k, n in markdown_rows(example, "| request_id | k | unique_clusters |")
    )
    assert got == shown
    requests = traces_reference.requests_from_otlp_lines(
        export.read_text().splitlines(), "openinference"
    )
    day = dt.date(2026, 11, 2)
    expected = reference.by_query(requests, clusters, written["metrics"]["ks"], day, day)
    assert shown == sorted((r["request_id"], r["k"], r["unique_clusters"]) for r in expected)
    daily = spark.read.format("delta").load(str(warehouse / "unique_clusters_daily"))
    counts = {(r.rows_read, r.duplicate_rows) for r in daily.where("segment = 'all'").collect()}
    assert counts == {(3, 1)}
