"""Drawing the report: one figure per section (matplotlib, Agg backend: no display), saved as a
PNG beside the frame it is drawn from (`draw_sections`)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from logmetrics.report.frames import (
    BLOCKED,
    NOT_JUDGED,
    PASSED,
    WARNED,
    ReportData,
    version_changes,
)
from logmetrics.rules.alerts import as_date, describe
from logmetrics.schemas import ALERT, ALL_TRAFFIC, IMPROVEMENT, MEAN_STATISTIC, SHARE_STATISTIC
from logmetrics.tables.catalog import (
    CROWDING_TABLE,
    DATA_QUALITY_TABLE,
    K_SWEEP_TABLE,
    REDUNDANCY_COST_TABLE,
    Table,
)

FIGURE_SIZE = (9.0, 4.8)  # inches
FIGURE_DPI = 100  # so every PNG is 900 x 480 pixels

FIGURES = (
    "median_band",
    "share_at_or_below_threshold",
    "mean",
    "histogram_latest",
    "k_sweep",
    "missing_cluster_rate",
    "redundancy_cost",
    "segments",
    "data_quality",
)
"""The PNG files a report can hold (`<name>.png`); one is left out when it has no data."""


@dataclass(frozen=True)
class Section:
    name: str
    title: str
    caption: str
    table: pd.DataFrame | None
    png: Path | None
    missing_note: str = ""
    prose: tuple[str, ...] = ()  # the table's columns of sentences, whose cells wrap


def draw_sections(data: ReportData, out_dir: Path) -> list[Section]:
    """Each section of the page in its order, its figure drawn into `out_dir` as a PNG."""
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
    sections.append(_quality_section(data, out_dir))
    return sections


def range_text(data: ReportData) -> str:
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
    for day, version in version_changes(data.versions):
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


def _legend_outside(ax: Any, handles: list[Any] | None = None) -> None:
    """Right of the axes, where it cannot hide a line or a band (`handles`: its entries, when
    not the labelled artists of `ax`)."""
    place = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0}
    if handles is None:
        ax.legend(fontsize=8, **place)
    else:
        ax.legend(handles=handles, fontsize=8, **place)


def _integer_axis(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


BAND_ALPHA = 0.1
"""The opacity of a p10–p90 band's fill: light, so that where the bands of two ks overlap
each still shows through, told apart by its edges (`draw_median_bands`)."""
BAND_EDGE: Final = "--"
"""The line style of a band's p10 and p90 edges, drawn in its k's colour."""


def draw_median_bands(ax: Any, bands: pd.DataFrame) -> list[Any]:
    """Per k of `bands` (`ReportData.median_band`): the median line, a light p10–p90 fill and
    a dashed line in the k's colour along each edge, so that overlapping bands stay apart.
    Returns the legend's entries: per k its median line and a patch of its band."""
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Patch

    handles: list[Any] = []
    for k, group in bands.groupby("k"):
        days = _dates(group["metric_date"])
        (line,) = ax.plot(days, group["median"], marker="o", markersize=3, label=f"median, k={k}")
        colour = line.get_color()
        low, high = group["p10"].astype("float64"), group["p90"].astype("float64")
        ax.fill_between(days, low, high, facecolor=to_rgba(colour, BAND_ALPHA), edgecolor="none")
        for edge in (low, high):
            ax.plot(days, edge, color=colour, linestyle=BAND_EDGE, linewidth=1.0)
        band = Patch(
            facecolor=to_rgba(colour, BAND_ALPHA),
            edgecolor=colour,
            linestyle=BAND_EDGE,
            label=f"p10–p90, k={k}",
        )
        handles += [line, band]
    return handles


def _median_band_section(data: ReportData, out_dir: Path) -> Section:
    fig, (ax,) = _figure()
    handles = draw_median_bands(ax, data.median_band)
    ax.set_ylabel("unique clusters in the top-k (count)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Daily median unique-clusters@k with the p10–p90 band\n{range_text(data)}")
    _legend_outside(ax, handles)
    _date_axis(ax, data)
    return Section(
        "median_band",
        "Daily median, p10–p90 band",
        "Per day and k, the exact quantiles of unique-clusters@k over the day's queries "
        "(quantiles are per day: they are never averaged across days); each k's band is a "
        "light fill between dashed lines in its colour, so that overlapping bands stay apart.",
        data.median_band,
        _save(fig, out_dir / "median_band.png"),
    )


