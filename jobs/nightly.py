"""Entry point for spark-submit and Databricks `spark_python_task`: `logmetrics run ...`.

    spark-submit --packages io.delta:delta-spark_4.1_2.13:4.3.1 jobs/nightly.py \
        --config conf/local.yaml --date 2026-10-30

Without --date it computes yesterday (UTC). No logic lives here.
"""

from __future__ import annotations

import sys

from logmetrics.cli import run_job

if __name__ == "__main__":
    sys.exit(run_job("run", sys.argv[1:]))
