"""The alarm on the metric itself: each published day's statistics against their own baseline.

Pure and driver-side: the daily table holds a few hundred rows a day, so the rule runs on a
pandas frame of the published `unique_clusters_daily` rows (the days judged and the days their
baselines reach back to), not in a Spark pass. The rule (docs/alerts.md), per (day, k, segment,
segment_value, statistic):

- `too_few_queries` when the day has fewer than `min_queries` queries;
- else `insufficient_baseline` when fewer than `min_baseline_days` baseline days qualify
  (published, `dq_passed`, at least `min_queries` queries; the same weekday of the previous
  `baseline_weeks` weeks, or the previous `baseline_days` days);
- else, with delta = value - baseline mean and limit = sigmas x sqrt(baseline sd^2 + the day's
  sampling variance), a change fires when |delta| >= min_effect and |delta| > limit: `alert` in
  the regression direction (the share rises, the mean falls), `improvement` in the other;
- else `ok`.

Large samples make p-values useless (every day "differs"), hence a limit learned from the
spread of past days (between-day variance, Laney p') plus the day's own binomial or histogram
noise, a weekday-seasonal baseline and a minimum effect.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from logmetrics.config import AlertsConfig
from logmetrics.schemas import (
    ALERT,
    IMPROVEMENT,
    INSUFFICIENT_BASELINE,
    MEAN_STATISTIC,
    OK,
    SHARE_STATISTIC,
    TOO_FEW_QUERIES,
)

ALERT_COLUMNS = [
    "metric_date",
    "k",
    "segment",
    "segment_value",
    "statistic",
    "value",
    "baseline_mean",
    "baseline_sd",
    "baseline_days",
    "queries",
    "delta",
    "limit",
    "min_effect",
    "status",
    "cluster_table_version",
    "cluster_table_changed",
]
"""What `alert_rows` returns: the alerts table's columns but the run's provenance."""

_DTYPES = {
    "k": "int64",
    "value": "float64",
    "baseline_mean": "float64",
    "baseline_sd": "float64",
    "baseline_days": "int64",
    "queries": "int64",
    "delta": "float64",
    "limit": "float64",
    "min_effect": "float64",
    "cluster_table_version": "Int64",
    "cluster_table_changed": "bool",
}
_RISE_IS_REGRESSION = {SHARE_STATISTIC: True, MEAN_STATISTIC: False}


@dataclass(frozen=True)
class _Day:
    """One published daily row, as the rule needs it."""

    queries: int
    histogram: np.ndarray
    values: dict[str, float | None]
    threshold: int
    dq_passed: bool
    cluster_table_version: int | None


def baseline_dates(day: dt.date, settings: AlertsConfig) -> list[dt.date]:
    """The days a day's baseline is drawn from, before any of them is found to qualify."""
    if settings.baseline == "same_weekday":
        return [day - dt.timedelta(weeks=w) for w in range(1, settings.baseline_weeks + 1)]
    return [day - dt.timedelta(days=d) for d in range(1, settings.baseline_days + 1)]


def alert_rows(
    daily: pd.DataFrame,
    days: Sequence[dt.date],
    settings: AlertsConfig,
    ks: Iterable[int] | None = None,
) -> pd.DataFrame:
    """One row per (day of `days`, k, segment, segment_value, statistic) that `daily` has a
    row for on that day (k in `ks` when given), judged against the baseline `daily` holds.

    `daily`: published `unique_clusters_daily` rows (`schemas.DAILY_COLUMNS`, or at least those
    the rule reads) of the judged days and of the `settings.lookback_days()` days before them.
    Days are judged in date order; a day's baseline comes from `daily` alone, so a backfill's
    later days use its earlier days.
    Returns `ALERT_COLUMNS`, sorted by date, k, segment, segment value and statistic.
    """
    series = _series(daily, ks)
    out = []
    for day in sorted(set(days)):
        for key in sorted(series):
            today = series[key].get(day)
            if today is None:
                continue
            for statistic in sorted(settings.statistics):
                out.append(_judge(day, key, statistic, today, series[key], settings))
    return pd.DataFrame(out, columns=ALERT_COLUMNS).astype(_DTYPES)


def _series(
    daily: pd.DataFrame, ks: Iterable[int] | None
) -> dict[tuple[Any, ...], dict[dt.date, _Day]]:
    """The daily rows per (k, segment, segment_value) and date (k in `ks` when given)."""
    wanted = None if ks is None else set(ks)
    series: dict[tuple[Any, ...], dict[dt.date, _Day]] = {}
    for row in daily.itertuples(index=False):
        if wanted is not None and int(row.k) not in wanted:
            continue
        key = (int(row.k), str(row.segment), str(row.segment_value))
        series.setdefault(key, {})[as_date(row.metric_date)] = _day(row)
    return series