def _share_section(data: ReportData, out_dir: Path) -> Section:
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
    ax.set_title(f"Share of queries at or below the threshold ({threshold})\n{range_text(data)}")
    _legend_outside(ax)
    _date_axis(ax, data)
    return Section(
        "share_at_or_below_threshold",
        f"Share at or below the threshold ({threshold})",
        "Per day and k, the share of queries whose top-k holds at most the threshold's number "
        "of distinct clusters (plotted in %, listed as a fraction). A rise is a regression."
        + _marks_caption(data),
        data.share,
        _save(fig, out_dir / "share_at_or_below_threshold.png"),
    )


def _mean_section(data: ReportData, out_dir: Path) -> Section:
    fig, (ax,) = _figure()
    for k, group in data.mean.groupby("k"):
        ax.plot(
            _dates(group["metric_date"]), group["mean"], marker="o", markersize=3, label=f"k={k}"
        )
    _draw_marks(ax, alert_marks(data.alerts, MEAN_STATISTIC, data.mean["k"]))
    ax.set_ylabel("mean unique clusters in the top-k (count)")
    highest = data.mean["mean"].astype("float64").max()
    ax.set_ylim(0, highest * 1.08 if highest > 0 else None)  # room for a marker on top
    ax.set_title(f"Daily mean unique-clusters@k\n{range_text(data)}")
    _legend_outside(ax)
    _date_axis(ax, data)
    return Section(
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


def _histogram_section(data: ReportData, out_dir: Path) -> Section:
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
        f"latest day with queries\nrange {range_text(data)}"
    )
    return Section(
        "histogram_latest",
        f"Histogram, {data.histogram_date.isoformat()}",
        "Queries of the latest day in the range with exactly each number of distinct clusters "
        "in their top-k, and their share of that day's queries.",
        data.histogram,
        _save(fig, out_dir / "histogram_latest.png"),
    )


def _k_sweep_section(data: ReportData, out_dir: Path) -> Section:
    title = "k-sweep: distinct clusters per added slot"
    if data.k_sweep is None:
        return Section("k_sweep", title, "", None, None, _absent(K_SWEEP_TABLE, data))
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
    fig.suptitle(f"k-sweep over {range_text(data)}, all traffic, weighted by queries")
    return Section(
        "k_sweep",
        title,
        "Per k over the whole range: mean = sum(unique_clusters_total) / sum(queries); "
        "distinct fraction = mean / k; marginal rate = mean(k) − mean(k−1), the expected new "
        "clusters the k-th slot brings.",
        sweep,
        _save(fig, out_dir / "k_sweep.png"),
    )


def _missing_section(data: ReportData, out_dir: Path) -> Section:
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
    ax.set_title(f"Missing-cluster rate per day\n{range_text(data)}")
    _legend_outside(ax)
    _date_axis(ax, data)
    results = int(data.missing["results"].sum())
    missing = int(data.missing["missing_cluster_results"].sum())
    overall = f"{missing / results:.3%}" if results else "-"
    return Section(
        "missing_cluster_rate",
        "Missing-cluster rate",
        f"Valid served entries whose chunk is absent from the cluster table, per day (plotted "
        f"in %, listed as a fraction). Over the range: {missing:,} of {results:,} = {overall}.",
        data.missing,
        _save(fig, out_dir / "missing_cluster_rate.png"),
    )


