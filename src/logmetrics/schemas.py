"""Input contracts and output schemas, as StructTypes, with the column docs.

The comments on the output fields become the Delta tables' column comments, and docs/tables.md
says the same in prose.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _field(name: str, data_type: DataType, comment: str, nullable: bool = True) -> StructField:
    return StructField(name, data_type, nullable, metadata={"comment": comment})


# --- Inputs -------------------------------------------------------------------------------

CLUSTERS = StructType(
    [
        StructField("chunk_id", StringType()),
        StructField("cluster_id", StringType()),
    ]
)
"""The cluster-table contract: one cluster id (nullable) per chunk."""

RUN = StructType(
    [
        StructField("query_id", StringType()),
        StructField("rank", LongType()),
        StructField("chunk_id", StringType()),
    ]
)
"""A retrieval run to evaluate: one row per (query, ranked chunk). Other columns are ignored."""

JUDGMENTS = StructType(
    [
        StructField("query_id", StringType()),
        StructField("chunk_id", StringType()),
        StructField("grade", IntegerType()),
    ]
)
"""Relevance judgments: one grade per judged (query_id, chunk_id); unjudged = not relevant."""

_CALIBRATION_FIELDS = [
    _field(
        "cluster_table_version",
        LongType(),
        "The cluster table's Delta version the detector's run wrote (null: see detector).",
    ),
    _field(
        "detector",
        StringType(),
        "A label of the detector's run (inputs.clusters.detector names a table's).",
    ),
    _field("threshold", DoubleType(), "The detector's similarity threshold.", False),
    _field(
        "pair_precision",
        DoubleType(),
        "Of the sampled pairs the detector put in one cluster, the share that are duplicates.",
        False,
    ),
    _field(
        "pair_recall",
        DoubleType(),
        "Of the sampled duplicate pairs, the share the detector put in one cluster.",
        False,
    ),
    _field("measured_on", DateType(), "When the calibration was measured.", False),
    _field("sample_pairs", LongType(), "Labelled pairs the measurement rests on.", False),
]

CALIBRATION = StructType(_CALIBRATION_FIELDS)
"""The detector's calibration (`inputs.calibration`): per cluster table version or detector
label (at least one of the two columns, and one of them set on each row), the rest required."""
CALIBRATION_KEYS = ("cluster_table_version", "detector")

# --- Outputs ------------------------------------------------------------------------------

_RUN_FIELDS = [
    _field(
        "cluster_table_version",
        LongType(),
        "Delta version of the cluster table the number was computed from (null for Parquet).",
    ),
    _field("run_id", StringType(), "Id of the logmetrics run that wrote the row.", False),
    _field("computed_at", TimestampType(), "When that run started (UTC).", False),
]

BY_QUERY = StructType(
    [
        _field("metric_date", DateType(), "UTC date of served_at.", False),
        _field(
            "request_id", StringType(), "The served request (one row per request and k).", False
        ),
        _field("served_at", TimestampType(), "When the request was served (UTC).", False),
        _field("k", IntegerType(), "Window size: the first k valid entries by rank.", False),
        _field(
            "unique_clusters",
            IntegerType(),
            "Distinct cluster keys in the top-k (a chunk without a cluster id is its own).",
            False,
        ),
        _field("results", IntegerType(), "Valid entries in the served list (all of it).", False),
        _field(
            "missing_cluster_results",
            IntegerType(),
            "Valid entries whose chunk_id is absent from the cluster table.",
            False,
        ),
        *_RUN_FIELDS,
    ]
)


def by_query_schema(segment_by: Sequence[str] = ()) -> StructType:
    """`unique_clusters_by_query`'s columns with one per `metrics.segment_by` column, after
    served_at: the request's value as text, as its daily rows' `segment_value` names it, so a
    dashboard goes from a segment's daily row to its queries with one equality."""
    fields = list(BY_QUERY.fields)
    at = BY_QUERY.fieldNames().index("served_at") + 1
    segments = [
        _field(
            name,
            StringType(),
            f"The request's {name} (metrics.segment_by) as text, '(null)' for null: the "
            "segment_value of its daily rows with segment = this column's name.",
        )
        for name in segment_by
    ]
    return StructType(fields[:at] + segments + fields[at:])


