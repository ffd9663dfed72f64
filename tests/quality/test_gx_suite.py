"""The great-expectations gates on hand-made per-day facts (no Spark)."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import pandas as pd
import pytest

from logmetrics.config import QualityConfig, QualitySeverity
from logmetrics.quality import gx_suite
from logmetrics.quality.gx_suite import CHECKS, CheckResult, evaluate

DAY = dt.date(2024, 3, 1)
COUNT_CHECKS = [
    ("positive_ranks", "non_positive_ranks"),
    ("unique_request_ids", "duplicate_request_ids"),
    ("unique_cluster_chunk_ids", "cluster_duplicate_chunk_ids"),
    ("non_empty_cluster_ids", "cluster_empty_ids"),
    ("consistent_duplicates", "conflicting_requests"),
    ("readable_inputs", "corrupt_inputs"),
]


def _day(day: dt.date = DAY, **overrides: Any) -> dict[str, Any]:
    """One clean day: every check passes with the default config."""
    row: dict[str, Any] = {
        "metric_date": day,
        "rows_read": 10_000,
        "malformed_rows": 0,
        "valid_entries": 100,
        "missing_entries": 0,
        "non_positive_ranks": 0,
        "duplicate_request_ids": 0,
        "cluster_duplicate_chunk_ids": 0,
        "cluster_empty_ids": 0,
        "queries": 1_000,
        "trailing_queries_mean": 1_000.0,
        "conflicting_requests": 0,
        "corrupt_inputs": 0,
    }
    row.update(overrides)
    return row


def _facts(*rows: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(gx_suite.FACT_COLUMNS))


def _result(results: list[CheckResult], check: str, day: dt.date = DAY) -> CheckResult:
    (found,) = [r for r in results if r.check == check and r.metric_date == day]
    return found


def test_a_clean_day_passes_every_check() -> None:
    results = evaluate(_facts(_day()), QualityConfig())
    assert [r.check for r in results] == list(CHECKS)
    assert all(r.success for r in results)
    observed = {r.check: r.observed_value for r in results}
    assert observed == {
        "missing_cluster_rate": 0.0,
        "malformed_rate": 0.0,
        "positive_ranks": 0.0,
        "unique_request_ids": 0.0,
        "unique_cluster_chunk_ids": 0.0,
        "non_empty_cluster_ids": 0.0,
        "volume": 1.0,
        "consistent_duplicates": 0.0,
        "readable_inputs": 0.0,
        "non_empty_day": 1000.0,
    }


def test_missing_cluster_rate_fails_above_and_passes_at_the_threshold() -> None:
    over, at = DAY, DAY + dt.timedelta(days=1)
    facts = _facts(_day(over, missing_entries=12), _day(at, missing_entries=5))
    results = evaluate(facts, QualityConfig(max_missing_cluster_rate=0.05))

    failed = _result(results, "missing_cluster_rate", over)
    assert not failed.success
    assert failed.observed_value == 12 / 100 == 0.12
    assert failed.threshold == 0.05
    passed = _result(results, "missing_cluster_rate", at)
    assert passed.success
    assert passed.observed_value == 0.05


def test_malformed_rate_fails_above_and_passes_at_the_threshold() -> None:
    over, at = DAY, DAY + dt.timedelta(days=1)
    facts = _facts(
        _day(over, rows_read=1_000, malformed_rows=3), _day(at, rows_read=1_000, malformed_rows=1)
    )
    results = evaluate(facts, QualityConfig(max_malformed_rate=0.001))

    failed = _result(results, "malformed_rate", over)
    assert (failed.success, failed.observed_value, failed.threshold) == (False, 3 / 1000, 0.001)
    passed = _result(results, "malformed_rate", at)
    assert (passed.success, passed.observed_value) == (True, 0.001)


def test_rates_with_a_zero_denominator_are_not_judged() -> None:
    """A rate of nothing is not judged: null success and why, not a pass (the bug: None
    passing as a success, which counts the day as checked)."""
    facts = _facts(_day(valid_entries=0, missing_entries=7, rows_read=0, malformed_rows=0))
    results = evaluate(facts, QualityConfig(max_missing_cluster_rate=0.0, max_malformed_rate=0.0))
    for check, why in (
        ("missing_cluster_rate", "no valid entry to take a share of"),
        ("malformed_rate", "no row read to take a share of"),
    ):
        result = _result(results, check)
        assert (result.success, result.observed_value) == (None, None)
        assert json.loads(result.details)["not_judged"] == why


@pytest.mark.parametrize(("check", "column"), COUNT_CHECKS)
def test_count_checks_pass_at_zero_and_fail_above(check: str, column: str) -> None:
    bad = DAY + dt.timedelta(days=1)
    results = evaluate(_facts(_day(DAY), _day(bad, **{column: 3})), QualityConfig())

    good_result = _result(results, check, DAY)
    assert (good_result.success, good_result.observed_value, good_result.threshold) == (
        True,
        0.0,
        0.0,
    )
    bad_result = _result(results, check, bad)
    assert (bad_result.success, bad_result.observed_value) == (False, 3.0)
    # Only this check fails on that day.
    assert [r.check for r in results if not r.success] == [check]


def test_volume_with_history() -> None:
    low, at, high = DAY, DAY + dt.timedelta(days=1), DAY + dt.timedelta(days=2)
    facts = _facts(
        _day(low, queries=40, trailing_queries_mean=100.0),
        _day(at, queries=50, trailing_queries_mean=100.0),
        _day(high, queries=7, trailing_queries_mean=3.0),
    )
    results = evaluate(facts, QualityConfig(min_volume_ratio=0.5))

    below = _result(results, "volume", low)
    assert (below.success, below.observed_value) == (False, 0.4)
    assert _result(results, "volume", at).success
    assert _result(results, "volume", at).observed_value == 0.5
    assert _result(results, "volume", high).observed_value == 7 / 3.0
    assert _result(results, "volume", high).threshold == 0.5


@pytest.mark.parametrize("mean", [None, math.nan, 0.0])
def test_volume_without_history_is_not_judged(mean: float | None) -> None:
    """No trailing day to compare with: the volume is not judged (null success, null observed
    value, the reason in the details), never a pass with NaN."""
    other = DAY + dt.timedelta(days=1)
    facts = _facts(_day(DAY, queries=0, trailing_queries_mean=mean), _day(other, queries=0))
    results = evaluate(facts, QualityConfig(min_volume_ratio=0.5))

    volume = _result(results, "volume", DAY)
    assert (volume.success, volume.observed_value) == (None, None)
    assert json.loads(volume.details)["not_judged"] == (
        "no day with queries in the trailing window to compare with"
    )
    # A day with history and no queries at all is a volume drop.
    assert _result(results, "volume", other).observed_value == 0.0
    assert not _result(results, "volume", other).success


def test_a_day_without_a_query_fails_non_empty_day_unless_empty_days_are_allowed() -> None:
    """No valid row: the blocking `non_empty_day` fails (the bug it catches: a zero day
    published as real), and passes where the source has real quiet days."""
    empty = DAY + dt.timedelta(days=1)
    facts = _facts(_day(DAY), _day(empty, queries=0, rows_read=3, malformed_rows=3))
    strict = evaluate(facts, QualityConfig())
    assert (
        _result(strict, "non_empty_day", DAY).success,
        _result(strict, "non_empty_day").threshold,
    ) == (
        True,
        1.0,
    )
    failed = _result(strict, "non_empty_day", empty)
    assert (failed.success, failed.observed_value, failed.severity) == (False, 0.0, "blocking")
    allowed = _result(
        evaluate(facts, QualityConfig(), allow_empty_days=True), "non_empty_day", empty
    )
    assert (allowed.success, allowed.observed_value, allowed.threshold) == (True, 0.0, 0.0)


def test_severity_comes_from_the_config() -> None:
    facts = _facts(_day(non_positive_ranks=1, missing_entries=50))
    default = {r.check: r.severity for r in evaluate(facts, QualityConfig())}
    assert default == QualitySeverity().model_dump()

    swapped = QualityConfig(
        severity=QualitySeverity(positive_ranks="blocking", missing_cluster_rate="warning")
    )
    results = evaluate(facts, swapped)
    assert _result(results, "positive_ranks").severity == "blocking"
    assert _result(results, "missing_cluster_rate").severity == "warning"
    assert not _result(results, "positive_ranks").success


def test_details_is_gx_result_summary_as_json() -> None:
    bad = DAY + dt.timedelta(days=1)
    results = evaluate(_facts(_day(DAY), _day(bad, missing_entries=12)), QualityConfig())

    good = json.loads(_result(results, "missing_cluster_rate", DAY).details)
    assert good["expectation_type"] == "expect_column_values_to_be_between"
    assert good["kwargs"] == {"column": "missing_cluster_rate", "max_value": 0.01}
    assert good["batch_success"] is False  # the other day fails this expectation
    assert (good["element_count"], good["unexpected_count"]) == (2, 1)
    assert (good["day_unexpected"], good["observed_value"]) == (False, 0.0)
    failed = json.loads(_result(results, "missing_cluster_rate", bad).details)
    assert (failed["day_unexpected"], failed["observed_value"]) == (True, 0.12)

    for result in results:
        details = json.loads(result.details)
        assert details["expectation_type"] == "expect_column_values_to_be_between"
        assert details["day_unexpected"] is (result.success is False)


def test_results_are_complete_and_sorted() -> None:
    days = [DAY + dt.timedelta(days=n) for n in (3, 0, 2, 1)]
    results = evaluate(_facts(*(_day(d) for d in days)), QualityConfig())
    assert len(results) == len(days) * len(CHECKS)
    assert [(r.metric_date, r.check) for r in results] == [
        (d, c) for d in sorted(days) for c in CHECKS
    ]


def test_timestamps_as_metric_date_are_read_as_dates() -> None:
    facts = _facts(_day(missing_entries=12))
    facts["metric_date"] = pd.to_datetime(facts["metric_date"])
    results = evaluate(facts, QualityConfig())
    assert {r.metric_date for r in results} == {DAY}
    assert not _result(results, "missing_cluster_rate").success


def test_thresholds_are_not_mixed_up_between_configs() -> None:
    facts = _facts(_day(missing_entries=3))
    strict = evaluate(facts, QualityConfig(max_missing_cluster_rate=0.01))
    lenient = evaluate(facts, QualityConfig(max_missing_cluster_rate=0.05))
    again = evaluate(facts, QualityConfig(max_missing_cluster_rate=0.01))
    assert not _result(strict, "missing_cluster_rate").success
    assert _result(lenient, "missing_cluster_rate").success
    assert again == strict


def test_empty_facts_give_no_results() -> None:
    assert evaluate(_facts(), QualityConfig()) == []


def test_off_contract_facts_are_rejected() -> None:
    with pytest.raises(ValueError, match="trailing_queries_mean"):
        evaluate(_facts(_day()).drop(columns=["trailing_queries_mean"]), QualityConfig())
    with pytest.raises(ValueError, match="one row per metric_date"):
        evaluate(_facts(_day(), _day()), QualityConfig())


def test_gx_and_the_pass_rule_must_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gx_suite._Gate, "passes", lambda self, observed: True)
    with pytest.raises(RuntimeError, match="disagree on missing_cluster_rate"):
        evaluate(_facts(_day(missing_entries=12)), QualityConfig())


def test_gx_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    evaluate(_facts(*(_day(DAY + dt.timedelta(days=n)) for n in range(10))), QualityConfig())
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
