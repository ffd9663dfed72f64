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

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from logmetrics.synthetic import generate, unserved_chunks

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


@dataclass(frozen=True)
class BigClustersSpec:
    """Days of served logs drawn from a corpus of `served_chunks`, beside a cluster table of
    `table_chunks` rows (one Parquet file): the corpus's own rows, then chunks no log serves,
    about `multi_member_share` of all chunks in multi-member clusters. The workload of a real
    corpus: a cluster table far larger than what a day serves."""

    name: str
    start: dt.date
    days: int
    queries_per_day: int
    seed: int
    served_chunks: int
    table_chunks: int
    multi_member_share: float = 0.4

    def marker(self) -> dict[str, object]:
        return {**asdict(self), "start": self.start.isoformat(), "dirty": True}

    def dataset_spec(self) -> DatasetSpec:
        """Its logs as a `DatasetSpec` (top-10 lists)."""
        return DatasetSpec(self.name, self.start, self.days, self.queries_per_day, self.seed, 10)


def ensure_big_clusters(spec: BigClustersSpec, data_root: Path) -> Dataset:
    """The dataset of `spec` under `data_root`, generated first if it is missing or stale: the
    logs with `logmetrics.synthetic.generate`, the table written a batch at a time with pyarrow
    (never whole in memory)."""
    root = data_root / spec.name
    marker = root / MARKER
    if marker.exists() and json.loads(marker.read_text()) == spec.marker():
        log.info("dataset %s: reusing %s", spec.name, root)
        return Dataset(spec.dataset_spec(), root)
    log.info(
        "dataset %s: generating %d day(s) x %d requests from %d chunks, a cluster table of %d",
        spec.name,
        spec.days,
        spec.queries_per_day,
        spec.served_chunks,
        spec.table_chunks,
    )
    marker.unlink(missing_ok=True)
    data = generate(
        root,
        spec.start,
        spec.days,
        spec.queries_per_day,
        spec.seed,
        dirty=True,
        corpus_chunks=spec.served_chunks,
    )
    corpus = pq.read_table(data.clusters)
    corpus_multi = _multi_member_chunks(corpus)
    unserved = spec.table_chunks - corpus.num_rows
    share = (spec.multi_member_share * spec.table_chunks - corpus_multi) / unserved
    partial = data.clusters.with_name(".big.parquet")
    with pq.ParquetWriter(partial, corpus.schema) as writer:
        writer.write_table(corpus)
        for table in unserved_chunks(spec.served_chunks, unserved, max(share, 0.0), spec.seed):
            writer.write_table(table)
    partial.replace(data.clusters)
    marker.write_text(json.dumps(spec.marker(), indent=2) + "\n")
    return Dataset(spec.dataset_spec(), root)


def _multi_member_chunks(clusters: pa.Table) -> int:
    """Rows of a cluster table whose cluster id more than one row holds."""
    counts = clusters.group_by("cluster_id").aggregate([("cluster_id", "count")])
    multi = pc.filter(
        counts,
        pc.and_(pc.is_valid(counts["cluster_id"]), pc.greater(counts["cluster_id_count"], 1)),
    )
    return int(pc.sum(multi["cluster_id_count"]).as_py() or 0)


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


def repo_relative(path: Path) -> str:
    """A path under the repository as a relative one: results.json is committed."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def data_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options that pick the generated data (`dataset`) and where runs go; resolve the two
    directories after parsing."""
    parser.add_argument("--days", type=int, default=90, help="days of the long workload")
    parser.add_argument("--queries-per-day", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data")
    parser.add_argument("--out-dir", type=Path, default=REPO / "bench-out")
    return parser
