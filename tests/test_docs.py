"""docs/tables.md documents every output table's columns exactly as the Delta tables carry them
(the column comments come from schemas.py), so BI users can trust it."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from logmetrics.config import Config, load_config
from logmetrics.tables import catalog

DOC = Path(__file__).resolve().parents[1] / "docs" / "tables.md"
TABLES = [value for value in vars(catalog).values() if isinstance(value, catalog.Table)]
ROW = re.compile(
    r"^\| `(?P<name>[^`]+)` \| (?P<type>[^|]+) \| (?P<nullable>yes|no) \| (?P<comment>.*) \|$"
)


def _section(name: str) -> str:
    text = DOC.read_text()
    match = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/tables.md has no section for {name}"
    return match.group(1)


def test_every_table_is_listed() -> None:
    assert len(TABLES) >= 9
    listed = set(re.findall(r"^\| \[`([a-z_]+)`\]", DOC.read_text(), re.M))
    assert listed == {t.name for t in TABLES}


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_columns_match_the_schema(table: catalog.Table) -> None:
    section = _section(table.name)
    documented = [m.groupdict() for line in section.splitlines() if (m := ROW.match(line))]
    expected = [
        {
            "name": f.name,
            "type": f.dataType.simpleString(),
            "nullable": "yes" if f.nullable else "no",
            "comment": f.metadata["comment"],
        }
        for f in table.schema.fields
    ]
    assert [{**d, "type": d["type"].strip()} for d in documented] == expected
    assert table.comment.replace("\n", " ") in " ".join(
        line.lstrip("> ").strip() for line in section.splitlines() if line.startswith(">")
    )


CONFIG_DOC = DOC.parent / "config.md"


def _config_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every leaf key of the config, dotted (`alerts.min_effect.mean`)."""
    keys = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        options = (field.annotation,)  # a section, an optional one (X | None), or a leaf
        if typing.get_origin(field.annotation) in (typing.Union, types.UnionType):
            options = typing.get_args(field.annotation)
        models = [t for t in options if isinstance(t, type) and issubclass(t, BaseModel)]
        keys += _config_keys(models[0], f"{key}.") if models else [key]
    return keys


def test_every_config_key_is_documented() -> None:
    """docs/config.md has a table row for every key, in the section whose heading names the
    longest prefix of the key: the `alerts` section has a row for `min_effect.mean`."""
    text = CONFIG_DOC.read_text()
    headings = list(re.finditer(r"^#{3,4} `([a-z_.]+)`.*$", text, re.M))
    sections = {
        match.group(1): text[match.end() : nxt.start() if nxt else len(text)]
        for match, nxt in zip(headings, [*headings[1:], None], strict=True)
    }
    missing = []
    for key in _config_keys(Config):
        prefix = max((p for p in sections if key.startswith(p + ".")), key=len, default=None)
        rest = key if prefix is None else key[len(prefix) + 1 :]
        if prefix is None or not re.search(rf"^\| `{re.escape(rest)}`", sections[prefix], re.M):
            missing.append(key)
    assert len(_config_keys(Config)) > 50
    assert missing == []


REPO = DOC.parents[1]
PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "deploy").glob("*/README.md")),
    REPO / "benchmarks" / "README.md",
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
README = (REPO / "README.md").read_text()


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but - and _ dropped,
    spaces as hyphens."""
    headings = re.findall(
        r"^#+ (.+)$", re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S), re.M
    )
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    """Every relative link of the README and the docs names a file that exists, and an anchor
    that one of its headings gives."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and anchor not in _anchors(linked)):
            broken.append(target)
    assert broken == []


def test_the_readme_links_to_every_page_of_docs() -> None:
    linked = {(REPO / target.partition("#")[0]).resolve() for target in LINK.findall(README)}
    assert set((REPO / "docs").glob("*.md")) <= linked


def test_the_documented_evaluation_section_is_the_shipped_one() -> None:
    """docs/config.md's `evaluation` example is conf/eval.yaml's section, which the README's
    `evaluate` command layers over conf/local.yaml (tests/test_readme.py runs it on the demo's
    judged set); it loads as a config."""
    section = CONFIG_DOC.read_text().split("### `evaluation`", 1)[1].split("\n## ", 1)[0]
    (documented,) = re.findall(r"^```yaml\n(.*?)^```$", section, re.M | re.S)
    shipped = yaml.safe_load((REPO / "conf" / "eval.yaml").read_text())
    assert yaml.safe_load(documented) == shipped
    config = load_config([REPO / "conf" / "local.yaml", REPO / "conf" / "eval.yaml"])
    assert config.evaluation is not None and sorted(config.evaluation.runs) == ["dedup", "original"]
    assert "logmetrics evaluate --config conf/local.yaml --config conf/eval.yaml" in README
