"""`python -m benchmarks.big_clusters` (also part of `make bench`): nightly days against a
cluster table of a real corpus's size, with the project's defaults.

The data (`BIG`, generated once into bench-data/): a cluster table of 20,000,000 chunks (one
Parquet file; 40% of them in multi-member clusters) and two days of 40,000 top-10 requests
served from 1,000,000 of those chunks. In each of `--rounds` rounds, each run a process of its
own with only the paths configured:

1. **first night**: `logmetrics run` of day 1 into a new warehouse: the keys are built and kept;
2. **kept keys**: day 2 into a copy of that warehouse (its kept keys included): reused;
3. **keys rebuilt**: the same with `backfill.keep_cluster_keys: false`.

Reported: wall time and the tree's peak PSS of each, the keys' own phases (`cluster keys` and
its check, `served chunks`) from the phase timings each run logs, beside the small-table
nightly of `benchmarks.fixed_cost`; and the day's daily rows of a run with kept keys and of one
with rebuilt keys, both against the DuckDB reference (`benchmarks.duckdb_reference`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import machine, report
from benchmarks.datasets import REPO, BigClustersSpec, Dataset, ensure_big_clusters
from benchmarks.engines import DuckDBReference, Logmetrics, Workload, fresh_dir
from benchmarks.fixed_cost import _phases, _write_config
from benchmarks.fixed_cost import run_config as small_run_config
from benchmarks.measure import run_check, run_measured

log = logging.getLogger("benchmarks")

BIG = BigClustersSpec(
    name="big-20000000c-2d-40000q-seed7",
    start=dt.date(2026, 1, 1),
    days=2,
    queries_per_day=40_000,
    seed=7,
    served_chunks=1_000_000,
    table_chunks=20_000_000,
)
KINDS = ("first night", "kept keys", "keys rebuilt")
KEY_PHASES = ("cluster keys", "cluster keys check", "served chunks")
README_MARKERS = ("<!-- bench:big-clusters:start -->", "<!-- bench:big-clusters:end -->")
DUCKDB, LOGMETRICS = DuckDBReference(), Logmetrics()


def run_config(logs: Path, clusters: Path, run_dir: Path) -> dict[str, Any]:
    """The project's defaults, but for the paths (and ks and threshold, also the defaults)."""
    return small_run_config(logs, clusters, run_dir / "warehouse", run_dir / "spark-logs")


def _command(kind: str, dataset: Dataset, run_dir: Path, first_night: Path) -> list[str]:
    """Set up `run_dir` for one run and return its command."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    config = run_config(dataset.served_logs, dataset.clusters, run_dir)
    day = BIG.start
    if kind != "first night":
        shutil.copytree(first_night, run_dir / "warehouse")
        day = BIG.start + dt.timedelta(days=1)
    if kind == "keys rebuilt":
        config["backfill"] = {"keep_cluster_keys": False}
    path = _write_config(run_dir / "config.yaml", config)
    logmetrics = str(REPO / ".venv" / "bin" / "logmetrics")
    return [logmetrics, "--log-format", "json", "run", "--config", str(path)] + [
        "--date",
        day.isoformat(),
    ]


def time_rounds(dataset: Dataset, out_dir: Path, rounds: int) -> list[dict[str, Any]]:
    """Every kind once per round; the first night's warehouse of the first round (its kept
    keys included) is the one the other runs start from."""
    runs = []
    first_night = out_dir / "first-night-warehouse"
    for round_ in range(rounds):
        for kind in KINDS:
            run_dir = out_dir / kind.replace(" ", "-")
            command = _command(kind, dataset, run_dir, first_night)
            began = time.time()
            measured = run_measured(command, log=run_dir / "run.log", cwd=REPO, timeout_s=1800)
            if kind == "first night" and measured.ok and not first_night.exists():
                shutil.copytree(run_dir / "warehouse", first_night)
            phases = _phases(measured.log, began, measured.wall_s)
            runs.append(
                {
                    "round": round_,
                    "kind": kind,
                    "ok": measured.ok,
                    "exit_code": measured.exit_code,
                    "wall_s": measured.wall_s,
                    "peak_tree_pss_gib": round(measured.peak_tree_pss / report.GIB, 3),
                    "keys_s": round(sum(phases.get(p, 0.0) for p in KEY_PHASES), 3),
                    "phases_s": phases,
                }
            )
            log.info(
                "round %d/%d %s: %s %.1f s, keys %.1f s",
                round_ + 1,
                rounds,
                kind,
                "ok" if measured.ok else f"FAILED (exit {measured.exit_code}, {measured.log})",
                measured.wall_s,
                runs[-1]["keys_s"],
            )
            if kind == "first night" and not first_night.exists():
                raise RuntimeError(f"the first night failed: see {measured.log}")
    return runs


def check_outputs(dataset: Dataset, out_dir: Path) -> dict[str, Any]:
    """Both days' per-query and daily rows of the last kept-keys and keys-rebuilt warehouses
    (day 1 from the first night, with keys built; day 2 with keys reused, or built again)
    against the DuckDB reference's over both days (`benchmarks.check`, a process of its own)."""
    workload = Workload("big-clusters", dataset, BIG.days)
    reference = out_dir / "duckdb"
    measured = run_measured(
        DUCKDB.prepare(workload, fresh_dir(reference)),
        log=reference / "run.log",
        cwd=REPO,
        timeout_s=1800,
    )
    if not measured.ok:
        return {"check": {"ok": False, "error": f"the reference failed, see {measured.log}"}}
    comparisons = [
        {
            "name": kind,
            "expected": DUCKDB.outputs(reference),
            "actual": LOGMETRICS.outputs(out_dir / kind.replace(" ", "-")),
        }
        for kind in ("kept keys", "keys rebuilt")
    ]
    return run_check(comparisons, out_dir, REPO)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per kind: wall, peak PSS, the keys' phases; and kept / rebuilt ratios."""
    out: dict[str, Any] = {"ok": all(r["ok"] for r in runs), "kinds": {}}
    for kind in KINDS:
        mine = [r for r in runs if r["kind"] == kind]
        if not mine:
            continue
        out["kinds"][kind] = {
            "wall_s": round(statistics.median(r["wall_s"] for r in mine), 3),
            "wall_s_all": [r["wall_s"] for r in mine],
            "peak_tree_pss_gib": max(r["peak_tree_pss_gib"] for r in mine),
            "keys_s": round(statistics.median(r["keys_s"] for r in mine), 3),
            "keys_s_all": [r["keys_s"] for r in mine],
            "phases_s": {
                name: round(statistics.median(r["phases_s"].get(name, 0.0) for r in mine), 3)
                for name in (*KEY_PHASES, "main pass")
            },
        }
    kinds = out["kinds"]
    if "kept keys" in kinds and "keys rebuilt" in kinds:
        pairs = [
            (kept["wall_s"], rebuilt["wall_s"])
            for kept, rebuilt in zip(
                [r for r in runs if r["kind"] == "kept keys"],
                [r for r in runs if r["kind"] == "keys rebuilt"],
                strict=False,
            )
        ]
        out["kept_over_rebuilt_wall"] = round(statistics.median(a / b for a, b in pairs), 3)
    return out


