"""The evaluation flow, `logmetrics evaluate`: read the runs, the judgments and the cluster
table, compute every metric with `rules.evaluation`, replace the evaluated runs' rows of
`evaluation_results`, and compare two runs. No Spark logic of its own beyond a few small
counts for the log.

`evaluation_summary` and `evaluation_comparison` read the published table back as small pandas
frames (for the printed table and for a report).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from functools import reduce

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from logmetrics.config import Config, EvaluationConfig, OutputConfig
from logmetrics.errors import ConfigError, InputError
from logmetrics.inputs.clusters import read_clusters
from logmetrics.inputs.judged import read_judgments, read_run
from logmetrics.rules.cluster_keys import cluster_keys
from logmetrics.rules.evaluation import METRICS, compare_runs, evaluation_results, per_query_metrics
from logmetrics.schemas import ALL_QUERIES
from logmetrics.tables.catalog import (
    EVALUATION_RESULTS_TABLE,
    RunStamp,
    read_table,
    replace_runs,
    with_run_stamp,
)

log = logging.getLogger(__name__)


@dataclass
class EvaluationSummary:
    """What one evaluation did: the queries it counted and left out, and its results."""

    runs: list[str]
    evaluated_queries: int
    judged_without_relevant: int
    not_judged: int = 0  # queries of a run that no judgment names
    unanswered: dict[str, int] = field(default_factory=dict)
    set_aside_entries: dict[str, int] = field(default_factory=dict)
    averages: pd.DataFrame = field(default_factory=pd.DataFrame)
    pair: tuple[str, str] | None = None
    comparison: pd.DataFrame | None = None

    def notes(self) -> list[str]:
        """The queries evaluated and the queries left out (every time, 0 included), then one
        line per run whose queries or entries did not enter the averages as they came."""
        why = []
        if self.judged_without_relevant:
            why.append(f"{self.judged_without_relevant} judged only as not relevant")
        if self.not_judged:
            why.append(f"{self.not_judged} not judged")
        left_out = self.judged_without_relevant + self.not_judged
        lines = [
            f"{_queries(self.evaluated_queries)} with a relevant judgment evaluated; {left_out} "
            "without one left out of the averages" + (f" ({', '.join(why)})" if why else "")
        ]
        for run in self.runs:
            if self.unanswered.get(run):
                lines.append(
                    f"run {run}: no list for {_queries(self.unanswered[run])} evaluated "
                    "(they score 0)"
                )
            if self.set_aside_entries.get(run):
                count = self.set_aside_entries[run]
                entries = "1 entry" if count == 1 else f"{count} entries"
                lines.append(f"run {run}: {entries} without a query_id, chunk_id or rank set aside")
        return lines


def _queries(count: int) -> str:
    return "1 query" if count == 1 else f"{count} queries"


def require_evaluation(config: Config) -> EvaluationConfig:
    if config.evaluation is None:
        raise ConfigError(
            "evaluation: required section is missing (evaluate needs evaluation.runs and "
            "evaluation.judgments)"
        )
    return config.evaluation


def run_evaluation(
    spark: SparkSession, config: Config, run_id: str, computed_at: dt.datetime
) -> EvaluationSummary:
    """Evaluate every configured run, replace their rows of `evaluation_results`, compare."""
    settings = require_evaluation(config)
    names = list(settings.runs)
    clusters = read_clusters(spark, config.inputs.clusters)
    keys_df = cluster_keys(clusters.df)
    runs_df = reduce(
        DataFrame.unionByName,
        [
            read_run(spark, name, source).withColumn("run", F.lit(name))
            for name, source in settings.runs.items()
        ],
    )
    judgments_df = _valid_judgments(read_judgments(spark, settings.judgments), settings)
    summary = _coverage(runs_df, judgments_df, names, settings.relevance_level)
    for line in summary.notes():
        log.info("%s", line)

    per_query_df = per_query_metrics(
        runs_df,
        judgments_df,
        keys_df,
        names,
        settings.ks,
        settings.relevance_level,
        settings.gain,
    )
    stamp = RunStamp(run_id, computed_at, clusters.version)
    results_df = evaluation_results(per_query_df).transform(with_run_stamp, stamp)
    replace_runs(spark, results_df, config.output, EVALUATION_RESULTS_TABLE, names)
    log.info("evaluation_results: replaced the rows of run(s) %s", ", ".join(names))

    summary.averages = evaluation_summary(spark, config.output, names)
    summary.pair = settings.compared_runs()
    if summary.pair is not None:
        summary.comparison = evaluation_comparison(
            spark, config.output, *summary.pair, samples=settings.samples, seed=settings.seed
        )
    return summary


def _valid_judgments(judgments_df: DataFrame, settings: EvaluationConfig) -> DataFrame:
    """Judgments with a query_id, chunk_id and grade; a pair judged twice is an input error."""
    what = f"judgments at {settings.judgments.path}"
    valid = judgments_df.where(
        F.col("query_id").isNotNull() & F.col("chunk_id").isNotNull() & F.col("grade").isNotNull()
    )
    twice = (
        valid.groupBy("query_id", "chunk_id").count().where(F.col("count") > 1).limit(1).collect()
    )
    if twice:
        row = twice[0]
        raise InputError(
            f"{what}: query {row['query_id']!r}, chunk {row['chunk_id']!r} is judged "
            f"{row['count']} times (one grade per pair)"
        )
    return valid


def _coverage(
    runs_df: DataFrame, judgments_df: DataFrame, names: list[str], level: int
) -> EvaluationSummary:
    """Small counts for the log: which queries are evaluated, left out, or unanswered."""
    relevant = (
        judgments_df.groupBy("query_id")
        .agg(F.max(F.when(F.col("grade") >= level, 1).otherwise(0)).alias("has_relevant"))
        .cache()
    )
    totals = relevant.agg(
        F.sum("has_relevant").alias("evaluated"), F.count(F.lit(1)).alias("judged")
    ).first()
    evaluated = int(totals["evaluated"] or 0) if totals else 0
    judged = int(totals["judged"] or 0) if totals else 0
    run_queries = runs_df.where(F.col("query_id").isNotNull()).select("run", "query_id").distinct()
    per_run = (
        run_queries.join(relevant, on="query_id", how="left")
        .groupBy("run")
        .agg(F.count(F.when(F.col("has_relevant") == 1, True)).alias("answered"))
        .collect()
    )
    not_judged = (
        run_queries.select("query_id")
        .distinct()
        .join(relevant, on="query_id", how="left_anti")
        .count()
    )
    set_aside = (
        runs_df.where(
            F.col("query_id").isNull() | F.col("chunk_id").isNull() | F.col("rank").isNull()
        )
        .groupBy("run")
        .count()
        .collect()
    )
    relevant.unpersist()
    answered = {row["run"]: int(row["answered"]) for row in per_run}
    return EvaluationSummary(
        runs=names,
        evaluated_queries=evaluated,
        judged_without_relevant=judged - evaluated,
        not_judged=not_judged,
        unanswered={name: evaluated - answered.get(name, 0) for name in names},
        set_aside_entries={row["run"]: int(row["count"]) for row in set_aside},
    )


def evaluation_summary(
    spark: SparkSession, output: OutputConfig, runs: list[str] | None = None
) -> pd.DataFrame:
    """The averaged rows of `evaluation_results` (run, k, metric, value, queries, computed_at),
    for `runs` or every run; empty before the first evaluation. Small: for printing, reports."""
    columns = ["run", "k", "metric", "value", "queries", "computed_at"]
    df = read_table(spark, output, EVALUATION_RESULTS_TABLE)
    if df is None:
        return pd.DataFrame(columns=columns)
    df = df.where(F.col("query_id") == ALL_QUERIES)
    if runs is not None:
        df = df.where(F.col("run").isin(runs))
    averages = pd.DataFrame(df.select(*columns).toPandas())
    order = {metric: i for i, metric in enumerate(METRICS)}
    averages["_order"] = averages["metric"].map(order)
    return (
        averages.sort_values(["run", "k", "_order"]).drop(columns="_order").reset_index(drop=True)
    )


def evaluation_comparison(
    spark: SparkSession, output: OutputConfig, a: str, b: str, samples: int = 10000, seed: int = 0
) -> pd.DataFrame | None:
    """`evaluation.compare_runs` over the published per-query rows of runs `a` and `b`, or None
    when either run has no rows."""
    df = read_table(spark, output, EVALUATION_RESULTS_TABLE)
    if df is None:
        return None
    per_query = pd.DataFrame(
        df.where(F.col("run").isin([a, b]) & (F.col("query_id") != ALL_QUERIES))
        .select("run", "query_id", "k", "metric", "value")
        .toPandas()
    )
    if set(per_query["run"]) != {a, b}:
        return None
    return compare_runs(per_query, a, b, samples=samples, seed=seed)
