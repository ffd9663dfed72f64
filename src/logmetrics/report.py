"""`logmetrics report`: PNG figures and one self-contained HTML page, from the Delta tables.

Two steps, kept apart:

1. `load_report_data` reads the published tables (never the raw logs), filters them to the
   date range in Spark and aggregates the few rows left in pandas into a `ReportData`: one
   small DataFrame per figure, holding exactly the numbers that figure is drawn from.
2. `render` draws each frame with matplotlib (Agg backend: no display) into a PNG and writes
   `index.html` with every PNG embedded as a base64 data URI and its numbers beside it.

Aggregation over a range follows the tables' rules (docs/tables.md): quantiles are per day and
never averaged; histograms add; a mean over days is a total over queries
(sum(unique_clusters_total) / sum(queries)), never a mean of daily means.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from logmetrics.config import AlertsConfig, Config, OutputConfig, default_k
from logmetrics.errors import ConfigError, LogmetricsError
from logmetrics.rules.alerts import as_date, baseline_dates, culprits, describe
from logmetrics.rules.calibration import calibration_of, version_key
from logmetrics.schemas import (
    ALERT,
    ALL_QUERIES,
    ALL_TRAFFIC,
    CALIBRATION,
    DAILY_COLUMNS,
    IMPROVEMENT,
    MEAN_STATISTIC,
    SHARE_STATISTIC,
)
from logmetrics.tables.catalog import (
    ALERTS_TABLE,
    CROWDING_TABLE,
    DAILY_TABLE,
    DETECTOR_CALIBRATION_TABLE,
    EVALUATION_RESULTS_TABLE,
    K_SWEEP_TABLE,
    REDUNDANCY_COST_TABLE,
    Table,
    read_table,
    table_ref,
)

log = logging.getLogger(__name__)

FIGURE_SIZE = (9.0, 4.8)  # inches
FIGURE_DPI = 100  # so every PNG is 900 x 480 pixels


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
    crowding: pd.DataFrame | None = None  # the top keys shown, per day (`_crowding_shown`),
    # each beside its mean over the day's alert's baseline days and whether it is new there.
    # The cluster table version each day was computed from (metric_date, cluster_table_version)
    # and, per version the range used, the detector's calibration (`_calibration_frame`); None:
    # no calibration was ever published.
    versions: pd.DataFrame | None = None
    calibration: pd.DataFrame | None = None


# --- reading (Spark) ------------------------------------------------------------------------

_ALERT_COLUMNS = ["metric_date", "segment", "segment_value", "k", "statistic", "status"]
_ALERT_COLUMNS += ["value", "baseline_mean", "limit", "delta", "baseline_days", "queries"]
_ALERT_COLUMNS += ["cluster_table_changed"]
_K_SWEEP_COLUMNS = ["metric_date", "k", "segment", "segment_value", "queries"]
_K_SWEEP_COLUMNS += ["unique_clusters_total"]
_COST_COLUMNS = ["metric_date", "k", "segment", "segment_value", "queries", "slots"]
_COST_COLUMNS += ["redundant_slots", "redundant_tokens", "redundant_usd"]
_EVALUATION_COLUMNS = ["run", "k", "metric", "value"]
_CROWDING_COLUMNS = ["metric_date", "k", "segment", "segment_value", "rank", "cluster_id"]
_CROWDING_COLUMNS += ["chunk_id", "redundant_slots", "requests_affected"]
_CROWDING_COLUMNS += ["share_of_redundant_slots", "cluster_size"]
_CROWDING_SHOWN_COLUMNS = [*_CROWDING_COLUMNS[:8], "baseline_redundant_slots", "is_new"]
_CROWDING_SHOWN_COLUMNS += [*_CROWDING_COLUMNS[8:], "statistic"]
CROWDING_SHOWN = 10
"""Keys shown per day in "What crowds the window"."""


def load_report_data(
    spark: SparkSession,
    config: Config,
    start: dt.date | None = None,
    end: dt.date | None = None,
) -> ReportData:
    """Read the tables for [start, end] (default: every date in unique_clusters_daily)."""
    if start is not None and end is not None and start > end:
        raise ConfigError(f"--start {start} is after --end {end}")
    output = config.output
    daily_df = read_table(spark, output, DAILY_TABLE)
    if daily_df is None:
        raise ReportError(
            f"no {DAILY_TABLE.name} table at {table_ref(output, DAILY_TABLE)}: "
            "run `logmetrics backfill` first"
        )
    if start is None or end is None:
        first, last = daily_df.agg(F.min("metric_date"), F.max("metric_date")).first() or (
            None,
            None,
        )
        if first is None or last is None:
            raise ReportError(f"{DAILY_TABLE.name} has no rows")
        start = start or first
        end = end or last
        if start > end:
            raise ConfigError(f"--start {start} is after the last date in the table, {end}")
    assert start is not None and end is not None
    daily = _in_range(daily_df, start, end, DAILY_COLUMNS)
    if daily.empty:
        raise ReportError(f"{DAILY_TABLE.name} has no rows from {start} to {end}")
    k_sweep = _optional(spark, output, K_SWEEP_TABLE, start, end, _K_SWEEP_COLUMNS)
    cost = _optional(spark, output, REDUNDANCY_COST_TABLE, start, end, _COST_COLUMNS)
    alerts_df = read_table(spark, output, ALERTS_TABLE)  # absent: no marks, and no error
    alerts = None if alerts_df is None else _in_range(alerts_df, start, end, _ALERT_COLUMNS)
    crowding, history = _crowding_inputs(spark, config, daily_df, end, alerts)
    calibration_df = read_table(spark, output, DETECTOR_CALIBRATION_TABLE)
    return build_report_data(
        daily,
        k_sweep,
        cost,
        _evaluation(spark, output),
        start,
        end,
        max_missing_cluster_rate=config.quality.max_missing_cluster_rate,
        alerts=alerts,
        crowding=crowding,
        history=history,
        alert_settings=config.alerts,
        calibration=None
        if calibration_df is None
        else calibration_df.select(*CALIBRATION.fieldNames()).toPandas(),
        detector=config.inputs.clusters.detector,
    )


def _in_range(df: DataFrame, start: dt.date, end: dt.date, columns: list[str]) -> pd.DataFrame:
    """The range's rows, few (days x k x segment values), as pandas."""
    rows = df.where(F.col("metric_date").between(start, end)).select(*columns)
    return rows.toPandas()


