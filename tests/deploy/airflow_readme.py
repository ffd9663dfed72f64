"""deploy/airflow/README.md's first deployment as data: each step's text, the Variables its
`airflow variables set` commands set, and the worker its install commands build, run as written
with /opt/logmetrics a temporary folder: step 3's (the wheel with its `[local]` extra, for the
spark_submit path) and step 4's (the wheel alone, for the sensor of the databricks path).
test_readme_airflow.py checks the steps against what they name; conftest.py builds both workers
once per session for the tests that run logmetrics as a worker does. Needs only the standard
library."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from readme_shell import REPO, Command, commands, section

README = (REPO / "deploy" / "airflow" / "README.md").read_text()
STEPS = "A first deployment, step by step"
ROOT = "/opt/logmetrics"  # where the steps install a worker
SPARK_WORKER, SENSOR_WORKER = 3, 4  # the steps that install one


def step(number: int) -> str:
    """The text of the README's step `number`, up to the next one."""
    steps = re.split(r"^(\d+)\. ", section(README, STEPS), flags=re.M)
    return dict(zip(steps[1::2], steps[2::2], strict=True))[str(number)]


def variables_set(text: str) -> dict[str, str]:
    """The Variables `airflow variables set` sets in `text`'s commands, in order."""
    found = {}
    for command in commands(text):
        if command.argv[:3] == ("airflow", "variables", "set"):
            key, value = command.argv[3:]
            found[key] = value
    return found


def install_commands(number: int) -> list[Command]:
    """Step `number`'s commands that put a worker under /opt/logmetrics (its venv, the wheel
    installed into it, the config and the job scripts), in order; not `make wheel`, which
    builds the wheel they install, nor the `airflow` and `databricks` commands."""
    return [
        c
        for c in commands(step(number))
        if c.argv[0] not in ("make", "airflow", "databricks") and ROOT in c.line
    ]


@dataclass(frozen=True)
class Worker:
    """A worker as a step leaves it: its folder (the step's /opt/logmetrics) and the step's
    Variables that name files in it, with the folder put in."""

    step: int
    root: Path
    variables: dict[str, str]

    @property
    def bin(self) -> Path:
        return self.root / ".venv" / "bin"

    def python(self, *args: str) -> str:
        """The venv's Python with `args`, which must succeed: what it printed."""
        done = subprocess.run(
            [str(self.bin / "python"), *args], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, (
            f"step {self.step}'s python {args}:\n{done.stdout}{done.stderr}"
        )
        return done.stdout

    def run(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """`logmetrics <args>` as the step's `logmetrics_executable`, output captured."""
        return subprocess.run(
            [self.variables["logmetrics_executable"], *args],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=300,
        )


def install_worker(number: int, root: Path) -> Worker:
    """Step `number`'s install commands run as written, /opt/logmetrics replaced by `root`
    (which must not exist yet), from the repository's root as the README runs them. The wheel
    they install must be built (the steps' `make wheel`). A failing command raises, with the
    end of its output."""
    for command in install_commands(number):
        argv = [arg.replace(ROOT, str(root)) for arg in command.argv]
        done = subprocess.run(argv, cwd=command.cwd, capture_output=True, text=True)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip().splitlines()[-20:]
            raise RuntimeError(
                f"step {number}: {command.line!r} ({ROOT} = {root}) exited with "
                f"{done.returncode}:\n" + "\n".join(output)
            )
    variables = {
        key: value.replace(ROOT, str(root))
        for key, value in variables_set(step(number)).items()
        if value.startswith(ROOT)
    }
    return Worker(number, root, variables)
