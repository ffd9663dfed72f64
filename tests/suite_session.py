"""The settings of the suite's one SparkSession (tests/conftest.py starts it) and of the Spark
processes some tests start with them: tuned for speed on 2 cores."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from logmetrics.session import PROFILES

# Measured on a 2-core machine: one shuffle partition makes the suite about 2.4x faster than
# Spark's defaults. Two task threads let a chunk's concurrent Delta writes overlap.
TEST_CONF = {
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC -XX:+UseSerialGC",
    "spark.rdd.compress": "false",
    "spark.shuffle.compress": "false",
    # Test-only: no checksum file and no per-file statistics at each Delta commit (the suite's
    # tables are a few rows; measured 4% off the two end-to-end modules, 2 alternating rounds).
    "spark.databricks.delta.writeChecksumFile.enabled": "false",
    "spark.databricks.delta.stats.collect": "false",
}

# The JIT compilers, under `make test`: three xdist worker JVMs on 2 cores keep every core busy
# (vmstat: 0% idle for the whole run), and 15 minutes in, the compiler threads had taken 29-33%
# of each worker JVM's CPU (C2 about 24%, C1 the rest). The quick compiler alone (the `short`
# profile's options: -XX:TieredStopAtLevel=1), as under xdist below: seven modules (hostile,
# reliability, gate_policy, alerts_end_to_end, evaluation, report, cli_process) on three
# workers in 471 and 495 s against 580 and 586 s with the tiered default (2 alternating rounds,
# 2026-12-02, platform floor 19 s that hour: 0.83); the whole suite 20:29 against 22:44 (0.90,
# one pair, the same afternoon). `make test-fast` runs on two workers, so it too has the quick
# compiler; a single process (a bare `pytest`) keeps the tiered default: there C2 compiles on
# the core its one task leaves free, and a warm backfill ran 5-25% faster with it.
#
# SHORT_JVM: the quick compiler, also the JVM of the backfill processes the orchestration tests
# start. No class-data archive: one built per .venv (a 2-day backfill in a JVM that dumped the
# classes it loaded, 54-75 s before the first test) saved its JVMs' class loading, but the whole
# suite on three workers took as long with it as without (2026-12-04, alternating, the archive
# present, moved away, present: 695, 692 and 700 s of pytest at a platform floor of 10-15 s;
# test time 2048 / 2037 / 2050 s: the orchestration module 8-10% slower without, the rest
# within the noise), so on a fresh clone it only added its build.
SHORT_JVM = PROFILES["short"]["spark.driver.extraJavaOptions"]
if os.environ.get("PYTEST_XDIST_WORKER"):
    TEST_CONF["spark.driver.extraJavaOptions"] = SHORT_JVM

# Test-only: the suite's inputs are a few hundred rows, on which compiling generated code
# (whole-stage and each expression's) costs more than it saves: a warm 4-day in-process backfill
# took 13-16 s interpreted against 16-18 s compiled, with 22% less JVM CPU (2 alternating rounds,
# 2026-12-02). The results are Spark's either way; `make test-release` runs the reference tests
# on Spark 4.0 with code generation on (LOGMETRICS_TEST_CODEGEN=on), the engine's production path.
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
if os.environ.get("LOGMETRICS_TEST_CODEGEN", "off") != "on":
    TEST_CONF.update(INTERPRETED)


# The suite's engine: plain Spark unless LOGMETRICS_TEST_ACCELERATOR says otherwise. Comet, the
# default engine, starts a native runtime beside each JVM; under `make test`'s three workers on
# 2 cores that costs more than it saves: four modules that do not compare with the reference
# (living_inputs, gate_policy, reliability, evaluation) on three workers took 727 and 570 s on
# Comet, 516 and 513 s on plain Spark (2026-12-03 13:09-13:48 UTC, in the order Comet, plain,
# plain, Comet; platform floor 32 s that hour): 0.71 and 0.90 a pair; the property tests, many
# small queries, 441 + 231 s on Comet against 313 + 169 s on plain Spark (1.4x; two fresh-clone
# runs the same afternoon, floor 23-25 s). The tests check what logmetrics computes, the
# same on either engine; `make test-guarantees` (CI's second step) runs those that compare every
# published table with the pure-Python reference (REFERENCE_TESTS in the Makefile) on Comet
# (LOGMETRICS_TEST_ACCELERATOR=comet), and `make test-release` on Spark 4.0 with generated code,
# so the outputs are checked on both engines.
ACCELERATOR = os.environ.get("LOGMETRICS_TEST_ACCELERATOR", "none")


def process_config(data: Path, warehouse: Path, **sections: Any) -> Path:
    """The config of the runs a test starts over generated data (`data`: a folder of
    `synthetic.generate`), as YAML beside the warehouse: the suite session's engine and Spark
    settings (one task, no generated code, no Delta checksum or file statistics) with a JVM
    for short runs (SHORT_JVM), so that a process the test starts runs as the in-process runs
    do, a few seconds of work each; ks 5 and 10, every day published (quality warn);
    `sections` added (`backfill={"days_per_chunk": 2}`)."""
    path = warehouse.parent / f"{warehouse.name}.yaml"
    config = {
        "inputs": {
            "served_logs": {"path": str(data / "served_logs")},
            "clusters": {"path": str(data / "clusters_parquet"), "format": "parquet"},
        },
        "output": {"warehouse": str(warehouse)},
        "metrics": {"ks": [5, 10]},
        **sections,
        "quality": {"max_malformed_rate": 0.05, "on_failure": "warn"},
        "spark": process_spark(),
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def process_spark(conf: dict[str, str] | None = None, **settings: Any) -> dict[str, Any]:
    """The `spark` section of a config for a process a test starts: one core, the suite's
    settings and engine, the quick compiler (SHORT_JVM); `conf` added to Spark's settings and
    `settings` to the section (`log_dir=...`)."""
    return {
        "master": "local[1]",
        "driver_memory": "1g",
        "profile": "short",
        "accelerator": ACCELERATOR,
        **settings,
        "conf": {**TEST_CONF, "spark.driver.extraJavaOptions": SHORT_JVM, **(conf or {})},
    }
