"""Typed, frozen configuration: layered YAML files plus `--set section.key=value` overrides.

Every key, its type and its default is declared here, once; unknown keys are rejected.
The whole config is validated before Spark starts, and every problem is one line that names
the key (`ConfigError`, exit status 2).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from logmetrics.console import did_you_mean
from logmetrics.errors import ConfigError
from logmetrics.redaction import REDACTED, looks_secret

_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SEGMENT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_PROPERTY_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_RESERVED_COLUMNS = {"request_id", "served_at", "results", "metric_date"}
_LIST_LEVEL = {"request_id", "served_at", "results"}  # columns in every shape, not fields
_BY_QUERY_COLUMNS = {
    "metric_date",
    "request_id",
    "served_at",
    "k",
    "unique_clusters",
    "results",
    "missing_cluster_results",
    "cluster_table_version",
    "run_id",
    "computed_at",
}
"""unique_clusters_by_query's own columns (`schemas.BY_QUERY`), which a segment column may not
be named like: written out, so that the config loads where PySpark is not installed
(`logmetrics ready` on an Airflow worker; tests/test_config.py holds them equal)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SPARK_KEY = re.compile(r"^[^\s=]+$")


def _no_control_characters(value: str) -> str:
    """Paths and Spark settings go into SQL identifiers, Hadoop paths, log lines and the
    JVM's command line: a newline or another control character there is never meant."""
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters (newline, tab, ...)")
    return value


