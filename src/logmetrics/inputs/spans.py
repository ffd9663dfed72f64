"""Trace spans read as served requests (`inputs.served_logs.shape: spans`; docs/inputs.md,
"Traces"): a retrieval span is one request, everything else in the trace is not.

- **Which spans**: `spans.convention` `mlflow` (`mlflow.spanType` RETRIEVER, JSON-encoded as
  MLflow writes it or plain) or `openinference` (`openinference.span.kind` RETRIEVER).
- **The request**: `request_id` = the span id in lower-case hex (a binary id, or MLflow's base64
  one, turned into it), `served_at` = its start (nanoseconds since the epoch, floored to the
  microsecond; UTC), `results` = its documents in their stored order, rank = 1-based position
  (`mlflow.spanOutputs`, a list; `retrieval.documents.N.document.*`, rank N + 1, or a list under
  `retrieval.documents`); a document's chunk id at the dotted path `spans.chunk_id`, its tokens
  at `spans.tokens`. No documents: an empty list; documents that are not a list: no `results`
  (a malformed row, quarantined).
- **The attributes**, however the spans are stored: a map of strings (MLflow's own span records
  JSON-encode each value), a struct, JSON text, a VARIANT, or OTLP key-values (`inputs.otlp`).
  Only what a request needs is read from them; no text of theirs (prompts, document contents)
  reaches the contract's columns, so none reaches a table, the quarantine or a message.

Everything is decided from the schema (`SpansPlan`) and applied as built-in column functions:
no Python per row.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DoubleType,
    IntegralType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from logmetrics.config import SPAN_COLUMNS, ServedLogsInput, SpansConfig
from logmetrics.console import did_you_mean
from logmetrics.errors import InputError
from logmetrics.inputs.files import utc_window
from logmetrics.inputs.layout import noun
from logmetrics.inputs.otlp import ANY_VALUE

RETRIEVER = "RETRIEVER"
KIND_ATTRIBUTE = {"mlflow": "mlflow.spanType", "openinference": "openinference.span.kind"}
"""The attribute that says a span's kind, by convention."""
MLFLOW_DOCUMENTS = "mlflow.spanOutputs"
OPENINFERENCE_DOCUMENTS = "retrieval.documents"
SPAN_NAME = "name"
"""A segment of this name is the span's own name."""
TRACE_ID = "trace_id"
"""Carried beside a request into the contract's rows: a quarantined one keeps its trace."""
_DEPTH = 4  # levels of an OTLP array or key-value list turned into JSON: documents, their
# fields, a field's fields (metadata.chunk_id), a value
_BASE64_ID = r"^[A-Za-z0-9+/]{10,}={0,2}$"


