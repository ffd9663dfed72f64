"""The house rules of src/, read from the code itself (ast), without importing it.

- Every public function, class and constant of src/logmetrics is used by production code
  (src/, jobs/, benchmarks/, deploy/): what only tests need lives in tests/.
- Imports run one way: face (cli, demo) -> flows (and the report) -> rules / quality / inputs /
  tables -> the ground floor (config, schemas, storage, session, errors, interrupt, phases,
  redaction). Nothing upward, and the rules are pure: no flows, inputs, tables, session or CLI,
  and no reads or writes.
"""

from __future__ import annotations

import ast
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

PUBLIC_API = {"logmetrics.session.DELTA_PACKAGE"}
"""Public names kept for users of the package though nothing here calls them: the default
line's Delta jar (logmetrics.session), for a deployer's spark-submit; the README, docs/cluster.md
and the Airflow DAG name it, and tests/test_session.py and tests/deploy/test_dags.py check that
they agree with it. (The DAG's own constant of that name made it look used here, by its text.)"""

# The floors, top to bottom: a module imports from its own floor's package or from floors below.
FLOORS = {
    "face": 4,
    "flows": 3,
    "report": 3,
    "rules": 2,
    "quality": 2,
    "tables": 2,
    "inputs": 2,
    "synthetic": 2,
    "ground": 1,
}
GROUND = {
    "config",
    "storage",
    "console",
    "schemas",
    "session",
    "errors",
    "interrupt",
    "phases",
    "redaction",
    "__init__",
}


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


def _dotted(path: Path, package: Path = PACKAGE) -> str | None:
    """The module a file of src/logmetrics (`package`) is (a package's __init__ is the
    package); None for a file outside it."""
    if package not in path.parents:
        return None
    parts = path.relative_to(package).with_suffix("").parts
    return ".".join(("logmetrics", *(p for p in parts if p != "__init__")))


def _bindings(tree: ast.AST) -> dict[str, str]:
    """Each name an import binds, anywhere in the module, and what it stands for, dotted:
    `from logmetrics.flows import chunk as chunk_flow` binds chunk_flow to
    logmetrics.flows.chunk, `import pyarrow.parquet as pq` pq to pyarrow.parquet."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    bound[head] = head
    return bound


def _resolved(node: ast.expr, bound: dict[str, str], module: str | None) -> str | None:
    """What a name or an attribute chain stands for, dotted, through the imports that bind its
    head; a module's own top-level name is `module.name`; None for anything else."""
    attributes: list[str] = []
    while isinstance(node, ast.Attribute):
        attributes.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    if node.id in bound:
        head = bound[node.id]
    elif module is not None:
        head = f"{module}.{node.id}"
    else:
        head = node.id
    return ".".join([head, *attributes])


def _used_names(path: Path, package: Path = PACKAGE) -> set[str]:
    """Every logmetrics name `path` uses, dotted (logmetrics.flows.chunk.Chunk), resolved
    through the imports that bind it: an import, a name read, or an attribute of an imported
    module. A name that merely has the same text as a definition is not a use of it."""
    tree = ast.parse(path.read_text())
    bound, module = _bindings(tree), _dotted(path, package)
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            used |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
            name = _resolved(node, bound, module)
            parts = name.split(".") if name else []
            used |= {".".join(parts[:n]) for n in range(2, len(parts) + 1)}
    return {name for name in used if name.startswith("logmetrics.")}


def _public_definitions(path: Path) -> list[str]:
    """The public top-level definitions of a module of src/logmetrics."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            found.append(node.name)
        elif isinstance(node, ast.Assign):
            found += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.append(node.target.id)
    return [name for name in found if not name.startswith("_")]


def _idle(package: Path, production: list[Path]) -> list[str]:
    """The public names of `package`'s modules that no production file uses."""
    used = set().union(*(_used_names(path, package) for path in production))
    defined = [
        f"{_dotted(path, package)}.{name}"
        for path in sorted(package.rglob("*.py"))
        for name in _public_definitions(path)
    ]
    return [name for name in defined if name not in used | PUBLIC_API]


