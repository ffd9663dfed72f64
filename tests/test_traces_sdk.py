"""The spans reader's test data checks out: tests/traces_sdk.py's traces, made by the real SDKs
(MLflow's tracing SDK; the OpenTelemetry SDK with OpenInference's conventions), stored as a
spans table's rows and as OTLP/JSON lines, and tests/traces_reference.py's reading of them.

- The OTLP/JSON lines are the SDK encoder's requests, losslessly (protobuf's own JSON parser
  reads them back, ids turned from hex to base64), in the Collector file exporter's form.
- Read back from every stored form, the retrieval spans are the requests made, in order, with
  their documents' chunk ids (none for a document without one, an empty list for none); the
  agent, tool, reranker and LLM spans that hold the same documents are no requests.
- A redelivered trace is stored twice and read as two copies of each of its requests; the
  reference counts them once.
- A marker put in the free texts is in every one of them (the privacy tests' probe)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections import Counter
from typing import Any

import pyarrow.parquet as pq
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import reference
import traces_reference
import traces_sdk
from traces_sdk import Request

START = dt.datetime(2026, 11, 30, 23, 30, tzinfo=dt.UTC)  # 40 requests a minute apart: 2 days
MARKER = "PRIVATE-7f3a"
REDELIVERED = (3, 17)


@pytest.fixture(scope="module")
def requests() -> list[Request]:
    return traces_sdk.sample_requests(40, START)


@pytest.fixture(scope="module")
def made(requests: list[Request]) -> dict[str, traces_sdk.Traces]:
    return {
        "mlflow": traces_sdk.mlflow_traces(requests, redeliver=REDELIVERED, marker=MARKER),
        "openinference": traces_sdk.openinference_traces(
            requests, redeliver=REDELIVERED, marker=MARKER
        ),
    }


def _expected(requests: list[Request], traces: traces_sdk.Traces, path: str) -> list[dict]:
    """What the rules make of the requests given: by hand from the inputs."""
    out = []
    for i, request in enumerate(requests):
        results = []
        for rank, document in enumerate(request.documents, start=1):
            value: Any = document
            for part in path.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            results.append({"rank": rank, "chunk_id": value})
        out.append(
            {
                "request_id": traces.retrieval_span_ids[i],
                "served_at": request.served_at,
                "results": results,
                "trace_id": traces.trace_ids[i],
            }
        )
    return out


def _stored_forms(traces: traces_sdk.Traces) -> dict[str, Any]:
    """Each stored form of the spans, as the reference reads it: (reader, stored)."""
    rows = traces.rows()
    forms = {
        "rows": (traces_reference.requests_from_spans, rows),
        "json-object": (
            traces_reference.requests_from_spans,
            [json.loads(line) for line in traces_sdk.spans_json_lines(rows, "object")],
        ),
        "json-text": (
            traces_reference.requests_from_spans,
            [json.loads(line) for line in traces_sdk.spans_json_lines(rows, "text")],
        ),
        "otlp": (traces_reference.requests_from_otlp_lines, traces.otlp_lines()),
        "otlp-batched": (traces_reference.requests_from_otlp_lines, traces.otlp_lines("sdk", 8)),
    }
    if traces.convention == "openinference":
        forms["rows-list"] = (traces_reference.requests_from_spans, traces.rows("sdk", "list"))
    if traces.convention == "mlflow":
        forms["rows-mlflow"] = (traces_reference.requests_from_spans, traces.rows("mlflow"))
        forms["otlp-mlflow"] = (
            traces_reference.requests_from_otlp_lines,
            traces.otlp_lines("mlflow"),
        )
    return forms


@pytest.mark.parametrize("convention", ["mlflow", "openinference"])
def test_every_stored_form_reads_back_as_the_requests_made(
    convention: str, requests: list[Request], made: dict[str, traces_sdk.Traces]
) -> None:
    traces = made[convention]
    want = _expected(requests, traces, "id")
    copies = {traces.retrieval_span_ids[i] for i in REDELIVERED}
    for form, (read, stored) in _stored_forms(traces).items():
        got = read(stored, convention)
        counts = Counter(r["request_id"] for r in got)
        assert {k for k, n in counts.items() if n > 1} == copies, form
        assert max(counts.values()) == 2, form
        firsts: dict[str, dict] = {}
        for request in got:
            assert firsts.setdefault(request["request_id"], request) == request, form
        assert sorted(firsts.values(), key=lambda r: r["served_at"]) == want, form


def test_the_samples_hold_the_awkward_cases(requests: list[Request]) -> None:
    """Empty lists, documents without a chunk id, a chunk twice in a list, two UTC days."""
    assert any(not r.documents for r in requests)
    assert any("id" not in d for r in requests for d in r.documents)
    ids = [[d.get("id") for d in r.documents if "id" in d] for r in requests]
    assert any(len(set(i)) < len(i) for i in ids)
    assert len({r.served_at.date() for r in requests}) == 2


@pytest.mark.parametrize("convention", ["mlflow", "openinference"])
def test_spans_of_other_kinds_hold_the_same_documents(
    convention: str, requests: list[Request], made: dict[str, traces_sdk.Traces]
) -> None:
    """The trap a reader must not fall in: reranker (and MLflow's tool) spans hold the chunk
    ids too, reversed by the reranker; only RETRIEVER spans are requests."""
    traces = made[convention]
    rows = traces.rows()
    i = next(
        n
        for n, r in enumerate(requests)
        if len(r.documents) >= 3 and all("id" in d for d in r.documents)
    )
    ids = [d["id"] for d in requests[i].documents]
    trace = [r for r in rows if r["trace_id"] == traces.trace_ids[i]]
    by_kind: dict[str, list[str]] = {}
    for row in trace:
        attributes = row["attributes"]
        if convention == "mlflow":
            kind = json.loads(attributes["mlflow.spanType"])
            outputs = json.loads(attributes.get("mlflow.spanOutputs", "null"))
            held = [d["id"] for d in outputs] if isinstance(outputs, list) else []
        else:
            kind = attributes["openinference.span.kind"]
            keys = sorted(
                (int(m.group(2)), v)
                for k, v in attributes.items()
                if (
                    m := re.match(
                        r"^(retrieval\.documents|reranker\.output_documents)\.(\d+)\.document\.id$",
                        k,
                    )
                )
            )
            held = [v for _, v in keys]
        by_kind[kind] = held
    assert by_kind["RETRIEVER"] == ids
    assert by_kind["RERANKER"] == ids[::-1]
    if convention == "mlflow":
        assert by_kind["TOOL"] == ids
        assert set(by_kind) == {"AGENT", "TOOL", "RETRIEVER", "RERANKER", "LLM"}
    else:
        assert set(by_kind) == {"CHAIN", "RETRIEVER", "RERANKER", "LLM"}


@pytest.mark.parametrize(
    ("convention", "path"),
    [("mlflow", "metadata.chunk_id"), ("openinference", "document.metadata.chunk_id")],
)
def test_a_chunk_id_in_the_metadata(convention: str, path: str) -> None:
    """Several requests to a trace too: each retrieval span is its own request."""
    requests = traces_sdk.sample_requests(12, START, chunk_id="metadata.chunk_id", seed=3)
    make = traces_sdk.mlflow_traces if convention == "mlflow" else traces_sdk.openinference_traces
    traces = make(requests, per_trace=3)
    assert len(set(traces.trace_ids)) == 4 and len(set(traces.retrieval_span_ids)) == 12
    want = _expected(requests, traces, "metadata.chunk_id")
    for form, (read, stored) in _stored_forms(traces).items():
        got = sorted(read(stored, convention, path), key=lambda r: r["served_at"])
        assert got == want, form


def test_a_redelivered_trace_is_stored_twice_and_counted_once(
    requests: list[Request], made: dict[str, traces_sdk.Traces]
) -> None:
    traces = made["openinference"]
    rows = traces.rows()
    per_trace = len(traces.spans) // len(requests)
    assert len(rows) == len(traces.spans) + per_trace * len(REDELIVERED)
    assert len(traces.otlp_lines()) == len(requests) + len(REDELIVERED)
    keys = [(r["trace_id"], r["span_id"]) for r in rows]
    assert len(keys) - len(set(keys)) == per_trace * len(REDELIVERED)
    got = traces_reference.requests_from_spans(rows, "openinference")
    kept = reference.served_requests(got, START.date(), START.date() + dt.timedelta(days=1))
    assert len(kept) == len(requests)


def test_the_reference_requests_give_the_reference_numbers(
    requests: list[Request], made: dict[str, traces_sdk.Traces]
) -> None:
    """Through tests/reference.py: the same per-query numbers as the requests given."""
    clusters = [(f"chunk-{n:02d}", f"cl-{n // 3}") for n in range(0, 40, 2)]
    end = START.date() + dt.timedelta(days=1)
    for convention, traces in made.items():
        given = _expected(requests, traces, "id")
        got = traces_reference.requests_from_otlp_lines(traces.otlp_lines(), convention)
        assert reference.by_query(got, clusters, [1, 3, 5], START.date(), end) == (
            reference.by_query(given, clusters, [1, 3, 5], START.date(), end)
        )


# --- the stored forms ------------------------------------------------------------------------


def _hex_to_base64(line: str) -> dict[str, Any]:
    """OTLP/JSON's hex ids as protobuf's JSON mapping wants them (base64)."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: base64.b64encode(bytes.fromhex(v)).decode()
                if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
                else walk(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(json.loads(line))


@pytest.mark.parametrize(
    ("convention", "encoding"),
    [("mlflow", "sdk"), ("mlflow", "mlflow"), ("openinference", "sdk")],
)
def test_the_otlp_lines_are_the_encoders_requests(
    convention: str, encoding: str, made: dict[str, traces_sdk.Traces]
) -> None:
    traces = made[convention]
    sent = traces.export_requests(encoding, 5)
    lines = traces.otlp_lines(encoding, 5)
    assert len(lines) == len(sent)
    for line, request in zip(lines, sent, strict=True):
        assert "\n" not in line
        parsed = json_format.ParseDict(_hex_to_base64(line), ExportTraceServiceRequest())
        assert parsed == _with_always_written(request)


def _with_always_written(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """The request with the messages pdata always writes (resource, scope, a span's status, a
    key-value's value: MLflow leaves a None unset) present, empty or not, as parsed."""

    def values(key_values: Any) -> None:
        for kv in key_values:
            kv.value.SetInParent()
            if kv.value.HasField("kvlist_value"):
                values(kv.value.kvlist_value.values)
            if kv.value.HasField("array_value"):
                for item in kv.value.array_value.values:
                    if item.HasField("kvlist_value"):
                        values(item.kvlist_value.values)

    out = ExportTraceServiceRequest()
    out.CopyFrom(request)
    for resource_spans in out.resource_spans:
        resource_spans.resource.SetInParent()
        for scope_spans in resource_spans.scope_spans:
            scope_spans.scope.SetInParent()
            for span in scope_spans.spans:
                span.status.SetInParent()
                values(span.attributes)
    return out


def test_the_otlp_lines_are_in_the_collectors_form(made: dict[str, traces_sdk.Traces]) -> None:
    """Hex ids, 64-bit integers as strings, enums as numbers, what the SDK sets."""
    line = json.loads(made["openinference"].otlp_lines()[0])
    resource_spans = line["resourceSpans"][0]
    assert {"resource", "scopeSpans"} <= set(resource_spans)
    span = resource_spans["scopeSpans"][0]["spans"][0]
    assert re.fullmatch(r"[0-9a-f]{32}", span["traceId"])
    assert re.fullmatch(r"[0-9a-f]{16}", span["spanId"])
    assert re.fullmatch(r"[0-9]+", span["startTimeUnixNano"])
    assert span["kind"] == 1 and span["flags"] == 256 and span["status"] == {}
    mlflow_span = json.loads(made["mlflow"].otlp_lines("mlflow")[0])["resourceSpans"][0]
    attributes = {
        a["key"]: a["value"] for a in mlflow_span["scopeSpans"][0]["spans"][0]["attributes"]
    }
    assert attributes["mlflow.spanType"] == {"stringValue": "RETRIEVER"}
    assert set(attributes["mlflow.spanOutputs"]) == {"arrayValue"}
    assert re.fullmatch(r"[0-9]+", attributes["mlflow.spanStartTimeNs"]["intValue"])


def test_otlp_json_writes_what_pdata_writes() -> None:
    """A request by hand against the line pdata's marshaler makes of it (its generated
    MarshalJSON: zero values left out, `status` always, 1.0 as 1, bytes as base64)."""
    request = json_format.ParseDict(
        {
            "resourceSpans": [
                {
                    "resource": {},
                    "scopeSpans": [
                        {
                            "scope": {"name": "s"},
                            "spans": [
                                {
                                    "traceId": base64.b64encode(bytes(range(1, 17))).decode(),
                                    "spanId": base64.b64encode(bytes(range(17, 25))).decode(),
                                    "name": "n",
                                    "kind": 2,
                                    "startTimeUnixNano": "5",
                                    "attributes": [
                                        {"key": "i", "value": {"intValue": "-3"}},
                                        {"key": "d", "value": {"doubleValue": 1.0}},
                                        {"key": "b", "value": {"boolValue": False}},
                                        {"key": "x", "value": {"bytesValue": "Zm9v"}},
                                        {"key": "a", "value": {"arrayValue": {}}},
                                        {"key": "u", "value": {}},
                                        {
                                            "key": "k",
                                            "value": {
                                                "kvlistValue": {
                                                    "values": [
                                                        {
                                                            "key": "s",
                                                            "value": {"stringValue": "é\n"},
                                                        }
                                                    ]
                                                }
                                            },
                                        },
                                    ],
                                    "events": [{"name": "e", "timeUnixNano": "7"}],
                                    "status": {"code": 2, "message": "m"},
                                }
                            ],
                        }
                    ],
                }
            ]
        },
        ExportTraceServiceRequest(),
    )
    assert traces_sdk.otlp_json(request) == (
        '{"resourceSpans":[{"resource":{},"scopeSpans":[{"scope":{"name":"s"},"spans":[{'
        '"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"1112131415161718",'
        '"name":"n","kind":2,"startTimeUnixNano":"5","attributes":['
        '{"key":"i","value":{"intValue":"-3"}},{"key":"d","value":{"doubleValue":1}},'
        '{"key":"b","value":{"boolValue":false}},{"key":"x","value":{"bytesValue":"Zm9v"}},'
        '{"key":"a","value":{"arrayValue":{}}},{"key":"u","value":{}},'
        '{"key":"k","value":{"kvlistValue":{"values":[{"key":"s","value":{"stringValue":"é\\n"}}]}}}],'
        '"events":[{"timeUnixNano":"7","name":"e"}],"status":{"message":"m","code":2}}]}]}]}'
    )


def test_the_rows_are_a_spans_table(made: dict[str, traces_sdk.Traces], tmp_path: Any) -> None:
    rows = made["mlflow"].rows()
    path = tmp_path / "spans.parquet"
    pq.write_table(traces_sdk.spans_table(rows), path)
    back = pq.read_table(path)
    assert back.schema == traces_sdk.SPANS_ARROW
    first = back.slice(0, 1).to_pylist()[0]
    assert dict(first["attributes"]) == rows[0]["attributes"]
    assert first["kind"] == "SPAN_KIND_INTERNAL" and first["status"]["code"] == "STATUS_CODE_OK"
    roots = {r["span_id"] for r in rows if r["parent_span_id"] is None}
    assert len(roots) == len({r["trace_id"] for r in rows})
    assert rows[0]["resource"]["attributes"]["telemetry.sdk.name"] == "mlflow"


# --- the privacy probe -----------------------------------------------------------------------

FREE_TEXT = {
    "mlflow": ("mlflow.spanInputs", "mlflow.spanOutputs"),
    "openinference": (
        "input.value",
        "output.value",
        "reranker.query",
        ".document.content",
        ".message.content",
    ),
}


@pytest.mark.parametrize("convention", ["mlflow", "openinference"])
def test_the_marker_is_in_every_free_text(
    convention: str, made: dict[str, traces_sdk.Traces]
) -> None:
    rows = made[convention].rows()
    texts = 0
    for row in rows:
        for key, value in row["attributes"].items():
            if any(
                key == k or (k.startswith(".") and key.endswith(k)) for k in FREE_TEXT[convention]
            ):
                if convention == "mlflow" and json.loads(value) in ([], None):
                    continue  # a request without documents: nothing to mark
                texts += 1
                assert MARKER in value, (key, value)
    assert texts >= 4 * len(made[convention].retrieval_span_ids)
    got = traces_reference.requests_from_spans(rows, convention)
    assert MARKER not in repr(got)
