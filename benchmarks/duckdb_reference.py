"""The DuckDB SQL reference: the same outputs as logmetrics, from the rules, as fast as DuckDB goes.

It is the benchmark's yardstick for speed and its oracle for correctness, so it is exact (no
sampling, no hash standing in for a string comparison) and does all of logmetrics' metric work:
per-request unique-clusters@k for every k, exact daily distributions and the missing-cluster
rate, both written to Parquet. It skips what logmetrics does besides (quality gates, quarantine,
Delta commits, the run ledger); benchmarks/README.md says so next to the numbers.

The formulation (see the README for the ones it beat):

1. `cluster_keys`: chunk_id -> an integer key. A chunk takes its smallest non-null cluster_id;
   clustered chunks share the dense rank of that id, every chunk without one gets a key of its
   own, so a singleton never collides with a cluster. Chunks absent from the table get no key.
2. `logs`, `served`, `entries`: the logs are read once, into a table of the well-formed rows
   served on the dates, each with an integer row id (file_index, file_row_number) so that
   nothing downstream groups by a string; `served` keeps their row columns, `entries` their
   valid entries, unnested with the array position. Materializing the entries pays: the join
   and the GROUP BY that follow run about twice as fast from a table as behind an unnest.
3. `per_row`: the only pass over the 36M entries, joined to `cluster_keys` and folded back per
   row id into ONE list of UHUGEINTs,
   (rank, position) in the high 64 bits and the key in the low 64: `list_sort` then orders a
   row's keys by rank, ties by position, with no struct sort and no ordered aggregate.
   unique-clusters@k counts the first occurrences among the first k keys; chunks absent from
   the table (key 0 here) are compared by their chunk_id, from a side list that only holds
   such entries (rare, so nearly free).
4. `requests`: redelivered copies fold to the one with the earliest served_at (an instant shared
   by two different copies is decided by the smaller outputs: deterministic, where logmetrics
   uses a content hash; the generated copies are identical, so the two never disagree).
5. The two Parquet outputs; the daily quantiles come from the histogram with numpy's linear
   rule, in the same floating-point steps as logmetrics, so they agree to the last bit.

Run as a process: `python -m benchmarks.duckdb_reference --help`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb

from benchmarks.datasets import job_parser

BY_QUERY_FILE = "by_query.parquet"
DAILY_FILE = "daily.parquet"
QUANTILES = {"p10": 0.10, "p25": 0.25, "median": 0.50, "p75": 0.75, "p90": 0.90}

# A row's entries come back sorted by this: (rank, array position) above bit 64, key below.
_ORDER_KEY = "(((rank::BIGINT + 2147483648)::UHUGEINT << 96) | (pos::UHUGEINT << 64))"
_LOW_64_BITS = "18446744073709551615::UHUGEINT"

_MACROS = f"""
-- The keys of a row in rank order (0 for a chunk absent from the cluster table).
CREATE MACRO keys_in_order(ranked) AS
    list_transform(ranked, lambda x: (x & {_LOW_64_BITS})::BIGINT);
-- 1 where a key appears for the first time in the list, else 0 (absent chunks: 0).
CREATE MACRO first_occurrences(keys) AS
    list_transform(keys, lambda x, i: (x <> 0 AND list_position(keys, x) = i)::INTEGER);
-- Distinct absent chunks among the first k entries: those ordered at or before the k-th.
CREATE MACRO absent_in_top(missing_chunks, ranked, k) AS
    len(list_distinct(list_transform(
        list_filter(missing_chunks,
                    lambda m: m.at <= (ranked[least(k, len(ranked))] >> 64) << 64),
        lambda m: m.chunk_id)));
-- numpy.percentile(values, 100 * p), 'linear', from a histogram of the integer values.
CREATE MACRO cumulative(hist) AS list_transform(hist, lambda _, i: list_sum(hist[1:i]));
CREATE MACRO value_at(hist, idx) AS len(list_filter(cumulative(hist), lambda c: c <= idx))::DOUBLE;
CREATE MACRO lerp(a, b, t) AS
    CASE WHEN t >= 0.5 THEN b - (b - a) * (1 - t) ELSE a + (b - a) * t END;
CREATE MACRO histogram_quantile(hist, n, p) AS CASE WHEN n > 0 THEN lerp(
    value_at(hist, floor(p * (n - 1))),
    value_at(hist, least(floor(p * (n - 1)) + 1, n - 1)),
    p * (n - 1) - floor(p * (n - 1))) END;
