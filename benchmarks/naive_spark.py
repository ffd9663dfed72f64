"""The naive Spark plan: the textbook way to the same outputs, the floor logmetrics must beat.

Window functions pick each request's first copy and number its valid entries by rank; the
entries are posexploded and joined to the cluster table, and every k is one countDistinct over
the whole shuffle; Parquet writes, no Delta. Plain local Spark (`local[*]`, 4g driver) with
Spark's defaults otherwise, so that it shows what logmetrics' engineering is worth. Its outputs
are checked against the DuckDB reference like logmetrics' own.

Run as a process: `python -m benchmarks.naive_spark --help`.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from benchmarks.datasets import job_parser

QUANTILES = {"p10": 0.10, "p25": 0.25, "median": 0.50, "p75": 0.75, "p90": 0.90}
BY_QUERY_DIR = "by_query"
DAILY_DIR = "daily"


ACCELERATORS = ("none", "comet")


def start_spark(driver_memory: str, accelerator: str = "none") -> SparkSession:
    """Plain local Spark; with `accelerator` "comet", the same with logmetrics' Comet settings
    (its plugin, shuffle and off-heap share of `driver_memory`: `logmetrics.session`), so that
    the engine is the one difference."""
    builder = (
        SparkSession.builder.appName("logmetrics-naive-benchmark")
        .master("local[*]")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")  # metric_date = the UTC date
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if accelerator == "comet":
        for key, value in comet_settings(driver_memory).items():
            builder = builder.config(key, value)
    return builder.getOrCreate()


def comet_settings(driver_memory: str) -> dict[str, str]:
    """Comet's jar (resolved as logmetrics resolves it) and settings, as a local logmetrics
    session with `spark.accelerator: comet` has them."""
    from logmetrics.session import (
        COMET_PACKAGE,
        comet_conf,
        comet_memory,
        comet_released,
        comet_supported,
        delta_conf,
    )

    if not (comet_released() and comet_supported()):
        raise SystemExit("Comet has no build for this Spark line or platform")
    return {
        "spark.jars.packages": COMET_PACKAGE,
        "spark.jars.ivySettings": delta_conf()["spark.jars.ivySettings"],
        **comet_conf(),
        **comet_memory(driver_memory),
    }


def first_copies(logs: DataFrame, start: dt.date, end: dt.date) -> DataFrame:
    """Well-formed rows served on start..end, one per (metric_date, request_id): the earliest."""
    lo = dt.datetime.combine(start, dt.time(), tzinfo=dt.UTC)
    hi = dt.datetime.combine(end + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    copies = Window.partitionBy("metric_date", "request_id").orderBy(
        "served_at", F.xxhash64("results")
    )
    return (
        logs.where(
            F.col("request_id").isNotNull()
            & F.col("served_at").isNotNull()
            & F.col("results").isNotNull()
            & (F.col("served_at") >= F.lit(lo))
            & (F.col("served_at") < F.lit(hi))
        )
        .withColumn("metric_date", F.to_date("served_at"))
        .withColumn("copy", F.row_number().over(copies))
        .where(F.col("copy") == 1)
    )


def keyed_entries(requests: DataFrame, clusters: DataFrame) -> DataFrame:
    """One row per entry (an empty list keeps one), its cluster key, and its rank order."""
    keys = (
        clusters.where(F.col("chunk_id").isNotNull())
        .groupBy("chunk_id")
        .agg(F.min("cluster_id").alias("cluster_id"))
        .withColumn("known", F.lit(True))
    )
    entries = requests.select(
        "metric_date",
        "request_id",
        "served_at",
        F.posexplode_outer("results").alias("pos", "entry"),
    ).select(
        "metric_date",
        "request_id",
        "served_at",
        "pos",
        F.col("entry.rank").alias("rank"),
        F.col("entry.chunk_id").alias("chunk_id"),
    )
    valid = F.col("rank").isNotNull() & F.col("chunk_id").isNotNull()
    by_rank = Window.partitionBy("metric_date", "request_id").orderBy(
        F.when(valid, 0).otherwise(1), "rank", "pos"
    )
    return (
        entries.join(keys, on="chunk_id", how="left")
        .withColumn("valid", valid)
        .withColumn("missing", valid & F.col("known").isNull())
        .withColumn(
            "cluster_key",
            F.when(F.col("cluster_id").isNotNull(), F.concat(F.lit("c:"), "cluster_id")).otherwise(
                F.concat(F.lit("s:"), "chunk_id")
            ),
        )
        .withColumn("ord", F.row_number().over(by_rank))
    )


def by_query(entries: DataFrame, ks: Sequence[int]) -> DataFrame:
    """One row per (metric_date, request_id, k)."""
    valid = F.col("valid")
    per_request = entries.groupBy("metric_date", "request_id", "served_at").agg(
        F.count(F.when(valid, True)).cast("int").alias("results"),
        F.count(F.when(F.col("missing"), True)).cast("int").alias("missing_cluster_results"),
        *[
            F.countDistinct(F.when(valid & (F.col("ord") <= k), F.col("cluster_key"))).alias(
                f"u{k}"
            )
            for k in ks
        ],
    )
    windows = F.array(
        *[
            F.struct(F.lit(k).alias("k"), F.col(f"u{k}").cast("int").alias("unique_clusters"))
            for k in ks
        ]
    )
    return per_request.select(
        "metric_date",
        "request_id",
        "served_at",
        F.inline(windows),
        "results",
        "missing_cluster_results",
    )


def daily(by_query_df: DataFrame, max_k: int, threshold: int) -> DataFrame:
    """One row per (metric_date, k) with traffic: histogram, quantiles, mean, share, rate."""
    value = F.col("unique_clusters")
    counts = F.array(*[F.count(F.when(value == i, True)) for i in range(max_k + 1)])
    quantiles = F.percentile(value, F.array(*[F.lit(p) for p in QUANTILES.values()]))
    return (
        by_query_df.groupBy("metric_date", "k")
        .agg(
            F.count(F.lit(1)).alias("queries"),
            F.count(F.when(F.col("results") == 0, True)).alias("empty_queries"),
            F.slice(counts, 1, F.col("k") + 1).alias("histogram"),
            quantiles.alias("quantiles"),
            F.avg(value).alias("mean"),
            F.avg(F.when(value <= threshold, 1.0).otherwise(0.0)).alias(
                "share_at_or_below_threshold"
            ),
            F.sum("results").alias("results"),
            F.sum("missing_cluster_results").alias("missing_cluster_results"),
        )
        .select(
            "metric_date",
            "k",
            "queries",
            "empty_queries",
            "histogram",
            *[F.col("quantiles")[i].alias(name) for i, name in enumerate(QUANTILES)],
            "mean",
            F.lit(threshold).alias("threshold"),
            "share_at_or_below_threshold",
            "results",
            "missing_cluster_results",
            _ratio("missing_cluster_results", "results").alias("missing_cluster_rate"),
        )
    )


def _ratio(numerator: str, denominator: str) -> Column:
    return F.when(F.col(denominator) > 0, F.col(numerator) / F.col(denominator))


def run(
    spark: SparkSession,
    served_logs: Path,
    clusters: Path,
    start: dt.date,
    end: dt.date,
    ks: Sequence[int],
    threshold: int,
    out_dir: Path,
) -> None:
    logs = spark.read.option("recursiveFileLookup", "true").parquet(str(served_logs))
    requests = first_copies(logs, start, end)
    entries = keyed_entries(requests, spark.read.parquet(str(clusters)))
    by_query(entries, ks).write.mode("overwrite").parquet(str(out_dir / BY_QUERY_DIR))
    written = spark.read.parquet(str(out_dir / BY_QUERY_DIR))
    daily(written, max(ks), threshold).write.mode("overwrite").parquet(str(out_dir / DAILY_DIR))


def spark_job(
    module: str, doc: str, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, SparkSession, list[int]]:
    """A Spark engine process's start: its options (`job_parser` and `--driver-memory`), the
    session, and the ks."""
    parser = job_parser(f"python -m {module}", doc.split("\n\n")[0])
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--accelerator", choices=ACCELERATORS, default="none")
    args = parser.parse_args(argv)
    spark = start_spark(args.driver_memory, args.accelerator)
    spark.sparkContext.setLogLevel("WARN")
    return args, spark, sorted({int(k) for k in args.ks.split(",")})


def main(argv: Sequence[str] | None = None) -> int:
    args, spark, ks = spark_job("benchmarks.naive_spark", __doc__, argv)
    run(
        spark,
        args.served_logs.resolve(),
        args.clusters.resolve(),
        args.start,
        args.end,
        ks,
        args.threshold,
        args.out.resolve(),
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
