"""The alerts as the terminal says them (`flows.alerts.announce`): each alert once, in the
order the report lists them, each alert's culprits once, right below the alert they belong to.
Small frames built by hand; no Spark."""

from __future__ import annotations

import datetime as dt
import logging

import pandas as pd
import pytest

from logmetrics.console import is_console
from logmetrics.flows.alerts import announce
from logmetrics.rules.alerts import CULPRIT_COLUMNS

DAY = dt.date(2026, 10, 29)
SHARE = "share_at_or_below_threshold"


def _alert(segment: str, value: str, k: int, statistic: str, status: str = "alert") -> dict:
    return {
        "metric_date": DAY,
        "segment": segment,
        "segment_value": value,
        "k": k,
        "statistic": statistic,
        "status": status,
        "value": 3.0,
        "baseline_mean": 3.5,
        "limit": 0.1,
        "delta": -0.5,
        "baseline_days": 4,
        "cluster_table_changed": False,
    }


def _culprit(segment: str, value: str, k: int, statistic: str, rank: int, cluster: str) -> dict:
    return {
        "metric_date": DAY,
        "k": k,
        "segment": segment,
        "segment_value": value,
        "statistic": statistic,
        "rank": rank,
        "cluster_id": cluster,
        "chunk_id": None,
        "redundant_slots": 100 - rank,
        "redundant_tokens": None,
        "redundant_usd": None,
        "baseline_redundant_slots": 0.0,
        "is_new": True,
    }


def _terminal(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines the terminal's summary prints: the console records, each as its message."""
    return [
        line
        for record in caplog.records
        if is_console(record)
        for line in record.getMessage().splitlines()
    ]


def test_each_alert_s_culprits_print_once_right_below_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """All traffic's mean and share alerts at k=5 share their culprits: listed once, below the
    mean's line (the first), the share's line saying they are those above; app's mean alert at
    k=5 has culprits of its own, below it; app's improvement at k=10 has none. (A mean and a
    share alert sharing one block printed it after the second, where it read as the share's
    alone.)"""
    rows = pd.DataFrame(
        [
            _alert("surface", "app", 10, "mean", "improvement"),
            _alert("all", "all", 5, SHARE),
            _alert("surface", "app", 5, "mean"),
            _alert("all", "all", 5, "mean"),
            {**_alert("all", "all", 10, "mean"), "status": "ok"},
        ]
    )
    culprits = pd.DataFrame(
        [
            _culprit("all", "all", 5, statistic, rank, cluster)
            for statistic in ("mean", SHARE)
            for rank, cluster in ((1, "kb-reset-password"), (2, "kb-billing-faq"))
        ]
        + [_culprit("surface", "app", 5, "mean", 1, "kb-sso-setup-guide")],
        columns=CULPRIT_COLUMNS,
    )
    caplog.set_level(logging.INFO, logger="logmetrics")
    assert announce(rows, culprits) == (3, 1)
    said = [line.split(": ")[0] for line in _terminal(caplog)]
    assert said == [
        "ALERT 2026-10-29 all traffic k=5 mean",
        "  #1 cluster kb-reset-password",
        "  #2 cluster kb-billing-faq",
        f"ALERT 2026-10-29 all traffic k=5 {SHARE}",
        "ALERT 2026-10-29 surface=app k=5 mean",
        "  #1 cluster kb-sso-setup-guide",
        "IMPROVEMENT 2026-10-29 surface=app k=10 mean",
    ]
    share = next(line for line in _terminal(caplog) if line.startswith(said[3]))
    assert share.endswith("(delta -0.5000, 4 baseline days); culprits as above")


def test_alerts_of_one_place_with_other_culprits_each_list_their_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Culprits that differ (another baseline, say) are each listed below their own alert."""
    rows = pd.DataFrame([_alert("all", "all", 5, "mean"), _alert("all", "all", 5, SHARE)])
    culprits = pd.DataFrame(
        [
            _culprit("all", "all", 5, "mean", 1, "kb-reset-password"),
            _culprit("all", "all", 5, SHARE, 1, "kb-billing-faq"),
        ],
        columns=CULPRIT_COLUMNS,
    )
    caplog.set_level(logging.INFO, logger="logmetrics")
    announce(rows, culprits)
    assert [line.split(": ")[0] for line in _terminal(caplog)] == [
        "ALERT 2026-10-29 all traffic k=5 mean",
        "  #1 cluster kb-reset-password",
        f"ALERT 2026-10-29 all traffic k=5 {SHARE}",
        "  #1 cluster kb-billing-faq",
    ]
