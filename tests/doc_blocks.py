"""The parts of a documentation page a test runs as written: a section, its fenced blocks, the
rows of its tables. Not a test module."""

from __future__ import annotations


def section(text: str, heading: str) -> str:
    """The text under `heading` (its `### ` line, without the marks), up to the next heading
    of that level or above."""
    return text.split(f"### {heading}", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]


def fenced(text: str, language: str, nth: int = 0) -> str:
    """The `nth` block fenced as `language` in `text`."""
    return text.split(f"```{language}\n")[nth + 1].split("```", 1)[0]


def markdown_rows(text: str, header: str) -> list[list[str]]:
    """The cells of the rows of the table whose header row is `header` (`| a | b |`)."""
    lines = text.split(header + "\n", 1)[1].splitlines()[1:]  # after the |---| row
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows
