"""Where the inputs and tables live, read without Spark: a configured path's file system, and
how a path is named (local or remote, absolute, a Delta table's SQL identifier).

A configured path is local (a plain path, or `file:`), on S3 (`s3a://bucket/key`, or `s3://`,
which the local session maps to S3A), or on another store (`abfss://`, `gs://`, `dbfs:/`,
`hdfs://`, ...). Local and S3 paths are read here with pyarrow's file systems: listings, Parquet
footers, Delta commit files and small objects (the kept cluster keys' entries, `views.sql`).
Other stores have no reader here: `place` returns None and the caller takes Spark's way, saying
so once (`say_no_reader`).

S3 is reached as Spark's S3A connector reaches it: credentials from the standard chain only
(environment, profile, instance role), and the endpoint, path-style access and region from the
config's `spark.conf` (`spark.hadoop.fs.s3a.endpoint`, `...path.style.access`,
`...endpoint.region`), set once per command (`configure`). A request that cannot reach the
store fails in seconds (`S3_TIMEOUTS`), not after minutes of retries.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyarrow import fs as pafs

from logmetrics.errors import InputError

log = logging.getLogger(__name__)

S3_SCHEMES = ("s3a", "s3")
"""The schemes of S3 paths: S3A's own, and `s3`, which the local session maps to S3A (as
Databricks and EMR accept it)."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")

S3_CONNECT_SECONDS, S3_REQUEST_SECONDS, S3_ATTEMPTS = 5, 20, 10
"""How long a request to S3 may wait to connect, to be answered, and how many times it is
tried (the AWS SDK's standard back-off between tries, up to 20 s), in a run: about a minute and
a half of a store that refuses, resets or throttles is ridden out, as S3A rides it out
(`session.S3A_CONF`; docs/config.md, "Object storage")."""
S3_CHECK_ATTEMPTS = 3
"""The tries of the checks made before Spark starts (`check_exists`, `check_reachable`): an
endpoint that does not answer then is said in a second or two."""


def scheme(path: str) -> str | None:
    """The path's URI scheme, lower case; None for a local path (`file:` included)."""
    match = _SCHEME.match(path)
    if match is None or match.group(1).lower() == "file":
        return None
    return match.group(1).lower()


def is_s3(path: str) -> bool:
    return scheme(path) in S3_SCHEMES


@dataclass(frozen=True)
class S3Settings:
    """What reaches the S3 store besides the credentials: the config's S3A settings."""

    endpoint: str | None = None  # host[:port], with http:// or https://, or None: AWS
    path_style: bool = False
    region: str | None = None

    @classmethod
    def from_spark_conf(cls, conf: Mapping[str, str]) -> S3Settings:
        """From `spark.conf`'s `spark.hadoop.fs.s3a.*` keys (S3A's own names)."""

        def get(key: str) -> str | None:
            value = conf.get(f"spark.hadoop.fs.s3a.{key}")
            return value.strip() if value and value.strip() else None

        return cls(
            endpoint=get("endpoint"),
            path_style=(get("path.style.access") or "false").lower() == "true",
            region=get("endpoint.region"),
        )


_settings = S3Settings()
_filesystems: dict[tuple[str, Any], pafs.FileSystem] = {}
_lock = threading.Lock()


def configure(conf: Mapping[str, str]) -> None:
    """The S3 settings of this command's config (`spark.conf`); set before any path is read.
    The file systems made before are forgotten: the next ones take the environment's
    credentials as they are now."""
    global _settings
    _settings = S3Settings.from_spark_conf(conf)
    with _lock:
        _filesystems.clear()


def current_settings() -> S3Settings:
    return _settings


def region_of(settings: S3Settings) -> str | None:
    """The region requests are signed for: the config's, else the environment's."""
    return settings.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


