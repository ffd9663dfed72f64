"""docs/tables.md documents every output table's columns exactly as the Delta tables carry them
(the column comments come from schemas.py), so BI users can trust it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from logmetrics import sinks

DOC = Path(__file__).resolve().parents[1] / "docs" / "tables.md"
TABLES = [value for value in vars(sinks).values() if isinstance(value, sinks.Table)]
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
def test_columns_match_the_schema(table: sinks.Table) -> None:
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