ALL_TRAFFIC = "all"
"""`segment` and `segment_value` of the rows over all traffic."""
NULL_SEGMENT_VALUE = "(null)"
"""`segment_value` of the requests whose segment column is null."""

_SEGMENT_FIELDS = [
    _field(
        "segment",
        StringType(),
        "The metrics.segment_by column the row breaks down by; 'all' for all traffic.",
        False,
    ),
    _field(
        "segment_value",
        StringType(),
        "That column's value (as text, '(null)' for null); 'all' for all traffic.",
        False,
    ),
]

DAILY = StructType(
    [
        _field("metric_date", DateType(), "UTC date of served_at.", False),
        _field("k", IntegerType(), "Window size.", False),
        *_SEGMENT_FIELDS,
        _field(
            "queries", LongType(), "Served requests that day (redeliveries counted once).", False
        ),
        _field(
            "empty_queries", LongType(), "Queries with no valid entry (unique_clusters 0).", False
        ),
        _field(
            "histogram",
            ArrayType(LongType(), containsNull=False),
            "Index i = queries with exactly i distinct clusters; length k+1. Adds across days.",
            False,
        ),
        _field("median", DoubleType(), "Median unique_clusters (linear interpolation)."),
        _field("p10", DoubleType(), "10th percentile of unique_clusters (linear)."),
        _field("p25", DoubleType(), "25th percentile of unique_clusters (linear)."),
        _field("p75", DoubleType(), "75th percentile of unique_clusters (linear)."),
        _field("p90", DoubleType(), "90th percentile of unique_clusters (linear)."),
        _field("mean", DoubleType(), "Mean unique_clusters."),
        _field("threshold", IntegerType(), "The metrics.threshold the share is taken at.", False),
        _field(
            "share_at_or_below_threshold",
            DoubleType(),
            "Share of queries with unique_clusters <= threshold.",
        ),
        _field("results", LongType(), "Valid served entries that day.", False),
        _field(
            "missing_cluster_results",
            LongType(),
            "Valid entries whose chunk_id is absent from the cluster table.",
            False,
        ),
        _field(
            "missing_cluster_rate",
            DoubleType(),
            "missing_cluster_results / results (null when there are no results).",
        ),
        _field(
            "dq_passed",
            BooleanType(),
            "True when every blocking data-quality check passed for the day.",
            False,
        ),
        _field(
            "rows_read",
            LongType(),
            "Log rows read for the day: queries + duplicate_rows + quarantined_rows (exploded "
            "shape: a row per result, the kept copies' distinct rows in place of queries).",
            False,
        ),
        _field(
            "duplicate_rows",
            LongType(),
            "Rows read not counted again: every row of a request's copies not kept, and each "
            "repeat of a kept row.",
            False,
        ),
        _field(
            "quarantined_rows",
            LongType(),
            "Malformed rows (null request_id, served_at or results, or a served_at that does "
            "not parse), one quarantine row each.",
            False,
        ),
        _field(
            "quarantined_entries",
            LongType(),
            "Entries with a null chunk_id or rank, dropped and in the quarantine table.",
            False,
        ),
        *_RUN_FIELDS,
    ]
)