def _cost_section(data: ReportData, out_dir: Path) -> Section:
    title = "Redundancy cost"
    if data.cost is None:
        return Section(
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
    ax.set_title(f"Daily cost of redundant slots in the top-k\n{range_text(data)}")
    _legend_outside(ax)
    _date_axis(ax, data)
    return Section(
        "redundancy_cost",
        title,
        "A slot is redundant when its cluster already appeared above it in the same list; its "
        "prompt tokens are priced at cost.usd_per_million_input_tokens. Over the range: "
        + "; ".join(totals)
        + ".",
        cost,
        _save(fig, out_dir / "redundancy_cost.png"),
    )


_CROWDING_TABLE_COLUMNS = ["rank", "cluster_id", "chunk_id", "redundant_slots"]
_CROWDING_TABLE_COLUMNS += ["baseline_redundant_slots", "is_new", "requests_affected"]
_CROWDING_TABLE_COLUMNS += ["share_of_redundant_slots", "cluster_size", "redundant_tokens"]
_CROWDING_TABLE_COLUMNS += ["redundant_usd"]
"""A crowding section's table: its day, k and segment row are in its title."""


def _crowding_sections(data: ReportData, out_dir: Path) -> list[Section]:
    """ "What crowds the window": per block shown (`frames._crowding_shown`: every alert's day,
    k and segment row, and the last day when nothing fired on it), a bar chart and a table of
    its top keys by redundant slots, on an alert's block each beside its baseline mean."""
    title = "What crowds the window"
    if data.crowding is None:
        return [Section("crowding", title, "", None, None, _absent(CROWDING_TABLE, data))]
    sections: list[Section] = []
    blocks = data.crowding.assign(day=data.crowding["metric_date"].map(as_date))
    keys = ["day", "segment", "segment_value", "k"]
    for (day, segment, value, k), rows in blocks.groupby(keys, sort=False):
        rows = rows.reset_index(drop=True)
        fired = _block_alerts(data, day, int(k), segment, value)
        against = next((a for a in fired if a.statistic == rows.loc[0, "statistic"]), None)
        compared = against is not None and rows["baseline_redundant_slots"].notna().any()
        where = _where(segment, value)
        fig, (ax,) = _figure()
        _crowding_bars(ax, rows, day, against if compared else None)
        statistics = ", ".join(a.statistic for a in fired)
        ax.set_title(
            f"Top keys by redundant slots in the top-{k}, {day.isoformat()}, {where}\n"
            + (
                f"k={k}: the report's default k (no alert this day)"
                if not fired
                else f"k={k}: the alert's k ({statistics} alert)"
            )
        )
        if against is None:
            why = (
                f"The last day of the report, without an alert: at k={k}, the report's default "
                "k (10 when measured, else the largest), and no baseline."
            )
        else:
            whose = f"the {against.statistic} alert's" if len(fired) > 1 else "the alert's"
            why = f"An alert at k={k}: {'; '.join(describe(a) for a in fired)}. " + (
                f"Beside each key, its mean over {whose} {against.baseline_days} baseline days "
                "(0 on a day that did not list it), as the alert's culprit lines give it; NEW: "
                "listed on none of them."
                if compared
                else "None of its baseline days is in the published tables: no baseline beside "
                "the keys."
            )
        name = _unique_name(_crowding_name(day, segment, value, int(k)), sections)
        sections.append(
            Section(
                name,
                f"{title}: {day.isoformat()}, {where}, k={k}",
                f"The keys (a cluster id, or a chunk without one) whose copies took the most "
                f"slots of the top-{k} on {day.isoformat()}, {where}: copies beyond the first "
                f"in a request's top-k, summed over the day's requests, and the prompt tokens "
                f"and dollars they cost (unique_clusters_crowding). {why}",
                rows[_CROWDING_TABLE_COLUMNS],
                _save(fig, out_dir / f"{name}.png"),
            )
        )
    if not sections:
        note = f"No crowding rows for {data.end} or the alert days: no repeats in the top-k."
        return [Section("crowding", title, "", None, None, note)]
    return sections


def _crowding_name(day: dt.date, segment: str, value: str, k: int) -> str:
    """`crowding_2026-10-29_surface-app_k10` (`..._all_k5` for all traffic): the section's id
    and its PNG's name, a segment value's characters outside [A-Za-z0-9_.-] as '-'."""
    where = "all" if segment == ALL_TRAFFIC else f"{segment}-{value}"
    return f"crowding_{day.isoformat()}_{re.sub(r'[^A-Za-z0-9_.-]+', '-', where)}_k{k}"


def _unique_name(name: str, sections: list[Section]) -> str:
    """`name`, or `name-2`, `name-3`... when two segment values came to the same name."""
    taken = {section.name for section in sections}
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}-{n}"
    return candidate


