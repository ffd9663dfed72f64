"""`python -m benchmarks.broadcast_limit`: the largest whole-table broadcast of the cluster keys
that a local session of a given memory holds, measured (docs/cluster-scale.md, "Broadcast
limits"; benchmarks/README.md).

For each size N asked for, the first N rows of the 20M-chunk benchmark table (which begin with
every chunk its logs serve) are a cluster table of their own, and `logmetrics run` of its first
day is forced onto the whole-table broadcast (`backfill.broadcast_max_chunks` = N) with the
given `spark.driver_memory` and engine, into a new warehouse. A size passes when the run exits
0 without a broadcast that ran out of memory (the run would say so in a warning, and compute
the chunk again with the next plan). Sizes are tried in the order given; with `--bisect`, the
largest passing size between the two given is searched for, to a step of `--step` rows.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq

from benchmarks.big_clusters import BIG, run_config
from benchmarks.datasets import REPO, Dataset, ensure_big_clusters
from benchmarks.fixed_cost import _write_config
from benchmarks.measure import run_measured

log = logging.getLogger("benchmarks")

OUT_OF_MEMORY_WARNING = "ran out of memory"


def prefix_table(dataset: Dataset, rows: int) -> Path:
    """The first `rows` rows of the dataset's cluster table, as a table of their own."""
    path = dataset.root / f"clusters_first{rows}" / "part-00000.parquet"
    if path.exists():
        return path.parent
    path.parent.mkdir(parents=True, exist_ok=True)
    source = pq.ParquetFile(dataset.clusters / "part-00000.parquet")
    partial = path.with_name(".partial.parquet")
    left = rows
    with pq.ParquetWriter(partial, source.schema_arrow) as writer:
        for batch in source.iter_batches(batch_size=1_000_000):
            if left <= 0:
                break
            writer.write_batch(batch.slice(0, left))
            left -= batch.num_rows
    partial.replace(path)
    return path.parent


def trial(
    dataset: Dataset, rows: int, driver_memory: str, accelerator: str, out_dir: Path
) -> dict[str, object]:
    """One forced whole-table broadcast of `rows` chunk ids: passed or not, and how it ended."""
    run_dir = out_dir / f"{accelerator}-{driver_memory}-{rows}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    config = run_config(dataset.served_logs, prefix_table(dataset, rows), run_dir)
    config["spark"].update({"driver_memory": driver_memory, "accelerator": accelerator})
    config["backfill"] = {"broadcast_max_chunks": rows}
    path = _write_config(run_dir / "config.yaml", config)
    command = [str(REPO / ".venv" / "bin" / "logmetrics"), "run", "--config", str(path)]
    command += ["--date", dataset.spec.start.isoformat()]
    measured = run_measured(command, log=run_dir / "run.log", cwd=REPO, timeout_s=1800)
    text = measured.log.read_text(errors="replace")
    fell_back = OUT_OF_MEMORY_WARNING in text
    result = {
        "rows": rows,
        "driver_memory": driver_memory,
        "accelerator": accelerator,
        "passed": measured.ok and not fell_back,
        "exit_code": measured.exit_code,
        "fell_back": fell_back,
        "wall_s": round(measured.wall_s, 1),
        "peak_tree_pss_gib": round(measured.peak_tree_pss / 1024**3, 2),
    }
    log.info("%s", json.dumps(result))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    parser = argparse.ArgumentParser(prog="python -m benchmarks.broadcast_limit")
    parser.add_argument("rows", type=int, nargs="+", help="table sizes to try")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--accelerator", choices=("comet", "none"), default="comet")
    parser.add_argument("--bisect", action="store_true", help="search between two sizes")
    parser.add_argument("--step", type=int, default=1_000_000)
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data")
    parser.add_argument("--out-dir", type=Path, default=REPO / "bench-out" / "broadcast-limit")
    args = parser.parse_args(argv)
    dataset = ensure_big_clusters(BIG, args.data_dir.resolve())
    out_dir = args.out_dir.resolve()
    results = []
    if args.bisect:
        lo, hi = sorted(args.rows)[:2]  # lo expected to pass, hi to fail
        while hi - lo > args.step:
            mid = (lo + hi) // 2 // args.step * args.step or lo + args.step
            result = trial(dataset, mid, args.driver_memory, args.accelerator, out_dir)
            results.append(result)
            lo, hi = (mid, hi) if result["passed"] else (lo, mid)
        log.info("largest passing: %d rows (failing at %d)", lo, hi)
    else:
        for rows in args.rows:
            results.append(trial(dataset, rows, args.driver_memory, args.accelerator, out_dir))
    print(json.dumps(results, indent=1))
    return 0
