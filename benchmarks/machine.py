"""The machine and software a benchmark ran on, so that its numbers can be compared later."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil


def describe(repo: Path) -> dict[str, Any]:
    """CPU, cores, RAM, OS and the versions that matter; `repo` gives the code's git commit."""
    return {
        "cpu_model": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": _os_name(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "java": _java_version(),
        "spark": _version("pyspark"),
        "delta_spark": _version("delta-spark"),
        "duckdb": _version("duckdb"),
        "logmetrics": _version("logmetrics"),
        "git_commit": git_commit(repo),
    }


# What the benchmark itself rewrites: a change there is not a change of the code it timed
# (`make bench` writes both before its fixed-cost stage, which read "-dirty" because of them).
OWN_OUTPUTS = ("benchmarks/results.json", "benchmarks/README.md")


def git_commit(repo: Path) -> str:
    """The checkout's commit, `-dirty` when a tracked file other than the benchmark's own
    outputs (`OWN_OUTPUTS`) has uncommitted changes."""
    git = ["git", "-C", str(repo)]
    commit = _run([*git, "describe", "--always"])
    excluded = [f":(exclude){path}" for path in OWN_OUTPUTS]
    try:  # a status git cannot give counts as dirty: the commit alone would then claim too much
        status = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no", "--", ".", *excluded],
            capture_output=True,
            text=True,
            check=False,
        )
        clean = status.returncode == 0 and not status.stdout.strip()
    except OSError:
        clean = False
    return commit if clean else f"{commit}-dirty"


def summary_line(machine: dict[str, Any]) -> str:
    """One line for the README: what the table was measured on."""
    return (
        f"{machine['cpu_model']}, {machine['logical_cpus']} logical CPUs, "
        f"{machine['ram_gib']} GiB RAM, {machine['os']}; Python {machine['python']}, "
        f"Java {machine['java']}, Spark {machine['spark']}, Delta {machine['delta_spark']}, "
        f"DuckDB {machine['duckdb']}; logmetrics at {machine['git_commit']}"
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def _java_version() -> str:
    """The first line of `java -version` (it prints to stderr), e.g. `openjdk version "17.0.15"`."""
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    except OSError:
        return "unknown"
    first = (done.stderr or done.stdout).strip().splitlines()
    return first[0].split('"')[1] if first and '"' in first[0] else "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"