K_SWEEP = StructType(
    [
        _field("metric_date", DateType(), "UTC date of served_at.", False),
        _field("k", IntegerType(), "Slot: every k from 1 to the largest metrics.ks.", False),
        *_SEGMENT_FIELDS,
        _field("queries", LongType(), "Served requests that day (the mean's denominator).", False),
        _field(
            "unique_clusters_total",
            LongType(),
            "Sum over the queries of unique_clusters@k. Adds across days and segments' values.",
            False,
        ),
        _field(
            "mean_unique_clusters",
            DoubleType(),
            "unique_clusters_total / queries (null without queries).",
        ),
        _field("distinct_fraction", DoubleType(), "mean_unique_clusters / k."),
        _field(
            "marginal_rate",
            DoubleType(),
            "mean_unique_clusters at k minus at k-1 (at k = 1, the mean): new clusters per "
            "added slot.",
        ),
        *_RUN_FIELDS,
    ]
)

CROWDING = StructType(
    [
        _field("metric_date", DateType(), "UTC date of served_at.", False),
        _field("k", IntegerType(), "Window size: the first k valid entries by rank.", False),
        *_SEGMENT_FIELDS,
        _field(
            "rank",
            IntegerType(),
            "1 = the key with the most redundant slots; ties by the key (cluster_id, else "
            "chunk_id) ascending as text.",
            False,
        ),
        _field(
            "cluster_id",
            StringType(),
            "The repeated cluster; null where the repeated key is a chunk without a cluster id.",
        ),
        _field(
            "chunk_id",
            StringType(),
            "The repeated chunk, set only where cluster_id is null (absent from the cluster "
            "table, or listed with null cluster ids only).",
        ),
        _field(
            "redundant_slots",
            LongType(),
            "Copies of the key in the top-k beyond its first, summed over the day's requests.",
            False,
        ),
        _field(
            "requests_affected",
            LongType(),
            "Requests with at least two entries of the key in their top-k.",
            False,
        ),
        _field(
            "share_of_redundant_slots",
            DoubleType(),
            "redundant_slots / all redundant slots of the day, k and segment row.",
            False,
        ),
        _field(
            "cluster_size",
            LongType(),
            "Chunks of the cluster in the cluster table; 1 for a lone chunk.",
            False,
        ),
        _field(
            "example_request_ids",
            ArrayType(StringType(), containsNull=False),
            "Up to 3 of the affected requests: the smallest request_ids, as text.",
            False,
        ),
        *_RUN_FIELDS,
        _field(
            "redundant_tokens",
            LongType(),
            "Prompt tokens of those redundant slots: each result's own tokens, else "
            "cost.tokens_per_slot, as redundancy_cost_daily counts them (null in rows written "
            "before they were counted).",
        ),
        _field(
            "redundant_usd",
            DoubleType(),
            "redundant_tokens at cost.usd_per_million_input_tokens (null in rows written before "
            "they were counted).",
        ),
    ]
)

REDUNDANCY_COST = StructType(
    [
        _field("metric_date", DateType(), "UTC date of served_at.", False),
        _field("k", IntegerType(), "Window size: every k from 1 to the largest metrics.ks.", False),
        *_SEGMENT_FIELDS,
        _field("queries", LongType(), "Served requests that day.", False),
        _field("slots", LongType(), "Filled slots in the top-k windows (valid entries).", False),
        _field(
            "redundant_slots",
            LongType(),
            "Slots in the top-k whose cluster already appeared above them in the same list.",
            False,
        ),
        _field(
            "redundant_tokens",
            LongType(),
            "Prompt tokens of the redundant slots: each result's `tokens`, else tokens_per_slot.",
            False,
        ),
        _field(
            "redundant_usd",
            DoubleType(),
            "redundant_tokens * usd_per_million_input_tokens / 1e6.",
            False,
        ),
        _field("tokens_per_slot", LongType(), "cost.tokens_per_slot of the run.", False),
        _field(
            "usd_per_million_input_tokens",
            DoubleType(),
            "cost.usd_per_million_input_tokens of the run.",
            False,
        ),
        *_RUN_FIELDS,
    ]
)

