"""Traces read as served requests (`shape: spans`, `format: otlp`; docs/inputs.md, "Traces"),
against the pure-Python reading of what is stored (tests/traces_reference.py) and the rules
(tests/reference.py): spans made by the real SDKs (tests/traces_sdk.py: MLflow's tracing SDK,
the OpenTelemetry SDK with OpenInference's conventions), stored every way a team keeps them, read
through `inputs.served_logs.read_served_logs` in the suite's session.

- `test_every_stored_form_reads_as_the_reference`: per convention and storage (a spans table in
  Parquet or Delta with a map of MLflow's JSON-encoded values or plain ones, JSON lines with the
  attributes as an object or as text, a VARIANT, Phoenix's list of documents, OTLP/JSON lines as
  the SDK's encoder and as MLflow's own encoding send them), each request's unique clusters per
  k and the entries set aside equal the reference's; agent, chain, tool, reranker and LLM spans
  are no requests; a redelivered trace is a copy (the reference counts it so).
- The bad inputs: a chunk-id path no document holds, the other convention's spans, a file that
  is not OTLP/JSON: each one line, exit 1, nothing published.
- `ready` answers for spans from the files: Parquet footers (the start's INT64 nanoseconds) and
  OTLP exports, the same days the narrow pass (Spark) finds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from pyspark.sql import DataFrame, SparkSession

import reference
import traces_reference
import traces_sdk
from logmetrics.cli import main
from logmetrics.config import ServedLogsInput
from logmetrics.rules.cluster_keys import cluster_keys
from logmetrics.rules.per_request import explode_windows, filter_served_requests, requests_by_key
from logmetrics.schemas import CLUSTERS

pytestmark = pytest.mark.slow

START = dt.datetime(2026, 11, 30, 23, 20, tzinfo=dt.UTC)  # 60 requests a minute apart: two days
FIRST, LAST = START.date(), START.date() + dt.timedelta(days=1)
KS = (2, 5)
MARKER = "MARKER-7f3a-private"


@pytest.fixture(scope="module")
def traces() -> dict[str, traces_sdk.Traces]:
    """The same 60 requests (a document without a chunk id, empty lists, repeats) as MLflow and
    as OpenInference traces, two of them delivered twice, a marker in every text."""
    made = {}
    for convention, chunk_id in (("mlflow", "id"), ("openinference", "id")):
        requests = traces_sdk.sample_requests(60, START, chunk_id=chunk_id)
        make = (
            traces_sdk.mlflow_traces if convention == "mlflow" else traces_sdk.openinference_traces
        )
        made[convention] = make(requests, redeliver=[3, 40], marker=MARKER)
    return made


def _clusters(traces: traces_sdk.Traces) -> list[tuple[str | None, str | None]]:
    """A cluster table over the chunks (every fourth absent, one without a cluster id)."""
    chunks = sorted({f"chunk-{i:02d}" for i in range(40)})
    rows: list[tuple[str | None, str | None]] = [
        (c, f"g{i % 6}") for i, c in enumerate(chunks) if i % 4
    ]
    return [*rows, ("chunk-00", None)]


# (convention, how the spans are stored)
FORMS = [
    ("mlflow", "parquet-map"),
    ("mlflow", "delta-map-decoded"),
    ("mlflow", "json-object"),
    ("mlflow", "json-text"),
    ("mlflow", "variant"),
    ("mlflow", "otlp"),
    ("mlflow", "otlp-mlflow-encoding"),
    ("openinference", "parquet-map"),
    ("openinference", "parquet-documents-list"),
    ("openinference", "otlp"),
]


def _stored(
    spark: SparkSession, traces: traces_sdk.Traces, form: str, root: Path
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The spans written as `form` under `root`: the served_logs config that reads them, and
    the requests the reference reads from what was written."""
    convention = traces.convention
    settings = {"shape": "spans", "spans": {"convention": convention}}
    if not form.startswith(("delta", "variant")):
        root.mkdir(parents=True)
    if form.startswith("otlp"):
        lines = traces.otlp_lines("mlflow" if form.endswith("mlflow-encoding") else "sdk")
        (root / "export.jsonl").write_text("\n".join(lines) + "\n")
        config = {"path": str(root), "format": "otlp", **settings}
        return config, traces_reference.requests_from_otlp_lines(lines, convention)
    encoding = "mlflow" if form == "delta-map-decoded" else "sdk"
    documents = "list" if form == "parquet-documents-list" else "flattened"
    rows = traces.rows(encoding, documents)
    if form.startswith("json"):
        text = traces_sdk.spans_json_lines(rows, "text" if form == "json-text" else "object")
        (root / "spans.jsonl").write_text("\n".join(text) + "\n")
        config = {"path": str(root), "format": "json", **settings}
    elif form == "variant":  # MLflow's v2 tables hold the attributes as a VARIANT
        df = spark.createDataFrame(rows, traces_sdk.SPANS_DDL)
        df = df.selectExpr("*", "parse_json(to_json(attributes)) AS attrs").drop("attributes")
        df.withColumnRenamed("attrs", "attributes").write.format("delta").save(str(root))
        config = {"path": str(root), "format": "delta", **settings}
    elif form.startswith("delta"):
        spark.createDataFrame(rows, traces_sdk.SPANS_DDL).write.format("delta").save(str(root))
        config = {"path": str(root), "format": "delta", **settings}
    else:
        pq.write_table(traces_sdk.spans_table(rows), root / "spans.parquet")
        config = {"path": str(root), **settings}
    return config, traces_reference.requests_from_spans(rows, convention)


