"""A floor for any Spark plan: less than the metric work, in the fastest plan found for it.

What it leaves out, on purpose, so that its time is a lower bound rather than a competitor:
no redelivered copies removed, no ordering by rank (array position stands in), no malformed
rows, invalid entries or missing chunks set apart, no quantiles (only the daily histogram's
counts, collected), no Delta, no quality gates, no ledger. What it keeps: reading the logs,
the explode, the join to the cluster table, every k per request from the first position of
each cluster, and the per-query Parquet output. Keys are 64-bit hashes (measured faster than
strings: 43 s against 51 s at 90 days), the logs are partitioned by request once and both
group-bys are hash aggregates in generated code, with no shuffle after the first.

Its outputs are NOT the metric (redelivered copies count twice, ties and gaps in ranks are
ignored), so the correctness check never reads them. `python -m benchmarks.floor` times it
against the DuckDB reference: if a plan doing less than the metric work is already near 4x
DuckDB, so is every plan doing all of it.

`--accelerator comet` runs the same plan with Comet on (`benchmarks.naive_spark.start_spark`):
the floor for logmetrics' default run, which has Comet on too.

Run as a process: `python -m benchmarks.floor_spark --help`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks.naive_spark import spark_job

BY_QUERY_DIR = "by_query"


def by_query(logs: DataFrame, clusters: DataFrame, ks: Sequence[int]) -> DataFrame:
    """(metric_date, request_id, served_at, results, k, unique_clusters): the floor's grain."""
    keys = (
        clusters.groupBy("chunk_id")
        .agg(F.min("cluster_id").alias("cluster_id"))
        .select(
            F.xxhash64("chunk_id").alias("chunk_hash"),
            F.xxhash64(F.coalesce("cluster_id", "chunk_id")).alias("key"),
        )
    )
    entries = (
        logs.where(
            F.col("request_id").isNotNull()
            & F.col("served_at").isNotNull()
            & F.col("results").isNotNull()
        )
        .withColumn("metric_date", F.to_date("served_at"))
        .repartition("metric_date", "request_id")
        .select(
            "metric_date",
            "request_id",
            "served_at",
            F.posexplode("results").alias("pos", "entry"),
        )
        .select(
            "metric_date",
            "request_id",
            "served_at",
            "pos",
            F.xxhash64("entry.chunk_id").alias("chunk_hash"),
        )
    )
    firsts = (
        entries.join(F.broadcast(keys), on="chunk_hash", how="left")
        .groupBy("metric_date", "request_id", F.coalesce("key", "chunk_hash").alias("key"))
        .agg(
            F.min("pos").alias("slot"),
            F.min("served_at").alias("served_at"),
            F.count(F.lit(1)).alias("entries"),
        )
    )
    requests = firsts.groupBy("metric_date", "request_id").agg(
        F.min("served_at").alias("served_at"),
        F.sum("entries").alias("results"),
        *[F.count(F.when(F.col("slot") < k, True)).alias(f"u{k}") for k in ks],
    )
    windows = F.array(
        *[F.struct(F.lit(k).alias("k"), F.col(f"u{k}").alias("unique_clusters")) for k in ks]
    )
    return requests.select("metric_date", "request_id", "served_at", "results", F.inline(windows))


def run(
    spark: SparkSession,
    served_logs: Path,
    clusters: Path,
    start: dt.date,
    end: dt.date,
    ks: Sequence[int],
    out_dir: Path,
) -> None:
    """Write the per-query rows, then collect the daily histograms' counts (a few thousand)."""
    logs = spark.read.parquet(str(served_logs)).where(
        F.col("date").between(F.lit(start), F.lit(end))
    )
    target = str(out_dir / BY_QUERY_DIR)
    by_query(logs, spark.read.parquet(str(clusters)), ks).write.mode("overwrite").parquet(target)
    spark.read.parquet(target).groupBy("metric_date", "k", "unique_clusters").count().collect()


def main(argv: Sequence[str] | None = None) -> int:
    args, spark, ks = spark_job("benchmarks.floor_spark", __doc__, argv)
    spark.conf.set("spark.sql.shuffle.partitions", "8")  # as logmetrics' local default
    run(spark, args.served_logs, args.clusters, args.start, args.end, ks, args.out)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