def _crowding_inputs(
    spark: SparkSession,
    config: Config,
    daily_df: DataFrame,
    end: dt.date,
    alerts: pd.DataFrame | None,
) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """The crowding rows "What crowds the window" is drawn from: the top keys of the last day
    and of each alert day, and every key listed on those alerts' baseline days; and the daily
    rows of the alert days and their baseline days, which say which baseline days qualified
    (`rules.alerts.culprits`). (None, None) without the crowding table."""
    crowding_df = read_table(spark, config.output, CROWDING_TABLE)
    if crowding_df is None:
        return None, None
    fired = pd.DataFrame(columns=_ALERT_COLUMNS) if alerts is None else alerts
    days = {as_date(d) for d in fired.loc[fired["status"] == ALERT, "metric_date"]}
    baseline = sorted({b for d in days for b in baseline_dates(d, config.alerts)})
    wanted = F.col("metric_date").isin(sorted(days | {end})) & (F.col("rank") <= CROWDING_SHOWN)
    if baseline:
        wanted = wanted | F.col("metric_date").isin(baseline)
    rows = pd.DataFrame(crowding_df.where(wanted).select(*_CROWDING_COLUMNS).toPandas())
    if not days:
        return rows, pd.DataFrame(columns=DAILY_COLUMNS)
    judged = daily_df.where(F.col("metric_date").isin(sorted(days | set(baseline))))
    return rows, pd.DataFrame(judged.select(*DAILY_COLUMNS).toPandas(), columns=DAILY_COLUMNS)


def _optional(
    spark: SparkSession,
    output: OutputConfig,
    table: Table,
    start: dt.date,
    end: dt.date,
    columns: list[str],
) -> pd.DataFrame | None:
    df = read_table(spark, output, table)
    if df is None:
        log.warning("report: no %s table; its figure is left out", table.name)
        return None
    rows = _in_range(df, start, end, columns)
    if rows.empty:
        log.warning("report: %s has no rows from %s to %s", table.name, start, end)
        return None
    return rows


def _evaluation(spark: SparkSession, output: OutputConfig) -> pd.DataFrame | None:
    df = read_table(spark, output, EVALUATION_RESULTS_TABLE)
    if df is None:
        return None
    columns = [*_EVALUATION_COLUMNS, *(["queries"] if "queries" in df.columns else [])]
    return df.where(F.col("query_id") == ALL_QUERIES).select(*columns).toPandas()


# --- aggregation (pandas, small frames) -----------------------------------------------------


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
) -> ReportData:
    """The figures' frames from the tables' rows in [start, end] (pure pandas); `alerts`, the
    unique_clusters_alerts rows of the range, `crowding`, unique_clusters_crowding rows (at
    least the top `CROWDING_SHOWN` of the last day and of the alert days, and every row of
    those alerts' baseline days), and `calibration`, every detector_calibration row (each None
    when the table does not exist); `history`, the daily rows of the alert days and their
    baseline days, judged by `alert_settings` (either None: no baseline beside the keys);
    `detector`, the label that describes a cluster table without versions."""
    everything = _all_traffic(daily)
    if everything.empty:
        raise ReportError(f"{DAILY_TABLE.name} has no all-traffic rows from {start} to {end}")
    histogram_date, histogram = _latest_histogram(everything)
    versions = _versions(everything)
    thresholds = everything["threshold"].dropna().unique()
    k = default_k(everything["k"])
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
    )


def _versions(everything: pd.DataFrame) -> pd.DataFrame | None:
    """Per day, the cluster table version its rows were computed from (null: no versions);
    None for rows that do not say."""
    if "cluster_table_version" not in everything:
        return None
    days = everything.sort_values("metric_date").drop_duplicates("metric_date")
    return days[["metric_date", "cluster_table_version"]].reset_index(drop=True)


