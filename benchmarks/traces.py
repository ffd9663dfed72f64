"""`python -m benchmarks.traces` (also part of `make bench`): the 90 days of top-10 lists kept as
MLflow traces (docs/inputs.md, "Traces"), against the same requests in the contract's shape.

The data: `make bench`'s top-10 dataset, written once more beside it (bench-data/<dataset>-
traces/), each request as one MLflow trace of three spans: an AGENT root, the RETRIEVER span
(its documents in `mlflow.spanOutputs`, MLflow's JSON-encoded attribute values, `id`,
`page_content` and `metadata` each) and a RERANKER span holding the same documents reversed; a
redelivered copy of a request is its trace again at the copy's time, a row without an id a span
without one, a null list outputs that are no list. Stored
- **spans-delta**: a spans table in Delta, MLflow's Unity Catalog span columns
  (`attributes` a map of strings, `resource` a struct), partitioned by `date` (delta-rs);
- **otlp**: OTLP/JSON lines as an OpenTelemetry Collector's file exporter writes them, 100
  traces a line, a file per `date=` partition;
- **nested**: the requests the spans hold in the contract's shape (request_id = the retrieval
  span's id, results its documents in order, rank = position): what both are checked against.

Each of `--rounds` rounds runs, one process each, `logmetrics backfill` of the 90 days into a
new warehouse with the project's defaults, nested, spans-delta and otlp, the order flipping each
round. Reported: medians, the medians of the rounds' ratios spans-delta / nested (target 2) and
otlp / nested (target 3), and the spans runs' per-query and daily rows against the nested run's
(`benchmarks.check`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import machine, report
from benchmarks.big_clusters import stage_args
from benchmarks.datasets import REPO, Dataset, ensure_dataset
from benchmarks.engines import Logmetrics, Workload, fresh_dir
from benchmarks.log_shapes import SPEC, alternating_rounds, ok
from benchmarks.log_shapes import markdown as shapes_markdown
from benchmarks.log_shapes import summarize as summarize_rounds
from benchmarks.measure import run_check

log = logging.getLogger("benchmarks")

KINDS = ("nested", "spans-delta", "otlp")
TARGETS = {"spans-delta": 2.0, "otlp": 3.0}
FORMAT = 1
"""The copies' layout: a change to it writes them again."""
TRACES_PER_LINE = 100
README_MARKERS = ("<!-- bench:traces:start -->", "<!-- bench:traces:end -->")

_MAP = pa.map_(pa.string(), pa.string())
SPANS_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("name", pa.string()),
        ("kind", pa.string()),
        ("start_time_unix_nano", pa.int64()),
        ("end_time_unix_nano", pa.int64()),
        ("attributes", _MAP),
        ("resource", pa.struct([("attributes", _MAP)])),
        ("date", pa.string()),
    ]
)
NESTED_SCHEMA = pa.schema(
    [
        ("request_id", pa.string()),
        ("served_at", pa.timestamp("us", "UTC")),
        ("results", pa.list_(pa.struct([("rank", pa.int32()), ("chunk_id", pa.string())]))),
    ]
)
RESOURCE = {"service.name": "support-agent", "telemetry.sdk.name": "mlflow"}


def _hex(text: str, size: int) -> str:
    return hashlib.blake2b(text.encode(), digest_size=size).hexdigest()


def _documents(entries: list[dict[str, Any]] | None) -> str:
    """MLflow's JSON of a retriever's outputs: Documents with id, page_content and metadata (a
    null list: outputs that are no list)."""
    if entries is None:
        return json.dumps("no documents")
    return json.dumps(
        [
            {
                "page_content": f"text of {e['chunk_id']}",
                "metadata": {"doc_uri": f"s3://docs/{e['chunk_id']}.md"},
                **({"id": e["chunk_id"]} if e["chunk_id"] is not None else {}),
            }
            for e in entries
        ]
    )


