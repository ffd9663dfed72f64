"""The platform floor: start local Spark with Delta exactly as logmetrics does, write one 1-row
Delta table, exit. What any Spark + Delta job on this machine pays before it does any work.

    python -m benchmarks.platform_floor --config RUN.yaml --out DIR

The session comes from `logmetrics.session.get_spark` with the `spark` section of the same
config the timed logmetrics runs use, so the JVM, its settings and Delta's jars are the same;
like the CLI, the process exits without stopping Spark. Only public, long-standing functions of
logmetrics are used, so the script also runs against an older checkout (`--baseline-repo`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from logmetrics.config import load_config
from logmetrics.session import get_spark


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.platform_floor")
    parser.add_argument("--config", required=True, help="the logmetrics config of the runs")
    parser.add_argument("--out", required=True, help="path of the new 1-row Delta table")
    args = parser.parse_args(argv)
    spark = get_spark(load_config([args.config]).spark)
    spark.createDataFrame([(1,)], "x int").write.format("delta").save(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
