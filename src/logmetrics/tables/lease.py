"""The warehouse's writer lease, where the store does not stop a second writer of a Delta log.

Delta commits a version by creating its log file only if absent. Local files, HDFS, ABFS and GCS
refuse the second creator; S3 with delta-spark's default log store (`S3SingleDriverLogStore`)
does not: two processes can both write version N, and the later silently replaces the earlier
commit (docs/tables.md, "Concurrent runs"). So a run that writes a warehouse on S3 with that log
store first holds a lease: `<warehouse>/_writer_lease.json`, created only if absent (S3's
conditional write, If-None-Match, through Hadoop's S3A: `fs.s3a.create.conditional.enabled`
with `fs.option.create.conditional.overwrite`, in S3A 3.4.2 and later), renewed while the run
lasts (If-Match on its ETag), deleted when it ends. A second run finds it held and stops in one
line; a lease its holder left behind (killed: SIGKILL, a lost machine) is taken over once it
has lapsed, or at once when it names a process of this host that is gone.

Not needed (`needs_lease`): a warehouse elsewhere than S3, catalog tables, Databricks (its
commit service refuses a second writer), or a log store configured for several writers
(`S3DynamoDBLogStore`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from logmetrics import storage
from logmetrics.config import OutputConfig
from logmetrics.errors import LogmetricsError

log = logging.getLogger(__name__)

LEASE_FILE = "_writer_lease.json"
LEASE_SECONDS = 120
"""How long a lease lasts without a renewal: a holder that died blocks another host this long."""
RENEW_SECONDS = 30
_CONDITIONAL = "fs.option.create.conditional.overwrite"
_IF_MATCH = "fs.option.create.conditional.overwrite.etag"
_MULTI_WRITER_STORES = ("S3DynamoDBLogStore",)


class LeaseLost(LogmetricsError):
    """Another run took the warehouse's lease from this one (its renewals stopped past
    LEASE_SECONDS): this run makes no further commit."""


def needs_lease(output: OutputConfig, conf: Mapping[str, str]) -> bool:
    """Whether writing `output` needs the writer lease: a warehouse on S3 written through
    delta-spark's default log store, outside Databricks. `conf`: the session's Spark settings
    (a `spark.delta.logStore.<scheme>.impl` naming a multi-writer store turns it off)."""
    warehouse = output.warehouse
    if warehouse is None or output.schema_name is not None or not storage.is_s3(warehouse):
        return False
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return False
    kind = storage.scheme(warehouse)
    store = conf.get(f"spark.delta.logStore.{kind}.impl") or conf.get("spark.delta.logStore.class")
    return not (store and any(name in store for name in _MULTI_WRITER_STORES))


@dataclass
class _Holder:
    """What the lease file says."""

    run_id: str
    command: str
    host: str
    pid: int
    acquired_at: str
    expires_at: str

    def text(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @staticmethod
    def parse(text: str) -> _Holder | None:
        try:
            fields = json.loads(text)
            return _Holder(**{k: fields[k] for k in _Holder.__dataclass_fields__})
        except (ValueError, TypeError, KeyError):
            return None

    def lapsed(self, now: dt.datetime) -> bool:
        return dt.datetime.fromisoformat(self.expires_at) <= now

    def gone(self) -> bool:
        """A process of this host that no longer runs."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def describe(self) -> str:
        return (
            f"run {self.run_id} ({self.command}, pid {self.pid} on {self.host}, since "
            f"{self.acquired_at})"
        )