@dataclass(frozen=True)
class Attributes:
    """How one column of attributes is read: `kind` says how they are stored (map, struct,
    json, variant, otlp), `fields` a struct's field names."""

    column: str
    kind: str
    fields: tuple[str, ...] = ()
    values: DataType | None = None  # a map's value type
    within: str | None = None  # JSON text or a VARIANT: the key they may sit under (attributes)

    @classmethod
    def of(cls, column: str, data_type: DataType, what: str) -> Attributes:
        if isinstance(data_type, MapType):
            return cls(column, "map", values=data_type.valueType)
        if isinstance(data_type, StructType):
            return cls(column, "struct", tuple(data_type.names))
        if isinstance(data_type, StringType):
            return cls(column, "json")
        if isinstance(data_type, ArrayType) and _is_key_values(data_type):
            return cls(column, "otlp")
        if data_type.typeName() == "variant":
            return cls(column, "variant")
        raise InputError(
            f"{what}: column {column!r} is {data_type.simpleString()}; `shape: spans` reads "
            "attributes as a map of strings, a struct, JSON text or a VARIANT"
        )

    def value(self, key: str, deep: bool = False) -> Column:
        """The attribute `key` as text: a string as itself, anything else as its JSON text;
        null where the span has none. An OTLP array or key-value list is turned into JSON
        only when `deep` (the documents): elsewhere it stays the AnyValue's own JSON."""
        column = _quoted(self.column)
        if self.kind == "map":
            return _as_text(F.element_at(column, F.lit(key)), self.values)
        if self.kind == "struct":
            if key not in self.fields:
                return F.lit(None).cast("string")
            return _as_text(column.getField(key), None)
        if self.kind in ("json", "variant"):
            paths = [_json_path(key)]
            if self.within is not None:
                paths.insert(0, f"$.{self.within}{_json_path(key)[1:]}")
            found = [
                F.get_json_object(column, path)
                if self.kind == "json"
                else F.expr(f"try_variant_get({_sql(self.column)}, \"{path}\", 'string')")
                for path in paths
            ]
            return F.coalesce(*found) if len(found) > 1 else found[0]
        matching = F.filter(column, lambda kv: kv["key"] == F.lit(key))
        return any_value_text(F.get(matching, 0)["value"], deep)

    def entries(self) -> Column:
        """Every attribute as (key, text): array<struct<key, value>>."""
        column = _quoted(self.column)
        if self.kind == "map":
            return F.transform(
                F.map_entries(column),
                lambda e: F.struct(
                    e["key"].alias("key"), _as_text(e["value"], self.values).alias("value")
                ),
            )
        if self.kind == "struct":
            return F.array(
                *[
                    F.struct(F.lit(f).alias("key"), self.value(f).alias("value"))
                    for f in self.fields
                ]
            )
        if self.kind in ("json", "variant"):
            text = column if self.kind == "json" else F.expr(f"to_json({_sql(self.column)})")
            return F.map_entries(F.from_json(text, "map<string, string>"))
        return F.transform(
            column,
            lambda kv: F.struct(kv["key"].alias("key"), any_value_text(kv["value"]).alias("value")),
        )


def _is_key_values(data_type: ArrayType) -> bool:
    element = data_type.elementType
    return isinstance(element, StructType) and {"key", "value"} <= set(element.names)


@dataclass(frozen=True)
class SpansPlan:
    """How spans with this schema are read as requests: the data's columns for the span id, the
    trace id, the name and the start, how the attributes (and the resource's) are stored."""

    span_id: str
    span_id_type: DataType
    trace_id: str | None
    name: str | None
    start: str
    start_type: DataType
    attributes: Attributes
    resource: Attributes | None
    columns: frozenset[str]


def _span_column(fields: Mapping[str, DataType], source: ServedLogsInput, contract: str) -> str:
    """The data's own name of the span column `contract` (as `columns` maps it)."""
    return getattr(source.columns, contract) or contract


def _present(fields: Mapping[str, DataType], source: ServedLogsInput, contract: str) -> str | None:
    """`_span_column`, None when the data has no such column."""
    own = _span_column(fields, source, contract)
    return own if own in fields else None


def _required(
    fields: Mapping[str, DataType], source: ServedLogsInput, what: str, contract: str
) -> str:
    """`_span_column`, which must be there: an InputError naming it otherwise."""
    own = _span_column(fields, source, contract)
    if own in fields:
        return own
    found = sorted(set(fields) - {"_corrupt_record"})
    if getattr(source.columns, contract) is not None:
        raise InputError(
            f"columns.{contract}: no column {own!r} in the {noun(what)}{did_you_mean(own, found)}"
        )
    raise InputError(
        f"{what}: required column {own!r} is missing (found: {', '.join(found) or 'none'}); "
        "`shape: spans` reads a span table's span_id, start_time_unix_nano and attributes"
    )


def _typed(
    fields: Mapping[str, DataType],
    name: str,
    allowed: tuple[type[DataType], ...],
    needed: str,
    what: str,
) -> DataType:
    """The type of the column `name`, which must be one of `allowed`: an InputError otherwise."""
    data_type = fields[name]
    if not isinstance(data_type, allowed):
        raise InputError(
            f"{what}: column {name!r} is {data_type.simpleString()}; a span's {needed}"
        )
    return data_type


_START_TYPES = (IntegralType, StringType, TimestampType, TimestampNTZType)


