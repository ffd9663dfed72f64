"""A deploy README's bash blocks as a shell reads them: in order, comments dropped, a line ending
in `\\` joined to the next, `cd` and `export` applied; every other line a `Command`, with the
directory it runs in and the variables exported before it. test_readme_databricks.py and
test_readme_airflow.py run what can run here and check the rest against what it names, so a
README and the files it deploys cannot drift apart. Needs only the standard library."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# A fenced bash block, at any indentation (the READMEs' steps are list items).
BLOCK = re.compile(r"^( *)```bash\n(.*?)^\1```$", re.M | re.S)
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str] = field(hash=False)
    line: str


def section(text: str, heading: str) -> str:
    """The `## heading` section of a markdown text, up to the next `## ` heading."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def commands(text: str, cwd: Path = REPO) -> list[Command]:
    """Every command of `text`'s bash blocks, as the shell splits it, starting in `cwd`."""
    return _read(text, cwd)[0]


def exported(text: str) -> dict[str, str]:
    """The variables `text`'s bash blocks export, as the shell has them after the last line."""
    return _read(text, REPO)[1]


def _read(text: str, cwd: Path) -> tuple[list[Command], dict[str, str]]:
    env: dict[str, str] = {}
    found = []
    for indent, block in BLOCK.findall(text):
        lines = [line.removeprefix(indent) for line in block.splitlines()]
        for line in "\n".join(lines).replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if not argv:
                continue
            if argv[0] == "cd":
                (where,) = argv[1:]
                cwd = (cwd / where).resolve()
                assert cwd.is_dir(), f"{line!r}: no such directory"
            elif argv[0] == "export":
                for assignment in argv[1:]:
                    name, equals, value = assignment.partition("=")
                    assert equals and NAME.fullmatch(name), f"{line!r}: {assignment!r}"
                    env[name] = value
            else:
                found.append(Command(tuple(argv), cwd, dict(env), line.strip()))
    return found, env