class WriterLease:
    """A held lease: renewed by a thread until `release`; `check` raises once it is lost."""

    def __init__(self, spark: SparkSession, uri: str, holder: _Holder, etag: str) -> None:
        self._spark, self._uri, self._holder, self._etag = spark, uri, holder, etag
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="writer-lease", daemon=True)
        self._thread.start()

    def check(self) -> None:
        if self._lost is not None:
            raise LeaseLost(self._lost)

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_SECONDS):
            self._holder.expires_at = _expiry()
            try:
                self._etag = _write(self._spark, self._uri, self._holder.text(), self._etag)
            except _Refused:
                mine = self._etag_now()
                if mine is not None:  # refused over a renewal of its own that landed unseen
                    self._etag = mine
                    continue
                try:
                    found = _read(self._spark, self._uri)
                except Exception:  # the store does not answer: it is read at the next turn
                    continue
                who = found[0].describe() if found and found[0] else "another run"
                self._lost = (
                    f"the writer lease of {self._uri} was taken by {who}: this run stops "
                    "before its next commit"
                )
                log.error("%s", self._lost)
                return
            except Exception as exc:  # the store did not answer: try again at the next turn
                # In the run's log only: a store that stopped answering fails the run's own
                # requests too, which the terminal hears of once, from the CLI.
                log.info("could not renew the writer lease at %s", self._uri, exc_info=exc)
                self._etag = self._etag_now() or self._etag

    def _etag_now(self) -> str | None:
        """The lease's ETag when the store holds this run's lease, else None. A renewal whose
        answer was lost (a connection reset, a timeout) may have landed all the same: its
        ETag is then the one the next renewal and the release must name."""
        try:
            found = _read(self._spark, self._uri)
        except Exception:  # the store still does not answer: the next turn reads it again
            return None
        if found is None or found[0] is None or found[0].run_id != self._holder.run_id:
            return None
        return found[1]

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._lost is not None:
            return
        try:
            found = _read(self._spark, self._uri)
            if found is not None and self._holds(*found):
                path = _path(self._spark, self._uri)
                path.getFileSystem(self._spark._jsc.hadoopConfiguration()).delete(path, False)
        except Exception as exc:  # it lapses by itself
            log.info("could not release the writer lease at %s", self._uri, exc_info=exc)

    def _holds(self, holder: _Holder | None, etag: str) -> bool:
        """Whether the lease the store holds is this run's: the ETag of its last renewal, or
        a renewal of its own that landed after its answer was lost."""
        return etag == self._etag or (holder is not None and holder.run_id == self._holder.run_id)


_CURRENT: list[WriterLease] = []


def check_held() -> None:
    """Before a commit: raise `LeaseLost` when this process's lease was taken from it."""
    for lease in _CURRENT:
        lease.check()


@contextlib.contextmanager
def held(
    spark: SparkSession, output: OutputConfig, run_id: str, command: str
) -> Iterator[WriterLease | None]:
    """The warehouse's writer lease for the block, when writing it needs one (`needs_lease`);
    a `LogmetricsError` naming the holder when another run holds it."""
    conf = dict(spark.sparkContext.getConf().getAll()) if hasattr(spark, "sparkContext") else {}
    if not needs_lease(output, conf):
        yield None
        return
    assert output.warehouse is not None
    uri = f"{output.warehouse.rstrip('/')}/{LEASE_FILE}"
    lease = _acquire(spark, uri, run_id, command)
    _CURRENT.append(lease)
    try:
        yield lease
    finally:
        _CURRENT.remove(lease)
        lease.release()


