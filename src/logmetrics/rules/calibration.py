"""The near-duplicate detector's calibration beside the numbers (docs/alerts.md).

unique-clusters@k inherits every error of the detector that assigned the cluster ids: a
detector that merges distinct documents lowers it, one that misses copies raises it. Its
measured pair precision and recall (`inputs.calibration`, `schemas.CALIBRATION`) belong next to
the numbers, per cluster table version. Pure rules over the few calibration rows:

    problem          the first row that breaks the contract, as one line (or None)
    calibration_of   the rows that describe the cluster table a day was computed from
    uncalibrated     the versions a run used that no row describes
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pandas as pd

_SHARES = ("pair_precision", "pair_recall")


def problem(rows: pd.DataFrame) -> str | None:
    """The first calibration row that breaks the contract, described in one line: no key
    (neither cluster_table_version nor detector), a negative version, a required value missing,
    a precision or recall outside [0, 1], a negative sample_pairs. None when all hold."""
    for number, row in enumerate(rows.to_dict("records"), start=1):
        where = f"row {number}"
        version, detector = row["cluster_table_version"], row["detector"]
        if is_missing(version) and is_missing(detector):
            return f"{where}: needs a cluster_table_version or a detector"
        if not is_missing(version) and int(version) < 0:
            return f"{where}: cluster_table_version must be >= 0, got {int(version)}"
        for name in ("threshold", *_SHARES, "measured_on", "sample_pairs"):
            if is_missing(row[name]):
                return f"{where}: {name} is missing"
        for name in _SHARES:
            if not 0.0 <= float(row[name]) <= 1.0:
                return f"{where}: {name} must be within [0, 1], got {row[name]!r}"
        if int(row["sample_pairs"]) < 0:
            return f"{where}: sample_pairs must be >= 0, got {int(row['sample_pairs'])}"
    return None


def calibration_of(rows: pd.DataFrame, version: int | None, detector: str | None) -> pd.DataFrame:
    """The rows describing the cluster table a day was computed from: those of its Delta
    `version`; for a table without versions (null), those of the configured `detector` label."""
    if not is_missing(version):
        return rows[rows["cluster_table_version"].map(version_key) == int(version)]  # type: ignore[arg-type]
    if detector is None:
        return rows.iloc[0:0]
    return rows[rows["detector"] == detector]


def uncalibrated(
    versions: Iterable[int | None], rows: pd.DataFrame, detector: str | None
) -> list[int | None]:
    """The distinct cluster table versions of `versions` that no calibration row describes."""
    out: list[int | None] = []
    for version in versions:
        key = version_key(version)
        if key not in out and calibration_of(rows, key, detector).empty:
            out.append(key)
    return out


def version_key(value: Any) -> int | None:
    """A cluster table version as a pandas cell holds it (a float with NaN, say) as int or None."""
    return None if is_missing(value) else int(value)


def is_missing(value: Any) -> bool:
    """A null cell, as pandas holds one (None, NA, NaT or NaN)."""
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)
