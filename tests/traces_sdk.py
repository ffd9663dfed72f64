"""Traces made by the real SDKs, stored as a spans reader meets them: the spans reader's test data.

Each retrieval request (`Request`: a served_at, its documents in order) becomes one RETRIEVER span
in a trace that also holds spans of other kinds with the same documents, made with

- MLflow's tracing SDK (`mlflow_traces`, mlflow-tracing 3.17): an AGENT root, a TOOL span whose
  outputs are the documents as dicts, under it the RETRIEVER span whose outputs are
  `mlflow.entities.Document`s, a RERANKER span (the documents in and, reversed, out) and an LLM
  span whose prompt holds the texts. MLflow exports them as it does to an OpenTelemetry Collector
  (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: its `OtelSpanProcessor`), the transport replaced by an
  in-memory exporter, so no server and no tracking store is needed;
- the OpenTelemetry SDK with OpenInference's conventions and attribute helpers
  (`openinference_traces`): a CHAIN root, a RETRIEVER span (`retrieval.documents.N.document.*`),
  a RERANKER span (`reranker.input_documents` / `reranker.output_documents`) and an LLM span with
  the prompt (`llm.input_messages`).

`Traces` then stores the finished spans as
- `rows()`: one dict per span in the columns of MLflow's trace table in Unity Catalog in
  OpenTelemetry format (v1 schema: `SPANS_DDL`, `SPANS_ARROW`), `attributes` a map of strings;
- `otlp_lines()`: OTLP/JSON lines, each an `ExportTraceServiceRequest` written byte for byte as
  the Collector's file exporter writes it (`otlp_json`: pdata's JSON marshaler),
and `retrieval_span_ids` says which RETRIEVER span is which request (lower-case hex, as stored).
The reference reads them back with tests/traces_reference.py, from what is stored only.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pyarrow as pa
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as ProtoStatus
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

# The v1 span table MLflow's `set_experiment_trace_location(UCSchemaLocation(...))` binds
# (`<catalog>.<schema>.mlflow_experiment_trace_otel_spans`): OpenTelemetry's span fields, ids in
# lower-case hex, enums by name, the resource and scope beside each span, every attribute map
# MAP<STRING, STRING>. (The v2 tables, `<prefix>_otel_spans`, add record_id, time, date and
# service_name in front and hold the attribute maps as VARIANT.)
_ATTRS = "MAP<STRING, STRING>"
SPANS_DDL = ", ".join(
    [
        "trace_id STRING",
        "span_id STRING",
        "trace_state STRING",
        "parent_span_id STRING",
        "flags INT",
        "name STRING",
        "kind STRING",
        "start_time_unix_nano BIGINT",
        "end_time_unix_nano BIGINT",
        f"attributes {_ATTRS}",
        "dropped_attributes_count INT",
        "events ARRAY<STRUCT<time_unix_nano: BIGINT, name: STRING, "
        f"attributes: {_ATTRS}, dropped_attributes_count: INT>>",
        "dropped_events_count INT",
        "links ARRAY<STRUCT<trace_id: STRING, span_id: STRING, trace_state: STRING, "
        f"attributes: {_ATTRS}, dropped_attributes_count: INT, flags: INT>>",
        "dropped_links_count INT",
        "status STRUCT<message: STRING, code: STRING>",
        f"resource STRUCT<attributes: {_ATTRS}, dropped_attributes_count: INT>",
        "resource_schema_url STRING",
        "instrumentation_scope STRUCT<name: STRING, version: STRING, "
        f"attributes: {_ATTRS}, dropped_attributes_count: INT>",
        "span_schema_url STRING",
    ]
)

_MAP = pa.map_(pa.string(), pa.string())
SPANS_ARROW = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("trace_state", pa.string()),
        ("parent_span_id", pa.string()),
        ("flags", pa.int32()),
        ("name", pa.string()),
        ("kind", pa.string()),
        ("start_time_unix_nano", pa.int64()),
        ("end_time_unix_nano", pa.int64()),
        ("attributes", _MAP),
        ("dropped_attributes_count", pa.int32()),
        (
            "events",
            pa.list_(
                pa.struct(
                    [
                        ("time_unix_nano", pa.int64()),
                        ("name", pa.string()),
                        ("attributes", _MAP),
                        ("dropped_attributes_count", pa.int32()),
                    ]
                )
            ),
        ),
        ("dropped_events_count", pa.int32()),
        (
            "links",
            pa.list_(
                pa.struct(
                    [
                        ("trace_id", pa.string()),
                        ("span_id", pa.string()),
                        ("trace_state", pa.string()),
                        ("attributes", _MAP),
                        ("dropped_attributes_count", pa.int32()),
                        ("flags", pa.int32()),
                    ]
                )
            ),
        ),
        ("dropped_links_count", pa.int32()),
        ("status", pa.struct([("message", pa.string()), ("code", pa.string())])),
        (
            "resource",
            pa.struct([("attributes", _MAP), ("dropped_attributes_count", pa.int32())]),
        ),
        ("resource_schema_url", pa.string()),
        (
            "instrumentation_scope",
            pa.struct(
                [
                    ("name", pa.string()),
                    ("version", pa.string()),
                    ("attributes", _MAP),
                    ("dropped_attributes_count", pa.int32()),
                ]
            ),
        ),
        ("span_schema_url", pa.string()),
    ]
)


@dataclass(frozen=True)
class Request:
    """One served retrieval: when (UTC; a naive datetime is UTC) and its documents in order.

    A document is a dict of MLflow `Document` fields: `page_content` (text; made up when absent),
    `id`, `metadata` (a dict) and, for OpenInference, `score`. The chunk id is wherever the test
    puts it (`id`, `metadata.chunk_id`, ...); a document may lack it."""

    served_at: dt.datetime
    documents: Sequence[Mapping[str, Any]] = ()


@dataclass
class Traces:
    """The finished spans of one generation, in the order the SDK exported them."""

    convention: str  # "mlflow" | "openinference"
    spans: list[ReadableSpan]
    retrieval_span_ids: list[str]  # per request, in the order given: lower-case hex span ids
    trace_ids: list[str]  # per request: lower-case hex trace ids
    redelivered: list[str] = field(default_factory=list)  # trace ids delivered twice

    def requests_by_span_id(self) -> dict[str, int]:
        """Retrieval span id -> index of its request in the list given."""
        return {span_id: i for i, span_id in enumerate(self.retrieval_span_ids)}

    def _deliveries(self) -> list[list[ReadableSpan]]:
        """The spans as delivered: one batch per trace, then the redelivered traces once more
        (an exporter's retry: the same trace and span ids)."""
        by_trace: dict[int, list[ReadableSpan]] = {}
        for span in self.spans:
            by_trace.setdefault(span.context.trace_id, []).append(span)
        batches = list(by_trace.values())
        again = {int(t, 16) for t in self.redelivered}
        return batches + [spans for trace_id, spans in by_trace.items() if trace_id in again]

    def export_requests(
        self, encoding: str = "sdk", traces_per_request: int = 1
    ) -> list[ExportTraceServiceRequest]:
        """The OTLP requests a Collector receives: `traces_per_request` traces each.

        encoding "sdk": the OpenTelemetry SDK's own OTLP encoder over the spans as exported
        (what MLflow's OTLP export and any OTel SDK exporter send: MLflow's attribute values
        JSON-encoded strings). "mlflow" (MLflow spans only): MLflow's `Span.to_otel_proto()`,
        as MLflow logs spans to a Unity Catalog table (`DatabricksRestStore.log_spans`): its
        attribute values decoded, documents as an OTLP array of key-value lists."""
        batches = self._deliveries()
        grouped = [
            [span for batch in batches[i : i + traces_per_request] for span in batch]
            for i in range(0, len(batches), traces_per_request)
        ]
        if encoding == "sdk":
            return [encode_spans(group) for group in grouped]
        if encoding == "mlflow" and self.convention == "mlflow":
            return [_mlflow_own_request(group) for group in grouped]
        raise ValueError(f"no {encoding!r} encoding for {self.convention} spans")

    def otlp_lines(self, encoding: str = "sdk", traces_per_request: int = 1) -> list[str]:
        """OTLP/JSON lines as the Collector's file exporter writes them (one request a line)."""
        return [otlp_json(r) for r in self.export_requests(encoding, traces_per_request)]

    def rows(self, encoding: str = "sdk", documents: str = "flattened") -> list[dict[str, Any]]:
        """One row per span delivered (a redelivered span twice), in `SPANS_DDL`'s columns.

        Attribute values as text: a string as it is (with encoding "sdk", MLflow's own
        JSON-encoded values, e.g. '"RETRIEVER"'; with "mlflow", MLflow's decoded values, e.g.
        'RETRIEVER'), any other value as compact JSON (numbers, lists, key-value lists).
        documents "list" (OpenInference): a retriever's `retrieval.documents.N.<field>` keys as
        one `retrieval.documents` attribute, a JSON list of {<field>: value} in N's order, as
        Arize Phoenix hands spans out."""
        if documents not in ("flattened", "list"):
            raise ValueError(documents)
        out = []
        for request in self.export_requests(encoding):
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        row = _row(resource_spans, scope_spans, span)
                        if documents == "list":
                            row["attributes"] = _documents_as_list(span.attributes)
                        out.append(row)
        return out


# --- the generators --------------------------------------------------------------------------


def _ns(when: dt.datetime) -> int:
    """Nanoseconds since the epoch, exactly (a naive datetime is UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return (when - EPOCH) // dt.timedelta(microseconds=1) * 1000


def _text(marker: str | None, text: str) -> str:
    return text if marker is None else f"{marker} {text}"


def _documents(request: Request, index: int, marker: str | None) -> list[dict[str, Any]]:
    """The request's documents with their page_content (made up when absent, marked)."""
    out = []
    for n, document in enumerate(request.documents):
        content = document.get("page_content", f"passage {n} of request {index}")
        out.append({**document, "page_content": _text(marker, content)})
    return out


def _traces_of(requests: Sequence[Request], per_trace: int) -> list[list[int]]:
    return [
        list(range(i, min(i + per_trace, len(requests))))
        for i in range(0, len(requests), per_trace)
    ]


@contextlib.contextmanager
def _mlflow_exporter() -> Iterator[InMemorySpanExporter]:
    """MLflow tracing set up as for an OpenTelemetry Collector, its OTLP exporter swapped for an
    in-memory one: MLflow's own span processor (`OtelSpanProcessor`) makes and exports the
    spans. The tracking URI is set for the set-up only (mlflow-tracing has no local store);
    MLflow's tracing is reset afterwards."""
    import mlflow
    from mlflow.tracing import provider

    exporter = InMemorySpanExporter()
    settings = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces",  # never called
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "MLFLOW_TRACKING_URI": "file://" + tempfile.gettempdir() + "/logmetrics-traces-unused",
        "MLFLOW_ENABLE_OTLP_EXPORTER": "true",
        "MLFLOW_TRACE_ENABLE_OTLP_DUAL_EXPORT": "false",
    }
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        with mock.patch.object(provider, "get_otlp_exporter", lambda: exporter):
            mlflow.tracing.reset()
            provider._get_tracer(__name__)  # MLflow's processors, with our exporter
        yield exporter
        provider.provider.get().force_flush()
    finally:
        mlflow.tracing.reset()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def mlflow_traces(
    requests: Sequence[Request],
    *,
    per_trace: int = 1,
    redeliver: Iterable[int] = (),
    marker: str | None = None,
) -> Traces:
    """A trace per `per_trace` consecutive requests, made with MLflow's tracing SDK.

    Each trace: an AGENT root starting 3 ms before its first request; per request a TOOL span
    (outputs: the documents as dicts) and under it the RETRIEVER span, starting at served_at
    (plus a few nanoseconds below the microsecond), whose outputs are `Document`s; then a
    RERANKER span (inputs: the query and the Documents; outputs: the Documents reversed) and an
    LLM span (inputs: a chat prompt holding the texts). `redeliver`: indexes of requests whose
    whole trace is delivered twice. `marker`: put in every free text (questions, queries,
    page_content, prompts, answers)."""
    import mlflow
    from mlflow.entities import Document, SpanType

    again = set(redeliver)
    span_ids: list[str] = [""] * len(requests)
    trace_ids: list[str] = [""] * len(requests)
    redelivered: list[str] = []
    with _mlflow_exporter() as exporter:
        for members in _traces_of(requests, per_trace):
            first = _ns(requests[members[0]].served_at)
            question = _text(marker, f"question of trace {members[0]}")
            root = mlflow.start_span_no_context(
                "agent",
                span_type=SpanType.AGENT,
                inputs={"messages": [{"role": "user", "content": question}]},
                start_time_ns=first - 3_000_000,
            )
            end = first
            for i in members:
                start = _ns(requests[i].served_at) + (i * 7919) % 1000
                documents = _documents(requests[i], i, marker)
                docs = [
                    Document(
                        page_content=d["page_content"],
                        metadata=dict(d.get("metadata") or {}),
                        id=d.get("id"),
                    )
                    for d in documents
                ]
                query = _text(marker, f"query of request {i}")
                tool = mlflow.start_span_no_context(
                    "search_docs",
                    span_type=SpanType.TOOL,
                    parent_span=root,
                    inputs={"query": query},
                    start_time_ns=start - 1_000,
                )
                retriever = mlflow.start_span_no_context(
                    "retrieve",
                    span_type=SpanType.RETRIEVER,
                    parent_span=tool,
                    inputs={"query": query},
                    start_time_ns=start,
                )
                retriever.end(outputs=docs, end_time_ns=start + 20_000_000)
                tool.end(outputs=[d.to_dict() for d in docs], end_time_ns=start + 21_000_000)
                reranker = mlflow.start_span_no_context(
                    "rerank",
                    span_type=SpanType.RERANKER,
                    parent_span=root,
                    inputs={"query": query, "documents": docs},
                    start_time_ns=start + 22_000_000,
                )
                reranker.end(outputs=docs[::-1], end_time_ns=start + 30_000_000)
                prompt = "\n\n".join([query, *(d.page_content for d in docs)])
                llm = mlflow.start_span_no_context(
                    "chat",
                    span_type=SpanType.LLM,
                    parent_span=root,
                    inputs={"messages": [{"role": "user", "content": prompt}]},
                    start_time_ns=start + 31_000_000,
                )
                llm.end(outputs=_text(marker, f"answer {i}"), end_time_ns=start + 60_000_000)
                span_ids[i], trace_ids[i] = retriever.span_id, retriever._trace_id
                end = max(end, start + 60_000_000)
            root.end(outputs=_text(marker, "final answer"), end_time_ns=end + 1_000_000)
            if again & set(members):
                redelivered.append(trace_ids[members[0]])
    spans = list(exporter.get_finished_spans())
    return Traces("mlflow", spans, span_ids, trace_ids, redelivered)


