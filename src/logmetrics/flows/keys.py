"""The run's cluster keys: built once under a salt, or read back from the keys an earlier run
kept for the same table version; checked exact beside the work that uses them; and joined to
each chunk of days whole and broadcast, cut down to the chunks it serves, or by a shuffle, by
what the session's memory holds. A broadcast that runs out of memory anyway takes the next
plan, said in a warning; after the last, the run stops with a sentence naming the settings.

The rules (the keys, their hashes, the checks, the cut-down) are `rules.cluster_keys`, where
kept keys are stored `tables.keys_cache`; this module chooses between them and holds the frames
(docs/cluster-scale.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from pyspark import StorageLevel
from pyspark.sql import DataFrame

from logmetrics import __version__, storage
from logmetrics.config import Config
from logmetrics.errors import LogmetricsError
from logmetrics.flows.side_steps import SideSteps
from logmetrics.quality import facts as quality_facts
from logmetrics.quality.facts import CLUSTER_FACT_COLUMNS, cluster_fact_aggregates
from logmetrics.rules import cluster_keys as cluster_keys_rules
from logmetrics.rules.cluster_keys import (
    cluster_keys,
    filter_served_keys,
    key_hash_checks,
    served_chunk_hashes,
)
from logmetrics.session import BroadcastMemory
from logmetrics.storage import Place, absolute
from logmetrics.tables.catalog import schema_name
from logmetrics.tables.keys_cache import FolderKeys, KeysStore, TableKeys

log = logging.getLogger(__name__)


HASH_SALTS = 4

T = TypeVar("T")
GIB = 1024**3


class HashCollision(Exception):
    """Two chunk ids or two cluster keys share a hash under the keys' salt."""


@dataclass(frozen=True)
class ClusterKeys:
    """`cluster_keys` of the cluster table under one salt, and the check, running beside the
    work that uses them, that its hashes are exact (no two chunk ids share a `chunk_hash`, no
    two cluster keys a `cluster_hash`) with the table's facts for the quality gates
    (`quality.facts.CLUSTER_FACT_COLUMNS`). The keys are persisted in memory, or read from the
    kept keys (`tables.keys_cache`): `frame` is done once they can be used."""

    frame: Future[DataFrame]
    salt: int
    check: Future[dict[str, int] | None]

    @property
    def df(self) -> DataFrame:
        """The keys (waits for them to be written when they are being kept)."""
        return self.frame.result()

    def facts(self) -> dict[str, int]:
        """The cluster table's facts; `HashCollision` if the hashes are not exact."""
        facts = self.check.result()
        if facts is None:
            raise HashCollision(self.salt)
        return facts

    def unpersist(self) -> None:
        """Drop the keys held in memory (kept keys hold none); no wait, no error."""
        if self.frame.done() and self.frame.exception() is None:
            self.frame.result().unpersist()


def start_cluster_keys(
    clusters_df: DataFrame, salt: int, side: SideSteps, kept: KeysStore | None = None
) -> ClusterKeys:
    """The keys under `salt` (or the first salt after it not known to collide, with `kept`),
    their check running as a side step. A collision (never seen in practice) is found before
    anything is written, and the caller computes the chunk again under the next salt, so
    unique_clusters stays exact.

    With `kept` (`KeysStore`): keys kept by an earlier run are read, with their facts, and
    need no check; otherwise they are built and written there (a side step the chunk waits
    for), then checked, and kept with the verdict. Without it, they are built and persisted
    in memory."""
    spark = clusters_df.sparkSession
    while True:
        if salt >= HASH_SALTS:
            raise LogmetricsError(f"cluster keys collide under {HASH_SALTS} different hashes")
        entry = kept.find(spark, salt) if kept is not None else None
        if entry is None or entry.facts is not None:
            break
        salt += 1  # a salt known to collide: the next one
    if kept is None:
        keys_df = cluster_keys(clusters_df, salt).persist(StorageLevel.MEMORY_AND_DISK)
        return ClusterKeys(
            _done(keys_df), salt, side.submit("cluster keys", exact_key_facts, keys_df)
        )
    if entry is not None:
        log.info("cluster keys of this table version reused (%s)", kept)
        return ClusterKeys(_done(kept.read(spark, entry)), salt, _done(entry.facts))
    slot = kept.new_entry(salt)
    frame = side.submit("cluster keys", _written_keys, clusters_df, salt, kept, slot)
    return ClusterKeys(
        frame, salt, side.submit("cluster keys check", _kept_check, frame, kept, slot)
    )