Text = Annotated[str, AfterValidator(_no_control_characters)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_TABLE_PART = r"(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`\x00-\x1f]|``)+`)"
_TABLE_NAME = re.compile(rf"^{_TABLE_PART}(?:\.{_TABLE_PART}){{0,2}}$")
_DELTA_PATH_TABLE = re.compile(r"^delta\.`((?:[^`]|``)+)`$", re.IGNORECASE)


def _table_name(value: str | None) -> str | None:
    """`catalog.schema.table`, `schema.table`, `table` or ``delta.`/path` ``: names the session's
    catalog resolves (parts may be back-quoted)."""
    if value is not None and not _TABLE_NAME.match(value):
        raise ValueError(
            "must be a table name the catalog resolves: catalog.schema.table, schema.table, "
            "or delta.`/path`"
        )
    return value


def delta_path_of(table: str | None) -> str | None:
    """The path of a ``delta.`/path` `` table name, or None for any other name."""
    match = _DELTA_PATH_TABLE.match(table or "")
    return match.group(1).replace("``", "`") if match else None


_COLUMN_HELP = "The data's own name of the contract's `{}` ({}); null: `{}` itself."


def _mapped(name: str, what: str) -> Any:
    return Field(default=None, description=_COLUMN_HELP.format(name, what, name))


class LogColumns(_Section):
    """The served logs' own column names for the contract's (docs/inputs.md, "Your column
    names"); an unmapped name means the contract's own."""

    request_id: Text | None = _mapped("request_id", "a column")
    served_at: Text | None = _mapped("served_at", "a column")
    results: Text | None = _mapped("results", "the list column: nested and ids shapes")
    rank: Text | None = _mapped(
        "rank", "a field of each entry in the nested shape, a column in the exploded one"
    )
    chunk_id: Text | None = _mapped(
        "chunk_id", "a field of each entry in the nested shape, a column in the exploded one"
    )
    tokens: Text | None = _mapped(
        "tokens", "an optional field or column: the result's prompt tokens"
    )
    span_id: Text | None = _mapped("span_id", "spans shape: the span's id, the request's id")
    trace_id: Text | None = _mapped("trace_id", "spans shape: the trace's id")
    name: Text | None = _mapped("name", "spans shape: the span's name")
    start_time_unix_nano: Text | None = _mapped(
        "start_time_unix_nano", "spans shape: when the span began, the request's served_at"
    )
    attributes: Text | None = _mapped("attributes", "spans shape: the span's attributes")
    resource: Text | None = _mapped(
        "resource", "spans shape: the resource, or its attributes (service.name, ...)"
    )

    def mapped(self) -> dict[str, str]:
        """{contract name: the data's name} for the names given."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


SPAN_COLUMNS = ("span_id", "trace_id", "name", "start_time_unix_nano", "attributes", "resource")
"""The span columns a spans table is read from (OpenTelemetry's names), mappable in `columns`."""
SPAN_CHUNK_ID = {"mlflow": "id", "openinference": "document.id"}
"""Where a retrieval span's document holds its chunk id, by convention, unless
`inputs.served_logs.spans.chunk_id` says otherwise."""
_DOTTED_PATH = re.compile(r"^[A-Za-z0-9_$@-]+(\.[A-Za-z0-9_$@-]+)*$")


class SpansConfig(_Section):
    """How retrieval spans are read as served requests (`shape: spans`; docs/inputs.md,
    "Traces")."""

    convention: Literal["mlflow", "openinference"] = Field(
        default="mlflow",
        description=(
            "mlflow: a retrieval span has mlflow.spanType RETRIEVER, its documents are "
            "mlflow.spanOutputs; openinference: openinference.span.kind RETRIEVER, its "
            "documents retrieval.documents.N.document.* (or a list under retrieval.documents)."
        ),
    )
    chunk_id: Text | None = Field(
        default=None,
        description=(
            "The dotted path in a document that holds the chunk id (id, metadata.chunk_id, "
            "metadata.doc_uri); null: id (mlflow) or document.id (openinference)."
        ),
    )
    tokens: Text | None = Field(
        default=None,
        description="The dotted path in a document that holds its prompt tokens, if any.",
    )

    @field_validator("chunk_id", "tokens")
    @classmethod
    def _a_dotted_path(cls, value: str | None) -> str | None:
        if value is not None and not _DOTTED_PATH.match(value):
            raise ValueError("must be a dotted path of field names, e.g. metadata.chunk_id")
        return value

    def chunk_id_path(self) -> str:
        """The path of the chunk id in a document: `chunk_id`, or the convention's own."""
        return self.chunk_id or SPAN_CHUNK_ID[self.convention]


class ClusterColumns(_Section):
    """The cluster table's own column names for the contract's `chunk_id` and `cluster_id`."""

    chunk_id: Text | None = _mapped("chunk_id", "a column")
    cluster_id: Text | None = _mapped("cluster_id", "a column")

    def mapped(self) -> dict[str, str]:
        """{contract name: the data's name} for the names given."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class _TableInput(_Section):
    """An input read from a path or, in its place, a table the session's catalog resolves."""

    path: Text | None = Field(default=None, description="Where the input lies: a path.")
    table: Text | None = Field(
        default=None,
        description=(
            "In place of `path`: a table name the session's catalog resolves "
            "(catalog.schema.table on Unity Catalog, schema.table on a Hive metastore, "
            "delta.`/path` anywhere); the table's own format is read."
        ),
    )

    @field_validator("table")
    @classmethod
    def _a_table_name(cls, value: str | None) -> str | None:
        return _table_name(value)

    @model_validator(mode="after")
    def _path_or_table(self) -> _TableInput:
        if (self.path is None) == (self.table is None):
            raise ValueError("set exactly one of `path` and `table`")
        return self

    @property
    def location(self) -> str | None:
        """The path its files are read from: `path`, or a ``delta.`/path` `` table's; None for
        a table only the catalog can place."""
        return self.path if self.path is not None else delta_path_of(self.table)

    @property
    def by_catalog(self) -> bool:
        """Whether it is a table only the session's catalog can resolve (no path known)."""
        return self.location is None

    def file_format(self, declared: str) -> str:
        """The format its location's files are read as: a ``delta.`/path` `` table is Delta."""
        return "delta" if self.path is None else declared

    def shown(self, what: str) -> str:
        """`served logs at /path` or `served logs table main.serving.log`: its name in messages."""
        return f"{what} at {self.path}" if self.path is not None else f"{what} table {self.table}"


class ServedLogsInput(_TableInput):
    """The served top-k logs: one row per served request (or per result: `shape`)."""

    format: Literal["parquet", "delta", "json", "otlp"] = Field(
        default="parquet",
        description="parquet (any layout), delta, json (JSON lines), or otlp (OTLP/JSON lines "
        "as an OpenTelemetry Collector's file exporter writes them, with `shape: spans`); a "
        "`table` is read as its catalog says.",
    )
    shape: Literal["nested", "ids", "exploded", "spans"] = Field(
        default="nested",
        description=(
            "How the results are stored: nested (a list of {rank, chunk_id} entries), ids (a "
            "list of chunk ids in rank order, rank = position), exploded (one row per result, "
            "the rows of one request_id and served_at one served copy), spans (one row per "
            "trace span; a retrieval span is a request: `spans`): docs/inputs.md."
        ),
    )
    spans: SpansConfig = Field(
        default=SpansConfig(),
        description="With `shape: spans`: which spans are retrievals, where their documents "
        'hold the chunk id (docs/inputs.md, "Traces").',
    )
    columns: LogColumns = Field(
        default=LogColumns(),
        description="The data's own names for the contract's columns and fields (docs/inputs.md).",
    )
    on_corrupt: Literal["fail", "quarantine"] = Field(
        default="fail",
        description=(
            "A file that cannot be read (a truncated Parquet file, a JSON line that does not "
            "parse): 'fail' stops the run before anything is published, naming the file; "
            "'quarantine' lists it in the quarantine table, computes the rest, and fails the "
            "day's `readable_inputs` check."
        ),
    )
    date_partition: str = Field(
        default="auto",
        description=(
            "Hive-style date partition column used to prune directories: 'auto' detects a "
            "top-level `<column>=YYYY-MM-DD` layout on local paths, 'none' disables pruning, "
            "any other value names the column. The exact `served_at` filter is applied anyway."
        ),
    )

    ready_marker: Text | None = Field(
        default=None,
        description=(
            "A file name (e.g. `_SUCCESS`) whose presence in a day's date-partition directory "
            "says the day's logs have all landed: `run` exits 5 for a day without it, "
            "`backfill` computes only the days that have it, `logmetrics ready` asks alone. "
            "Null: no marker is expected. Needs a date-partitioned layout."
        ),
    )

    allow_empty_days: bool = Field(
        default=False,
        description=(
            "A source with real quiet days: a day no log file holds a row of is computed (a "
            "day of 0 queries) instead of not ready (exit 5), and a day without a valid row "
            "passes `non_empty_day` instead of failing it. Off: an empty day is never "
            "published by accident."
        ),
    )

    @field_validator("ready_marker")
    @classmethod
    def _file_name(cls, value: str | None) -> str | None:
        if value is not None and (not value or "/" in value or value in {".", ".."}):
            raise ValueError("must be a file name, without '/'")
        return value

    @model_validator(mode="after")
    def _spans_as_spans(self) -> ServedLogsInput:
        if self.format == "otlp" and self.shape != "spans":
            raise ValueError("format otlp holds trace spans: set `shape: spans`")
        if self.format == "otlp" and self.path is None:
            raise ValueError("format otlp is read from a `path` of OTLP/JSON files")
        mapped = set(self.columns.mapped())
        if self.shape == "spans":
            request = sorted(mapped - set(SPAN_COLUMNS))
            if request:
                raise ValueError(
                    f"columns.{request[0]}: a spans table's request is its retrieval span; map "
                    f"its span columns ({', '.join(SPAN_COLUMNS)})"
                )
        else:
            spans = sorted(mapped & set(SPAN_COLUMNS))
            if spans:
                raise ValueError(f"columns.{spans[0]} is a span column, read by `shape: spans`")
        return self

    @model_validator(mode="after")
    def _marker_on_a_path(self) -> ServedLogsInput:
        if self.ready_marker is not None and self.path is None:
            raise ValueError(
                "ready_marker is looked for in the date partitions below a `path`; a `table` "
                "has none to look in"
            )
        return self

    @property
    def data_format(self) -> str:
        """The format the files at `location` are read as."""
        return self.file_format(self.format)

    @property
    def described(self) -> str:
        return self.shown("served logs")

    @field_validator("date_partition")
    @classmethod
    def _column_name(cls, value: str) -> str:
        if not _COLUMN_NAME.match(value):
            raise ValueError("must be 'auto', 'none' or a column name")
        return value


class ClustersInput(_TableInput):
    """The cluster-id table from the near-duplicate detector."""

    format: Literal["delta", "parquet"] = Field(
        default="delta", description="delta or parquet; a `table` is read as its catalog says."
    )
    version: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Pin a Delta version of the cluster table (by path or by name); null reads "
        "the latest one.",
    )
    columns: ClusterColumns = Field(
        default=ClusterColumns(),
        description="The table's own names for `chunk_id` and `cluster_id`.",
    )
    detector: Text | None = Field(
        default=None,
        description=(
            "A label of the detector run that made the table (e.g. `minhash-0.8-2026-11`): "
            "the `detector_calibration` rows with this `detector` describe a table without "
            "Delta versions (Parquet), whose days record no cluster_table_version."
        ),
    )

    @property
    def data_format(self) -> str:
        """The format the files at `location` are read as."""
        return self.file_format(self.format)

    @property
    def described(self) -> str:
        return self.shown("cluster table")


class CalibrationInput(_Section):
    """The near-duplicate detector's measured calibration (docs/alerts.md): rows of
    (cluster_table_version and/or detector, threshold, pair_precision, pair_recall,
    measured_on, sample_pairs)."""

    path: Text = Field(description="Path of the calibration table (a directory or a file).")
    format: Literal["parquet", "delta", "csv", "json"] = Field(
        default="parquet", description="parquet, delta, csv (with a header) or json (lines)."
    )


class InputsConfig(_Section):
    served_logs: ServedLogsInput | None = Field(
        default=None,
        description="Required by run, backfill and demo; `evaluate` and `report` do without.",
    )
    clusters: ClustersInput
    calibration: CalibrationInput | None = Field(
        default=None,
        description=(
            "The detector's calibration, published as `detector_calibration` and shown in the "
            "report beside the numbers; a day computed from a cluster table version without a "
            "row gets a warning. Null: none."
        ),
    )

    def logs(self) -> ServedLogsInput:
        """The served logs, which a metric run cannot do without."""
        if self.served_logs is None:
            raise ConfigError("inputs.served_logs: required key is missing")
        return self.served_logs


class OutputConfig(_Section):
    """Where the Delta tables go: paths under `warehouse`, or names in a catalog."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    warehouse: Text | None = Field(
        default=None, description="Directory under which the Delta output tables live."
    )
    catalog: str | None = Field(
        default=None, description="Catalog of the tables (Unity Catalog), with `schema`."
    )
    schema_name: str | None = Field(
        default=None,
        alias="schema",
        description="Schema (database) of the tables; when set, tables are named, not paths.",
    )

    table_properties: dict[str, Text] = Field(
        default_factory=dict,
        description="Table properties (TBLPROPERTIES) of every output table: set when a table "
        "is created, and on existing tables by `logmetrics views` and `logmetrics maintain`.",
    )

    @field_validator("table_properties", mode="before")
    @classmethod
    def _properties(cls, value: object) -> object:
        """YAML's `true` and `30` are the strings 'true' and '30' a table property holds."""
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            if not isinstance(key, str) or not _PROPERTY_KEY.match(key):
                raise ValueError(f"{key!r} is not a table property name (letters, digits, . _ -)")
            if isinstance(item, bool):
                item = "true" if item else "false"
            elif isinstance(item, int | float):
                item = str(item)
            out[key] = item
        return out

    @field_validator("catalog", "schema_name")
    @classmethod
    def _identifier(cls, value: str | None) -> str | None:
        if value is not None and not _COLUMN_NAME.match(value):
            raise ValueError("must be a plain identifier (letters, digits, _)")
        return value

    @model_validator(mode="after")
    def _somewhere(self) -> OutputConfig:
        if self.warehouse is None and self.schema_name is None:
            raise ValueError("set output.warehouse (paths) or output.schema (catalog tables)")
        if self.catalog is not None and self.schema_name is None:
            raise ValueError("output.catalog needs output.schema")
        return self


class MetricsConfig(_Section):
    ks: tuple[StrictInt, ...] = Field(
        default=(5, 10, 20), description="The k of every unique-clusters@k to compute."
    )
    threshold: StrictInt = Field(
        default=4,
        ge=0,
        description="share_at_or_below_threshold counts queries with unique_clusters@k <= this.",
    )
    segment_by: tuple[str, ...] = Field(
        default=(),
        description=(
            "Log columns to break the daily tables down by (e.g. [surface, index_version]): "
            "rows per value of each, beside the all-traffic rows (segment = 'all')."
        ),
    )

    @field_validator("ks")
    @classmethod
    def _positive_unique(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        return _positive_unique_ks(value)

    @field_validator("segment_by")
    @classmethod
    def _segment_columns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _SEGMENT_NAME.match(name):
                raise ValueError(f"{name!r} is not a column name")
            if name in _RESERVED_COLUMNS:
                raise ValueError(f"{name!r} is a column of the logs contract, not a segment")
            if name.lower() in _BY_QUERY_COLUMNS:
                raise ValueError(
                    f"{name!r} is a column of unique_clusters_by_query, which carries the "
                    "segment columns: rename it in the logs to segment by it"
                )
        if len({name.lower() for name in value}) != len(value):
            raise ValueError("must not repeat a column (case aside)")
        return value


def _positive_unique_ks(value: tuple[int, ...]) -> tuple[int, ...]:
    if not value:
        raise ValueError("must list at least one k")
    if any(k < 1 for k in value):
        raise ValueError("every k must be a positive integer")
    if len(set(value)) != len(value):
        raise ValueError("must not repeat a k")
    return tuple(sorted(value))


def default_k(ks: Iterable[int]) -> int:
    """The k a view of one k shows (the report's segments, the demo's table): 10 when it is
    measured, else the largest."""
    measured = {int(k) for k in ks}
    return 10 if 10 in measured else max(measured)


class CostConfig(_Section):
    """The price of a redundant slot (`redundancy_cost_daily`)."""

    tokens_per_slot: StrictInt = Field(
        default=510,
        ge=0,
        description=(
            "Prompt tokens per result slot, for results without a `tokens` field "
            "(the background chapter: 5,100 tokens for 10 slots)."
        ),
    )
    usd_per_million_input_tokens: float = Field(
        default=3.0, ge=0, description="Input-token price of the model the results are sent to."
    )


class CrowdingConfig(_Section):
    """What crowds the top-k (`unique_clusters_crowding`)."""

    enabled: bool = Field(
        default=True,
        description="Write unique_clusters_crowding for every published day, and name each "
        "alert's culprits from it, with what their redundant slots cost. Off saves its share of "
        "a run (docs/config.md); part of the config fingerprint.",
    )
    top_clusters: StrictInt = Field(
        default=50,
        ge=1,
        le=10_000,
        description="Cluster keys listed per day, k and segment row, by redundant slots.",
    )


class NightlyConfig(_Section):
    lookback_days: StrictInt = Field(
        default=3,
        ge=0,
        le=366,
        description="Days before its date that `logmetrics run` checks and restates, in the "
        "same run, when their logs, the cluster table or the config changed since they were "
        "computed (late rows); 0 turns it off.",
    )


class BackfillConfig(_Section):
    days_per_chunk: StrictInt = Field(
        default=30, ge=1, le=366, description="Days computed and committed together in a backfill."
    )
    broadcast_max_chunks: Annotated[StrictInt, Field(ge=0)] | Literal["auto"] = Field(
        default="auto",
        description="Most chunk ids broadcast to every task (the cluster keys, or the keys of "
        "the chunks a chunk of days serves); above it, the next plan (docs/cluster-scale.md). "
        "auto: what the driver's memory holds, measured (docs/cluster-scale.md).",
    )
    keep_cluster_keys: bool = Field(
        default=True,
        description="Keep the cluster keys of a cluster table version (a Delta version, or a "
        "Parquet table's file names, sizes and times) and reuse them while the table is "
        "unchanged, instead of building them every run.",
    )
    cluster_keys_dir: Text | None = Field(
        default=None,
        description="A folder for the kept cluster keys, local or s3a://; null: "
        "`<output.warehouse>/_cluster_keys`, or with catalog tables two Delta tables beside "
        "them (a folder on another store keeps nothing: built every run).",
    )


Severity = Literal["blocking", "warning"]


class QualitySeverity(_Section):
    """Per check: a failed `blocking` check keeps a day unpublished (on_failure: fail)."""

    missing_cluster_rate: Severity = "blocking"
    malformed_rate: Severity = "blocking"
    positive_ranks: Severity = "warning"
    unique_request_ids: Severity = "blocking"
    unique_cluster_chunk_ids: Severity = "warning"
    non_empty_cluster_ids: Severity = "warning"
    volume: Severity = "warning"
    consistent_duplicates: Severity = "warning"
    readable_inputs: Severity = "blocking"
    non_empty_day: Severity = "blocking"


class QualityConfig(_Section):
    """Data-quality gates (great-expectations), evaluated for every computed day."""

    enabled: bool = Field(default=True, description="Run the gates at all.")
    on_failure: Literal["fail", "warn"] = Field(
        default="fail",
        description=(
            "fail: a day failing a blocking check is not published and the run exits non-zero; "
            "warn: every day is published with dq_passed = false where a blocking check failed."
        ),
    )
    max_missing_cluster_rate: float = Field(
        default=0.01, ge=0, le=1, description="Max share of valid entries unknown to the table."
    )
    max_malformed_rate: float = Field(
        default=0.001, ge=0, le=1, description="Max share of rows read that are malformed."
    )
    min_volume_ratio: float = Field(
        default=0.5, ge=0, description="Min queries / mean queries of the trailing window."
    )
    volume_window_days: StrictInt = Field(
        default=7, ge=1, le=90, description="Days before a day that its volume is compared to."
    )
    missing_chunks_top_n: StrictInt = Field(
        default=100, ge=1, description="Rows per day in missing_cluster_chunks."
    )
    severity: QualitySeverity = QualitySeverity()


AlertStatistic = Literal["share_at_or_below_threshold", "mean"]


class AlertsMinEffect(_Section):
    """The smallest change worth an alert, per statistic, whatever the noise says."""

    share_at_or_below_threshold: float = Field(
        default=0.02,
        ge=0,
        description="Smallest |change| of the share at or below the threshold (0.02 = 2 points).",
    )
    mean: float = Field(
        default=0.2, ge=0, description="Smallest |change| of the mean unique clusters (clusters)."
    )


class AlertsConfig(_Section):
    """Alarms on the metric itself: each published day against its own baseline (docs/alerts.md)."""

    statistics: tuple[AlertStatistic, ...] = Field(
        default=("share_at_or_below_threshold", "mean"),
        description=(
            "Statistics judged: share_at_or_below_threshold (a rise is a regression) and mean "
            "(a fall is a regression)."
        ),
    )
    baseline: Literal["same_weekday", "trailing"] = Field(
        default="same_weekday",
        description=(
            "same_weekday: the same weekday in the previous baseline_weeks weeks; trailing: the "
            "previous baseline_days days."
        ),
    )
    baseline_weeks: StrictInt = Field(
        default=4, ge=1, le=52, description="Weeks looked back by the same_weekday baseline."
    )
    baseline_days: StrictInt = Field(
        default=28, ge=1, le=366, description="Days looked back by the trailing baseline."
    )
    min_queries: StrictInt = Field(
        default=500,
        ge=1,
        description=(
            "A segment value's day with fewer queries is not judged (too_few_queries) and "
            "enters no baseline."
        ),
    )
    min_baseline_days: StrictInt = Field(
        default=3,
        ge=2,
        description=(
            "Fewer qualifying baseline days: insufficient_baseline (2 at least: the baseline's "
            "standard deviation needs two values)."
        ),
    )
    sigmas: float = Field(
        default=3.0,
        gt=0,
        description="limit = sigmas x sqrt(baseline_sd^2 + the day's sampling variance).",
    )
    min_effect: AlertsMinEffect = Field(
        default=AlertsMinEffect(),
        description="A change fires only when |delta| is at least this, per statistic.",
    )

    @field_validator("statistics")
    @classmethod
    def _some_statistics(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("must list at least one statistic")
        if len(set(value)) != len(value):
            raise ValueError("must not repeat a statistic")
        return value

    @model_validator(mode="after")
    def _reachable_baseline(self) -> AlertsConfig:
        window = self.baseline_weeks if self.baseline == "same_weekday" else self.baseline_days
        if self.min_baseline_days > window:
            raise ValueError(
                f"min_baseline_days ({self.min_baseline_days}) is more than the "
                f"{self.baseline} baseline can hold ({window} day(s))"
            )
        return self

    def lookback_days(self) -> int:
        """How many days before a judged day its baseline can reach."""
        return 7 * self.baseline_weeks if self.baseline == "same_weekday" else self.baseline_days


_RUN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class RunInput(_Section):
    """One retrieval run to evaluate: a ranked list per query (query_id, rank, chunk_id)."""

    path: Text = Field(description="Path of the run (a directory, table path or file).")
    format: Literal["parquet", "delta", "csv", "trec"] = Field(
        default="parquet",
        description="parquet, delta, csv (with a header) or trec (`qid Q0 docno rank score tag`).",
    )


class JudgmentsInput(_Section):
    """The relevance judgments: one grade per judged (query_id, chunk_id)."""

    path: Text = Field(description="Path of the judgments.")
    format: Literal["parquet", "delta", "csv", "trec"] = Field(
        default="parquet",
        description="parquet, delta, csv (with a header) or trec qrels (`qid 0 docno grade`).",
    )


class EvaluationConfig(_Section):
    """`logmetrics evaluate`: judged evaluation of retrieval runs (docs/config.md)."""

    runs: dict[str, RunInput] = Field(description="Run name -> {path, format}; at least one.")
    judgments: JudgmentsInput
    ks: tuple[StrictInt, ...] = Field(default=(10,), description="The k of every metric@k.")
    relevance_level: StrictInt = Field(
        default=1, ge=1, description="Minimum grade that counts as relevant (recall, clusters)."
    )
    gain: Literal["exponential", "linear"] = Field(
        default="exponential",
        description="nDCG gain of a grade g > 0: 2^g - 1 (exponential) or g (linear, trec_eval).",
    )
    compare: tuple[str, str] | None = Field(
        default=None,
        description="[A, B]: the two runs to compare; by default the two runs when there are two.",
    )
    samples: StrictInt = Field(
        default=10000, ge=100, description="Sign flips drawn by the paired randomisation test."
    )
    seed: StrictInt = Field(default=0, description="Seed of the paired randomisation test.")

    @field_validator("ks")
    @classmethod
    def _positive_unique(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        return _positive_unique_ks(value)

    @field_validator("runs")
    @classmethod
    def _run_names(cls, value: dict[str, RunInput]) -> dict[str, RunInput]:
        if not value:
            raise ValueError("must name at least one run")
        for name in value:
            if not _RUN_NAME.match(name):
                raise ValueError(f"run name {name!r} must be letters, digits, '_', '.' or '-'")
        return value

    @model_validator(mode="after")
    def _compared_runs(self) -> EvaluationConfig:
        if self.compare is not None:
            unknown = [name for name in self.compare if name not in self.runs]
            if unknown:
                raise ValueError(f"evaluation.compare names unknown run(s) {unknown}")
            if self.compare[0] == self.compare[1]:
                raise ValueError("evaluation.compare needs two different runs")
        return self

    def compared_runs(self) -> tuple[str, str] | None:
        """The (A, B) pair of the comparison, or None when there is nothing to compare."""
        if self.compare is not None:
            return self.compare
        names = list(self.runs)
        return (names[0], names[1]) if len(names) == 2 else None


class SparkConfig(_Section):
    master: Text = Field(
        default="local[*]",
        description="Master URL when logmetrics starts Spark itself (ignored on a cluster).",
    )
    driver_memory: Text = Field(
        default="4g", description="spark.driver.memory when logmetrics starts Spark itself."
    )
    log_dir: Text | None = Field(
        default="logs",
        description="Where the local Spark JVM's own output goes (null: to the terminal).",
    )
    profile: Literal["auto", "short", "long"] = Field(
        default="auto",
        description=(
            "How logmetrics tunes the local JVM it starts. short: a run dominated by start-up "
            "(a nightly day, report, maintain): the quick JIT compiler only, the serial "
            "collector, no adaptive query execution; long: a backfill dominated by throughput: "
            "Spark's defaults. auto: short for runs of at most 3 days, long beyond. "
            "spark.conf settings win over both."
        ),
    )
    accelerator: Literal["comet", "none"] = Field(
        default="comet",
        description=(
            "The native engine inside the local Spark logmetrics starts. comet: Apache "
            "DataFusion Comet (its jar from Maven Central, its off-heap memory inside "
            "driver_memory); on a platform its native library does not support, plain Spark "
            "with a one-line warning. none: plain Spark. Ignored on a cluster, which ships its "
            "own (docs/cluster.md)."
        ),
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark settings, applied as given; none may look like a secret.",
    )

    @field_validator("conf", mode="before")
    @classmethod
    def _settings(cls, value: Any) -> Any:
        """Scalar values as strings; no secret, nothing malformed. The messages name the key,
        never the value (it may be a secret): `_first_error` leaves the input out here."""
        if not isinstance(value, Mapping):
            return value  # pydantic reports the type
        return {str(key): _spark_value(str(key), item) for key, item in value.items()}


def _spark_value(key: str, value: Any) -> str:
    if not _SPARK_KEY.match(key) or _CONTROL.search(key):
        raise ValueError(f"{key!r} is not a Spark setting name (no spaces, '=', control chars)")
    if looks_secret(key):
        raise ValueError(
            f"{key!r} looks like a secret, and config files hold none: set it in the "
            "environment or the platform's secret store (docs/config.md, Secrets)"
        )
    if value is None or isinstance(value, Mapping | list | tuple):
        raise ValueError(
            f"{key!r} must be a string, number or boolean (a Spark key holds dots: "
            "--set 'spark.conf={\"spark.x.y\": value}')"
        )
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    if _CONTROL.search(text):
        raise ValueError(f"{key!r} must not contain control characters (newline, tab, ...)")
    return text


class Config(_Section):
    """The whole job configuration."""

    inputs: InputsConfig
    output: OutputConfig
    metrics: MetricsConfig = MetricsConfig()
    cost: CostConfig = CostConfig()
    crowding: CrowdingConfig = CrowdingConfig()
    backfill: BackfillConfig = BackfillConfig()
    nightly: NightlyConfig = NightlyConfig()
    quality: QualityConfig = QualityConfig()
    spark: SparkConfig = SparkConfig()
    alerts: AlertsConfig = AlertsConfig()
    evaluation: EvaluationConfig | None = None

    @model_validator(mode="after")
    def _segments_are_not_contract_columns(self) -> Config:
        logs = self.inputs.served_logs
        if logs is None:
            return self
        read = {data: name for name, data in logs.columns.mapped().items()}
        if logs.shape == "spans":  # segments are attributes, the resource's or the span's name
            return self
        for name in self.metrics.segment_by:
            contract = read.get(name)
            if contract is not None and (logs.shape == "exploded" or contract in _LIST_LEVEL):
                raise ValueError(
                    f"metrics.segment_by: {name!r} is read as the logs' {contract!r} "
                    "(inputs.served_logs.columns), not a segment"
                )
        return self

    def locations(self) -> list[str]:
        """Every path the config names: inputs, warehouse, keys folder, evaluation files."""
        inputs = self.inputs
        tables = [inputs.clusters, inputs.served_logs]
        paths = [source.location for source in tables if source and source.location]
        paths += [inputs.calibration.path] if inputs.calibration else []
        paths += [p for p in (self.output.warehouse, self.backfill.cluster_keys_dir) if p]
        if self.evaluation is not None:
            paths += [run.path for run in self.evaluation.runs.values()]
            paths.append(self.evaluation.judgments.path)
        return paths

    def fingerprint(self) -> str:
        """A short stable hash of everything that can change what a day publishes: inputs,
        metric settings, the quality gates and the alert rule (not where the output goes or how
        Spark runs)."""
        sections = {"inputs", "metrics", "cost", "crowding", "quality", "alerts"}
        relevant = self.model_dump(include=sections, mode="json")
        if relevant["inputs"].get("served_logs"):  # when a day is ready, not what it holds
            del relevant["inputs"]["served_logs"]["ready_marker"]
            del relevant["inputs"]["served_logs"]["allow_empty_days"]
        # What the detector measured is shown beside the numbers; it changes none of them.
        del relevant["inputs"]["calibration"]
        del relevant["inputs"]["clusters"]["detector"]
        # Keys added since days were first published count only when set: a config that does
        # not use them keeps the fingerprint its days were recorded with.
        for source, keys in _LATER_INPUT_KEYS.items():
            section = relevant["inputs"].get(source) or {}
            for key, default in keys.items():
                if section.get(key, default) == default:
                    section.pop(key, None)
        columns = (relevant["inputs"].get("served_logs") or {}).get("columns") or {}
        for key in SPAN_COLUMNS:  # added with the spans shape: counted when mapped
            if columns.get(key, None) is None:
                columns.pop(key, None)
        blob = json.dumps(relevant, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


_LATER_INPUT_KEYS: dict[str, dict[str, Any]] = {
    "served_logs": {
        "table": None,
        "shape": "nested",
        "columns": LogColumns().model_dump(mode="json"),
        "spans": SpansConfig().model_dump(mode="json"),
    },
    "clusters": {"table": None, "columns": ClusterColumns().model_dump(mode="json")},
}
"""The input keys `Config.fingerprint` leaves out at their defaults."""


def load_config(paths: Sequence[str | Path], overrides: Iterable[str] = ()) -> Config:
    """Deep-merge the YAML files in order, apply `section.key=value` overrides, validate."""
    merged: dict[str, Any] = {}
    for path in paths:
        merged = _deep_merge(merged, _read_yaml(Path(path)))
    for override in overrides:
        merged = _deep_merge(merged, _parse_override(override))
    try:
        return Config.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_first_error(exc)) from None


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections")
    return data


def _parse_override(text: str) -> dict[str, Any]:
    key, sep, raw = text.partition("=")
    parts = key.strip().split(".")
    secret = looks_secret(text)  # never echo what may be a secret
    if not sep or len(parts) < 2 or not all(_COLUMN_NAME.match(p) for p in parts):
        shown = f"{key}={REDACTED}" if secret and sep else text
        raise ConfigError(f"--set expects section.key=value, got {shown!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        shown = REDACTED if secret else repr(raw)
        raise ConfigError(f"--set {key}: value {shown} is not valid YAML") from None
    nested: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        nested = {part: nested}
    return nested


def _did_you_mean(loc: Sequence[int | str]) -> str:
    """`; did you mean 'threshold'?` for a misspelt key, from the keys its section has."""
    model: Any = Config
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        inner = field.annotation if field is not None else None
        found = [
            t
            for t in (inner, *getattr(inner, "__args__", ()))
            if isinstance(t, type) and issubclass(t, BaseModel)
        ]
        if not found:
            return ""
        model = found[0]
    return did_you_mean(str(loc[-1]), [f.alias or name for name, f in model.model_fields.items()])


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "config"
    if error["type"] == "extra_forbidden":
        return f"{where}: unknown key{_did_you_mean(error['loc'])}"
    if error["type"] == "missing":
        return f"{where}: required key is missing"
    if error["type"] in ("tuple_type", "list_type") and len(error["loc"]) >= 2:
        return f"{where}: must be a list, e.g. [5, 10] (got {error.get('input')!r})"
    message = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:  # a rule across sections: the message names its keys
        return message
    if tuple(error["loc"][:2]) == ("spark", "conf") or isinstance(error.get("input"), Mapping):
        return f"{where}: {message}"  # a secret may be in the input, or a whole section is
    return f"{where}: {message} (got {error.get('input')!r})"
