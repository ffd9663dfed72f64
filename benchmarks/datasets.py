"""The benchmark's input data: generated once with `logmetrics.synthetic`, reused afterwards.

Each dataset lives in its own folder under the data root with a `_bench.json` marker holding
the generator's parameters; it is regenerated only when the marker is missing or differs (a
half-written dataset has no marker, since the marker is written last). Day i of a dataset does
not depend on the number of days generated, so shorter runs read a prefix of the date range.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from logmetrics.synthetic import generate

log = logging.getLogger(__name__)

MARKER = "_bench.json"


@dataclass(frozen=True)
class DatasetSpec:
    """What `logmetrics.synthetic.generate` is asked for (dirty data, always)."""

    name: str
    start: dt.date
    days: int
    queries_per_day: int
    seed: int
    list_length: int

    def end(self, days: int | None = None) -> dt.date:
        """The last date of the first `days` days (all of them by default)."""
        return self.start + dt.timedelta(days=(days or self.days) - 1)

    def marker(self) -> dict[str, object]:
        return {**asdict(self), "start": self.start.isoformat(), "dirty": True}


@dataclass(frozen=True)
class Dataset:
    """A generated dataset on disk."""

    spec: DatasetSpec
    root: Path

    @property
    def served_logs(self) -> Path:
        return self.root / "served_logs"

    @property
    def clusters(self) -> Path:
        """The cluster table as Parquet (the generator's own output; no Spark needed)."""
        return self.root / "clusters_parquet"


def ensure_dataset(spec: DatasetSpec, data_root: Path) -> Dataset:
    """The dataset of `spec` under `data_root`, generated first if it is missing or stale."""
    root = data_root / spec.name
    marker = root / MARKER
    if marker.exists() and json.loads(marker.read_text()) == spec.marker():
        log.info("dataset %s: reusing %s", spec.name, root)
        return Dataset(spec, root)
    log.info(
        "dataset %s: generating %d days x %d requests (top-%d) into %s",
        spec.name,
        spec.days,
        spec.queries_per_day,
        spec.list_length,
        root,
    )
    marker.unlink(missing_ok=True)
    generate(
        root,
        spec.start,
        spec.days,
        spec.queries_per_day,
        spec.seed,
        list_length=spec.list_length,
        dirty=True,
    )
    marker.write_text(json.dumps(spec.marker(), indent=2) + "\n")
    return Dataset(spec, root)


def job_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The options every engine process takes (what `engines.Workload.job_arguments` passes)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--served-logs", type=Path, required=True, help="Parquet served logs")
    parser.add_argument("--clusters", type=Path, required=True, help="Parquet cluster table")
    parser.add_argument("--start", type=dt.date.fromisoformat, required=True)
    parser.add_argument("--end", type=dt.date.fromisoformat, required=True)
    parser.add_argument("--ks", default="5,10,20", help="comma-separated k values")
    parser.add_argument("--threshold", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    return parser


REPO = Path(__file__).resolve().parent.parent
"""The checkout the benchmark runs from: bench-data/ and bench-out/ go under it."""


def data_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options that pick the generated data (`dataset`) and where runs go; resolve the two
    directories after parsing."""
    parser.add_argument("--days", type=int, default=90, help="days of the long workload")
    parser.add_argument("--queries-per-day", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data")
    parser.add_argument("--out-dir", type=Path, default=REPO / "bench-out")
    return parser