KEEP_KEYS_MIN_CHUNKS = 100_000
"""Cluster tables with fewer rows have their keys built every run, in memory, not kept: such a
table's keys take a second or two to build, beside the main pass, and keeping them costs its
first run a write. At 200k chunks (the benchmark's small table) a nightly with kept keys was
not slower than one that built them (benchmarks/README.md, "Kept cluster keys")."""


def kept_keys(config: Config, cluster_state: str, table_rows: int) -> KeysStore | None:
    """Where this run keeps (and finds) the cluster keys of the table's state, or None when
    they are built every run: `backfill.keep_cluster_keys` off, a table below
    KEEP_KEYS_MIN_CHUNKS rows, a keys folder on a store logmetrics has no reader for, or a
    Parquet table on such a store, whose state is its files' names alone. The folder is
    `backfill.cluster_keys_dir`, else `<output.warehouse>/_cluster_keys` (local or S3); with
    catalog tables and no folder, two Delta tables beside them (`tables.keys_cache`)."""
    backfill, source, output = config.backfill, config.inputs.clusters, config.output
    if not backfill.keep_cluster_keys or table_rows < KEEP_KEYS_MIN_CHUNKS:
        return None
    location = source.location
    if location is not None and source.data_format != "delta" and storage.place(location) is None:
        log.info("cluster keys built for this run only: the Parquet table's store has no reader")
        return None
    what = {
        "format": KEYS_FORMAT,
        "logmetrics": __version__,
        "code": _code_hash(),
        "table": absolute(source.location) if source.location is not None else source.table,
        "table_format": source.data_format,
        "state": cluster_state,
    }
    if source.columns.mapped():  # other columns read are another table's keys
        what["columns"] = source.columns.mapped()
    identity = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]
    folder = backfill.cluster_keys_dir
    if folder is None and output.warehouse is not None:
        folder = output.warehouse.rstrip("/") + "/_cluster_keys"
    if folder is None:  # catalog tables: the keys in tables beside them
        return TableKeys(schema_name(output), identity)
    root = storage.place(folder)
    if root is None:
        storage.say_no_reader(folder, "kept cluster keys", "they are built every run")
        return None
    return FolderKeys(root, identity)


KEYS_FORMAT = 1
"""The kept keys' layout: a change to it (or to the code that builds them) makes a new identity."""


def _code_hash() -> str:
    """A hash of the code the kept keys and facts come from: a change to it is a new identity,
    whatever the version says (a checkout between releases)."""
    digest = hashlib.sha256()
    for module in (cluster_keys_rules, quality_facts):
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()[:16]


def _written_keys(
    clusters_df: DataFrame, salt: int, kept: KeysStore, slot: Place | str
) -> DataFrame:
    """The keys written to the entry `slot` and read back; if they cannot be written, built
    and persisted in memory as without a keys store (said in a warning)."""
    keys_df = cluster_keys(clusters_df, salt)
    try:
        return kept.write(keys_df, slot)
    except Exception as exc:  # the run goes on without keeping them
        log.warning("could not keep the cluster keys in %s (%s): built in memory", kept, exc)
        return keys_df.persist(StorageLevel.MEMORY_AND_DISK)


def _kept_check(
    frame: Future[DataFrame], kept: KeysStore, slot: Place | str
) -> dict[str, int] | None:
    """`exact_key_facts` of the written keys; then the entry is completed with the verdict
    (a failure to do so is only a warning: the next run builds them again)."""
    keys_df = frame.result()
    facts = exact_key_facts(keys_df)
    spark = keys_df.sparkSession
    try:
        if keys_df.is_cached and facts is not None:  # not written: nothing to keep
            kept.discard(spark, slot)
        else:
            kept.commit(spark, slot, facts)
        kept.evict(spark)
    except Exception as exc:
        log.warning("could not keep the cluster keys in %s: %s", kept, exc)
    return facts


def _done(value: T) -> Future[T]:
    future: Future[T] = Future()
    future.set_result(value)
    return future


