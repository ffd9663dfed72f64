"""What a run looks back on: the published daily rows before its days (read once per run),
with the days the run has published since in place of theirs.

The volume gate (trailing mean of queries) and the alerts (each day against its baseline)
read it, so a chunk sees its earlier chunks' days as the table now has them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from concurrent.futures import Future

import pandas as pd
from pyspark.sql import SparkSession

from logmetrics.config import Config
from logmetrics.flows.alerts import published_daily
from logmetrics.rules.alerts import as_date
from logmetrics.schemas import ALL_TRAFFIC


def published_before(spark: SparkSession, config: Config, dates: Sequence[dt.date]) -> pd.DataFrame:
    """The published `unique_clusters_daily` rows (`alerts.DAILY_COLUMNS`, the config's ks)
    from the longest look-back (the volume gate's window, the alerts' baseline) before the run's
    first date to its last: read once per run."""
    look_back = max(config.quality.volume_window_days, config.alerts.lookback_days())
    return published_daily(
        spark, config, dates[0] - dt.timedelta(days=look_back), dates[-1], missing_ok=True
    )


class PublishedDaily:
    """What the volume gate and the alerts look back on: the published daily rows read at the
    start of the run, with the days the run has published since in place of theirs, so that a
    chunk sees its earlier chunks' days as the table now has them."""

    def __init__(self, before: Future[pd.DataFrame]) -> None:
        self._before = before
        self._ours: list[pd.DataFrame] = []

    def add(self, rows: pd.DataFrame) -> None:
        """Rows of days the run just published."""
        self._ours.append(rows)

    def rows(self) -> pd.DataFrame:
        before = self._before.result()
        if not self._ours:
            return before
        ours = pd.concat(self._ours, ignore_index=True)
        kept = before[~before["metric_date"].isin(set(ours["metric_date"]))]
        return pd.concat([kept, ours], ignore_index=True) if len(kept) else ours

    def queries(self, k: int) -> dict[dt.date, int]:
        """All-traffic queries per published day (at one k: every k counts the same queries)."""
        rows = self.rows()
        everyone = rows[
            (rows["k"] == k)
            & (rows["segment"] == ALL_TRAFFIC)
            & (rows["segment_value"] == ALL_TRAFFIC)
        ]
        return {
            as_date(d): int(q)
            for d, q in zip(everyone["metric_date"], everyone["queries"], strict=True)
        }