def test_every_public_name_in_src_is_used_by_production_code() -> None:
    idle = _idle(PACKAGE, PRODUCTION)
    assert idle == [], f"used by tests or by nothing (move to tests/ or delete): {idle}"


def test_the_checks_find_an_idle_name_an_upward_import_and_io_in_a_rule(tmp_path: Path) -> None:
    """The checks can fail: a constant used by nothing, and a function whose name is only an
    attribute of something else elsewhere, are idle; a rule importing a flow, and a rule that
    opens or reads a file, are seen."""
    module = tmp_path / "m.py"
    module.write_text("from logmetrics.flows.chunk import Chunk\nUNUSED = 1\n")
    assert "UNUSED" in _public_definitions(module)
    assert _imports(module) == ["flows.chunk"]
    assert FLOORS[_room("flows.chunk")] > FLOORS[_room("rules.daily")]

    package = tmp_path / "src" / "logmetrics"
    (package / "rules").mkdir(parents=True)
    rule = package / "rules" / "r.py"
    rule.write_text("def describe():\n    return 1\n\n\ndef used():\n    return describe()\n")
    user = package / "flows.py"
    user.write_text("import logmetrics.rules.r as r\n\nr.used()\nsomething.describe()\n")
    assert _idle(package, [rule, user]) == []  # describe is used by used(), in its module
    rule.write_text("def describe():\n    return 1\n\n\ndef used():\n    return 2\n")
    assert _idle(package, [rule, user]) == ["logmetrics.rules.r.describe"]

    for io in [
        "open('x')",
        "Path('x').read_text()",
        "pd.read_csv('x')",
        "pq.ParquetFile('x')",
        "frame.to_parquet('x')",
        "spark.read.parquet('x')",
    ]:
        rule.write_text(f"import pandas as pd\nimport pyarrow.parquet as pq\n\nx = {io}\n")
        assert _io_calls(rule), io
    rule.write_text("import pandas as pd\n\nx = pd.DataFrame({'a': [1]}).astype('int64')\n")
    assert _io_calls(rule) == []


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


# Reads and writes a rule must not make: Spark's readers and writers (attributes), any call to
# open() or to a read_* / write_* function or method (pd.read_csv, Path.read_text, ...), pandas'
# writers (DataFrame.to_csv, ...) and file classes, and any call into a file-format module.
IO_ATTRIBUTES = {"read", "write", "readStream", "writeStream", "sql", "table", "saveAsTable"}
IO_METHODS = {"to_csv", "to_parquet", "to_excel", "to_pickle", "to_feather"}
IO_METHODS |= {"to_hdf", "to_sql", "to_orc", "to_stata", "ExcelFile", "ExcelWriter", "HDFStore"}
IO_MODULES = ("pyarrow.parquet", "pyarrow.csv", "pyarrow.json", "pyarrow.dataset")
IO_MODULES += ("pyarrow.feather", "pyarrow.orc", "io", "os", "shutil", "pathlib", "glob")


def _io_calls(path: Path) -> list[str]:
    """The reads and writes in a module, as written: Spark's reader and writer attributes, and
    the calls that open, read or write a file (resolved through the module's imports)."""
    tree = ast.parse(path.read_text())
    bound = _bindings(tree)
    found = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in IO_ATTRIBUTES
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        name = _resolved(func, bound, None) or last  # `Path(p).read_text`: just its attribute
        if (
            last == "open"
            or last.startswith(("read_", "write_"))
            or last in IO_METHODS
            or name.startswith(tuple(f"{m}." for m in IO_MODULES))
        ):
            found.add(name)
    return sorted(found)


@pytest.mark.parametrize("path", sorted((PACKAGE / "rules").glob("*.py")), ids=_module_name)
def test_the_rules_are_pure(path: Path) -> None:
    """No rule imports a flow, an input, a table, the session or the CLI, nor reads or writes
    data: no Spark reader or writer, no open(), read_* or write_* call, no pandas or pyarrow
    file I/O."""
    forbidden = ("flows", "inputs", "tables", "storage", "session", "cli", "demo", "report")
    bad_imports = [t for t in _imports(path) if t.split(".")[0] in forbidden]
    assert (bad_imports, _io_calls(path)) == ([], []), _module_name(path)
