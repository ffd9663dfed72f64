"""The spans reader's rules by hand: served-log requests from spans as they are stored.

Pure Python, plain loops, written from the rules (docs: `inputs.served_logs.shape: spans`),
reading only what is stored (span rows or OTLP/JSON lines), never the generator's inputs. Its
requests feed tests/reference.py (`by_query`, `daily`, ...), which counts a request delivered
twice once and the copy as a duplicate row.

- A retrieval span is one served request: `mlflow` convention, `mlflow.spanType` is RETRIEVER
  (JSON-encoded, '"RETRIEVER"', or plain); `openinference`, `openinference.span.kind` is
  RETRIEVER. Every other span (agent, chain, tool, reranker, LLM) is none, whatever it holds.
- request_id = the span id in lower-case hex; served_at = the span's start time, UTC, to the
  microsecond (nanoseconds floored).
- results = the documents in stored order, rank = 1-based position: `mlflow`, the list in
  `mlflow.spanOutputs` (JSON text or a list); `openinference`, `retrieval.documents.N.*`
  flattened keys (rank N + 1) or a list under `retrieval.documents`.
- chunk_id = the value at the dotted path `chunk_id` in a document (defaults: `id` for mlflow,
  `document.id` for openinference), a key with dots matched whole (`document.id` in a flattened
  document) and a JSON-text object on the way decoded (OpenInference's `document.metadata`); a
  string as it is, a number (or a boolean) as its JSON text; missing, null, an object or a
  list: an entry with chunk_id None (set aside by the rules).
- No documents (the attribute missing or null, or an empty list) -> an empty list. Documents
  that are not a list -> results None (a malformed row).
- A span stored twice (same trace and span id) gives two requests: the copy is a duplicate.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

# convention -> (the span-kind attribute, the default chunk-id path)
CONVENTIONS = {
    "mlflow": ("mlflow.spanType", "id"),
    "openinference": ("openinference.span.kind", "document.id"),
}
RETRIEVER = "RETRIEVER"
_FLATTENED = re.compile(r"^retrieval\.documents\.(\d+)\.(.+)$")
_MISSING = object()


# --- spans from OTLP/JSON lines --------------------------------------------------------------


def any_value(value: Mapping[str, Any] | None) -> Any:
    """An OTLP/JSON AnyValue as a Python value (an unset one as None)."""
    if not value:
        return None
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])  # a decimal string in OTLP/JSON (a number is accepted)
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [any_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {
            kv["key"]: any_value(kv.get("value")) for kv in value["kvlistValue"].get("values", [])
        }
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    return None


def _attributes(key_values: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {kv["key"]: any_value(kv.get("value")) for kv in key_values or []}


def spans_from_otlp_lines(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Each span of each line (an ExportTraceServiceRequest), in order, as a row: ids as
    stored, times as integers, attributes (and the resource's) as Python values."""
    out = []
    for line in lines:
        if not line.strip():
            continue
        request = json.loads(line)
        for resource_spans in request.get("resourceSpans", []):
            resource = _attributes(resource_spans.get("resource", {}).get("attributes"))
            for scope_spans in resource_spans.get("scopeSpans", []):
                for span in scope_spans.get("spans", []):
                    start = span.get("startTimeUnixNano")
                    end = span.get("endTimeUnixNano")
                    out.append(
                        {
                            "trace_id": span.get("traceId"),
                            "span_id": span.get("spanId"),
                            "parent_span_id": span.get("parentSpanId") or None,
                            "name": span.get("name"),
                            "start_time_unix_nano": None if start is None else int(start),
                            "end_time_unix_nano": None if end is None else int(end),
                            "attributes": _attributes(span.get("attributes")),
                            "resource": {"attributes": resource},
                        }
                    )
    return out


# --- requests from spans ---------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A JSON-encoded string ('"RETRIEVER"') as its string; anything else as it is."""
    if isinstance(value, str) and value.startswith('"'):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        if isinstance(decoded, str):
            return decoded
    return value


