"""output.table_properties: set when a table is created, and on a table created before they
were configured by `apply_table_properties` (what `logmetrics views` and `maintain` call)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from logmetrics.config import OutputConfig
from logmetrics.tables.catalog import (
    DAILY_TABLE,
    K_SWEEP_TABLE,
    apply_table_properties,
    ensure_table,
    sql_target,
    table_ref,
)

PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    "delta.logRetentionDuration": "interval 60 days",
}


def _properties(spark: SparkSession, output: OutputConfig, table_name: str) -> dict[str, str]:
    table = {DAILY_TABLE.name: DAILY_TABLE, K_SWEEP_TABLE.name: K_SWEEP_TABLE}[table_name]
    target = sql_target(table_ref(output, table))
    rows = spark.sql(f"SHOW TBLPROPERTIES {target}").collect()
    return {r.key: r.value for r in rows if r.key in PROPERTIES}


def test_created_with_the_properties_and_set_later_on_an_older_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    plain = OutputConfig(warehouse=str(tmp_path / "wh"))
    configured = OutputConfig(warehouse=str(tmp_path / "wh"), table_properties=PROPERTIES)

    ensure_table(spark, table_ref(plain, K_SWEEP_TABLE))  # created before any were configured
    ensure_table(spark, table_ref(configured, DAILY_TABLE))
    assert _properties(spark, configured, DAILY_TABLE.name) == PROPERTIES
    assert _properties(spark, configured, K_SWEEP_TABLE.name) == {}

    assert apply_table_properties(spark, configured, K_SWEEP_TABLE) is True
    assert _properties(spark, configured, K_SWEEP_TABLE.name) == PROPERTIES
    assert apply_table_properties(spark, plain, K_SWEEP_TABLE) is False  # nothing to set
    empty = OutputConfig(warehouse=str(tmp_path / "none"), table_properties=PROPERTIES)
    assert apply_table_properties(spark, empty, DAILY_TABLE) is False  # no table yet
    assert not (tmp_path / "none").exists()
