"""Data-quality gates: great-expectations judges the per-day facts of a run."""

from __future__ import annotations

from logmetrics.quality.gx_suite import CHECKS, CheckResult, evaluate

__all__ = ["CHECKS", "CheckResult", "evaluate"]
