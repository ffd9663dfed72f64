"""Run one command as a subprocess and measure it: wall time and peak memory of its process tree.

The memory figure is the tree's **PSS** (proportional set size, `psutil`'s
`memory_full_info().pss`, read from `/proc/PID/smaps_rollup`), summed over the process and all
its descendants: a page shared by n processes counts 1/n in each, so pages the JVM shares with
the Python workers it forks count once in the sum, where an RSS sum counts them once per
process. The largest PSS of any one Java process (the Spark driver) is kept too.

Reading smaps_rollup makes the kernel walk the process's page tables, holding its memory-map
lock for reading: about 18 ms of CPU for a process with 1 GiB resident and 45 ms for 4 GiB
(a test process on the 2-core benchmark machine), against 0.01 ms for its RSS. So the tree is
listed and its RSS read every `POLL_SECONDS`, and PSS is read at most every `PSS_SECONDS`
(sooner when the tree's RSS grew by `PSS_GROWTH` since the last read: start-up, a short run,
while reading is still cheap), and only when it could set a new peak: a process's PSS is at
most its RSS, so while the tree's RSS sum is at or below the PSS peak already seen (and no
JVM's RSS above the JVM PSS peak), neither peak can move. That skip helps only once memory has
fallen below its peak (a JVM rarely gives memory back), so a process near 4 GiB costs a read
every `PSS_SECONDS`: ~10% of one CPU. Each run records its samples and the CPU seconds the
sampling cost (the benchmark process does nothing else while it waits), to read against the
run's wall time: the sampler shares the machine with the run it measures.

The RSS figures stay (the tree's sum and the largest Java process), as before: in the sum, a
child still running its parent's executable and younger than `LAUNCH_SECONDS` is a process
being launched (fork or vfork, before its exec), whose RSS is its parent's pages counted a
second time; it is left out. The PSS sum needs no such exception.

Sampling can miss a spike shorter than the interval; a run's memory grows over seconds.
A process that ends between the listing and the reading is skipped (its memory is gone); one
whose smaps_rollup cannot be read (permissions) counts with its RSS, an upper bound, and the
number of such readings is recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

POLL_SECONDS = 0.25
PSS_SECONDS = 0.5
PSS_GROWTH = 1.25  # the tree's RSS grew by this factor since PSS was last read: read it now
LAUNCH_SECONDS = 2.0


@dataclass(frozen=True)
class Measurement:
    """One finished run: exit code, wall seconds, peak memory (bytes) of the tree and of a JVM,
    and what measuring it cost."""

    exit_code: int
    wall_s: float
    peak_tree_pss: int
    peak_jvm_pss: int
    peak_tree_rss: int
    peak_jvm_rss: int
    log: Path
    timed_out: bool = False
    samples: int = 0  # tree listings with RSS
    pss_samples: int = 0  # of which PSS was read too
    pss_fallbacks: int = 0  # process readings where PSS was denied and RSS stood in
    sampler_cpu_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass
class _Peaks:
    tree_pss: int = 0
    jvm_pss: int = 0
    tree_rss: int = 0
    jvm_rss: int = 0
    samples: int = 0
    pss_samples: int = 0
    pss_fallbacks: int = 0
    cpu_s: float = 0.0
    rss_at_last_pss: int = 0


def run_measured(
    command: Sequence[str],
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout_s: float | None = None,
) -> Measurement:
    """Run `command` to completion (or kill its tree after `timeout_s`), output to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as sink:
        began = time.perf_counter()
        process = subprocess.Popen(
            list(command),
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )
        peaks, timed_out = _watch(process, timeout_s)
        wall = time.perf_counter() - began
    return Measurement(
        exit_code=process.returncode,
        wall_s=round(wall, 3),
        peak_tree_pss=peaks.tree_pss,
        peak_jvm_pss=peaks.jvm_pss,
        peak_tree_rss=peaks.tree_rss,
        peak_jvm_rss=peaks.jvm_rss,
        log=log,
        timed_out=timed_out,
        samples=peaks.samples,
        pss_samples=peaks.pss_samples,
        pss_fallbacks=peaks.pss_fallbacks,
        sampler_cpu_s=round(peaks.cpu_s, 3),
    )