def _as_object(value: Any) -> Any:
    """JSON text of an object or a list as that object or list; anything else as it is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _lookup(value: Any, parts: Sequence[str]) -> Any:
    """The value at a dotted path; a key holding dots is matched whole, longest first."""
    if not parts:
        return value
    value = _as_object(value)
    if not isinstance(value, Mapping):
        return _MISSING
    for cut in range(len(parts), 0, -1):
        key = ".".join(parts[:cut])
        if key in value:
            found = _lookup(value[key], parts[cut:])
            if found is not _MISSING:
                return found
    return _MISSING


def chunk_id_of(document: Any, path: str) -> str | None:
    """The chunk id at `path` in a document: text as it is, a number (or a boolean) as its JSON
    text; an object, a list, null or nothing there: None."""
    found = _as_object(_lookup(document, path.split(".")))
    if found is _MISSING or found is None or isinstance(found, Mapping | list):
        return None
    if isinstance(found, str):
        return found
    return json.dumps(found)


def _span_attributes(row: Mapping[str, Any]) -> Mapping[str, Any]:
    attributes = row.get("attributes")
    if isinstance(attributes, str):  # JSON text
        attributes = json.loads(attributes)
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):  # a Spark Row as a struct
        attributes = attributes.asDict(recursive=True)
    return attributes


def documents_of(attributes: Mapping[str, Any], convention: str) -> list[tuple[int, Any]] | None:
    """(rank, document) of a retrieval span in stored order; None when not a list."""
    if convention == "mlflow":
        stored: Any = attributes.get("mlflow.spanOutputs")
    else:
        stored = attributes.get("retrieval.documents", _MISSING)
        if stored is _MISSING:
            flattened: dict[int, dict[str, Any]] = {}
            for key, value in attributes.items():
                match = _FLATTENED.match(key)
                if match:
                    flattened.setdefault(int(match.group(1)), {})[match.group(2)] = value
            return [(n + 1, flattened[n]) for n in sorted(flattened)]
    stored = _as_object(stored)
    if stored is None:
        return []
    if not isinstance(stored, list):
        return None
    return list(enumerate(stored, start=1))


def served_at_of(start_time_unix_nano: Any) -> dt.datetime | None:
    """A span's start (nanoseconds since the epoch) as a UTC datetime, to the microsecond."""
    if start_time_unix_nano is None:
        return None
    return EPOCH + dt.timedelta(microseconds=int(start_time_unix_nano) // 1000)


def requests_from_spans(
    rows: Iterable[Mapping[str, Any]], convention: str, chunk_id: str | None = None
) -> list[dict[str, Any]]:
    """The served-log requests in span rows (as stored, or from `spans_from_otlp_lines`), in
    their order, a span stored twice twice: {request_id, served_at, results, trace_id}."""
    kind_key, default_path = CONVENTIONS[convention]
    path = chunk_id or default_path
    out = []
    for row in rows:
        attributes = _span_attributes(row)
        if _plain(attributes.get(kind_key)) != RETRIEVER:
            continue
        documents = documents_of(attributes, convention)
        results = None
        if documents is not None:
            results = [
                {"rank": rank, "chunk_id": chunk_id_of(document, path)}
                for rank, document in documents
            ]
        span_id = row.get("span_id")
        out.append(
            {
                "request_id": None if span_id is None else str(span_id).lower(),
                "served_at": served_at_of(row.get("start_time_unix_nano")),
                "results": results,
                "trace_id": row.get("trace_id"),
            }
        )
    return out


def requests_from_otlp_lines(
    lines: Iterable[str], convention: str, chunk_id: str | None = None
) -> list[dict[str, Any]]:
    """The served-log requests in OTLP/JSON lines (see `requests_from_spans`)."""
    return requests_from_spans(spans_from_otlp_lines(lines), convention, chunk_id)
