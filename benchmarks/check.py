"""Correctness: each engine's outputs against the DuckDB reference's, in one Spark process.

- per query: every (metric_date, request_id, served_at, k, unique_clusters, results,
  missing_cluster_results) row must be in both, as many times (`exceptAll` both ways);
- daily: one row per (metric_date, k) in both; counts, the threshold and the histogram equal,
  doubles (quantiles, mean, share, missing-cluster rate) equal to `REL_TOL` relative.

Run as a process: `python -m benchmarks.check --plan PLAN.json --out RESULT.json`, where the plan
lists the comparisons (see `Comparison`). Logmetrics' tables are read as Delta, with the Delta
jars the project's own session resolves; the others are Parquet.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from logmetrics.config import SparkConfig
from logmetrics.session import get_spark

BY_QUERY_COLUMNS = {
    "metric_date": "date",
    "request_id": "string",
    "served_at": "timestamp",
    "k": "int",
    "unique_clusters": "int",
    "results": "int",
    "missing_cluster_results": "int",
}
DAILY_KEY = ("metric_date", "k")
DAILY_EXACT = {
    "queries": "long",
    "empty_queries": "long",
    "histogram": "array<long>",
    "threshold": "int",
    "results": "long",
    "missing_cluster_results": "long",
}
DAILY_DOUBLES = (
    "p10",
    "p25",
    "median",
    "p75",
    "p90",
    "mean",
    "share_at_or_below_threshold",
    "missing_cluster_rate",
)
REL_TOL = 1e-9
EXAMPLES = 5


@dataclass(frozen=True)
class Outputs:
    """Where one engine's two outputs are: Delta tables under a warehouse, or Parquet paths."""

    format: str  # "delta" or "parquet"
    by_query: str
    daily: str

    @classmethod
    def from_json(cls, data: dict[str, str]) -> Outputs:
        return cls(data["format"], data["by_query"], data["daily"])

    def read(self, spark: SparkSession) -> tuple[DataFrame, DataFrame]:
        return (
            spark.read.format(self.format).load(self.by_query),
            spark.read.format(self.format).load(self.daily),
        )


@dataclass(frozen=True)
class Comparison:
    """`actual` is checked against `expected` (the DuckDB reference's outputs)."""

    name: str
    expected: Outputs
    actual: Outputs

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Comparison:
        return cls(
            data["name"], Outputs.from_json(data["expected"]), Outputs.from_json(data["actual"])
        )


def compare(spark: SparkSession, comparison: Comparison) -> dict[str, Any]:
    """The verdict and the evidence for one engine: counts of differing rows, with examples."""
    expected_by_query, expected_daily = comparison.expected.read(spark)
    actual_by_query, actual_daily = comparison.actual.read(spark)
    by_query = compare_by_query(expected_by_query, actual_by_query)
    daily = compare_daily(expected_daily, actual_daily)
    return {"ok": by_query["ok"] and daily["ok"], "by_query": by_query, "daily": daily}


def compare_by_query(expected: DataFrame, actual: DataFrame) -> dict[str, Any]:
    """Rows in one and not the other, counted with multiplicity (`exceptAll`), both ways."""
    expected, actual = _conform(expected, BY_QUERY_COLUMNS), _conform(actual, BY_QUERY_COLUMNS)
    only_expected = expected.exceptAll(actual).cache()
    only_actual = actual.exceptAll(expected).cache()
    result = {
        "rows_expected": expected.count(),
        "rows_actual": actual.count(),
        "only_in_reference": only_expected.count(),
        "only_in_engine": only_actual.count(),
        "examples_only_in_reference": _examples(only_expected),
        "examples_only_in_engine": _examples(only_actual),
    }
    result["ok"] = result["only_in_reference"] == 0 and result["only_in_engine"] == 0
    only_expected.unpersist()
    only_actual.unpersist()
    return result


def compare_daily(expected: DataFrame, actual: DataFrame) -> dict[str, Any]:
    """Days on one side only, and per column the days whose values differ."""
    columns = {**DAILY_EXACT, **dict.fromkeys(DAILY_DOUBLES, "double")}
    keys = {"metric_date": "date", "k": "int"}
    e = _conform(expected, {**keys, **columns}).alias("e")
    a = _conform(actual, {**keys, **columns}).alias("a")
    joined = e.join(a, on=list(DAILY_KEY), how="full_outer").cache()
    present = F.col("e.queries").isNotNull() & F.col("a.queries").isNotNull()
    differs = {name: present & _differs(name, name in DAILY_EXACT) for name in columns}
    counts = joined.select(
        F.count(F.when(F.col("a.queries").isNull(), True)).alias("only_in_reference"),
        F.count(F.when(F.col("e.queries").isNull(), True)).alias("only_in_engine"),
        *[F.count(F.when(condition, True)).alias(name) for name, condition in differs.items()],
    ).first()
    assert counts is not None  # a global aggregate always has one row
    mismatched = {name: counts[name] for name in columns if counts[name]}
    examples = _examples(
        joined.where(
            ~present | (F.greatest(*[c.cast("int") for c in differs.values()]) == 1)
        ).select(
            *DAILY_KEY,
            *[
                F.struct(F.col(f"e.{n}").alias("reference"), F.col(f"a.{n}").alias("engine")).alias(
                    n
                )
                for n in mismatched
            ],
        )
    )
    joined.unpersist()
    result = {
        "rows_expected": expected.count(),
        "rows_actual": actual.count(),
        "only_in_reference": counts["only_in_reference"],
        "only_in_engine": counts["only_in_engine"],
        "mismatched_days_by_column": mismatched,
        "examples": examples,
    }
    result["ok"] = (
        not mismatched and not counts["only_in_reference"] and not counts["only_in_engine"]
    )
    return result


def _differs(name: str, exact: bool) -> Column:
    e, a = F.col(f"e.{name}"), F.col(f"a.{name}")
    if exact:
        return ~e.eqNullSafe(a)
    tolerance = F.lit(REL_TOL) * F.greatest(F.abs(e), F.abs(a))
    close = e.eqNullSafe(a) | (F.abs(e - a) <= tolerance)
    return ~F.coalesce(close, F.lit(False))


def _conform(df: DataFrame, columns: dict[str, str]) -> DataFrame:
    return df.select(*[F.col(name).cast(kind).alias(name) for name, kind in columns.items()])


def _examples(df: DataFrame) -> list[dict[str, Any]]:
    return [json.loads(row) for row in df.limit(EXAMPLES).toJSON().collect()]


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--plan", type=Path, required=True, help="JSON list of comparisons")
    parser.add_argument("--out", type=Path, required=True, help="write the verdicts here (JSON)")
    parser.add_argument("--log-dir", default="logs", help="where the local JVM's output goes")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 when every comparison passes, 1 otherwise (the verdicts are in --out either way)."""
    args = _parse_args(argv)
    comparisons = [Comparison.from_json(c) for c in json.loads(args.plan.read_text())]
    # Plain Spark: the judge does not run on the engine it judges (Comet, in logmetrics).
    settings = SparkConfig(log_dir=args.log_dir, accelerator="none")
    spark = get_spark(settings, app_name="logmetrics-bench-check")
    verdicts = {c.name: compare(spark, c) for c in comparisons}
    args.out.write_text(json.dumps(verdicts, indent=2, default=str) + "\n")
    spark.stop()
    return 0 if all(v["ok"] for v in verdicts.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