DAILY_COLUMNS = [f.name for f in DAILY.fields if f.name not in ("run_id", "computed_at")]
"""The daily table's columns but the writing run's id and time: what the alert rule and the
report read of it."""

DATA_QUALITY = StructType(
    [
        _field("metric_date", DateType(), "The day checked.", False),
        _field("check", StringType(), "Check name, e.g. missing_cluster_rate.", False),
        _field(
            "success",
            BooleanType(),
            "Whether the day passed the check; null when it was not judged (nothing to judge: "
            "a volume without trailing days to compare with; why in `details`.not_judged).",
        ),
        _field("observed_value", DoubleType(), "The day's value (null when undefined)."),
        _field("threshold", DoubleType(), "The bound the value is held to."),
        _field("severity", StringType(), "blocking (keeps a day unpublished) or warning.", False),
        _field("run_id", StringType(), "Id of the run that checked the day.", False),
        _field("checked_at", TimestampType(), "When that run started (UTC).", False),
        _field("details", StringType(), "great-expectations' result summary, as JSON.", False),
    ]
)

QUARANTINE = StructType(
    [
        _field("metric_date", DateType(), "UTC date of the row, or its date partition.", False),
        _field(
            "reason",
            StringType(),
            "null_request_id, invalid_served_at, null_served_at, null_results, null_chunk_id, "
            "null_rank, corrupt_file or corrupt_line.",
            False,
        ),
        _field("request_id", StringType(), "The request, where known."),
        _field("raw", StringType(), "The row (or the entry with its request) as JSON.", False),
        _field("run_id", StringType(), "Id of the run that set the row aside.", False),
        _field("quarantined_at", TimestampType(), "When that run started (UTC).", False),
    ]
)

MISSING_CLUSTER_CHUNKS = StructType(
    [
        _field("metric_date", DateType(), "UTC date of the serves.", False),
        _field("rank", IntegerType(), "1 = the most-served unknown chunk of the day.", False),
        _field("chunk_id", StringType(), "A served chunk absent from the cluster table.", False),
        _field("serves", LongType(), "Valid entries serving it that day.", False),
        *_RUN_FIELDS,
    ]
)

JOB_RUNS = StructType(
    [
        _field("run_id", StringType(), "The run.", False),
        _field("metric_date", DateType(), "The day the row is about.", False),
        _field(
            "status",
            StringType(),
            "started, published, held (a blocking quality check failed; not published), "
            "failed (the run stopped with an error before the day was written) or interrupted "
            "(a signal stopped the run before it published the day).",
            False,
        ),
        _field("started_at", TimestampType(), "When the run started (UTC).", False),
        _field("finished_at", TimestampType(), "When the day was done (null on `started`)."),
        _field("rows_read", LongType(), "Log rows read for the day."),
        _field("queries", LongType(), "Served requests counted."),
        _field("results", LongType(), "Valid served entries."),
        _field("cluster_table_version", LongType(), "Delta version of the cluster table read."),
        _field(
            "inputs_fingerprint",
            StringType(),
            "Hash of the day's inputs: its log files and the cluster table's state.",
            False,
        ),
        _field("config_fingerprint", StringType(), "Hash of the config behind the numbers.", False),
        _field("code_version", StringType(), "logmetrics version that computed the day.", False),
        _field(
            "reason",
            StringType(),
            "Why the run computed the day: new, inputs_changed, clusters_changed, "
            "config_changed or forced (null in rows written before logmetrics recorded it).",
        ),
        _field(
            "logs_fingerprint",
            StringType(),
            "Hash of the log files holding the day's rows (path, size, modification time).",
        ),
        _field("input_files", LongType(), "Log files holding the day's rows."),
        _field(
            "clusters_fingerprint",
            StringType(),
            "The cluster table's state: its Delta version (v<n>), or a hash of its file listing.",
        ),
        _field(
            "error",
            StringType(),
            "On `failed`: the error's one line; on `held`: the blocking checks that failed; on "
            "`interrupted`: the signal.",
        ),
    ]
)


