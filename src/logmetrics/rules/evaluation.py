"""Judged evaluation of retrieval runs: the rules, as pure DataFrame -> DataFrame transforms,
and the paired test of two runs (numpy, on the small per-query table).

Reading order (`per_query_metrics` chains them):

    filter_valid_entries   entries with a query_id, chunk_id and rank
    with_list_positions    `slot` (position in the list) and `doc_position` (among first copies)
    with_judgments         each entry's grade (null: unjudged) and cluster key
    run_counts             per (run, query, k): relevant found, DCG, distinct and judged clusters
    query_judgments        per (query, k): relevant chunks, judged clusters, ideal DCG
    to_metrics             one row per (run, evaluated query, k, metric)
    average_metrics        the mean per (run, k, metric), query_id = ALL

Conventions (docs/tables.md, "evaluation_results"):
- A run's list for a query is ordered by rank, ties by position in the input (file path, then
  the row's or line's order within the file).
- An unjudged chunk is not relevant and has no gain. Relevant = grade >= relevance_level.
- A chunk listed more than once in one list counts once for recall and nDCG, at its first
  position, and the later copies leave the list (the entries below move up): ir_measures and
  pytrec_eval keep one entry per document too (trec_eval refuses such a run).
  unique_clusters and cluster_recall take the list as it is, slot for slot, like the
  production metric: a repeated chunk fills a slot and adds no cluster.
- nDCG: gain 2^g - 1 (`exponential`) or g (`linear`, trec_eval's) for a grade g > 0, discount
  1/log2(position + 1); the ideal ordering is the query's judged chunks by grade, truncated at
  k. As in trec_eval, every positive grade has a gain, whatever the relevance level.
- A k larger than the list takes the whole list.
- Only queries with at least one relevant judgment are evaluated; a run with no list for such a
  query scores 0 on it (trec_eval's `-c`). The others are left out and counted by the caller.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from logmetrics.rules.cluster_keys import singleton_key
from logmetrics.schemas import ALL_QUERIES, INPUT_FILE, INPUT_ROW, rows_frame

METRICS = ("recall", "ndcg", "unique_clusters", "cluster_recall")
Gain = Literal["exponential", "linear"]

_QUERY = ("run", "query_id")


def filter_valid_entries(runs_df: DataFrame) -> DataFrame:
    """The entries that can be ranked: a query_id, a chunk_id and a rank (the rest is counted
    and set aside by the caller, as the production metric does)."""
    return runs_df.where(
        F.col("query_id").isNotNull() & F.col("chunk_id").isNotNull() & F.col("rank").isNotNull()
    )


def with_list_positions(entries_df: DataFrame) -> DataFrame:
    """`slot`: 1-based position in the run's list for the query (rank, ties by input position);
    `doc_position`: position among the first copies of each chunk (null for a repeat)."""
    in_list = Window.partitionBy(*_QUERY).orderBy("rank", INPUT_FILE, INPUT_ROW)
    copies = Window.partitionBy(*_QUERY, "chunk_id").orderBy("slot")
    so_far = (
        Window.partitionBy(*_QUERY)
        .orderBy("slot")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    is_first = F.col("is_first")
    return (
        entries_df.withColumn("slot", F.row_number().over(in_list))
        .withColumn("is_first", F.row_number().over(copies) == 1)
        .withColumn("doc_position", F.when(is_first, F.sum(is_first.cast("int")).over(so_far)))
        .select(*_QUERY, "chunk_id", "slot", "doc_position")
    )


def with_cluster_key(df: DataFrame, keys_df: DataFrame) -> DataFrame:
    """`cluster_key` of each chunk, from `cluster_keys.cluster_keys(clusters)`: a chunk absent from
    the cluster table is its own singleton, as in production."""
    keys = keys_df.select("chunk_id", F.col("cluster_key").alias("listed_key"))
    return df.join(keys, on="chunk_id", how="left").select(
        *df.columns,
        F.coalesce(F.col("listed_key"), singleton_key(F.col("chunk_id"))).alias("cluster_key"),
    )


def relevant_clusters(judgments_df: DataFrame, keys_df: DataFrame, level: int) -> DataFrame:
    """(query_id, cluster_key): the cluster keys of the query's relevant chunks, each once."""
    return (
        judgments_df.where(F.col("grade") >= level)
        .transform(with_cluster_key, keys_df)
        .select("query_id", "cluster_key")
        .distinct()
    )