def _baseline(
    day: dt.date,
    statistic: str,
    today: _Day,
    history: dict[dt.date, _Day],
    settings: AlertsConfig,
) -> list[dt.date]:
    """The baseline days that qualify for the statistic (`_qualifies`), newest first."""
    return [
        d
        for d in baseline_dates(day, settings)
        if d in history and _qualifies(history[d], statistic, today, settings)
    ]


def _judge(
    day: dt.date,
    key: tuple[Any, ...],
    statistic: str,
    today: _Day,
    history: dict[dt.date, _Day],
    settings: AlertsConfig,
) -> dict[str, Any]:
    value = today.values[statistic]
    baseline = [history[d] for d in _baseline(day, statistic, today, history, settings)]
    values = [v for b in baseline if (v := b.values[statistic]) is not None]  # all: see _qualifies
    mean = statistics.fmean(values) if values else None
    sd = statistics.stdev(values) if len(values) >= 2 else None
    delta = None if value is None or mean is None else value - mean
    limit = None
    if value is not None and sd is not None and today.queries > 0:
        noise = sampling_variance(statistic, today.histogram, today.threshold)
        limit = settings.sigmas * math.sqrt(sd**2 + noise)
    min_effect = getattr(settings.min_effect, statistic)
    if today.queries < settings.min_queries:
        status = TOO_FEW_QUERIES
    elif len(baseline) < settings.min_baseline_days:
        status = INSUFFICIENT_BASELINE
    else:
        assert delta is not None and limit is not None
        if abs(delta) >= min_effect and abs(delta) > limit:
            status = ALERT if (delta > 0) == _RISE_IS_REGRESSION[statistic] else IMPROVEMENT
        else:
            status = OK
    return {
        "metric_date": day,
        "k": key[0],
        "segment": key[1],
        "segment_value": key[2],
        "statistic": statistic,
        "value": value,
        "baseline_mean": mean,
        "baseline_sd": sd,
        "baseline_days": len(baseline),
        "queries": today.queries,
        "delta": delta,
        "limit": limit,
        "min_effect": float(min_effect),
        "status": status,
        "cluster_table_version": today.cluster_table_version,
        "cluster_table_changed": any(
            b.cluster_table_version != today.cluster_table_version for b in baseline
        ),
    }


CULPRITS = 5
"""Crowding keys listed under each alert: the day's top five."""

CULPRIT_COLUMNS = [
    "metric_date",
    "k",
    "segment",
    "segment_value",
    "statistic",
    "rank",
    "cluster_id",
    "chunk_id",
    "redundant_slots",
    "redundant_tokens",
    "redundant_usd",
    "baseline_redundant_slots",
    "is_new",
]


def culprits(
    alerts: pd.DataFrame,
    daily: pd.DataFrame,
    crowding: pd.DataFrame,
    settings: AlertsConfig,
    top: int = CULPRITS,
) -> pd.DataFrame:
    """For each `alert` row of `alert_rows`, the `top` keys of its day's crowding rows (the same
    k and segment row, `unique_clusters_crowding`): their redundant slots that day, their mean
    over the alert's baseline days (the days that qualified for its statistic; a key not listed
    on a baseline day counts 0 there) and `is_new`: listed on none of those days.

    `daily`: the published daily rows the alerts were judged from; `crowding`: the crowding
    rows of the alert days and of their baseline days. Returns `CULPRIT_COLUMNS`, in the order
    of the alerts, then by rank."""
    fired = alerts[alerts["status"] == ALERT]
    if fired.empty or crowding.empty:
        return pd.DataFrame(columns=CULPRIT_COLUMNS)
    series = _series(daily, None)
    listed: dict[tuple[Any, ...], list[Any]] = {}
    for row in crowding.sort_values("rank").itertuples(index=False):
        where = (as_date(row.metric_date), int(row.k), str(row.segment), str(row.segment_value))
        listed.setdefault(where, []).append(row)
    out = []
    for alert in fired.itertuples(index=False):
        day, row_key = (
            as_date(alert.metric_date),
            (int(alert.k), alert.segment, alert.segment_value),
        )
        history = series.get(row_key, {})
        if day not in history:
            continue
        baseline = _baseline(day, alert.statistic, history[day], history, settings)
        before = [
            {_crowding_key(r): int(r.redundant_slots) for r in listed.get((d, *row_key), [])}
            for d in baseline
        ]
        for culprit in listed.get((day, *row_key), [])[:top]:
            key = _crowding_key(culprit)
            out.append(
                {
                    "metric_date": day,
                    "k": row_key[0],
                    "segment": row_key[1],
                    "segment_value": row_key[2],
                    "statistic": alert.statistic,
                    "rank": int(culprit.rank),
                    "cluster_id": culprit.cluster_id,
                    "chunk_id": culprit.chunk_id,
                    "redundant_slots": int(culprit.redundant_slots),
                    "redundant_tokens": _number(getattr(culprit, "redundant_tokens", None)),
                    "redundant_usd": _number(getattr(culprit, "redundant_usd", None)),
                    "baseline_redundant_slots": (
                        statistics.fmean(b.get(key, 0) for b in before) if before else None
                    ),
                    "is_new": all(key not in b for b in before),
                }
            )
    return pd.DataFrame(out, columns=CULPRIT_COLUMNS)


