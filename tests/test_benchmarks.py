"""The benchmark's own bookkeeping, on inputs whose answer is known by hand: what an event log
says the time went to, the slope ratios, and the commit a result is recorded against; and its
DuckDB reference against the suite's pure-Python one. The timings themselves are `make
bench`'s (benchmarks/README.md); nothing here times anything."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from benchmarks import big_clusters, datasets, duckdb_reference, eventlog, machine, report
from benchmarks.engines import DUCKDB, FLOOR, FLOOR_COMET, LOGMETRICS, LOGMETRICS_PLAIN

import reference
from logmetrics.synthetic import generate

SQL_START = eventlog.SQL_START
SQL_END = eventlog.SQL_END


def _stage(stage_id: int, name: str, submitted: int, completed: int, run_ms: int) -> dict:
    return {
        "Event": "SparkListenerStageCompleted",
        "Stage Info": {
            "Stage ID": stage_id,
            "Stage Attempt ID": 0,
            "Stage Name": name,
            "Number of Tasks": 4,
            "Submission Time": submitted,
            "Completion Time": completed,
            "Accumulables": [
                {"Name": "internal.metrics.executorRunTime", "Value": run_ms},
                {"Name": "internal.metrics.executorCpuTime", "Value": run_ms * 500_000},
            ],
        },
    }


def _job(job_id: int, start: int, stages: list[int], properties: dict) -> dict:
    return {
        "Event": "SparkListenerJobStart",
        "Job ID": job_id,
        "Submission Time": start,
        "Stage IDs": stages,
        "Properties": properties,
    }


EVENTS = [
    {"Event": "SparkListenerApplicationStart", "Timestamp": 0},
    # A write: 9 s of wall waiting for a core, 0.5 s of work, described by its job.
    _job(0, 1_000, [1], {"spark.job.description": "write unique_clusters_daily"}),
    # The main pass: 1 s of wall, 3 s of executor time, described by its SQL execution.
    _job(1, 2_000, [2], {"spark.sql.execution.id": "7"}),
    # A Delta write's own job, nested in execution 7: described by the action that began it.
    _job(2, 7_000, [3], {"spark.sql.execution.id": "8", "spark.sql.execution.root.id": "7"}),
    {
        "Event": SQL_START,
        "executionId": 7,
        "time": 1_500,
        "description": "save at NativeMethodAccessorImpl.java:0",
        "physicalPlanDescription": "SaveIntoDataSourceCommand [path=/w/unique_clusters_by_query/]",
    },
    {"Event": SQL_START, "executionId": 8, "rootExecutionId": 7, "time": 7_000},
    _stage(1, "save at chunk.py:1", 1_000, 10_000, 500),
    _stage(2, "toPandas at /home/x/repo/src/logmetrics/flows/chunk.py:127", 2_000, 3_000, 3_000),
    _stage(3, "delta at Snapshot.scala:1", 7_000, 7_500, 400),
    {"Event": "SparkListenerJobEnd", "Job ID": 0, "Completion Time": 3_000},
    {"Event": "SparkListenerJobEnd", "Job ID": 1, "Completion Time": 5_000},
    {"Event": "SparkListenerJobEnd", "Job ID": 2, "Completion Time": 8_000},
    {"Event": SQL_END, "executionId": 8, "time": 7_900},
    {"Event": SQL_END, "executionId": 7, "time": 8_000},
    {"Event": "SparkListenerTaskEnd", "Task Executor Metrics": {"JVMHeapMemory": 2**30}},
    {"Event": "SparkListenerTaskEnd", "Task Executor Metrics": {"JVMHeapMemory": 2**31}},
    {"Event": "SparkListenerApplicationEnd", "Timestamp": 10_000},
]


def _write_rolling_log(events_dir: Path, events: list[dict], parts: int) -> None:
    """Spark 4's rolling layout: a directory of numbered parts, read in number order."""
    log_dir = events_dir / "eventlog_v2_app-1"
    log_dir.mkdir(parents=True)
    size = -(-len(events) // parts)
    for n in range(parts):
        lines = [json.dumps(e) for e in events[n * size : (n + 1) * size]]
        (log_dir / f"events_{n + 1}_app-1").write_text("\n".join(lines) + "\n")


def test_event_log_summary_ranks_stages_by_executor_time(tmp_path: Path) -> None:
    # An event a part: a job's end (part 12) follows its start (part 2) only when the parts are
    # read by number, not by name.
    _write_rolling_log(tmp_path, EVENTS, parts=len(EVENTS))
    summary = eventlog.summarize(tmp_path)
    assert summary["app_wall_s"] == 10.0
    # Jobs ran over [1, 5] and [7, 8] s (two of them overlapping): 5 s, the rest on the driver.
    assert summary["time_in_jobs_s"] == 5.0
    assert summary["time_outside_jobs_s"] == 5.0
    assert (summary["jobs"], summary["stages"], summary["tasks"]) == (3, 3, 2)
    assert summary["executor_run_s_total"] == 3.9
    assert summary["jvm_memory"]["heap_used_peak_gib"] == 2.0
    top = summary["top_stages"]
    assert [s["stage_id"] for s in top] == [2, 1, 3]  # not by wall: stage 1 waited 9 s
    assert top[0]["name"] == "toPandas at src/logmetrics/flows/chunk.py:127"
    assert top[0]["description"] == (
        "save at NativeMethodAccessorImpl.java:0 -> unique_clusters_by_query"
    )
    assert top[0]["executor_cpu_s"] == 1.5
    assert top[1]["description"] == "write unique_clusters_daily"
    assert top[2]["description"] == top[0]["description"]  # the nested job's root action
    # Only root executions are listed: the nested one is inside its action's time.
    assert [(e["execution_id"], e["duration_s"]) for e in summary["top_sql_executions"]] == [
        ("7", 6.5)
    ]


def test_event_log_must_be_one_uncompressed_application(tmp_path: Path) -> None:
    (tmp_path / "app-1.lz4").write_text("")
    with pytest.raises(ValueError, match="compressed"):
        eventlog.summarize(tmp_path)
    (tmp_path / "app-2").write_text("")
    with pytest.raises(ValueError, match="one application"):
        eventlog.summarize(tmp_path)


def _workload(days: int, walls: dict[str, float]) -> dict:
    return {"days": days, "engines": {e: {"wall_s": w} for e, w in walls.items()}}


def test_slopes_leave_the_fixed_cost_out() -> None:
    # Issue 27: a slope for logmetrics, logmetrics-plain, both floors and DuckDB, each the
    # (90-day wall - 30-day wall) per 60 days; an engine run on one workload only has none.
    long = {LOGMETRICS: 180.0, LOGMETRICS_PLAIN: 178.0, FLOOR: 52.0, FLOOR_COMET: 29.0}
    short = {LOGMETRICS: 100.0, LOGMETRICS_PLAIN: 97.0, FLOOR: 34.0, FLOOR_COMET: 31.0}
    summary = {
        "top10-90d": _workload(90, {**long, DUCKDB: 13.0}),
        "top10-30d": _workload(30, {**short, DUCKDB: 5.0}),
    }
    assert report.slopes(summary, "top10-90d", "top10-30d") == {
        LOGMETRICS: 80.0,
        LOGMETRICS_PLAIN: 81.0,
        FLOOR: 18.0,
        FLOOR_COMET: -2.0,
        DUCKDB: 8.0,
    }
    del summary["top10-30d"]["engines"][DUCKDB]
    assert DUCKDB not in report.slopes(summary, "top10-90d", "top10-30d")


@pytest.mark.parametrize(
    ("ours", "floor", "ratio"),
    [(81.0, 18.0, 4.5), (81.0, -1.4, None), (81.0, 0.0, None), (None, 18.0, None)],
)
def test_a_slope_ratio_needs_a_floor_that_grows(
    ours: float | None, floor: float, ratio: float | None
) -> None:
    # A floor whose long run was no slower than its short one has no per-row cost: a negative
    # ratio would read as a pass.
    assert report._slope_ratio(ours, floor) == ratio


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_git_commit_is_dirty_only_for_changes_outside_the_benchmarks_outputs(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "src.py").write_text("x = 1\n")
    for own in machine.OWN_OUTPUTS:
        (repo / own).write_text("before\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    head = _git(repo, "describe", "--always")
    assert machine.git_commit(repo) == head
    for own in machine.OWN_OUTPUTS:  # what the benchmark itself rewrites
        (repo / own).write_text("after\n")
    assert machine.git_commit(repo) == head
    (repo / "src.py").write_text("x = 2\n")
    assert machine.git_commit(repo) == f"{head}-dirty"
    # A status git cannot give is not a clean checkout.
    assert machine.git_commit(tmp_path / "not-a-repo") == "unknown-dirty"


def test_the_duckdb_reference_equals_the_python_reference(tmp_path: Path) -> None:
    """The benchmark's oracle (`make bench` checks every Spark plan's outputs against it) against
    the suite's: both daily and per-query outputs, on dirty generated data (redelivered copies,
    entries with a null rank or chunk_id, rank ties, chunks absent from the cluster table,
    chunks with null cluster ids)."""
    start, days, ks, threshold = dt.date(2026, 3, 1), 2, (1, 3, 10), 4
    end = start + dt.timedelta(days=days - 1)
    generate(tmp_path / "data", start, days, queries_per_day=400, seed=5, dirty=True)
    job = duckdb_reference.Job(
        tmp_path / "data" / "served_logs",
        tmp_path / "data" / "clusters_parquet",
        start,
        end,
        ks,
        threshold,
        tmp_path / "out",
    )
    duckdb_reference.run(job)
    rows = ds.dataset(job.served_logs, format="parquet", partitioning="hive").to_table()
    clusters = [(r["chunk_id"], r["cluster_id"]) for r in pq.read_table(job.clusters).to_pylist()]
    source = rows.to_pylist()

    expected = reference.by_query(source, clusters, ks, start, end)
    actual = pq.read_table(tmp_path / "out" / duckdb_reference.BY_QUERY_FILE).to_pylist()
    assert len(expected) == len(actual) > 0
    assert len(source) > len(expected) // len(ks)  # the data has redelivered copies
    assert set(actual[0]) == set(expected[0])
    order = ("metric_date", "request_id", "k")
    assert sorted(actual, key=lambda r: tuple(r[c] for c in order)) == expected
    assert any(r["missing_cluster_results"] for r in expected)  # the data has absent chunks
    expected_daily = reference.daily(source, clusters, ks, threshold, start, end)
    actual_daily = pq.read_table(tmp_path / "out" / duckdb_reference.DAILY_FILE).to_pylist()
    assert set(actual_daily[0]) == set(expected_daily[0])
    assert actual_daily == expected_daily


def test_the_big_table_summary_takes_medians_and_pairs_kept_with_rebuilt_runs() -> None:
    # Issue 53: per kind, the medians of wall and of the keys' phases, the largest peak PSS; the
    # kept / rebuilt ratio is the median of the rounds' own ratios, not a ratio of medians.
    def run(round_: int, kind: str, wall: float, keys: float, pss: float) -> dict:
        phases = {"cluster keys": keys, "served chunks": 1.0, "main pass": 9.0}
        return {
            "round": round_,
            "kind": kind,
            "ok": True,
            "wall_s": wall,
            "keys_s": keys + 1.0,
            "peak_tree_pss_gib": pss,
            "phases_s": phases,
        }

    runs = [
        run(0, "kept keys", 60.0, 0.0, 3.0),
        run(0, "keys rebuilt", 120.0, 100.0, 4.0),
        run(1, "kept keys", 90.0, 0.0, 3.5),
        run(1, "keys rebuilt", 100.0, 80.0, 4.5),
        run(2, "kept keys", 70.0, 0.0, 3.2),
        run(2, "keys rebuilt", 200.0, 90.0, 4.2),
    ]
    summary = big_clusters.summarize(runs)
    kept, rebuilt = summary["kinds"]["kept keys"], summary["kinds"]["keys rebuilt"]
    assert (kept["wall_s"], kept["keys_s"], kept["peak_tree_pss_gib"]) == (70.0, 1.0, 3.5)
    assert (rebuilt["wall_s"], rebuilt["keys_s"]) == (120.0, 91.0)
    assert rebuilt["peak_tree_pss_gib"] == 4.5
    assert rebuilt["phases_s"]["cluster keys"] == 90.0
    assert summary["kept_over_rebuilt_wall"] == 0.5  # 0.5, 0.9, 0.35
    assert "first night" not in summary["kinds"] and summary["ok"]
    assert not big_clusters.summarize([{**runs[0], "ok": False}])["ok"]


def test_the_big_table_generator_grows_the_corpus_with_unserved_chunks(tmp_path: Path) -> None:
    # The served corpus's rows (chunks numbered below served_chunks) first, then chunks no log
    # serves, numbered on from there, once each, to the table's size, in one file; about the
    # share asked for in multi-member clusters.
    spec = datasets.BigClustersSpec(
        "big", dt.date(2026, 1, 1), 1, 200, seed=3, served_chunks=20_000, table_chunks=60_000
    )
    data = datasets.ensure_big_clusters(spec, tmp_path)
    assert [f.name for f in data.clusters.iterdir()] == ["part-00000.parquet"]
    table = pq.read_table(data.clusters)
    assert table.num_rows == 60_000
    numbers = [int(chunk[len("chunk-") :]) for chunk in table["chunk_id"].to_pylist()]
    corpus = sum(n < 20_000 for n in numbers)
    assert all(n < 20_000 for n in numbers[:corpus])
    assert numbers[corpus:] != sorted(numbers[corpus:])  # members are not neighbours
    assert sorted(numbers[corpus:]) == list(range(20_000, 20_000 + 60_000 - corpus))
    share = datasets._multi_member_chunks(table) / table.num_rows
    assert 0.39 < share < 0.41
    lists = pq.read_table(data.served_logs, columns=["results"])["results"].to_pylist()
    served = {e["chunk_id"] for r in lists for e in r or [] if e["chunk_id"] is not None}
    assert served and all(int(c[len("chunk-") :]) < 20_000 for c in served)


def test_the_log_shapes_copies_hold_the_same_requests() -> None:
    """benchmarks.log_shapes' renamed copy is the nested lists under other names; its exploded
    copy a row per entry in list order, an empty list one row without a chunk id, a null list
    no row (docs/inputs.md's exploded shape)."""
    import pyarrow as pa
    from benchmarks.log_shapes import _exploded, _regrouped, _renamed

    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    entry = pa.struct([("rank", pa.int32()), ("chunk_id", pa.string())])
    table = pa.table(
        {
            "request_id": ["a", "b", "c", None],
            "served_at": pa.array([at] * 4, pa.timestamp("us", "UTC")),
            "results": pa.array(
                [
                    [{"rank": 2, "chunk_id": "x"}, {"rank": 1, "chunk_id": None}],
                    [],
                    None,
                    [{"rank": 1, "chunk_id": "z"}],
                ],
                pa.list_(entry),
            ),
        }
    )
    assert [(r["qid"], r["position"], r["chunk"]) for r in _exploded(table).to_pylist()] == [
        ("a", 2, "x"),
        ("a", 1, None),
        (None, 1, "z"),
        ("b", None, None),
    ]
    renamed = _renamed(table).to_pylist()
    assert [r["query_id"] for r in renamed] == ["a", "b", "c", None]
    assert renamed[0]["hits"] == [{"doc": "x", "pos": 2}, {"doc": None, "pos": 1}]
    assert renamed[2]["hits"] is None and renamed[1]["hits"] == []
    twice = pa.concat_tables([table, table.slice(0, 1)])  # a copy served at the same instant
    regrouped = [(r["request_id"], r["results"]) for r in _regrouped(twice).to_pylist()]
    assert regrouped == [
        ("a", [{"rank": 2, "chunk_id": "x"}, {"rank": 1, "chunk_id": None}]),
        ("b", []),
        (None, [{"rank": 1, "chunk_id": "z"}]),
    ]