def _requests_df(spark: SparkSession, config: dict[str, Any], clusters: list[Any]) -> DataFrame:
    from logmetrics.inputs.served_logs import read_served_logs

    source = ServedLogsInput.model_validate(config)
    logs_df = read_served_logs(spark, source, FIRST, LAST)
    keys_df = cluster_keys(spark.createDataFrame(clusters, CLUSTERS))
    return requests_by_key(logs_df, keys_df, KS)


def _utc(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "served_at": row["served_at"].replace(tzinfo=dt.UTC)}


@pytest.mark.parametrize(("convention", "form"), FORMS, ids=[f"{c}-{f}" for c, f in FORMS])
def test_every_stored_form_reads_as_the_reference(
    spark: SparkSession,
    traces: dict[str, traces_sdk.Traces],
    tmp_path: Path,
    convention: str,
    form: str,
) -> None:
    made = traces[convention]
    clusters = _clusters(made)
    config, requests = _stored(spark, made, form, tmp_path / "spans")
    # The reference reads what was stored: one request per retrieval span delivered.
    assert len(requests) == 60 + 2
    assert {r["request_id"] for r in requests} == set(made.retrieval_span_ids)
    every_df = _requests_df(spark, config, clusters).cache()
    got = sorted(
        (r.asDict() for r in every_df.transform(filter_served_requests)
         .transform(explode_windows).collect()),
        key=lambda r: (r["metric_date"], r["request_id"], r["k"]),
    )  # fmt: skip
    assert [_utc(r) for r in got] == reference.by_query(requests, clusters, KS, FIRST, LAST)
    per_request = every_df.select("request_id", "copies", "invalid_entries").collect()
    every_df.unpersist()
    served = reference.served_requests(requests, FIRST, LAST)
    set_aside = {r.request_id: len(r.invalid_entries or []) for r in per_request}
    assert set_aside == {
        request_id: sum(1 for e in row["results"] if e["chunk_id"] is None)
        for (_, request_id), row in served.items()
    }
    assert sorted(r.copies for r in per_request if r.copies > 1) == [2, 2]  # the redeliveries


# --- bad inputs ---------------------------------------------------------------------------------