def _version_changes(versions: pd.DataFrame) -> list[tuple[dt.date, Any]]:
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
    """The top `CROWDING_SHOWN` keys of each alert day, at its first alert's k and segment row
    (all traffic first), each beside its mean over that alert's baseline days and `is_new`
    (`rules.alerts.culprits`, from `history`; null without it); and of the report's last day
    without an alert, all traffic at `k_last` (no baseline: null). As `_CROWDING_SHOWN_COLUMNS`
    (`statistic`: the alert's), by date then rank; None without the table."""
    if rows is None:
        return None
    alerts = pd.DataFrame(columns=_ALERT_COLUMNS) if fired is None else fired
    shown: dict[dt.date, Any] = {end: None}
    for alert in alerts[alerts["status"] == ALERT].itertuples(index=False):
        day = as_date(alert.metric_date)
        if shown.get(day) is None:
            shown[day] = alert
    frames = []
    for day, alert in sorted(shown.items()):
        where = (k_last, ALL_TRAFFIC, ALL_TRAFFIC)
        if alert is not None:
            where = (int(alert.k), alert.segment, alert.segment_value)
        of_day = rows[
            (rows["metric_date"].map(as_date) == day)
            & (rows["k"] == where[0])
            & (rows["segment"] == where[1])
            & (rows["segment_value"] == where[2])
        ]
        of_day = of_day.sort_values("rank").head(CROWDING_SHOWN)
        if of_day.empty:
            continue
        frames.append(_beside_baseline(of_day, alert, rows, history, settings))
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
    shown = of_day[_CROWDING_COLUMNS].reset_index(drop=True)
    statistic = None if alert is None else alert.statistic
    if alert is None or history is None or settings is None:
        return shown.assign(baseline_redundant_slots=np.nan, is_new=None, statistic=statistic)
    against = culprits(pd.DataFrame([alert]), history, rows, settings, top=CROWDING_SHOWN)
    against = against[["rank", "baseline_redundant_slots", "is_new"]]
    out = shown.merge(against, on="rank", how="left", validate="one_to_one")
    out["is_new"] = out["is_new"].astype(object).where(out["baseline_redundant_slots"].notna())
    return out.assign(statistic=statistic)  # no baseline day found: neither mean nor NEW


def _fired(rows: pd.DataFrame | None) -> pd.DataFrame | None:
    """The alerts and improvements, by date, all traffic first, then segments."""
    if rows is None:
        return None
    fired = rows[rows["status"].isin([ALERT, IMPROVEMENT])].copy()
    fired["_order"] = fired["segment"] != ALL_TRAFFIC
    keys = ["metric_date", "_order", "segment", "segment_value", "statistic", "k"]
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


# --- rendering (matplotlib, pure Python) ----------------------------------------------------

FIGURES = (
    "median_band",
    "share_at_or_below_threshold",
    "mean",
    "histogram_latest",
    "k_sweep",
    "missing_cluster_rate",
    "redundancy_cost",
    "segments",
)
"""The PNG files a report can hold (`<name>.png`); one is left out when it has no data."""


@dataclass(frozen=True)
class _Section:
    name: str
    title: str
    caption: str
    table: pd.DataFrame | None
    png: Path | None
    missing_note: str = ""


def render(data: ReportData, out_dir: Path) -> Path:
    """Write one PNG per figure and `index.html` (images inlined) under `out_dir`."""
    import matplotlib

    matplotlib.use("Agg")

    out_dir.mkdir(parents=True, exist_ok=True)
    for name in FIGURES:  # a figure left out this time must not linger from an earlier run
        (out_dir / f"{name}.png").unlink(missing_ok=True)
    sections = [
        _median_band_section(data, out_dir),
        _share_section(data, out_dir),
        _mean_section(data, out_dir),
        _histogram_section(data, out_dir),
        _k_sweep_section(data, out_dir),
        _missing_section(data, out_dir),
        _cost_section(data, out_dir),
    ]
    if data.segments is not None:
        sections.append(_segments_section(data, out_dir))
    for stale in out_dir.glob("crowding_*.png"):
        stale.unlink()
    sections += _crowding_sections(data, out_dir)
    index = out_dir / "index.html"
    index.write_text(_html(data, sections), encoding="utf-8")
    return index


def _range_text(data: ReportData) -> str:
    if data.start == data.end:
        return f"{data.start.isoformat()} (UTC)"
    return f"{data.start.isoformat()} to {data.end.isoformat()} (UTC)"


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=FIGURE_DPI, facecolor="white")
    plt.close(fig)
    return path


def _figure(ncols: int = 1) -> tuple[Any, Any]:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=FIGURE_SIZE, layout="constrained", squeeze=False)
    return fig, axes[0]


def _dates(values: pd.Series) -> pd.Series:
    return pd.to_datetime(values)


def _date_axis(ax: Any, data: ReportData) -> None:
    """Whole UTC days on the x axis, the report's range with half a day either side."""
    import matplotlib.dates as mdates

    span = (data.end - data.start).days
    locator: Any
    if span <= 10:
        locator = mdates.DayLocator()
    else:
        locator = mdates.AutoDateLocator(minticks=3, maxticks=10)
        locator.intervald[mdates.HOURLY] = [24]  # never ticks between midnights
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    half = dt.timedelta(hours=12)
    start = dt.datetime.combine(data.start, dt.time())
    end = dt.datetime.combine(data.end, dt.time())
    ax.set_xlim(start - half, end + half)
    ax.set_xlabel("metric_date (UTC day)")
    ax.grid(True, alpha=0.3)
    _mark_versions(ax, data)