def openinference_traces(
    requests: Sequence[Request],
    *,
    per_trace: int = 1,
    redeliver: Iterable[int] = (),
    marker: str | None = None,
    service_name: str = "rag-app",
) -> Traces:
    """A trace per `per_trace` consecutive requests, made with the OpenTelemetry SDK and
    OpenInference's semantic conventions and attribute helpers.

    Each trace: a CHAIN root (input.value, output.value) starting 3 ms before its first
    request; per request a RETRIEVER span starting at served_at (plus a few nanoseconds),
    its documents as `retrieval.documents.N.document.{id,content,metadata,score}`, a RERANKER
    span (`reranker.input_documents` and, reversed, `reranker.output_documents`) and an LLM
    span (`llm.input_messages` holding the texts, `llm.output_messages`). `redeliver` and
    `marker` as for `mlflow_traces`."""
    from openinference.instrumentation import (
        get_input_attributes,
        get_llm_attributes,
        get_output_attributes,
        get_reranker_attributes,
        get_retriever_attributes,
        get_span_kind_attributes,
    )
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("logmetrics.tests.rag_app", "1.0.0")

    again = set(redeliver)
    span_ids: list[str] = [""] * len(requests)
    trace_ids: list[str] = [""] * len(requests)
    redelivered: list[str] = []
    for members in _traces_of(requests, per_trace):
        first = _ns(requests[members[0]].served_at)
        question = _text(marker, f"question of trace {members[0]}")
        root = tracer.start_span(
            "rag_pipeline",
            start_time=first - 3_000_000,
            attributes={**get_span_kind_attributes("chain"), **get_input_attributes(question)},
        )
        parent = trace.set_span_in_context(root)
        end = first
        for i in members:
            start = _ns(requests[i].served_at) + (i * 7919) % 1000
            documents = [
                {
                    k: v
                    for k, v in {
                        "id": d.get("id"),
                        "content": d["page_content"],
                        "metadata": d.get("metadata"),
                        "score": d.get("score"),
                    }.items()
                    if v is not None
                }
                for d in _documents(requests[i], i, marker)
            ]
            query = _text(marker, f"query of request {i}")
            retriever = tracer.start_span(
                "retrieve",
                context=parent,
                start_time=start,
                attributes={
                    **get_span_kind_attributes("retriever"),
                    **get_input_attributes(query),
                    **get_retriever_attributes(documents=documents),
                },
            )
            retriever.end(end_time=start + 20_000_000)
            reranker = tracer.start_span(
                "rerank",
                context=parent,
                start_time=start + 22_000_000,
                attributes={
                    **get_span_kind_attributes("reranker"),
                    **get_reranker_attributes(
                        query=query,
                        model_name="cross-encoder",
                        input_documents=documents,
                        output_documents=documents[::-1],
                        top_k=len(documents),
                    ),
                },
            )
            reranker.end(end_time=start + 30_000_000)
            prompt = "\n\n".join([query, *(d["content"] for d in documents)])
            llm = tracer.start_span(
                "llm",
                context=parent,
                start_time=start + 31_000_000,
                attributes={
                    **get_span_kind_attributes("llm"),
                    **get_llm_attributes(
                        model_name="gpt-test",
                        input_messages=[{"role": "user", "content": prompt}],
                        output_messages=[
                            {"role": "assistant", "content": _text(marker, f"answer {i}")}
                        ],
                    ),
                },
            )
            llm.end(end_time=start + 60_000_000)
            context = retriever.get_span_context()
            span_ids[i] = f"{context.span_id:016x}"
            trace_ids[i] = f"{context.trace_id:032x}"
            end = max(end, start + 60_000_000)
        root.set_attributes(get_output_attributes(_text(marker, "final answer")))
        root.end(end_time=end + 1_000_000)
        if again & set(members):
            redelivered.append(trace_ids[members[0]])
    provider.shutdown()
    return Traces(
        "openinference", list(exporter.get_finished_spans()), span_ids, trace_ids, redelivered
    )