DETECTOR_CALIBRATION = StructType(
    [
        *_CALIBRATION_FIELDS,
        _field("run_id", StringType(), "Id of the logmetrics run that wrote the row.", False),
        _field("computed_at", TimestampType(), "When that run started (UTC).", False),
    ]
)

EVALUATION_RESULTS = StructType(
    [
        _field("run", StringType(), "The evaluated run's name (a key of evaluation.runs).", False),
        _field(
            "query_id",
            StringType(),
            "The judged query, or ALL for the mean over the run's evaluated queries.",
            False,
        ),
        _field("k", IntegerType(), "Cutoff: the first k entries of the run's list.", False),
        _field(
            "metric",
            StringType(),
            "recall, ndcg, unique_clusters or cluster_recall (docs/tables.md).",
            False,
        ),
        _field("value", DoubleType(), "The metric@k for the query, or its mean (ALL).", False),
        _field(
            "queries",
            LongType(),
            "Queries behind the value: 1 per query, the number averaged on the ALL row.",
            False,
        ),
        *_RUN_FIELDS,
    ]
)

# --- Alerts (the metric's own alarm) ----------------------------------------------------------

SHARE_STATISTIC = "share_at_or_below_threshold"
"""A rise of the share of queries at or below the threshold is a regression."""
MEAN_STATISTIC = "mean"
"""A fall of the mean unique clusters is a regression."""

TOO_FEW_QUERIES = "too_few_queries"
INSUFFICIENT_BASELINE = "insufficient_baseline"
ALERT = "alert"
IMPROVEMENT = "improvement"
OK = "ok"

ALERTS = StructType(
    [
        _field("metric_date", DateType(), "The published day judged.", False),
        _field("k", IntegerType(), "Window size (a k of metrics.ks).", False),
        *_SEGMENT_FIELDS,
        _field(
            "statistic",
            StringType(),
            "share_at_or_below_threshold (a rise is a regression) or mean (a fall is one).",
            False,
        ),
        _field("value", DoubleType(), "The day's value of the statistic (null without queries)."),
        _field(
            "baseline_mean",
            DoubleType(),
            "Mean of the statistic over the baseline days (null without any).",
        ),
        _field(
            "baseline_sd",
            DoubleType(),
            "Sample standard deviation (n - 1) over the baseline days (null with fewer than 2).",
        ),
        _field(
            "baseline_days",
            IntegerType(),
            "Baseline days that qualified: published, dq_passed, at least alerts.min_queries.",
            False,
        ),
        _field("queries", LongType(), "The day's queries in this segment value.", False),
        _field("delta", DoubleType(), "value - baseline_mean."),
        _field(
            "limit",
            DoubleType(),
            "alerts.sigmas x sqrt(baseline_sd^2 + the day's sampling variance of the value).",
        ),
        _field(
            "min_effect",
            DoubleType(),
            "alerts.min_effect of the statistic: the smallest absolute delta that fires.",
            False,
        ),
        _field(
            "status",
            StringType(),
            "too_few_queries, insufficient_baseline, alert, improvement or ok.",
            False,
        ),
        _RUN_FIELDS[0],  # cluster_table_version: the judged day's
        _field(
            "cluster_table_changed",
            BooleanType(),
            "A baseline day was computed from another cluster table version: the detector "
            "changed, not necessarily the index.",
            False,
        ),
        *_RUN_FIELDS[1:],  # run_id, computed_at: the run that judged the day
    ]
)


# --- Frames the job builds on the driver ---------------------------------------------------

DAYS = StructType([StructField("metric_date", DateType(), False)])
"""The days of a chunk: every day gets its facts, with or without rows."""

CALENDAR = StructType(
    [StructField("metric_date", DateType(), False), StructField("k", IntegerType(), False)]
)
"""Every (metric_date, k) whose all-traffic row a table must have."""