def _mark_versions(ax: Any, data: ReportData) -> None:
    """A dotted line before each day computed from another cluster table version than the
    day before it, named at the top: the detector changed there, not necessarily the index."""
    from matplotlib.transforms import blended_transform_factory

    if data.versions is None:
        return
    for day, version in _version_changes(data.versions):
        at = dt.datetime.combine(day, dt.time()) - dt.timedelta(hours=12)
        ax.axvline(at, color="tab:purple", linestyle=":", linewidth=1.2, zorder=1)
        ax.text(
            at,
            0.98,
            f" cluster table v{version}" if version is not None else " cluster table changed",
            transform=blended_transform_factory(ax.transData, ax.transAxes),
            rotation=90,
            ha="left",
            va="top",
            fontsize=7,
            color="tab:purple",
        )


def _legend_outside(ax: Any) -> None:
    """Right of the axes, where it cannot hide a line or a band."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _integer_axis(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _median_band_section(data: ReportData, out_dir: Path) -> _Section:
    fig, (ax,) = _figure()
    for k, group in data.median_band.groupby("k"):
        days = _dates(group["metric_date"])
        (line,) = ax.plot(days, group["median"], marker="o", markersize=3, label=f"median, k={k}")
        ax.fill_between(
            days,
            group["p10"].astype("float64"),
            group["p90"].astype("float64"),
            color=line.get_color(),
            alpha=0.18,
            label=f"p10–p90, k={k}",
        )
    ax.set_ylabel("unique clusters in the top-k (count)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Daily median unique-clusters@k with the p10–p90 band\n{_range_text(data)}")
    _legend_outside(ax)
    _date_axis(ax, data)
    return _Section(
        "median_band",
        "Daily median, p10–p90 band",
        "Per day and k, the exact quantiles of unique-clusters@k over the day's queries "
        "(quantiles are per day: they are never averaged across days).",
        data.median_band,
        _save(fig, out_dir / "median_band.png"),
    )


def _share_section(data: ReportData, out_dir: Path) -> _Section:
    fig, (ax,) = _figure()
    for k, group in data.share.groupby("k"):
        ax.plot(
            _dates(group["metric_date"]),
            group["share_at_or_below_threshold"] * 100,
            marker="o",
            markersize=3,
            label=f"k={k}",
        )
    _draw_marks(ax, alert_marks(data.alerts, SHARE_STATISTIC, data.share["k"]), scale=100)
    threshold = "threshold" if data.threshold is None else str(data.threshold)
    ax.set_ylabel(f"queries with unique clusters ≤ {threshold} (% of the day's queries)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Share of queries at or below the threshold ({threshold})\n{_range_text(data)}")
    _legend_outside(ax)
    _date_axis(ax, data)
    return _Section(
        "share_at_or_below_threshold",
        f"Share at or below the threshold ({threshold})",
        "Per day and k, the share of queries whose top-k holds at most the threshold's number "
        "of distinct clusters (plotted in %, listed as a fraction). A rise is a regression."
        + _marks_caption(data),
        data.share,
        _save(fig, out_dir / "share_at_or_below_threshold.png"),
    )


def _mean_section(data: ReportData, out_dir: Path) -> _Section:
    fig, (ax,) = _figure()
    for k, group in data.mean.groupby("k"):
        ax.plot(
            _dates(group["metric_date"]), group["mean"], marker="o", markersize=3, label=f"k={k}"
        )
    _draw_marks(ax, alert_marks(data.alerts, MEAN_STATISTIC, data.mean["k"]))
    ax.set_ylabel("mean unique clusters in the top-k (count)")
    highest = data.mean["mean"].astype("float64").max()
    ax.set_ylim(0, highest * 1.08 if highest > 0 else None)  # room for a marker on top
    ax.set_title(f"Daily mean unique-clusters@k\n{_range_text(data)}")
    _legend_outside(ax)
    _date_axis(ax, data)
    return _Section(
        "mean",
        "Daily mean",
        "Per day and k, the mean number of distinct clusters in the top-k. A fall is a "
        "regression." + _marks_caption(data),
        data.mean,
        _save(fig, out_dir / "mean.png"),
    )


_MARKS = {ALERT: ("tab:red", "X", "alert"), IMPROVEMENT: ("tab:green", "P", "improvement")}
MARK_COLUMNS = ["metric_date", "k", "segment", "segment_value", "status", "value", "is_point"]
MARK_COLUMNS += ["label"]


def alert_marks(
    alerts: pd.DataFrame | None, statistic: str, ks: Iterable[int], segment: str = ALL_TRAFFIC
) -> pd.DataFrame:
    """The marks a time series of `statistic` drawn at `ks` carries, one per alert or
    improvement of `alerts` (`ReportData.alerts`) at one of those ks, as `MARK_COLUMNS`.

    On a figure of all traffic (`segment` = 'all'): an all-traffic row is a point on its k's
    line (`is_point`, at `value`), a segment row a band over its day, whatever else fired that
    day. On a panel of one segment column: its values' rows, each a point on the value's line.
    `label` names the row: 'k=5' for all traffic, 'surface=app k=10' for a segment value."""
    if alerts is None or alerts.empty:
        return pd.DataFrame(columns=MARK_COLUMNS)
    rows = alerts[
        alerts["status"].isin(list(_MARKS))
        & (alerts["statistic"] == statistic)
        & alerts["k"].isin({int(k) for k in ks})
    ]
    if segment != ALL_TRAFFIC:
        rows = rows[rows["segment"] == segment]
    marks = pd.DataFrame(
        {
            "metric_date": rows["metric_date"].map(as_date),
            "k": rows["k"].astype("int64"),
            "segment": rows["segment"],
            "segment_value": rows["segment_value"],
            "status": rows["status"],
            "value": rows["value"].astype("float64"),
            "is_point": (rows["segment"] == segment) | (segment != ALL_TRAFFIC),
            "label": [_where(r.segment, r.segment_value, r.k) for r in rows.itertuples()],
        },
        columns=MARK_COLUMNS,
    )
    return marks.sort_values(["metric_date", "k", "segment", "segment_value"]).reset_index(
        drop=True
    )


def _where(segment: str, value: str, k: int | None = None) -> str:
    """'all traffic' or 'surface=app', with ' k=10' when `k` is given ('k=10' alone for all
    traffic)."""
    if segment == ALL_TRAFFIC:
        return "all traffic" if k is None else f"k={k}"
    return f"{segment}={value}" + ("" if k is None else f" k={k}")


def _draw_marks(ax: Any, marks: pd.DataFrame, scale: float = 1.0) -> None:
    """`alert_marks` on `ax`: each point, a large marker on its line with its label beside it
    (one legend entry per status and k); each day's band, one per status, its segment values
    named in its legend entry, a line each (`_band_names`)."""
    if marks.empty:
        return
    for status, (colour, marker, name) in _MARKS.items():
        mine = marks[marks["status"] == status]
        points = mine[mine["is_point"].astype(bool)]
        for k, group in points.groupby("k"):
            where = " (all traffic)" if (group["segment"] == ALL_TRAFFIC).all() else ""
            ax.scatter(
                _dates(group["metric_date"]),
                group["value"] * scale,
                s=120,
                marker=marker,
                color=colour,
                zorder=5,
                label=f"{name}, k={k}{where}",
            )
            for row in group.itertuples():
                ax.annotate(
                    row.label,
                    (dt.datetime.combine(row.metric_date, dt.time()), row.value * scale),
                    xytext=(7, 4),
                    textcoords="offset points",
                    fontsize=7,
                    color=colour,
                    zorder=6,
                )
        bands = mine[~mine["is_point"].astype(bool)]
        for day, group in bands.groupby("metric_date"):
            start = dt.datetime.combine(day, dt.time()) - dt.timedelta(hours=12)
            ax.axvspan(  # named in the legend: beside the axes, no line runs through the names
                start,
                start + dt.timedelta(days=1),
                color=colour,
                alpha=0.15,
                zorder=0,
                label=f"{name} in a segment on\n{day.isoformat()} (band):\n"
                + "\n".join(_band_names(group)),
            )


def _band_names(marks: pd.DataFrame) -> list[str]:
    """A band's segment values, one line each with the ks they fired at: 'surface=app k=5,10'."""
    return [
        f"{segment}={value} k=" + ",".join(str(k) for k in sorted(group["k"]))
        for (segment, value), group in marks.groupby(["segment", "segment_value"])
    ]


