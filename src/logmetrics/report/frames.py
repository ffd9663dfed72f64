"""The report's numbers: one small pandas frame per section, exactly what its figure and table
show, built from the published tables' rows of the date range (`build_report_data`; pure pandas,
no Spark, no I/O).

Aggregation over a range follows the tables' rules (docs/tables.md): quantiles are per day and
never averaged; histograms add; a mean over days is a total over queries
(sum(unique_clusters_total) / sum(queries)), never a mean of daily means.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from logmetrics.config import AlertsConfig, default_k
from logmetrics.console import days_text
from logmetrics.errors import LogmetricsError
from logmetrics.quality.gx_suite import CHECKS, GUARDS, CheckResult
from logmetrics.quality.policy import bound_text, failing_checks, observed_text, verdicts
from logmetrics.rules.alerts import as_date, culprits
from logmetrics.rules.calibration import calibration_of, version_key
from logmetrics.schemas import ALERT, ALL_TRAFFIC, CALIBRATION, IMPROVEMENT
from logmetrics.tables.catalog import DAILY_TABLE


class ReportError(LogmetricsError):
    """The tables a report needs are absent, or hold no row in the requested range."""


@dataclass(frozen=True)
class ReportData:
    """What the report shows: one small frame per figure, exactly the numbers it is drawn from.

    Frames of the all-traffic rows (segment = segment_value = 'all'), metric_date as
    `datetime.date`. A frame is None when its table is absent or has no row in the range.
    """

    start: dt.date
    end: dt.date
    threshold: int | None
    median_band: pd.DataFrame  # metric_date, k, queries, p10, median, p90
    share: pd.DataFrame  # metric_date, k, queries, threshold, share_at_or_below_threshold
    mean: pd.DataFrame  # metric_date, k, queries, mean
    histogram_date: dt.date
    histogram: pd.DataFrame  # k, unique_clusters, queries, share (of the day's queries at k)
    missing: pd.DataFrame  # metric_date, results, missing_cluster_results, missing_cluster_rate
    max_missing_cluster_rate: float | None
    k_sweep: pd.DataFrame | None  # k, queries, unique_clusters_total, mean_..., distinct_...
    cost: pd.DataFrame | None  # metric_date, k, queries, slots, redundant_slots, ..._usd
    segments: pd.DataFrame | None  # metric_date, segment, segment_value, k, queries, mean, share
    evaluation: pd.DataFrame | None  # run, k, metric, value (+ queries): the ALL rows
    alerts: pd.DataFrame | None = None  # the alert and improvement rows, every segment
    # None: no unique_clusters_alerts table (no marks); empty: nothing fired in the range.
    crowding: pd.DataFrame | None = None  # the top keys shown (`_crowding_shown`), per alert's
    # day, k and segment row, each beside its mean over the alert's baseline days and whether
    # it is new there; and the last day's, at the default k, when no alert fired that day.
    # The cluster table version each day was computed from (metric_date, cluster_table_version)
    # and, per version the range used, the detector's calibration (`_calibration_frame`); None:
    # no calibration was ever published.
    versions: pd.DataFrame | None = None
    calibration: pd.DataFrame | None = None
    # Data quality (`_quality`): each check on each day (metric_date, check, outcome, ...), and
    # per check what it guards, its threshold and the days it failed; the run's own closing
    # lines for the failed checks. None: no data_quality rows in the range.
    quality_days: pd.DataFrame | None = None
    quality: pd.DataFrame | None = None
    quality_failures: tuple[str, ...] = ()


ALERT_COLUMNS = ["metric_date", "segment", "segment_value", "k", "statistic", "status"]
ALERT_COLUMNS += ["value", "baseline_mean", "limit", "delta", "baseline_days", "queries"]
ALERT_COLUMNS += ["cluster_table_changed"]
CROWDING_COLUMNS = ["metric_date", "k", "segment", "segment_value", "rank", "cluster_id"]
CROWDING_COLUMNS += ["chunk_id", "redundant_slots", "requests_affected"]
CROWDING_COLUMNS += ["share_of_redundant_slots", "cluster_size", "redundant_tokens"]
CROWDING_COLUMNS += ["redundant_usd"]
_CROWDING_SHOWN_COLUMNS = [*CROWDING_COLUMNS[:8], "baseline_redundant_slots", "is_new"]
_CROWDING_SHOWN_COLUMNS += [*CROWDING_COLUMNS[8:], "statistic"]
QUALITY_COLUMNS = ["metric_date", "check", "success", "observed_value", "threshold", "severity"]
PASSED, WARNED, BLOCKED, NOT_JUDGED = "passed", "warned", "blocked", "not judged"
"""A check's outcome on a day: passed; failed, a warning (the day is published); failed, a
blocking check (the day is held back, or published with dq_passed = false under `warn`); not
judged (nothing to judge that day)."""
CROWDING_SHOWN = 10
"""Keys shown per alert (and for the last day) in "What crowds the window"."""


def build_report_data(
    daily: pd.DataFrame,
    k_sweep: pd.DataFrame | None,
    cost: pd.DataFrame | None,
    evaluation: pd.DataFrame | None,
    start: dt.date,
    end: dt.date,
    max_missing_cluster_rate: float | None = None,
    alerts: pd.DataFrame | None = None,
    crowding: pd.DataFrame | None = None,
    history: pd.DataFrame | None = None,
    alert_settings: AlertsConfig | None = None,
    calibration: pd.DataFrame | None = None,
    detector: str | None = None,
    quality: pd.DataFrame | None = None,
) -> ReportData:
    """The figures' frames from the tables' rows in [start, end] (pure pandas); `alerts`, the
    unique_clusters_alerts rows of the range, `crowding`, unique_clusters_crowding rows (at
    least the top `CROWDING_SHOWN` of the last day and of the alert days, and every row of
    those alerts' baseline days), and `calibration`, every detector_calibration row (each None
    when the table does not exist); `history`, the daily rows of the alert days and their
    baseline days, judged by `alert_settings` (either None: no baseline beside the keys);
    `detector`, the label that describes a cluster table without versions; `quality`, the
    data_quality rows of the range (`QUALITY_COLUMNS`; None without any)."""
    everything = _all_traffic(daily)
    if everything.empty:
        raise ReportError(f"{DAILY_TABLE.name} has no all-traffic rows from {start} to {end}")
    histogram_date, histogram = _latest_histogram(everything)
    versions = _versions(everything)
    thresholds = everything["threshold"].dropna().unique()
    k = default_k(everything["k"])
    quality_days, quality_summary, quality_failures = _quality(quality)
    return ReportData(
        start=start,
        end=end,
        threshold=int(thresholds[0]) if len(thresholds) == 1 else None,
        median_band=_frame(everything, ["metric_date", "k", "queries", "p10", "median", "p90"]),
        share=_frame(
            everything,
            ["metric_date", "k", "queries", "threshold", "share_at_or_below_threshold"],
        ),
        mean=_frame(everything, ["metric_date", "k", "queries", "mean"]),
        histogram_date=histogram_date,
        histogram=histogram,
        missing=_missing(everything),
        max_missing_cluster_rate=max_missing_cluster_rate,
        k_sweep=_k_sweep(k_sweep),
        cost=_cost(cost, ks=set(everything["k"])),
        segments=_segments(daily),
        evaluation=_evaluation_frame(evaluation),
        alerts=_fired(alerts),
        crowding=_crowding_shown(crowding, _fired(alerts), end, k, history, alert_settings),
        versions=versions,
        calibration=None
        if calibration is None or versions is None
        else _calibration_frame(versions, calibration, detector),
        quality_days=quality_days,
        quality=quality_summary,
        quality_failures=quality_failures,
    )


def _versions(everything: pd.DataFrame) -> pd.DataFrame | None:
    """Per day, the cluster table version its rows were computed from (null: no versions);
    None for rows that do not say."""
    if "cluster_table_version" not in everything:
        return None
    days = everything.sort_values("metric_date").drop_duplicates("metric_date")
    return days[["metric_date", "cluster_table_version"]].reset_index(drop=True)


def version_changes(versions: pd.DataFrame) -> list[tuple[dt.date, Any]]:
    """(day, version) of each day computed from another version than the day before it."""
    changes = []
    for before, after in zip(
        versions.iloc[:-1].itertuples(), versions.iloc[1:].itertuples(), strict=True
    ):
        if version_key(before.cluster_table_version) != version_key(after.cluster_table_version):
            changes.append((as_date(after.metric_date), version_key(after.cluster_table_version)))
    return changes


def _calibration_frame(
    versions: pd.DataFrame, rows: pd.DataFrame, detector: str | None
) -> pd.DataFrame:
    """Per cluster table version the range used (in order of first use), its days and every
    calibration row describing it (`rules.calibration.calibration_of`); a version without one
    gets a row of nulls, so the table says so."""
    out = []
    for version, days in versions.groupby(
        versions["cluster_table_version"].map(version_key), dropna=False, sort=False
    ):
        key = version_key(version)
        span = {
            "cluster_table_version": key,
            "first_day": as_date(days["metric_date"].min()),
            "last_day": as_date(days["metric_date"].max()),
        }
        mine = calibration_of(rows, key, detector)
        if mine.empty:
            out.append({**span, "detector": None, "calibrated": False})
        for row in mine.sort_values(["measured_on", "threshold"]).to_dict("records"):
            del row["cluster_table_version"]
            out.append({**span, **row, "calibrated": True})
    columns = ["cluster_table_version", "first_day", "last_day", *CALIBRATION.fieldNames()[1:]]
    return pd.DataFrame(out, columns=[*columns, "calibrated"])


def _crowding_shown(
    rows: pd.DataFrame | None,
    fired: pd.DataFrame | None,
    end: dt.date,
    k_last: int,
    history: pd.DataFrame | None,
    settings: AlertsConfig | None,
) -> pd.DataFrame | None:
    """The top `CROWDING_SHOWN` keys of every alert's day, k and segment row (one block each,
    whichever statistics fired there), each beside its mean over that alert's baseline days and
    `is_new` (`rules.alerts.culprits`, from `history`; null without it); and, when no alert fired
    on the report's last day, that day's all traffic at `k_last` (no baseline: null). As
    `_CROWDING_SHOWN_COLUMNS` (`statistic`: that of the alert whose baseline the keys are set
    beside, the mean's when both fired), by date, all traffic first, segment row, then k; None
    without the table."""
    if rows is None:
        return None
    alerts = pd.DataFrame(columns=ALERT_COLUMNS) if fired is None else fired
    alerts = alerts[alerts["status"] == ALERT]
    shown: dict[tuple[dt.date, bool, str, str, int], Any] = {}
    for alert in alerts.sort_values("statistic").itertuples(index=False):
        where = (as_date(alert.metric_date), alert.segment != ALL_TRAFFIC, alert.segment)
        shown.setdefault((*where, alert.segment_value, int(alert.k)), alert)
    if not any(day == end for day, *_ in shown):
        shown[(end, False, ALL_TRAFFIC, ALL_TRAFFIC, k_last)] = None
    frames = []
    for (day, _, segment, value, k), alert in sorted(shown.items(), key=lambda item: item[0]):
        of_block = rows[
            (rows["metric_date"].map(as_date) == day)
            & (rows["k"] == k)
            & (rows["segment"] == segment)
            & (rows["segment_value"] == value)
        ]
        of_block = of_block.sort_values("rank").head(CROWDING_SHOWN)
        if of_block.empty:
            continue
        frames.append(_beside_baseline(of_block, alert, rows, history, settings))
    if not frames:
        return pd.DataFrame(columns=_CROWDING_SHOWN_COLUMNS)
    return pd.concat(frames, ignore_index=True)[_CROWDING_SHOWN_COLUMNS]


def _beside_baseline(
    of_day: pd.DataFrame,
    alert: Any,
    rows: pd.DataFrame,
    history: pd.DataFrame | None,
    settings: AlertsConfig | None,
) -> pd.DataFrame:
    """A day's shown keys with their baseline mean and `is_new` against `alert`'s baseline
    days, as the printed culprit lines give them (`rules.alerts.culprits`)."""
    shown = of_day[CROWDING_COLUMNS].reset_index(drop=True)
    statistic = None if alert is None else alert.statistic
    if alert is None or history is None or settings is None:
        return shown.assign(baseline_redundant_slots=np.nan, is_new=None, statistic=statistic)
    against = culprits(pd.DataFrame([alert]), history, rows, settings, top=CROWDING_SHOWN)
    against = against[["rank", "baseline_redundant_slots", "is_new"]]
    out = shown.merge(against, on="rank", how="left", validate="one_to_one")
    out["is_new"] = out["is_new"].astype(object).where(out["baseline_redundant_slots"].notna())
    return out.assign(statistic=statistic)  # no baseline day found: neither mean nor NEW


def _fired(rows: pd.DataFrame | None) -> pd.DataFrame | None:
    """The alerts and improvements in the order they are read: by date, all traffic first,
    then by segment value, k and statistic (as the run prints them)."""
    if rows is None:
        return None
    fired = rows[rows["status"].isin([ALERT, IMPROVEMENT])].copy()
    fired["_order"] = fired["segment"] != ALL_TRAFFIC
    keys = ["metric_date", "_order", "segment", "segment_value", "k", "statistic"]
    return fired.sort_values(keys).drop(columns="_order").reset_index(drop=True)


def _all_traffic(df: pd.DataFrame) -> pd.DataFrame:
    mask = (df["segment"] == ALL_TRAFFIC) & (df["segment_value"] == ALL_TRAFFIC)
    return df[mask].drop(columns=["segment", "segment_value"])


def _frame(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    keys = [c for c in ("metric_date", "k") if c in columns]
    return df[columns].sort_values(keys).reset_index(drop=True)


def _latest_histogram(daily: pd.DataFrame) -> tuple[dt.date, pd.DataFrame]:
    """The latest day with queries (the latest day at all when none has), one row per
    (k, number of unique clusters)."""
    with_queries = daily[daily["queries"] > 0]
    day = (with_queries if not with_queries.empty else daily)["metric_date"].max()
    rows = []
    for row in daily[daily["metric_date"] == day].sort_values("k").itertuples():
        counts = [int(n) for n in row.histogram]
        total = sum(counts)
        for value, n in enumerate(counts):
            rows.append(
                {
                    "k": int(row.k),
                    "unique_clusters": value,
                    "queries": n,
                    "share": n / total if total else np.nan,
                }
            )
    return day, pd.DataFrame(rows, columns=["k", "unique_clusters", "queries", "share"])


def _missing(daily: pd.DataFrame) -> pd.DataFrame:
    """results and missing_cluster_results count the whole list: the same at every k, so one
    row per day (the smallest k's)."""
    first_k = daily.sort_values("k").groupby("metric_date", as_index=False).first()
    columns = ["metric_date", "results", "missing_cluster_results", "missing_cluster_rate"]
    return _frame(first_k, columns)


def _k_sweep(rows: pd.DataFrame | None) -> pd.DataFrame | None:
    """Over the range, per k: totals add, the mean is their ratio (weighted by queries)."""
    if rows is None:
        return None
    everything = _all_traffic(rows)
    if everything.empty:
        return None
    sums = everything.groupby("k", as_index=False)[["queries", "unique_clusters_total"]].sum()
    sums = sums.sort_values("k").reset_index(drop=True)
    queries = sums["queries"].astype("float64")
    sums["mean_unique_clusters"] = (sums["unique_clusters_total"] / queries).where(queries > 0)
    sums["distinct_fraction"] = sums["mean_unique_clusters"] / sums["k"]
    previous = sums["mean_unique_clusters"].shift(1)
    previous_k = sums["k"].shift(1)
    sums["marginal_rate"] = np.where(
        sums["k"] == 1,
        sums["mean_unique_clusters"],
        (sums["mean_unique_clusters"] - previous).where(previous_k == sums["k"] - 1),
    )
    return sums


def _cost(rows: pd.DataFrame | None, ks: set[int]) -> pd.DataFrame | None:
    """All traffic at the ks of the daily table (the table has every k up to the largest)."""
    if rows is None:
        return None
    everything = _all_traffic(rows)
    everything = everything[everything["k"].isin(ks)]
    if everything.empty:
        return None
    columns = ["metric_date", "k", "queries", "slots", "redundant_slots"]
    return _frame(everything, [*columns, "redundant_tokens", "redundant_usd"])


def _segments(daily: pd.DataFrame) -> pd.DataFrame | None:
    """Per segment value and day, at the default k of the segment rows (`config.default_k`):
    the day's queries, mean and share at or below the threshold, as published."""
    rows = daily[daily["segment"] != ALL_TRAFFIC]
    if rows.empty:
        return None
    rows = rows[rows["k"] == default_k(rows["k"])]
    columns = ["metric_date", "segment", "segment_value", "k", "queries", "mean"]
    columns.append("share_at_or_below_threshold")
    keys = ["segment", "segment_value", "metric_date"]
    return rows[columns].sort_values(keys).reset_index(drop=True)


def _evaluation_frame(rows: pd.DataFrame | None) -> pd.DataFrame | None:
    if rows is None or rows.empty:
        return None
    return rows.sort_values(["run", "metric", "k"]).reset_index(drop=True)


def _quality(
    rows: pd.DataFrame | None,
) -> tuple[pd.DataFrame | None, pd.DataFrame | None, tuple[str, ...]]:
    """From the data_quality rows of the range: each check on each day with its outcome
    (metric_date, check, outcome, observed_value, threshold, severity); per check, in the gates'
    order, what it guards, its severity and threshold (the latest day's), and the days it
    failed, with the values observed then; and the lines the run printed for the failed checks
    (`quality.policy.failing_checks`). (None, None, ()) without rows."""
    if rows is None or rows.empty:
        return None, None, ()
    order = {name: i for i, name in enumerate(CHECKS)}
    days_df = rows.assign(
        metric_date=rows["metric_date"].map(as_date),
        outcome=[_outcome(r.success, r.severity) for r in rows.itertuples(index=False)],
        _order=rows["check"].map(lambda name: order.get(name, len(order))),
    ).sort_values(["_order", "check", "metric_date"])
    results = [
        CheckResult(
            metric_date=r.metric_date,
            check=r.check,
            success=None if pd.isna(r.success) else bool(r.success),
            observed_value=None if pd.isna(r.observed_value) else float(r.observed_value),
            threshold=None if pd.isna(r.threshold) else float(r.threshold),
            severity=r.severity,
            details="",
        )
        for r in days_df.itertuples(index=False)
    ]
    dates = sorted(set(days_df["metric_date"]))
    failures = tuple(failing_checks(verdicts(dates, results), blocking=True))
    summary = []
    for name, mine in days_df.groupby("check", sort=False):
        latest = mine.iloc[-1]
        failed = mine[mine["outcome"].isin([WARNED, BLOCKED])]
        threshold = None if pd.isna(latest["threshold"]) else float(latest["threshold"])
        summary.append(
            {
                "check": name,
                "guards": GUARDS.get(str(name), ""),
                "severity": latest["severity"],
                "threshold": bound_text(str(name), threshold),
                "days_failed": f"{len(failed)} of {len(mine)}",
                "failed_on": days_text(list(failed["metric_date"])) if len(failed) else None,
                "observed_when_failed": None
                if failed.empty
                else observed_text(
                    None if pd.isna(v) else float(v) for v in failed["observed_value"]
                ),
            }
        )
    days_df = days_df[
        ["metric_date", "check", "outcome", "observed_value", "threshold", "severity"]
    ]
    return days_df.reset_index(drop=True), pd.DataFrame(summary), failures


def _outcome(success: Any, severity: str) -> str:
    if pd.isna(success):
        return NOT_JUDGED
    if bool(success):
        return PASSED
    return BLOCKED if severity == "blocking" else WARNED
