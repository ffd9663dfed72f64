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
from importlib.resources import files

from pyspark.sql import SparkSession

from logmetrics.config import OutputConfig
from logmetrics.errors import InputError
from logmetrics.tables.catalog import (
    DAILY_TABLE,
    OUTPUT_TABLES,
    quote_identifier,
    read_table,
    sql_target,
    table_ref,
)

_REFERENCE = re.compile(r"\$\{schema\}\.([A-Za-z_][A-Za-z0-9_]*)")
_VIEW = re.compile(r"CREATE OR REPLACE VIEW \$\{schema\}\.([A-Za-z_][A-Za-z0-9_]*)")


def view_statements(output: OutputConfig) -> list[tuple[str, str]]:
    """(the view's SQL name, its CREATE OR REPLACE VIEW statement) for every view."""
    tables = {table.name: sql_target(table_ref(output, table)) for table in OUTPUT_TABLES}
    prefix = [output.catalog, output.schema_name] if output.schema_name is not None else []

    def name(match: re.Match[str]) -> str:
        if match[1] in tables:
            return tables[match[1]]
        return ".".join(quote_identifier(p) for p in [*prefix, match[1]] if p is not None)

    statements = []
    for path in sorted(files("logmetrics.tables").joinpath("sql").iterdir(), key=str):
        if not path.name.endswith(".sql"):
            continue
        text = path.read_text()
        view = _VIEW.search(text)
        if view is None:
            raise ValueError(f"{path.name} creates no view named ${{schema}}.<view>")
        # From the statement on: the comments above it speak of ${schema} for spark-sql users.
        statement = _REFERENCE.sub(name, text[view.start() :]).strip().rstrip(";")
        if "${" in statement:
            raise ValueError(f"{path.name}: a reference other than ${{schema}}.<name> is left")
        statements.append((_REFERENCE.sub(name, view[0]).split()[-1], statement))
    return statements


def create_views(spark: SparkSession, output: OutputConfig) -> list[str]:
    """Create or replace every view; their SQL names. The views read the daily table, which
    must exist (a view over a missing table is an analysis error)."""
    if read_table(spark, output, DAILY_TABLE) is None:
        where = table_ref(output, DAILY_TABLE)
        raise InputError(f"no views: {DAILY_TABLE.name} is not written yet ({where})")
    created = []
    for view, statement in view_statements(output):
        spark.sql(statement)
        created.append(view)
    return created


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
