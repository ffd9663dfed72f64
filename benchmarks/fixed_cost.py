"""`python -m benchmarks.fixed_cost` (also part of `make bench`): what a nightly run costs beyond
the platform it runs on.

Three processes, timed side by side: in each of `--rounds` rounds every one runs once, in
turn, and the medians are reported.

1. **platform floor** (`benchmarks.platform_floor`): start local Spark with Delta exactly as
   logmetrics does, write one 1-row Delta table, exit;
2. **nightly**: `logmetrics run --date D` for one day of 40,000 requests (top-10 lists, ks
   5/10/20, every quality gate, every table, the ledger) into a warehouse that already holds
   the 30 days before D, the steady state of a nightly job;
3. **tiny**: the same for 300 requests of day D, into the same warehouse state;
4. **nightly, crowding off**: the nightly with `crowding.enabled: false`, for what crowding
   (on by default) costs a nightly day.

Each logmetrics run gets its own copy of the 30-day warehouse (the copy is not timed), built
once per benchmark by `logmetrics backfill` of the same checkout. The runs log in JSON; the
breakdown of where the rest goes comes from the phase timings logmetrics logs when a run ends
(`logmetrics.phases`): start-up, inputs, cluster keys, the main pass, gates, each table's write
and the ledger, plus the interpreter start before logmetrics' first line and the exit after
its last.

`--baseline-repo DIR` times another checkout (its own `.venv`, built) in the same rounds,
alternating with this one, so a change is measured against the code before it in one run.

Results: printed, `fixed_cost` in benchmarks/results.json, and the fixed-cost section of
benchmarks/README.md (between its two markers).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from benchmarks import machine, report
from benchmarks.datasets import REPO, Dataset, DatasetSpec, data_options, ensure_dataset
from benchmarks.measure import run_measured

log = logging.getLogger("benchmarks")

START = dt.date(2026, 1, 1)
HISTORY_DAYS = 30
TINY_QUERIES = 300
KS = (5, 10, 20)
THRESHOLD = 4
NO_CROWDING = "nightly-nocrowding"
KINDS = ("floor", "nightly", "tiny", NO_CROWDING)
# The targets: a run's wall time over the platform floor's; a nightly with crowding (the
# default) over one without.
MAX_RATIO = {"nightly": 2.5, "tiny": 2.2}
MAX_CROWDING_RATIO = 1.1
README_MARKERS = ("<!-- bench:fixed-cost:start -->", "<!-- bench:fixed-cost:end -->")


@dataclass(frozen=True)
class Checkout:
    """A logmetrics checkout with its own built `.venv`."""

    label: str
    repo: Path

    @property
    def python(self) -> Path:
        return self.repo / ".venv" / "bin" / "python"

    @property
    def logmetrics(self) -> Path:
        return self.repo / ".venv" / "bin" / "logmetrics"


@dataclass(frozen=True)
class Inputs:
    """The generated data: 31 days of 40,000 requests, and a 300-request copy of the last day."""

    dataset: Dataset
    tiny_logs: Path
    day: dt.date


def prepare_inputs(args: argparse.Namespace) -> Inputs:
    """Generate (or reuse) the dataset; the tiny logs are the day's first well-formed rows."""
    days = HISTORY_DAYS + 1
    spec = DatasetSpec(
        name=f"top10-{days}d-{args.queries_per_day}q-seed{args.seed}",
        start=START,
        days=days,
        queries_per_day=args.queries_per_day,
        seed=args.seed,
        list_length=10,
    )
    dataset = ensure_dataset(spec, args.data_dir)
    day = spec.end()
    tiny_root = args.data_dir / f"{spec.name}-first{TINY_QUERIES}" / "served_logs"
    tiny_file = tiny_root / f"date={day.isoformat()}" / "part-00000.parquet"
    if not tiny_file.exists():
        table = pq.read_table(dataset.served_logs / f"date={day.isoformat()}")
        well_formed = pc.and_(
            pc.and_(pc.is_valid(table["request_id"]), pc.is_valid(table["served_at"])),
            pc.is_valid(table["results"]),
        )
        tiny_file.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.filter(well_formed).slice(0, TINY_QUERIES), tiny_file)
    return Inputs(dataset, tiny_root, day)


def run_config(logs: Path, clusters: Path, warehouse: Path, log_dir: Path) -> dict[str, Any]:
    """A logmetrics config: everything but the inputs, the warehouse and ks is the default."""
    return {
        "inputs": {
            "served_logs": {"path": str(logs), "format": "parquet", "date_partition": "auto"},
            "clusters": {"path": str(clusters), "format": "parquet"},
        },
        "output": {"warehouse": str(warehouse)},
        "metrics": {"ks": list(KS), "threshold": THRESHOLD},
        "spark": {"master": "local[*]", "driver_memory": "4g", "log_dir": str(log_dir)},
    }


