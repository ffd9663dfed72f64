"""Kept cluster keys: the keys of one cluster table state under one salt, with the facts their
check found, in a local directory (by default `<warehouse>/_cluster_keys`), so that a run
against an unchanged table reads them instead of building them again (docs/cluster-scale.md).

An entry is `<dir>/<identity>-s<salt>/<writer>/`: the keys as Parquet files, then `_entry.json`,
written last and atomically, with the check's verdict, the facts and every data file's name
and size. An entry without it (a write in progress, a run that died), or whose files are not
the ones it lists, is never read: the keys are built again. Each writer has its own folder, so
two runs that miss at once never write into the same one. The identity is the caller's: a
hash of what the keys depend on.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

ENTRY = "_entry.json"
DATA = "keys"
KEEP = 3
"""Entries kept (the most recently used); older ones are deleted when a new one is written."""
ABANDONED_SECONDS = 24 * 3600
"""A writer's folder without `_entry.json` older than this is a run that died: deleted."""


@dataclass(frozen=True)
class Entry:
    """A complete entry: `facts` None when the keys' hashes were found to collide (no data)."""

    path: Path
    facts: dict[str, int] | None

    @property
    def data(self) -> str:
        return str(self.path / DATA)


@dataclass(frozen=True)
class KeysCache:
    """The kept keys of one identity (a hash of the table's state and of the code that builds
    the keys), under each salt, in a local `root`."""

    root: Path
    identity: str

    def find(self, salt: int) -> Entry | None:
        """The newest complete entry of this identity under `salt` whose files are all there
        as written, marked used; None when there is none (an unreadable one is left for
        `evict`)."""
        folder = self._folder(salt)
        if not folder.is_dir():
            return None
        found = []
        for writer in folder.iterdir():
            marker = writer / ENTRY
            try:
                entry = json.loads(marker.read_text())
                found.append((marker.stat().st_mtime, writer, entry))
            except (OSError, ValueError):
                continue
        for _, writer, entry in sorted(found, key=lambda f: f[0], reverse=True):
            if _complete(writer, entry):
                os.utime(writer / ENTRY)  # used: the last to be evicted
                facts = entry.get("facts")
                return Entry(writer, None if facts is None else dict(facts))
            log.warning("kept cluster keys at %s are not as written: ignored", writer)
        return None

    def new_entry(self, salt: int) -> Path:
        """A folder of its own for a writer (the keys go to its `keys` folder)."""
        path = self._folder(salt) / uuid.uuid4().hex[:12]
        path.mkdir(parents=True)
        return path

    def _folder(self, salt: int) -> Path:
        return self.root / f"{self.identity}-s{salt}"

    def commit(self, path: Path, facts: Mapping[str, int] | None) -> Entry:
        """Complete the entry at `path`: its files listed, then `_entry.json` written atomically
        (`facts` None: the keys collide; their files, which the run may still be reading, go
        with the entry when it is evicted)."""
        data = path / DATA
        files = _data_files(data) if data.is_dir() else {}
        entry = {"facts": None if facts is None else dict(facts), "files": files}
        partial = path / f".{ENTRY}.{uuid.uuid4().hex[:8]}"
        partial.write_text(json.dumps(entry, indent=1, sort_keys=True))
        partial.replace(path / ENTRY)
        return Entry(path, entry["facts"])

    def evict(self, keep: int = KEEP) -> None:
        """Delete all but the `keep` most recently used entries (of any identity) and the
        folders of writers that died; a failure to delete is only logged."""
        entries, abandoned = [], []
        now = time.time()
        for writer in self.root.glob("*/*"):
            marker = writer / ENTRY
            try:
                entries.append((marker.stat().st_mtime, writer))
            except OSError:
                try:
                    if now - writer.stat().st_mtime > ABANDONED_SECONDS:
                        abandoned.append(writer)
                except OSError:
                    continue
        entries.sort(reverse=True)
        for writer in [w for _, w in entries[keep:]] + abandoned:
            try:
                shutil.rmtree(writer)
                if not any(writer.parent.iterdir()):
                    writer.parent.rmdir()
            except OSError as exc:
                log.warning("could not delete old cluster keys at %s: %s", writer, exc)


def read_keys(spark: SparkSession, entry: Entry) -> DataFrame:
    """The keys of a complete entry (`facts` not None)."""
    return spark.read.parquet(entry.data)


def write_keys(keys_df: DataFrame, path: Path) -> DataFrame:
    """Write `keys_df` into the entry folder `path` (not yet complete) and read it back."""
    keys_df.write.mode("errorifexists").parquet(str(path / DATA))
    return keys_df.sparkSession.read.parquet(str(path / DATA))


def _data_files(data: Path) -> dict[str, int]:
    return {f.name: f.stat().st_size for f in sorted(data.iterdir()) if f.is_file()}


def _complete(writer: Path, entry: object) -> bool:
    """Whether the entry lists its data files, and they are there with the sizes it lists."""
    if not isinstance(entry, dict) or "facts" not in entry or "files" not in entry:
        return False
    if entry["facts"] is None:
        return True  # a collision is a verdict alone
    data = writer / DATA
    try:
        return bool(entry["files"]) and _data_files(data) == entry["files"]
    except OSError:
        return False