@pytest.fixture
def backfill(
    spark: SparkSession,
    traces: dict[str, traces_sdk.Traces],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Any]:
    """`logmetrics backfill` of MLflow spans (a Parquet spans table) with config changes: its
    exit status, its stderr lines, and whether it published anything."""

    def run(
        served_logs: dict[str, Any], clusters: list[Any] | None = None
    ) -> tuple[int, list[str], bool]:
        made = traces["mlflow"]
        clusters_path = tmp_path / "clusters.parquet"
        if not clusters_path.exists():
            rows = clusters or _clusters(made)
            spark.createDataFrame(rows, "chunk_id string, cluster_id string").write.parquet(
                str(clusters_path)
            )
        logs = tmp_path / "spans"
        if not logs.exists():
            logs.mkdir()
            pq.write_table(traces_sdk.spans_table(made.rows()), logs / "spans.parquet")
        config = {
            "inputs": {
                "served_logs": {"path": str(logs), "shape": "spans", **served_logs},
                "clusters": {"path": str(clusters_path), "format": "parquet"},
            },
            "output": {"warehouse": str(tmp_path / "warehouse")},
            "quality": {"on_failure": "warn"},
        }
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
        capsys.readouterr()
        status = main(
            ["backfill", "--config", str(tmp_path / "job.yaml"), "--start", str(FIRST),
             "--end", str(LAST)]
        )  # fmt: skip
        err = capsys.readouterr().err.splitlines()
        return status, err, (tmp_path / "warehouse").exists()

    yield run


def test_a_chunk_id_path_no_document_holds_is_one_line_naming_the_nearest(backfill: Any) -> None:
    status, err, published = backfill({"spans": {"chunk_id": "metadata.doc_urx"}})
    assert (status, published) == (1, False)
    assert err == [
        "logmetrics: error: spans.chunk_id: no field 'metadata.doc_urx' in the retrieval spans' "
        "documents; did you mean 'metadata.doc_uri'?"
    ]


def test_the_other_conventions_spans_are_named(backfill: Any) -> None:
    status, err, published = backfill({"spans": {"convention": "openinference"}})
    assert (status, published) == (1, False)
    assert len(err) == 1 and err[0].startswith("logmetrics: error: served logs at ")
    assert "no retrieval span of the openinference convention" in err[0]
    assert err[0].endswith(
        "but mlflow retrieval spans (mlflow.spanType RETRIEVER) are there: set "
        "inputs.served_logs.spans.convention: mlflow"
    )


