"""The alert rule on small hand-built daily frames, every answer worked out by hand.

k = 2 and threshold = 1 throughout, and no query has 0 clusters, so a day of n queries with a
share p at or below the threshold has the histogram [0, p n, (1 - p) n], its mean is 2 - p,
and both statistics' sampling variances are p (1 - p) / n.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference
from logmetrics.config import AlertsConfig
from logmetrics.rules.alerts import (
    ALERT_COLUMNS,
    alert_rows,
    baseline_dates,
    culprits,
    describe,
    describe_culprit,
)

DAY = dt.date(2026, 10, 29)  # a Thursday
WEEK = dt.timedelta(weeks=1)
SHARE, MEAN = "share_at_or_below_threshold", "mean"


def row(
    day: dt.date,
    share: float,
    n: int = 1000,
    segment: str = "all",
    value: str = "all",
    k: int = 2,
    dq_passed: bool = True,
    version: int | None = 1,
) -> dict[str, Any]:
    low = round(share * n)
    return {
        "metric_date": day,
        "k": k,
        "segment": segment,
        "segment_value": value,
        "queries": n,
        "histogram": [0, low, n - low] + [0] * (k - 2),
        "mean": (low + 2 * (n - low)) / n if n else None,
        "threshold": 1,
        "share_at_or_below_threshold": low / n if n else None,
        "dq_passed": dq_passed,
        "cluster_table_version": version,
        "run_id": "r",  # columns the rule does not read are allowed
    }


def frame(*rows: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def weekly(shares: list[float], **kwargs: Any) -> list[dict[str, Any]]:
    """Rows on the same weekday 1, 2, 3... weeks before DAY, with these shares."""
    return [row(DAY - (i + 1) * WEEK, s, **kwargs) for i, s in enumerate(shares)]


def judged(daily: pd.DataFrame, settings: AlertsConfig | None = None, **filters: Any) -> Any:
    """The single row of the result matching `filters` (statistic, segment_value, ...)."""
    out = alert_rows(daily, [DAY], settings or AlertsConfig())
    for column, wanted in filters.items():
        out = out[out[column] == wanted]
    assert len(out) == 1, out
    return out.iloc[0]


def test_alert_and_the_min_effect_and_limit_conjunction() -> None:
    """Baseline shares 0.20, 0.22, 0.24: mean 0.22, sample sd 0.02. Today 0.40 of 1000:
    limit = 3 sqrt(0.02^2 + 0.4 x 0.6 / 1000) = 3 sqrt(0.00064) = 0.0758947.
    The share rises by 0.18 (>= 0.02 and > the limit): alert. The mean (2 - share) falls by
    0.18, beyond the same limit but under its min_effect of 0.2: ok."""
    daily = frame(row(DAY, 0.40), *weekly([0.20, 0.22, 0.24]))
    share = judged(daily, statistic=SHARE)
    assert share.status == "alert"
    assert share.value == pytest.approx(0.40, abs=1e-15)
    assert share.baseline_mean == pytest.approx(0.22, abs=1e-15)
    assert share.baseline_sd == pytest.approx(0.02, abs=1e-15)
    assert share.baseline_days == 3
    assert share.delta == pytest.approx(0.18, abs=1e-15)
    assert share.limit == pytest.approx(3 * math.sqrt(0.00064), abs=1e-15)
    assert share.limit == pytest.approx(0.0758947, abs=1e-7)
    assert share.min_effect == 0.02
    assert share.queries == 1000
    mean = judged(daily, statistic=MEAN)
    assert mean.delta == pytest.approx(-0.18, abs=1e-15)
    assert abs(mean.delta) > mean.limit and abs(mean.delta) < mean.min_effect == 0.2
    assert mean.status == "ok"
    # With a smaller floor the same fall of the mean is an alert.
    settings = AlertsConfig(min_effect={"mean": 0.1})
    assert judged(daily, settings, statistic=MEAN).status == "alert"


def test_improvement_is_a_firing_change_the_other_way() -> None:
    daily = frame(row(DAY, 0.10), *weekly([0.20, 0.22, 0.24]))
    assert judged(daily, statistic=SHARE).status == "improvement"  # the share falls by 0.12
    settings = AlertsConfig(min_effect={"mean": 0.1})
    assert judged(daily, settings, statistic=MEAN).status == "improvement"  # the mean rises


def test_a_large_effect_within_the_between_day_spread_is_ok() -> None:
    """Baseline 0.10, 0.20, 0.30 (sd 0.1): a rise of 0.06 passes the min effect but not the
    limit (over 0.3); a noisy baseline calls for a large change."""
    daily = frame(row(DAY, 0.26), *weekly([0.10, 0.20, 0.30]))
    share = judged(daily, statistic=SHARE)
    assert share.delta == pytest.approx(0.06)
    assert share.delta >= share.min_effect and share.limit > 0.3
    assert share.status == "ok"


def test_too_few_queries_comes_first() -> None:
    daily = frame(row(DAY, 0.90, n=499), *weekly([0.20, 0.22, 0.24]))
    share = judged(daily, statistic=SHARE)
    assert share.status == "too_few_queries"
    assert share.queries == 499
    assert share.baseline_days == 3  # the numbers are still there to read
    assert share.value == pytest.approx(449 / 499)
    enough = frame(row(DAY, 0.40, n=500), *weekly([0.2] * 3))
    assert judged(enough, statistic=SHARE).status == "alert"


def test_insufficient_baseline_with_fewer_than_min_baseline_days() -> None:
    daily = frame(row(DAY, 0.90), *weekly([0.20, 0.22]))
    share = judged(daily, statistic=SHARE)
    assert share.status == "insufficient_baseline"
    assert share.baseline_days == 2
    assert share.baseline_mean == pytest.approx(0.21)
    assert share.baseline_sd == pytest.approx(math.sqrt(0.0002))  # |0.20 - 0.22| / sqrt(2)
    settings = AlertsConfig(min_baseline_days=2)
    assert judged(daily, settings, statistic=SHARE).status == "alert"
    alone = judged(frame(row(DAY, 0.9)), statistic=SHARE)
    assert alone.status == "insufficient_baseline" and alone.baseline_days == 0
    assert pd.isna(alone.baseline_mean) and pd.isna(alone.baseline_sd) and pd.isna(alone.limit)


def test_sample_standard_deviation_is_n_minus_one() -> None:
    """0.20, 0.22, 0.24, 0.26: sum of squared deviations 0.002; / 3 (not / 4)."""
    daily = frame(row(DAY, 0.23), *weekly([0.20, 0.22, 0.24, 0.26]))
    share = judged(daily, statistic=SHARE)
    assert share.baseline_days == 4
    assert share.baseline_mean == pytest.approx(0.23)
    assert share.baseline_sd == pytest.approx(math.sqrt(0.002 / 3))
    assert share.status == "ok"


def test_same_weekday_and_trailing_baselines() -> None:
    """Same weekday: 0.20, 0.22, 0.24 four weeks back; every other day at 0.39..0.41."""
    others = [DAY - dt.timedelta(days=d) for d in range(1, 29) if d % 7]
    trailing = {1: 0.39, 2: 0.40, 3: 0.41}
    rows = [row(d, trailing.get((DAY - d).days, 0.50)) for d in others]
    daily = frame(row(DAY, 0.40), *weekly([0.20, 0.22, 0.24, 0.22]), *rows)
    weekday = judged(daily, statistic=SHARE)
    assert weekday.status == "alert" and weekday.baseline_days == 4
    settings = AlertsConfig(baseline="trailing", baseline_days=3)
    last_days = judged(daily, settings, statistic=SHARE)
    assert last_days.baseline_days == 3
    assert last_days.baseline_mean == pytest.approx(0.40)
    assert last_days.baseline_sd == pytest.approx(0.01)
    assert last_days.status == "ok"
    # The default trailing window, 28 days: all four weeks, weekdays and the same weekday.
    assert judged(daily, AlertsConfig(baseline="trailing"), statistic=SHARE).baseline_days == 28
    # Only the weeks asked for: 2 weeks back is 2 baseline days.
    two = AlertsConfig(baseline_weeks=2, min_baseline_days=2)
    assert judged(daily, two, statistic=SHARE).baseline_days == 2


def test_baseline_dates() -> None:
    two_weeks = AlertsConfig(baseline_weeks=2, min_baseline_days=2)
    assert baseline_dates(DAY, two_weeks) == [DAY - WEEK, DAY - 2 * WEEK]
    trailing = AlertsConfig(baseline="trailing", baseline_days=2, min_baseline_days=2)
    assert baseline_dates(DAY, trailing) == [DAY - dt.timedelta(days=1), DAY - dt.timedelta(2)]
    # Five weeks back is out of the default same_weekday window (4 weeks).
    daily = frame(row(DAY, 0.4), *weekly([0.2, 0.2, 0.2, 0.2, 0.9]))
    assert judged(daily, statistic=SHARE).baseline_days == 4


def test_failed_quality_and_low_volume_days_stay_out_of_baselines() -> None:
    clean = weekly([0.20, 0.22, 0.24])
    dirty = row(DAY - 4 * WEEK, 0.95, dq_passed=False)  # would wreck the mean and sd
    small = row(DAY - 4 * WEEK, 0.95, n=499, segment="surface", value="web")
    daily = frame(row(DAY, 0.40), *clean, dirty)
    share = judged(daily, statistic=SHARE)
    assert share.baseline_days == 3 and share.baseline_mean == pytest.approx(0.22)
    web = [row(DAY, 0.40, segment="surface", value="web")]
    web += weekly([0.20, 0.22, 0.24], segment="surface", value="web") + [small]
    share = judged(frame(*web), statistic=SHARE)
    assert share.baseline_days == 3 and share.baseline_mean == pytest.approx(0.22)
    assert share.status == "alert"
    # The judged day itself is judged whatever its dq_passed (the day is published data).
    flagged = frame(row(DAY, 0.40, dq_passed=False), *clean)
    assert judged(flagged, statistic=SHARE).status == "alert"


def test_cluster_table_changed() -> None:
    same = frame(row(DAY, 0.40, version=7), *weekly([0.2, 0.22, 0.24], version=7))
    assert not judged(same, statistic=SHARE).cluster_table_changed
    assert judged(same, statistic=SHARE).cluster_table_version == 7
    one_older = weekly([0.2, 0.22], version=7) + [row(DAY - 3 * WEEK, 0.24, version=6)]
    changed = frame(row(DAY, 0.40, version=7), *one_older)
    assert judged(changed, statistic=SHARE).cluster_table_changed
    # A Parquet cluster table has no version: null against null is no change, 7 is one.
    parquet = frame(row(DAY, 0.40, version=None), *weekly([0.2, 0.22, 0.24], version=None))
    assert not judged(parquet, statistic=SHARE).cluster_table_changed
    assert pd.isna(judged(parquet, statistic=SHARE).cluster_table_version)
    mixed = frame(row(DAY, 0.40, version=None), *weekly([0.2, 0.22, 0.24], version=7))
    assert judged(mixed, statistic=SHARE).cluster_table_changed
    # Only qualifying baseline days count: a held-out day of another version changes nothing.
    held = weekly([0.2, 0.22, 0.24], version=7) + [row(DAY - 4 * WEEK, 0.2, version=3, n=10)]
    assert not judged(frame(row(DAY, 0.4, version=7), *held), statistic=SHARE).cluster_table_changed


def test_mean_sampling_variance_is_the_histograms_population_variance_over_n() -> None:
    """A day with histogram [100, 0, 0, 900] at k = 3: mean 2.7, population variance
    0.1 x 2.7^2 + 0.9 x 0.3^2 = 0.81; n = 1000. Baseline means 2.0, 2.1, 2.2 (sd 0.1):
    limit = 3 sqrt(0.01 + 0.00081)."""
    today = row(DAY, 0.0, k=3) | {"histogram": [100, 0, 0, 900], "mean": 2.7, "threshold": 1}
    today["share_at_or_below_threshold"] = 0.1
    past = [
        row(DAY - (i + 1) * WEEK, 0.0, k=3) | {"mean": m} for i, m in enumerate((2.0, 2.1, 2.2))
    ]
    mean = judged(frame(today, *past), statistic=MEAN)
    assert mean.baseline_mean == pytest.approx(2.1)
    assert mean.baseline_sd == pytest.approx(0.1)
    assert mean.limit == pytest.approx(3 * math.sqrt(0.01 + 0.00081), abs=1e-12)
    assert mean.status == "improvement"  # +0.6 clusters


def test_rows_per_k_segment_and_statistic_and_only_for_days_with_rows() -> None:
    daily = frame(
        row(DAY, 0.4),
        row(DAY, 0.4, k=3),
        row(DAY, 0.4, segment="surface", value="app"),
        row(DAY - WEEK, 0.2),
        row(DAY + dt.timedelta(days=1), 0.2),  # not asked for
    )
    out = alert_rows(daily, [DAY, DAY - dt.timedelta(days=1)], AlertsConfig())
    assert list(out.columns) == ALERT_COLUMNS
    assert list(zip(out.k, out.segment, out.segment_value, out.statistic, strict=True)) == [
        (2, "all", "all", MEAN),
        (2, "all", "all", SHARE),
        (2, "surface", "app", MEAN),
        (2, "surface", "app", SHARE),
        (3, "all", "all", MEAN),
        (3, "all", "all", SHARE),
    ]
    assert set(out.metric_date) == {DAY}
    only = alert_rows(daily, [DAY], AlertsConfig(statistics=["mean"]), ks=[3])
    assert list(zip(only.k, only.statistic, strict=True)) == [(3, MEAN)]


def test_empty_inputs_and_a_day_without_queries() -> None:
    empty = alert_rows(frame(row(DAY, 0.4)).iloc[:0], [DAY], AlertsConfig())
    assert empty.empty and list(empty.columns) == ALERT_COLUMNS
    assert alert_rows(frame(row(DAY, 0.4)), [], AlertsConfig()).empty
    quiet = frame(row(DAY, 0.0, n=0), *weekly([0.2, 0.22, 0.24]))
    share = judged(quiet, statistic=SHARE)
    assert share.status == "too_few_queries" and share.queries == 0
    assert pd.isna(share.value) and pd.isna(share.delta) and pd.isna(share.limit)
    assert share.baseline_mean == pytest.approx(0.22)


def test_a_changed_threshold_keeps_old_days_out_of_the_share_baseline() -> None:
    """A share taken at another threshold is another statistic; the mean is unaffected."""
    old = [r | {"threshold": 2} for r in weekly([0.2, 0.22, 0.24])]
    daily = frame(row(DAY, 0.40), *old)
    assert judged(daily, statistic=SHARE).baseline_days == 0
    assert judged(daily, statistic=MEAN).baseline_days == 3


def test_describe_is_one_line_with_the_numbers() -> None:
    daily = frame(
        row(DAY, 0.40, segment="surface", value="app"),
        *weekly([0.20, 0.22, 0.24], segment="surface", value="app"),
    )
    line = describe(judged(daily, statistic=SHARE))
    assert line == (
        "ALERT 2026-10-29 surface=app k=2 share_at_or_below_threshold: 0.4000 vs baseline "
        "0.2200 ± 0.0759 (delta +0.1800, 3 baseline days)"
    )
    everything = frame(row(DAY, 0.10, version=2), *weekly([0.20, 0.22, 0.24]))
    line = describe(judged(everything, statistic=SHARE))
    assert line.startswith("IMPROVEMENT 2026-10-29 all traffic k=2 share_at_or_below_threshold")
    assert line.endswith("; cluster table changed since the baseline")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"min_baseline_days": 5}, "more than the same_weekday baseline can hold"),
        ({"baseline": "trailing", "baseline_days": 2}, "more than the trailing baseline"),
        ({"min_baseline_days": 1}, "greater than or equal to 2"),
        ({"statistics": []}, "at least one statistic"),
        ({"statistics": ["mean", "mean"]}, "must not repeat"),
        ({"statistics": ["median"]}, "Input should be"),
        ({"sigmas": 0}, "greater than 0"),
        ({"min_queries": 0}, "greater than or equal to 1"),
        ({"baseline": "weekly"}, "Input should be"),
    ],
)
def test_settings_are_validated(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AlertsConfig(**overrides)


# --- the rule against the independent reference (tests/reference.py), on random histories ---

_day_rows = st.lists(
    st.tuples(
        st.integers(0, 20),  # days before DAY (0 = DAY itself)
        st.sampled_from(["all", "web"]),  # segment value
        st.lists(st.integers(0, 400), min_size=4, max_size=4),  # histogram at k = 3
        st.booleans(),  # dq_passed
        st.sampled_from([None, 1, 2]),  # cluster table version
    ),
    max_size=30,
    unique_by=lambda r: (r[0], r[1]),
)


@settings(max_examples=150, deadline=None)
@given(
    rows=_day_rows,
    baseline=st.sampled_from(["same_weekday", "trailing"]),
    min_queries=st.integers(1, 900),
    sigmas=st.floats(0.5, 4),
)
def test_the_rule_agrees_with_the_reference(
    rows: list[tuple[Any, ...]], baseline: str, min_queries: int, sigmas: float
) -> None:
    daily = []
    for before, value, histogram, dq_passed, version in rows:
        n = sum(histogram)
        daily.append(
            {
                "metric_date": DAY - dt.timedelta(days=before),
                "k": 3,
                "segment": "all" if value == "all" else "surface",
                "segment_value": value,
                "queries": n,
                "histogram": histogram,
                "mean": sum(i * c for i, c in enumerate(histogram)) / n if n else None,
                "threshold": 1,
                "share_at_or_below_threshold": sum(histogram[:2]) / n if n else None,
                "dq_passed": dq_passed,
                "cluster_table_version": version,
            }
        )
    rule = {"baseline": baseline, "baseline_weeks": 2, "baseline_days": 6, "min_baseline_days": 2}
    rule |= {"min_queries": min_queries, "sigmas": sigmas}
    days = [DAY - dt.timedelta(days=d) for d in range(21)]
    expected = reference.alerts(daily, days, **rule)
    got = alert_rows(pd.DataFrame(daily, columns=list(row(DAY, 0.5))), days, AlertsConfig(**rule))
    assert len(got) == len(expected)
    for actual, want in zip(got.to_dict("records"), expected, strict=True):
        for name, value in want.items():
            if isinstance(value, float):
                assert actual[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name
            elif value is None:
                assert pd.isna(actual[name]), name
            else:
                assert actual[name] == value, (name, actual, want)


def crowd(day: dt.date, *keys: tuple[str | None, str | None, int], k: int = 2) -> list[dict]:
    """Crowding rows of one day, ranked in the order given: (cluster_id, chunk_id, slots)."""
    return [
        {
            "metric_date": day,
            "k": k,
            "segment": "all",
            "segment_value": "all",
            "rank": rank,
            "cluster_id": cluster_id,
            "chunk_id": chunk_id,
            "redundant_slots": slots,
        }
        for rank, (cluster_id, chunk_id, slots) in enumerate(keys, start=1)
    ]


def test_culprits_are_the_days_top_keys_against_the_alerts_baseline_days() -> None:
    """The share alert of DAY (baseline: the three weeks before; the fourth week before is a
    failed-quality day, out of the baseline). Six keys listed on DAY: the top five are named.
    A's baseline mean is (10 + 20 + 0) / 3, B's 3 / 3; C, D and the chunk x are listed on no
    baseline day (C is listed on the day left out): new."""
    daily = frame(
        row(DAY, 0.40), *weekly([0.20, 0.22, 0.24]), row(DAY - 4 * WEEK, 0.2, dq_passed=False)
    )
    alerts = alert_rows(daily, [DAY], AlertsConfig())
    assert list(alerts[alerts.status == "alert"].statistic) == [SHARE]
    listed = pd.DataFrame(
        crowd(DAY, ("A", None, 90), ("C", None, 50), (None, "x", 40), ("B", None, 7))
        + crowd(DAY, ("D", None, 5), ("E", None, 1))
        + crowd(DAY - WEEK, ("A", None, 10), ("B", None, 3))
        + crowd(DAY - 2 * WEEK, ("A", None, 20))
        + crowd(DAY - 4 * WEEK, ("C", None, 99))
        + crowd(DAY, ("A", None, 1), k=3)  # another k: not this alert's
    )
    listed["rank"] = listed.groupby(["metric_date", "k"]).cumcount() + 1
    got = culprits(alerts, daily, listed, AlertsConfig())
    assert list(zip(got.cluster_id, got.chunk_id, got.redundant_slots, strict=True)) == [
        ("A", None, 90),
        ("C", None, 50),
        (None, "x", 40),
        ("B", None, 7),
        ("D", None, 5),
    ]
    assert list(got["rank"]) == [1, 2, 3, 4, 5]
    assert got.baseline_redundant_slots.tolist() == pytest.approx([10.0, 0.0, 0.0, 1.0, 0.0])
    assert got.is_new.tolist() == [False, True, True, False, True]
    assert set(got.statistic) == {SHARE} and set(got.metric_date) == {DAY}
    lines = [describe_culprit(r) for r in got.itertuples()]
    assert lines[0] == "  #1 cluster A: 90 redundant slots (baseline mean 10.0)"
    assert lines[2] == (
        "  #3 chunk x: 40 redundant slots (baseline mean 0.0), NEW among the baseline's top keys"
    )
    # What a culprit's slots cost: priced where the crowding rows carry it (not in rows written
    # before it was counted, as above).
    priced = listed.assign(redundant_tokens=listed.redundant_slots * 510)
    priced["redundant_usd"] = priced.redundant_tokens * 3.0 / 1_000_000
    priced.loc[0, ["redundant_slots", "redundant_tokens", "redundant_usd"]] = [
        819,
        417_690,
        1.25307,
    ]
    lines = [
        describe_culprit(r) for r in culprits(alerts, daily, priced, AlertsConfig()).itertuples()
    ]
    assert lines[0] == (
        "  #1 cluster A: 819 redundant slots, 0.42M tokens, 1.25 USD (baseline mean 10.0)"
    )
    assert lines[1] == (
        "  #2 cluster C: 50 redundant slots, 25.5k tokens, 0.08 USD (baseline mean 0.0), NEW "
        "among the baseline's top keys"
    )
    # No alert, or no crowding rows: no culprits.
    assert culprits(alerts.assign(status="ok"), daily, listed, AlertsConfig()).empty
    assert culprits(alerts, daily, listed.iloc[0:0], AlertsConfig()).empty
