"""`logmetrics report`: the numbers behind each figure, the images, the HTML page, the CLI.

Small Delta tables with known values are written to a temporary warehouse; every expected
number below is worked out by hand from those values (or numpy.percentile on the expanded
histogram), never taken from the report's own output.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import SparkSession

from logmetrics import cli
from logmetrics.config import AlertsConfig, OutputConfig, load_config
from logmetrics.quality.gx_suite import CHECKS, GUARDS
from logmetrics.report import load_report_data, render
from logmetrics.report.figures import (
    BAND_ALPHA,
    FIGURE_DPI,
    FIGURE_SIZE,
    alert_marks,
    draw_median_bands,
)
from logmetrics.report.frames import ALERT_COLUMNS, build_report_data
from logmetrics.schemas import ALERTS, CROWDING, DAILY, DATA_QUALITY, K_SWEEP, REDUNDANCY_COST
from logmetrics.tables.catalog import (
    ALERTS_TABLE,
    CROWDING_TABLE,
    DAILY_TABLE,
    DATA_QUALITY_TABLE,
    K_SWEEP_TABLE,
    REDUNDANCY_COST_TABLE,
    append,
)

D0, D1, D2, D3 = (dt.date(2026, 9, 30) + dt.timedelta(days=i) for i in range(4))
THRESHOLD = 2
STAMP = {"cluster_table_version": 3, "run_id": "test", "computed_at": dt.datetime(2026, 10, 4)}

# All traffic: histograms per (day, k); index i = queries with exactly i clusters.
ALL_HIST = {
    (D0, 2): [0, 1, 1],
    (D0, 3): [0, 0, 1, 1],
    (D1, 2): [0, 1, 3],
    (D1, 3): [0, 1, 2, 1],
    (D2, 2): [0, 3, 3],
    (D2, 3): [0, 1, 3, 2],
    (D3, 2): [1, 2, 7],
    (D3, 3): [1, 2, 3, 4],
}
# (valid entries, entries unknown to the cluster table) per day: the same at every k.
RESULTS = {D0: (20, 0), D1: (40, 1), D2: (60, 0), D3: (100, 5)}
# One segment column, `surface`, at k = 3 (and k = 2, which the comparison must not use).
SEGMENT_HIST = {
    ("web", D0, 3): [0, 0, 0, 9],  # outside the range
    ("web", D1, 3): [0, 1, 1, 0],
    ("web", D2, 3): [0, 0, 1, 1],
    ("web", D3, 3): [1, 0, 0, 1],
    ("app", D1, 3): [0, 0, 1, 1],
    ("app", D2, 3): [0, 1, 1, 2],
    ("app", D3, 3): [0, 2, 2, 5],
    ("web", D3, 2): [2, 0, 0],
    ("app", D3, 2): [9, 0, 0],
}
# k-sweep totals (sum of unique_clusters@k over the day's queries) for k = 1..3.
SWEEP = {D0: (2, [2, 3, 4]), D1: (4, [4, 7, 8]), D2: (6, [6, 9, 12]), D3: (10, [10, 18, 23])}
# redundancy cost per (day, k): (queries, slots, redundant_slots, redundant_tokens, usd)
COST = {
    (D0, 2): (2, 4, 1, 510, 0.00153),
    (D1, 2): (4, 8, 1, 510, 0.00153),
    (D1, 3): (4, 12, 4, 2040, 0.00612),
    (D2, 2): (6, 12, 3, 1530, 0.00459),
    (D2, 3): (6, 18, 7, 3570, 0.01071),
    (D3, 2): (10, 20, 2, 1020, 0.00306),
    (D3, 3): (10, 30, 7, 3570, 0.01071),
}


def _quantiles(hist: list[int]) -> dict[str, float | None]:
    values = np.repeat(np.arange(len(hist)), hist)
    if values.size == 0:
        return {name: None for name in ("p10", "p25", "median", "p75", "p90")}
    p = dict(zip(("p10", "p25", "median", "p75", "p90"), (10, 25, 50, 75, 90), strict=True))
    return {name: float(np.percentile(values, q)) for name, q in p.items()}


def _daily_row(
    day: dt.date, k: int, hist: list[int], segment: str = "all", value: str = "all"
) -> tuple[Any, ...]:
    queries = sum(hist)
    results, missing = RESULTS[day]
    row = {
        "metric_date": day,
        "k": k,
        "segment": segment,
        "segment_value": value,
        "queries": queries,
        "empty_queries": hist[0],
        "histogram": hist,
        **_quantiles(hist),
        "mean": sum(i * n for i, n in enumerate(hist)) / queries,
        "threshold": THRESHOLD,
        "share_at_or_below_threshold": sum(hist[: THRESHOLD + 1]) / queries,
        "results": results,
        "missing_cluster_results": missing,
        "missing_cluster_rate": missing / results,
        "dq_passed": True,
        "rows_read": queries,
        "duplicate_rows": 0,
        "quarantined_rows": 0,
        "quarantined_entries": 0,
        **STAMP,
    }
    return tuple(row[f.name] for f in DAILY.fields)


def _sweep_rows(segment: str, value: str, scale: int) -> list[tuple[Any, ...]]:
    rows = []
    for day, (queries, totals) in SWEEP.items():
        for k, total in enumerate(totals, start=1):
            q, t = queries * scale, total * scale + (scale - 1)
            row = {
                "metric_date": day,
                "k": k,
                "segment": segment,
                "segment_value": value,
                "queries": q,
                "unique_clusters_total": t,
                "mean_unique_clusters": t / q,
                "distinct_fraction": t / q / k,
                "marginal_rate": 0.0,  # not read: the range's rate comes from the totals
                **STAMP,
            }
            rows.append(tuple(row[f.name] for f in K_SWEEP.fields))
    return rows


# unique_clusters_alerts: (day, segment, value, k, statistic, status, value, baseline mean).
ALERT_ROWS = [
    (D0, "all", "all", 2, "mean", "alert", 1.0, 1.9),  # outside the range
    (D2, "all", "all", 3, "share_at_or_below_threshold", "alert", 4 / 6, 0.3),
    (D2, "all", "all", 2, "share_at_or_below_threshold", "ok", 0.5, 0.45),
    (D3, "surface", "web", 3, "mean", "improvement", 1.5, 1.2),
    (D3, "all", "all", 3, "mean", "ok", 2.0, 2.0),
]


# unique_clusters_crowding: (day, k, segment, value, cluster_id, chunk_id, redundant slots),
# ranked in this order per (day, k, segment row).
CROWDING_ROWS = [
    *[(D2, 3, "all", "all", f"c{i:02d}", None, 130 - 10 * i) for i in range(1, 13)],
    (D2, 2, "all", "all", "z", None, 5),  # not the alert's k
    (D1, 3, "all", "all", "Q", None, 7),  # neither the last day nor an alert's
    (D3, 3, "all", "all", "A", None, 9),
    (D3, 3, "all", "all", None, "chunk-x", 4),
    (D3, 2, "all", "all", "B", None, 3),  # the last day is shown at its largest k
    (D3, 3, "surface", "web", "W", None, 50),  # an improvement: not shown
]


def _crowding_rows(spec: list[tuple[Any, ...]] = CROWDING_ROWS) -> list[tuple[Any, ...]]:
    out, ranks = [], {}
    for day, k, segment, value, cluster_id, chunk_id, slots in spec:
        rank = ranks[(day, k, segment, value)] = ranks.get((day, k, segment, value), 0) + 1
        row = {
            "metric_date": day,
            "k": k,
            "segment": segment,
            "segment_value": value,
            "rank": rank,
            "cluster_id": cluster_id,
            "chunk_id": chunk_id,
            "redundant_slots": slots,
            "requests_affected": 1,
            "share_of_redundant_slots": 0.5,
            "cluster_size": 2,
            "example_request_ids": ["r1"],
            "redundant_tokens": slots * 510,
            "redundant_usd": slots * 510 * 3.0 / 1_000_000,
            **STAMP,
        }
        out.append(tuple(row[f.name] for f in CROWDING.fields))
    return out


def _alert_row(values: tuple[Any, ...]) -> tuple[Any, ...]:
    day, segment, segment_value, k, statistic, status, value, baseline = values
    row = {
        "metric_date": day,
        "k": k,
        "segment": segment,
        "segment_value": segment_value,
        "statistic": statistic,
        "value": value,
        "baseline_mean": baseline,
        "baseline_sd": 0.01,
        "baseline_days": 4,
        "queries": 600,
        "delta": value - baseline,
        "limit": 0.05,
        "min_effect": 0.02,
        "status": status,
        "cluster_table_changed": False,
        **STAMP,
    }
    return tuple(row[f.name] for f in ALERTS.fields)


def _cost_row(
    day: dt.date, k: int, values: tuple[Any, ...], segment: str = "all", value: str = "all"
) -> tuple[Any, ...]:
    queries, slots, redundant_slots, tokens, usd = values
    row = {
        "metric_date": day,
        "k": k,
        "segment": segment,
        "segment_value": value,
        "queries": queries,
        "slots": slots,
        "redundant_slots": redundant_slots,
        "redundant_tokens": tokens,
        "redundant_usd": usd,
        "tokens_per_slot": 510,
        "usd_per_million_input_tokens": 3.0,
        **STAMP,
    }
    return tuple(row[f.name] for f in REDUNDANCY_COST.fields)


# data_quality: (day, check, success, observed value, threshold, severity).
QUALITY_ROWS = [
    (D0, "missing_cluster_rate", False, 0.5, 0.04, "blocking"),  # outside the range
    (D1, "missing_cluster_rate", True, 0.025, 0.04, "blocking"),
    (D2, "missing_cluster_rate", True, 0.0, 0.04, "blocking"),
    (D3, "missing_cluster_rate", False, 0.05, 0.04, "blocking"),
    (D1, "unique_cluster_chunk_ids", False, 10.0, 0.0, "warning"),
    (D2, "unique_cluster_chunk_ids", False, 10.0, 0.0, "warning"),
    (D3, "unique_cluster_chunk_ids", False, 12.0, 0.0, "warning"),
    (D1, "volume", None, None, 0.5, "warning"),  # no day before it: not judged
    (D2, "volume", True, 1.5, 0.5, "warning"),
    (D3, "volume", True, 10 / 6, 0.5, "warning"),
]


def _quality_row(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """A data_quality row (run_id, checked_at and details: a run's, never read by the report)."""
    return (*values, "test", dt.datetime(2026, 10, 4), "{}")


def _frame_of(rows: list[tuple[Any, ...]], schema: Any) -> pd.DataFrame:
    """Rows of a table's schema as the pandas frame the report reads of it."""
    return pd.DataFrame([dict(zip(schema.fieldNames(), row, strict=True)) for row in rows])


# Built by hand, no warehouse: all traffic at k = 5 and 10 (ALL_HIST's k = 2 and 3 histograms).
HAND_DAILY = _frame_of(
    [_daily_row(day, {2: 5, 3: 10}[k], hist) for (day, k), hist in ALL_HIST.items()], DAILY
)


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report-warehouse")
    output = OutputConfig(warehouse=str(path))
    # Each table appended into the new warehouse: the rows a replace of their days would leave,
    # without Delta rebuilding each new table's state first (as a run's first writes append).
    daily = [_daily_row(day, k, hist) for (day, k), hist in ALL_HIST.items()]
    daily += [_daily_row(d, k, h, "surface", v) for (v, d, k), h in SEGMENT_HIST.items()]
    append(spark, spark.createDataFrame(daily, DAILY), output, DAILY_TABLE)
    # The segments' k-sweep and cost rows are far from all traffic's: they must not leak in.
    sweep = _sweep_rows("all", "all", 1) + _sweep_rows("surface", "web", 7)
    append(spark, spark.createDataFrame(sweep, K_SWEEP), output, K_SWEEP_TABLE)
    cost = [_cost_row(day, k, values) for (day, k), values in COST.items()]
    cost.append(_cost_row(D3, 3, (3, 9, 9, 99999, 99.0), "surface", "web"))
    append(spark, spark.createDataFrame(cost, REDUNDANCY_COST), output, REDUNDANCY_COST_TABLE)
    alerts = spark.createDataFrame([_alert_row(r) for r in ALERT_ROWS], ALERTS)
    append(spark, alerts, output, ALERTS_TABLE)
    crowding = spark.createDataFrame(_crowding_rows(), CROWDING)
    append(spark, crowding, output, CROWDING_TABLE)
    evaluation = spark.createDataFrame(
        [
            ("bm25", "q1", 10, "recall", 0.9876),
            ("bm25", "ALL", 10, "recall", 0.6125),
            ("bm25", "ALL", 10, "ndcg", 0.4321),
            ("hybrid", "ALL", 5, "recall", 0.7777),
        ],
        "run string, query_id string, k int, metric string, value double",
    )
    evaluation.write.format("delta").save(str(path / "evaluation_results"))
    quality = [_quality_row(row) for row in QUALITY_ROWS]
    append(spark, spark.createDataFrame(quality, DATA_QUALITY), output, DATA_QUALITY_TABLE)
    return path


def _config_file(tmp_path: Path, warehouse: Path) -> Path:
    path = tmp_path / "report.yaml"
    path.write_text(
        f"""
inputs:
  served_logs: {{path: {tmp_path / "logs"}}}
  clusters: {{path: {tmp_path / "clusters"}}}
output:
  warehouse: {warehouse}
metrics:
  ks: [2, 3]
  threshold: {THRESHOLD}
quality:
  max_missing_cluster_rate: 0.04
spark:
  log_dir: null
"""
    )
    return path


@pytest.fixture(scope="module")
def data(spark: SparkSession, warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    config = load_config([_config_file(tmp_path_factory.mktemp("conf"), warehouse)])
    return load_report_data(spark, config, D1, D3)


@pytest.fixture(scope="module")
def rendered(data: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render(data, tmp_path_factory.mktemp("report") / "out")


# --- the numbers ----------------------------------------------------------------------------


def test_k_sweep_over_the_range_is_weighted_by_queries(data: Any) -> None:
    sweep = data.k_sweep
    assert list(sweep["k"]) == [1, 2, 3]
    assert list(sweep["queries"]) == [20, 20, 20]  # 4 + 6 + 10; D0 is outside the range
    assert list(sweep["unique_clusters_total"]) == [20, 34, 43]
    # 34/20, not the mean of the daily means (7/4 + 9/6 + 18/10) / 3 = 1.683...
    assert sweep["mean_unique_clusters"].tolist() == pytest.approx([1.0, 1.7, 2.15])
    assert sweep["distinct_fraction"].tolist() == pytest.approx([1.0, 0.85, 2.15 / 3])
    assert sweep["marginal_rate"].tolist() == pytest.approx([1.0, 0.7, 0.45])


def test_band_and_share_are_the_daily_all_traffic_rows(data: Any) -> None:
    assert (data.start, data.end, data.threshold) == (D1, D3, THRESHOLD)
    band = data.median_band
    assert list(zip(band["metric_date"], band["k"], strict=True)) == [
        (D1, 2), (D1, 3), (D2, 2), (D2, 3), (D3, 2), (D3, 3),
    ]  # fmt: skip
    # D3, k=3: histogram [1, 2, 3, 4] = values 0 1 1 2 2 2 3 3 3 3.
    # p10 at 0.9 -> 0 + 0.9 * (1 - 0) = 0.9; median at 4.5 -> 2; p90 at 8.1 -> 3.
    last = band.iloc[-1]
    assert (last["queries"], last["p10"], last["median"], last["p90"]) == (10, 0.9, 2.0, 3.0)
    # D1, k=3: [0, 1, 2, 1] = 1 2 2 3: p10 at 0.3 -> 1.3, median 2, p90 at 2.7 -> 2.7.
    d1 = band[(band["metric_date"] == D1) & (band["k"] == 3)].iloc[0]
    assert (d1["p10"], d1["median"], d1["p90"]) == pytest.approx((1.3, 2.0, 2.7))
    share = data.share
    # Share at or below 2: every query at k=2; at k=3, D1 [0, 1, 2, 1] -> 3/4,
    # D2 [0, 1, 3, 2] -> 4/6, D3 [1, 2, 3, 4] -> 6/10.
    assert share["share_at_or_below_threshold"].tolist() == pytest.approx(
        [1.0, 3 / 4, 1.0, 4 / 6, 1.0, 6 / 10]
    )


def test_latest_day_histogram(data: Any) -> None:
    assert data.histogram_date == D3
    hist = data.histogram
    assert hist[hist["k"] == 2]["queries"].tolist() == [1, 2, 7]
    assert hist[hist["k"] == 3]["queries"].tolist() == [1, 2, 3, 4]
    assert hist[hist["k"] == 3]["unique_clusters"].tolist() == [0, 1, 2, 3]
    assert hist[hist["k"] == 3]["share"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4])


def test_missing_cluster_rate_one_row_per_day(data: Any) -> None:
    missing = data.missing
    assert missing["metric_date"].tolist() == [D1, D2, D3]
    assert missing["results"].tolist() == [40, 60, 100]
    assert missing["missing_cluster_results"].tolist() == [1, 0, 5]
    assert missing["missing_cluster_rate"].tolist() == pytest.approx([0.025, 0.0, 0.05])
    assert data.max_missing_cluster_rate == 0.04


def test_cost_is_the_all_traffic_rows_in_range(data: Any) -> None:
    cost = data.cost
    # D0 is outside the range; the surface=web row (99 USD) is not all traffic.
    assert list(zip(cost["metric_date"], cost["k"], strict=True)) == [
        (D1, 2), (D1, 3), (D2, 2), (D2, 3), (D3, 2), (D3, 3),
    ]  # fmt: skip
    assert cost["redundant_slots"].tolist() == [1, 4, 3, 7, 2, 7]
    assert cost["redundant_tokens"].tolist() == [510, 2040, 1530, 3570, 1020, 3570]
    assert cost["redundant_usd"].tolist() == pytest.approx(
        [0.00153, 0.00612, 0.00459, 0.01071, 0.00306, 0.01071]
    )


def test_segments_are_daily_rows_per_value_at_the_default_k(data: Any) -> None:
    """ks 2 and 3, no 10: the largest, 3; one row per (segment value, day) in the range."""
    seg = data.segments
    assert list(seg.columns) == [
        "metric_date", "segment", "segment_value", "k", "queries", "mean",
        "share_at_or_below_threshold",
    ]  # fmt: skip
    assert list(zip(seg.segment_value, seg.metric_date, strict=True)) == [
        ("app", D1),
        ("app", D2),
        ("app", D3),
        ("web", D1),
        ("web", D2),
        ("web", D3),
    ]  # fmt: skip  (D0's web [0, 0, 0, 9] is outside the range)
    assert set(seg["segment"]) == {"surface"} and set(seg["k"]) == {3}
    # app: [0,0,1,1] -> 5/2; [0,1,1,2] -> 9/4; [0,2,2,5] -> 21/9.
    # web: [0,1,1,0] -> 3/2; [0,0,1,1] -> 5/2; [1,0,0,1] -> 3/2.
    assert seg["queries"].tolist() == [2, 4, 9, 2, 2, 2]
    assert seg["mean"].tolist() == pytest.approx([5 / 2, 9 / 4, 21 / 9, 3 / 2, 5 / 2, 3 / 2])
    assert seg["share_at_or_below_threshold"].tolist() == pytest.approx(
        [1 / 2, 2 / 4, 4 / 9, 1.0, 1 / 2, 1 / 2]
    )


def test_evaluation_shows_only_the_averaged_rows(data: Any) -> None:
    ev = data.evaluation
    assert list(ev.columns) == ["run", "k", "metric", "value"]
    assert ev.values.tolist() == [
        ["bm25", 10, "ndcg", 0.4321],
        ["bm25", 10, "recall", 0.6125],
        ["hybrid", 5, "recall", 0.7777],
    ]


def test_default_range_is_every_date_in_the_daily_table(
    spark: SparkSession, warehouse: Path, tmp_path: Path
) -> None:
    config = load_config([_config_file(tmp_path, warehouse)])
    everything = load_report_data(spark, config)
    assert (everything.start, everything.end) == (D0, D3)
    assert everything.missing["metric_date"].tolist() == [D0, D1, D2, D3]
    assert everything.k_sweep["queries"].tolist() == [22, 22, 22]


def test_latest_histogram_skips_a_trailing_day_without_queries() -> None:
    def row(day: dt.date, hist: list[int]) -> dict[str, Any]:
        return {
            "metric_date": day, "k": 2, "segment": "all", "segment_value": "all",
            "queries": sum(hist), "histogram": hist, "median": None, "p10": None, "p90": None,
            "threshold": 1, "share_at_or_below_threshold": None, "mean": None, "results": 0,
            "missing_cluster_results": 0, "missing_cluster_rate": None,
        }  # fmt: skip

    daily = pd.DataFrame([row(D1, [1, 2, 3]), row(D2, [0, 0, 0])])
    data = build_report_data(daily, None, None, None, D1, D2)
    assert data.histogram_date == D1
    assert data.histogram["queries"].tolist() == [1, 2, 3]
    assert data.k_sweep is None and data.cost is None and data.segments is None


def test_alerts_are_the_fired_rows_in_range_all_traffic_first(data: Any) -> None:
    alerts = data.alerts
    assert list(zip(alerts.metric_date, alerts.segment_value, alerts.status, strict=True)) == [
        (D2, "all", "alert"),
        (D3, "web", "improvement"),
    ]
    assert alerts["value"].tolist() == pytest.approx([4 / 6, 1.5])
    assert data.mean["mean"].tolist() == pytest.approx(
        [sum(i * n for i, n in enumerate(ALL_HIST[(d, k)])) / sum(ALL_HIST[(d, k)])
         for d in (D1, D2, D3) for k in (2, 3)]
    )  # fmt: skip


def test_what_crowds_the_window_is_the_last_day_and_each_alert_day(data: Any) -> None:
    """D2's share alert (all traffic, k = 3): its top 10 keys of 12; the last day D3: all
    traffic at its largest k. Not D1 (no alert), not D3's web improvement."""
    shown = data.crowding
    keys = list(zip(shown.metric_date, shown.k, shown.cluster_id, shown.chunk_id, strict=True))
    assert keys == [(D2, 3, f"c{i:02d}", None) for i in range(1, 11)] + [
        (D3, 3, "A", None),
        (D3, 3, None, "chunk-x"),
    ]
    assert shown["redundant_slots"].tolist()[:2] == [120, 110]
    assert set(shown["segment"]) == {"all"}


def test_a_segment_alert_is_marked_whatever_fired_on_all_traffic_that_day() -> None:
    """On D2 all traffic fired at k=5 (the mean) and at k=10 (the share), surface=app at k=10
    (the mean): the mean figure marks k=5's point and app's band, named with its k; no mark of
    a k the figure does not draw (k=20) nor of the other statistic."""
    fired = [
        (D2, "all", "all", 5, "mean", "alert", 1.25, 1.75),
        (D2, "all", "all", 10, "share_at_or_below_threshold", "alert", 0.75, 0.5),
        (D2, "surface", "app", 10, "mean", "alert", 2.25, 2.75),
        (D2, "surface", "web", 20, "mean", "alert", 3.0, 3.5),  # k=20 is not drawn
        (D3, "surface", "app", 10, "mean", "improvement", 3.0, 2.5),
        (D3, "all", "all", 10, "mean", "ok", 2.0, 2.0),
    ]
    alerts = _frame_of([_alert_row(r) for r in fired], ALERTS)
    data = build_report_data(HAND_DAILY, None, None, None, D0, D3, alerts=alerts)
    columns = ["metric_date", "k", "status", "is_point", "value", "label"]
    mean = alert_marks(data.alerts, "mean", data.mean["k"])
    assert mean[columns].values.tolist() == [
        [D2, 5, "alert", True, 1.25, "k=5"],
        [D2, 10, "alert", False, 2.25, "surface=app k=10"],
        [D3, 10, "improvement", False, 3.0, "surface=app k=10"],
    ]
    share = alert_marks(data.alerts, "share_at_or_below_threshold", data.share["k"])
    assert share[columns].values.tolist() == [[D2, 10, "alert", True, 0.75, "k=10"]]
    # Filtered to the figure's k: a figure of k=5 alone has only k=5's point.
    assert alert_marks(data.alerts, "mean", [5])[columns].values.tolist() == [
        [D2, 5, "alert", True, 1.25, "k=5"]
    ]
    # The segments figure's panel of `surface` at k=10: its values' rows, on their lines.
    panel = alert_marks(data.alerts, "mean", [10], segment="surface")
    assert panel[columns].values.tolist() == [
        [D2, 10, "alert", True, 2.25, "surface=app k=10"],
        [D3, 10, "improvement", True, 3.0, "surface=app k=10"],
    ]
    assert alert_marks(None, "mean", [5, 10]).empty
    assert alert_marks(alerts.iloc[:0], "mean", [5, 10]).empty


def test_what_crowds_the_window_is_at_the_alerts_k_beside_its_baseline(tmp_path: Path) -> None:
    """D2's alert (all traffic, k=5, the mean), judged against D1 and D0 (trailing, 2 days):
    its top keys at k=5, each beside its mean over those days (0 on a day that did not list
    it) and NEW when neither listed it; the last day D3, without an alert: the default k, 10,
    and no baseline."""
    settings = AlertsConfig(
        baseline="trailing", baseline_days=2, min_baseline_days=2, min_queries=1
    )
    crowding = [
        (D0, 5, "all", "all", "A", None, 4),
        (D0, 5, "all", "all", "B", None, 2),
        (D1, 5, "all", "all", "A", None, 6),
        (D1, 5, "all", "all", "C", None, 1),
        (D2, 5, "all", "all", "A", None, 9),
        (D2, 5, "all", "all", None, "chunk-x", 4),
        (D2, 5, "all", "all", "B", None, 3),
        (D2, 10, "all", "all", "Z", None, 50),  # not the alert's k
        (D2, 5, "surface", "app", "Y", None, 70),  # not the alert's segment row
        (D3, 10, "all", "all", "A", None, 7),
        (D3, 5, "all", "all", "W", None, 5),  # not the default k
    ]
    alerts = _frame_of([_alert_row((D2, "all", "all", 5, "mean", "alert", 1.5, 1.625))], ALERTS)
    data = build_report_data(
        HAND_DAILY[HAND_DAILY["metric_date"] >= D1],
        None,
        None,
        None,
        D1,
        D3,
        alerts=alerts,
        crowding=_frame_of(_crowding_rows(crowding), CROWDING),
        history=HAND_DAILY,  # D0 is outside the range, but D2's baseline
        alert_settings=settings,
    )
    columns = ["metric_date", "k", "cluster_id", "chunk_id", "redundant_slots"]
    columns += ["baseline_redundant_slots", "is_new", "statistic"]
    expected = pd.DataFrame(
        [
            [D2, 5, "A", None, 9, 5.0, False, "mean"],  # (6 + 4) / 2
            [D2, 5, None, "chunk-x", 4, 0.0, True, "mean"],
            [D2, 5, "B", None, 3, 1.0, False, "mean"],  # (0 + 2) / 2
            [D3, 10, "A", None, 7, np.nan, None, None],
        ],
        columns=columns,
    )
    pd.testing.assert_frame_equal(data.crowding[columns], expected, check_dtype=False)
    page = html.unescape(render(data, tmp_path / "r").read_text())
    alert_day = _section(page, "crowding_2026-10-02_all_k5")
    assert "An alert at k=5: ALERT 2026-10-02 all traffic k=5 mean" in alert_day
    assert "Beside each key, its mean over the alert's 4 baseline days" in alert_day
    last_day = _section(page, "crowding_2026-10-03_all_k10")
    assert "without an alert: at k=10, the report's default k" in last_day


def test_every_alert_gets_its_crowding_figure(tmp_path: Path) -> None:
    """Three alerting rows on D2 (all traffic at k=5, by the mean and by the share: one block;
    surface=app at k=10) and one on the last day D3 (surface=web, k=5): a figure and a table
    for each of the three blocks, the first naming both statistics; the last day at the
    default k is not shown, since an alert fired on it; an improvement has none."""
    share = "share_at_or_below_threshold"
    fired = [
        (D2, "all", "all", 5, "mean", "alert", 1.25, 1.75),
        (D2, "all", "all", 5, share, "alert", 0.75, 0.5),
        (D2, "surface", "app", 10, "mean", "alert", 2.25, 2.75),
        (D2, "surface", "web", 10, "mean", "improvement", 3.25, 2.75),
        (D3, "surface", "web", 5, "mean", "alert", 1.0, 1.5),
    ]
    crowding = [
        (D2, 5, "all", "all", "A", None, 9),
        (D2, 10, "all", "all", "Z", None, 50),  # no alert at k=10 in all traffic
        (D2, 10, "surface", "app", "kb-reset-password", None, 7),
        (D2, 10, "surface", "app", None, "chunk-x", 2),
        (D2, 10, "surface", "web", "W", None, 6),  # an improvement
        (D3, 5, "surface", "web", "V", None, 4),
        (D3, 10, "all", "all", "U", None, 8),  # the last day at the default k
    ]
    data = build_report_data(
        HAND_DAILY,
        None,
        None,
        None,
        D0,
        D3,
        alerts=_frame_of([_alert_row(r) for r in fired], ALERTS),
        crowding=_frame_of(_crowding_rows(crowding), CROWDING),
    )
    shown = data.crowding
    keys = zip(shown.metric_date, shown.segment_value, shown.k, shown.cluster_id, strict=True)
    assert list(keys) == [
        (D2, "all", 5, "A"),
        (D2, "app", 10, "kb-reset-password"),
        (D2, "app", 10, None),
        (D3, "web", 5, "V"),
    ]
    page = html.unescape(render(data, tmp_path / "r").read_text())
    names = re.findall(r'<section id="(crowding_[^"]*)">', page)
    assert names == [
        "crowding_2026-10-02_all_k5",
        "crowding_2026-10-02_surface-app_k10",
        "crowding_2026-10-03_surface-web_k5",
    ]
    both = _section(page, names[0])
    assert "ALERT 2026-10-02 all traffic k=5 mean: 1.250" in both
    assert f"ALERT 2026-10-02 all traffic k=5 {share}: 0.7500" in both
    app = _section(page, names[1])
    assert "ALERT 2026-10-02 surface=app k=10 mean: 2.250" in app
    assert "<td>kb-reset-password</td>" in app and "<td>chunk-x</td>" in app
    for name in names:
        assert (tmp_path / "r" / f"{name}.png").stat().st_size > 0
    links = re.findall(r'<a href="#(crowding_[^"]*)">', _section(page, "alerts"))
    assert links == names


def test_data_quality_is_each_check_per_day_and_per_check_its_failed_days(data: Any) -> None:
    """The data_quality rows of D1..D3 (D0's failure is outside the range): each day's outcome
    per check; per check, in the gates' order, what it guards, its severity and threshold, and
    the days it failed with the values observed then; the run's closing lines for the two
    checks that failed, as the terminal prints them (quality.policy.failing_checks)."""
    days = data.quality_days
    assert len(days) == 9
    outcomes = dict(zip(zip(days.metric_date, days.check, strict=True), days.outcome, strict=True))
    assert outcomes == {
        (D1, "missing_cluster_rate"): "passed",
        (D2, "missing_cluster_rate"): "passed",
        (D3, "missing_cluster_rate"): "blocked",
        (D1, "unique_cluster_chunk_ids"): "warned",
        (D2, "unique_cluster_chunk_ids"): "warned",
        (D3, "unique_cluster_chunk_ids"): "warned",
        (D1, "volume"): "not judged",
        (D2, "volume"): "passed",
        (D3, "volume"): "passed",
    }
    expected = pd.DataFrame(
        [
            ["missing_cluster_rate", "blocking", "max 0.04", "1 of 3", "2026-10-03", "0.05"],
            [
                "unique_cluster_chunk_ids", "warning", "max 0", "3 of 3",
                "2026-10-01, 2026-10-02, 2026-10-03", "10 to 12",
            ],
            ["volume", "warning", "min 0.5", "0 of 3", None, None],
        ],
        columns=["check", "severity", "threshold", "days_failed", "failed_on",
                 "observed_when_failed"],
    )  # fmt: skip
    pd.testing.assert_frame_equal(data.quality.drop(columns="guards"), expected)
    assert data.quality["guards"].tolist() == [GUARDS[c] for c in expected["check"]]
    assert data.quality_failures == (
        "missing_cluster_rate failed on 1 of 3 days: 2026-10-03 (observed 0.05, max 0.04; "
        "blocking)",
        "unique_cluster_chunk_ids failed on 3 of 3 days: 2026-10-01, 2026-10-02, 2026-10-03 "
        "(observed 10 to 12, max 0; warning)",
    )


def test_every_check_says_what_it_guards() -> None:
    assert list(GUARDS) == list(CHECKS)
    assert all(len(sentence) > 20 for sentence in GUARDS.values())


def test_the_data_quality_section_shows_the_days_and_says_what_failed(rendered: Path) -> None:
    """On the page: under the range, the failed checks once each with a link to the section;
    the section's figure coloured by outcome (a warning orange, a blocking failure red, not
    judged grey), and beside it what each check guards, in a cell that wraps."""
    import matplotlib.image as mpimg

    page = rendered.read_text(encoding="utf-8")
    top = page.split('<section id="alerts">', 1)[0]
    assert "<code>unique_cluster_chunk_ids failed on 3 of 3 days" in top
    assert '<a href="#data_quality">Data quality</a>' in top
    section = html.unescape(_section(page, "data_quality"))
    assert "The run said: missing_cluster_rate failed on 1 of 3 days: 2026-10-03" in section
    for check in ("missing_cluster_rate", "unique_cluster_chunk_ids", "volume"):
        assert f'<td class="prose">{GUARDS[check]}</td>' in section
    assert "<td>10 to 12</td>" in section and "<td>min 0.5</td>" in section

    image = mpimg.imread(rendered.parent / "data_quality.png")
    rgb = (image[:, :, :3] * 255).round().astype(int).reshape(-1, 3)

    def near(colour: tuple[int, int, int]) -> int:
        return int((np.abs(rgb - np.array(colour)).max(axis=1) <= 3).sum())

    # Three orange cells (tab:orange), one red (tab:red), one grey (#d9d9d9), beside the legend.
    assert near((255, 127, 14)) > 3 * near((214, 39, 40)) > 3 * 500
    assert near((217, 217, 217)) > 500


def test_tables_wrap_headers_at_underscores_and_never_break_a_value(rendered: Path) -> None:
    """A header may wrap after an underscore, a value never (an id such as kb-reset-password
    broke at its hyphens): every cell is nowrap but prose; a crowding table leaves out the
    day, k and segment row its title names."""
    page = rendered.read_text(encoding="utf-8")
    css = page.split("<style>", 1)[1].split("</style>", 1)[0]
    assert re.search(r"th, td \{[^}]*white-space: nowrap", css)
    assert re.search(r"td\.prose \{[^}]*white-space: normal", css)
    crowding = _section(page, "crowding_2026-10-02_all_k3")
    assert '<th class="num">share_<wbr>of_<wbr>redundant_<wbr>slots</th>' in crowding
    headers = re.findall(r"<th(?: [^>]*)?>([^<]*)", crowding)
    assert headers[:2] == ["rank", "cluster_"] and "metric_" not in headers
    assert "<td>c01</td>" in crowding


@pytest.fixture(scope="module")
def hand_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The page of HAND_DAILY over D0..D3 with one alert; no calibration published."""
    fired = [(D2, "all", "all", 5, "mean", "alert", 1234.5678, 2e3)]
    data = build_report_data(
        HAND_DAILY, None, None, None, D0, D3, alerts=_frame_of(list(map(_alert_row, fired)), ALERTS)
    )
    return render(data, tmp_path_factory.mktemp("hand") / "r").read_text()


def test_tables_round_floats_to_3_significant_digits(hand_page: str) -> None:
    """Floats to 3 significant digits; counts, dates and text as they are."""
    mean = _section(hand_page, "mean")
    # D2, k=10: [0, 1, 3, 2] -> 13/6 = 2.1666...; 6 queries.
    assert (
        '<td>2026-10-02</td><td class="num">10</td><td class="num">6</td><td class="num">2.17</td>'
        in mean
    )
    assert "2.1666" not in hand_page and "2.167" not in hand_page
    assert ">0.667<" in _section(hand_page, "share_at_or_below_threshold")  # 4/6, k=10, D2
    listed = _section(hand_page, "alerts")
    assert ">1230<" in listed and ">-765<" in listed and ">600<" in listed and ">4<" in listed
    assert "1234.5" not in hand_page and "765.4" not in hand_page


def test_the_calibration_note_is_said_once(hand_page: str) -> None:
    """No calibration published: one note, not one under every time series."""
    assert hand_page.count("inputs.calibration") == 1
    assert "None published (inputs.calibration)" in _section(hand_page, "calibration")


def test_alerts_are_listed_by_day_segment_k_then_statistic() -> None:
    """The alerts table (the page lists this frame's rows as they are) in the order people
    read it: by day, all traffic first, then by segment value, k and statistic: k=10's rows
    after every row of k=5, never between them (k=10's mean sat between k=5's mean and
    share)."""
    share = "share_at_or_below_threshold"
    fired = [
        (D2, "surface", "app", 10, "mean", "alert", 2.0, 3.0),
        (D2, "surface", "app", 5, share, "alert", 0.9, 0.8),
        (D2, "all", "all", 5, share, "alert", 0.9, 0.8),
        (D2, "surface", "app", 5, "mean", "alert", 1.0, 2.0),
        (D2, "index_version", "v1", 5, "mean", "alert", 1.0, 2.0),
        (D1, "surface", "web", 10, "mean", "improvement", 3.0, 2.0),
        (D2, "all", "all", 5, "mean", "alert", 1.0, 2.0),
        (D2, "surface", "app", 10, share, "ok", 0.5, 0.5),
    ]
    alerts = _frame_of([_alert_row(r) for r in fired], ALERTS)[ALERT_COLUMNS]  # as read
    data = build_report_data(HAND_DAILY, None, None, None, D0, D3, alerts=alerts)
    order = [(D1, "web", 10, "mean"), (D2, "all", 5, "mean"), (D2, "all", 5, share)]
    order += [(D2, "v1", 5, "mean"), (D2, "app", 5, "mean"), (D2, "app", 5, share)]
    order += [(D2, "app", 10, "mean")]
    shown = data.alerts
    assert (
        list(zip(shown.metric_date, shown.segment_value, shown.k, shown.statistic, strict=True))
        == order
    )


def test_text_is_left_aligned_under_its_header_and_numbers_right(rendered: Path) -> None:
    """A column of text (dates, names, booleans) and its header are left-aligned, a column of
    numbers and its header right-aligned (class `num`): the headers of segment and statistic
    stood right-aligned over left-reading text."""
    page = rendered.read_text(encoding="utf-8")
    css = page.split("<style>", 1)[1].split("</style>", 1)[0]
    assert re.search(r"th, td \{[^}]*text-align: left", css)
    assert re.search(r"th\.num, td\.num \{[^}]*text-align: right", css)
    table = _section(page, "alerts")
    headers = [
        (name.replace("_<wbr>", "_"), cls)
        for cls, name in re.findall(r'<th(?: class="(\w+)")?>(.*?)</th>', table)
    ]
    numbers = {"k", "value", "baseline_mean", "limit", "delta", "baseline_days", "queries"}
    assert headers == [(name, "num" if name in numbers else "") for name in ALERT_COLUMNS]
    rows = re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1])
    assert len(rows) == 2
    for row in rows:
        assert re.findall(r'<td(?: class="(\w+)")?>', row) == [cls for _, cls in headers]


def test_overlapping_bands_are_told_apart_by_their_edges() -> None:
    """Where k=5's p10-p90 band (2 to 5) and k=10's (4 to 8) overlap, each is still told apart:
    a light fill (BAND_ALPHA) and a dashed line along each of its edges in its k's colour, the
    two ks' colours distinct; the legend's band entry shows the same dashed edge. (The two
    bands were one muddy colour where they overlapped.)"""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    bands = pd.DataFrame(
        {
            "metric_date": [D0, D1, D2] * 2,
            "k": [5] * 3 + [10] * 3,
            "queries": [10] * 6,
            "p10": [2.0, 2.0, 3.0, 4.0, 4.0, 4.0],
            "median": [3.0, 3.0, 4.0, 6.0, 6.0, 7.0],
            "p90": [5.0, 5.0, 5.0, 8.0, 8.0, 8.0],
        }
    )
    fig, ax = plt.subplots()
    try:
        handles = draw_median_bands(ax, bands)
        medians = {line.get_label(): line for line in ax.get_lines() if line.get_label()[0] != "_"}
        assert sorted(medians) == ["median, k=10", "median, k=5"]
        colours = {k: to_rgba(medians[f"median, k={k}"].get_color()) for k in (5, 10)}
        assert colours[5] != colours[10]
        for k, colour in colours.items():
            mine = bands[bands["k"] == k]
            edges = [
                list(line.get_ydata())
                for line in ax.get_lines()
                if line.get_linestyle() == "--" and to_rgba(line.get_color()) == colour
            ]
            assert sorted(edges) == sorted([list(mine["p10"]), list(mine["p90"])]), k
        fills = ax.collections
        assert len(fills) == 2
        for fill, k in zip(fills, (5, 10), strict=True):
            (face,) = fill.get_facecolor()
            assert tuple(face[:3]) == colours[k][:3] and face[3] == BAND_ALPHA <= 0.1
        patches = [h for h in handles if h.get_label().startswith("p10")]
        assert [to_rgba(p.get_edgecolor()) for p in patches] == [colours[5], colours[10]]
        assert all(p.get_linestyle() == "--" for p in patches)
    finally:
        plt.close(fig)


# --- the images and the page ----------------------------------------------------------------

PNGS = [
    "median_band",
    "share_at_or_below_threshold",
    "mean",
    "histogram_latest",
    "k_sweep",
    "missing_cluster_rate",
    "redundancy_cost",
    "segments",
    "crowding_2026-10-02_all_k3",  # the alert day
    "crowding_2026-10-03_all_k3",  # the last day
    "data_quality",
]


@pytest.mark.parametrize("name", PNGS)
def test_every_png_renders_and_is_not_blank(rendered: Path, name: str) -> None:
    import matplotlib.image as mpimg

    image = mpimg.imread(rendered.parent / f"{name}.png")
    height, width = image.shape[:2]
    assert (width, height) == (FIGURE_SIZE[0] * FIGURE_DPI, FIGURE_SIZE[1] * FIGURE_DPI)
    rgb = (image[:, :, :3] * 255).round().astype(np.uint8).reshape(-1, 3)
    not_white = (rgb < 250).any(axis=1).mean()
    assert not_white > 0.02, f"{name}: only {not_white:.1%} of the pixels are drawn"
    colours = np.unique(rgb, axis=0)
    assert len(colours) > 10, f"{name}: {len(colours)} colours"
    # Something besides black, grey and white: the data are drawn in colour.
    saturated = (rgb.max(axis=1).astype(int) - rgb.min(axis=1).astype(int) > 60).mean()
    assert saturated > 0.002, f"{name}: no coloured data drawn"


def test_html_is_self_contained_and_shows_the_numbers(rendered: Path) -> None:
    page = rendered.read_text(encoding="utf-8")
    assert rendered.name == "index.html"
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == len(PNGS)
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    assert "http://" not in page and "https://" not in page
    assert "<link" not in page and "<script" not in page
    # The embedded images are the PNG files.
    embedded = {base64.b64decode(s.split(",", 1)[1]) for s in sources}
    assert embedded == {(rendered.parent / f"{n}.png").read_bytes() for n in PNGS}
    # The numbers beside the plots: the range, the k-sweep, the latest histogram, segments,
    # evaluation's averaged rows (never its per-query row).
    assert "2026-10-01 to 2026-10-03" in page
    sweep = _section(page, "k_sweep")
    for number in ("1.7", "2.15", "0.85", "0.717", "0.45", "34", "43"):
        assert f">{number}<" in sweep, number
    assert ">0.9<" in _section(page, "median_band")
    segments = _section(page, "segments")
    assert ">2.33<" in segments and ">2.25<" in segments and ">web<" in segments
    assert ">0.613<" in page and ">0.432<" in page and "0.988" not in page
    assert ">0.025<" in _section(page, "missing_cluster_rate")


def test_what_crowds_the_window_has_a_chart_and_table_per_day(rendered: Path) -> None:
    page = rendered.read_text(encoding="utf-8")
    alert_day = html.unescape(_section(page, "crowding_2026-10-02_all_k3"))
    assert (
        "An alert at k=3: ALERT 2026-10-02 all traffic k=3 "
        "share_at_or_below_threshold: 0.6667 vs baseline 0.3000 ± 0.0500"
    ) in alert_day
    # Its baseline days (the same weekday, 1 to 4 weeks back) have no published rows here.
    assert "None of its baseline days is in the published tables" in alert_day
    assert ">c10<" in alert_day and ">c11<" not in alert_day
    last_day = html.unescape(_section(page, "crowding_2026-10-03_all_k3"))
    assert "without an alert: at k=3, the report's default k" in last_day
    assert ">chunk-x<" in last_day
    assert 'id="crowding_2026-10-01' not in page
    for day in ("2026-10-02", "2026-10-03"):
        assert (rendered.parent / f"crowding_{day}_all_k3.png").stat().st_size > 0


def test_alerts_are_listed_and_marked(rendered: Path) -> None:
    import matplotlib.image as mpimg

    page = rendered.read_text(encoding="utf-8")
    alerts = _section(page, "alerts")
    assert "<b>1 alert(s)</b> and 1 improvement(s)" in alerts
    assert ">2026-10-02<" in alerts and ">2026-10-03<" in alerts and ">web<" in alerts
    assert ">0.667<" in alerts and ">improvement<" in alerts
    assert "2026-09-30" not in alerts and ">ok<" not in alerts
    assert "Marked: an alert (red X)" in _section(page, "share_at_or_below_threshold")

    def pixels_near(name: str, colour: tuple[int, int, int]) -> int:
        image = mpimg.imread(rendered.parent / f"{name}.png")
        rgb = (image[:, :, :3] * 255).round().astype(int).reshape(-1, 3)
        return int((np.abs(rgb - np.array(colour)).max(axis=1) <= 3).sum())

    # The share's alert of all traffic: a red X (tab:red); the mean's improvement in a segment
    # only: a green band over its day (tab:green at alpha 0.15 over white).
    assert pixels_near("share_at_or_below_threshold", (214, 39, 40)) > 50
    assert pixels_near("mean", (223, 241, 223)) > 1000
    assert pixels_near("median_band", (214, 39, 40)) == 0


def _section(page: str, name: str) -> str:
    match = re.search(rf'<section id="{name}">(.*?)</section>', page, re.S)
    assert match, name
    return match.group(1)


def test_figure_without_data_is_left_out_with_a_note(tmp_path: Path) -> None:
    daily = pd.DataFrame(
        [
            {
                "metric_date": D1, "k": 2, "segment": "all", "segment_value": "all",
                "queries": 3, "histogram": [0, 1, 2], "median": 2.0, "p10": 1.2, "p90": 2.0,
                "threshold": 1, "share_at_or_below_threshold": 1 / 3, "mean": 5 / 3,
                "results": 6,
                "missing_cluster_results": 0, "missing_cluster_rate": 0.0,
            }
        ]
    )  # fmt: skip
    index = render(build_report_data(daily, None, None, None, D1, D1), tmp_path / "r")
    page = index.read_text()
    assert "No rows in unique_clusters_k_sweep" in page
    assert "No rows in redundancy_cost_daily" in page
    assert not (tmp_path / "r" / "k_sweep.png").exists()
    assert (tmp_path / "r" / "median_band.png").exists()
    assert page.count("data:image/png;base64,") == 5
    assert "Evaluation" not in page
    assert "No unique_clusters_alerts table: nothing judged." in _section(page, "alerts")


# --- the command line -----------------------------------------------------------------------


@pytest.mark.slow
def test_cli_report_end_to_end(
    warehouse: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    config = _config_file(tmp_path, warehouse)
    argv = ["report", "--config", str(config), "--start", "2026-10-02", "--end", "2026-10-03"]
    assert cli.main([*argv, "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {out / 'index.html'}"
    page = (out / "index.html").read_text()
    assert "2026-10-02 to 2026-10-03" in page
    # k-sweep over D2..D3: totals 6+10 = 16 queries, 27 / 16 = 1.6875 at k=2.
    assert ">1.69<" in _section(page, "k_sweep")
    assert all((out / f"{name}.png").is_file() for name in PNGS)


def test_cli_report_missing_table_is_one_line(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config_file(tmp_path, tmp_path / "empty-warehouse")
    code = cli.main(["report", "--config", str(config), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert len(err.splitlines()) == 1
    assert err.startswith("logmetrics: error: no unique_clusters_daily table")


def test_cli_report_range_without_rows_is_one_line(
    warehouse: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config_file(tmp_path, warehouse)
    argv = ["report", "--config", str(config), "--start", "2027-01-01", "--end", "2027-01-31"]
    assert cli.main([*argv, "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "logmetrics: error: nothing is published for 2027-01-01..2027-01-31: "
        "unique_clusters_daily has no rows of those days"
    )
    assert not (tmp_path / "out").exists()


def test_cli_report_start_after_end_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config_file(tmp_path, tmp_path / "w")
    argv = ["report", "--config", str(config), "--start", "2026-10-03", "--end", "2026-10-01"]
    assert cli.main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "after --end" in capsys.readouterr().err