def _spans_of(row: dict[str, Any], day: str) -> list[dict[str, Any]]:
    """The three spans of one request's trace (a copy: its trace again at the copy's time)."""
    request_id, served_at = row["request_id"], row["served_at"]
    key = "" if request_id is None else request_id
    start = None if served_at is None else int(served_at.timestamp() * 1_000_000) * 1000
    trace_id, root_id = _hex(f"t{key}", 16), _hex(f"a{key}", 8)
    outputs = _documents(row["results"])
    reversed_outputs = outputs
    if row["results"] is not None:
        reversed_outputs = _documents(list(reversed(row["results"])))
    request_text = json.dumps(f"tr-{trace_id}")

    def span(span_id: str | None, parent: str | None, name: str, kind: str, **extra: str) -> Any:
        return {
            "trace_id": trace_id,
            "span_id": span_id,
            "parent_span_id": parent,
            "name": name,
            "kind": "SPAN_KIND_INTERNAL",
            "start_time_unix_nano": start,
            "end_time_unix_nano": None if start is None else start + 20_000_000,
            "attributes": {
                "mlflow.traceRequestId": request_text,
                "mlflow.spanType": json.dumps(kind),
                **extra,
            },
            "resource": {"attributes": RESOURCE},
            "date": day,
        }

    question = json.dumps({"query": f"question {key}"})
    return [
        span(root_id, None, "agent", "AGENT", **{"mlflow.spanInputs": question}),
        span(
            None if request_id is None else _hex(f"r{key}", 8),
            root_id,
            "retrieve",
            "RETRIEVER",
            **{"mlflow.spanInputs": question, "mlflow.spanOutputs": outputs},
        ),
        span(
            _hex(f"k{key}", 8),
            root_id,
            "rerank",
            "RERANKER",
            **{"mlflow.spanOutputs": reversed_outputs},
        ),
    ]


def _nested(row: dict[str, Any], retrieval: dict[str, Any]) -> dict[str, Any]:
    """The request the retrieval span holds, in the contract's shape: its documents in order,
    rank = position."""
    entries = row["results"]
    results = (
        None
        if entries is None
        else [{"rank": i, "chunk_id": e["chunk_id"]} for i, e in enumerate(entries, start=1)]
    )
    return {"request_id": retrieval["span_id"], "served_at": row["served_at"], "results": results}


def _otlp_line(spans: list[dict[str, Any]]) -> str:
    """One ExportTraceServiceRequest, as the Collector's file exporter writes it."""

    def value(text: str) -> dict[str, Any]:
        return {"stringValue": text}

    def otlp(span: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"traceId": span["trace_id"]}
        if span["span_id"] is not None:
            out["spanId"] = span["span_id"]
        if span["parent_span_id"] is not None:
            out["parentSpanId"] = span["parent_span_id"]
        out |= {"flags": 256, "name": span["name"], "kind": 1}
        if span["start_time_unix_nano"] is not None:
            out["startTimeUnixNano"] = str(span["start_time_unix_nano"])
            out["endTimeUnixNano"] = str(span["end_time_unix_nano"])
        out["attributes"] = [{"key": k, "value": value(v)} for k, v in span["attributes"].items()]
        out["status"] = {"code": 1}
        return out

    resource = {"attributes": [{"key": k, "value": value(v)} for k, v in RESOURCE.items()]}
    export = {
        "resourceSpans": [
            {
                "resource": resource,
                "scopeSpans": [
                    {
                        "scope": {"name": "mlflow.tracing.provider"},
                        "spans": [otlp(s) for s in spans],
                    }
                ],
            }
        ]
    }
    return json.dumps(export, separators=(",", ":"), ensure_ascii=False)