def span_start(
    fields: Mapping[str, DataType], source: ServedLogsInput, what: str
) -> tuple[str, DataType]:
    """The spans' start column and its type (nanoseconds, or a timestamp): all that a pass
    placing spans on their days needs (`started_between`, `spans_served_at`)."""
    start = _required(fields, source, what, "start_time_unix_nano")
    return start, _typed(fields, start, _START_TYPES, "start is in nanoseconds", what)


def spans_plan(fields: Mapping[str, DataType], source: ServedLogsInput, what: str) -> SpansPlan:
    """The plan for spans with this schema ({name: type}); an InputError naming the data's
    column when one is missing or of a type a spans table cannot hold. No session needed."""
    span_id, start, attributes = (
        _required(fields, source, what, contract)
        for contract in ("span_id", "start_time_unix_nano", "attributes")
    )
    _typed(fields, span_id, (StringType, BinaryType), "id is text or binary", what)
    _typed(fields, start, _START_TYPES, "start is in nanoseconds", what)
    resource = _present(fields, source, "resource")
    return SpansPlan(
        span_id=span_id,
        span_id_type=fields[span_id],
        trace_id=_present(fields, source, "trace_id"),
        name=_present(fields, source, "name"),
        start=start,
        start_type=fields[start],
        attributes=Attributes.of(attributes, fields[attributes], what),
        resource=_resource(resource, fields[resource], what) if resource else None,
        columns=frozenset(fields),
    )


def _resource(column: str, data_type: DataType, what: str) -> Attributes | None:
    """The resource's attributes: a struct's `attributes` field, or the column itself."""
    if isinstance(data_type, StructType) and "attributes" in data_type.names:
        inner = Attributes.of("attributes", data_type["attributes"].dataType, what)
        return Attributes(f"{column}.attributes", inner.kind, inner.fields, inner.values)
    try:
        found = Attributes.of(column, data_type, what)
    except InputError:
        return None  # a resource without attributes: no resource segments
    if found.kind in ("json", "variant"):  # {"attributes": {...}} as text, or its attributes
        return Attributes(column, found.kind, within="attributes")
    return found


# --- the retrieval spans as requests ---------------------------------------------------------


def retrieval_filter(plan: SpansPlan, convention: str) -> Column:
    """Whether a span is a retrieval of `convention`: its kind attribute, JSON-encoded or
    plain, is RETRIEVER."""
    return F.coalesce(
        unquoted(plan.attributes.value(KIND_ATTRIBUTE[convention])) == F.lit(RETRIEVER),
        F.lit(False),
    )


def spans_to_contract(
    spans_df: DataFrame,
    plan: SpansPlan,
    source: ServedLogsInput,
    segment_by: Sequence[str],
    kept: Sequence[str] = (),
) -> DataFrame:
    """The retrieval spans of `spans_df` as the contract's requests: request_id, served_at,
    results (rank, chunk_id, and tokens where `spans.tokens` names them), the trace's id, a
    column per segment (an attribute, the resource's, or the span's name), and the `kept`
    columns (a date partition). Nothing else of a span rides along: not its attributes, nor
    its events, links or status, which may hold users' text."""
    settings = source.spans
    document = _document_reader(settings.chunk_id_path(), settings.tokens)
    tokens = settings.tokens is not None
    if settings.convention == "mlflow":
        documents = plan.attributes.value(MLFLOW_DOCUMENTS, deep=True)
        results = _listed_documents(documents, document, tokens)
    else:
        listed = plan.attributes.value(OPENINFERENCE_DOCUMENTS, deep=True)
        results = F.when(listed.isNull(), _flattened_documents(plan, settings)).otherwise(
            _listed_documents(listed, document, tokens)
        )
    return spans_df.where(retrieval_filter(plan, settings.convention)).select(
        *[_quoted(c) for c in kept],
        request_id(plan).alias("request_id"),
        started_at(plan.start, plan.start_type).alias("served_at"),
        results.alias("results"),
        _trace_id(plan).alias(TRACE_ID),
        *[segment_value(plan, name).alias(name) for name in segment_by],
    )