def test_a_file_that_is_not_otlp_is_named_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "otel"
    logs.mkdir()
    (logs / "a.jsonl").write_text('{"resourceSpans": []}\n')
    (logs / "b.jsonl").write_text('{"query_id": "q1", "timestamp": "2026-11-30T10:00:00Z"}\n')
    pq.write_table(traces_sdk.spans_table([]), tmp_path / "clusters.parquet")
    config = {
        "inputs": {
            "served_logs": {"path": str(logs), "format": "otlp", "shape": "spans"},
            "clusters": {"path": str(tmp_path / "clusters.parquet"), "format": "parquet"},
        },
        "output": {"warehouse": str(tmp_path / "warehouse")},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    argv = ["--config", str(tmp_path / "job.yaml")]
    for command in (["ready", *argv, "--date", str(FIRST)], ["run", *argv, "--date", str(FIRST)]):
        assert main(command) == 1
        assert capsys.readouterr().err.splitlines() == [
            f"logmetrics: error: served logs at {logs}: file {logs / 'b.jsonl'} is not OTLP/JSON: "
            'each line must be an ExportTraceServiceRequest ({"resourceSpans": [...]}), as an '
            "OpenTelemetry Collector's file exporter writes it"
        ]
    assert not (tmp_path / "warehouse").exists()


# --- the files' answers -------------------------------------------------------------------------


def test_spans_files_place_their_days_as_the_narrow_pass_does(
    spark: SparkSession, traces: dict[str, traces_sdk.Traces], tmp_path: Path
) -> None:
    """A Parquet spans table's footers (the start's INT64 nanoseconds) and an OTLP export's start
    times (read with pyarrow) put the same files on the same days as Spark's narrow pass."""
    from logmetrics.config import Config
    from logmetrics.inputs import narrow_pass as inputs_flow
    from logmetrics.inputs.days import footer_day_inputs, json_day_files

    made = traces["mlflow"]
    parquet, otlp = tmp_path / "parquet", tmp_path / "otlp"
    for day in (FIRST, LAST):
        rows = [r for r in made.rows() if _day(r["start_time_unix_nano"]) == day]
        (parquet / f"date={day}").mkdir(parents=True)
        pq.write_table(traces_sdk.spans_table(rows), parquet / f"date={day}" / "part-0.parquet")
    otlp.mkdir()
    (otlp / "export.jsonl").write_text("\n".join(made.otlp_lines()) + "\n")

    def config(path: Path, fmt: str) -> Config:
        return Config.model_validate(
            {
                "inputs": {
                    "served_logs": {"path": str(path), "format": fmt, "shape": "spans"},
                    "clusters": {"path": str(tmp_path / "clusters")},
                },
                "output": {"warehouse": str(tmp_path / "warehouse")},
            }
        )

    days = [FIRST, LAST]
    by_footers = footer_day_inputs(config(parquet, "parquet"), "v0", days, [])
    assert by_footers is not None and all(by_footers[d].files == 1 for d in days)
    assert inputs_flow.day_inputs(spark, config(parquet, "parquet"), "v0", days, []) == by_footers

    spans_on = {
        d: sum(1 for r in made.rows() if _day(r["start_time_unix_nano"]) == d) for d in days
    }
    for day in days:
        found = json_day_files(config(otlp, "otlp").inputs.logs(), day)
        assert found is not None and found[1] == []
        assert (found[0].files, found[0].rows) == (1, spans_on[day])


def _day(nanos: int) -> dt.date:
    return dt.date(1970, 1, 1) + dt.timedelta(days=nanos // 86_400_000_000_000)


def test_the_spans_examples_configs_are_valid() -> None:
    """docs/inputs.md's Databricks example (MLflow's spans table by name) loads as a config."""
    from logmetrics.config import Config

    text = (Path(__file__).resolve().parents[1] / "docs" / "inputs.md").read_text()
    section = text.split("### On Databricks: MLflow traces stored in Unity Catalog", 1)[1]
    config = Config.model_validate(yaml.safe_load(section.split("```yaml\n", 1)[1].split("```")[0]))
    logs = config.inputs.logs()
    assert (logs.shape, logs.by_catalog, logs.spans.chunk_id_path()) == (
        "spans",
        True,
        "metadata.chunk_id",
    )
    assert config.metrics.segment_by == ("service.name",)


def test_a_documents_token_count_prices_its_slot(spark: SparkSession, tmp_path: Path) -> None:
    """`spans.tokens` names where a document carries its prompt tokens: each top slot's tokens
    are that document's (a document without it: null, priced by cost.tokens_per_slot)."""
    served = dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)
    documents = [
        {"id": "chunk-01", "page_content": "a", "metadata": {"tokens": 120}},
        {"id": "chunk-02", "page_content": "b", "metadata": {"tokens": 80.6}},
        {"id": "chunk-03", "page_content": "c", "metadata": {}},
    ]
    made = traces_sdk.mlflow_traces([traces_sdk.Request(served, documents)])
    config, _ = _stored(spark, made, "parquet-map", tmp_path / "spans")
    config["spans"]["tokens"] = "metadata.tokens"
    requests_df = _requests_df(spark, config, _clusters(made))
    (row,) = requests_df.select("request_id", "slot_tokens").collect()
    assert (row.request_id, row.slot_tokens) == (made.retrieval_span_ids[0], [120, 81, None])
