"""Kept cluster keys: the keys of one cluster table state under one salt, with the facts their
check found, kept so that a run against an unchanged table reads them instead of building them
again (docs/cluster-scale.md). Two homes, one contract:

- **A folder** (`FolderKeys`): by default `<warehouse>/_cluster_keys`, on a local path or S3
  (`storage`). An entry is `<folder>/<identity>-s<salt>/<writer>/`: the keys as Parquet
  files, then `_entry.json`, written last and whole (a local rename, one S3 PUT), with the
  check's verdict, the facts and every data file's name and size. An entry without it (a write
  in progress, a run that died), or whose files are not the ones it lists, is never read.
  Each writer has its own folder, so two runs that miss at once never write into the same one.
- **Two Delta tables beside catalog outputs** (`TableKeys`, `output.catalog`/`output.schema`
  with no folder configured): `logmetrics_cluster_keys` holds the keys of every entry
  (partitioned by `entry`), `logmetrics_cluster_keys_entries` one row per complete entry with
  its facts, appended after the keys' commit: an entry without its row is never read.

The identity is the caller's: a hash of what the keys depend on. The last `KEEP` entries used
are kept; older ones, and writers that died, are deleted when a new entry is written.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pyarrow import fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType, TimestampType

from logmetrics.schemas import rows_frame
from logmetrics.storage import Place

log = logging.getLogger(__name__)

ENTRY = "_entry.json"
DATA = "keys"
KEEP = 3
"""Entries kept (the most recently used); older ones are deleted when a new one is written."""
ABANDONED_SECONDS = 24 * 3600
"""A writer's folder without `_entry.json` older than this is a run that died: deleted."""


@dataclass(frozen=True)
class Entry:
    """A complete entry: `facts` None when the keys' hashes were found to collide (no data).
    `where` is the entry's folder (a `Place`) or its id in the keys table."""

    where: Place | str
    facts: dict[str, int] | None


class KeysStore(Protocol):
    """Where the kept keys of one identity live, under each salt."""

    @property
    def identity(self) -> str:
        """A hash of what the keys depend on (the table's state, the code that builds them)."""

    def find(self, spark: SparkSession, salt: int) -> Entry | None:
        """The newest complete entry under `salt`, marked used; None when there is none."""

    def new_entry(self, salt: int) -> Place | str:
        """Where a writer writes a new entry's keys."""

    def write(self, keys_df: DataFrame, slot: Place | str) -> DataFrame:
        """`keys_df` written to the (not yet complete) entry, and read back."""

    def read(self, spark: SparkSession, entry: Entry) -> DataFrame:
        """The keys of a complete entry (`facts` not None)."""

    def commit(
        self, spark: SparkSession, slot: Place | str, facts: Mapping[str, int] | None
    ) -> None:
        """Complete the entry, with the check's verdict (`facts` None: the keys collide)."""

    def discard(self, spark: SparkSession, slot: Place | str) -> None:
        """Delete an entry that will not be completed."""

    def evict(self, spark: SparkSession, keep: int = KEEP) -> None:
        """Delete all but the `keep` most recently used entries (of any identity) and the
        writers that died; a failure to delete is only logged."""


@dataclass(frozen=True)
class FolderKeys:
    """The kept keys of one identity in a folder (`root`: local or S3)."""

    root: Place
    identity: str

    def __str__(self) -> str:
        return self.root.uri()

    def find(self, spark: SparkSession, salt: int) -> Entry | None:
        found = []
        for writer in self._folder(salt).listing():
            if writer.type != pafs.FileType.Directory:
                continue
            marker = self.root.at(writer.path).child(ENTRY)
            try:
                text = marker.read_text()
                found.append((marker.info().mtime_ns or 0, marker, json.loads(text), text))
            except (OSError, ValueError):
                continue
        for _, marker, entry, text in sorted(found, key=lambda f: f[0], reverse=True):
            writer = self.root.at(marker.path.rsplit("/", 1)[0])
            if _complete(writer, entry):
                marker.write_text(text)  # used: the last to be evicted
                facts = entry.get("facts")
                return Entry(writer, None if facts is None else dict(facts))
            log.warning("kept cluster keys at %s are not as written: ignored", writer.uri())
        return None

    def new_entry(self, salt: int) -> Place:
        return self._folder(salt).child(uuid.uuid4().hex[:12])

    def _folder(self, salt: int) -> Place:
        return self.root.child(f"{self.identity}-s{salt}")

    def write(self, keys_df: DataFrame, slot: Place | str) -> DataFrame:
        assert isinstance(slot, Place)
        data = slot.child(DATA).uri()
        keys_df.write.mode("errorifexists").parquet(data)
        return keys_df.sparkSession.read.parquet(data)

    def read(self, spark: SparkSession, entry: Entry) -> DataFrame:
        assert isinstance(entry.where, Place)
        return spark.read.parquet(entry.where.child(DATA).uri())

    def commit(
        self, spark: SparkSession, slot: Place | str, facts: Mapping[str, int] | None
    ) -> None:
        """Its data files listed, then `_entry.json` written whole (`facts` None: the keys
        collide; their files, which the run may still be reading, go with the entry when it is
        evicted)."""
        assert isinstance(slot, Place)
        entry = {"facts": None if facts is None else dict(facts), "files": _data_files(slot)}
        slot.child(ENTRY).write_text(json.dumps(entry, indent=1, sort_keys=True))

    def discard(self, spark: SparkSession, slot: Place | str) -> None:
        assert isinstance(slot, Place)
        slot.delete_dir()

    def evict(self, spark: SparkSession, keep: int = KEEP) -> None:
        entries, abandoned = [], []
        now = time.time_ns()
        files: dict[str, list[pafs.FileInfo]] = {}
        for info in self.root.listing(recursive=True):  # <identity-salt>/<writer>/...
            parts = info.path[len(self.root.path) :].strip("/").split("/")
            if len(parts) >= 3 and info.type == pafs.FileType.File:
                files.setdefault("/".join(parts[:2]), []).append(info)
        for writer, infos in files.items():
            marker = self.root.child(writer, ENTRY).path
            marked = [i.mtime_ns or 0 for i in infos if i.path == marker]
            if marked:
                entries.append((marked[0], writer))
            elif now - max(i.mtime_ns or 0 for i in infos) > ABANDONED_SECONDS * 10**9:
                abandoned.append(writer)
        entries.sort(reverse=True)
        for writer in [w for _, w in entries[keep:]] + abandoned:
            try:
                self.root.child(writer).delete_dir()
            except OSError as exc:
                log.warning("could not delete old cluster keys at %s: %s", writer, exc)


