"""`make bench`: generate the data once, time the engines alternately, check, report.

1. Datasets (regenerated only when missing): top-10 lists over `--days` days (90) and top-20
   lists over a third of them (30), `--queries-per-day` requests a day (40,000), dirty.
2. Workloads: top-10 over 90, 30 and 60 days, top-20 over 30 days. Each round runs every
   workload's engines back to back, so that a slow spell of the machine hits all of them
   alike; `--repeats` rounds. Every workload: logmetrics (the defaults, Comet on),
   logmetrics-plain (`spark.accelerator: none`) and DuckDB; the 90 and the 30 days of top-10
   also the floor on plain Spark and with Comet (the slopes between the two: the per-row cost
   without the fixed cost); the 90 days also logmetrics-chunk90 (`backfill.days_per_chunk` =
   the 90 days, one chunk) and, in the first `--naive-repeats` rounds, the naive plan.
3. Where logmetrics' time goes, from the Spark event log of its last 90-day run.
4. Correctness: every logmetrics variant's and the naive plan's last outputs against the
   DuckDB reference's (`benchmarks.check`).
5. benchmarks/results.json, the table in benchmarks/README.md, the table on stdout.
6. The fixed-cost runs (`benchmarks.fixed_cost`, `--repeats` rounds): a nightly day and a tiny
   one against the platform floor, recorded the same way.
7. Nightly days against a 20M-chunk cluster table (`benchmarks.big_clusters`, `--repeats`
   rounds): the first night, a night with the keys kept and one with them rebuilt, beside the
   small-table nightly; their tables against the DuckDB reference's.
8. The same nightly with everything on a real S3 server against local files
   (`benchmarks.object_storage`, `--repeats` rounds), and a skip of a done day on S3.
9. The 90 days of top-10 lists renamed and exploded (`benchmarks.log_shapes`, `--repeats`
   rounds): each against the contract's own shape, and that against the code before shapes.
10. The same 90 days kept as MLflow traces, a spans table in Delta and OTLP/JSON lines
   (`benchmarks.traces`, `--repeats` rounds), against the requests they hold, nested.
Exit 1 if a run failed or an output differs from the reference.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb

from benchmarks import (
    big_clusters,
    eventlog,
    fixed_cost,
    log_shapes,
    machine,
    measure,
    object_storage,
    report,
    traces,
)
from benchmarks.datasets import (
    REPO,
    Dataset,
    DatasetSpec,
    data_options,
    ensure_dataset,
    repo_relative,
)
from benchmarks.engines import (
    DRIVER_MEMORY,
    KS,
    LOGMETRICS_NO_CROWDING,
    LOGMETRICS_PLAIN,
    THRESHOLD,
    DuckDBReference,
    Engine,
    FloorComet,
    FloorSpark,
    Logmetrics,
    NaiveSpark,
    Workload,
)
from benchmarks.measure import Measurement, run_measured
from benchmarks.report import RunRecord, WorkloadInfo

log = logging.getLogger("benchmarks")

START = dt.date(2026, 1, 1)
LOGMETRICS, DUCKDB, NAIVE, FLOOR = Logmetrics(), DuckDBReference(), NaiveSpark(), FloorSpark()
FLOOR_COMET = FloorComet()
PLAIN = Logmetrics(LOGMETRICS_PLAIN, {"spark": {"accelerator": "none"}})
NO_CROWDING = Logmetrics(LOGMETRICS_NO_CROWDING, {"crowding": {"enabled": False}})


@dataclass(frozen=True)
class Plan:
    """The workloads, which engines run on each, and how often."""

    workloads: list[Workload]
    engines: dict[str, list[Engine]]
    main: str  # the 90-day top-10 workload
    short: str  # the 30-day top-10 workload
    one_chunk: Logmetrics  # logmetrics with the main workload's days in one chunk
    repeats: int
    naive_repeats: int

    def schedule(self) -> list[tuple[int, Workload, Engine]]:
        """(round, workload, engine) in run order: engines alternate within every round."""
        return [
            (round_, workload, engine)
            for round_ in range(self.repeats)
            for workload in self.workloads
            for engine in self.engines[workload.name]
            if engine is not NAIVE or round_ < self.naive_repeats
        ]

    def checked(self) -> list[str]:
        """The comparisons with the reference a complete run makes (`check_outputs` names)."""
        return [
            comparison_name(workload, engine)
            for workload in self.workloads
            for engine in self.engines[workload.name]
            if engine.checked
        ]


def build_plan(args: argparse.Namespace) -> Plan:
    """Generate (or reuse) both datasets and lay out the workloads over them."""
    third = args.days // 3
    top10 = dataset(args, list_length=10, days=args.days)
    top20 = dataset(args, list_length=20, days=third)
    workloads = [
        Workload(f"top10-{args.days}d", top10, args.days),
        Workload(f"top10-{third}d", top10, third),
        Workload(f"top10-{2 * third}d", top10, 2 * third),
        Workload(f"top20-{third}d", top20, third),
    ]
    main, short = workloads[0].name, workloads[1].name
    one_chunk = Logmetrics(
        f"logmetrics-chunk{args.days}", {"backfill": {"days_per_chunk": args.days}}
    )
    engines: dict[str, list[Engine]] = {w.name: [LOGMETRICS, PLAIN, DUCKDB] for w in workloads}
    # The pairs the targets compare sit next to each other: each logmetrics run and its floor,
    # one chunk / default. The 30 days have the floors too, for the slopes.
    engines[main] = [LOGMETRICS, NO_CROWDING, FLOOR_COMET, DUCKDB, PLAIN, FLOOR, one_chunk]
    engines[short] = [LOGMETRICS, FLOOR_COMET, PLAIN, FLOOR, DUCKDB]
    if args.naive_repeats > 0:
        engines[main].append(NAIVE)
    return Plan(
        workloads,
        engines,
        main,
        short,
        one_chunk,
        args.repeats,
        min(args.naive_repeats, args.repeats),
    )


def dataset(args: argparse.Namespace, list_length: int, days: int) -> Dataset:
    spec = DatasetSpec(
        name=f"top{list_length}-{days}d-{args.queries_per_day}q-seed{args.seed}",
        start=START,
        days=days,
        queries_per_day=args.queries_per_day,
        seed=args.seed,
        list_length=list_length,
    )
    return ensure_dataset(spec, args.data_dir)


def run_dir(out_dir: Path, workload: Workload, engine: Engine) -> Path:
    return out_dir / workload.name / engine.name


def time_runs(plan: Plan, out_dir: Path, timeout_s: float) -> list[RunRecord]:
    """Every run of the schedule, measured (a run taking over `timeout_s` is killed, failed)."""
    schedule = plan.schedule()
    records = []
    for number, (round_, workload, engine) in enumerate(schedule, start=1):
        directory = run_dir(out_dir, workload, engine)
        command = engine.prepare(workload, directory)
        measured = run_measured(
            command, log=directory.parent / f"{engine.name}.log", cwd=REPO, timeout_s=timeout_s
        )
        steps = None
        if engine is DUCKDB and measured.ok:
            steps = json.loads(DUCKDB.steps_path(directory).read_text())
        records.append(
            RunRecord(
                workload=workload.name,
                engine=engine.name,
                round=round_,
                exit_code=measured.exit_code,
                wall_s=measured.wall_s,
                peak_tree_pss=measured.peak_tree_pss,
                peak_jvm_pss=measured.peak_jvm_pss,
                peak_tree_rss=measured.peak_tree_rss,
                peak_jvm_rss=measured.peak_jvm_rss,
                log=repo_relative(measured.log),
                timed_out=measured.timed_out,
                steps_s=steps,
                samples=measured.samples,
                pss_samples=measured.pss_samples,
                pss_fallbacks=measured.pss_fallbacks,
                sampler_cpu_s=measured.sampler_cpu_s,
            )
        )
        log.info(
            "[%d/%d] %s %s: %s in %.1f s, peak PSS %.2f GiB (RSS sum %.2f), sampling %.2f CPU s",
            number,
            len(schedule),
            workload.name,
            engine.name,
            "ok" if measured.ok else _failure(measured),
            measured.wall_s,
            measured.peak_tree_pss / report.GIB,
            measured.peak_tree_rss / report.GIB,
            measured.sampler_cpu_s,
        )
    return records


def _failure(measured: Measurement) -> str:
    why = "timed out" if measured.timed_out else f"exit {measured.exit_code}"
    return f"FAILED ({why}, see {measured.log})"


def check_outputs(plan: Plan, out_dir: Path, records: list[RunRecord]) -> dict[str, Any]:
    """Compare the last outputs of every engine with the reference's, in one Spark process."""
    succeeded = {(r.workload, r.engine) for r in records if r.ok}
    comparisons = []
    for workload in plan.workloads:
        if (workload.name, DUCKDB.name) not in succeeded:
            continue
        reference = DUCKDB.outputs(run_dir(out_dir, workload, DUCKDB))
        for engine in plan.engines[workload.name]:
            if engine.checked and (workload.name, engine.name) in succeeded:
                comparisons.append(
                    {
                        "name": comparison_name(workload, engine),
                        "expected": reference,
                        "actual": engine.outputs(run_dir(out_dir, workload, engine)),
                    }
                )
    if not comparisons:
        return {}
    log.info("checking %d output(s) against the DuckDB reference", len(comparisons))
    return measure.run_check(comparisons, out_dir, REPO)


