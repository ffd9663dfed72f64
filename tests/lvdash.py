"""The AI/BI dashboard the bundle deploys (deploy/databricks/dashboards/logmetrics.lvdash.json),
read as its tests need it: each dataset's SQL, each widget's queries, what a widget reads of its
datasets, and a widget query as the SQL a warehouse runs for it (the dataset's rows, the
widget's fields, grouped when the query is not disaggregated)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DASHBOARD = (
    Path(__file__).resolve().parents[1]
    / "deploy"
    / "databricks"
    / "dashboards"
    / "logmetrics.lvdash.json"
)
NAMES = re.compile(r"`([^`]+)`")  # the columns an expression reads: `median`, COUNT(`check`)


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def datasets(dashboard: dict[str, Any]) -> dict[str, str]:
    """Each dataset's name and its SQL (`queryLines` joined, as the dashboard runs it)."""
    return {d["name"]: "".join(d["queryLines"]) for d in dashboard["datasets"]}


def widgets(dashboard: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(page name, widget) for every widget that queries a dataset (not the text boxes)."""
    for page in dashboard["pages"]:
        for item in page["layout"]:
            if "queries" in item["widget"]:
                yield page["name"], item["widget"]


def _field_names(node: Any) -> Iterator[tuple[str | None, str]]:
    """(queryName or None, fieldName) of every encoding under a widget's spec."""
    if isinstance(node, dict):
        if "fieldName" in node:
            yield node.get("queryName"), node["fieldName"]
        for value in node.values():
            yield from _field_names(value)
    elif isinstance(node, list):
        for value in node:
            yield from _field_names(value)


def problems(dashboard: dict[str, Any], columns: dict[str, list[str]]) -> list[str]:
    """What a widget reads that is not there, one line each: a dataset the dashboard does not
    define, a column its dataset does not return (`columns`: each dataset's columns, as Spark
    gives them), an encoding of a field its queries do not define."""
    found = []
    for page, widget in widgets(dashboard):
        where = f"{page}/{widget['name']}"
        fields: dict[str, set[str]] = {}
        for named in widget["queries"]:
            query = named["query"]
            dataset = query["datasetName"]
            fields[named["name"]] = {f["name"] for f in query["fields"]}
            if dataset not in columns:
                found.append(f"{where}: dataset {dataset} is not defined")
                continue
            for field in query["fields"]:
                for name in NAMES.findall(field["expression"]):
                    if name not in columns[dataset]:
                        found.append(
                            f"{where}: field {field['name']} reads {name}, not a column of "
                            f"{dataset} ({', '.join(columns[dataset])})"
                        )
        every = set().union(*fields.values())
        for query_name, name in _field_names(widget["spec"]):
            if name not in (fields.get(query_name, set()) if query_name else every):
                found.append(f"{where}: encodes {name}, which its query does not define")
    return found


def widget_sql(query: dict[str, Any], dataset_sql: str) -> str:
    """The SQL a warehouse runs for one widget query: its fields over the dataset's rows,
    grouped by the fields that do not aggregate when the query is not disaggregated."""
    select = ", ".join(f"{f['expression']} AS `{f['name']}`" for f in query["fields"])
    grouped = "" if query.get("disaggregated", False) else " GROUP BY ALL"
    return f"SELECT {select} FROM ({dataset_sql}) AS dataset{grouped}"