def _block_alerts(data: ReportData, day: dt.date, k: int, segment: str, value: str) -> list[Any]:
    """The alerts that fired on `day` at `k` in a segment row, by statistic (the mean first)."""
    if data.alerts is None:
        return []
    alerts = data.alerts
    mine = alerts[
        (alerts["metric_date"].map(as_date) == day)
        & (alerts["status"] == ALERT)
        & (alerts["k"] == k)
        & (alerts["segment"] == segment)
        & (alerts["segment_value"] == value)
    ]
    return list(mine.sort_values("statistic").itertuples(index=False))


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


def _segments_section(data: ReportData, out_dir: Path) -> Section:
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
    fig.suptitle(f"Daily mean unique-clusters@{k} per segment value\n{range_text(data)}")
    marks = (
        " (No unique_clusters_alerts table: no alert marks.)"
        if data.alerts is None
        else " Marked on a value's line: an alert (red X) or improvement (green +) of its mean "
        f"at k={k}, named beside it (other ks and the share: see Alerts)."
    )
    return Section(
        "segments",
        "Segments",
        f"Per segment column, the daily mean of each of its values at k={k} (10 when measured, "
        "else the largest k), so that a change in one segment shows beside the others; a fall "
        "is a regression." + marks,
        segments,
        _save(fig, out_dir / "segments.png"),
    )


_OUTCOME_COLOURS = {
    PASSED: "#b7dfb9",
    WARNED: "tab:orange",
    BLOCKED: "tab:red",
    NOT_JUDGED: "#d9d9d9",
}


def _quality_section(data: ReportData, out_dir: Path) -> Section:
    """Data quality: a cell per check and day, coloured by its outcome, and a table per check
    of what it guards, its threshold and the days it failed."""
    title = "Data quality"
    if data.quality_days is None or data.quality is None:
        return Section("data_quality", title, "", None, None, _absent(DATA_QUALITY_TABLE, data))
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    days = data.quality_days
    checks = list(dict.fromkeys(days["check"]))
    outcomes = list(_OUTCOME_COLOURS)
    grid = days.pivot(index="check", columns="metric_date", values="outcome").reindex(checks)
    dates = sorted(grid.columns)
    codes = grid[dates].apply(lambda column: column.map(outcomes.index)).astype("float64")
    fig, (ax,) = _figure()
    half = dt.timedelta(hours=12)
    edges = [dt.datetime.combine(day, dt.time()) - half for day in dates]
    edges.append(edges[-1] + dt.timedelta(days=1))
    ax.pcolormesh(
        edges,
        np.arange(len(checks) + 1),
        np.ma.masked_invalid(codes.to_numpy()),
        cmap=ListedColormap(list(_OUTCOME_COLOURS.values())),
        vmin=-0.5,
        vmax=len(outcomes) - 0.5,
        edgecolors="white",
        linewidth=0.5,
    )
    ax.set_yticks(np.arange(len(checks)) + 0.5, checks, fontsize=8)
    ax.invert_yaxis()  # the gates' order, top to bottom
    ax.legend(
        handles=[Patch(color=colour, label=name) for name, colour in _OUTCOME_COLOURS.items()],
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
    )
    ax.set_title(f"Each data-quality check on each day (data_quality)\n{range_text(data)}")
    _date_axis(ax, data)
    ax.grid(False)
    ax.set_ylabel("check")
    said = (
        " The run said: " + "; ".join(data.quality_failures) + "."
        if data.quality_failures
        else " Every check passed, or had nothing to judge, on every day."
    )
    return Section(
        "data_quality",
        title,
        "Each check of the great-expectations suite on each computed day of the range: "
        f"{PASSED}; {WARNED}, a warning check failed and the day was published all the same; "
        f"{BLOCKED}, a blocking check failed, which keeps the day unpublished under "
        "quality.on_failure: fail (under warn it is published with dq_passed = false); "
        f"{NOT_JUDGED}, nothing to judge that day. Beside it, per check: what it guards, its "
        "severity (quality.severity), its threshold and the days it failed." + said,
        data.quality,
        _save(fig, out_dir / "data_quality.png"),
        prose=("guards",),
    )


def _absent(table: Table, data: ReportData) -> str:
    return f"No rows in {table.name} from {data.start} to {data.end}: figure left out."
