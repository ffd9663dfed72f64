"""The run's cluster keys: built once under a salt, persisted, checked exact beside the work
that uses them, and cut down per chunk when the whole table is too large to broadcast.

The rules (the keys, their hashes, the checks, the cut-down) are `rules.cluster_keys`; this
module chooses between them and holds the persisted frames (docs/cluster-scale.md).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import DataFrame

from logmetrics.errors import LogmetricsError
from logmetrics.flows.side_steps import SideSteps
from logmetrics.quality.facts import CLUSTER_FACT_COLUMNS, cluster_fact_aggregates
from logmetrics.rules.cluster_keys import (
    cluster_keys,
    filter_served_keys,
    key_hash_checks,
    served_chunk_hashes,
)

log = logging.getLogger(__name__)


HASH_SALTS = 4


class HashCollision(Exception):
    """Two chunk ids or two cluster keys share a hash under the keys' salt."""


@dataclass(frozen=True)
class ClusterKeys:
    """`cluster_keys` of the cluster table under one salt, persisted, and the check, running
    beside the work that uses them, that its hashes are exact (no two chunk ids share a
    `chunk_hash`, no two cluster keys a `cluster_hash`) with the table's facts for the quality
    gates (`quality.facts.CLUSTER_FACT_COLUMNS`)."""

    df: DataFrame
    salt: int
    check: Future[dict[str, int] | None]

    def facts(self) -> dict[str, int]:
        """The cluster table's facts; `HashCollision` if the hashes are not exact."""
        facts = self.check.result()
        if facts is None:
            raise HashCollision(self.salt)
        return facts


def start_cluster_keys(clusters_df: DataFrame, salt: int, side: SideSteps) -> ClusterKeys:
    """The keys under `salt`, usable at once; their check runs as a side step. A collision
    (never seen in practice) is found before anything is written, and the caller computes the
    chunk again under the next salt, so unique_clusters stays exact."""
    if salt >= HASH_SALTS:
        raise LogmetricsError(f"cluster keys collide under {HASH_SALTS} different hashes")
    keys_df = cluster_keys(clusters_df, salt).persist(StorageLevel.MEMORY_AND_DISK)
    return ClusterKeys(keys_df, salt, side.submit("cluster keys", exact_key_facts, keys_df))


def exact_key_facts(keys_df: DataFrame) -> dict[str, int] | None:
    """The cluster table's facts if both hashes are exact over it, else None: one aggregation."""
    row = keys_df.agg(*cluster_fact_aggregates(), *key_hash_checks()).first()
    assert row is not None  # a global aggregate always has one row
    if not (row.chunk_hashes_exact and row.cluster_hashes_exact):
        return None
    return {c: int(row[c]) for c in CLUSTER_FACT_COLUMNS}


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


def keys_for_chunk(
    keys_df: DataFrame, salt: int, logs_df: DataFrame, table_fits: bool, max_chunks: int
) -> ChunkKeys:
    """The keys the chunk's logs are joined to (docs/cluster-scale.md):

    - the whole table (`keys_df`, under `salt`), broadcast, when it `table_fits`;
    - else the keys of the chunk ids the logs serve (`filter_served_keys`), broadcast, when
      those are at most `max_chunks`: the served hashes are counted first (one read of the
      `results` column), and they bound the cut-down keys from above;
    - else the whole table, joined by a shuffle of the entries.
    """
    if table_fits:
        return ChunkKeys(keys_df, broadcast=True)
    served_df = served_chunk_hashes(logs_df, salt).persist(StorageLevel.MEMORY_AND_DISK)
    served = served_df.count()
    if served > max_chunks:
        served_df.unpersist()
        log.warning(
            "the chunk serves %d distinct chunk ids, above backfill.broadcast_max_chunks (%d): "
            "its entries are shuffled to the cluster keys (fewer days_per_chunk avoid it)",
            served,
            max_chunks,
        )
        return ChunkKeys(keys_df, broadcast=False)
    log.info("cluster keys cut down to the %d chunk id(s) the chunk serves", served)
    return ChunkKeys(keys_df.transform(filter_served_keys, served_df), True, served_df)
