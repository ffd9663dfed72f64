"""The failure policy: which days a run may publish, and how a failed day is reported."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from logmetrics.quality.gx_suite import CheckResult


@dataclass(frozen=True)
class DayVerdict:
    metric_date: dt.date
    blocking_failures: tuple[CheckResult, ...]
    warnings: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        """dq_passed: every blocking check passed (warnings do not count against a day)."""
        return not self.blocking_failures


def verdicts(dates: Sequence[dt.date], checks: Iterable[CheckResult]) -> list[DayVerdict]:
    failed: dict[dt.date, list[CheckResult]] = {d: [] for d in dates}
    warned: dict[dt.date, list[CheckResult]] = {d: [] for d in dates}
    for check in checks:
        if not check.success:
            target = failed if check.severity == "blocking" else warned
            target[check.metric_date].append(check)
    return [DayVerdict(d, tuple(failed[d]), tuple(warned[d])) for d in dates]


def describe(check: CheckResult) -> str:
    """`2026-01-05 missing_cluster_rate = 0.1213 (threshold 0.05)`: one failed check, one line."""
    observed = "null" if check.observed_value is None else f"{check.observed_value:.6g}"
    threshold = "" if check.threshold is None else f" (threshold {check.threshold:g})"
    return f"{check.metric_date} {check.check} = {observed}{threshold}"