def with_judgments(
    positions_df: DataFrame, judgments_df: DataFrame, keys_df: DataFrame, level: int
) -> DataFrame:
    """Each entry's `grade` (null when unjudged), `cluster_key`, and `is_relevant_cluster`
    (its cluster holds a relevant chunk of the query)."""
    judged = judgments_df.select("query_id", "chunk_id", "grade")
    clusters = relevant_clusters(judgments_df, keys_df, level).withColumn(
        "is_relevant_cluster", F.lit(True)
    )
    return (
        positions_df.join(judged, on=["query_id", "chunk_id"], how="left")
        .transform(with_cluster_key, keys_df)
        .join(clusters, on=["query_id", "cluster_key"], how="left")
        .select(
            *_QUERY,
            "chunk_id",
            "slot",
            "doc_position",
            "grade",
            "cluster_key",
            F.coalesce(F.col("is_relevant_cluster"), F.lit(False)).alias("is_relevant_cluster"),
        )
    )


def gain(grade: Column, kind: Gain) -> Column:
    """nDCG gain of a grade: 2^g - 1 or g for g > 0, else 0 (unjudged and non-positive)."""
    value = F.pow(F.lit(2.0), grade) - 1 if kind == "exponential" else grade.cast("double")
    return F.when(grade > 0, value).otherwise(F.lit(0.0))


def discounted(gain_col: Column, position: Column) -> Column:
    return gain_col / F.log2(position + 1)


def ks_df(spark: SparkSession, ks: Sequence[int]) -> DataFrame:
    schema = StructType([StructField("k", IntegerType(), False)])
    return rows_frame(spark, [(k,) for k in ks], schema)


def run_counts(judged_entries_df: DataFrame, ks: DataFrame, level: int, kind: Gain) -> DataFrame:
    """Per (run, query_id, k): `found` relevant chunks, `dcg`, `unique_clusters` (distinct
    cluster keys in the first k slots, the production metric) and `found_clusters` (distinct
    relevant clusters among them)."""
    k = F.col("k")
    in_docs = F.col("doc_position") <= k
    in_slots = F.col("slot") <= k
    return (
        judged_entries_df.crossJoin(F.broadcast(ks))
        .groupBy(*_QUERY, "k")
        .agg(
            F.count(F.when(in_docs & (F.col("grade") >= level), True)).alias("found"),
            F.sum(
                F.when(in_docs, discounted(gain(F.col("grade"), kind), F.col("doc_position")))
            ).alias("dcg"),
            F.count_distinct(F.when(in_slots, F.col("cluster_key"))).alias("unique_clusters"),
            F.count_distinct(
                F.when(in_slots & F.col("is_relevant_cluster"), F.col("cluster_key"))
            ).alias("found_clusters"),
        )
    )


def query_judgments(
    judgments_df: DataFrame, keys_df: DataFrame, ks: DataFrame, level: int, kind: Gain
) -> DataFrame:
    """Per (query_id, k) of every judged query: `relevant` chunks, `relevant_clusters` and the
    `ideal_dcg` (the query's judged chunks by grade, truncated at k)."""
    by_grade = Window.partitionBy("query_id").orderBy(F.col("grade").desc(), "chunk_id")
    ideal = (
        judgments_df.where(F.col("grade") > 0)
        .withColumn("ideal_position", F.row_number().over(by_grade))
        .crossJoin(F.broadcast(ks))
        .groupBy("query_id", "k")
        .agg(
            F.sum(
                F.when(
                    F.col("ideal_position") <= F.col("k"),
                    discounted(gain(F.col("grade"), kind), F.col("ideal_position")),
                )
            ).alias("ideal_dcg")
        )
    )
    clusters = relevant_clusters(judgments_df, keys_df, level).groupBy("query_id").count()
    relevant = judgments_df.groupBy("query_id").agg(
        F.count(F.when(F.col("grade") >= level, True)).alias("relevant")
    )
    return (
        relevant.crossJoin(F.broadcast(ks))
        .join(ideal, on=["query_id", "k"], how="left")
        .join(clusters.withColumnRenamed("count", "relevant_clusters"), "query_id", how="left")
        .select(
            "query_id",
            "k",
            "relevant",
            F.coalesce(F.col("relevant_clusters"), F.lit(0)).alias("relevant_clusters"),
            F.coalesce(F.col("ideal_dcg"), F.lit(0.0)).alias("ideal_dcg"),
        )
    )


