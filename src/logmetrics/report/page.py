"""Writing the page: `render` draws the figures (`figures.draw_sections`) and writes index.html,
every PNG embedded as a base64 data URI beside a table of the numbers it is drawn from."""

from __future__ import annotations

import base64
import html
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from logmetrics.report.figures import FIGURE_DPI, FIGURE_SIZE, Section, draw_sections, range_text
from logmetrics.report.frames import ReportData, version_changes
from logmetrics.schemas import ALERT


def render(data: ReportData, out_dir: Path) -> Path:
    """Write one PNG per figure and `index.html` (images inlined) under `out_dir`."""
    index = out_dir / "index.html"
    sections = draw_sections(data, out_dir)
    index.write_text(_html(data, sections), encoding="utf-8")
    return index


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
section { margin-bottom: 2.5em; }
.row { display: flex; gap: 1.5em; align-items: flex-start; flex-wrap: wrap; }
.numbers { max-height: 480px; max-width: 100%; overflow: auto; }
table { border-collapse: collapse; font-size: 0.8em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; white-space: nowrap; }
th.num, td.num { text-align: right; }
th { background: #f2f2f2; position: sticky; top: 0; white-space: normal; }
td.prose { white-space: normal; min-width: 18em; }
.caption { max-width: 900px; }
a { white-space: nowrap; }
.note { color: #8a6d3b; }
"""


def _html(data: ReportData, sections: list[Section]) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>logmetrics report {html.escape(range_text(data))}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>logmetrics report: unique-clusters@k</h1>",
        f"<p>Date range: <b>{html.escape(range_text(data))}</b>. All-traffic rows "
        "(segment = 'all') unless a section says otherwise. Every figure is drawn from the "
        "table beside it, read from the Delta tables.</p>",
        *_quality_line(data),
        *_alerts_html(data, [s for s in sections if s.name.startswith("crowding_")]),
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
        table = _table_html(section.table, section.prose)
        parts.append(f'<div class="numbers">{table}</div></div>')
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
    changes = version_changes(data.versions) if data.versions is not None else []
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


def _quality_line(data: ReportData) -> list[str]:
    """Under the range: the checks that failed on its days, each once, as the run said them,
    with a link to the data-quality section."""
    if data.quality_days is None:
        return []
    link = '(<a href="#data_quality">Data quality</a>)'
    if not data.quality_failures:
        return [f"<p>Data quality: no check failed on any day {link}.</p>"]
    failed = "; ".join(f"<code>{html.escape(line)}</code>" for line in data.quality_failures)
    return [f"<p>Data quality: {failed} {link}.</p>"]


def _alerts_html(data: ReportData, crowding: list[Section]) -> list[str]:
    """The period's alerts and improvements, every segment (docs/alerts.md), and a link to
    each alert's "What crowds the window" section."""
    parts = ['<section id="alerts"><h2>Alerts and improvements</h2>']
    if data.alerts is None:
        parts.append('<p class="note">No unique_clusters_alerts table: nothing judged.</p>')
    elif data.alerts.empty:
        parts.append(f"<p>No alert and no improvement in {html.escape(range_text(data))}.</p>")
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
        links = [
            f'<a href="#{s.name}">{html.escape(s.title.split(": ", 1)[-1])}</a>'
            for s in crowding
            if s.png is not None
        ]
        if links:
            parts.append(f"<p>What crowds the window: {', '.join(links)}.</p>")
    parts.append("</section>")
    return parts


def _table_html(df: pd.DataFrame, prose: Collection[str] = ()) -> str:
    """The frame as an HTML table for people: floats to 3 significant digits, a float column
    of whole numbers (a count or an id with a null among them) as integers; integers, dates
    and text as they are; a null as '-'. The Delta tables keep the raw values.

    A column of numbers (`_is_numeric`) is right-aligned, its header too (class `num`), so that
    digits line up; any other (text, dates, booleans) is left-aligned under a left-aligned
    header. So that a table fits the page without breaking a value: a cell never wraps (an id
    such as `kb-reset-password`, a date, a number stays whole) but in the `prose` columns, and
    a header wraps only after an underscore (`share_of_<wbr>redundant_<wbr>slots`)."""
    shown = df.copy()
    for column in df.columns:
        if pd.api.types.is_float_dtype(df[column]):
            values = df[column].dropna()
            shown[column] = df[column].map(_whole if (values == values.round()).all() else _number)
        else:
            shown[column] = df[column].map(_text)
    classes = [
        ' class="prose"' if c in prose else ' class="num"' if _is_numeric(df[c]) else ""
        for c in df.columns
    ]
    head = "".join(
        f"<th{cls}>" + "_<wbr>".join(html.escape(part) for part in str(c).split("_")) + "</th>"
        for c, cls in zip(shown.columns, classes, strict=True)
    )
    rows = [
        "<tr>"
        + "".join(
            f"<td{cls}>{html.escape(value)}</td>"
            for cls, value in zip(classes, values, strict=True)
        )
        + "</tr>"
        for values in shown.itertuples(index=False)
    ]
    return (
        f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n"
        + "\n".join(rows)
        + "\n</tbody></table>"
    )


def _is_numeric(column: pd.Series) -> bool:
    """A column of numbers (a null among them allowed), not of booleans, dates or text."""
    if pd.api.types.is_bool_dtype(column):
        return False
    if pd.api.types.is_numeric_dtype(column):
        return True
    values = column.dropna()
    return not values.empty and all(
        isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool | np.bool_)
        for v in values
    )


def _number(value: Any) -> str:
    """A float to 3 significant digits, without an exponent from 0.0001 up ('-' for NaN)."""
    if pd.isna(value):
        return "-"
    text = f"{float(value):.3g}"
    return f"{float(text):.0f}" if "e+" in text else text


def _whole(value: Any) -> str:
    return "-" if pd.isna(value) else f"{float(value):.0f}"


def _text(value: Any) -> str:
    """A cell of any other column (integers, text, dates, booleans, a null among them)."""
    missing = value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))
    return "-" if missing else str(value)
