"""The alerts flow: the alert rule (`rules.alerts`) wired to the tables. The published daily
rows of the days judged and of their baselines come in (one Delta read, a few hundred rows a
day, to the driver); the `unique_clusters_alerts` rows of those days go out (one commit,
replacing exactly those dates).

`logmetrics alerts` judges a range from the published table alone (`publish_alerts`);
`run`/`backfill` judge each chunk's published days from the rows the run read once and the
rows it computed (`flows.chunk`, with `flows.history`), and write them beside the chunk's
other tables. An alert never fails the run that finds it: it is printed and logged (the day
is real data), each with its culprits: the day's top crowding keys against its baseline
(`rules.alerts.culprits`, from `unique_clusters_crowding`, read only when an alert fired).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from logmetrics.config import Config
from logmetrics.console import say
from logmetrics.errors import InputError
from logmetrics.rules.alerts import (
    CULPRIT_COLUMNS,
    alert_rows,
    as_date,
    baseline_dates,
    culprits,
    describe,
    describe_culprit,
)
from logmetrics.schemas import ALERT, ALERTS, DAILY_COLUMNS, IMPROVEMENT, rows_frame
from logmetrics.tables.catalog import (
    ALERTS_TABLE,
    CROWDING_TABLE,
    DAILY_TABLE,
    no_table_line,
    read_table,
    replace_dates,
)

log = logging.getLogger(__name__)


def publish_alerts(
    spark: SparkSession,
    config: Config,
    days: Sequence[dt.date],
    run_id: str,
    computed_at: dt.datetime,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Judge `days` against the published daily table and replace their rows of
    unique_clusters_alerts (a day without published rows is left with none). Returns the rows
    written but the run's stamp (`alerts.ALERT_COLUMNS`), and the alerts' culprits
    (`culprit_rows`)."""
    began = time.monotonic()
    first, last = min(days), max(days)
    daily = published_daily(
        spark, config, first - dt.timedelta(config.alerts.lookback_days()), last
    )
    rows = alert_rows(daily, days, config.alerts, config.metrics.ks)
    replace_dates(
        spark,
        alerts_frame(spark, rows, run_id, computed_at),
        config.output,
        ALERTS_TABLE,
        list(days),
    )
    log.info(
        "%s: %d row(s) for %d day(s) from %s to %s in %.1fs",
        ALERTS_TABLE.name,
        len(rows),
        len(set(days)),
        first,
        last,
        time.monotonic() - began,
    )
    return rows, culprit_rows(spark, config, rows, daily)


def culprit_rows(
    spark: SparkSession, config: Config, alerts: pd.DataFrame, daily: pd.DataFrame
) -> pd.DataFrame:
    """`rules.alerts.culprits` of the `alert` rows, from the published crowding rows of their
    days and baseline days (none without `crowding.enabled`; no read when nothing fired, or
    before the table exists)."""
    fired = alerts[alerts["status"] == ALERT]
    named = config.crowding.enabled and not fired.empty
    crowding_df = read_table(spark, config.output, CROWDING_TABLE) if named else None
    if crowding_df is None:
        return pd.DataFrame(columns=CULPRIT_COLUMNS)
    days = {as_date(d) for d in fired["metric_date"]}
    wanted = days | {b for d in days for b in baseline_dates(d, config.alerts)}
    rows = crowding_df.where(
        F.col("metric_date").isin(sorted(wanted))
        & F.col("k").isin(sorted({int(k) for k in fired["k"]}))
    ).select(
        "metric_date",
        "k",
        "segment",
        "segment_value",
        "rank",
        "cluster_id",
        "chunk_id",
        "redundant_slots",
        *[c for c in ("redundant_tokens", "redundant_usd") if c in crowding_df.columns],
    )
    return culprits(alerts, daily, pd.DataFrame(rows.toPandas()), config.alerts)


def alerts_frame(
    spark: SparkSession, rows: pd.DataFrame, run_id: str, computed_at: dt.datetime
) -> DataFrame:
    """`alert_rows`' rows as a DataFrame of the table's schema, stamped with the run."""
    stamp = {"run_id": run_id, "computed_at": computed_at}
    records = [
        tuple(stamp[f.name] if f.name in stamp else _plain(row[f.name]) for f in ALERTS.fields)
        for row in rows.to_dict("records")
    ]
    return rows_frame(spark, records, ALERTS)


