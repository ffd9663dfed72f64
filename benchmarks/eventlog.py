"""Where a Spark run's time goes, from its event log (`spark.eventLog.enabled`).

The event log is JSON lines: one file per application, or (Spark 4's rolling format) a directory
`eventlog_v2_<app id>` of `events_<n>_<app id>` parts read in order. From it:

- the application's wall time, the time some job was running (the union of job intervals) and
  the rest, spent on the driver alone (session start, planning, Delta log reads and commits,
  Python, the quality suite);
- the stages that took the most executor time: that time, their wall duration, task count,
  and what they were for (the job's description, else its SQL execution's, else the stage
  name). Ranked by executor time, not by wall: a stage's wall counts the time it waited for a
  core while other jobs ran (a table's write beside the next chunk's main pass: 21 s of wall
  for 0.2 s of work);
- the slowest SQL executions (one per DataFrame action; nested ones, such as a Delta write's
  own, are inside their action's time and left out);
- the driver JVM's memory as Spark sampled it (peak heap used, off-heap, execution and storage
  memory, GC time), to read the process RSS against `spark.driver.memory`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SQL_START = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart"
SQL_END = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd"
COMPRESSED_SUFFIXES = (".lz4", ".lzf", ".snappy", ".zstd")
# Peaks kept from the executor metrics Spark attaches to every finished task (bytes; GC: ms).
JVM_METRICS = {
    "JVMHeapMemory": "heap_used_peak_gib",
    "JVMOffHeapMemory": "off_heap_peak_gib",
    "OnHeapExecutionMemory": "execution_memory_peak_gib",
    "OnHeapStorageMemory": "storage_memory_peak_gib",
}
# The target of a DataFrame write, in a plan's SaveIntoDataSourceCommand arguments.
_WRITE_PATH = re.compile(r"\bpath=([^,\]\s]+)")


@dataclass
class _Job:
    start_ms: int
    end_ms: int | None = None
    sql_id: str | None = None
    description: str | None = None


@dataclass
class _Stage:
    stage_id: int
    attempt: int
    name: str
    tasks: int
    duration_ms: int
    executor_run_ms: int
    executor_cpu_ms: int
    job_ids: list[int] = field(default_factory=list)


@dataclass
class _App:
    start_ms: int = 0
    end_ms: int = 0
    jobs: dict[int, _Job] = field(default_factory=dict)
    stages: list[_Stage] = field(default_factory=list)
    stage_jobs: dict[int, list[int]] = field(default_factory=dict)
    sql: dict[str, dict[str, Any]] = field(default_factory=dict)
    tasks: int = 0
    jvm_peaks: dict[str, int] = field(default_factory=dict)


def find_event_log(events_dir: Path) -> list[Path]:
    """The files of the one application logged under `events_dir`, in order."""
    logs = sorted(p for p in events_dir.iterdir() if not p.name.startswith("."))
    if len(logs) != 1:
        raise ValueError(f"expected one application's event log in {events_dir}, found {logs}")
    log = logs[0]
    parts = sorted(log.glob("events_*"), key=_part_number) if log.is_dir() else [log]
    for part in parts:
        if part.name.endswith(COMPRESSED_SUFFIXES):
            raise ValueError(f"{part} is compressed: set spark.eventLog.compress=false")
    return parts


def _part_number(path: Path) -> int:
    return int(path.name.split("_")[1])


def _events(parts: list[Path]) -> Iterator[dict[str, Any]]:
    for part in parts:
        with open(part, encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    yield json.loads(line)


def summarize(events_dir: Path, top: int = 15) -> dict[str, Any]:
    """The where-the-time-goes summary of the application logged under `events_dir`."""
    app = _App()
    for event in _events(find_event_log(events_dir)):
        _apply(app, event)
    for stage in app.stages:
        stage.job_ids = app.stage_jobs.get(stage.stage_id, [])
    in_jobs_ms = _union_ms([(j.start_ms, j.end_ms) for j in app.jobs.values() if j.end_ms])
    wall_ms = app.end_ms - app.start_ms
    busiest = sorted(app.stages, key=lambda s: s.executor_run_ms, reverse=True)[:top]
    return {
        "app_wall_s": _s(wall_ms),
        "time_in_jobs_s": _s(in_jobs_ms),
        "time_outside_jobs_s": _s(wall_ms - in_jobs_ms),
        "jobs": len(app.jobs),
        "stages": len(app.stages),
        "tasks": app.tasks,
        "executor_run_s_total": _s(sum(s.executor_run_ms for s in app.stages)),
        "jvm_memory": _jvm_memory(app.jvm_peaks),
        "top_stages": [_stage_row(app, s) for s in busiest],
        "top_sql_executions": _top_sql(app, top),
    }


def _apply(app: _App, event: dict[str, Any]) -> None:
    """Fold one event into `app`."""
    kind = event["Event"]
    if kind == "SparkListenerApplicationStart":
        app.start_ms = event["Timestamp"]
    elif kind == "SparkListenerApplicationEnd":
        app.end_ms = event["Timestamp"]
    elif kind == "SparkListenerJobStart":
        properties = event.get("Properties") or {}
        app.jobs[event["Job ID"]] = _Job(
            start_ms=event["Submission Time"],
            # A nested execution (a Delta write's own) is described by the action that began it.
            sql_id=properties.get(
                "spark.sql.execution.root.id", properties.get("spark.sql.execution.id")
            ),
            description=properties.get("spark.job.description"),
        )
        for stage_id in event["Stage IDs"]:
            app.stage_jobs.setdefault(stage_id, []).append(event["Job ID"])
    elif kind == "SparkListenerJobEnd":
        app.jobs[event["Job ID"]].end_ms = event["Completion Time"]
    elif kind == "SparkListenerStageCompleted":
        app.stages.append(_stage(event["Stage Info"]))
    elif kind == "SparkListenerTaskEnd":
        app.tasks += 1
        for name, value in (event.get("Task Executor Metrics") or {}).items():
            app.jvm_peaks[name] = max(app.jvm_peaks.get(name, 0), int(value))
    elif kind == SQL_START and _is_root(event):
        app.sql[str(event["executionId"])] = {
            "description": _sql_description(event),
            "start_ms": int(event["time"]),
        }
    elif kind == SQL_END and str(event["executionId"]) in app.sql:
        app.sql[str(event["executionId"])]["end_ms"] = int(event["time"])


def _is_root(event: dict[str, Any]) -> bool:
    return str(event.get("rootExecutionId", event["executionId"])) == str(event["executionId"])


def _jvm_memory(peaks: dict[str, int]) -> dict[str, float]:
    """Peaks of the driver's memory as sampled at task ends (a lower bound of the true peak)."""
    memory = {key: round(peaks.get(name, 0) / 2**30, 3) for name, key in JVM_METRICS.items()}
    memory["gc_time_s"] = round(peaks.get("TotalGCTime", 0) / 1000, 3)
    return memory


