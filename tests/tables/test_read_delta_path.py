"""A Delta table addressed by its path (`tables.catalog.read_delta_path`)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from logmetrics.tables.catalog import read_delta_path


def test_no_table_until_its_first_commit(spark: SparkSession, tmp_path: Path) -> None:
    """No path, and a `_delta_log` another run has made but not yet committed to (the window
    in which two backfills create the same table), both read as no table; a commit as rows."""
    table = tmp_path / "unique_clusters_daily"
    assert read_delta_path(spark, str(table)) is None
    (table / "_delta_log").mkdir(parents=True)
    assert read_delta_path(spark, str(table)) is None
    spark.range(3).write.format("delta").mode("append").save(str(table))
    df = read_delta_path(spark, str(table))
    assert df is not None and sorted(r.id for r in df.collect()) == [0, 1, 2]