DAY_STATUS = StructType(
    [
        StructField("metric_date", DateType(), False),
        StructField("dq_passed", BooleanType(), False),
        StructField("rows_read", LongType(), False),
        StructField("duplicate_rows", LongType(), False),
        StructField("quarantined_rows", LongType(), False),
        StructField("quarantined_entries", LongType(), False),
    ]
)
"""A published day's verdict and row counts, joined onto its daily rows."""


def _driver_rows(schema: StructType, *run_columns: str) -> StructType:
    """`schema` without the run's columns (the write stamps them), every field nullable: rows
    built on the driver, which the write conforms to the table's schema."""
    return StructType(
        [StructField(f.name, f.dataType, True) for f in schema.fields if f.name not in run_columns]
    )


DATA_QUALITY_ROWS = _driver_rows(DATA_QUALITY, "run_id", "checked_at")
"""A chunk's check results, as the run builds them."""
QUARANTINE_ROWS = _driver_rows(QUARANTINE, "run_id", "quarantined_at")
"""The quarantine rows of unreadable inputs, as the run builds them."""


# Columns the readers add to the served logs, which the metric rules read.
PARTITION_DATE = "_partition_date"
"""The date of a row's date partition, if the logs have one: it places rows with a null
served_at on a day, so that they can be quarantined and counted instead of vanishing."""
SERVED_AT_TEXT = "_served_at_text"
"""A text served_at as read, kept so that one that does not parse is quarantined as
invalid_served_at."""
STORED_ROWS = "_stored_rows"
"""The exploded shape's rows of a served copy as stored, repeated rows included: every one of
them is a row read (a nested or ids copy is one row, and has no such column)."""
DISTINCT_ROWS = "_distinct_rows"
"""The exploded shape's rows of a served copy that differ in some column read (request_id,
served_at, rank, chunk_id, tokens): the rows a kept copy enters the metrics with; its other
rows are duplicate rows."""

# Columns the judged-evaluation readers add to a run's entries, which its rules read.
INPUT_FILE = "input_file"
INPUT_ROW = "input_row"
"""Where an entry sits in its input (file path, then an id increasing with the row's position
in that file): ties of rank are broken by it, so by line order within a TREC run file."""

ALL_QUERIES = "ALL"
"""`query_id` of the `evaluation_results` rows that average a run's evaluated queries."""


def rows_frame(spark: SparkSession, rows: Iterable[Sequence[Any]], schema: StructType) -> DataFrame:
    """A few rows built on the driver (tuples in `schema`'s field order), as a DataFrame of
    that schema, sent to the JVM as Arrow. Spark's `createDataFrame` of Python rows hands them
    over pickled, and every read of the result unpickles them in a Python worker: measured
    365 ms for a 20-row frame's count against 90-110 ms as Arrow (2026-12-06, interpreted, one
    JVM), and a run reads such frames (its ledger rows, its days, its calendar) many times.
    A timestamp is its moment, as Spark's own conversion takes it (a naive one in this
    process's time zone), turned to UTC before pyarrow sees it: with PYARROW_IGNORE_TIMEZONE
    set (pandas-on-Spark asks for it, and the suite sets it) pyarrow drops an aware datetime's
    offset and reads its wall time as UTC."""
    arrow_schema = to_arrow_schema(schema)
    columns = list(zip(*rows, strict=True)) or [() for _ in schema.fields]
    table = pa.Table.from_arrays(
        [
            pa.array(_utc(column) if isinstance(f.dataType, TimestampType) else column, type=a.type)
            for column, f, a in zip(columns, schema.fields, arrow_schema, strict=True)
        ],
        schema=arrow_schema,
    )
    return spark.createDataFrame(table, schema)


def _utc(moments: Sequence[Any]) -> list[Any]:
    return [m.astimezone(dt.UTC) if isinstance(m, dt.datetime) else m for m in moments]