def _marks_caption(data: ReportData) -> str:
    if data.alerts is None:
        return " (No unique_clusters_alerts table: no alert marks.)"
    return (
        " Marked: an alert (red X) or improvement (green +) of all traffic on its k's point, "
        "its k beside it; a red or green band over a day with one in a segment, whatever else "
        "fired that day, its segment values and ks named in the legend (see Alerts)."
    )


def _histogram_section(data: ReportData, out_dir: Path) -> _Section:
    ks = sorted(data.histogram["k"].unique())
    fig, axes = _figure(max(1, len(ks)))
    for ax, k in zip(axes, ks, strict=False):
        group = data.histogram[data.histogram["k"] == k]
        ax.bar(group["unique_clusters"], group["queries"], color="tab:blue", width=0.8)
        ax.set_title(f"k={k}", fontsize=10)
        _integer_axis(ax.xaxis)
        ax.set_xlabel("unique clusters in the top-k (count)")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("queries (count)")
    fig.suptitle(
        f"Histogram of unique-clusters@k on {data.histogram_date.isoformat()} (UTC), the "
        f"latest day with queries\nrange {_range_text(data)}"
    )
    return _Section(
        "histogram_latest",
        f"Histogram, {data.histogram_date.isoformat()}",
        "Queries of the latest day in the range with exactly each number of distinct clusters "
        "in their top-k, and their share of that day's queries.",
        data.histogram,
        _save(fig, out_dir / "histogram_latest.png"),
    )


def _k_sweep_section(data: ReportData, out_dir: Path) -> _Section:
    title = "k-sweep: distinct clusters per added slot"
    if data.k_sweep is None:
        return _Section("k_sweep", title, "", None, None, _absent(K_SWEEP_TABLE, data))
    sweep = data.k_sweep
    fig, (left, right) = _figure(2)
    left.plot(sweep["k"], sweep["mean_unique_clusters"], marker="o", markersize=3)
    left.plot(sweep["k"], sweep["k"], linestyle=":", color="grey", label="all distinct (= k)")
    left.set_xlabel("k (slots in the window)")
    left.set_ylabel("mean unique clusters in the top-k (count)")
    left.set_title("Mean unique clusters", fontsize=10)
    left.legend(fontsize=8)
    right.plot(sweep["k"], sweep["distinct_fraction"], marker="o", markersize=3, label="distinct")
    right.plot(sweep["k"], sweep["marginal_rate"], marker="s", markersize=3, label="marginal")
    right.set_xlabel("k (slots in the window)")
    right.set_ylabel("fraction: distinct = mean/k, marginal = new clusters per slot")
    right.set_ylim(bottom=0)
    right.set_title("Distinct fraction and marginal rate", fontsize=10)
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        _integer_axis(ax.xaxis)
    fig.suptitle(f"k-sweep over {_range_text(data)}, all traffic, weighted by queries")
    return _Section(
        "k_sweep",
        title,
        "Per k over the whole range: mean = sum(unique_clusters_total) / sum(queries); "
        "distinct fraction = mean / k; marginal rate = mean(k) − mean(k−1), the expected new "
        "clusters the k-th slot brings.",
        sweep,
        _save(fig, out_dir / "k_sweep.png"),
    )