def _watch(process: subprocess.Popen[bytes], timeout_s: float | None) -> tuple[_Peaks, bool]:
    """Sample the tree until the process exits or times out; returns the peaks and whether it
    was killed for taking too long."""
    root = psutil.Process(process.pid)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    peaks = _Peaks()
    last_pss = None
    while process.poll() is None:
        if deadline is not None and time.monotonic() > deadline:
            _kill_tree(root)
            process.wait()
            return peaks, True
        cpu = time.process_time()
        now = time.monotonic()
        due = last_pss is None or now - last_pss >= PSS_SECONDS
        if _sample(root, peaks, due):
            last_pss = now
        peaks.cpu_s += time.process_time() - cpu
        time.sleep(POLL_SECONDS)
    return peaks, False


def _kill_tree(root: psutil.Process) -> None:
    """Kill the process we started and every process it started, by id."""
    try:
        members = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for member in members:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()


@dataclass(frozen=True)
class _Member:
    pid: int
    rss: int
    exe: str
    created: float
    parent: int

    @property
    def is_java(self) -> bool:
        return self.exe.endswith("/java")


def _sample(root: psutil.Process, peaks: _Peaks, due: bool) -> bool:
    """Update `peaks` from the tree as it is now; PSS too when it could set a new peak and it
    is `due` or the tree grew fast (start-up, a short run). Returns whether PSS was read."""
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    members: dict[int, tuple[psutil.Process, _Member]] = {}
    for process in processes:
        try:
            with process.oneshot():
                member = _Member(
                    process.pid,
                    process.memory_info().rss,
                    process.exe(),
                    process.create_time(),
                    process.ppid(),
                )
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # it ended between the listing and the reading
        members[process.pid] = (process, member)
    peaks.samples += 1
    now = time.time()
    rss_sum = 0
    for _, member in members.values():
        parent = members.get(member.parent)
        if parent and member.exe == parent[1].exe and now - member.created < LAUNCH_SECONDS:
            continue  # being launched: its parent's pages, not memory of its own
        rss_sum += member.rss
        if member.is_java:
            peaks.jvm_rss = max(peaks.jvm_rss, member.rss)
    peaks.tree_rss = max(peaks.tree_rss, rss_sum)
    # PSS <= RSS per process: when the full RSS sum is at most the tree's PSS peak and no
    # JVM's RSS is above the JVM's PSS peak, neither peak can move.
    java_rss = max((m.rss for _, m in members.values() if m.is_java), default=0)
    full_rss = sum(m.rss for _, m in members.values())
    grew = full_rss > PSS_GROWTH * peaks.rss_at_last_pss
    if not (due or grew) or (full_rss <= peaks.tree_pss and java_rss <= peaks.jvm_pss):
        return False
    peaks.rss_at_last_pss = full_rss
    pss_sum = 0
    for process, member in members.values():
        try:
            pss = process.memory_full_info().pss
        except psutil.NoSuchProcess:
            continue  # it ended: its memory is gone
        except psutil.AccessDenied:
            pss = member.rss  # an upper bound, so the peak is never under-reported
            peaks.pss_fallbacks += 1
        pss_sum += pss
        if member.is_java:
            peaks.jvm_pss = max(peaks.jvm_pss, pss)
    peaks.tree_pss = max(peaks.tree_pss, pss_sum)
    peaks.pss_samples += 1
    return True


def run_check(comparisons: list[dict[str, Any]], out_dir: Path, cwd: Path) -> dict[str, Any]:
    """`benchmarks.check` over `comparisons` (name, expected, actual outputs), in one Spark
    process of its own: its verdicts, or a failed check saying where its log is."""
    plan_file, verdict_file = out_dir / "check-plan.json", out_dir / "check.json"
    plan_file.write_text(json.dumps(comparisons, indent=2) + "\n")
    command = [sys.executable, "-m", "benchmarks.check", "--plan", str(plan_file)]
    command += ["--out", str(verdict_file), "--log-dir", str(out_dir / "check-logs")]
    measured = run_measured(command, log=out_dir / "check.log", cwd=cwd, timeout_s=3600)
    if not verdict_file.exists():
        error = f"the check did not finish (exit {measured.exit_code}), see {measured.log}"
        return {"check": {"ok": False, "error": error}}
    verdicts: dict[str, Any] = json.loads(verdict_file.read_text())
    return verdicts
