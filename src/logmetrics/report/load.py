"""Reading the report's tables: the published Delta tables (never the raw logs), filtered to the
date range in Spark; the few rows left go to `frames.build_report_data` as pandas."""

from __future__ import annotations

import datetime as dt
import logging

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from logmetrics.config import Config, OutputConfig
from logmetrics.errors import ConfigError
from logmetrics.report.frames import (
    ALERT_COLUMNS,
    CROWDING_COLUMNS,
    CROWDING_SHOWN,
    QUALITY_COLUMNS,
    ReportData,
    ReportError,
    build_report_data,
)
from logmetrics.rules.alerts import as_date, baseline_dates
from logmetrics.schemas import ALERT, ALL_QUERIES, CALIBRATION, DAILY_COLUMNS
from logmetrics.tables.catalog import (
    ALERTS_TABLE,
    CROWDING_TABLE,
    DAILY_TABLE,
    DATA_QUALITY_TABLE,
    DETECTOR_CALIBRATION_TABLE,
    EVALUATION_RESULTS_TABLE,
    K_SWEEP_TABLE,
    REDUNDANCY_COST_TABLE,
    Table,
    no_rows_line,
    no_table_line,
    read_table,
)

log = logging.getLogger(__name__)

_K_SWEEP_COLUMNS = ["metric_date", "k", "segment", "segment_value", "queries"]
_K_SWEEP_COLUMNS += ["unique_clusters_total"]
_COST_COLUMNS = ["metric_date", "k", "segment", "segment_value", "queries", "slots"]
_COST_COLUMNS += ["redundant_slots", "redundant_tokens", "redundant_usd"]
_EVALUATION_COLUMNS = ["run", "k", "metric", "value"]


def load_report_data(
    spark: SparkSession,
    config: Config,
    start: dt.date | None = None,
    end: dt.date | None = None,
) -> ReportData:
    """Read the tables for [start, end] (default: every date in unique_clusters_daily)."""
    if start is not None and end is not None and start > end:
        raise ConfigError(f"--start {start} is after --end {end}")
    output = config.output
    daily_df = read_table(spark, output, DAILY_TABLE)
    if daily_df is None:
        raise ReportError(no_table_line(output, DAILY_TABLE))
    if start is None or end is None:
        first, last = daily_df.agg(F.min("metric_date"), F.max("metric_date")).first() or (
            None,
            None,
        )
        if first is None or last is None:
            raise ReportError(no_rows_line(DAILY_TABLE))
        start = start or first
        end = end or last
        if start > end:
            raise ConfigError(f"--start {start} is after the last date in the table, {end}")
    assert start is not None and end is not None
    daily = _in_range(daily_df, start, end, DAILY_COLUMNS)
    if daily.empty:
        raise ReportError(no_rows_line(DAILY_TABLE, start, end))
    k_sweep = _optional(spark, output, K_SWEEP_TABLE, start, end, _K_SWEEP_COLUMNS)
    cost = _optional(spark, output, REDUNDANCY_COST_TABLE, start, end, _COST_COLUMNS)
    alerts_df = read_table(spark, output, ALERTS_TABLE)  # absent: no marks, and no error
    alerts = None if alerts_df is None else _in_range(alerts_df, start, end, ALERT_COLUMNS)
    crowding, history = _crowding_inputs(spark, config, daily_df, end, alerts)
    calibration_df = read_table(spark, output, DETECTOR_CALIBRATION_TABLE)
    return build_report_data(
        daily,
        k_sweep,
        cost,
        _evaluation(spark, output),
        start,
        end,
        max_missing_cluster_rate=config.quality.max_missing_cluster_rate,
        alerts=alerts,
        crowding=crowding,
        history=history,
        alert_settings=config.alerts,
        calibration=None
        if calibration_df is None
        else calibration_df.select(*CALIBRATION.fieldNames()).toPandas(),
        detector=config.inputs.clusters.detector,
        quality=_optional(spark, output, DATA_QUALITY_TABLE, start, end, QUALITY_COLUMNS),
    )


def _in_range(df: DataFrame, start: dt.date, end: dt.date, columns: list[str]) -> pd.DataFrame:
    """The range's rows, few (days x k x segment values), as pandas."""
    rows = df.where(F.col("metric_date").between(start, end)).select(*columns)
    return rows.toPandas()


def _crowding_inputs(
    spark: SparkSession,
    config: Config,
    daily_df: DataFrame,
    end: dt.date,
    alerts: pd.DataFrame | None,
) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """The crowding rows "What crowds the window" is drawn from: the top keys of the last day
    and of each alert day, and every key listed on those alerts' baseline days; and the daily
    rows of the alert days and their baseline days, which say which baseline days qualified
    (`rules.alerts.culprits`). (None, None) without the crowding table."""
    crowding_df = read_table(spark, config.output, CROWDING_TABLE)
    if crowding_df is None:
        return None, None
    fired = pd.DataFrame(columns=ALERT_COLUMNS) if alerts is None else alerts
    days = {as_date(d) for d in fired.loc[fired["status"] == ALERT, "metric_date"]}
    baseline = sorted({b for d in days for b in baseline_dates(d, config.alerts)})
    wanted = F.col("metric_date").isin(sorted(days | {end})) & (F.col("rank") <= CROWDING_SHOWN)
    if baseline:
        wanted = wanted | F.col("metric_date").isin(baseline)
    columns = [  # the cost columns are absent from a table written before they were counted
        F.col(c) if c in crowding_df.columns else F.lit(None).alias(c) for c in CROWDING_COLUMNS
    ]
    rows = pd.DataFrame(crowding_df.where(wanted).select(*columns).toPandas())
    if not days:
        return rows, pd.DataFrame(columns=DAILY_COLUMNS)
    judged = daily_df.where(F.col("metric_date").isin(sorted(days | set(baseline))))
    return rows, pd.DataFrame(judged.select(*DAILY_COLUMNS).toPandas(), columns=DAILY_COLUMNS)


def _optional(
    spark: SparkSession,
    output: OutputConfig,
    table: Table,
    start: dt.date,
    end: dt.date,
    columns: list[str],
) -> pd.DataFrame | None:
    df = read_table(spark, output, table)
    if df is None:
        log.warning("report: no %s table; its figure is left out", table.name)
        return None
    rows = _in_range(df, start, end, columns)
    if rows.empty:
        log.warning("report: %s has no rows from %s to %s", table.name, start, end)
        return None
    return rows


def _evaluation(spark: SparkSession, output: OutputConfig) -> pd.DataFrame | None:
    df = read_table(spark, output, EVALUATION_RESULTS_TABLE)
    if df is None:
        return None
    columns = [*_EVALUATION_COLUMNS, *(["queries"] if "queries" in df.columns else [])]
    return df.where(F.col("query_id") == ALL_QUERIES).select(*columns).toPandas()