def _missing_section(data: ReportData, out_dir: Path) -> _Section:
    fig, (ax,) = _figure()
    ax.plot(
        _dates(data.missing["metric_date"]),
        data.missing["missing_cluster_rate"] * 100,
        marker="o",
        markersize=3,
        color="tab:red",
        label="missing-cluster rate",
    )
    if data.max_missing_cluster_rate is not None:
        ax.axhline(
            data.max_missing_cluster_rate * 100,
            color="grey",
            linestyle="--",
            label=f"quality gate ({data.max_missing_cluster_rate:.2%})",
        )
    ax.set_ylabel("entries not in the cluster table (% of valid entries)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Missing-cluster rate per day\n{_range_text(data)}")
    _legend_outside(ax)
    _date_axis(ax, data)
    results = int(data.missing["results"].sum())
    missing = int(data.missing["missing_cluster_results"].sum())
    overall = f"{missing / results:.3%}" if results else "-"
    return _Section(
        "missing_cluster_rate",
        "Missing-cluster rate",
        f"Valid served entries whose chunk is absent from the cluster table, per day (plotted "
        f"in %, listed as a fraction). Over the range: {missing:,} of {results:,} = {overall}.",
        data.missing,
        _save(fig, out_dir / "missing_cluster_rate.png"),
    )


def _cost_section(data: ReportData, out_dir: Path) -> _Section:
    title = "Redundancy cost"
    if data.cost is None:
        return _Section(
            "redundancy_cost", title, "", None, None, _absent(REDUNDANCY_COST_TABLE, data)
        )
    cost = data.cost
    fig, (ax,) = _figure()
    totals = []
    for k, group in cost.groupby("k"):
        ax.plot(
            _dates(group["metric_date"]),
            group["redundant_usd"],
            marker="o",
            markersize=3,
            label=f"k={k}",
        )
        days = group["metric_date"].nunique()
        usd = float(group["redundant_usd"].sum())
        totals.append(
            f"k={k}: {int(group['redundant_slots'].sum()):,} redundant slots, "
            f"{int(group['redundant_tokens'].sum()):,} tokens, {usd:,.2f} USD "
            f"({usd / days:,.2f} USD a day)"
        )
    ax.set_ylabel("cost of the redundant slots' prompt tokens (USD per day)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Daily cost of redundant slots in the top-k\n{_range_text(data)}")
    _legend_outside(ax)
    _date_axis(ax, data)
    return _Section(
        "redundancy_cost",
        title,
        "A slot is redundant when its cluster already appeared above it in the same list; its "
        "prompt tokens are priced at cost.usd_per_million_input_tokens. Over the range: "
        + "; ".join(totals)
        + ".",
        cost,
        _save(fig, out_dir / "redundancy_cost.png"),
    )


def _crowding_sections(data: ReportData, out_dir: Path) -> list[_Section]:
    """ "What crowds the window": per day shown (`_crowding_shown`), a bar chart and a table of
    its top keys by redundant slots, on an alert day each beside its baseline mean."""
    title = "What crowds the window"
    if data.crowding is None:
        return [_Section("crowding", title, "", None, None, _absent(CROWDING_TABLE, data))]
    sections = []
    for day, rows in data.crowding.groupby(data.crowding["metric_date"].map(as_date)):
        rows = rows.reset_index(drop=True)
        k, segment, value, statistic = rows.iloc[0][["k", "segment", "segment_value", "statistic"]]
        alert = _shown_alert(data, day, k, segment, value, statistic)
        compared = alert is not None and rows["baseline_redundant_slots"].notna().any()
        where = _where(segment, value)
        fig, (ax,) = _figure()
        _crowding_bars(ax, rows, day, alert if compared else None)
        ax.set_title(
            f"Top keys by redundant slots in the top-{k}, {day.isoformat()}, {where}\n"
            + (
                f"k={k}: the report's default k (no alert this day)"
                if alert is None
                else f"k={k}: the alert's k ({statistic} alert)"
            )
        )
        if alert is None:
            why = (
                f"The last day of the report, without an alert: at k={k}, the report's default "
                "k (10 when measured, else the largest), and no baseline."
            )
        else:
            why = f"An alert day, at the alert's k ({k}): {describe(alert)}. " + (
                f"Beside each key, its mean over the alert's {alert.baseline_days} baseline "
                "days (0 on a day that did not list it), as the alert's culprit lines give it; "
                "NEW: listed on none of them."
                if compared
                else "None of its baseline days is in the published tables: no baseline beside "
                "the keys."
            )
        sections.append(
            _Section(
                f"crowding_{day.isoformat()}",
                f"{title}: {day.isoformat()}, {where}, k={k}",
                f"The keys (a cluster id, or a chunk without one) whose copies took the most "
                f"slots of the top-{k} on {day.isoformat()}, {where}: copies beyond the first "
                f"in a request's top-k, summed over the day's requests "
                f"(unique_clusters_crowding). {why}",
                rows,
                _save(fig, out_dir / f"crowding_{day.isoformat()}.png"),
            )
        )
    if not sections:
        note = f"No crowding rows for {data.end} or the alert days: no repeats in the top-k."
        return [_Section("crowding", title, "", None, None, note)]
    return sections