def started_between(column: str, data_type: DataType, start: dt.date, end: dt.date) -> Column:
    """Spans that began on the UTC dates start..end, or whose start is unknown: a filter on the
    stored nanoseconds (the `column` of that type) that Parquet and Delta push down to their
    files (the served_at filter after it is the exact one)."""
    if not isinstance(data_type, IntegralType):
        return F.lit(True)
    lo, hi = (int(moment.timestamp()) * 10**9 for moment in utc_window(start, end))
    began = _quoted(column)
    return began.isNull() | ((began >= F.lit(lo)) & (began < F.lit(hi)))


def spans_json_schema(source: ServedLogsInput) -> StructType:
    """What JSON lines of spans are read as: the span columns by the data's names, the times as
    text (a number or a string), the attributes and the resource as their raw JSON."""
    names = source.columns
    return StructType(
        [
            StructField(getattr(names, column, None) or column, StringType())
            for column in (*SPAN_COLUMNS, "parent_span_id", "end_time_unix_nano")
        ]
    )


def spans_served_at(spans_df: DataFrame, column: str, data_type: DataType) -> DataFrame:
    """Every span's `served_at` (its start: the `column` of that type), whatever its kind, the
    other columns riding along: the spans a file holds place it on its days (the narrow pass),
    as its footers do."""
    return spans_df.withColumn("served_at", started_at(column, data_type))


def _span_columns(plan: SpansPlan) -> set[str]:
    names = {plan.span_id, plan.start, plan.attributes.column.split(".")[0]}
    names |= {c for c in (plan.trace_id, plan.name) if c}
    if plan.resource is not None:
        names.add(plan.resource.column.split(".")[0])
    return names | {"parent_span_id", "end_time_unix_nano"} & plan.columns


def request_id(plan: SpansPlan) -> Column:
    """The span id in lower-case hex: binary as its hex, MLflow's base64 text decoded."""
    return _hex_id(_quoted(plan.span_id), plan.span_id_type)


def _trace_id(plan: SpansPlan) -> Column:
    if plan.trace_id is None:
        return F.lit(None).cast("string")
    return _hex_id(_quoted(plan.trace_id), None)


def _hex_id(column: Column, data_type: DataType | None) -> Column:
    if isinstance(data_type, BinaryType):
        return F.lower(F.hex(column))
    text = column.cast("string")
    base64 = text.rlike(_BASE64_ID) & ~text.rlike(r"^[0-9A-Fa-f]+$")
    return F.when(base64, F.lower(F.hex(F.unbase64(text)))).otherwise(F.lower(text))


def started_at(column: str, data_type: DataType) -> Column:
    """A span's start (the `column` of that type) as a UTC timestamp, its nanoseconds floored
    to the microsecond."""
    if isinstance(data_type, TimestampType | TimestampNTZType):
        return _quoted(column).cast("timestamp")
    nanos = f"CAST({_sql(column)} AS BIGINT)"
    # Integer division: a long's nanoseconds exceed a double's 53 bits.
    return F.timestamp_micros(F.expr(f"({nanos} - pmod({nanos}, 1000)) div 1000"))


def segment_value(plan: SpansPlan, name: str) -> Column:
    """A segment's value for a span: `name` is the span's own name; else a column of the table,
    an attribute of the span or of its resource (`service.name`), in that order."""
    if name == SPAN_NAME and plan.name is not None:
        return _quoted(plan.name)
    if name in plan.columns and name not in _span_columns(plan):
        return _quoted(name).cast("string")
    found = unquoted(plan.attributes.value(name))
    if plan.resource is not None:
        found = F.coalesce(found, unquoted(plan.resource.value(name)))
    return found


# --- documents --------------------------------------------------------------------------------

Document = Callable[[Column], tuple[Column, Column | None]]


def _document_reader(chunk_id: str, tokens: str | None) -> Document:
    """(chunk id, tokens) of a document given as JSON text."""
    chunk_parts, token_parts = chunk_id.split("."), tokens.split(".") if tokens else None

    def read(document: Column) -> tuple[Column, Column | None]:
        found = scalar(walk(document, chunk_parts))
        counted = None if token_parts is None else walk(document, token_parts).cast("double")
        return found, counted

    return read


