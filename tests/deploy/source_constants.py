"""A Python file's module-level string constants, read without importing it: the DAG file
imports Airflow, logmetrics' modules import pyspark, and each venv of the tests lacks one."""

from __future__ import annotations

import ast
from pathlib import Path


def string_constants(path: Path) -> dict[str, str]:
    """Module-level NAME = "..." and NAME = f"...{OTHER}..." assignments, evaluated."""
    values: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
            continue
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            values[node.targets[0].id] = value.value
        elif isinstance(value, ast.JoinedStr):
            parts = []
            for part in value.values:
                if isinstance(part, ast.Constant):
                    parts.append(str(part.value))
                elif (
                    isinstance(part, ast.FormattedValue)
                    and isinstance(part.value, ast.Name)
                    and part.value.id in values
                ):
                    parts.append(values[part.value.id])
                else:  # a name computed at import (SPARK_LINE): not a constant
                    break
            else:
                values[node.targets[0].id] = "".join(parts)
    return values