def ensure_traces(dataset: Dataset, data_root: Path) -> dict[str, Path]:
    """The spans table, the OTLP lines and the nested requests they hold, written once (a
    marker file names the dataset they were made from)."""
    from deltalake import write_deltalake

    root = data_root / f"{dataset.spec.name}-traces"
    marker = root / "_made_from"
    made = {"spans-delta": root / "spans-delta", "otlp": root / "otlp", "nested": root / "nested"}
    if marker.exists() and marker.read_text() == f"{dataset.spec.name} {FORMAT}":
        return made
    log.info("traces: writing the spans table, the OTLP lines and their requests into %s", root)
    fresh_dir(root)
    for source in sorted(dataset.served_logs.rglob("*.parquet")):
        day = source.parent.name.removeprefix("date=")
        rows = pq.read_table(source, partitioning=None).to_pylist()
        spans, nested, lines, batch = [], [], [], []
        for i, row in enumerate(rows):
            trace = _spans_of(row, day)
            spans += trace
            nested.append(_nested(row, trace[1]))
            batch += trace
            if (i + 1) % TRACES_PER_LINE == 0 or i + 1 == len(rows):
                lines.append(_otlp_line(batch))
                batch = []
        write_deltalake(
            str(made["spans-delta"]),
            pa.Table.from_pylist(spans, SPANS_SCHEMA),
            partition_by=["date"],
            mode="append",
        )
        folder = made["otlp"] / f"date={day}"
        folder.mkdir(parents=True)
        (folder / "traces.jsonl").write_text("\n".join(lines) + "\n")
        target = made["nested"] / f"date={day}" / "part-0.parquet"
        target.parent.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(nested, NESTED_SCHEMA), target)
        log.info("traces: %s written (%d requests)", day, len(rows))
    marker.write_text(f"{dataset.spec.name} {FORMAT}")
    return made


def _engines(made: dict[str, Path]) -> dict[str, Logmetrics]:
    return {
        "nested": Logmetrics("nested", {"inputs": {"served_logs": {"path": str(made["nested"])}}}),
        "spans-delta": Logmetrics(
            "spans-delta",
            {
                "inputs": {
                    "served_logs": {
                        "path": str(made["spans-delta"]),
                        "format": "delta",
                        "shape": "spans",
                    }
                }
            },
        ),
        "otlp": Logmetrics(
            "otlp",
            {
                "inputs": {
                    "served_logs": {"path": str(made["otlp"]), "format": "otlp", "shape": "spans"}
                }
            },
        ),
    }


def time_rounds(
    dataset: Dataset, made: dict[str, Path], out_dir: Path, rounds: int
) -> list[dict[str, Any]]:
    workload = Workload("top10-90d", dataset, SPEC.days)
    engines = _engines(made)
    return alternating_rounds(
        KINDS,
        rounds,
        out_dir,
        lambda kind, run_dir: (engines[kind].prepare(workload, run_dir), None),
    )


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per kind, and the medians of the rounds' ratios against nested."""
    pairs = {kind: (kind, "nested") for kind in ("spans-delta", "otlp")}
    return summarize_rounds(runs, KINDS, pairs, TARGETS)


def check_outputs(out_dir: Path, engines: dict[str, Logmetrics]) -> dict[str, Any]:
    """The spans runs' per-query and daily rows against the nested run's."""
    expected = engines["nested"].outputs(out_dir / "nested")
    comparisons = [
        {"name": kind, "expected": expected, "actual": engines[kind].outputs(out_dir / kind)}
        for kind in ("spans-delta", "otlp")
    ]
    return run_check(comparisons, out_dir, REPO)


def markdown(results: dict[str, Any]) -> str:
    return shapes_markdown(
        results,
        "the 90 days of top-10 lists (3.6M requests) kept as MLflow traces (three spans a request)",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    out_dir = args.out_dir / "traces"
    dataset = ensure_dataset(SPEC, args.data_dir)
    made = ensure_traces(dataset, args.data_dir)
    runs = time_rounds(dataset, made, out_dir, args.rounds)
    return {
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine_line": machine.summary_line(machine.describe(REPO)),
        "commit": machine.git_commit(REPO),
        "parameters": {"rounds": args.rounds, "dataset": SPEC.marker()},
        "summary": summarize(runs),
        "checks": check_outputs(out_dir, _engines(made)),
        "runs": runs,
    }


def record(results: dict[str, Any], results_file: Path, readme: Path) -> str:
    return report.record_section(
        results, "traces", markdown(results), results_file, readme, README_MARKERS
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = stage_args(argv, "traces", __doc__)
    results = run(args)
    print(record(results, args.results, args.readme))
    return 0 if ok(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