def _entry(rank: Column, found: tuple[Column, Column | None]) -> Column:
    chunk_id, tokens = found
    fields = [rank.cast("long").alias("rank"), chunk_id.cast("string").alias("chunk_id")]
    if tokens is not None:
        fields.append(tokens.alias("tokens"))
    return F.struct(*fields)


def _entry_type(tokens: bool) -> ArrayType:
    fields = [StructField("rank", LongType()), StructField("chunk_id", StringType())]
    if tokens:
        fields.append(StructField("tokens", DoubleType()))
    return ArrayType(StructType(fields))


def _listed_documents(text: Column, document: Document, tokens: bool) -> Column:
    """The entries of a list of documents given as JSON text: empty when there is none (no
    attribute, or null), null when it is not a list."""
    listed = unquoted(text)
    documents = F.from_json(listed, "array<string>")
    entries = F.transform(documents, lambda d, i: _entry(i + 1, document(d)))
    none = listed.isNull() | (F.trim(listed) == F.lit("null"))
    return F.when(none, F.array().cast(_entry_type(tokens))).otherwise(entries)


_FLATTENED = r"^retrieval\.documents\.([0-9]+)\.(.+)$"


def _flattened_documents(plan: SpansPlan, settings: SpansConfig) -> Column:
    """OpenInference's flattened documents, `retrieval.documents.N.<field>`: one entry per N in
    order, rank N + 1; a field with dots (`document.id`) matched whole, longest first."""
    flat = F.transform(
        F.filter(plan.attributes.entries(), lambda e: e["key"].rlike(_FLATTENED)),
        lambda e: F.struct(
            F.regexp_extract(e["key"], _FLATTENED, 1).cast("int").alias("n"),
            F.regexp_extract(e["key"], _FLATTENED, 2).alias("rest"),
            e["value"].alias("value"),
        ),
    )
    numbers = F.array_sort(F.array_distinct(F.transform(flat, lambda f: f["n"])))

    def at(n: Column, parts: list[str]) -> Column:
        tries = []
        for cut in range(len(parts), 0, -1):
            matched = F.filter(flat, _document_field(n, ".".join(parts[:cut])))
            tries.append(walk(F.get(matched, 0)["value"], parts[cut:]))
        return F.coalesce(*tries)

    chunk_parts = settings.chunk_id_path().split(".")
    token_parts = settings.tokens.split(".") if settings.tokens else None
    return F.transform(
        numbers,
        lambda n: _entry(
            n + 1,
            (
                scalar(at(n, chunk_parts)),
                None if token_parts is None else at(n, token_parts).cast("double"),
            ),
        ),
    )


def _document_field(n: Column, field: str) -> Callable[[Column], Column]:
    """Whether a flattened attribute is document `n`'s `field`."""
    return lambda f: (f["n"] == n) & (f["rest"] == F.lit(field))


def walk(text: Column, parts: Sequence[str]) -> Column:
    """The value at a dotted path of JSON text, as text (a string as itself); a key holding dots
    matched whole, longest first; a string holding JSON text on the way read as that JSON."""
    if not parts:
        return text
    tries = [
        walk(F.get_json_object(text, _json_path(".".join(parts[:cut]))), parts[cut:])
        for cut in range(len(parts), 0, -1)
    ]
    return F.coalesce(*tries) if len(tries) > 1 else tries[0]


def scalar(text: Column) -> Column:
    """A chunk id: text or a number as its text; an object or a list is none."""
    return F.when(~F.ltrim(text).rlike(r"^[\[{]"), text)


def unquoted(text: Column) -> Column:
    """JSON-encoded text ('"RETRIEVER"', as MLflow stores every value) as the text it encodes;
    any other text as it is."""
    return F.when(text.startswith('"'), F.get_json_object(text, "$")).otherwise(text)


# --- OTLP AnyValues as text -------------------------------------------------------------------


