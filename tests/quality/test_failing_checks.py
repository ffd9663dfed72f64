"""The terminal's account of failed checks: each check once, collapsed across the days it
failed on (`quality.policy.failing_checks`), on verdicts made by hand."""

from __future__ import annotations

import datetime as dt

from logmetrics.quality.gx_suite import CheckResult
from logmetrics.quality.policy import failing_checks, verdicts

DAYS = [dt.date(2026, 10, 1) + dt.timedelta(days=i) for i in range(31)]


def _check(
    day: dt.date,
    check: str,
    observed: float | None,
    threshold: float,
    severity: str,
    success: bool | None = False,
) -> CheckResult:
    return CheckResult(day, check, success, observed, threshold, severity, "{}")


def test_each_failed_check_is_one_line_across_its_days() -> None:
    """31 days of one warning (the demo's cluster-table check) are one line, not 31; a blocking
    failure on two days names them, with the range of what was observed; a check that was not
    judged (success None) or passed is not a failure (the bugs: a line per day; a not-judged
    volume counted as failed)."""
    checks = [_check(d, "unique_cluster_chunk_ids", 10.0, 0.0, "warning") for d in DAYS]
    checks += [
        _check(DAYS[4], "missing_cluster_rate", 0.0213, 0.01, "blocking"),
        _check(DAYS[6], "missing_cluster_rate", 0.121, 0.01, "blocking"),
        _check(DAYS[0], "volume", None, 0.5, "warning", success=None),
        _check(DAYS[1], "volume", 0.2, 0.5, "warning"),
        _check(DAYS[2], "malformed_rate", 0.0, 0.001, "blocking", success=True),
    ]
    judged = verdicts(DAYS, checks)
    assert failing_checks(judged, blocking=True) == [
        "missing_cluster_rate failed on 2 of 31 days: 2026-10-05, 2026-10-07 (observed 0.0213 "
        "to 0.121, max 0.01; blocking)",
        "unique_cluster_chunk_ids failed on 31 of 31 days (observed 10, max 0; warning)",
        "volume failed on 1 of 31 days: 2026-10-02 (observed 0.2, min 0.5; warning)",
    ]
    # Blocking failures that held their days back are said by the run's error instead.
    assert failing_checks(judged, blocking=False) == failing_checks(judged, True)[1:]
    assert [v.passed for v in judged][4:7] == [False, True, False]
    assert failing_checks(verdicts(DAYS[:1], []), blocking=True) == []