def _crowding_key(row: Any) -> tuple[str | None, str | None]:
    return (_text(row.cluster_id), _text(row.chunk_id))


def _text(value: Any) -> str | None:
    return None if _is_null(value) else str(value)


def describe_culprit(row: Any) -> str:
    """One line under an alert: the key, its redundant slots and what they cost that day, the
    baseline's, new or not."""
    name = f"cluster {row.cluster_id}" if not _is_null(row.cluster_id) else f"chunk {row.chunk_id}"
    baseline = row.baseline_redundant_slots
    then = "no baseline day" if _is_null(baseline) else f"baseline mean {baseline:.1f}"
    new = ", NEW among the baseline's top keys" if row.is_new else ""
    tokens, usd = getattr(row, "redundant_tokens", None), getattr(row, "redundant_usd", None)
    cost = (
        ""
        if _is_null(tokens) or _is_null(usd)
        else f", {_tokens_text(float(tokens or 0))} tokens, {float(usd or 0):.2f} USD"
    )
    return f"  #{row.rank} {name}: {row.redundant_slots} redundant slots{cost} ({then}){new}"


def _tokens_text(tokens: float) -> str:
    """`0.42M`, `42.3k`, `510`: a count of tokens for people."""
    if tokens >= 100_000:
        return f"{tokens / 1_000_000:.2f}M"
    if tokens >= 1_000:
        return f"{tokens / 1_000:.1f}k"
    return f"{tokens:.0f}"


def _qualifies(past: _Day, statistic: str, today: _Day, settings: AlertsConfig) -> bool:
    """A baseline day: published with every blocking check passed, enough queries, and (for
    the share) taken at the same threshold as the judged day."""
    if not past.dq_passed or past.queries < settings.min_queries:
        return False
    if past.values[statistic] is None:
        return False
    return statistic != SHARE_STATISTIC or past.threshold == today.threshold


def sampling_variance(
    statistic: str, histogram: Sequence[int] | np.ndarray, threshold: int
) -> float:
    """The variance of the day's value from its own n queries, exactly from its histogram:
    p(1 - p) / n for the share p at or below `threshold`, the histogram's population variance
    / n for the mean."""
    counts = np.asarray(histogram, dtype=np.float64)
    n = float(counts.sum())
    if n == 0:
        return float("nan")
    if statistic == SHARE_STATISTIC:
        p = float(counts[: threshold + 1].sum()) / n
        return p * (1 - p) / n
    if statistic == MEAN_STATISTIC:
        clusters = np.arange(len(counts), dtype=np.float64)
        mean = float((counts * clusters).sum()) / n
        return float((counts * (clusters - mean) ** 2).sum()) / n / n
    raise ValueError(f"unknown statistic {statistic!r}")


def describe(row: Any) -> str:
    """One line for an alert or an improvement: date, segment, k, statistic, the value against
    the baseline mean +- the limit."""
    where = "all traffic" if row.segment == "all" else f"{row.segment}={row.segment_value}"
    digits = 4 if row.statistic == SHARE_STATISTIC else 3
    changed = "; cluster table changed since the baseline" if row.cluster_table_changed else ""
    return (
        f"{row.status.upper()} {as_date(row.metric_date)} {where} k={row.k} {row.statistic}: "
        f"{row.value:.{digits}f} vs baseline {row.baseline_mean:.{digits}f} "
        f"± {row.limit:.{digits}f} (delta {row.delta:+.{digits}f}, "
        f"{row.baseline_days} baseline days){changed}"
    )


def _day(row: Any) -> _Day:
    histogram = np.asarray(row.histogram, dtype=np.int64)
    return _Day(
        queries=int(row.queries),
        histogram=histogram,
        values={
            SHARE_STATISTIC: _number(row.share_at_or_below_threshold),
            MEAN_STATISTIC: _number(row.mean),
        },
        threshold=int(row.threshold),
        dq_passed=bool(row.dq_passed),
        cluster_table_version=None
        if _is_null(row.cluster_table_version)
        else int(row.cluster_table_version),
    )


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _number(value: Any) -> float | None:
    return None if _is_null(value) else float(value)


def as_date(value: Any) -> dt.date:
    """metric_date as a `datetime.date`, whether pandas holds a date or a Timestamp."""
    if isinstance(value, pd.Timestamp | dt.datetime):
        return value.date()
    assert isinstance(value, dt.date)
    return value