def comparison_name(workload: Workload, engine: Engine) -> str:
    return f"{workload.name} {engine.name}"


def workload_info(workload: Workload, out_dir: Path) -> WorkloadInfo:
    """Requests and served results (valid entries) of the workload, from the reference's output."""
    daily = Path(DUCKDB.outputs(run_dir(out_dir, workload, DUCKDB))["daily"])
    requests = results = None
    if daily.exists():
        with duckdb.connect() as con:
            row = con.execute(
                f"SELECT sum(queries), sum(results) FROM '{daily}' WHERE k = {min(KS)}"
            ).fetchone()
        if row is not None:
            requests, results = int(row[0]), int(row[1])
    length = workload.dataset.spec.list_length
    return WorkloadInfo(
        name=workload.name,
        label=f"top-{length}, {workload.days} day{'s' if workload.days != 1 else ''}",
        days=workload.days,
        list_length=length,
        served_requests=requests,
        served_results=results,
    )


def where_the_time_goes(plan: Plan, out_dir: Path, records: list[RunRecord]) -> dict[str, Any]:
    """The event-log summary of logmetrics' last run of the main workload, if it succeeded."""
    last = [r for r in records if r.workload == plan.main and r.engine == LOGMETRICS.name]
    if not last or not last[-1].ok:
        return {}
    main = next(w for w in plan.workloads if w.name == plan.main)
    return eventlog.summarize(Logmetrics.events_dir(run_dir(out_dir, main, LOGMETRICS)))


