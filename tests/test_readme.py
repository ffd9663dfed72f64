"""The README as a stranger uses it: `logmetrics demo` in a directory holding only the shipped
config, its output read as a person reads it, then every command of the README's Commands
block, as written, against that demo's data and warehouse. The suite's Spark settings are
layered over the shipped config through $LOGMETRICS_CONFIG, which the commands read as they do
without --config. The demo and the commands run through the CLI's own entry point in the
suite's session, from the demo's directory: a JVM of their own would be most of their time
(the demo as a process took 251 s under the suite's load, 65 s alone), and what a process adds
to the terminal, the JVM's own output kept out of it, is tests/test_cli_process.py's."""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml
from pyspark.sql import SparkSession

from logmetrics.cli import main
from suite_session import TEST_CONF

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
MOST_LINES = 60


class Demo(NamedTuple):
    root: Path
    env: dict[str, str]
    status: int
    stdout: str
    stderr: str


def _commands() -> list[tuple[list[str], int]]:
    """The Commands block's lines as the shell splits them (comments dropped), each with the
    exit status its comment names (`exit N:`), else 0."""
    block = README.split("## Commands\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        status = re.search(r"#.*\bexit (\d):", line)
        commands.append((shlex.split(line, comments=True), int(status.group(1)) if status else 0))
    return commands


@pytest.fixture(scope="module")
def demo(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Demo:
    root = tmp_path_factory.mktemp("stranger")
    (root / "conf").mkdir()
    shutil.copy(REPO / "conf" / "local.yaml", root / "conf" / "local.yaml")
    suite = root / "suite.yaml"  # the suite's Spark settings: plain Spark, few partitions
    settings = {
        "master": "local[2]",
        "driver_memory": "2g",
        "accelerator": "none",
        "conf": TEST_CONF,
    }
    # The shipped config's relative paths, made absolute under the stranger's directory: the
    # commands share the suite's JVM, whose working directory is not that one.
    shipped = yaml.safe_load((root / "conf" / "local.yaml").read_text())
    inputs = {
        name: {"path": str(root / source["path"])} for name, source in shipped["inputs"].items()
    }
    output = {"warehouse": str(root / shipped["output"]["warehouse"])}
    suite.write_text(yaml.safe_dump({"inputs": inputs, "output": output, "spark": settings}))
    env = {"LOGMETRICS_CONFIG": f"conf/local.yaml{os.pathsep}{suite}"}
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(stdout), redirect_stderr(stderr):
        patch.chdir(root)
        patch.setenv("LOGMETRICS_CONFIG", env["LOGMETRICS_CONFIG"])
        status = main(["demo"])
    return Demo(root, env, status, stdout.getvalue(), stderr.getvalue())


def test_the_demo_says_each_thing_once(demo: Demo) -> None:
    """The demo's terminal: under 60 lines, each alert once (it was printed three times), the
    README's worked example among them as it stands there (the three planted culprits with
    their cost), the failing warning check once, a line per chunk plus progress lines, and a
    closing line with the run's wall time."""
    assert demo.status == 0, demo.stderr[-3000:]
    lines = (demo.stdout + demo.stderr).splitlines()
    assert len(lines) < MOST_LINES, "\n".join(lines)
    alerts = [line for line in lines if line.startswith(("ALERT ", "IMPROVEMENT "))]
    assert len(alerts) == len(set(alerts)) >= 1
    example = README.split("The demo\nprints, among others:\n\n```\n", 1)[1].split("```", 1)[0]
    start = lines.index(example.splitlines()[0])
    assert lines[start : start + 6] == example.splitlines()
    assert sum("unique_cluster_chunk_ids failed on 30 of 30 days" in line for line in lines) == 1
    assert (
        sum(line.startswith("2026-10-01..2026-10-30: 30 day(s) published") for line in lines) == 1
    )
    progress = [line for line in lines if line.startswith("  2026-10-01..2026-10-30: ")]
    assert len(progress) <= 12
    assert lines[-1].startswith("done in ") and "30 day(s) published; 7 alert(s)" in lines[-1]
    assert "report: reports/demo/index.html" in lines


def test_the_readme_commands_run_as_written(
    demo: Demo, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each command of the block, in its order, exits as its comment says (0 unless `exit N:`):
    the commands the README shows work on the demo's warehouse as they are written there."""
    commands = _commands()
    assert len(commands) >= 8 and all(argv[0] == "logmetrics" for argv, _ in commands)
    assert [status for _, status in commands].count(4) == 1  # the --fail-on-alert line
    monkeypatch.chdir(demo.root)
    monkeypatch.setenv("LOGMETRICS_CONFIG", demo.env["LOGMETRICS_CONFIG"])
    for argv, status in commands:
        assert main(argv[1:]) == status, argv
    assert (demo.root / "reports" / "october" / "index.html").is_file()
    assert (demo.root / "views.sql").is_file()
