"""Where tables live: a local path or a remote URI, and a Delta table addressed by its path.

Shared by the readers (`sources`) and the table catalogue (`catalog`): Delta's SQL takes no
relative path, so every path-addressed statement goes through `delta_path_identifier`.
"""

from __future__ import annotations

import os
import re

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession


def delta_path_identifier(path: str) -> str:
    """The SQL identifier of the Delta table at `path`: delta.`path`, a local relative path made
    absolute (Delta's SQL takes no relative path, unlike its DataFrame reader)."""
    path = absolute(path)
    return "delta.`" + path.replace("`", "``") + "`"


def absolute(path: str) -> str:
    """A local relative path made absolute (against this process's working directory); other
    paths as they are."""
    local = local_path(path)
    return os.path.abspath(local) if local is not None and not os.path.isabs(local) else path


def read_delta_path(spark: SparkSession, path: str) -> DataFrame | None:
    """The Delta table at `path`, or None when there is none (yet). Resolved here, so the
    answer is the same locally and over Spark Connect (where reads are lazy)."""
    try:
        df = spark.read.format("delta").load(path)
        df.schema  # noqa: B018 - resolves the path: no Delta table there is an AnalysisException
    except AnalysisException as exc:
        if _NOT_A_DELTA_TABLE.search(str(exc)):
            return None
        raise
    return df


# DELTA_TABLE_NOT_FOUND: a `_delta_log` without a commit yet, while another run creates the table.
_NOT_A_DELTA_TABLE = re.compile(
    r"DELTA_MISSING_DELTA_TABLE|DELTA_TABLE_NOT_FOUND|PATH_NOT_FOUND|is not a Delta table"
)


def local_path(path: str) -> str | None:
    """The filesystem path for a local location, None for a remote one (s3://, dbfs:/, ...)."""
    if path.startswith("file:"):
        return re.sub(r"^file:(//)?", "", path)
    return None if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path) else path