def _shown_alert(
    data: ReportData, day: dt.date, k: int, segment: str, value: str, statistic: Any
) -> Any:
    """The alert row a crowding figure was drawn for (None: the last day, no alert)."""
    if data.alerts is None or pd.isna(statistic):
        return None
    alerts = data.alerts
    mine = alerts[
        (alerts["metric_date"].map(as_date) == day)
        & (alerts["status"] == ALERT)
        & (alerts["k"] == k)
        & (alerts["segment"] == segment)
        & (alerts["segment_value"] == value)
        & (alerts["statistic"] == statistic)
    ]
    return next(mine.itertuples(), None)


def _crowding_bars(ax: Any, rows: pd.DataFrame, day: dt.date, alert: Any) -> None:
    """A bar per key, the day's redundant slots, and with an alert (one with a baseline) a grey
    bar beside it, the key's baseline mean, with NEW after the bar of a key no baseline day
    listed."""
    names = [
        f"cluster {c}" if isinstance(c, str) else f"chunk {h}"
        for c, h in zip(rows["cluster_id"], rows["chunk_id"], strict=True)
    ]
    positions = np.arange(len(rows))[::-1]  # rank 1 on top
    height = 0.4 if alert is not None else 0.8
    offset = height / 2 if alert is not None else 0.0
    ax.barh(
        positions + offset,
        rows["redundant_slots"],
        height=height,
        color="tab:orange",
        label=day.isoformat(),
    )
    if alert is not None:
        baseline = rows["baseline_redundant_slots"].astype("float64")
        ax.barh(
            positions - offset,
            baseline.fillna(0),
            height=height,
            color="tab:gray",
            label=f"baseline mean\n({alert.baseline_days} days)",
        )
        for position, slots, new in zip(
            positions, rows["redundant_slots"], rows["is_new"], strict=True
        ):
            if not pd.isna(new) and bool(new):
                ax.text(
                    slots,
                    position + offset,
                    " NEW",
                    va="center",
                    ha="left",
                    fontsize=8,
                    fontweight="bold",
                    color="tab:red",
                )
        ax.margins(x=0.08)  # room for NEW after the longest bar
        _legend_outside(ax)
    ax.set_yticks(positions, names)
    ax.set_xlabel("redundant slots (copies beyond the first in a top-k)")
    ax.grid(True, axis="x", alpha=0.3)


def _segments_section(data: ReportData, out_dir: Path) -> _Section:
    """One panel per segment column: a line per value of its daily mean at the default k, the
    alerts and improvements of the mean of those values marked on their lines."""
    segments = data.segments
    assert segments is not None
    names = sorted(segments["segment"].unique())
    k = int(segments["k"].iloc[0])
    fig, axes = _figure(len(names))
    for ax, name in zip(axes, names, strict=False):
        column = segments[segments["segment"] == name]
        for value, group in column.groupby("segment_value"):
            ax.plot(
                _dates(group["metric_date"]), group["mean"], marker="o", markersize=2, label=value
            )
        _draw_marks(ax, alert_marks(data.alerts, MEAN_STATISTIC, [k], segment=name))
        ax.set_ylabel(f"mean unique clusters in the top-{k} (count)")
        ax.set_title(f"by {name}", fontsize=10)
        _date_axis(ax, data)
        ax.legend(
            fontsize=8,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.16),
            ncol=4,
            title=f"{name} (segment value)",
            title_fontsize=8,
        )
    fig.suptitle(f"Daily mean unique-clusters@{k} per segment value\n{_range_text(data)}")
    marks = (
        " (No unique_clusters_alerts table: no alert marks.)"
        if data.alerts is None
        else " Marked on a value's line: an alert (red X) or improvement (green +) of its mean "
        f"at k={k}, named beside it (other ks and the share: see Alerts)."
    )
    return _Section(
        "segments",
        "Segments",
        f"Per segment column, the daily mean of each of its values at k={k} (10 when measured, "
        "else the largest k), so that a change in one segment shows beside the others; a fall "
        "is a regression." + marks,
        segments,
        _save(fig, out_dir / "segments.png"),
    )


def _absent(table: Table, data: ReportData) -> str:
    return f"No rows in {table.name} from {data.start} to {data.end}: figure left out."