@dataclass(frozen=True)
class Place:
    """A configured location in a file system logmetrics reads directly: `path` is its path in
    `fs` (absolute for a local one, `bucket/key` on S3), `prefix` what makes a path of `fs` the
    URI Spark gives it (`s3a://`, or `file:` for a local one). The file system is made when
    first used."""

    path: str
    prefix: str
    quick: bool = False  # S3: S3_CHECK_ATTEMPTS tries, for the checks before Spark starts

    @property
    def local(self) -> bool:
        return self.prefix == "file:"

    @property
    def fs(self) -> pafs.FileSystem:
        if self.local:
            return _filesystem("local")
        return _filesystem("s3", self.path.split("/", 1)[0], self.quick)

    def uri(self, path: str | None = None) -> str:
        """A path of this file system (by default this place's) as Spark names it: an
        absolute local path as it is, an S3 key with its scheme (`s3a://bucket/key`)."""
        path = self.path if path is None else path
        return path if self.local else f"{self.prefix}{path}"

    def spark_uri(self, path: str) -> str:
        """`path` as Spark's file metadata names it (`file:/abs` for a local file)."""
        return f"file:{path}" if self.local else f"{self.prefix}{path}"

    def child(self, *names: str) -> Place:
        return Place("/".join([self.path.rstrip("/"), *names]), self.prefix)

    def at(self, path: str) -> Place:
        """Another path of the same file system."""
        return Place(path, self.prefix)

    def info(self) -> pafs.FileInfo:
        return self.fs.get_file_info(self.path)

    def exists(self) -> bool:
        return self.info().type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        return self.info().type == pafs.FileType.Directory

    def is_file(self) -> bool:
        return self.info().type == pafs.FileType.File

    def listing(self, recursive: bool = False) -> list[pafs.FileInfo]:
        """The entries below this place, sorted by path; [] when there is none."""
        selector = pafs.FileSelector(self.path, allow_not_found=True, recursive=recursive)
        return sorted(self.fs.get_file_info(selector), key=lambda info: info.path)

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.path) as stream:
            return bytes(stream.read())

    def read_text(self) -> str:
        return self.read_bytes().decode("utf-8")

    def write_text(self, text: str) -> None:
        """The whole text, seen whole by readers: a local file is written aside and renamed
        over; an S3 object is one PUT, which S3 makes visible whole."""
        data = text.encode("utf-8")
        if not self.local:
            with self.fs.open_output_stream(self.path) as stream:
                stream.write(data)
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        partial = f"{self.path}.{os.getpid()}.{threading.get_ident()}.partial"
        with open(partial, "wb") as out:
            out.write(data)
        os.replace(partial, self.path)

    def delete_dir(self) -> None:
        """Delete this directory and everything below it; nothing when it does not exist."""
        try:
            self.fs.delete_dir(self.path)
        except FileNotFoundError:
            return


def place(path: str) -> Place | None:
    """The file system and path of a configured location logmetrics reads directly (local, or
    S3); None for another store (abfss://, gs://, dbfs:/, hdfs://: Spark reads those)."""
    kind = scheme(path)
    if kind is None:
        local = re.sub(r"^file:(//)?", "", path) if path.lower().startswith("file:") else path
        return Place(os.path.abspath(local), "file:")
    if kind not in S3_SCHEMES:
        return None
    rest = path[len(kind) + 3 :] if path[len(kind) + 1 : len(kind) + 3] == "//" else ""
    bucket = rest.split("/", 1)[0]
    if not bucket:
        raise InputError(f"{path}: an S3 path is {kind}://bucket/key")
    _BUCKETS.add(bucket)
    return Place(rest.rstrip("/"), f"{kind}://")


def _filesystem(kind: str, bucket: str = "", quick: bool = False) -> pafs.FileSystem:
    """One pyarrow file system per kind and settings (an S3 one per bucket's region, and
    patience: `quick` for the checks before Spark starts)."""
    settings = _settings
    key = (kind, (settings, bucket, quick) if kind == "s3" else None)
    with _lock:
        found = _filesystems.get(key)
        if found is None:
            found = pafs.LocalFileSystem() if kind == "local" else _s3(settings, bucket, quick)
            _filesystems[key] = found
        return found


def _s3(settings: S3Settings, bucket: str, quick: bool = False) -> pafs.FileSystem:
    attempts = S3_CHECK_ATTEMPTS if quick else S3_ATTEMPTS
    options: dict[str, Any] = {
        "connect_timeout": S3_CONNECT_SECONDS,
        "request_timeout": S3_REQUEST_SECONDS,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=attempts),
    }
    endpoint = settings.endpoint
    if endpoint is not None:
        match = re.match(r"^(https?)://(.*)$", endpoint, flags=re.IGNORECASE)
        options["scheme"], options["endpoint_override"] = (
            (match.group(1).lower(), match.group(2).rstrip("/")) if match else ("https", endpoint)
        )
        options["force_virtual_addressing"] = not settings.path_style
    region = region_of(settings)
    if region is None and endpoint is None:
        try:
            region = pafs.resolve_s3_region(bucket)
        except OSError:
            region = None  # the request that needs it says what is wrong
    if region is not None:
        options["region"] = region
    return pafs.S3FileSystem(**options)


_SAID: set[str] = set()


def say_no_reader(path: str, what: str, instead: str) -> None:
    """Once per process and store: `what` has no direct reader on this store, and what the run
    does `instead` (a line in the run's log)."""
    kind = scheme(path) or "local"
    if (kind, what) in _SAID:
        return
    _SAID.add((kind, what))  # type: ignore[arg-type]
    log.info("%s on %s:// is read through Spark: %s", what, kind, instead)


# --- what a user's path problem is, in one line ---------------------------------------------


def problem(path: str, exc: OSError) -> str:
    """Why `path` could not be reached, in words a user acts on (never a secret: the message is
    the store's, which names the bucket and key only)."""
    text = str(exc)
    if "NETWORK_CONNECTION" in text or "curlCode" in text:
        if _settings.endpoint is None:
            return "AWS's S3 endpoint does not answer (no spark.hadoop.fs.s3a.endpoint is set)"
        return f"the S3 endpoint {_settings.endpoint} does not answer"
    if re.search(r"ACCESS_DENIED|InvalidAccessKeyId|SignatureDoesNotMatch|403", text):
        return "the S3 store refused this process's credentials (environment, profile or role)"
    if "NO_SUCH_BUCKET" in text or "NoSuchBucket" in text:
        return "its bucket does not exist"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first


def check_exists(path: str, what: str) -> None:
    """An `InputError` naming `path` when it does not exist, its bucket does not, or its store
    cannot be reached; nothing for a store with no reader here (Spark says it, if need be)."""
    where = _checked(path)
    if where is None:
        return
    try:
        if where.exists():
            return
        bucket = None if where.local else where.path.split("/", 1)[0]
        if bucket is not None and where.fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise InputError(f"{what}: its bucket {bucket!r} does not exist")
    except OSError as exc:
        raise InputError(f"{what}: {problem(path, exc)}") from None
    raise InputError(f"{what}: path does not exist")


def check_reachable(path: str, what: str) -> None:
    """For a location written to (a warehouse, a keys directory): its S3 bucket exists and
    answers this process's credentials; a local path needs nothing."""
    where = _checked(path)
    if where is None or where.local:
        return
    bucket = where.path.split("/", 1)[0]
    try:
        found = where.fs.get_file_info(bucket)
    except OSError as exc:
        raise InputError(f"{what}: {problem(path, exc)}") from None
    if found.type == pafs.FileType.NotFound:
        raise InputError(f"{what}: its bucket {bucket!r} does not exist")


def _checked(path: str) -> Place | None:
    """`place(path)` with the checks' patience (S3_CHECK_ATTEMPTS)."""
    where = place(path)
    return None if where is None else Place(where.path, where.prefix, quick=True)


# --- a store that failed a run, in one line -------------------------------------------------

