"""From the timed runs to the numbers: medians, ratios, targets, the JSON and the README table.

Wall times are medians over a (workload, engine)'s runs; peak memory is the largest seen in any
of them. The README's results section sits between two marker comments and is rewritten whole.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

README_START = "<!-- bench:results:start -->"
README_END = "<!-- bench:results:end -->"
GIB = 2**30

# The targets.
MAX_RATIO_TO_DUCKDB = 4.0
MAX_GROWTH_90_OVER_30 = 3.3
MAX_PEAK_MEMORY_BYTES = 4 * GIB


@dataclass(frozen=True)
class RunRecord:
    """One timed run of one engine over one workload."""

    workload: str
    engine: str
    round: int
    exit_code: int
    wall_s: float
    peak_tree_rss: int
    peak_jvm_rss: int
    log: str
    timed_out: bool = False
    steps_s: dict[str, float] | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class WorkloadInfo:
    """What a workload is, for the report: its size and the served results it holds."""

    name: str
    label: str
    days: int
    list_length: int
    served_requests: int | None
    served_results: int | None


def engine_summary(runs: Sequence[RunRecord]) -> dict[str, Any]:
    """Median wall time and worst peak memory over the successful runs (all runs listed)."""
    good = [r for r in runs if r.ok]
    summary: dict[str, Any] = {
        "ok": len(good) == len(runs) and bool(runs),
        "runs": len(runs),
        "wall_s_all": [r.wall_s for r in runs],
    }
    if good:
        summary["wall_s"] = round(statistics.median(r.wall_s for r in good), 3)
        summary["peak_tree_rss_gib"] = round(max(r.peak_tree_rss for r in good) / GIB, 3)
        summary["peak_jvm_rss_gib"] = round(max(r.peak_jvm_rss for r in good) / GIB, 3)
    steps = [r.steps_s for r in good if r.steps_s]
    if steps:
        summary["steps_s"] = {
            name: round(statistics.median(s[name] for s in steps), 3) for name in steps[0]
        }
    return summary


def summarize(
    workloads: Sequence[WorkloadInfo], runs: Sequence[RunRecord]
) -> dict[str, dict[str, Any]]:
    """Per workload: its size and, per engine, `engine_summary`."""
    out: dict[str, dict[str, Any]] = {}
    for info in workloads:
        engines = sorted({r.engine for r in runs if r.workload == info.name})
        out[info.name] = {
            "label": info.label,
            "days": info.days,
            "list_length": info.list_length,
            "served_requests": info.served_requests,
            "served_results": info.served_results,
            "engines": {
                e: engine_summary([r for r in runs if r.workload == info.name and r.engine == e])
                for e in engines
            },
        }
        wall = _wall(out[info.name], "logmetrics")
        if wall and info.served_results:
            out[info.name]["logmetrics_results_per_s"] = round(info.served_results / wall)
    return out


def targets(
    summary: dict[str, dict[str, Any]], main: str, short: str, checks_ok: bool | None
) -> list[dict[str, Any]]:
    """The issue's pass/fail lines: `main` is the 90-day workload, `short` the 30-day one."""
    ours, duckdb, ours_short = (
        _wall(summary[main], "logmetrics"),
        _wall(summary[main], "duckdb"),
        _wall(summary[short], "logmetrics"),
    )
    peak = summary[main]["engines"].get("logmetrics", {}).get("peak_tree_rss_gib")
    ratio = ours / duckdb if ours and duckdb else None
    growth = ours / ours_short if ours and ours_short else None
    long, brief = summary[main]["label"], summary[short]["label"]
    return [
        _target(f"logmetrics / DuckDB, {long}", ratio, MAX_RATIO_TO_DUCKDB, "{:.2f}", "<= 4"),
        _target(f"logmetrics {long} / {brief}", growth, MAX_GROWTH_90_OVER_30, "{:.2f}", "<= 3.3"),
        _target(
            f"logmetrics peak memory, process tree, {long}",
            peak,
            MAX_PEAK_MEMORY_BYTES / GIB,
            "{:.2f} GiB",
            "<= 4 GiB",
        ),
        {
            "name": "outputs equal the DuckDB reference's",
            "measured": {None: "not checked", True: "yes", False: "NO"}[checks_ok],
            "limit": "exact",
            "pass": checks_ok,
        },
    ]


