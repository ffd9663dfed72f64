"""The engines the benchmark times, each a separate process over the same workload.

- `logmetrics`: the project's CLI, `logmetrics backfill`, with a config written for the run
  (Spark's event log on, so that the time can be broken down afterwards), into a fresh
  warehouse. Only the CLI, the config and the output tables are used: no internals. Variants
  differ in one setting each: `logmetrics` runs the defaults (Comet on), `logmetrics-plain`
  `spark.accelerator: none`, `logmetrics-chunkN` `backfill.days_per_chunk: N`.
- `duckdb`: the SQL reference (`benchmarks.duckdb_reference`).
- `naive`: the textbook Spark plan (`benchmarks.naive_spark`).
- `floor`: less than the metric work in plain Spark, a lower bound (`benchmarks.floor_spark`);
  its outputs are not the metric, so they are not checked. `floor-comet`: the same plan with
  Comet on, as logmetrics' default run has it: the floor that run is compared with.

Every run gets its own directory, emptied first; the outputs of the last run of each
(workload, engine) stay there for the correctness check.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml

from benchmarks import duckdb_reference, floor_spark, naive_spark
from benchmarks.datasets import Dataset

# logmetrics' output tables, under output.warehouse (docs/tables.md).
BY_QUERY_TABLE = "unique_clusters_by_query"
DAILY_TABLE = "unique_clusters_daily"
KS = (5, 10, 20)
THRESHOLD = 4
DRIVER_MEMORY = "4g"

# Engine names, as they appear in results.json and the report.
LOGMETRICS = "logmetrics"
LOGMETRICS_PLAIN = "logmetrics-plain"
LOGMETRICS_NO_CROWDING = "logmetrics-nocrowding"  # crowding.enabled: false (on by default)
DUCKDB = "duckdb"
NAIVE = "naive"
FLOOR = "floor"
FLOOR_COMET = "floor-comet"


@dataclass(frozen=True)
class Workload:
    """The first `days` days of a dataset, with every k of `KS`."""

    name: str
    dataset: Dataset
    days: int

    @property
    def start(self) -> dt.date:
        return self.dataset.spec.start

    @property
    def end(self) -> dt.date:
        return self.dataset.spec.end(self.days)

    def job_arguments(self) -> list[str]:
        """The command-line arguments the reference and the naive plan share."""
        return [
            "--served-logs",
            str(self.dataset.served_logs),
            "--clusters",
            str(self.dataset.clusters),
            "--start",
            self.start.isoformat(),
            "--end",
            self.end.isoformat(),
            "--ks",
            ",".join(str(k) for k in KS),
            "--threshold",
            str(THRESHOLD),
        ]


class Engine(Protocol):
    name: str
    checked: bool  # whether its outputs are the metric, checked against the reference's

    def prepare(self, workload: Workload, run_dir: Path) -> list[str]:
        """Set up `run_dir` (empty) and return the command that runs the workload."""
        ...

    def outputs(self, run_dir: Path) -> dict[str, str]:
        """Where the run's per-query and daily outputs are, for `benchmarks.check`."""
        ...


def fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


