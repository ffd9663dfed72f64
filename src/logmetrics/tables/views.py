"""The BI views (`sql/*.sql`, shipped in the wheel) created over the tables as configured.

Each file is one `CREATE OR REPLACE VIEW ${schema}.<view> ... FROM ${schema}.<table>`, runnable
as it stands with `spark-sql --hivevar schema=...`. Here `${schema}.<table>` becomes the
table's SQL name (`catalog`.`schema`.`table`, or delta.`<path>` for a path warehouse) and
`${schema}.<view>` the view's (in `output.schema`, or the session's current schema when the
tables are paths).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib.resources import files

from pyspark.sql import SparkSession

from logmetrics.config import OutputConfig
from logmetrics.errors import InputError
from logmetrics.tables.catalog import (
    DAILY_TABLE,
    OUTPUT_TABLES,
    Table,
    quote_identifier,
    read_table,
    sql_target,
    table_ref,
)

_REFERENCE = re.compile(r"\$\{schema\}\.([A-Za-z_][A-Za-z0-9_]*)")
_VIEW = re.compile(r"CREATE OR REPLACE VIEW \$\{schema\}\.([A-Za-z_][A-Za-z0-9_]*)")


def view_statements(output: OutputConfig) -> list[tuple[str, str]]:
    """(the view's SQL name, its CREATE OR REPLACE VIEW statement) for every view."""
    return [(view.name, view.statement) for view in _views(output)]


@dataclass(frozen=True)
class _View:
    name: str  # its SQL name
    statement: str
    tables: tuple[Table, ...]  # the output tables it reads


def _views(output: OutputConfig) -> list[_View]:
    tables = {table.name: sql_target(table_ref(output, table)) for table in OUTPUT_TABLES}
    prefix = [output.catalog, output.schema_name] if output.schema_name is not None else []

    def name(match: re.Match[str]) -> str:
        if match[1] in tables:
            return tables[match[1]]
        return ".".join(quote_identifier(p) for p in [*prefix, match[1]] if p is not None)

    views = []
    for path in sorted(files("logmetrics.tables").joinpath("sql").iterdir(), key=str):
        if not path.name.endswith(".sql"):
            continue
        text = path.read_text()
        view = _VIEW.search(text)
        if view is None:
            raise ValueError(f"{path.name} creates no view named ${{schema}}.<view>")
        # From the statement on: the comments above it speak of ${schema} for spark-sql users.
        body = text[view.start() :]
        statement = _REFERENCE.sub(name, body).strip().rstrip(";")
        if "${" in statement:
            raise ValueError(f"{path.name}: a reference other than ${{schema}}.<name> is left")
        read = {m[1] for m in _REFERENCE.finditer(body[view.end() - view.start() :])}
        sources = tuple(t for t in OUTPUT_TABLES if t.name in read)
        views.append(_View(_REFERENCE.sub(name, view[0]).split()[-1], statement, sources))
    return views


def create_views(spark: SparkSession, output: OutputConfig) -> tuple[list[str], list[str]]:
    """Create or replace every view whose tables are written (a view over a missing table is an
    analysis error); their SQL names, and one line per view left out, naming the table it
    lacks (say unique_clusters_crowding, with crowding.enabled false). Nothing is created
    before the daily table exists: no day was published yet."""
    if read_table(spark, output, DAILY_TABLE) is None:
        where = table_ref(output, DAILY_TABLE)
        raise InputError(f"no views: {DAILY_TABLE.name} is not written yet ({where})")
    written: dict[str, bool] = {}
    created, left_out = [], []
    for view in _views(output):
        for table in view.tables:
            if table.name not in written:
                written[table.name] = read_table(spark, output, table) is not None
        missing = [t.name for t in view.tables if not written[t.name]]
        if missing:
            left_out.append(f"{view.name}: not created, {', '.join(missing)} is not written yet")
            continue
        spark.sql(view.statement)
        created.append(view.name)
    return created, left_out


def views_last(spark: SparkSession) -> bool:
    """Whether views created in this session outlive it: a metastore behind the session's
    catalog (Hive's, or a platform's such as Unity Catalog), not Spark's in-memory one."""
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return True
    implementation = spark.conf.get("spark.sql.catalogImplementation", "in-memory")
    return implementation != "in-memory"


def views_sql(output: OutputConfig) -> str:
    """Every view's statement, as one SQL script for a session of another Spark SQL engine."""
    return "".join(f"{statement};\n\n" for _, statement in view_statements(output))