def days_per_chunk(plan: Plan, out_dir: Path, engine: Logmetrics) -> int | None:
    """The backfill.days_per_chunk a logmetrics variant ran with on the main workload (for the
    default variant, the project's default: its config leaves it out)."""
    from logmetrics.config import load_config

    main = next(w for w in plan.workloads if w.name == plan.main)
    config = Logmetrics.config_path(run_dir(out_dir, main, engine))
    return load_config([config]).backfill.days_per_chunk if config.exists() else None


def build_results(
    plan: Plan, args: argparse.Namespace, records: list[RunRecord], checks: dict[str, Any]
) -> dict[str, Any]:
    infos = [workload_info(w, args.out_dir) for w in plan.workloads]
    summary = report.summarize(infos, records)
    described = machine.describe(REPO)
    chunking = report.Chunking(
        engine=plan.one_chunk.name,
        days=summary[plan.main]["days"],
        default_days_per_chunk=days_per_chunk(plan, args.out_dir, LOGMETRICS),
    )
    return {
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": described,
        "machine_line": machine.summary_line(described),
        "parameters": {
            "queries_per_day": args.queries_per_day,
            "seed": args.seed,
            "start": START.isoformat(),
            "ks": list(KS),
            "threshold": THRESHOLD,
            "driver_memory": DRIVER_MEMORY,
            "repeats": plan.repeats,
            "naive_repeats": plan.naive_repeats,
            "logmetrics_days_per_chunk": chunking.default_days_per_chunk,
            "logmetrics_variants": {
                engine.name: engine.overrides
                for engine in (LOGMETRICS, NO_CROWDING, PLAIN, plan.one_chunk)
            },
            "memory_sampling": {
                "rss_every_s": measure.POLL_SECONDS,
                "pss_at_most_every_s": measure.PSS_SECONDS,
                **sampling_cost(records),
            },
        },
        "workloads": summary,
        "slopes_s_per_60_days": report.slopes(summary, plan.main, plan.short),
        "targets": report.targets(summary, plan.main, plan.short, chunking, checks, plan.checked()),
        "where_the_time_goes": where_the_time_goes(plan, args.out_dir, records),
        "checks": checks,
        "runs": [asdict(r) for r in records],
    }


