"""The failure policy: which days a run may publish, and how a failed day is reported."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from logmetrics.quality.gx_suite import AT_LEAST, CHECKS, CheckResult


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
        if check.success is False:  # None: not judged, nothing against the day
            target = failed if check.severity == "blocking" else warned
            target[check.metric_date].append(check)
    return [DayVerdict(d, tuple(failed[d]), tuple(warned[d])) for d in dates]


def describe(check: CheckResult) -> str:
    """`2026-01-05 missing_cluster_rate = 0.1213 (threshold 0.05)`: one failed check, one line."""
    observed = "null" if check.observed_value is None else f"{check.observed_value:.6g}"
    threshold = "" if check.threshold is None else f" (threshold {check.threshold:g})"
    return f"{check.metric_date} {check.check} = {observed}{threshold}"


def failing_checks(day_verdicts: Sequence[DayVerdict], blocking: bool) -> list[str]:
    """One line per check that failed on any of the days, collapsed across them:
    `unique_cluster_chunk_ids failed on 31 of 31 days (observed 10, max 0)`, naming the days
    when they are few; warnings, and with `blocking` the blocking checks too. In CHECKS
    order."""
    failed: dict[str, list[CheckResult]] = {}
    for verdict in day_verdicts:
        for check in (
            (*verdict.blocking_failures, *verdict.warnings) if blocking else (verdict.warnings)
        ):
            failed.setdefault(check.check, []).append(check)
    lines = []
    for name in (c for c in CHECKS if c in failed):
        checks = failed[name]
        observed = observed_text(c.observed_value for c in checks)
        bound = bound_text(name, checks[0].threshold)
        threshold = "" if bound is None else f", {bound}"
        days = sorted(c.metric_date for c in checks)
        named = f": {', '.join(map(str, days))}" if len(days) <= 3 else ""
        lines.append(
            f"{name} failed on {len(days)} of {len(day_verdicts)} days{named} "
            f"(observed {observed}{threshold}; {checks[0].severity})"
        )
    return lines


def observed_text(values: Iterable[float | None]) -> str:
    """`10`, `0.0121 to 0.0342` (3 significant digits), or `null`: a check's observed values."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return "null"
    if known[0] == known[-1]:
        return f"{known[0]:.3g}"
    return f"{known[0]:.3g} to {known[-1]:.3g}"


def bound_text(check: str, threshold: float | None) -> str | None:
    """`max 0.01`, or `min 0.5` for a check whose threshold is a lower bound (None: none)."""
    if threshold is None:
        return None
    return f"{'min' if check in AT_LEAST else 'max'} {threshold:g}"