def exact_key_facts(keys_df: DataFrame) -> dict[str, int] | None:
    """The cluster table's facts if both hashes are exact over it, else None: one aggregation."""
    row = keys_df.agg(*cluster_fact_aggregates(), *key_hash_checks()).first()
    assert row is not None  # a global aggregate always has one row
    if not (row.chunk_hashes_exact and row.cluster_hashes_exact):
        return None
    return {c: int(row[c]) for c in CLUSTER_FACT_COLUMNS}


@dataclass(frozen=True)
class KeysPlan:
    """The plans a chunk of days may take (docs/cluster-scale.md): the whole table broadcast
    when it `table_fits`, else the keys of the chunks it serves broadcast when they are at most
    `max_chunks`, else its entries shuffled to the whole table. `limit` says what set
    `max_chunks`, for the log."""

    table_fits: bool
    max_chunks: int
    limit: str = "backfill.broadcast_max_chunks"

    def next(self) -> KeysPlan | None:
        """The plan after this one (whose broadcast ran out of memory), None after the last."""
        if self.table_fits:
            return replace(self, table_fits=False)
        if self.max_chunks > 0:
            return KeysPlan(False, 0, "a broadcast that ran out of memory")
        return None


@dataclass(frozen=True)
class ChunkKeys:
    """The cluster keys a chunk of days joins its entries to, and whether they are broadcast;
    `served_df` is the chunk's served chunk hashes, persisted while the chunk uses them."""

    df: DataFrame
    broadcast: bool
    served_df: DataFrame | None = None

    def unpersist(self) -> None:
        if self.served_df is not None:
            self.served_df.unpersist()


def keys_for_chunk(keys_df: DataFrame, salt: int, logs_df: DataFrame, plan: KeysPlan) -> ChunkKeys:
    """The keys the chunk's logs are joined to (docs/cluster-scale.md):

    - the whole table (`keys_df`, under `salt`), broadcast, when it `plan.table_fits`;
    - else the keys of the chunk ids the logs serve (`filter_served_keys`), broadcast, when
      those are at most `plan.max_chunks`: the served hashes are counted first (one read of
      the `results` column), and they bound the cut-down keys from above;
    - else the whole table, joined by a shuffle of the entries.
    """
    if plan.table_fits:
        return ChunkKeys(keys_df, broadcast=True)
    served_df = served_chunk_hashes(logs_df, salt).persist(StorageLevel.MEMORY_AND_DISK)
    served = served_df.count()
    if served > plan.max_chunks:
        served_df.unpersist()
        log.warning(
            "the chunk serves %d distinct chunk ids, above %s (%d): its entries are shuffled "
            "to the cluster keys (fewer days_per_chunk avoid it)",
            served,
            plan.limit,
            plan.max_chunks,
        )
        return ChunkKeys(keys_df, broadcast=False)
    log.info("cluster keys cut down to the %d chunk id(s) the chunk serves", served)
    return ChunkKeys(keys_df.transform(filter_served_keys, served_df), True, served_df)


BROADCAST_CHUNKS_PER_HEAP_GIB = 1_000_000
"""`backfill.broadcast_max_chunks: auto`: chunk ids broadcast per GiB of the smallest heap that
holds the broadcast (`session.BroadcastMemory.heap`). Measured on the 20M-chunk benchmark
table (14-character chunk ids), plain Spark, a 3.9 GiB heap: a whole-table broadcast of 8M
chunk ids passed (2.1M per GiB), 9M ran out of memory; this is half of what passed
(docs/cluster-scale.md, "Broadcast limits")."""
BROADCAST_CHUNKS_PER_NATIVE_GIB = 2_800_000
"""The same with Comet, per GiB of its native memory pool's share of one task (the pool over
the tasks run at once): every task builds the broadcast keys' hash table in the pool, which
Comet shares fairly between the tasks' operators. Measured with the local default (4g: a pool
of 1.4 GiB, 2 tasks at once): 4M chunk ids passed (5.7M per GiB of a task's share), 5M ran out;
half of what passed."""
RESULT_BYTES_PER_CHUNK = 50
"""Bytes of task results the driver collects per chunk id broadcast: twice the 25 B measured
(the broadcast stage's result sizes in the event log, 2M chunk ids, plain Spark and Comet
alike). Bounds `auto` by `spark.driver.maxResultSize` (1g: 21M chunk ids)."""