def _mlflow_own_request(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """The spans as MLflow itself puts them in an OTLP request when it logs them to a Unity
    Catalog table (mlflow.store.tracking.databricks_rest_store.DatabricksRestStore.log_spans):
    the resource, one scope without a name, each span's `to_otel_proto()`."""
    from mlflow.entities.span import Span
    from mlflow.tracing.utils.otlp import resource_to_otel_proto

    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.CopyFrom(resource_to_otel_proto(spans[0].resource))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.spans.extend(Span(span).to_otel_proto() for span in spans)
    return request


# --- OTLP/JSON as the Collector writes it ----------------------------------------------------


def otlp_json(request: ExportTraceServiceRequest) -> str:
    """One line of the Collector's file exporter: pdata's OTLP/JSON marshaler, field for field
    (opentelemetry-collector pdata/internal/generated_proto_*.go, pdata/internal/json/stream.go):
    camelCase names, ids in lower-case hex, 64-bit integers as decimal strings, enums as
    numbers, fields at their zero value left out except `resource`, `scope`, `value` and a
    span's `status`, compact separators, no ASCII escaping."""
    out: dict[str, Any] = {}
    if request.resource_spans:
        out["resourceSpans"] = [_resource_spans(r) for r in request.resource_spans]
    return _dump(out)


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    """Set `key` unless `value` is its field's zero value (pdata leaves those out)."""
    if value not in ("", 0, [], None):
        out[key] = value


def _resource_spans(rs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"resource": _resource(rs.resource)}
    _put(out, "scopeSpans", [_scope_spans(s) for s in rs.scope_spans])
    _put(out, "schemaUrl", rs.schema_url)
    return out


def _resource(resource: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _put(out, "attributes", [_key_value(kv) for kv in resource.attributes])
    _put(out, "droppedAttributesCount", resource.dropped_attributes_count)
    return out


def _scope_spans(ss: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"scope": _scope(ss.scope)}
    _put(out, "spans", [_span(s) for s in ss.spans])
    _put(out, "schemaUrl", ss.schema_url)
    return out


def _scope(scope: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _put(out, "name", scope.name)
    _put(out, "version", scope.version)
    _put(out, "attributes", [_key_value(kv) for kv in scope.attributes])
    _put(out, "droppedAttributesCount", scope.dropped_attributes_count)
    return out


def _span(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _put(out, "traceId", span.trace_id.hex())
    _put(out, "spanId", span.span_id.hex())
    _put(out, "traceState", span.trace_state)
    _put(out, "parentSpanId", span.parent_span_id.hex())
    _put(out, "flags", span.flags)
    _put(out, "name", span.name)
    _put(out, "kind", span.kind)
    _put(out, "startTimeUnixNano", str(span.start_time_unix_nano or ""))
    _put(out, "endTimeUnixNano", str(span.end_time_unix_nano or ""))
    _put(out, "attributes", [_key_value(kv) for kv in span.attributes])
    _put(out, "droppedAttributesCount", span.dropped_attributes_count)
    events = []
    for event in span.events:
        e: dict[str, Any] = {}
        _put(e, "timeUnixNano", str(event.time_unix_nano or ""))
        _put(e, "name", event.name)
        _put(e, "attributes", [_key_value(kv) for kv in event.attributes])
        _put(e, "droppedAttributesCount", event.dropped_attributes_count)
        events.append(e)
    _put(out, "events", events)
    _put(out, "droppedEventsCount", span.dropped_events_count)
    links = []
    for link in span.links:
        ln: dict[str, Any] = {}
        _put(ln, "traceId", link.trace_id.hex())
        _put(ln, "spanId", link.span_id.hex())
        _put(ln, "traceState", link.trace_state)
        _put(ln, "attributes", [_key_value(kv) for kv in link.attributes])
        _put(ln, "droppedAttributesCount", link.dropped_attributes_count)
        _put(ln, "flags", link.flags)
        links.append(ln)
    _put(out, "links", links)
    _put(out, "droppedLinksCount", span.dropped_links_count)
    status: dict[str, Any] = {}
    _put(status, "message", span.status.message)
    _put(status, "code", span.status.code)
    out["status"] = status
    return out


def _key_value(kv: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _put(out, "key", kv.key)
    out["value"] = _any_value(kv.value)
    return out


def _any_value(value: AnyValue) -> dict[str, Any]:
    which = value.WhichOneof("value")
    if which == "string_value":
        return {"stringValue": value.string_value}
    if which == "bool_value":
        return {"boolValue": value.bool_value}
    if which == "int_value":
        return {"intValue": str(value.int_value)}
    if which == "double_value":
        return {"doubleValue": value.double_value}
    if which == "array_value":
        values = [_any_value(v) for v in value.array_value.values]
        return {"arrayValue": {"values": values} if values else {}}
    if which == "kvlist_value":
        pairs = [_key_value(kv) for kv in value.kvlist_value.values]
        return {"kvlistValue": {"values": pairs} if pairs else {}}
    if which == "bytes_value":
        return {"bytesValue": base64.b64encode(value.bytes_value).decode()}
    return {}


def _go_float(value: float) -> str:
    """A double as json-iterator writes it: strconv's 'f' form, shortest digits (1.0 -> 1)."""
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"no JSON number for {value}")
    if value != 0 and not 1e-6 <= abs(value) < 1e21:
        raise ValueError(f"{value}: json-iterator's 'e' form is not reproduced here")
    text = format(decimal.Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _dump(value: Any) -> str:
    """Compact JSON, a float as `_go_float` writes it."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{_dump(k)}:{_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    if isinstance(value, float):
        return _go_float(value)
    return json.dumps(value, ensure_ascii=False)


# --- the spans table's rows ------------------------------------------------------------------


def _decoded(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_decoded(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _decoded(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, which) if which else None


def _as_text(value: AnyValue) -> str | None:
    decoded = _decoded(value)
    if decoded is None or isinstance(decoded, str):
        return decoded
    return json.dumps(decoded, separators=(",", ":"), ensure_ascii=False)


def _attribute_map(attributes: Iterable[Any]) -> dict[str, str | None]:
    return {kv.key: _as_text(kv.value) for kv in attributes}


def _documents_as_list(attributes: Iterable[Any]) -> dict[str, str | None]:
    """The attribute map with `retrieval.documents.N.<field>` gathered into one list."""
    out: dict[str, str | None] = {}
    documents: dict[int, dict[str, Any]] = {}
    for kv in attributes:
        parts = kv.key.split(".", 3)
        if kv.key.startswith("retrieval.documents.") and len(parts) == 4 and parts[2].isdigit():
            documents.setdefault(int(parts[2]), {})[parts[3]] = _decoded(kv.value)
        else:
            out[kv.key] = _as_text(kv.value)
    if documents:
        listed = [documents[n] for n in sorted(documents)]
        out["retrieval.documents"] = json.dumps(listed, separators=(",", ":"), ensure_ascii=False)
    return out


def _row(resource_spans: Any, scope_spans: Any, span: Any) -> dict[str, Any]:
    def hex_or_none(raw: bytes) -> str | None:
        return raw.hex() or None

    return {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "trace_state": span.trace_state or None,
        "parent_span_id": hex_or_none(span.parent_span_id),
        "flags": span.flags,
        "name": span.name,
        "kind": ProtoSpan.SpanKind.Name(span.kind),
        "start_time_unix_nano": span.start_time_unix_nano,
        "end_time_unix_nano": span.end_time_unix_nano,
        "attributes": _attribute_map(span.attributes),
        "dropped_attributes_count": span.dropped_attributes_count,
        "events": [
            {
                "time_unix_nano": e.time_unix_nano,
                "name": e.name,
                "attributes": _attribute_map(e.attributes),
                "dropped_attributes_count": e.dropped_attributes_count,
            }
            for e in span.events
        ],
        "dropped_events_count": span.dropped_events_count,
        "links": [
            {
                "trace_id": ln.trace_id.hex(),
                "span_id": ln.span_id.hex(),
                "trace_state": ln.trace_state or None,
                "attributes": _attribute_map(ln.attributes),
                "dropped_attributes_count": ln.dropped_attributes_count,
                "flags": ln.flags,
            }
            for ln in span.links
        ],
        "dropped_links_count": span.dropped_links_count,
        "status": {
            "message": span.status.message or None,
            "code": ProtoStatus.StatusCode.Name(span.status.code),
        },
        "resource": {
            "attributes": _attribute_map(resource_spans.resource.attributes),
            "dropped_attributes_count": resource_spans.resource.dropped_attributes_count,
        },
        "resource_schema_url": resource_spans.schema_url or None,
        "instrumentation_scope": {
            "name": scope_spans.scope.name or None,
            "version": scope_spans.scope.version or None,
            "attributes": _attribute_map(scope_spans.scope.attributes),
            "dropped_attributes_count": scope_spans.scope.dropped_attributes_count,
        },
        "span_schema_url": scope_spans.schema_url or None,
    }


def _arrow_maps(value: Any) -> Any:
    """pyarrow takes a map as a list of (key, value) pairs: every `attributes` dict as one."""
    if isinstance(value, dict):
        return {
            k: list(v.items()) if k == "attributes" else _arrow_maps(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_arrow_maps(v) for v in value]
    return value


def spans_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """The rows as an Arrow table of `SPANS_ARROW` (to write as Parquet or Delta)."""
    return pa.Table.from_pylist([_arrow_maps(dict(r)) for r in rows], schema=SPANS_ARROW)


def spans_json_lines(rows: Sequence[Mapping[str, Any]], attributes: str = "object") -> list[str]:
    """The rows as JSON lines: `attributes` a JSON object ("object": Spark infers a struct of
    the dotted keys) or JSON text in a string column ("text")."""
    out = []
    for row in rows:
        row = dict(row)
        if attributes == "text":
            row["attributes"] = json.dumps(row["attributes"], ensure_ascii=False)
        elif attributes != "object":
            raise ValueError(attributes)
        out.append(json.dumps(row, ensure_ascii=False))
    return out


# --- requests to make them from --------------------------------------------------------------


def sample_requests(
    n: int, start: dt.datetime, chunk_id: str = "id", seed: int = 7
) -> list[Request]:
    """`n` requests a minute apart from `start` (so a run of them crosses a UTC midnight when
    `start` is late in a day), each with 0-6 documents from a pool of 40 chunks (repeats within
    a list included), the chunk id under the dotted path `chunk_id` (`id` or `metadata.<key>`);
    every 9th request has a document without it, every 13th no documents."""
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        documents = []
        size = 0 if i % 13 == 5 else rng.randint(1, 6)
        for rank in range(size):
            chunk = f"chunk-{rng.randrange(40):02d}"
            document: dict[str, Any] = {
                "page_content": f"text of {chunk}",
                "metadata": {"doc_uri": f"s3://docs/doc-{int(chunk[6:]) // 4}.md"},
                "score": round(1 - rank * 0.07 - rng.random() * 0.01, 4),
            }
            if not (i % 9 == 4 and rank == size - 1):
                if chunk_id == "id":
                    document["id"] = chunk
                elif chunk_id.startswith("metadata."):
                    document["metadata"][chunk_id.removeprefix("metadata.")] = chunk
                else:
                    raise ValueError(f"chunk_id {chunk_id!r}: `id` or `metadata.<key>`")
            documents.append(document)
        out.append(Request(start + dt.timedelta(minutes=i), documents))
    return out