def filter_evaluated_queries(query_judgments_df: DataFrame) -> DataFrame:
    """The queries that enter the evaluation: those with at least one relevant judgment."""
    return query_judgments_df.where(F.col("relevant") > 0)


def to_metrics(
    counts_df: DataFrame, evaluated_df: DataFrame, runs: Sequence[str], spark: SparkSession
) -> DataFrame:
    """One row per (run, evaluated query, k, metric): every run is scored on every evaluated
    query, 0 where it has no list for it."""
    names = rows_frame(
        spark, [(name,) for name in runs], StructType([StructField("run", StringType())])
    )
    scored = (
        names.crossJoin(evaluated_df)
        .join(counts_df, on=["run", "query_id", "k"], how="left")
        .select(
            "run",
            "query_id",
            "k",
            (F.coalesce(F.col("found"), F.lit(0)) / F.col("relevant")).alias("recall"),
            (F.coalesce(F.col("dcg"), F.lit(0.0)) / F.col("ideal_dcg")).alias("ndcg"),
            F.coalesce(F.col("unique_clusters"), F.lit(0)).cast("double").alias("unique_clusters"),
            (F.coalesce(F.col("found_clusters"), F.lit(0)) / F.col("relevant_clusters")).alias(
                "cluster_recall"
            ),
        )
    )
    return scored.unpivot(["run", "query_id", "k"], list(METRICS), "metric", "value").select(
        "run", "query_id", "k", "metric", "value", F.lit(1).cast("long").alias("queries")
    )


def average_metrics(per_query_df: DataFrame) -> DataFrame:
    """The mean of each (run, k, metric) over the evaluated queries, query_id = ALL."""
    return per_query_df.groupBy("run", "k", "metric").agg(
        F.lit(ALL_QUERIES).alias("query_id"),
        F.avg("value").alias("value"),
        F.count(F.lit(1)).alias("queries"),
    )


def per_query_metrics(
    runs_df: DataFrame,
    judgments_df: DataFrame,
    keys_df: DataFrame,
    runs: Sequence[str],
    ks: Sequence[int],
    level: int,
    kind: Gain,
) -> DataFrame:
    """Run entries (run, query_id, rank, chunk_id, input_file, input_row) + judgments
    (query_id, chunk_id, grade, unique per pair) + `cluster_keys.cluster_keys(clusters)`
    -> (run, query_id, k, metric, value, queries), one row per evaluated query."""
    spark = runs_df.sparkSession
    k_values = ks_df(spark, ks)
    counts = (
        runs_df.transform(filter_valid_entries)
        .transform(with_list_positions)
        .transform(with_judgments, judgments_df, keys_df, level)
        .transform(run_counts, k_values, level, kind)
    )
    evaluated = query_judgments(judgments_df, keys_df, k_values, level, kind).transform(
        filter_evaluated_queries
    )
    return to_metrics(counts, evaluated, runs, spark)


def evaluation_results(per_query_df: DataFrame) -> DataFrame:
    """Per-query rows and their averages: the rows of `evaluation_results`."""
    return per_query_df.unionByName(per_query_df.transform(average_metrics))


# --- the paired comparison (driver side, on the small per-query table) ---------------------


