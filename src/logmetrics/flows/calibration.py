"""The detector's calibration flow: `inputs.calibration` read and checked before anything is
published (an invalid row is an InputError: exit 1), published as `detector_calibration`
(the whole table replaced, one commit), and one warning line per run when a day was computed
from a cluster table version no row describes (`rules.calibration`)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

import pandas as pd
from pyspark.sql import SparkSession

from logmetrics.config import Config
from logmetrics.console import span_text
from logmetrics.errors import InputError
from logmetrics.inputs.judged import read_calibration
from logmetrics.rules.calibration import is_missing, problem, uncalibrated, version_key
from logmetrics.schemas import DETECTOR_CALIBRATION, rows_frame
from logmetrics.tables.catalog import DETECTOR_CALIBRATION_TABLE, RunStamp, replace_where

log = logging.getLogger(__name__)


def checked_calibration(spark: SparkSession, config: Config) -> pd.DataFrame | None:
    """The calibration rows, each checked (None when `inputs.calibration` is not set)."""
    source = config.inputs.calibration
    if source is None:
        return None
    rows = read_calibration(spark, source)
    found = problem(rows)
    if found is not None:
        raise InputError(f"calibration at {source.path}: {found}")
    return rows


def publish_calibration(
    spark: SparkSession, config: Config, rows: pd.DataFrame, stamp: RunStamp
) -> None:
    """Replace `detector_calibration` with the rows, stamped with the run."""
    records = [
        (
            version_key(r["cluster_table_version"]),
            None if is_missing(r["detector"]) else str(r["detector"]),
            float(r["threshold"]),
            float(r["pair_precision"]),
            float(r["pair_recall"]),
            r["measured_on"],
            int(r["sample_pairs"]),
            stamp.run_id,
            stamp.computed_at,
        )
        for r in rows.to_dict("records")
    ]
    df = rows_frame(spark, records, DETECTOR_CALIBRATION)
    replace_where(spark, df, config.output, DETECTOR_CALIBRATION_TABLE, "true")
    log.info("%s: %d row(s) published", DETECTOR_CALIBRATION_TABLE.name, len(records))


def warn_uncalibrated(
    config: Config, rows: pd.DataFrame, version: int | None, days: Sequence[dt.date]
) -> None:
    """One warning line when the run computed days from a cluster table version (or, without
    versions, the configured detector label) that no calibration row describes."""
    if not days or not uncalibrated([version], rows, config.inputs.clusters.detector):
        return
    table = (
        f"cluster table version {version}"
        if version is not None
        else f"the cluster table (detector {config.inputs.clusters.detector or 'not labelled'})"
    )
    log.warning(
        "no detector_calibration row for %s, from which %d day(s) of %s were computed: "
        "their numbers stand without the detector's measured precision and recall",
        table,
        len(days),
        span_text(min(days), max(days)),
    )