def broadcast_limit(setting: int | str, memory: BroadcastMemory) -> tuple[int, str]:
    """`backfill.broadcast_max_chunks` resolved, and what set it (for the log): `auto` is
    BROADCAST_CHUNKS_PER_HEAP_GIB per GiB of heap (with Comet, no more than
    BROADCAST_CHUNKS_PER_NATIVE_GIB per GiB of its pool), and no more than
    `spark.driver.maxResultSize` can collect."""
    if setting != "auto":
        return int(setting), "backfill.broadcast_max_chunks"
    limits = [int(BROADCAST_CHUNKS_PER_HEAP_GIB * memory.heap / GIB)]
    if memory.native_pool is not None:
        share = memory.native_pool / memory.task_slots
        limits.append(int(BROADCAST_CHUNKS_PER_NATIVE_GIB * share / GIB))
    if memory.max_result is not None:
        limits.append(memory.max_result // RESULT_BYTES_PER_CHUNK)
    return min(limits), f"backfill.broadcast_max_chunks (auto: {memory.describe()})"


def first_plan(setting: int | str, table_rows: int, memory: BroadcastMemory) -> KeysPlan:
    """The plan a run starts with: the whole table broadcast when its rows are at most the
    limit (`broadcast_limit` of `backfill.broadcast_max_chunks`), else the cut-down keys."""
    max_chunks, limit = broadcast_limit(setting, memory)
    plan = KeysPlan(table_rows <= max_chunks, max_chunks, limit)
    if not plan.table_fits:
        log.info(
            "the cluster table has %d rows, above %s (%d): each chunk of days broadcasts only "
            "the keys of the chunks it serves",
            table_rows,
            limit,
            max_chunks,
        )
    return plan


_OUT_OF_MEMORY = re.compile(
    r"OutOfMemoryError|Java heap space|TaskResultLost|Not enough memory to build and broadcast"
    r"|spark\.driver\.maxResultSize|GC overhead limit exceeded"
    # Comet's native engine: its memory pool (spark.memory.offHeap.size) cannot hold a join's
    # build side, such as the broadcast keys' hash table.
    r"|Resources exhausted: .*allocation failed|Failed to acquire \d+ bytes"
)


def out_of_memory(exc: BaseException) -> bool:
    """Whether a failure of Spark's is memory running out (in the driver, or in a task): its
    message, or that of a Java exception under it (causes, and the failures adaptive execution
    gathers as suppressed ones)."""
    return isinstance(exc, Exception) and any(_OUT_OF_MEMORY.search(m) for m in _messages(exc))


def _messages(exc: Exception) -> Iterator[str]:
    yield str(exc)
    todo = [getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)]
    seen = 0
    while todo and seen < 50:  # a Java exception's chain, read through py4j
        java = todo.pop()
        if java is None:
            continue
        seen += 1
        try:
            yield str(java.toString())
            todo += [java.getCause(), *java.getSuppressed()]
        except Exception:  # the JVM is gone, or not a Throwable: what was read is enough
            continue


def plan_after_memory_failure(
    plan: KeysPlan, exc: Exception, memory: BroadcastMemory, table_rows: int
) -> KeysPlan:
    """The plan to compute a chunk again with, after it ran out of memory with `plan`
    (warned); a `LogmetricsError` saying what to change when no plan is left."""
    heap = memory.describe()
    settings = (
        "lower backfill.broadcast_max_chunks (or backfill.days_per_chunk) or raise "
        "spark.driver_memory (on a cluster, spark.driver.memory and spark.executor.memory)"
    )
    after = plan.next()
    if after is None:
        raise LogmetricsError(
            f"the chunk ran out of memory ({heap}) with its entries shuffled to the cluster "
            f"keys: {settings}"
        ) from exc
    what = (
        f"the whole cluster table's keys ({table_rows:,} rows)"
        if plan.table_fits
        else "the served chunks' keys"
    )
    instead = (
        "the keys of the chunks it serves"
        if after.max_chunks
        else "its entries shuffled to the keys"
    )
    log.warning(
        "the broadcast of %s ran out of memory (%s): the chunk is computed again with %s; to "
        "avoid the retry, %s",
        what,
        heap,
        instead,
        settings,
    )
    return after
