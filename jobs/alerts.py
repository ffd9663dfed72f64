"""Entry point for spark-submit and Databricks `spark_python_task`: `logmetrics alerts ...`.

    spark-submit --packages io.delta:delta-spark_4.1_2.13:4.3.1 jobs/alerts.py \
        --config conf/local.yaml --start 2026-10-30 --end 2026-10-30 --fail-on-alert

Judges published days from the daily table alone (no logs read); exit 4 with --fail-on-alert
when one of them has an alert. No logic lives here.
"""

from __future__ import annotations

import sys

from logmetrics.cli import run_job

if __name__ == "__main__":
    sys.exit(run_job("alerts", sys.argv[1:]))