def published_daily(
    spark: SparkSession, config: Config, first: dt.date, last: dt.date, missing_ok: bool = False
) -> pd.DataFrame:
    """The published `unique_clusters_daily` rows of first..last at the ks of the config, with
    the columns the rule reads (none when the table is missing and `missing_ok`)."""
    daily_df = read_table(spark, config.output, DAILY_TABLE)
    if daily_df is None and missing_ok:
        return pd.DataFrame(columns=DAILY_COLUMNS)
    if daily_df is None:
        raise InputError(no_table_line(config.output, DAILY_TABLE))
    selected = daily_df.where(
        F.col("metric_date").between(F.lit(first), F.lit(last))
        & F.col("k").isin(list(config.metrics.ks))
    ).select(*DAILY_COLUMNS)
    return pd.DataFrame(selected.toPandas(), columns=DAILY_COLUMNS)


def announce(rows: pd.DataFrame, culprits: pd.DataFrame | None = None) -> tuple[int, int]:
    """Say each alert and improvement of `rows` once, in date order, with the culprits of each
    alert below it (`alert_lines`); return the numbers of alerts and improvements."""
    fired = _in_order(rows[rows["status"].isin([ALERT, IMPROVEMENT])])
    for row, line in zip(fired.itertuples(), alert_lines(fired, culprits), strict=True):
        say(
            log,
            line,
            logging.WARNING if row.status == ALERT else logging.INFO,
            alert=row.status,
            metric_date=str(row.metric_date),
            segment=row.segment,
            segment_value=row.segment_value,
            k=int(row.k),
            statistic=row.statistic,
            value=float(row.value),
            baseline_mean=float(row.baseline_mean),
            limit=float(row.limit),
        )
    alerts = int((fired["status"] == ALERT).sum())
    log.info(
        "alerts: %d day(s) judged, %d alert(s), %d improvement(s)",
        rows["metric_date"].nunique(),
        alerts,
        len(fired) - alerts,
    )
    return alerts, len(fired) - alerts


def alert_lines(rows: pd.DataFrame, culprits: pd.DataFrame | None = None) -> list[str]:
    """One text per alert and improvement of `rows`, in their order: its line and, for an
    alert, its culprits (`culprit_rows`) right below it. An alert of the same day, k and
    segment value as the one before it (the share after the mean, say) with the same culprits
    does not list them again: its line says they are those above."""
    fired = rows[rows["status"].isin([ALERT, IMPROVEMENT])]
    culprits = pd.DataFrame(columns=CULPRIT_COLUMNS) if culprits is None else culprits
    texts: list[str] = []
    said: tuple[Any, list[str]] | None = None  # the last culprits listed, and where
    for row in fired.itertuples():
        mine = culprits[
            (culprits["metric_date"].map(as_date) == as_date(row.metric_date))
            & (culprits["k"] == row.k)
            & (culprits["segment"] == row.segment)
            & (culprits["segment_value"] == row.segment_value)
            & (culprits["statistic"] == row.statistic)
        ]
        lines = [describe_culprit(c) for c in mine.itertuples()] if row.status == ALERT else []
        if not lines:
            texts.append(describe(row))
        elif said == (_where(row), lines):
            texts.append(f"{describe(row)}; culprits as above")
        else:
            texts.append("\n".join([describe(row), *lines]))
            said = (_where(row), lines)
    return texts


def _where(row: Any) -> tuple[Any, ...]:
    return (as_date(row.metric_date), int(row.k), row.segment, row.segment_value)


def _in_order(rows: pd.DataFrame) -> pd.DataFrame:
    """Alerts by day, all traffic first, then by segment value, k and statistic: the alerts
    that share culprits sit together."""
    if rows.empty:
        return rows
    keys = rows.assign(
        _day=rows["metric_date"].map(as_date), _segment=rows["segment"] != "all"
    ).sort_values(["_day", "_segment", "segment", "segment_value", "k", "statistic"], kind="stable")
    return keys.drop(columns=["_day", "_segment"])


def _plain(value: Any) -> Any:
    """A pandas/numpy cell as the Python value Spark takes (NaN and NA as null)."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return value.item() if hasattr(value, "item") else value
