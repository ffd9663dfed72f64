"""The data-quality gates, declared as one great-expectations suite over the per-day facts.

Each row of `facts` is one UTC day's counts from one pass over the served logs. The gates are
expectations on columns of that frame (three of them derived rates, seven plain counts), run as
ONE GX validation over all days at once; the result format lists the failing rows by
`metric_date`, so each day's verdict comes from GX's own unexpected-index list. The observed
values are computed here in plain Python floats (exact, reproducible by an independent check),
and every GX verdict is cross-checked against the same rule written in Python.

great_expectations is imported lazily (it takes seconds), with usage analytics and progress bars
off; its context, data source and suite are built once per process and threshold set.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from logmetrics.config import QualityConfig

if TYPE_CHECKING:
    from great_expectations.core.batch_definition import BatchDefinition
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.core.expectation_validation_result import (
        ExpectationValidationResult,
    )
    from great_expectations.data_context import AbstractDataContext

# No usage analytics (there is no network here, and a batch job must not phone home); this has
# to be in the environment before great_expectations is first imported.
os.environ["GX_ANALYTICS_ENABLED"] = "False"

CHECKS: tuple[str, ...] = (
    "missing_cluster_rate",
    "malformed_rate",
    "positive_ranks",
    "unique_request_ids",
    "unique_cluster_chunk_ids",
    "non_empty_cluster_ids",
    "volume",
    "consistent_duplicates",
    "readable_inputs",
    "non_empty_day",
)

AT_LEAST: frozenset[str] = frozenset({"volume", "non_empty_day"})
"""The checks whose threshold is a lower bound (the others' is an upper one)."""

GUARDS: dict[str, str] = {
    "missing_cluster_rate": "served entries whose chunk the cluster table lacks: each counts as "
    "a cluster of its own, so a stale cluster table inflates unique-clusters",
    "malformed_rate": "log rows without a request_id, served_at or results, set aside in "
    "quarantine: a broken log writer",
    "positive_ranks": "entries ranked 0 or below: a logger counting from 0, or a bad rank",
    "unique_request_ids": "request ids served more than once after identical copies are "
    "dropped: requests counted twice",
    "unique_cluster_chunk_ids": "chunks the cluster table lists more than once: each counts "
    "under its smallest cluster id. Whole table: the same count on every day it is read for",
    "non_empty_cluster_ids": "empty or blank cluster ids in the cluster table: their chunks "
    "would count as one cluster. Whole table: the same count on every day it is read for",
    "volume": "the day's queries against the mean of the days before: logs lost or doubled",
    "consistent_duplicates": "requests logged twice with different results: a conflict, not a "
    "redelivery",
    "readable_inputs": "log files that could not be read and may hold the day's rows",
    "non_empty_day": "a day with no valid query: nothing to measure",
}
"""What each check guards, for a person (the report's data-quality section); docs/tables.md,
data_quality, says how each observed value is computed."""

FACT_COLUMNS: tuple[str, ...] = (
    "metric_date",
    "rows_read",
    "malformed_rows",
    "valid_entries",
    "missing_entries",
    "non_positive_ranks",
    "duplicate_request_ids",
    "cluster_duplicate_chunk_ids",
    "cluster_empty_ids",
    "queries",
    "trailing_queries_mean",
    "conflicting_requests",
    "corrupt_inputs",
)

_DATE = "metric_date"
_RESULT_FORMAT: dict[str, Any] = {
    "result_format": "COMPLETE",
    "unexpected_index_column_names": [_DATE],
    "return_unexpected_index_query": False,  # COMPLETE adds a pandas query string by default
}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check on one day."""

    metric_date: datetime.date
    check: str  # one of CHECKS
    success: bool | None  # None: not judged (nothing to judge: `_Gate.not_judged`)
    observed_value: float | None
    threshold: float | None
    severity: str  # "blocking" | "warning", from QualityConfig.severity
    details: str  # JSON: GX's own result summary for this expectation and this day


@dataclass(frozen=True)
class _Gate:
    """How one check is declared: the column it reads, its bounds and its observed value."""

    check: str
    column: str
    min_value: float | None
    max_value: float | None
    observe: Callable[[Mapping[str, Any]], float | None]
    not_judged: str = ""  # why a day's observed value can be undefined (null)

    @property
    def threshold(self) -> float:
        bound = self.max_value if self.max_value is not None else self.min_value
        assert bound is not None
        return bound

    def passes(self, observed: float | None) -> bool | None:
        """The pass rule in plain Python; None when there is nothing to judge."""
        if observed is None:
            return None
        if self.min_value is not None and not observed >= self.min_value:
            return False
        return self.max_value is None or observed <= self.max_value


def _ratio(numerator: int, denominator: float) -> float | None:
    return None if denominator == 0 else numerator / denominator


def _volume_ratio(row: Mapping[str, Any]) -> float | None:
    mean = row["trailing_queries_mean"]
    if mean is None or pd.isna(mean) or mean == 0:
        return None
    return int(row["queries"]) / float(mean)


def _gates(
    max_missing: float, max_malformed: float, min_volume: float, min_queries: float
) -> tuple[_Gate, ...]:
    """The checks, in CHECKS order."""

    def count(column: str) -> Callable[[Mapping[str, Any]], float | None]:
        return lambda row: float(int(row[column]))

    gates = (
        _Gate(
            "missing_cluster_rate",
            "missing_cluster_rate",
            None,
            max_missing,
            lambda row: _ratio(int(row["missing_entries"]), int(row["valid_entries"])),
            "no valid entry to take a share of",
        ),
        _Gate(
            "malformed_rate",
            "malformed_rate",
            None,
            max_malformed,
            lambda row: _ratio(int(row["malformed_rows"]), int(row["rows_read"])),
            "no row read to take a share of",
        ),
        _Gate("positive_ranks", "non_positive_ranks", 0.0, 0.0, count("non_positive_ranks")),
        _Gate(
            "unique_request_ids", "duplicate_request_ids", 0.0, 0.0, count("duplicate_request_ids")
        ),
        _Gate(
            "unique_cluster_chunk_ids",
            "cluster_duplicate_chunk_ids",
            0.0,
            0.0,
            count("cluster_duplicate_chunk_ids"),
        ),
        _Gate("non_empty_cluster_ids", "cluster_empty_ids", 0.0, 0.0, count("cluster_empty_ids")),
        _Gate(
            "volume",
            "volume_ratio",
            min_volume,
            None,
            _volume_ratio,
            "no day with queries in the trailing window to compare with",
        ),
        _Gate(
            "consistent_duplicates",
            "conflicting_requests",
            0.0,
            0.0,
            count("conflicting_requests"),
        ),
        _Gate("readable_inputs", "corrupt_inputs", 0.0, 0.0, count("corrupt_inputs")),
        _Gate("non_empty_day", "queries", min_queries, None, count("queries")),
    )
    assert tuple(g.check for g in gates) == CHECKS
    assert {g.check for g in gates if g.max_value is None} == AT_LEAST
    return gates


# --- great-expectations, built once per process ---------------------------------------------

_LOCK = threading.RLock()


@dataclass(frozen=True)
class _Engine:
    context: AbstractDataContext
    batch_definition: BatchDefinition


@functools.lru_cache(maxsize=1)
def _engine() -> _Engine:
    """An ephemeral context with one pandas data source whose batch is a whole facts frame."""
    gx_logger = logging.getLogger("great_expectations")
    if gx_logger.level == logging.NOTSET:  # GX logs chatty INFO lines from import on
        gx_logger.setLevel(logging.WARNING)

    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.enable_analytics(False)
    # GX draws a tqdm "Calculating Metrics" bar on stderr for any suite of a few expectations;
    # tqdm's own TQDM_DISABLE cannot help, because GX passes `disable=` explicitly.
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    asset = context.data_sources.add_pandas("logmetrics_facts").add_dataframe_asset("facts")
    return _Engine(context, asset.add_batch_definition_whole_dataframe("all_days"))


@functools.cache
def _suite(
    max_missing: float, max_malformed: float, min_volume: float, min_queries: float
) -> ExpectationSuite:
    """One expectation per check, tagged with the check's name in its meta."""
    context = _engine().context  # GX wants a context before a suite takes expectations
    import great_expectations as gx

    suite = gx.ExpectationSuite(
        name=f"logmetrics_quality(missing<={max_missing!r},malformed<={max_malformed!r},"
        f"volume>={min_volume!r},queries>={min_queries!r})"
    )
    for gate in _gates(max_missing, max_malformed, min_volume, min_queries):
        suite.add_expectation(
            gx.expectations.ExpectColumnValuesToBeBetween(
                column=gate.column,
                min_value=gate.min_value,
                max_value=gate.max_value,
                meta={"check": gate.check},
            )
        )
    return context.suites.add(suite)


# --- evaluation -----------------------------------------------------------------------------


def evaluate(
    facts: pd.DataFrame, quality: QualityConfig, allow_empty_days: bool = False
) -> list[CheckResult]:
    """One CheckResult per (day, check), sorted by (metric_date, CHECKS order). A day with no
    query fails `non_empty_day` unless `allow_empty_days` (a source with quiet days); a check
    whose value is undefined that day (a volume without trailing days to compare with) is not
    judged: success None, and why in its details."""
    absent = [c for c in FACT_COLUMNS if c not in facts.columns]
    if absent:
        raise ValueError(f"facts lack column(s) {absent}")
    if facts.empty:
        return []
    thresholds = (
        float(quality.max_missing_cluster_rate),
        float(quality.max_malformed_rate),
        float(quality.min_volume_ratio),
        0.0 if allow_empty_days else 1.0,
    )
    gates = _gates(*thresholds)
    days = [_as_date(value) for value in facts[_DATE]]
    if len(set(days)) != len(days):
        raise ValueError("facts must hold one row per metric_date")

    rows = facts.to_dict("records")
    observed = {g.check: [g.observe(row) for row in rows] for g in gates}
    frame = facts.assign(
        metric_date=days,
        **{
            g.column: pd.Series(observed[g.check], index=facts.index, dtype="float64")
            for g in gates
            if g.column not in FACT_COLUMNS
        },
    )

    with _LOCK:
        suite = _suite(*thresholds)
        batch = _engine().batch_definition.get_batch(batch_parameters={"dataframe": frame})
        validation = batch.validate(suite, result_format=_RESULT_FORMAT)
    by_check = {_check_of(r): r for r in validation.results}
    if sorted(by_check) != sorted(CHECKS):
        raise RuntimeError(f"GX returned results for {sorted(by_check)}, expected {CHECKS}")

    severity = quality.severity
    results: list[CheckResult] = []
    for gate in gates:
        gx_result = by_check[gate.check]
        unexpected = _unexpected_days(gx_result)
        summary = _summary(gx_result)
        for day, value in zip(days, observed[gate.check], strict=True):
            judged = day not in unexpected
            success = gate.passes(value)
            if success is not None and judged != success:
                raise RuntimeError(
                    f"GX and the pass rule disagree on {gate.check} for {day}: "
                    f"GX success={judged}, observed={value!r}, threshold={gate.threshold!r}"
                )
            details = {**summary, "day_unexpected": not judged, "observed_value": value}
            if success is None:
                details["not_judged"] = gate.not_judged
            results.append(
                CheckResult(
                    metric_date=day,
                    check=gate.check,
                    success=success,
                    observed_value=value,
                    threshold=gate.threshold,
                    severity=getattr(severity, gate.check),
                    details=json.dumps(details, default=str),
                )
            )
    order = {name: i for i, name in enumerate(CHECKS)}
    results.sort(key=lambda r: (r.metric_date, order[r.check]))
    return results


def warm_up(quality: QualityConfig) -> threading.Thread | None:
    """Import great-expectations and build its context and suite in a background thread (one
    validation of a day of zeros), while the caller starts Spark: the run's own evaluation then
    costs a validation, not seconds of imports. None when the gates are off."""
    if not quality.enabled:
        return None
    thread = threading.Thread(target=_warm, args=(quality,), name="gx-warm-up", daemon=True)
    thread.start()
    return thread


def _warm(quality: QualityConfig) -> None:
    zeros = dict.fromkeys(FACT_COLUMNS, 0)
    try:
        evaluate(pd.DataFrame([{**zeros, _DATE: datetime.date(1970, 1, 1)}]), quality)
    except Exception:  # the run's own evaluation reports whatever is wrong, in its place
        log.debug("great-expectations warm-up failed", exc_info=True)


def _as_date(value: Any) -> datetime.date:
    """metric_date as a datetime.date (it may arrive as a pandas Timestamp or a datetime)."""
    if isinstance(value, datetime.datetime):  # pandas Timestamps are datetimes too
        return value.date()
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str):
        return datetime.date.fromisoformat(value)
    raise TypeError(f"metric_date must be a date, got {value!r}")


