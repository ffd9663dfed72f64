"""Run one command as a subprocess and measure it: wall time and peak memory of its process tree.

Memory is sampled with psutil every `POLL_SECONDS`: the resident set size (RSS) of the process
and of all its descendants, summed (the tree's peak), and the largest RSS seen of any one Java
process (the Spark driver JVM, when there is one). Sampling can miss a spike shorter than the
interval; at 0.1 s it sees every phase of a run that takes seconds.

One exception keeps the sum honest: a child still running its parent's executable and younger
than `LAUNCH_SECONDS` is a process being launched (fork or vfork, before its exec), whose RSS
is its parent's pages counted a second time (the JVM starting a Python worker would otherwise
add a phantom copy of the whole driver); it is left out.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

POLL_SECONDS = 0.1
LAUNCH_SECONDS = 2.0


@dataclass(frozen=True)
class Measurement:
    """One finished run: exit code, wall seconds, peak RSS (bytes) of the tree and of a JVM."""

    exit_code: int
    wall_s: float
    peak_tree_rss: int
    peak_jvm_rss: int
    log: Path
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


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
        peak_tree, peak_jvm, timed_out = _watch(process, timeout_s)
        wall = time.perf_counter() - began
    return Measurement(process.returncode, round(wall, 3), peak_tree, peak_jvm, log, timed_out)


def _watch(process: subprocess.Popen[bytes], timeout_s: float | None) -> tuple[int, int, bool]:
    """Sample the tree until the process exits or times out; returns (peak tree RSS, peak JVM
    RSS, whether it was killed for taking too long)."""
    root = psutil.Process(process.pid)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    peak_tree = peak_jvm = 0
    while process.poll() is None:
        if deadline is not None and time.monotonic() > deadline:
            _kill_tree(root)
            process.wait()
            return peak_tree, peak_jvm, True
        tree, jvm = _sample(root)
        peak_tree, peak_jvm = max(peak_tree, tree), max(peak_jvm, jvm)
        time.sleep(POLL_SECONDS)
    return peak_tree, peak_jvm, False


def _kill_tree(root: psutil.Process) -> None:
    """Kill the process we started and every process it started, by id."""
    try:
        members = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for member in members:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()


def _sample(root: psutil.Process) -> tuple[int, int]:
    """(sum of RSS over the tree, largest RSS of a java process in it) right now."""
    try:
        members = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    now = time.time()
    seen: dict[int, tuple[int, str, float, int]] = {}  # pid -> rss, exe, created, parent
    for member in members:
        try:
            with member.oneshot():
                info = (member.memory_info().rss, member.exe(), member.create_time(), member.ppid())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # it ended between the listing and the reading
        seen[member.pid] = info
    tree = jvm = 0
    for rss, exe, created, parent in seen.values():
        if parent in seen and exe == seen[parent][1] and now - created < LAUNCH_SECONDS:
            continue  # being launched: its parent's pages, not memory of its own
        tree += rss
        if exe.endswith("/java"):
            jvm = max(jvm, rss)
    return tree, jvm
