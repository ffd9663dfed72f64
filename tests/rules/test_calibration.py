"""The detector calibration's rules (issue 26, part 4), on hand-written rows."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd
import pytest

from logmetrics.rules.calibration import calibration_of, problem, uncalibrated
from logmetrics.schemas import CALIBRATION

DAY = dt.date(2026, 9, 1)


def _rows(*rows: dict[str, Any]) -> pd.DataFrame:
    base = {
        "cluster_table_version": 0,
        "detector": None,
        "threshold": 0.8,
        "pair_precision": 0.97,
        "pair_recall": 0.9,
        "measured_on": DAY,
        "sample_pairs": 500,
    }
    return pd.DataFrame([{**base, **row} for row in rows], columns=CALIBRATION.fieldNames())


def test_valid_rows_have_no_problem() -> None:
    assert problem(_rows({}, {"cluster_table_version": None, "detector": "m"})) is None
    assert problem(_rows({"pair_precision": 0.0, "pair_recall": 1.0, "sample_pairs": 0})) is None
    assert problem(_rows()) is None  # no row: nothing to describe, nothing wrong


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"cluster_table_version": None}, "row 2: needs a cluster_table_version or a detector"),
        ({"cluster_table_version": -1}, "row 2: cluster_table_version must be >= 0, got -1"),
        ({"pair_precision": 1.5}, "row 2: pair_precision must be within [0, 1], got 1.5"),
        ({"pair_recall": -0.01}, "row 2: pair_recall must be within [0, 1], got -0.01"),
        ({"pair_recall": float("nan")}, "row 2: pair_recall is missing"),
        ({"threshold": None}, "row 2: threshold is missing"),
        ({"measured_on": None}, "row 2: measured_on is missing"),
        ({"sample_pairs": -3}, "row 2: sample_pairs must be >= 0, got -3"),
    ],
)
def test_the_first_bad_row_is_named(row: dict[str, Any], message: str) -> None:
    assert problem(_rows({}, row, {"pair_precision": 7.0})) == message


def test_a_day_is_described_by_its_version_or_without_one_by_the_detector_label() -> None:
    rows = _rows(
        {"cluster_table_version": 3, "threshold": 0.8},
        {"cluster_table_version": 3, "threshold": 0.9},
        {"cluster_table_version": None, "detector": "minhash-b"},
        {"cluster_table_version": 4, "detector": "minhash-c"},
    )
    assert list(calibration_of(rows, 3, None)["threshold"]) == [0.8, 0.9]
    assert calibration_of(rows, 5, "minhash-b").empty  # a version is matched by version only
    assert list(calibration_of(rows, None, "minhash-b")["detector"]) == ["minhash-b"]
    assert list(calibration_of(rows, None, "minhash-c")["cluster_table_version"]) == [4]
    assert calibration_of(rows, None, None).empty
    assert uncalibrated([3, 4, 5, 5, None], rows, None) == [5, None]
    assert uncalibrated([3, None], rows, "minhash-b") == []