def any_value_text(value: Column, deep: bool = False) -> Column:
    """An OTLP `AnyValue` (`otlp.ANY_VALUE`) as text: a string as itself, a number or a boolean
    as its JSON text; an array or a key-value list as JSON (to a few levels) when `deep`, else
    as its AnyValue JSON (no attribute but the documents is read into)."""
    nested = (
        [_array_json(value["arrayValue"], _DEPTH), _kvlist_json(value["kvlistValue"], _DEPTH)]
        if deep
        else [value["arrayValue"], value["kvlistValue"]]
    )
    return F.coalesce(
        value["stringValue"],
        value["intValue"],
        value["doubleValue"],
        value["boolValue"],
        *nested,
        value["bytesValue"],
    )


def _json_value(value: Column, depth: int) -> Column:
    """An AnyValue as a JSON value's text."""
    found = F.coalesce(
        _json_string(value["stringValue"]),
        value["intValue"],
        value["doubleValue"],
        value["boolValue"],
        *(
            [_array_json(value["arrayValue"], depth), _kvlist_json(value["kvlistValue"], depth)]
            if depth > 0
            else []
        ),
        _json_string(value["bytesValue"]),
    )
    return F.coalesce(found, F.lit("null"))


def _array_json(raw: Column, depth: int) -> Column:
    values = F.from_json(raw, f"struct<values: array<{ANY_VALUE}>>")["values"]
    items = F.transform(values, lambda v: _json_value(v, depth - 1))
    return F.concat(F.lit("["), F.array_join(items, ","), F.lit("]"))


def _kvlist_json(raw: Column, depth: int) -> Column:
    values = F.from_json(raw, f"struct<values: array<struct<key: string, value: {ANY_VALUE}>>>")
    pairs = F.transform(
        values["values"],
        lambda kv: F.concat(
            _json_string(kv["key"]), F.lit(":"), _json_value(kv["value"], depth - 1)
        ),
    )
    return F.concat(F.lit("{"), F.array_join(pairs, ","), F.lit("}"))


def _json_string(text: Column) -> Column:
    """Text as a JSON string literal (null stays null)."""
    return F.when(text.isNotNull(), F.regexp_extract(F.to_json(F.array(text)), r"^\[(.*)\]$", 1))


# --- helpers ----------------------------------------------------------------------------------


def _as_text(value: Column, data_type: DataType | None) -> Column:
    if data_type is None or isinstance(data_type, StringType):
        return value.cast("string")
    if isinstance(data_type, StructType | ArrayType | MapType):
        return F.to_json(value)
    return value.cast("string")


def _json_path(key: str) -> str:
    """A JSON path to one key, which may hold dots: `$['mlflow.spanType']`."""
    if re.search(r"['\]\\]", key):
        raise InputError(f"the attribute name {key!r} cannot be looked up")
    return f"$['{key}']"


def _quoted(name: str) -> Column:
    """The column `name` (a struct's field after a dot: `resource.attributes`)."""
    head, _, field = name.partition(".")
    column = F.col("`" + head.replace("`", "``") + "`")
    return column.getField(field) if field else column


def _sql(name: str) -> str:
    head, _, field = name.partition(".")
    quoted = "`" + head.replace("`", "``") + "`"
    return f"{quoted}.`{field}`" if field else quoted


# --- what a run checks before its main pass ---------------------------------------------------

SAMPLED_SPANS = 200
"""Retrieval spans whose documents a run looks at before its main pass, for the chunk-id path."""