class Logmetrics:
    """`logmetrics backfill` over the workload's dates, event log on, into a new warehouse;
    `overrides` are config sections merged over the benchmark's config (a variant)."""

    checked = True

    def __init__(
        self, name: str = LOGMETRICS, overrides: Mapping[str, Mapping[str, object]] | None = None
    ) -> None:
        self.name = name
        self.overrides = {section: dict(values) for section, values in (overrides or {}).items()}

    def prepare(self, workload: Workload, run_dir: Path) -> list[str]:
        config = self.config_path(run_dir)
        fresh_dir(run_dir)
        (run_dir / "events").mkdir()  # Spark does not create the event log directory
        config.write_text(yaml.safe_dump(self.config(workload, run_dir), sort_keys=False))
        executable = Path(sys.executable).with_name("logmetrics")
        return [
            str(executable),
            "backfill",
            "--config",
            str(config),
            "--start",
            workload.start.isoformat(),
            "--end",
            workload.end.isoformat(),
        ]

    @staticmethod
    def config_path(run_dir: Path) -> Path:
        return run_dir / "config.yaml"

    @staticmethod
    def events_dir(run_dir: Path) -> Path:
        return run_dir / "events"

    def outputs(self, run_dir: Path) -> dict[str, str]:
        warehouse = run_dir / "warehouse"
        return {
            "format": "delta",
            "by_query": str(warehouse / BY_QUERY_TABLE),
            "daily": str(warehouse / DAILY_TABLE),
        }

    def config(self, workload: Workload, run_dir: Path) -> dict[str, object]:
        """The benchmark's config with this variant's overrides merged in, section by section."""
        config = self._base_config(workload, run_dir)
        for section, values in self.overrides.items():
            merged = config.get(section, {})
            assert isinstance(merged, dict)
            config[section] = {**merged, **values}
        return config

    @staticmethod
    def _base_config(workload: Workload, run_dir: Path) -> dict[str, object]:
        """Inputs, outputs, metrics and Spark; everything else (backfill.days_per_chunk,
        spark.accelerator, the quality gates) is the project's default, so the benchmark times
        what users run."""
        return {
            "inputs": {
                "served_logs": {
                    "path": str(workload.dataset.served_logs),
                    "format": "parquet",
                    "date_partition": "auto",
                },
                "clusters": {"path": str(workload.dataset.clusters), "format": "parquet"},
            },
            "output": {"warehouse": str(run_dir / "warehouse")},
            "metrics": {"ks": list(KS), "threshold": THRESHOLD},
            "spark": {
                "master": "local[*]",
                "driver_memory": DRIVER_MEMORY,
                "log_dir": str(run_dir / "logs"),
                "conf": {
                    "spark.eventLog.enabled": "true",
                    "spark.eventLog.dir": str(run_dir / "events"),
                    "spark.eventLog.compress": "false",  # JSON lines we can read back
                },
            },
        }


class DuckDBReference:
    """The SQL reference, `python -m benchmarks.duckdb_reference`."""

    name = DUCKDB
    checked = False  # the reference itself

    def prepare(self, workload: Workload, run_dir: Path) -> list[str]:
        fresh_dir(run_dir)
        return [
            sys.executable,
            "-m",
            "benchmarks.duckdb_reference",
            *workload.job_arguments(),
            "--out",
            str(run_dir),
            "--timings",
            str(self.steps_path(run_dir)),
        ]

    @staticmethod
    def steps_path(run_dir: Path) -> Path:
        return run_dir / "steps.json"

    def outputs(self, run_dir: Path) -> dict[str, str]:
        return {
            "format": "parquet",
            "by_query": str(run_dir / duckdb_reference.BY_QUERY_FILE),
            "daily": str(run_dir / duckdb_reference.DAILY_FILE),
        }


class NaiveSpark:
    """The naive plan, `python -m benchmarks.naive_spark`."""

    name = NAIVE
    checked = True
    module = "benchmarks.naive_spark"
    accelerator = "none"

    def prepare(self, workload: Workload, run_dir: Path) -> list[str]:
        fresh_dir(run_dir)
        return [
            sys.executable,
            "-m",
            self.module,
            *workload.job_arguments(),
            "--driver-memory",
            DRIVER_MEMORY,
            "--accelerator",
            self.accelerator,
            "--out",
            str(run_dir),
        ]

    def outputs(self, run_dir: Path) -> dict[str, str]:
        return {
            "format": "parquet",
            "by_query": str(run_dir / naive_spark.BY_QUERY_DIR),
            "daily": str(run_dir / naive_spark.DAILY_DIR),
        }


class FloorSpark(NaiveSpark):
    """The floor, `python -m benchmarks.floor_spark`: timed only, its outputs are not the metric."""

    name = FLOOR
    checked = False
    module = "benchmarks.floor_spark"

    def outputs(self, run_dir: Path) -> dict[str, str]:
        return {"format": "parquet", "by_query": str(run_dir / floor_spark.BY_QUERY_DIR)}


class FloorComet(FloorSpark):
    """The floor with Comet on (`--accelerator comet`), as logmetrics' default run has it."""

    name = FLOOR_COMET
    accelerator = "comet"