def _target(name: str, value: float | None, limit: float, fmt: str, shown: str) -> dict[str, Any]:
    return {
        "name": name,
        "value": None if value is None else round(value, 3),
        "measured": "n/a" if value is None else fmt.format(value),
        "limit": shown,
        "pass": None if value is None else value <= limit,
    }


def _wall(workload: dict[str, Any], engine: str) -> float | None:
    value = workload["engines"].get(engine, {}).get("wall_s")
    return float(value) if value is not None else None


def markdown(results: dict[str, Any]) -> str:
    """The README's results section: the table, the targets, where the time goes."""
    lines = [
        f"Measured {results['generated_at']} on {results['machine_line']}.",
        f"Wall time of the whole process, median of {results['parameters']['repeats']} runs "
        f"(naive Spark: {results['parameters']['naive_repeats']}); peak RSS of the process "
        "tree (and of its largest JVM) over those runs.",
        "",
        "| workload | served results | logmetrics | s/day | DuckDB | naive Spark "
        "| logmetrics / DuckDB | logmetrics / naive | results/s | peak RSS, tree / JVM |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for workload in results["workloads"].values():
        lines.append(_table_row(workload))
    lines += ["", "| target | measured | limit | |", "|---|---:|---:|---|"]
    for target in results["targets"]:
        verdict = {None: "n/a", True: "pass", False: "**FAIL**"}[target["pass"]]
        lines.append(f"| {target['name']} | {target['measured']} | {target['limit']} | {verdict} |")
    main = next(iter(results["workloads"].values()))["label"]
    driver_memory = results["parameters"]["driver_memory"]
    lines += ["", *_time_lines(results.get("where_the_time_goes"), main, driver_memory)]
    return "\n".join(lines) + "\n"


def _table_row(workload: dict[str, Any]) -> str:
    ours, duckdb, naive = (_wall(workload, e) for e in ("logmetrics", "duckdb", "naive"))
    engine = workload["engines"].get("logmetrics", {})
    memory = (
        f"{engine['peak_tree_rss_gib']:.2f} / {engine['peak_jvm_rss_gib']:.2f} GiB"
        if "peak_tree_rss_gib" in engine
        else "n/a"
    )
    results_per_s = workload.get("logmetrics_results_per_s")
    cells = [
        workload["label"],
        _count(workload.get("served_results")),
        _seconds(ours),
        _seconds(ours / workload["days"] if ours else None),
        _seconds(duckdb),
        _seconds(naive),
        _ratio(ours, duckdb),
        _ratio(ours, naive),
        _count(results_per_s),
        memory,
    ]
    return "| " + " | ".join(cells) + " |"


def _time_lines(summary: dict[str, Any] | None, workload: str, driver_memory: str) -> list[str]:
    if not summary:
        return []
    memory = summary["jvm_memory"]
    lines = [
        f"Where logmetrics' time goes ({workload}, Spark event log): "
        f"{summary['app_wall_s']:.0f} s from "
        f"session start to stop, {summary['time_in_jobs_s']:.0f} s with a Spark job running, "
        f"{summary['time_outside_jobs_s']:.0f} s on the driver alone; {summary['jobs']} jobs, "
        f"{summary['stages']} stages, {summary['tasks']} tasks. Driver JVM as Spark sampled it: "
        f"heap used {memory['heap_used_peak_gib']:.2f} GiB at most (driver memory "
        f"{driver_memory}), off-heap "
        f"{memory['off_heap_peak_gib']:.2f} GiB, GC {memory['gc_time_s']:.1f} s. Slowest stages:",
        "",
        "| stage | what | duration | tasks | executor time |",
        "|---:|---|---:|---:|---:|",
    ]
    for stage in summary["top_stages"][:5]:
        what = stage["description"].replace("|", "/")
        lines.append(
            f"| {stage['stage_id']} | {what} | {stage['duration_s']:.1f} s | {stage['tasks']} "
            f"| {stage['executor_run_s']:.1f} s |"
        )
    return lines


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if not a or not b else f"{a / b:.2f}"


def _count(value: int | None) -> str:
    if value is None:
        return "n/a"
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    return f"{value / 1000:.0f}k" if value >= 1000 else str(value)


def update_readme(
    readme: Path, section: str, markers: tuple[str, str] = (README_START, README_END)
) -> bool:
    """Replace what is between the markers with `section`; False when the markers are missing."""
    start, end = markers
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(f"{head}{start}\n{section}{end}{tail}", encoding="utf-8")
    return True
