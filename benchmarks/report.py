"""From the timed runs to the numbers: medians, ratios, targets, the JSON and the README table.

Wall times are medians over a (workload, engine)'s runs; peak memory (PSS of the process tree,
and the RSS figures beside it) is the largest seen in any of them. The README's results section
sits between two marker comments and is rewritten whole.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.engines import (
    DUCKDB,
    FLOOR,
    FLOOR_COMET,
    LOGMETRICS,
    LOGMETRICS_NO_CROWDING,
    LOGMETRICS_PLAIN,
    NAIVE,
)

log = logging.getLogger("benchmarks")

README_START = "<!-- bench:results:start -->"
README_END = "<!-- bench:results:end -->"
GIB = 2**30

# The issues' targets (27 for the floors and the slopes).
MAX_RATIO_TO_DUCKDB = 4.5  # logmetrics (defaults, Comet on)
MAX_PLAIN_OVER_FLOOR = 1.4  # logmetrics-plain / the plain-Spark floor, wall and slope
MAX_COMET_OVER_FLOOR = 1.5  # logmetrics (Comet) / the floor with Comet, wall and slope
MAX_PLAIN_OVER_NAIVE = 0.35  # logmetrics-plain / the naive plan
MAX_GROWTH_90_OVER_30 = 3.3
MAX_PEAK_MEMORY_BYTES = 4 * GIB  # PSS of the process tree
MAX_ONE_CHUNK_OVER_DEFAULT = 1.1
MAX_CROWDING_OVER_OFF = 1.2  # logmetrics (crowding on, the default) / with crowding off
ENGINE_LABELS = {
    DUCKDB: "DuckDB",
    FLOOR: "Spark floor",
    FLOOR_COMET: "Spark floor, Comet",
    NAIVE: "naive Spark",
}
SLOPE_ENGINES = (LOGMETRICS, LOGMETRICS_PLAIN, FLOOR_COMET, FLOOR, DUCKDB)


@dataclass(frozen=True)
class RunRecord:
    """One timed run of one engine over one workload."""

    workload: str
    engine: str
    round: int
    exit_code: int
    wall_s: float
    peak_tree_pss: int
    peak_jvm_pss: int
    peak_tree_rss: int
    peak_jvm_rss: int
    log: str
    timed_out: bool = False
    steps_s: dict[str, float] | None = None
    samples: int = 0
    pss_samples: int = 0
    pss_fallbacks: int = 0
    sampler_cpu_s: float = 0.0

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
        "runs_ok": len(good),
        "wall_s_all": [r.wall_s for r in runs],
    }
    if good:
        summary["wall_s"] = round(statistics.median(r.wall_s for r in good), 3)
        for field in ("peak_tree_pss", "peak_jvm_pss", "peak_tree_rss", "peak_jvm_rss"):
            summary[f"{field}_gib"] = round(max(getattr(r, field) for r in good) / GIB, 3)
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
        engines = list(dict.fromkeys(r.engine for r in runs if r.workload == info.name))
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
        for summary in out[info.name]["engines"].values():
            if summary.get("wall_s") and info.served_results:
                summary["results_per_s"] = round(info.served_results / summary["wall_s"])
        wall = _wall(out[info.name], LOGMETRICS)
        if wall and info.served_results:
            out[info.name]["logmetrics_results_per_s"] = round(info.served_results / wall)
    return out


@dataclass(frozen=True)
class Chunking:
    """The one-chunk comparison: `engine` runs the main workload's `days` in one chunk, the
    default logmetrics in chunks of `default_days_per_chunk`."""

    engine: str
    days: int
    default_days_per_chunk: int | None

    def label(self) -> str:
        """E.g. "one 90-day chunk / 3 chunks of 30 days"."""
        size = self.default_days_per_chunk
        if not size:
            return f"one {self.days}-day chunk / the default chunks"
        sizes = [min(size, self.days - start) for start in range(0, self.days, size)]
        if len(set(sizes)) == 1:
            default = f"{len(sizes)} chunk{'s' if len(sizes) > 1 else ''} of {sizes[0]} days"
        else:
            default = f"{len(sizes)} chunks of {'+'.join(map(str, sizes))} days"
        return f"one {self.days}-day chunk / {default}"


def targets(
    summary: dict[str, dict[str, Any]],
    main: str,
    short: str,
    chunking: Chunking,
    checks: dict[str, Any],
    expected_checks: Sequence[str],
) -> list[dict[str, Any]]:
    """The issue's pass/fail lines, all from one run: `main` is the 90-day workload, `short` the
    30-day one; `expected_checks` the comparisons with the reference a complete run makes."""
    ours, no_crowding, plain, duckdb, floor, floor_comet, naive, one_chunk = (
        _wall(summary[main], engine)
        for engine in (
            LOGMETRICS,
            LOGMETRICS_NO_CROWDING,
            LOGMETRICS_PLAIN,
            DUCKDB,
            FLOOR,
            FLOOR_COMET,
            NAIVE,
            chunking.engine,
        )
    )
    ours_short = _wall(summary[short], LOGMETRICS)
    peak = summary[main]["engines"].get(LOGMETRICS, {}).get("peak_tree_pss_gib")
    long, brief = summary[main]["label"], summary[short]["label"]
    slope = slopes(summary, main, short)
    return [
        _target(
            f"logmetrics / DuckDB, {long}",
            _divide(ours, duckdb),
            MAX_RATIO_TO_DUCKDB,
            "{:.2f}",
            "<= 4.5",
        ),
        _target(
            f"logmetrics-plain / Spark floor, {long}",
            _divide(plain, floor),
            MAX_PLAIN_OVER_FLOOR,
            "{:.2f}",
            "<= 1.4",
        ),
        _target(
            f"logmetrics / Spark floor with Comet, {long}",
            _divide(ours, floor_comet),
            MAX_COMET_OVER_FLOOR,
            "{:.2f}",
            "<= 1.5",
        ),
        _target(
            "slope of logmetrics-plain / of the Spark floor",
            _slope_ratio(slope.get(LOGMETRICS_PLAIN), slope.get(FLOOR)),
            MAX_PLAIN_OVER_FLOOR,
            "{:.2f}",
            "<= 1.4",
        ),
        _target(
            "slope of logmetrics / of the Spark floor with Comet",
            _slope_ratio(slope.get(LOGMETRICS), slope.get(FLOOR_COMET)),
            MAX_COMET_OVER_FLOOR,
            "{:.2f}",
            "<= 1.5",
        ),
        _target(
            f"logmetrics-plain / naive Spark, {long}",
            _divide(plain, naive),
            MAX_PLAIN_OVER_NAIVE,
            "{:.2f}",
            "<= 0.35",
        ),
        _target(
            f"logmetrics {long} / {brief}",
            _divide(ours, ours_short),
            MAX_GROWTH_90_OVER_30,
            "{:.2f}",
            "<= 3.3",
        ),
        _target(
            f"logmetrics peak PSS, process tree, {long}",
            peak,
            MAX_PEAK_MEMORY_BYTES / GIB,
            "{:.2f} GiB",
            "<= 4 GiB",
        ),
        _target(
            f"{chunking.engine} / logmetrics, {long} ({chunking.label()})",
            _divide(one_chunk, ours),
            MAX_ONE_CHUNK_OVER_DEFAULT,
            "{:.2f}",
            "<= 1.1",
        ),
        _target(
            f"logmetrics / logmetrics-nocrowding (crowding on / off), {long}",
            _divide(ours, no_crowding),
            MAX_CROWDING_OVER_OFF,
            "{:.2f}",
            "<= 1.2",
        ),
        outputs_target(checks, expected_checks),
    ]


def slopes(summary: dict[str, dict[str, Any]], main: str, short: str) -> dict[str, float]:
    """Per engine of SLOPE_ENGINES run on both workloads: (median wall of `main` - of `short`)
    per 60 days, in seconds: the cost of the extra days without the fixed cost (start-up,
    commits), which both runs pay."""
    days = summary[main]["days"] - summary[short]["days"]
    out = {}
    for engine in SLOPE_ENGINES:
        long, brief = _wall(summary[main], engine), _wall(summary[short], engine)
        if long is not None and brief is not None and days > 0:
            out[engine] = round((long - brief) * 60 / days, 3)
    return out


def outputs_target(checks: dict[str, Any], expected: Sequence[str]) -> dict[str, Any]:
    """Every expected comparison made and equal (a failed run leaves its comparison missing)."""
    equal = [name for name in expected if checks.get(name, {}).get("ok")]
    differing = [name for name, verdict in checks.items() if not verdict.get("ok")]
    missing = [name for name in expected if name not in checks]
    passed = None if not checks else not differing and not missing
    return {
        "name": "outputs equal the DuckDB reference's (every logmetrics variant and the naive "
        "plan, on every workload it ran)",
        "measured": "not checked" if not checks else f"{len(equal)} of {len(expected)} equal",
        "limit": "exact",
        "pass": passed,
        "differing": differing,
        "missing": missing,
    }


def _divide(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _slope_ratio(ours: float | None, floor: float | None) -> float | None:
    """A slope over the floor's, none (n/a) unless the floor's slope is positive: a floor whose
    90 days ran no slower than its 30 days has no per-row cost to compare with, and the ratio's
    sign would turn a miss into a pass (the Comet floor's slope was -1.4 s on 2026-12-04)."""
    return _divide(ours, floor) if floor is not None and floor > 0 else None


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
    parameters = results["parameters"]
    lines = [
        f"Measured {results['generated_at']} on {results['machine_line']}.",
        f"Wall time of the whole process, median of {parameters['repeats']} alternating rounds "
        f"(naive Spark: {parameters['naive_repeats']}); / DuckDB = that over DuckDB's on the "
        "same workload; peak PSS (proportional set size) of the process tree and of its "
        "largest JVM, and the peak RSS sum of the tree, over those runs.",
        "",
        "| workload | served results | engine | wall | / DuckDB | results/s "
        "| peak PSS, tree / JVM | peak RSS sum |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for workload in results["workloads"].values():
        lines += _table_rows(workload)
    lines += ["", *_sampling_lines(parameters.get("memory_sampling"))]
    lines += ["", *_slope_lines(results.get("slopes_s_per_60_days"))]
    lines += ["", "| target | measured | limit | |", "|---|---:|---:|---|"]
    for target in results["targets"]:
        verdict = {None: "n/a", True: "pass", False: "**FAIL**"}[target["pass"]]
        lines.append(f"| {target['name']} | {target['measured']} | {target['limit']} | {verdict} |")
    main = next(iter(results["workloads"].values()))["label"]
    driver_memory = parameters["driver_memory"]
    lines += ["", *_time_lines(results.get("where_the_time_goes"), main, driver_memory)]
    return "\n".join(lines) + "\n"


def _table_rows(workload: dict[str, Any]) -> list[str]:
    """One row per engine; the workload's label and size on its first."""
    duckdb = _wall(workload, DUCKDB)
    rows = []
    for number, (name, engine) in enumerate(workload["engines"].items()):
        wall = _wall(workload, name)
        memory = "n/a"
        if "peak_tree_pss_gib" in engine:
            tree, jvm = engine["peak_tree_pss_gib"], engine["peak_jvm_pss_gib"]
            memory = f"{tree:.2f} / {jvm:.2f} GiB" if jvm else f"{tree:.2f} GiB / no JVM"
        rss = f"{engine['peak_tree_rss_gib']:.2f} GiB" if "peak_tree_rss_gib" in engine else "n/a"
        label = ENGINE_LABELS.get(name, name)
        if not engine["ok"]:
            label = f"{label} ({engine['runs'] - engine['runs_ok']} of {engine['runs']} failed)"
        cells = [
            workload["label"] if number == 0 else "",
            _count(workload.get("served_results")) if number == 0 else "",
            label,
            _seconds(wall),
            _ratio(wall, duckdb),
            _count(engine.get("results_per_s")),
            memory,
            rss,
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _slope_lines(slope: dict[str, float] | None) -> list[str]:
    if not slope:
        return []
    return [
        "Slopes (the per-row cost without the fixed cost): median wall of the long top-10 "
        "workload minus that of the short one (90 and 30 days by default), per 60 days.",
        "",
        "| engine | slope |",
        "|---|---:|",
        *[f"| {ENGINE_LABELS.get(e, e)} | {v:.1f} s |" for e, v in slope.items()],
    ]


def _sampling_lines(sampling: dict[str, Any] | None) -> list[str]:
    if not sampling or "sampler_cpu_s" not in sampling:
        return []
    share, worst = sampling["sampler_share_of_one_cpu"] or 0.0, sampling["largest_share"]
    worst_share = worst["sampler_cpu_s"] / worst["wall_s"] if worst["wall_s"] else 0.0
    fallbacks = sampling["pss_fallbacks"]
    return [
        f"Memory sampling (RSS every {sampling['rss_every_s']} s, PSS at most every "
        f"{sampling['pss_at_most_every_s']} s) cost the benchmark process "
        f"{sampling['sampler_cpu_s']:.1f} CPU s over {sampling['runs_wall_s']:.0f} s of runs, "
        f"{100 * share:.1f}% of one CPU ({100 * worst_share:.1f}% during {worst['run']})"
        + (f"; {fallbacks} PSS readings denied, RSS counted instead." if fallbacks else ".")
    ]


def _time_lines(summary: dict[str, Any] | None, workload: str, driver_memory: str) -> list[str]:
    if not summary:
        return []
    memory = summary["jvm_memory"]
    lines = [
        f"Where logmetrics' time goes ({workload}, Spark event log): "
        f"{summary['app_wall_s']:.0f} s from "
        f"session start to stop, {summary['time_in_jobs_s']:.0f} s with a Spark job running, "
        f"{summary['time_outside_jobs_s']:.0f} s on the driver alone; {summary['jobs']} jobs, "
        f"{summary['stages']} stages, {summary['tasks']} tasks, "
        f"{summary['executor_run_s_total']:.0f} s of executor time. Driver JVM as Spark sampled "
        f"it: heap used {memory['heap_used_peak_gib']:.2f} GiB at most (driver memory "
        f"{driver_memory}), off-heap "
        f"{memory['off_heap_peak_gib']:.2f} GiB, GC {memory['gc_time_s']:.1f} s. The stages "
        "that took the most executor time (their duration also counts waiting for a core):",
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


def record_section(
    results: dict[str, Any],
    key: str,
    section: str,
    results_file: Path,
    readme: Path,
    markers: tuple[str, str],
) -> str:
    """A stage's `results` under `key` in results.json (the other stages' kept) and its
    `section` between `markers` in the README; the section, for the terminal."""
    existing = json.loads(results_file.read_text()) if results_file.exists() else {}
    existing[key] = results
    results_file.write_text(json.dumps(existing, indent=2, default=str) + "\n")
    if not update_readme(readme, section, markers=markers):
        log.warning("%s has no %s markers; the table is only printed", readme, key)
    return section
