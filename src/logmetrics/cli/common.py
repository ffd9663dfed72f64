"""What every command does before its work: load its config (`--config`, else the search in
`config_files`), start or reuse the session, hold the writer lease while it writes, check that
the warehouse's store answers; and "yesterday", which only the face knows."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from logmetrics.cli import logs
from logmetrics.config import Config, load_config
from logmetrics.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONFIG_ENV = "LOGMETRICS_CONFIG"
CONFIG_SEARCH = ("conf/local.yaml", "logmetrics.yaml")
"""Where a command looks for its config without --config, after $LOGMETRICS_CONFIG (relative
to the working directory)."""


def config_files(args: argparse.Namespace) -> list[str]:
    """--config's files; without it, $LOGMETRICS_CONFIG (files separated by the path
    separator), else the first of CONFIG_SEARCH that exists."""
    if args.config:
        return list(args.config)
    named = os.environ.get(CONFIG_ENV, "").strip()
    if named:
        return [part for part in named.split(os.pathsep) if part]
    for candidate in CONFIG_SEARCH:
        if Path(candidate).is_file():
            return [candidate]
    raise ConfigError(
        f"no config: none of --config, ${CONFIG_ENV}, {', '.join(f'./{c}' for c in CONFIG_SEARCH)}"
    )


def command_config(args: argparse.Namespace) -> Config:
    """The command's config (`config_files`), the run's log file under its `spark.log_dir`,
    and the S3 settings its paths are read with (`storage`)."""
    config = load_config(config_files(args), args.set)
    logs.use_log_dir(config.spark.log_dir)
    from logmetrics import storage

    storage.configure(config.spark.conf)
    return config


def spark_for(config: Config, days: int | None = None) -> SparkSession:
    """The process's session: local Spark starts with S3A when a configured path is on S3."""
    from logmetrics.session import get_spark
    from logmetrics.storage import is_s3

    return get_spark(config.spark, days=days, s3=any(is_s3(p) for p in config.locations()))


@contextlib.contextmanager
def writing(spark: SparkSession, config: Config, args: argparse.Namespace) -> Iterator[None]:
    """The block writes the warehouse: it holds the writer lease where the store needs one
    (`tables.lease`: a warehouse on S3)."""
    from logmetrics.tables.lease import held

    with held(spark, config.output, args.run_id, args.command):
        yield


def check_outputs_reachable(config: Config) -> None:
    """Before Spark starts: the store of the warehouse (and of the kept keys' folder) answers
    this process's credentials and has its bucket (`storage.check_reachable`)."""
    from logmetrics.storage import check_reachable

    if config.output.warehouse is not None:
        check_reachable(config.output.warehouse, f"warehouse at {config.output.warehouse}")
    folder = config.backfill.cluster_keys_dir
    if folder is not None:
        check_reachable(folder, f"backfill.cluster_keys_dir at {folder}")


def now() -> dt.datetime:
    """The time a command's rows are stamped with (UTC, whole seconds)."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def yesterday() -> dt.date:
    return dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