def sampling_cost(records: list[RunRecord]) -> dict[str, Any]:
    """What measuring memory cost: the sampler's CPU seconds against the runs' wall time."""
    if not records:
        return {}
    cpu = sum(r.sampler_cpu_s for r in records)
    wall = sum(r.wall_s for r in records)
    worst = max(records, key=lambda r: r.sampler_cpu_s / r.wall_s if r.wall_s else 0.0)
    return {
        "sampler_cpu_s": round(cpu, 3),
        "runs_wall_s": round(wall, 3),
        "sampler_share_of_one_cpu": round(cpu / wall, 4) if wall else None,
        "largest_share": {
            "run": f"{worst.workload} {worst.engine} round {worst.round + 1}",
            "sampler_cpu_s": worst.sampler_cpu_s,
            "wall_s": worst.wall_s,
        },
        "pss_fallbacks": sum(r.pss_fallbacks for r in records),
    }


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = data_options(
        argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    )
    parser.add_argument("--repeats", type=int, default=3, help="rounds of timed runs")
    parser.add_argument(
        "--naive-repeats", type=int, default=1, help="rounds that include the naive plan (0: none)"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds after which a run is killed"
    )
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results.json")
    parser.add_argument("--readme", type=Path, default=REPO / "benchmarks" / "README.md")
    fixed_cost.baseline_option(parser)
    args = parser.parse_args(argv)
    if args.baseline_repo is not None:
        args.baseline_repo = args.baseline_repo.resolve()
    if args.days < 3 or args.repeats < 1:
        parser.error("--days must be at least 3 and --repeats at least 1")
    args.data_dir, args.out_dir = args.data_dir.resolve(), args.out_dir.resolve()
    return args


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    args = _parse_args(argv)
    plan = build_plan(args)
    records = time_runs(plan, args.out_dir, args.timeout)
    checks = check_outputs(plan, args.out_dir, records)
    results = build_results(plan, args, records, checks)
    args.results.write_text(json.dumps(results, indent=2, default=str) + "\n")
    section = report.markdown(results)
    if not report.update_readme(args.readme, section):
        log.warning("%s has no results markers; the table is only printed", args.readme)
    print(section)
    fixed = fixed_cost.run(argparse.Namespace(**{**vars(args), "rounds": args.repeats}))
    print(fixed_cost.record(fixed, args.results, args.readme))
    big = big_clusters.run(argparse.Namespace(**{**vars(args), "rounds": args.repeats}))
    print(big_clusters.record(big, args.results, args.readme))
    on_s3 = object_storage.run(argparse.Namespace(**{**vars(args), "rounds": args.repeats}))
    print(object_storage.record(on_s3, args.results, args.readme))
    shapes = log_shapes.run(argparse.Namespace(**{**vars(args), "rounds": args.repeats}))
    print(log_shapes.record(shapes, args.results, args.readme))
    spans = traces.run(argparse.Namespace(**{**vars(args), "rounds": args.repeats}))
    print(traces.record(spans, args.results, args.readme))
    failed = [f"{r.workload} {r.engine}" for r in records if not r.ok]
    failed += [label for label, summary in fixed["checkouts"].items() if not summary["ok"]]
    failed += [] if big_clusters.ok(big) else ["big-clusters"]
    failed += [] if object_storage.ok(on_s3) else ["object-storage"]
    failed += [] if log_shapes.ok(shapes) else ["log-shapes"]
    failed += [] if traces.ok(spans) else ["traces"]
    wrong = [name for name, verdict in checks.items() if not verdict.get("ok")]
    if failed or wrong or not checks:
        log.error("failed runs: %s; outputs differing from the reference: %s", failed, wrong)
        return 1
    return 0
