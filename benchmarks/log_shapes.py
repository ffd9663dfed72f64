"""`python -m benchmarks.log_shapes` (also part of `make bench`): the 90 days of top-10 lists
read as teams store them (docs/inputs.md, "Logs as they are"), against the contract's own shape.

The data: `make bench`'s top-10 dataset (Parquet in `date=` partitions, the contract's names),
and two copies of it written once beside it with pyarrow (bench-data/<dataset>-shapes/):
- **renamed**: the same nested lists under a team's names: `query_id`, `ts`, `hits` of
  `{doc, pos}` (read with `inputs.served_logs.columns`);
- **exploded**: one row per served result (`qid`, `served`, `position`, `chunk`), an empty list
  as one row without a chunk id (`shape: exploded`).

Each of `--rounds` rounds runs, one process each, `logmetrics backfill` of the 90 days into a
new warehouse with the project's defaults: **nested** (the contract's shape and names),
**renamed**, **exploded**, and **nested-before** (the contract's logs through the code of
`--before`, a commit before logs could be read as they are: the same .venv, its `src/` first on
the path); the order flips each round. Reported: the medians, and the median of the rounds'
ratios renamed / nested (target 1.05), exploded / nested (target 1.3) and nested /
nested-before. The renamed and before runs' per-query and daily rows are checked against the
nested run's, the exploded run's against a run (untimed) of its own requests stored nested again
(`regrouped`: the exploded shape counts a list's repeated entry once and merges copies served at
one instant), with `benchmarks.check`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks import machine, report
from benchmarks.big_clusters import stage_args
from benchmarks.datasets import REPO, Dataset, DatasetSpec, ensure_dataset
from benchmarks.engines import Logmetrics, Workload, fresh_dir
from benchmarks.measure import run_check, run_measured

log = logging.getLogger("benchmarks")

SPEC = DatasetSpec(
    name="top10-90d-40000q-seed7",
    start=dt.date(2026, 1, 1),
    days=90,
    queries_per_day=40_000,
    seed=7,
    list_length=10,
)
BEFORE = "f58a4a4"
"""The last commit before logs could be read in other shapes and names."""
RENAMED_COLUMNS = {"request_id": "query_id", "served_at": "ts", "results": "hits"}
RENAMED_FIELDS = {"chunk_id": "doc", "rank": "pos"}
EXPLODED_COLUMNS = {
    "request_id": "qid",
    "served_at": "served",
    "rank": "position",
    "chunk_id": "chunk",
}
KINDS = ("nested", "renamed", "exploded", "nested-before")
FORMAT = 2
"""The copies' layout: a change to it writes them again."""
TARGETS = {"renamed": 1.05, "exploded": 1.3}
README_MARKERS = ("<!-- bench:log-shapes:start -->", "<!-- bench:log-shapes:end -->")


def ensure_shapes(dataset: Dataset, data_root: Path) -> dict[str, Path]:
    """The renamed and exploded copies of the dataset's logs, written once (a marker file
    names the dataset they were made from)."""
    root = data_root / f"{dataset.spec.name}-shapes"
    marker = root / "_made_from"
    made = {kind: root / kind for kind in ("renamed", "exploded", "regrouped")}
    if marker.exists() and marker.read_text() == f"{dataset.spec.name} {FORMAT}":
        return made
    log.info("log shapes: writing the renamed and exploded copies into %s", root)
    fresh_dir(root)
    for source in sorted(dataset.served_logs.rglob("*.parquet")):
        relative = source.relative_to(dataset.served_logs)
        table = pq.read_table(source, partitioning=None)
        copies = (
            ("renamed", _renamed(table)),
            ("exploded", _exploded(table)),
            ("regrouped", _regrouped(table)),
        )
        for kind, converted in copies:
            target = root / kind / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(converted, target)
    marker.write_text(f"{dataset.spec.name} {FORMAT}")
    return made