def _sql_description(event: dict[str, Any]) -> str:
    """The action's call site, plus the table it writes to (`save at ...` alone says little)."""
    description = str(event.get("description", ""))
    written = _WRITE_PATH.search(event.get("physicalPlanDescription", ""))
    if written:
        description += f" -> {written.group(1).rstrip('/').rsplit('/', 1)[-1]}"
    return description


def _stage(info: dict[str, Any]) -> _Stage:
    accumulated = {a.get("Name"): a.get("Value") for a in info.get("Accumulables", [])}
    submitted = info.get("Submission Time") or 0
    completed = info.get("Completion Time") or submitted
    return _Stage(
        stage_id=info["Stage ID"],
        attempt=info["Stage Attempt ID"],
        name=info["Stage Name"],
        tasks=info["Number of Tasks"],
        duration_ms=completed - submitted,
        executor_run_ms=int(accumulated.get("internal.metrics.executorRunTime") or 0),
        executor_cpu_ms=int(accumulated.get("internal.metrics.executorCpuTime") or 0) // 1_000_000,
    )


def _stage_row(app: _App, stage: _Stage) -> dict[str, Any]:
    return {
        "stage_id": stage.stage_id,
        "attempt": stage.attempt,
        "name": _in_repo(stage.name),
        "description": _in_repo(_description(app, stage)),
        "duration_s": _s(stage.duration_ms),
        "tasks": stage.tasks,
        "executor_run_s": _s(stage.executor_run_ms),
        "executor_cpu_s": _s(stage.executor_cpu_ms),
        "jobs": stage.job_ids,
    }


def _in_repo(text: str) -> str:
    """Call sites relative to the repository (`src/logmetrics/...`), not this machine's paths."""
    return re.sub(r"\S*/(src/logmetrics/)", r"\1", text)


def _description(app: _App, stage: _Stage) -> str:
    """What the stage was for: its job's description, its SQL execution's, or its own name."""
    for job_id in stage.job_ids:
        job = app.jobs.get(job_id)
        if job is None:
            continue
        if job.description:
            return job.description
        if job.sql_id is not None and job.sql_id in app.sql:
            return str(app.sql[job.sql_id]["description"])
    return stage.name


def _top_sql(app: _App, top: int) -> list[dict[str, Any]]:
    finished = [
        {
            "execution_id": key,
            "description": e["description"],
            "duration_ms": e["end_ms"] - e["start_ms"],
        }
        for key, e in app.sql.items()
        if "end_ms" in e
    ]
    finished.sort(key=lambda e: e["duration_ms"], reverse=True)
    return [
        {
            "execution_id": e["execution_id"],
            "description": _in_repo(e["description"]),
            "duration_s": _s(e["duration_ms"]),
        }
        for e in finished[:top]
    ]


def _union_ms(intervals: list[tuple[int, int | None]]) -> int:
    """Total length of the union of [start, end] intervals (overlaps counted once)."""
    total, reach = 0, None
    for start, end in sorted((s, e) for s, e in intervals if e is not None):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def _s(ms: int) -> float:
    return round(ms / 1000, 3)