def _acquire(spark: SparkSession, uri: str, run_id: str, command: str) -> WriterLease:
    now = dt.datetime.now(dt.UTC)
    holder = _Holder(
        run_id=run_id,
        command=command,
        host=socket.gethostname(),
        pid=os.getpid(),
        acquired_at=now.isoformat(timespec="seconds"),
        expires_at=_expiry(now),
    )
    try:
        etag = _write(spark, uri, holder.text(), None)
        log.info("writer lease taken: %s", uri)
        return WriterLease(spark, uri, holder, etag)
    except _Refused:
        pass
    found = _read(spark, uri)
    if found is None:  # released between the two requests: once more
        return _acquire(spark, uri, run_id, command)
    other, etag = found
    if other is not None and not other.lapsed(now) and not other.gone():
        raise LogmetricsError(
            f"another logmetrics run writes the warehouse {uri.rsplit('/', 1)[0]}: "
            f"{other.describe()}. On S3 two writers of one Delta log can replace each other's "
            f"commits, so this run stops; run it once that one ends (its lease lapses at "
            f"{other.expires_at} if it died)"
        )
    try:
        new_etag = _write(spark, uri, holder.text(), etag)
    except _Refused:  # another run took it over first
        return _acquire(spark, uri, run_id, command)
    log.warning(
        "took over the writer lease at %s from %s, which ended without releasing it",
        uri,
        other.describe() if other is not None else "a run whose lease could not be read",
    )
    return WriterLease(spark, uri, holder, new_etag)


def _expiry(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    return (now + dt.timedelta(seconds=LEASE_SECONDS)).isoformat(timespec="seconds")


class _Refused(Exception):
    """The store refused a conditional write: the object exists, or its ETag changed."""


def _path(spark: SparkSession, uri: str) -> Any:
    return spark._jvm.org.apache.hadoop.fs.Path(uri)  # type: ignore[union-attr]


_SAID_UNCONDITIONAL: list[bool] = []


def _write(spark: SparkSession, uri: str, text: str, etag: str | None) -> str:
    """Write the lease: created only if absent (`etag` None), else only over that ETag; its
    new ETag. `_Refused` when the store says the condition does not hold."""
    return _close(spark, uri, _open(spark, uri, etag), text)


def _open(spark: SparkSession, uri: str, etag: str | None) -> Any:
    """The lease's output stream, its PUT conditional: If-None-Match (`etag` None) or If-Match.
    The store judges the condition when the stream closes (`_close`)."""
    path = _path(spark, uri)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    builder = fs.createFile(path).overwrite(etag is not None)
    try:
        builder = (
            builder.must(_CONDITIONAL, True) if etag is None else builder.must(_IF_MATCH, etag)
        )
        return builder.build()
    except Exception as exc:
        text_of = _java_text(exc)
        if "FileAlreadyExists" in text_of or "PreconditionFailed" in text_of:
            raise _Refused() from None
        if "nsupported" not in text_of and "nknown" not in text_of:
            raise
        if not _SAID_UNCONDITIONAL:  # an S3A before conditional writes (Hadoop 3.4.1)
            _SAID_UNCONDITIONAL.append(True)
            log.warning(
                "this Hadoop's S3A has no conditional writes: the writer lease at %s is "
                "checked, not enforced (run one writer at a time, or Hadoop 3.4.2 or later)",
                uri,
            )
        return fs.createFile(path).overwrite(etag is not None).build()


def _close(spark: SparkSession, uri: str, stream: Any, text: str) -> str:
    """Write `text` to an `_open` stream and close it: the store takes the object, or refuses it
    (`_Refused`) when the condition no longer holds; its new ETag."""
    try:
        stream.write(bytearray(text.encode("utf-8")))
        stream.close()
    except Exception as exc:
        if "PreconditionFailed" in _java_text(exc) or "412" in _java_text(exc):
            raise _Refused() from None
        raise
    path = _path(spark, uri)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    return str(fs.getFileStatus(path).getEtag())


def _read(spark: SparkSession, uri: str) -> tuple[_Holder | None, str] | None:
    """The lease's holder (None: unreadable) and ETag; None when there is no lease."""
    path = _path(spark, uri)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    try:
        status = fs.getFileStatus(path)
        stream = fs.open(path)
    except Exception as exc:
        if "FileNotFound" in _java_text(exc):
            return None
        raise
    try:
        data = bytes(stream.readAllBytes())
    finally:
        stream.close()
    return _Holder.parse(data.decode("utf-8", "replace")), str(status.getEtag())


def _java_text(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)
    return f"{exc} {java.toString() if java is not None else ''}"