"""


@dataclass(frozen=True)
class Job:
    """What to compute: the logs and cluster table (Parquet), the dates, the k values."""

    served_logs: Path
    clusters: Path
    start: dt.date
    end: dt.date
    ks: tuple[int, ...]
    threshold: int
    out_dir: Path

    def logs_scan(self, columns: str) -> str:
        """`columns` of the well-formed log rows served on start..end (pushed down to Parquet)."""
        lo = dt.datetime.combine(self.start, dt.time())
        hi = dt.datetime.combine(self.end + dt.timedelta(days=1), dt.time())
        return f"""
            SELECT {columns}
            FROM read_parquet('{self.served_logs}/**/*.parquet', hive_partitioning = false)
            WHERE request_id IS NOT NULL AND served_at IS NOT NULL AND results IS NOT NULL
              AND served_at >= TIMESTAMPTZ '{lo:%Y-%m-%d %H:%M:%S}+00'
              AND served_at < TIMESTAMPTZ '{hi:%Y-%m-%d %H:%M:%S}+00'"""

    @property
    def ks_list(self) -> str:
        return "[" + ", ".join(str(k) for k in self.ks) + "]"


_ROW_ID = "(file_index::BIGINT << 32) | file_row_number"


def _cluster_keys_sql(job: Job) -> str:
    return f"""
        CREATE TEMP TABLE cluster_keys AS
        SELECT chunk_id,
               dense_rank() OVER (
                   ORDER BY cluster_id, CASE WHEN cluster_id IS NULL THEN chunk_id END) AS key
        FROM (SELECT chunk_id, min(cluster_id) AS cluster_id
              FROM read_parquet('{job.clusters}/**/*.parquet', hive_partitioning = false)
              WHERE chunk_id IS NOT NULL
              GROUP BY chunk_id)"""


def _logs_sql(job: Job) -> str:
    scan = job.logs_scan(
        f"{_ROW_ID} AS rid, served_at::DATE AS metric_date, request_id, served_at, results"
    )
    return f"CREATE TEMP TABLE logs AS {scan}"


def _served_sql(job: Job) -> str:
    return "CREATE TEMP TABLE served AS SELECT rid, metric_date, request_id, served_at FROM logs"


def _entries_sql(job: Job) -> str:
    return """
        CREATE TEMP TABLE entries AS
        SELECT rid, rank, pos, chunk_id
        FROM (SELECT rid, unnest(results, recursive := true), generate_subscripts(results, 1) AS pos
              FROM logs)
        WHERE rank IS NOT NULL AND chunk_id IS NOT NULL;
        DROP TABLE logs"""


def _per_row_sql(job: Job) -> str:
    unique_at = ", ".join(
        f"list_sum(first[1:{k}]) + CASE WHEN missing_cluster_results = 0 THEN 0"
        f" ELSE absent_in_top(missing_chunks, ranked, {k}) END"
        for k in job.ks
    )
    return f"""
        CREATE TEMP TABLE per_row AS
        WITH keyed AS (
            SELECT rid, chunk_id, key IS NULL AS missing, {_ORDER_KEY} AS ord,
                   coalesce(key, 0) AS key
            FROM entries LEFT JOIN cluster_keys USING (chunk_id)
        ), lists AS (
            SELECT rid,
                   count(*) AS results,
                   count(*) FILTER (WHERE missing) AS missing_cluster_results,
                   list_sort(list(ord | key::UHUGEINT)) AS ranked,
                   list({{'at': ord, 'chunk_id': chunk_id}}) FILTER (WHERE missing)
                       AS missing_chunks
            FROM keyed
            GROUP BY rid
        )
        SELECT rid, results, missing_cluster_results, [{unique_at}]::INTEGER[] AS unique_clusters
        FROM (SELECT *, first_occurrences(keys_in_order(ranked)) AS first FROM lists)"""


def _requests_sql(job: Job) -> str:
    zeros = "[" + ", ".join("0" for _ in job.ks) + "]::INTEGER[]"
    return f"""
        CREATE TEMP TABLE requests AS
        SELECT metric_date, request_id, kept.*
        FROM (
            SELECT metric_date, request_id,
                   min({{'served_at': served_at,
                         'results': coalesce(results, 0),
                         'missing_cluster_results': coalesce(missing_cluster_results, 0),
                         'unique_clusters': coalesce(unique_clusters, {zeros})}}) AS kept
            FROM served LEFT JOIN per_row USING (rid)
            GROUP BY metric_date, request_id)"""


def _by_query_sql(job: Job) -> str:
    return f"""
        COPY (
            SELECT metric_date, request_id, served_at,
                   unnest({job.ks_list})::INTEGER AS k,
                   unnest(unique_clusters) AS unique_clusters,
                   results::INTEGER AS results,
                   missing_cluster_results::INTEGER AS missing_cluster_results
            FROM requests
        ) TO '{job.out_dir / BY_QUERY_FILE}' (FORMAT parquet)"""


def _daily_sql(job: Job) -> str:
    quantiles = ",\n".join(
        f"histogram_quantile(histogram, queries, {p!r}::DOUBLE) AS {name}"
        for name, p in QUANTILES.items()
    )
    return f"""
        COPY (
            WITH per_query AS (
                SELECT metric_date, unnest({job.ks_list}) AS k, unnest(unique_clusters) AS u,
                       results, missing_cluster_results
                FROM requests
            ), totals AS (
                SELECT metric_date, k, u, count(*) AS n,
                       count(*) FILTER (WHERE results = 0) AS empty_queries,
                       sum(results) AS results,
                       sum(missing_cluster_results) AS missing_cluster_results
                FROM per_query
                GROUP BY metric_date, k, u
            ), bins AS (
                SELECT day::DATE AS metric_date, k, unnest(range(k + 1)) AS u
                FROM range(DATE '{job.start}', DATE '{job.end}' + 1, INTERVAL 1 DAY) AS days(day),
                     (SELECT unnest({job.ks_list}) AS k)
            ), days AS (
                SELECT metric_date, k,
                       list(coalesce(n, 0)::BIGINT ORDER BY u) AS histogram,
                       coalesce(sum(n), 0)::BIGINT AS queries,
                       coalesce(sum(empty_queries), 0)::BIGINT AS empty_queries,
                       coalesce(sum(results), 0)::BIGINT AS results,
                       coalesce(sum(missing_cluster_results), 0)::BIGINT AS missing_cluster_results
                FROM bins LEFT JOIN totals USING (metric_date, k, u)
                GROUP BY metric_date, k
            )
            SELECT metric_date, k::INTEGER AS k, queries, empty_queries, histogram,
                   {quantiles},
                   CASE WHEN queries > 0
                        THEN list_sum(list_transform(histogram, lambda n, i: n * (i - 1))) / queries
                   END AS mean,
                   {job.threshold}::INTEGER AS threshold,
                   CASE WHEN queries > 0
                        THEN list_sum(histogram[1:{job.threshold + 1}]) / queries
                   END AS share_at_or_below_threshold,
                   results, missing_cluster_results,
                   CASE WHEN results > 0 THEN missing_cluster_results / results END
                       AS missing_cluster_rate
            FROM days
            ORDER BY metric_date, k
        ) TO '{job.out_dir / DAILY_FILE}' (FORMAT parquet)"""


STEPS = (
    ("cluster_keys", _cluster_keys_sql),
    ("logs", _logs_sql),
    ("served", _served_sql),
    ("entries", _entries_sql),
    ("per_row", _per_row_sql),
    ("requests", _requests_sql),
    ("by_query", _by_query_sql),
    ("daily", _daily_sql),
)


def run(job: Job) -> dict[str, float]:
    """Compute both outputs into `job.out_dir`; returns the seconds each step took."""
    job.out_dir.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()  # in memory, default threads (all cores)
    con.execute("SET TimeZone = 'UTC'")  # metric_date = the UTC date of served_at
    con.execute("SET preserve_insertion_order = false")  # lets the COPYs write in parallel
    con.execute(_MACROS)
    seconds: dict[str, float] = {}
    for name, sql in STEPS:
        began = time.perf_counter()
        con.execute(sql(job))
        seconds[name] = round(time.perf_counter() - began, 3)
    con.close()
    return seconds


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = job_parser("python -m benchmarks.duckdb_reference", __doc__.split("\n\n")[0])
    parser.add_argument("--timings", type=Path, help="write the step timings here (JSON)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    job = Job(
        served_logs=args.served_logs.resolve(),
        clusters=args.clusters.resolve(),
        start=args.start,
        end=args.end,
        ks=tuple(sorted({int(k) for k in args.ks.split(",")})),
        threshold=args.threshold,
        out_dir=args.out.resolve(),
    )
    seconds = run(job)
    if args.timings is not None:
        args.timings.write_text(json.dumps(seconds, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
