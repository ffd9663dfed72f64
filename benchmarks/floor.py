"""`python -m benchmarks.floor`: the Spark floor against the DuckDB reference, alternately.

Times `benchmarks.floor_spark` (less than the metric work, the fastest Spark plan found for
it) and the DuckDB reference back to back, `--rounds` times, on the 90-day top-10 workload of
`make bench` (the same generated data, reused), and prints the medians and their ratio; the
runs go to `benchmarks/floor.json`. No correctness check: the floor's outputs are not the
metric. It answers one question: how close to 4x DuckDB can any Spark plan on this machine
come before doing the work logmetrics must do as well?
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from collections.abc import Sequence
from pathlib import Path

from benchmarks import machine
from benchmarks.datasets import REPO, data_options
from benchmarks.engines import DuckDBReference, Engine, FloorSpark, Workload
from benchmarks.measure import run_measured
from benchmarks.report import GIB
from benchmarks.run import dataset, run_dir

log = logging.getLogger("benchmarks")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    args = _parse_args(argv)
    workload = Workload(f"top10-{args.days}d", dataset(args, 10, args.days), args.days)
    engines: list[Engine] = [FloorSpark(), DuckDBReference()]
    walls: dict[str, list[float]] = {engine.name: [] for engine in engines}
    runs = []
    for round_ in range(args.rounds):
        for engine in engines:
            directory = run_dir(args.out_dir / "floor", workload, engine)
            measured = run_measured(
                engine.prepare(workload, directory),
                log=directory.parent / f"{engine.name}.log",
                cwd=REPO,
            )
            if not measured.ok:
                log.error(
                    "%s failed (exit %d): see %s", engine.name, measured.exit_code, measured.log
                )
                return 1
            walls[engine.name].append(measured.wall_s)
            runs.append(
                {
                    "round": round_,
                    "engine": engine.name,
                    "wall_s": measured.wall_s,
                    "peak_tree_pss_gib": round(measured.peak_tree_pss / GIB, 2),
                    "peak_tree_gib": round(measured.peak_tree_rss / GIB, 2),  # RSS sum
                }
            )
            log.info("round %d %s: %.1f s", round_ + 1, engine.name, measured.wall_s)
    floor, duck = (statistics.median(walls[e.name]) for e in engines)
    result = {
        "workload": workload.name,
        "machine": machine.summary_line(machine.describe(REPO)),
        "floor_s": round(floor, 3),
        "duckdb_s": round(duck, 3),
        "floor_over_duckdb": round(floor / duck, 2),
        "runs": runs,
    }
    args.results.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(
        f"{workload.name}: Spark floor {floor:.1f} s, DuckDB {duck:.1f} s, "
        f"floor / DuckDB {floor / duck:.2f} (median of {args.rounds}); 4x DuckDB = {4 * duck:.1f} s"
    )
    return 0


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = data_options(
        argparse.ArgumentParser(
            prog="python -m benchmarks.floor", description=__doc__.split("\n")[0]
        )
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "floor.json")
    args = parser.parse_args(argv)
    args.data_dir, args.out_dir = args.data_dir.resolve(), args.out_dir.resolve()
    return args


if __name__ == "__main__":
    raise SystemExit(main())
