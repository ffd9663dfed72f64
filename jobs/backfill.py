"""Entry point for spark-submit and Databricks `spark_python_task`: `logmetrics backfill ...`.

    spark-submit --packages io.delta:delta-spark_4.1_2.13:4.3.1 jobs/backfill.py \
        --config conf/local.yaml --start 2026-10-01 --end 2026-10-30

No logic lives here: it is the same code as the `logmetrics` console script.
"""

from __future__ import annotations

import sys

from logmetrics.cli import run_job

if __name__ == "__main__":
    sys.exit(run_job("backfill", sys.argv[1:]))