_S3_URI = re.compile(r"\bs3a?://[^\s:;,'\"()]+")
_PYARROW_KEY = re.compile(r"key '([^']*)' in bucket '([^']*)'")
_S3A_KEY = re.compile(r"\b[A-Z][\w ]* on ([^\s:]+/[^\s:]+): ")  # S3A's `Writing Object on <key>: `
_BUCKETS: set[str] = set()  # of the S3 paths this process placed: where a bare key lies
# A JVM stack trace's frames and elisions: class names such as the AWS SDK's
# `ApiCallTimeoutTrackingStage` are in every trace, and are not what the store said.
_FRAMES = re.compile(r"^\s+(?:at \S+\(.*\)|\.\.\. \d+ more)\s*$", re.MULTILINE)
_WHAT_FAILED = (
    (r"[Cc]onnection refused|[Cc](?:ould not|ouldn't) connect|curlCode: 7\b", "connection refused"),
    (r"[Cc]onnection reset|curlCode: 56|Recv failure|reset by peer", "connection reset"),
    # a request on a kept-alive connection the store dropped (gone between requests) unanswered
    (r"failed to respond|NoHttpResponseException", "connection closed unanswered"),
    (
        r"SlowDown|Slow Down|HTTP status 503|[Ss]tatus [Cc]ode: 503|[Tt]hrottled",
        "503 SlowDown (throttled)",
    ),
    (r"[Tt]imed? ?out|[Tt]imeout|curlCode: 28|did not respond", "no answer in time"),
    (
        r"AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|Status Code: 403",
        "credentials refused",
    ),
)
"""What failed, by what the store's error says, in the order they are looked for."""


def store_failure(exc: BaseException) -> str | None:
    """One line for a run stopped by its S3 store (through S3A or a direct read): the store
    (its endpoint), the path, and what failed (refused, reset, closed unanswered,
    throttled, no answer in time); None for an error that is not an S3 store's."""
    texts = [str(exc), *_java_messages(exc)]
    text = "\n".join(texts)
    if not ("s3a://" in text or "AWS Error" in text or "software.amazon.awssdk" in text):
        return None
    found = _S3_URI.search(text)
    keyed = _PYARROW_KEY.search(text)
    on_key = _S3A_KEY.search(text)
    if found is not None:
        path = found.group(0).rstrip(".")
    elif keyed is not None:
        path = f"s3a://{keyed.group(2)}/{keyed.group(1)}"
    elif on_key is not None:  # S3A names some requests' object by its key alone
        key = on_key.group(1)
        path = f"s3a://{next(iter(_BUCKETS))}/{key}" if len(_BUCKETS) == 1 else f"key {key}"
    else:
        return None
    # what the store said: not the paths, not the stack frames
    said = _PYARROW_KEY.sub("", _S3_URI.sub("", _FRAMES.sub("", text)))
    what = next((what for pattern, what in _WHAT_FAILED if re.search(pattern, said)), None)
    if what is None:  # an error on S3 that is not the store's (a damaged file, say)
        return None
    store = _settings.endpoint or "the AWS endpoint"
    return (
        f"the S3 store at {store} failed the run at {path}: {what}, after the retries its "
        'settings allow (docs/config.md, "Object storage"); the days it had not published '
        "are the next run's"
    )


def _java_messages(exc: BaseException) -> list[str]:
    """The messages of a JVM error's causes (a Py4J or PySpark error), outermost first."""
    java = getattr(exc, "java_exception", None)
    out: list[str] = []
    try:
        while java is not None and len(out) < 50:
            out.append(f"{java.getClass().getName()}: {java.getMessage() or ''}")
            java = java.getCause()
    except Exception:  # the JVM is gone: what Python holds is all there is
        pass
    return out


def mtime_text(info: pafs.FileInfo) -> str:
    """A listed file's modification time as Spark casts its `_metadata.file_modification_time`
    to text (UTC, milliseconds, a fraction without its trailing zeros)."""
    millis = int(info.mtime_ns // 1_000_000) if info.mtime_ns is not None else 0
    moment = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=millis)
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    fraction = f"{millis % 1000:03d}".rstrip("0")
    return f"{text}.{fraction}" if fraction else text


# --- how a path is named ------------------------------------------------------------------


def local_path(path: str) -> str | None:
    """The filesystem path for a local location, None for a remote one (s3://, dbfs:/, ...)."""
    if path.startswith("file:"):
        return re.sub(r"^file:(//)?", "", path)
    return None if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path) else path


def absolute(path: str) -> str:
    """A local relative path made absolute (against this process's working directory); other
    paths as they are."""
    local = local_path(path)
    return os.path.abspath(local) if local is not None and not os.path.isabs(local) else path


def delta_path_identifier(path: str) -> str:
    """The SQL identifier of the Delta table at `path`: delta.`path`, a local relative path made
    absolute (Delta's SQL takes no relative path, unlike its DataFrame reader)."""
    path = absolute(path)
    return "delta.`" + path.replace("`", "``") + "`"