def _write_config(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def build_history(checkout: Checkout, inputs: Inputs, out_dir: Path) -> Path:
    """The 30 days before the run's day, backfilled into a warehouse by this checkout."""
    root = out_dir / checkout.label / "history"
    warehouse = root / "warehouse"
    if root.exists():
        shutil.rmtree(root)
    config = _write_config(
        root / "config.yaml",
        run_config(
            inputs.dataset.served_logs, inputs.dataset.clusters, warehouse, root / "spark-logs"
        ),
    )
    first, last = START, inputs.day - dt.timedelta(days=1)
    log.info("%s: backfilling %s..%s as the nightly run's history", checkout.label, first, last)
    command = [str(checkout.logmetrics), "backfill", "--config", str(config)]
    command += ["--start", first.isoformat(), "--end", last.isoformat()]
    measured = run_measured(command, log=root / "backfill.log", cwd=REPO)
    if not measured.ok:
        raise RuntimeError(f"{checkout.label}: the history backfill failed, see {measured.log}")
    return warehouse


def _command(
    kind: str, checkout: Checkout, inputs: Inputs, history: Path, run_dir: Path
) -> list[str]:
    """Set up `run_dir` (emptied first) for one run and return its command."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    logs = inputs.tiny_logs if kind == "tiny" else inputs.dataset.served_logs
    warehouse = run_dir / "warehouse"
    settings = run_config(logs, inputs.dataset.clusters, warehouse, run_dir / "spark-logs")
    if kind == NO_CROWDING:
        settings["crowding"] = {"enabled": False}
    config = _write_config(run_dir / "config.yaml", settings)
    if kind == "floor":
        return [
            str(checkout.python),
            "-m",
            "benchmarks.platform_floor",
            "--config",
            str(config),
            "--out",
            str(run_dir / "one_row"),
        ]
    shutil.copytree(history, warehouse)
    return [
        str(checkout.logmetrics),
        "--log-format",
        "json",
        "run",
        "--config",
        str(config),
        "--date",
        inputs.day.isoformat(),
    ]


def time_rounds(
    checkouts: Sequence[Checkout],
    inputs: Inputs,
    histories: dict[str, Path],
    out_dir: Path,
    rounds: int,
) -> list[dict[str, Any]]:
    """Every (kind, checkout) once per round, in turn; the checkouts' order flips each round."""
    runs = []
    for round_ in range(rounds):
        order = list(checkouts) if round_ % 2 == 0 else list(reversed(checkouts))
        for kind in KINDS:
            for checkout in order:
                run_dir = out_dir / checkout.label / kind
                command = _command(kind, checkout, inputs, histories[checkout.label], run_dir)
                began = time.time()
                measured = run_measured(command, log=run_dir / "run.log", cwd=REPO, timeout_s=900)
                phases = _phases(measured.log, began, measured.wall_s) if kind != "floor" else {}
                runs.append(
                    {
                        "round": round_,
                        "checkout": checkout.label,
                        "kind": kind,
                        "ok": measured.ok,
                        "exit_code": measured.exit_code,
                        "wall_s": measured.wall_s,
                        "peak_tree_pss_gib": round(measured.peak_tree_pss / report.GIB, 3),
                        "peak_tree_rss_gib": round(measured.peak_tree_rss / report.GIB, 3),
                        "phases_s": phases,
                    }
                )
                log.info(
                    "round %d/%d %s %s: %s %.1f s",
                    round_ + 1,
                    rounds,
                    checkout.label,
                    kind,
                    "ok" if measured.ok else f"FAILED (exit {measured.exit_code}, {measured.log})",
                    measured.wall_s,
                )
    return runs


def _phases(log_file: Path, began: float, wall_s: float) -> dict[str, float]:
    """The run's phase timings (logged by logmetrics when it ends), plus the interpreter start
    before its first phase and the exit after its last; empty for a checkout that logs none."""
    fields = None
    for line in log_file.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"phase_seconds"' in line:
            fields = json.loads(line)
    if fields is None:
        return {}
    phases = fields["phases"]
    out = {"interpreter + imports": max(0.0, min(p["started"] for p in phases) - began)}
    out.update(fields["phase_seconds"])
    writes = [p for p in phases if p["name"].startswith("write ")]
    if writes:
        first = min(p["started"] for p in writes)
        out["all writes, wall"] = max(p["started"] + p["seconds"] for p in writes) - first
    last_end = max(p["started"] + p["seconds"] for p in phases)
    out["exit"] = max(0.0, began + wall_s - last_end)
    return {name: round(seconds, 3) for name, seconds in out.items()}


def summarize(runs: list[dict[str, Any]], label: str) -> dict[str, Any]:
    """Medians per kind for one checkout, ratios to its floor, targets, median breakdowns."""
    mine = [r for r in runs if r["checkout"] == label]
    ok = all(r["ok"] for r in mine)
    medians = {
        kind: round(statistics.median(r["wall_s"] for r in mine if r["kind"] == kind), 3)
        for kind in KINDS
    }
    ratios = {kind: round(medians[kind] / medians["floor"], 3) for kind in MAX_RATIO}
    crowding = round(medians["nightly"] / medians[NO_CROWDING], 3)
    breakdown = {}
    for kind in MAX_RATIO:
        timed = [r["phases_s"] for r in mine if r["kind"] == kind and r["phases_s"]]
        names = list(dict.fromkeys(name for phases in timed for name in phases))
        breakdown[kind] = {
            name: round(statistics.median(p.get(name, 0.0) for p in timed), 3) for name in names
        }
    return {
        "ok": ok,
        "wall_s": medians,
        "wall_s_all": {k: [r["wall_s"] for r in mine if r["kind"] == k] for k in KINDS},
        "ratio_to_floor": ratios,
        "targets": {
            **{
                f"{kind} / platform floor": {
                    "ratio": ratios[kind],
                    "limit": limit,
                    "pass": ratios[kind] <= limit,
                }
                for kind, limit in MAX_RATIO.items()
            },
            "nightly / nightly without crowding": {
                "ratio": crowding,
                "limit": MAX_CROWDING_RATIO,
                "pass": crowding <= MAX_CROWDING_RATIO,
            },
        },
        "breakdown_s": breakdown,
    }


def markdown(results: dict[str, Any]) -> str:
    """The README's fixed-cost section."""
    rounds = results["parameters"]["rounds"]
    lines = [
        f"Measured {results['generated_at']} on {results['machine_line']}.",
        f"Wall time of the whole process, median of {rounds} alternating rounds.",
        "",
        "| checkout | platform floor | nightly (40,000 requests) | tiny (300 requests) "
        "| nightly, crowding off | nightly / floor | tiny / floor |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, summary in results["checkouts"].items():
        wall, ratio = summary["wall_s"], summary["ratio_to_floor"]
        name = f"{label} ({results['commits'].get(label, '?')})"
        off = wall.get(NO_CROWDING)
        lines.append(
            f"| {name} | {wall['floor']:.1f} s | {wall['nightly']:.1f} s | {wall['tiny']:.1f} s "
            f"| {_seconds(off, 1)} | {ratio['nightly']:.2f} | {ratio['tiny']:.2f} |"
        )
    ours = results["checkouts"]["this"]
    lines += ["", "| target | measured | limit | |", "|---|---:|---:|---|"]
    for name, target in ours["targets"].items():
        verdict = "pass" if target["pass"] else "**FAIL**"
        ratio, limit = target["ratio"], target["limit"]
        lines.append(f"| {name} | {ratio:.2f} | <= {limit} | {verdict} |")
    breakdown = ours["breakdown_s"]
    if any(breakdown.values()):
        lines += [
            "",
            "Where a run's time goes (this checkout, medians; the writes run side by side, so "
            "their own times add up to more than their wall):",
            "",
            "| phase | nightly | tiny |",
            "|---|---:|---:|",
        ]
        names = list(dict.fromkeys([*breakdown["nightly"], *breakdown["tiny"]]))
        for name in names:
            cells = [_seconds(breakdown[kind].get(name)) for kind in ("nightly", "tiny")]
            lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def _seconds(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f} s"


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Prepare, time, summarize; the results as written to results.json's `fixed_cost`."""
    checkouts = [Checkout("this", REPO)]
    if args.baseline_repo is not None:
        checkouts.append(Checkout("baseline", args.baseline_repo))
    for checkout in checkouts:
        if not checkout.logmetrics.exists():
            raise SystemExit(f"{checkout.repo}: no .venv/bin/logmetrics (run `make install` there)")
    inputs = prepare_inputs(args)
    out_dir = args.out_dir / "fixed-cost"
    histories = {c.label: build_history(c, inputs, out_dir) for c in checkouts}
    runs = time_rounds(checkouts, inputs, histories, out_dir, args.rounds)
    described = machine.describe(REPO)
    return {
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine_line": machine.summary_line(described),
        "commits": {c.label: machine.git_commit(c.repo) for c in checkouts},
        "parameters": {
            "rounds": args.rounds,
            "history_days": HISTORY_DAYS,
            "queries_per_day": args.queries_per_day,
            "tiny_queries": TINY_QUERIES,
            "seed": args.seed,
            "day": inputs.day.isoformat(),
            "ks": list(KS),
        },
        "checkouts": {c.label: summarize(runs, c.label) for c in checkouts},
        "runs": runs,
    }


def record(results: dict[str, Any], results_file: Path, readme: Path) -> str:
    """Put `results` into results.json (key `fixed_cost`) and the README; the section text."""
    return report.record_section(
        results, "fixed_cost", markdown(results), results_file, readme, README_MARKERS
    )


def baseline_option(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--baseline-repo",
        type=Path,
        help="the fixed-cost runs also time this checkout (its .venv built), alternately",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    parser = baseline_option(
        data_options(
            argparse.ArgumentParser(
                prog="python -m benchmarks.fixed_cost", description=__doc__.split("\n")[0]
            )
        )
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three runs")
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results.json")
    parser.add_argument("--readme", type=Path, default=REPO / "benchmarks" / "README.md")
    args = parser.parse_args(argv)
    args.data_dir, args.out_dir = args.data_dir.resolve(), args.out_dir.resolve()
    if args.baseline_repo is not None:
        args.baseline_repo = args.baseline_repo.resolve()
    results = run(args)
    print(record(results, args.results, args.readme))
    return 0 if all(s["ok"] for s in results["checkouts"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