def _renamed(table: pa.Table) -> pa.Table:
    results = table.column("results").combine_chunks()
    entries = results.flatten()
    hits = pa.ListArray.from_arrays(
        results.offsets,
        pa.StructArray.from_arrays(
            [pc.struct_field(entries, "chunk_id"), pc.struct_field(entries, "rank")],
            names=["doc", "pos"],
        ),
        mask=results.is_null(),
    )
    columns = {RENAMED_COLUMNS.get(name, name): table.column(name) for name in table.column_names}
    columns["hits"] = hits
    return pa.table(columns)


def _exploded(table: pa.Table) -> pa.Table:
    """A row per entry of each list, the rows of a request in its list's order; an empty list
    as one row without a chunk id; a null list as no row."""
    results = table.column("results").combine_chunks()
    parents = pc.list_parent_indices(results)
    entries = results.flatten()
    empty = pc.indices_nonzero(
        pc.and_(pc.equal(pc.list_value_length(results), 0), results.is_valid())
    )
    rows = pa.concat_arrays([parents, empty.cast(parents.type)])
    nulls = pa.nulls(len(empty))
    return pa.table(
        {
            "qid": table.column("request_id").take(rows),
            "served": table.column("served_at").take(rows),
            "position": pa.concat_arrays(
                [pc.struct_field(entries, "rank"), nulls.cast(pa.int32())]
            ),
            "chunk": pa.concat_arrays(
                [pc.struct_field(entries, "chunk_id"), nulls.cast(pa.string())]
            ),
        }
    )


def _regrouped(table: pa.Table) -> pa.Table:
    """The requests the exploded copy holds, stored nested again: the rows `_exploded` writes,
    read as docs/inputs.md's exploded shape reads them (a copy per request_id and served_at, an
    entry repeated within it once, a lone entry without a chunk id an empty list; a null list
    is no row). What the exploded run's tables are checked against."""
    copies: dict[tuple[Any, Any], list[tuple[Any, Any]]] = {}
    request_ids = table.column("request_id").to_pylist()
    served = table.column("served_at").to_pylist()
    for request_id, at, entries in zip(
        request_ids, served, table.column("results").to_pylist(), strict=True
    ):
        if entries is None:
            continue
        kept = copies.setdefault((request_id, at), [])
        for entry in entries or [{"rank": None, "chunk_id": None}]:
            pair = (entry["rank"], entry["chunk_id"])
            if pair not in kept:
                kept.append(pair)
    rows = []
    for (request_id, at), pairs in copies.items():
        if len(pairs) == 1 and pairs[0][1] is None:
            pairs = []
        results = [{"rank": rank, "chunk_id": chunk} for rank, chunk in pairs]
        rows.append({"request_id": request_id, "served_at": at, "results": results})
    schema = pa.schema([table.schema.field(n) for n in ("request_id", "served_at", "results")])
    return pa.Table.from_pylist(rows, schema)


def _engines(shapes: dict[str, Path]) -> dict[str, Logmetrics]:
    renamed = {**RENAMED_COLUMNS, **RENAMED_FIELDS}
    return {
        "nested": Logmetrics("nested"),
        "renamed": Logmetrics(
            "renamed",
            {"inputs": {"served_logs": {"path": str(shapes["renamed"]), "columns": renamed}}},
        ),
        "exploded": Logmetrics(
            "exploded",
            {
                "inputs": {
                    "served_logs": {
                        "path": str(shapes["exploded"]),
                        "shape": "exploded",
                        "columns": EXPLODED_COLUMNS,
                    }
                }
            },
        ),
        "nested-before": Logmetrics("nested-before"),
        "regrouped": Logmetrics(
            "regrouped", {"inputs": {"served_logs": {"path": str(shapes["regrouped"])}}}
        ),
    }


