"""What the logmetrics DAGs publish, as their tests expect it: the tables each run task carries
as Assets (written out here, not read from the DAG file), and the downstream DAG
deploy/airflow/README.md shows, scheduled on one of them, as source to load: test_dags.py
parses it, test_nightly_end_to_end.py deploys it."""

from __future__ import annotations

from pathlib import Path

PUBLISHED = [
    "unique_clusters_by_query",
    "unique_clusters_daily",
    "unique_clusters_k_sweep",
    "redundancy_cost_daily",
    "unique_clusters_crowding",
    "unique_clusters_alerts",
    "data_quality",
]
README = Path(__file__).resolve().parents[2] / "deploy" / "airflow" / "README.md"
DAG_ID = "retrieval_metrics_refresh"
EXAMPLE_TABLES = '"s3://my-bucket/logmetrics/warehouse"'


def downstream_dag_source(tables: str) -> str:
    """The README's downstream DAG, its TABLES set to `tables`."""
    section = README.read_text().split("## Downstream DAGs", 1)[1].split("\n## ", 1)[0]
    source = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert source.count(f"TABLES = {EXAMPLE_TABLES}") == 1 and f'dag_id="{DAG_ID}"' in source
    return source.replace(EXAMPLE_TABLES, repr(tables))