def _check_of(result: ExpectationValidationResult) -> str:
    config = result.expectation_config
    meta = config.meta if config is not None else None
    if not meta or "check" not in meta:
        raise RuntimeError(f"GX result without a check tag: {result}")
    return str(meta["check"])


def _unexpected_days(result: ExpectationValidationResult) -> set[datetime.date]:
    """The days GX found unexpected for one expectation (raising if GX itself failed)."""
    if result.exception_info and result.exception_info.get("raised_exception"):
        raise RuntimeError(
            f"GX could not evaluate {_check_of(result)}: "
            f"{result.exception_info.get('exception_message')}"
        )
    index_list = result.result.get("unexpected_index_list")
    if index_list is None:
        raise RuntimeError(f"GX returned no unexpected_index_list for {_check_of(result)}")
    days = {_as_date(entry[_DATE]) for entry in index_list}
    if len(days) != result.result.get("unexpected_count"):
        raise RuntimeError(f"GX's unexpected_index_list and count disagree for {_check_of(result)}")
    return days


def _summary(result: ExpectationValidationResult) -> dict[str, Any]:
    """The compact, day-independent part of an expectation's result."""
    config = result.expectation_config
    assert config is not None
    kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
    return {
        "expectation_type": config.type,
        "kwargs": kwargs,
        "batch_success": bool(result.success),
        "element_count": result.result.get("element_count"),
        "unexpected_count": result.result.get("unexpected_count"),
        "missing_count": result.result.get("missing_count"),
    }