# --- HTML -------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
section { margin-bottom: 2.5em; }
.row { display: flex; gap: 1.5em; align-items: flex-start; flex-wrap: wrap; }
.numbers { max-height: 480px; overflow: auto; }
table { border-collapse: collapse; font-size: 0.8em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #f2f2f2; position: sticky; top: 0; }
.caption { max-width: 900px; }
.note { color: #8a6d3b; }
"""


def _html(data: ReportData, sections: list[_Section]) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>logmetrics report {html.escape(_range_text(data))}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>logmetrics report: unique-clusters@k</h1>",
        f"<p>Date range: <b>{html.escape(_range_text(data))}</b>. All-traffic rows "
        "(segment = 'all') unless a section says otherwise. Every figure is drawn from the "
        "table beside it, read from the Delta tables.</p>",
        *_alerts_html(data),
        *_calibration_html(data),
    ]
    for section in sections:
        parts.append(f'<section id="{section.name}"><h2>{html.escape(section.title)}</h2>')
        if section.png is None or section.table is None:
            parts.append(f'<p class="note">{html.escape(section.missing_note)}</p></section>')
            continue
        encoded = base64.b64encode(section.png.read_bytes()).decode("ascii")
        parts.append(f'<p class="caption">{html.escape(section.caption)}</p>')
        parts.append('<div class="row">')
        parts.append(
            f'<img alt="{html.escape(section.title)}" width="{int(FIGURE_SIZE[0] * FIGURE_DPI)}" '
            f'src="data:image/png;base64,{encoded}">'
        )
        parts.append(f'<div class="numbers">{_table_html(section.table)}</div></div>')
        parts.append("</section>")
    if data.evaluation is not None:
        parts.append('<section id="evaluation"><h2>Evaluation (judged), averaged rows</h2>')
        parts.append(
            '<p class="caption">evaluation_results rows with query_id = ALL: each metric@k '
            "averaged over a run's evaluated queries.</p>"
        )
        parts.append(f'<div class="numbers">{_table_html(data.evaluation)}</div></section>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _calibration_html(data: ReportData) -> list[str]:
    """Once, before the figures: the detector's calibration of each cluster table version the
    range's days were computed from (every time series inherits its errors), and the days the
    version changed (the dotted line on those figures)."""
    parts = ['<section id="calibration"><h2>Detector calibration</h2>']
    if data.calibration is None:
        parts.append(
            '<p class="note">None published (inputs.calibration): the numbers of this report '
            "stand without the detector's measured precision and recall.</p></section>"
        )
        return parts
    changes = _version_changes(data.versions) if data.versions is not None else []
    moved = "; ".join(
        f"{day}: version {'?' if version is None else version}" for day, version in changes
    )
    lacking = data.calibration[~data.calibration["calibrated"]]
    parts.append(
        '<p class="caption">Detector calibration of the cluster table version(s) the time '
        "series' days were computed from (pair precision: of the pairs put in one cluster, the "
        "share that are duplicates; pair recall: of the duplicate pairs, the share put in one "
        "cluster). "
        + (
            f"The version changed on {html.escape(moved)} (dotted line on the time series): a "
            "move there may be the detector's, not the index's."
            if changes
            else "One version over the whole range."
        )
        + "</p>"
    )
    if not lacking.empty:
        versions = ", ".join(str(v) for v in lacking["cluster_table_version"])
        parts.append(f'<p class="note">No calibration row for version(s) {versions}.</p>')
    shown = data.calibration.drop(columns=["calibrated"])
    parts.append(f'<div class="numbers">{_table_html(shown)}</div></section>')
    return parts


def _alerts_html(data: ReportData) -> list[str]:
    """The period's alerts and improvements, every segment (docs/alerts.md)."""
    parts = ['<section id="alerts"><h2>Alerts and improvements</h2>']
    if data.alerts is None:
        parts.append('<p class="note">No unique_clusters_alerts table: nothing judged.</p>')
    elif data.alerts.empty:
        parts.append(f"<p>No alert and no improvement in {html.escape(_range_text(data))}.</p>")
    else:
        alerts = int((data.alerts["status"] == ALERT).sum())
        parts.append(
            f'<p class="caption"><b>{alerts} alert(s)</b> and '
            f"{len(data.alerts) - alerts} improvement(s): each day's statistic against the "
            "baseline mean of its past days, firing when the change is at least min_effect "
            "and beyond the limit (sigmas x sqrt(baseline sd² + the day's sampling variance)). "
            "A rise of the share or a fall of the mean is an alert.</p>"
        )
        parts.append(f'<div class="numbers">{_table_html(data.alerts)}</div>')
    parts.append("</section>")
    return parts


def _table_html(df: pd.DataFrame) -> str:
    """The frame as an HTML table for people: floats to 3 significant digits, a float column
    of whole numbers (a count or an id with a null among them) as integers; integers, dates
    and text as they are; a null as '-'. The Delta tables keep the raw values."""
    shown = df.copy()
    for column in df.columns:
        if pd.api.types.is_float_dtype(df[column]):
            values = df[column].dropna()
            shown[column] = df[column].map(_whole if (values == values.round()).all() else _number)
        elif pd.api.types.is_object_dtype(df[column]):  # to_html prints None as 'None'
            shown[column] = df[column].map(_text)
    text: str = shown.to_html(index=False, na_rep="-", border=0)
    return text


def _number(value: Any) -> str:
    """A float to 3 significant digits, without an exponent from 0.0001 up ('-' for NaN)."""
    if pd.isna(value):
        return "-"
    text = f"{float(value):.3g}"
    return f"{float(text):.0f}" if "e+" in text else text


def _whole(value: Any) -> str:
    return "-" if pd.isna(value) else f"{float(value):.0f}"


def _text(value: Any) -> str:
    """A cell of a column of objects (text, dates, booleans, a null among them)."""
    missing = value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))
    return "-" if missing else str(value)