def paired_randomisation_test(
    a: np.ndarray, b: np.ndarray, samples: int = 10000, seed: int = 0
) -> float:
    """Two-sided p-value of a paired randomisation (sign-flip) test of mean(b - a) = 0.

    Under the null hypothesis each query's difference is as likely to have either sign. When
    the 2^n sign assignments of the n non-zero differences number at most `samples`, all are
    enumerated (an exact p-value); otherwise `samples` are drawn with `seed` and
    p = (1 + #{|mean| >= |observed|}) / (1 + samples). No difference at all gives 1.0.
    """
    diffs = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    diffs = diffs[diffs != 0]
    if diffs.size == 0:
        return 1.0
    observed = abs(diffs.sum())
    tolerance = 1e-9 * max(1.0, observed)
    if 2**diffs.size <= samples:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=diffs.size)))
        extreme = int((np.abs(signs @ diffs) >= observed - tolerance).sum())
        return extreme / len(signs)
    rng = np.random.default_rng(seed)
    extreme, left, batch = 0, samples, 1000
    while left > 0:
        size = min(batch, left)
        signs = rng.choice(np.array([1.0, -1.0]), size=(size, diffs.size))
        extreme += int((np.abs(signs @ diffs) >= observed - tolerance).sum())
        left -= size
    return (1 + extreme) / (1 + samples)


def compare_runs(
    per_query: pd.DataFrame, a: str, b: str, samples: int = 10000, seed: int = 0
) -> pd.DataFrame:
    """(metric, k, a, b, diff, p_value, queries) for runs `a` and `b`, from per-query rows
    (run, query_id, k, metric, value): the means over the queries both runs have, b - a, and
    the paired randomisation test's two-sided p-value. Metrics in METRICS order, then k."""
    columns = ["metric", "k", "a", "b", "diff", "p_value", "queries"]
    rows = per_query[(per_query["query_id"] != ALL_QUERIES) & per_query["run"].isin([a, b])]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    paired = rows.pivot_table(
        index=["metric", "k", "query_id"], columns="run", values="value", aggfunc="first"
    ).dropna()
    out = []
    for metric in METRICS:
        for k in sorted({int(key[1]) for key in paired.index if key[0] == metric}):
            both = paired.loc[(metric, k)]
            values_a, values_b = both[a].to_numpy(), both[b].to_numpy()
            out.append(
                {
                    "metric": metric,
                    "k": k,
                    "a": float(values_a.mean()),
                    "b": float(values_b.mean()),
                    "diff": float(values_b.mean() - values_a.mean()),
                    "p_value": paired_randomisation_test(values_a, values_b, samples, seed),
                    "queries": len(both),
                }
            )
    return pd.DataFrame(out, columns=columns)


def format_comparison(comparison: pd.DataFrame, a: str, b: str) -> str:
    """The comparison as a plain-text table, one line per metric@k."""
    width_a, width_b = max(8, len(a)), max(8, len(b))
    header = f"{'metric':<20} {a:>{width_a}} {b:>{width_b}} {'diff':>9} {'p-value':>8} queries"
    lines = [header, "-" * len(header)]
    for row in comparison.itertuples(index=False):
        name = f"{row.metric}@{row.k}"
        lines.append(
            f"{name:<20} {row.a:>{width_a}.4f} {row.b:>{width_b}.4f} {row.diff:>+9.4f} "
            f"{row.p_value:>8.4f} {row.queries:>7d}"
        )
    return "\n".join(lines)


def format_averages(averages: pd.DataFrame) -> str:
    """Averaged rows (run, k, metric, value, queries) as a table: one line per run and k."""
    if averages.empty:
        return "no evaluated queries: nothing to average"
    lines = [f"{'run':<20} {'k':>4} " + " ".join(f"{m:>15}" for m in METRICS) + " queries"]
    lines.append("-" * len(lines[0]))
    table = averages.pivot_table(index=["run", "k"], columns="metric", values="value")
    counts = averages.groupby(["run", "k"])["queries"].max()
    for run, k in table.index:
        values = " ".join(f"{table.loc[(run, k), m]:>15.4f}" for m in METRICS)
        lines.append(f"{run:<20} {k:>4} {values} {int(counts.loc[(run, k)]):>7d}")
    return "\n".join(lines)
