"""`logmetrics generate` and `logmetrics demo`: synthetic traffic, backfilled and printed."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from logmetrics.config import Config, SparkConfig
from logmetrics.errors import ConfigError
from logmetrics.synthetic import PlantedChange

log = logging.getLogger(__name__)

DEMO_START = dt.date(2026, 10, 1)
DEMO_SEED = 7
DEMO_REPORT_DIR = Path("reports/demo")
DEMO_LIST_LENGTH = 20  # top-20 lists: the k-sweep shows the marginal rate past k = 10
DEMO_WEEKLY_AMPLITUDE = 0.04  # the repeat probability's weekly season (synthetic.weekly_shift)
DEMO_REGRESSION = ("surface", "app", 0.12)  # one segment repeats more on one day: fewer clusters


def demo_regression(days: int) -> list[PlantedChange]:
    """The demo's planted regression: on its second-to-last day, when that day has the default
    baseline (the same weekday 3 weeks back at least) to be judged against; else none."""
    if days < 23:
        return []
    segment, value, shift = DEMO_REGRESSION
    return [PlantedChange(DEMO_START + dt.timedelta(days=days - 2), shift, segment, value)]


def generate_dataset(
    out: Path,
    start: dt.date,
    days: int,
    queries_per_day: int,
    seed: int,
    list_length: int = 10,
    dirty: bool = True,
    clusters_format: str = "delta",
    spark: SparkSession | None = None,
    weekly_amplitude: float = 0.0,
    planted: Sequence[PlantedChange] = (),
) -> None:
    """Write served logs (Parquet, by date) and a cluster table (Delta or Parquet) under `out`."""
    from logmetrics.synthetic import generate

    data = generate(
        out,
        start,
        days,
        queries_per_day,
        seed,
        list_length=list_length,
        dirty=dirty,
        weekly_amplitude=weekly_amplitude,
        planted=planted,
    )
    clusters = out / "clusters_parquet"
    if clusters_format == "delta":
        from logmetrics.session import get_spark

        spark = spark or get_spark(SparkConfig())
        clusters = out / "clusters"
        spark.read.parquet(str(out / "clusters_parquet")).write.format("delta").mode(
            "overwrite"
        ).save(str(clusters))
    log.info(
        "generated %d requests over %d day(s) from %s: served logs %s, cluster table %s (%s)",
        data.requests,
        days,
        start,
        out / "served_logs",
        clusters,
        clusters_format,
    )


def run_demo(config: Config, days: int, queries_per_day: int, run_id: str) -> int:
    """Generate `days` of traffic (once): top-20 lists, a weekly season and one planted
    regression day in one segment; backfill it into the warehouse (which judges every day), print
    the daily table and the alerts, and write the report of the range under reports/demo."""
    from logmetrics.flows.backfill import run_range
    from logmetrics.session import get_spark

    out = Path(config.inputs.logs().path).parent
    if (
        Path(config.inputs.clusters.path) != out / "clusters"
        or config.inputs.clusters.format != "delta"
    ):
        raise ConfigError(
            "demo: inputs.clusters must be a Delta table at <served_logs parent>/clusters"
        )
    spark = get_spark(config.spark, days=days)
    planted = demo_regression(days)
    params = {
        "start": DEMO_START.isoformat(),
        "days": days,
        "qpd": queries_per_day,
        "seed": DEMO_SEED,
        "list_length": DEMO_LIST_LENGTH,
        "weekly_amplitude": DEMO_WEEKLY_AMPLITUDE,
        "planted": [[str(p.date), p.segment, p.value, p.repeat_shift] for p in planted],
    }
    marker = out / "_demo.json"
    if not marker.exists() or json.loads(marker.read_text()) != params:
        generate_dataset(
            out,
            DEMO_START,
            days,
            queries_per_day,
            DEMO_SEED,
            list_length=DEMO_LIST_LENGTH,
            spark=spark,
            weekly_amplitude=DEMO_WEEKLY_AMPLITUDE,
            planted=planted,
        )
        marker.write_text(json.dumps(params))
    end = DEMO_START + dt.timedelta(days=days - 1)
    run_range(
        spark, config, DEMO_START, end, run_id, dt.datetime.now(dt.UTC).replace(microsecond=0)
    )
    _print_daily(spark, config, DEMO_START, end)
    _print_alerts(spark, config, DEMO_START, end, planted)
    from logmetrics.report import load_report_data, render

    index = render(load_report_data(spark, config, DEMO_START, end), DEMO_REPORT_DIR)
    print(f"report: {index}")
    return 0


def _print_daily(spark: SparkSession, config: Config, start: dt.date, end: dt.date) -> None:
    from logmetrics.schemas import ALL_TRAFFIC
    from logmetrics.tables.catalog import DAILY_TABLE, read_table, table_ref

    k = 10 if 10 in config.metrics.ks else max(config.metrics.ks)
    location = table_ref(config.output, DAILY_TABLE)
    daily = read_table(spark, config.output, DAILY_TABLE)
    if daily is None:
        print("unique_clusters_daily is empty: no day was published")
        return
    rows = (
        daily.where(
            F.col("metric_date").between(start, end)
            & (F.col("k") == k)
            & (F.col("segment") == ALL_TRAFFIC)
        )
        .orderBy("metric_date")
        .collect()
    )
    threshold = config.metrics.threshold
    print(f"\nunique_clusters_daily at k={k}, all traffic ({location}):")
    print(
        f"{'metric_date':<12}{'queries':>9}{'median':>8}{'p10':>6}{'p90':>6}{'mean':>7}"
        f"{'share<=' + str(threshold):>10}{'missing':>9}"
    )
    for r in rows:
        share = (
            "-" if r.share_at_or_below_threshold is None else f"{r.share_at_or_below_threshold:.1%}"
        )
        missing = "-" if r.missing_cluster_rate is None else f"{r.missing_cluster_rate:.2%}"
        median = "-" if r.median is None else f"{r.median:g}"
        p10 = "-" if r.p10 is None else f"{r.p10:g}"
        p90 = "-" if r.p90 is None else f"{r.p90:g}"
        mean = "-" if r.mean is None else f"{r.mean:.2f}"
        print(
            f"{r.metric_date!s:<12}{r.queries:>9}{median:>8}{p10:>6}{p90:>6}{mean:>7}"
            f"{share:>10}{missing:>9}"
        )
    print(
        f"\n{len(rows)} day(s); every k, the per-query rows and the quality tables sit beside it."
    )


def _print_alerts(
    spark: SparkSession,
    config: Config,
    start: dt.date,
    end: dt.date,
    planted: Sequence[PlantedChange],
) -> None:
    """The range's alerts and improvements, as the backfill found them, beside what was planted."""
    from logmetrics.rules.alerts import describe
    from logmetrics.schemas import ALERT, IMPROVEMENT
    from logmetrics.tables.catalog import ALERTS_TABLE, read_table

    for change in planted:
        print(
            f"\nplanted: {change.segment}={change.value} repeats more on {change.date} "
            f"(repeat probability +{change.repeat_shift}): fewer distinct clusters"
        )
    table = read_table(spark, config.output, ALERTS_TABLE)
    rows = (
        []
        if table is None
        else table.where(
            F.col("metric_date").between(start, end) & F.col("status").isin(ALERT, IMPROVEMENT)
        )
        .orderBy("metric_date", F.col("segment") != "all", "segment_value", "statistic", "k")
        .collect()
    )
    alerts = sum(row.status == ALERT for row in rows)
    print(
        f"unique_clusters_alerts, {start} to {end}: {alerts} alert(s), "
        f"{len(rows) - alerts} improvement(s)"
    )
    for row in rows:
        print(f"  {describe(row)}")