def sampled_documents(spans_df: DataFrame, plan: SpansPlan, convention: str) -> DataFrame:
    """(this, other, documents) of up to `SAMPLED_SPANS` retrieval spans of either convention:
    whether the span is a retrieval of `convention` or of the other one, and its documents as
    JSON text (a flattened document as one object of its fields). For `check_sample`."""
    other = next(c for c in KIND_ATTRIBUTE if c != convention)
    if convention == "mlflow":
        listed = unquoted(plan.attributes.value(MLFLOW_DOCUMENTS, deep=True))
        documents = F.from_json(listed, "array<string>")
    else:
        listed = F.from_json(
            unquoted(plan.attributes.value(OPENINFERENCE_DOCUMENTS, deep=True)), "array<string>"
        )
        flat = F.filter(plan.attributes.entries(), lambda e: e["key"].rlike(_FLATTENED))
        documents = F.coalesce(listed, _flattened_objects(flat))
    this_kind, other_kind = retrieval_filter(plan, convention), retrieval_filter(plan, other)
    return (
        spans_df.where(this_kind | other_kind)
        .select(this_kind.alias("this"), other_kind.alias("other"), documents.alias("documents"))
        .limit(SAMPLED_SPANS)
    )


def _flattened_objects(flat: Column) -> Column:
    """OpenInference's flattened documents as JSON objects of their fields, in order of N."""
    entries = F.transform(
        flat,
        lambda e: F.struct(
            F.regexp_extract(e["key"], _FLATTENED, 1).cast("int").alias("n"),
            F.regexp_extract(e["key"], _FLATTENED, 2).alias("field"),
            e["value"].alias("value"),
        ),
    )
    numbers = F.array_sort(F.array_distinct(F.transform(entries, lambda e: e["n"])))
    return F.transform(
        numbers,
        lambda n: F.to_json(
            F.map_from_entries(
                F.transform(
                    F.filter(entries, lambda e: e["n"] == n),
                    lambda e: F.struct(e["field"], e["value"]),
                )
            )
        ),
    )


def check_sample(
    rows: Sequence[tuple[bool, bool, Sequence[str] | None]], source: ServedLogsInput, days: str
) -> None:
    """A run's retrieval spans, sampled (`sampled_documents`), as its settings read them: none
    of `spans.convention` where spans of the other convention are there, or a chunk-id (or
    tokens) path that no document holds, is an InputError naming it and what the data has.
    Only the documents' field names are ever said, never their values."""
    settings = source.spans
    if rows and not any(this for this, _, _ in rows):
        other = next(c for c in KIND_ATTRIBUTE if c != settings.convention)
        raise InputError(
            f"{source.described}: no retrieval span of the {settings.convention} convention "
            f"({KIND_ATTRIBUTE[settings.convention]} {RETRIEVER}) on {days}, but "
            f"{other} retrieval spans ({KIND_ATTRIBUTE[other]} {RETRIEVER}) are there: set "
            f"inputs.served_logs.spans.convention: {other}"
        )
    documents = [
        parsed
        for this, _, listed in rows
        if this
        for text in listed or []
        if isinstance(parsed := _parsed(text), dict)
    ]
    if not documents:
        return
    for key, path in (("chunk_id", settings.chunk_id_path()), ("tokens", settings.tokens)):
        if path is None or any(_lookup(d, path.split(".")) is not None for d in documents):
            continue
        known = sorted({p for d in documents for p in _paths(d)})
        raise InputError(
            f"spans.{key}: no field {path!r} in the retrieval spans' documents"
            f"{did_you_mean(path, known)}"
        )


def _parsed(text: object) -> object:
    """JSON text as its value (a string holding JSON read as that JSON); else as it is."""
    if isinstance(text, str) and text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _lookup(value: object, parts: Sequence[str]) -> object:
    """`walk`'s rule in Python: the value at a dotted path, keys with dots matched whole,
    longest first, JSON text on the way read as JSON; None where there is none."""
    if not parts:
        return value
    value = _parsed(value)
    if not isinstance(value, dict):
        return None
    for cut in range(len(parts), 0, -1):
        key = ".".join(parts[:cut])
        if key in value and (found := _lookup(value[key], parts[cut:])) is not None:
            return found
    return None


def _paths(value: object, prefix: str = "", depth: int = 3) -> list[str]:
    """The dotted paths of a document's fields, into objects (and JSON text of them)."""
    value = _parsed(value)
    if not isinstance(value, dict) or depth == 0:
        return []
    found = []
    for key, inner in value.items():
        path = f"{prefix}{key}"
        found.append(path)
        found.extend(_paths(inner, f"{path}.", depth - 1))
    return found