def markdown(results: dict[str, Any]) -> str:
    """The README's section: this workload beside the small-table nightly."""
    summary = results["summary"]
    lines = [
        f"Measured {results['generated_at']} on {results['machine_line']}. "
        f"Medians of {results['parameters']['rounds']} rounds (each: the "
        "three runs in turn); peak PSS of the process tree, the largest over the rounds; keys: "
        "the `cluster keys`, `cluster keys check` and `served chunks` phases, summed.",
        "",
        "| run | wall | peak PSS | keys | of which served chunks |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, k in summary["kinds"].items():
        lines.append(
            f"| {kind} | {k['wall_s']:.1f} s | {k['peak_tree_pss_gib']:.2f} GiB "
            f"| {k['keys_s']:.1f} s | {k['phases_s']['served chunks']:.1f} s |"
        )
    small = results.get("small_nightly")
    if small:
        lines.append(
            f"| small table (200k chunks), nightly of benchmarks.fixed_cost "
            f"| {small['wall_s']:.1f} s | {small['peak_tree_pss_gib']:.2f} GiB "
            f"| {small['keys_s']:.1f} s | - |"
        )
    if "kept_over_rebuilt_wall" in summary:
        lines += [
            "",
            f"Kept keys / keys rebuilt, wall time, median of the rounds' ratios: "
            f"{summary['kept_over_rebuilt_wall']:.2f}.",
        ]
    checks = results.get("checks", {})
    if checks:
        verdicts = ", ".join(
            f"{name}: {'equal' if v.get('ok') else 'DIFFERENT'}" for name, v in checks.items()
        )
        lines += ["", f"Both days' rows against the DuckDB reference: {verdicts}."]
    return "\n".join(lines) + "\n"


def _small_nightly(results_file: Path) -> dict[str, Any] | None:
    """The small-table nightly of `benchmarks.fixed_cost`, as recorded in results.json."""
    if not results_file.exists():
        return None
    fixed = json.loads(results_file.read_text()).get("fixed_cost")
    if not fixed:
        return None
    runs = [r for r in fixed["runs"] if r["checkout"] == "this" and r["kind"] == "nightly"]
    if not runs:
        return None
    keys = [sum(r["phases_s"].get(p, 0.0) for p in KEY_PHASES) for r in runs]
    return {
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "peak_tree_pss_gib": max(r["peak_tree_pss_gib"] for r in runs),
        "keys_s": statistics.median(keys),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Generate (or reuse) the data, time the rounds, check the outputs."""
    out_dir = args.out_dir / "big-clusters"
    dataset = ensure_big_clusters(BIG, args.data_dir)
    runs = time_rounds(dataset, out_dir, args.rounds)
    return {
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine_line": machine.summary_line(machine.describe(REPO)),
        "commit": machine.git_commit(REPO),
        "parameters": {"rounds": args.rounds, "dataset": BIG.marker()},
        "summary": summarize(runs),
        "checks": check_outputs(dataset, out_dir),
        "small_nightly": _small_nightly(args.results),
        "runs": runs,
    }


def record(results: dict[str, Any], results_file: Path, readme: Path) -> str:
    """Put `results` into results.json (key `big_clusters`) and the README; the section."""
    return report.record_section(
        results, "big_clusters", markdown(results), results_file, readme, README_MARKERS
    )


def ok(results: dict[str, Any]) -> bool:
    """Every run finished and both warehouses equal the reference's."""
    checks = results["checks"]
    return bool(results["summary"]["ok"] and checks and all(v.get("ok") for v in checks.values()))


def stage_args(argv: Sequence[str] | None, module: str, doc: str) -> argparse.Namespace:
    """The command line of a stage of `make bench` run alone (`python -m benchmarks.<module>`):
    its rounds, where its data and runs go, and where its results are recorded."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks.{module}", description=doc.split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data")
    parser.add_argument("--out-dir", type=Path, default=REPO / "bench-out")
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results.json")
    parser.add_argument("--readme", type=Path, default=REPO / "benchmarks" / "README.md")
    args = parser.parse_args(argv)
    args.data_dir, args.out_dir = args.data_dir.resolve(), args.out_dir.resolve()
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = stage_args(argv, "big_clusters", __doc__)
    results = run(args)
    print(record(results, args.results, args.readme))
    return 0 if ok(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