def _data_files(slot: Place) -> dict[str, int]:
    return {
        info.base_name: int(info.size)
        for info in slot.child(DATA).listing()
        if info.type == pafs.FileType.File
    }


def _complete(writer: Place, entry: object) -> bool:
    """Whether the entry lists its data files, and they are there with the sizes it lists."""
    if not isinstance(entry, dict) or "facts" not in entry or "files" not in entry:
        return False
    if entry["facts"] is None:
        return True  # a collision is a verdict alone
    try:
        return bool(entry["files"]) and _data_files(writer) == entry["files"]
    except OSError:
        return False


KEYS_TABLE = "logmetrics_cluster_keys"
ENTRIES_TABLE = "logmetrics_cluster_keys_entries"
CACHE_ENTRY = StructType(
    [
        StructField("entry", StringType()),
        StructField("identity", StringType()),
        StructField("salt", IntegerType()),
        StructField("facts", StringType()),
        StructField("written_at", TimestampType()),
    ]
)
"""A row of ENTRIES_TABLE: a slot of kept keys, whose writer, salt and facts, and when."""


@dataclass(frozen=True)
class TableKeys:
    """The kept keys of one identity in two Delta tables of a catalog schema (`schema`: its
    quoted SQL name, `catalog`.`schema`)."""

    schema: str
    identity: str

    def __str__(self) -> str:
        return f"{self.schema}.{KEYS_TABLE}"

    @property
    def _keys(self) -> str:
        return f"{self.schema}.{KEYS_TABLE}"

    @property
    def _entries(self) -> str:
        return f"{self.schema}.{ENTRIES_TABLE}"

    def find(self, spark: SparkSession, salt: int) -> Entry | None:
        if not spark.catalog.tableExists(self._entries):
            return None
        row = (
            spark.read.table(self._entries)
            .where((F.col("identity") == self.identity) & (F.col("salt") == salt))
            .orderBy(F.desc("written_at"))
            .select("entry", "facts")
            .first()
        )
        if row is None:
            return None
        facts = json.loads(row.facts) if row.facts is not None else None
        return Entry(str(row.entry), None if facts is None else dict(facts))

    def new_entry(self, salt: int) -> str:
        return f"{self.identity}-s{salt}-{uuid.uuid4().hex[:12]}"

    def write(self, keys_df: DataFrame, slot: Place | str) -> DataFrame:
        assert isinstance(slot, str)
        (
            keys_df.withColumn("entry", F.lit(slot))
            .write.format("delta")
            .mode("append")
            .partitionBy("entry")
            .saveAsTable(self._keys)
        )
        return self.read(keys_df.sparkSession, Entry(slot, {}))

    def read(self, spark: SparkSession, entry: Entry) -> DataFrame:
        return (
            spark.read.table(self._keys)
            .where(F.col("entry") == F.lit(str(entry.where)))
            .drop("entry")
        )

    def commit(
        self, spark: SparkSession, slot: Place | str, facts: Mapping[str, int] | None
    ) -> None:
        salt = int(str(slot).rsplit("-", 2)[1].removeprefix("s"))
        row = (
            str(slot),
            self.identity,
            salt,
            None if facts is None else json.dumps(dict(facts), sort_keys=True),
            dt.datetime.now(dt.UTC),
        )
        rows_frame(spark, [row], CACHE_ENTRY).write.format("delta").mode("append").saveAsTable(
            self._entries
        )

    def discard(self, spark: SparkSession, slot: Place | str) -> None:
        if spark.catalog.tableExists(self._keys):
            spark.sql(f"DELETE FROM {self._keys} WHERE entry = '{slot}'")

    def evict(self, spark: SparkSession, keep: int = KEEP) -> None:
        if not spark.catalog.tableExists(self._entries):
            return
        rows = spark.read.table(self._entries).orderBy(F.desc("written_at")).collect()
        old = [row.entry for row in rows[keep:]]
        if not old:
            return
        listed = ", ".join(f"'{entry}'" for entry in old)
        try:  # an entry's row goes last: keys without their row are never read
            spark.sql(f"DELETE FROM {self._keys} WHERE entry IN ({listed})")
            spark.sql(f"DELETE FROM {self._entries} WHERE entry IN ({listed})")
        except Exception as exc:  # the next run evicts them
            log.warning("could not delete old cluster keys in %s: %s", self._keys, exc)
