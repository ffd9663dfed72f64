"""Data-quality gates: the per-day facts of a run (`facts`), judged by one great-expectations
suite (`gx_suite`), and the policy that says which days may be published (`policy`)."""

from __future__ import annotations

from logmetrics.quality.gx_suite import CHECKS, CheckResult, evaluate

__all__ = ["CHECKS", "CheckResult", "evaluate"]
