"""Delta tables read without Spark (delta-rs, the `deltalake` package of the `local` extra): the
ledger's rows and a cluster table's version, for the answers a run gives before Spark starts
(a day already done, a range with no ready day). Local paths and S3 (`storage`'s
settings and the standard credential chain); on any other store, without `deltalake`, or
when delta-rs cannot read a table, `None`: the caller starts Spark and asks it.
"""

from __future__ import annotations

import logging
from typing import Any

from logmetrics import storage

log = logging.getLogger(__name__)


class NoReader(Exception):
    """This table cannot be read without Spark here (its store, delta-rs, the table)."""


def storage_options(path: str) -> dict[str, str] | None:
    """delta-rs's options for a table at `path` (S3: the endpoint, path-style and region of
    the command's config, `storage`); None for a store with no reader here."""
    where = storage.place(path)
    if where is None:
        return None
    if where.local:
        return {}
    settings = storage.current_settings()
    options = {"AWS_EC2_METADATA_TIMEOUT": "1s"}
    if settings.endpoint is not None:
        endpoint = settings.endpoint
        if "://" not in endpoint:
            endpoint = f"https://{endpoint}"
        options["AWS_ENDPOINT_URL"] = endpoint
        options["AWS_ALLOW_HTTP"] = str(endpoint.startswith("http://")).lower()
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not settings.path_style).lower()
    region = storage.region_of(settings)
    if region is not None:
        options["AWS_REGION"] = region
    return options


def open_table(path: str) -> Any | None:
    """The Delta table at `path` (a `deltalake.DeltaTable`), or None when there is none yet;
    `NoReader` when it cannot be read here."""
    options = storage_options(path)
    if options is None:
        raise NoReader(f"no reader for {path}'s store")
    try:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError
    except ImportError as exc:
        raise NoReader("deltalake is not installed") from exc
    where = storage.place(path)
    uri = where.uri() if where is not None and where.local else path
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        return None
    except Exception as exc:  # a feature delta-rs lacks, a store that does not answer
        log.info("delta-rs cannot read %s (%s): Spark reads it", path, exc)
        raise NoReader(str(exc)) from exc


def read_rows(
    table: Any, path: str, columns: list[str], filters: list[tuple[str, str, Any]] | None = None
) -> Any:
    """`columns` of the rows of `table` (`open_table`'s, at `path`) that pass `filters`, as a
    pyarrow Table. Its files are read through pyarrow's own file system for the store
    (`storage.place`), not the Python one delta-rs lends pyarrow by default: a scan's thread
    pool lets go of its files after the call returns, and a Python file let go of once the
    interpreter has begun to exit aborts the process (`terminate called without an active
    exception`, exit status 134 after the answer was printed: 2 of 25 `run`s of a done day
    on a busy machine, 2026-12-07)."""
    import pyarrow.fs as pafs

    where = storage.place(path)
    if where is None:
        raise NoReader(f"no reader for {path}'s store")
    files = pafs.SubTreeFileSystem(where.path, where.fs)
    return table.to_pyarrow_table(columns=columns, filters=filters or None, filesystem=files)
