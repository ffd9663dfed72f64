"""The house rules of src/, read from the code itself (ast), without importing it.

- Every public function, class and constant of src/logmetrics is used by production code
  (src/, jobs/, benchmarks/, deploy/): what only tests need lives in tests/.
- Imports run one way: face (cli, demo) -> flows (and the report) -> rules / quality / tables
  -> the ground floor (config, schemas, session, errors, phases, redaction). Nothing upward, and
  the rules are pure: no flows, tables, session or CLI, and no reads or writes.
"""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "logmetrics"
PRODUCTION = [
    *PACKAGE.rglob("*.py"),
    *(REPO / "jobs").glob("*.py"),
    *(REPO / "benchmarks").glob("*.py"),
    *(REPO / "deploy").rglob("*.py"),
]

PUBLIC_API: set[str] = set()
"""Public names kept for users of the package though nothing here calls them (none today)."""

# The floors, top to bottom: a module imports from its own floor's package or from floors below.
FLOORS = {
    "face": 4,
    "flows": 3,
    "report": 3,
    "rules": 2,
    "quality": 2,
    "tables": 2,
    "synthetic": 2,
    "ground": 1,
}
GROUND = {"config", "schemas", "session", "errors", "phases", "redaction", "__init__"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts)


def _room(module: str) -> str:
    """The floor's key of a module: its package (flows, rules, ...), or its role at the top."""
    top = module.split(".")[0]
    if top in {"cli", "demo"}:
        return "face"
    if top in GROUND:
        return "ground"
    return top


def _imports(path: Path) -> list[str]:
    """Every logmetrics module `path` imports, at the top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("logmetrics")
        ):
            base = node.module.removeprefix("logmetrics").lstrip(".")
            for alias in node.names:
                target = f"{base}.{alias.name}" if base else alias.name
                is_module = (PACKAGE / Path(*target.split("."))).with_suffix(".py").exists()
                is_package = (PACKAGE / Path(*target.split("."))).is_dir()
                found.append(target if is_module or is_package else base or "__init__")
        elif isinstance(node, ast.Import):
            found += [
                a.name.removeprefix("logmetrics.")
                for a in node.names
                if a.name.startswith("logmetrics.")
            ]
    return found


def _used_names(path: Path) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            counts[node.id] += 1
        elif isinstance(node, ast.Attribute):
            counts[node.attr] += 1
        elif isinstance(node, ast.alias):
            counts[node.name.split(".")[-1]] += 1
    return counts


def _public_definitions(path: Path) -> list[tuple[str, int]]:
    """(name, uses the definition itself counts as) of each public top-level definition."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            found.append((node.name, 0))
        elif isinstance(node, ast.Assign):
            found += [(t.id, 1) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.append((node.target.id, 1))
    return [(name, own) for name, own in found if not name.startswith("_")]


def test_every_public_name_in_src_is_used_by_production_code() -> None:
    uses = [_used_names(path) for path in PRODUCTION]
    idle = [
        f"{_module_name(path)}.{name}"
        for path in PACKAGE.rglob("*.py")
        for name, own in _public_definitions(path)
        if name not in PUBLIC_API and sum(counts[name] for counts in uses) <= own
    ]
    assert idle == [], f"used by tests or by nothing (move to tests/ or delete): {idle}"


def test_the_checks_find_an_idle_name_and_an_upward_import(tmp_path: Path) -> None:
    """The two checks can fail: an unused constant and a rule importing a flow are seen."""
    module = tmp_path / "m.py"
    module.write_text("from logmetrics.flows.chunk import Chunk\nUNUSED = 1\n")
    assert ("UNUSED", 1) in _public_definitions(module)
    assert _used_names(module)["UNUSED"] == 1  # only its own assignment: idle
    assert _imports(module) == ["flows.chunk"]
    assert FLOORS[_room("flows.chunk")] > FLOORS[_room("rules.daily")]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=_module_name)
def test_imports_run_downward(path: Path) -> None:
    module = _module_name(path)
    room = _room(module)
    upward = [
        target
        for target in _imports(path)
        if _room(target) != room and FLOORS[_room(target)] >= FLOORS[room]
    ]
    assert upward == [], f"{module} imports from its own floor or above: {upward}"


IO_ATTRIBUTES = {"read", "write", "readStream", "writeStream", "sql", "table", "saveAsTable"}


@pytest.mark.parametrize("path", sorted((PACKAGE / "rules").glob("*.py")), ids=_module_name)
def test_the_rules_are_pure(path: Path) -> None:
    """No rule imports a flow, a table, the session or the CLI, nor reads or writes data."""
    forbidden = ("flows", "tables", "session", "cli", "demo", "report")
    bad_imports = [t for t in _imports(path) if t.split(".")[0] in forbidden]
    io = sorted(
        {
            node.attr
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and node.attr in IO_ATTRIBUTES
        }
    )
    assert (bad_imports, io) == ([], []), f"{_module_name(path)}: {bad_imports} {io}"
