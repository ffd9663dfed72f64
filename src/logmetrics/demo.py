"""`logmetrics generate` and `logmetrics demo`: synthetic traffic, backfilled and printed."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from logmetrics.config import Config, SparkConfig
from logmetrics.errors import ConfigError

log = logging.getLogger(__name__)

DEMO_START = dt.date(2026, 10, 1)
DEMO_SEED = 7
DEMO_REPORT_DIR = Path("reports/demo")


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
) -> None:
    """Write served logs (Parquet, by date) and a cluster table (Delta or Parquet) under `out`."""
    from logmetrics.synthetic import generate

    data = generate(out, start, days, queries_per_day, seed, list_length=list_length, dirty=dirty)
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
    """Generate `days` of traffic (once), backfill it into the warehouse, print the daily table,
    and write the report of the range under reports/demo."""
    from logmetrics.pipeline import run_range
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
    params = {
        "start": DEMO_START.isoformat(),
        "days": days,
        "qpd": queries_per_day,
        "seed": DEMO_SEED,
    }
    marker = out / "_demo.json"
    if not marker.exists() or json.loads(marker.read_text()) != params:
        generate_dataset(out, DEMO_START, days, queries_per_day, DEMO_SEED, spark=spark)
        marker.write_text(json.dumps(params))
    end = DEMO_START + dt.timedelta(days=days - 1)
    run_range(
        spark, config, DEMO_START, end, run_id, dt.datetime.now(dt.UTC).replace(microsecond=0)
    )
    _print_daily(spark, config, DEMO_START, end)
    from logmetrics.report import load_report_data, render

    index = render(load_report_data(spark, config, DEMO_START, end), DEMO_REPORT_DIR)
    print(f"report: {index}")
    return 0


def _print_daily(spark: SparkSession, config: Config, start: dt.date, end: dt.date) -> None:
    from logmetrics.sinks import DAILY_TABLE, read_table, table_ref

    k = 10 if 10 in config.metrics.ks else max(config.metrics.ks)
    location = table_ref(config.output, DAILY_TABLE)
    daily = read_table(spark, config.output, DAILY_TABLE)
    if daily is None:
        print("unique_clusters_daily is empty: no day was published")
        return
    rows = (
        daily.where(F.col("metric_date").between(start, end) & (F.col("k") == k))
        .orderBy("metric_date")
        .collect()
    )
    threshold = config.metrics.threshold
    print(f"\nunique_clusters_daily at k={k} ({location}):")
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