def _before_source(commit: str, out_dir: Path) -> Path:
    """The `src/` of `commit`, exported under out_dir (once)."""
    target = out_dir / f"src-{commit}"
    if not (target / "src").is_dir():
        fresh_dir(target)
        archive = subprocess.run(
            ["git", "archive", commit, "src"], cwd=REPO, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "src"


def time_rounds(
    dataset: Dataset,
    shapes: dict[str, Path],
    out_dir: Path,
    rounds: int,
    before: Path,
) -> list[dict[str, Any]]:
    def command(kind: str, run_dir: Path) -> tuple[list[str], dict[str, str] | None]:
        command = _engines(shapes)[kind].prepare(Workload("top10-90d", dataset, SPEC.days), run_dir)
        if kind != "nested-before":
            return command, None
        command = [sys.executable, "-m", "logmetrics.cli", *command[1:]]
        return command, {**os.environ, "PYTHONPATH": str(before)}

    return alternating_rounds(KINDS, rounds, out_dir, command)


def alternating_rounds(
    kinds: Sequence[str],
    rounds: int,
    out_dir: Path,
    command: Callable[[str, Path], tuple[list[str], dict[str, str] | None]],
) -> list[dict[str, Any]]:
    """`rounds` rounds of one process per kind (`command(kind, run_dir)`: its argument list and
    environment), the order flipped each round: each run's wall time and the peak PSS of its
    process tree."""
    runs = []
    for round_ in range(rounds):
        order = list(kinds) if round_ % 2 == 0 else list(reversed(kinds))
        for kind in order:
            run_dir = out_dir / kind
            argv, env = command(kind, run_dir)
            measured = run_measured(
                argv, log=run_dir / "run.log", env=env, cwd=REPO, timeout_s=3600
            )
            runs.append(
                {
                    "round": round_,
                    "kind": kind,
                    "ok": measured.ok,
                    "exit_code": measured.exit_code,
                    "wall_s": measured.wall_s,
                    "peak_tree_pss_gib": round(measured.peak_tree_pss / report.GIB, 3),
                }
            )
            log.info(
                "round %d/%d %s: %s %.1f s",
                round_ + 1,
                rounds,
                kind,
                "ok" if measured.ok else f"FAILED (exit {measured.exit_code}, {measured.log})",
                measured.wall_s,
            )
    return runs


def summarize(
    runs: list[dict[str, Any]],
    kinds: Sequence[str] = KINDS,
    pairs: dict[str, tuple[str, str]] | None = None,
    targets: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Medians per kind, and the medians of the rounds' ratios `pairs` (name: (a, b), a / b;
    the renamed and exploded shapes against nested and nested against nested-before)."""
    if pairs is None:
        pairs = {
            "renamed": ("renamed", "nested"),
            "exploded": ("exploded", "nested"),
            "nested / nested-before": ("nested", "nested-before"),
        }
    targets = TARGETS if targets is None else targets
    out: dict[str, Any] = {"ok": all(r["ok"] for r in runs), "kinds": {}, "ratios": {}}
    by_round: dict[int, dict[str, float]] = {}
    for r in runs:
        by_round.setdefault(r["round"], {})[r["kind"]] = r["wall_s"]
    for kind in kinds:
        walls = [r["wall_s"] for r in runs if r["kind"] == kind]
        out["kinds"][kind] = {
            "wall_s": round(statistics.median(walls), 1),
            "wall_s_all": walls,
            "peak_tree_pss_gib": max(r["peak_tree_pss_gib"] for r in runs if r["kind"] == kind),
        }
    for name, (a, b) in pairs.items():
        ratios = [w[a] / w[b] for w in by_round.values() if a in w and b in w]
        out["ratios"][name] = {
            "median": round(statistics.median(ratios), 3),
            "all": [round(x, 3) for x in ratios],
            "target": targets.get(name),
        }
    return out


def check_outputs(
    dataset: Dataset, out_dir: Path, engines: dict[str, Logmetrics]
) -> dict[str, Any]:
    """The renamed and before runs' rows against the nested run's; the exploded run's against
    a run of the same requests stored nested again (`_regrouped`: the exploded shape counts a
    repeated entry of a list once and merges copies served at the same instant, so its
    requests are not quite the nested logs')."""
    workload = Workload("top10-90d", dataset, SPEC.days)
    regrouped = out_dir / "regrouped"
    measured = run_measured(
        engines["regrouped"].prepare(workload, regrouped),
        log=regrouped / "run.log",
        cwd=REPO,
        timeout_s=3600,
    )
    if not measured.ok:
        return {"check": {"ok": False, "error": f"the regrouped run failed, see {measured.log}"}}
    expected = engines["nested"].outputs(out_dir / "nested")
    comparisons = [
        {"name": kind, "expected": expected, "actual": engines[kind].outputs(out_dir / kind)}
        for kind in ("renamed", "nested-before")
    ]
    comparisons.append(
        {
            "name": "exploded",
            "expected": engines["regrouped"].outputs(regrouped),
            "actual": engines["exploded"].outputs(out_dir / "exploded"),
        }
    )
    return run_check(comparisons, out_dir, REPO)


def markdown(
    results: dict[str, Any],
    data: str = "the 90 days of top-10 lists (35.9M served results)",
) -> str:
    """The section: when and where, each kind's medians, the ratios, the checks."""
    summary = results["summary"]
    runs = {2: "two", 3: "three", 4: "four"}.get(len(summary["kinds"]), str(len(summary["kinds"])))
    lines = [
        f"Measured {results['generated_at']} on {results['machine_line']}, commit "
        f"{results['commit']}: `logmetrics backfill` of {data}, medians of "
        f"{results['parameters']['rounds']} rounds (the {runs} runs in turn, the order flipped "
        "each round), peak PSS of the process tree.",
        "",
        "| logs | wall | peak PSS |",
        "|---|---:|---:|",
    ]
    for kind, k in summary["kinds"].items():
        lines.append(f"| {kind} | {k['wall_s']:.1f} s | {k['peak_tree_pss_gib']:.2f} GiB |")
    lines += ["", "| ratio (median of the rounds') | value | target |", "|---|---:|---:|"]
    for name, ratio in summary["ratios"].items():
        target = "-" if ratio["target"] is None else f"{ratio['target']:.2f}"
        shown = name if "/" in name else f"{name} / nested"
        lines.append(f"| {shown} | {ratio['median']:.3f} | {target} |")
    checks = results.get("checks", {})
    if checks:
        verdicts = ", ".join(
            f"{name}: {'equal' if v.get('ok') else 'DIFFERENT'}" for name, v in checks.items()
        )
        lines += ["", f"Per-query and daily rows against the nested run's: {verdicts}."]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> dict[str, Any]:
    out_dir = args.out_dir / "log-shapes"
    dataset = ensure_dataset(SPEC, args.data_dir)
    shapes = ensure_shapes(dataset, args.data_dir)
    before = _before_source(getattr(args, "before", BEFORE), out_dir)
    runs = time_rounds(dataset, shapes, out_dir, args.rounds, before)
    return {
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine_line": machine.summary_line(machine.describe(REPO)),
        "commit": machine.git_commit(REPO),
        "parameters": {"rounds": args.rounds, "dataset": SPEC.marker(), "before": BEFORE},
        "summary": summarize(runs),
        "checks": check_outputs(dataset, out_dir, _engines(shapes)),
        "runs": runs,
    }


def record(results: dict[str, Any], results_file: Path, readme: Path) -> str:
    return report.record_section(
        results, "log_shapes", markdown(results), results_file, readme, README_MARKERS
    )


def ok(results: dict[str, Any]) -> bool:
    checks = results["checks"]
    return bool(results["summary"]["ok"] and checks and all(v.get("ok") for v in checks.values()))


def main(argv: Sequence[str] | None = None) -> int:
    args = stage_args(argv, "log_shapes", __doc__)
    results = run(args)
    print(record(results, args.results, args.readme))
    return 0 if ok(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
