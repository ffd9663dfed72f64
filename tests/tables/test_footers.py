"""Footer placement: the days each Parquet file holds, read from its statistics, are exactly what
the narrow pass over its rows says, and a file whose footer cannot say is left to that pass."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from logmetrics.config import ClustersInput, Config, InputsConfig, OutputConfig, ServedLogsInput
from logmetrics.inputs import narrow_pass as inputs
from logmetrics.inputs.footers import footer_days
from logmetrics.inputs.narrow_pass import day_inputs

START, END = dt.date(2026, 3, 1), dt.date(2026, 3, 3)


def _at(day: int, hour: int = 12, minute: int = 0) -> dt.datetime:
    return dt.datetime(2026, 3, 1, tzinfo=dt.UTC) + dt.timedelta(
        days=day - 1, hours=hour, minutes=minute
    )


def _write(
    path: Path,
    served: list[dt.datetime | None],
    unit: str = "us",
    row_group_size: int | None = None,
    mtime_ms: int = 1_767_225_600_120,
    wall_clock: bool = False,
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if wall_clock:  # timestamps without a time zone (NTZ): the reader reads them as UTC
        served = [t.replace(tzinfo=None) if t else None for t in served]
    table = pa.table(
        {
            "request_id": [f"{path.stem}-{i}" for i in range(len(served))],
            "served_at": pa.array(served, pa.timestamp(unit, tz=None if wall_clock else "UTC")),
            "results": pa.array(
                [[{"rank": 1, "chunk_id": "c"}]] * len(served),
                pa.list_(pa.struct([("rank", pa.int64()), ("chunk_id", pa.string())])),
            ),
        }
    )
    pq.write_table(table, path, row_group_size=row_group_size)
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


# (file, served_at values, writer options, placed from the footer?)
PARTITIONED = [
    ("date=2026-03-01/one-day.parquet", [_at(1, 1), _at(1, 23)], {}, True),
    # two consecutive days and nulls (placed on the partition's day), an mtime of whole seconds
    (
        "date=2026-03-02/two-days.parquet",
        [_at(1, 23, 59), None, _at(2, 3)],
        {"mtime_ms": 1_767_225_600_000},
        True,
    ),
    # spans four days in one row group: only the rows can say which days between hold some
    ("date=2026-03-03/span.parquet", [_at(1, 5), _at(2, 5), _at(4, 5)], {}, False),
    # the same span in row groups of one row: each within a day
    ("date=2026-03-03/groups.parquet", [_at(1, 5), _at(3, 5)], {"row_group_size": 1}, True),
    (
        "date=2026-03-02/millis.parquet",
        [_at(2), _at(2, 6)],
        {"unit": "ms", "mtime_ms": 1_767_225_600_500},
        True,
    ),
    # the margin partition before the range holds a late row of the first day
    ("date=2026-02-28/margin.parquet", [_at(0), _at(1, 0, 1)], {}, True),
    # outside the reader's margin: never read, whatever it holds
    ("date=2026-03-10/far.parquet", [_at(2)], {}, False),
    # a name Spark's URI escapes
    ("date=2026-03-02/with space.parquet", [_at(2)], {}, False),
    ("date=2026-03-01/nulls-only.parquet", [None, None], {}, True),
    ("date=2026-03-01/empty.parquet", [], {}, True),
]


def _dataset(root: Path, files: list[tuple[str, list, dict, bool]], **more: Any) -> None:
    for name, served, options, _ in files:
        _write(root / name, served, **options, **more)


def _config(root: Path, tmp_path: Path) -> Config:
    return Config(
        inputs=InputsConfig(
            served_logs=ServedLogsInput(path=str(root)),
            clusters=ClustersInput(path=str(tmp_path / "clusters")),
        ),
        output=OutputConfig(warehouse=str(tmp_path / "warehouse")),
    )


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("footers") / "logs"
    _dataset(root, PARTITIONED)
    return root


def test_the_footers_place_the_files_they_can_be_sure_of(partitioned: Path) -> None:
    found = footer_days(ServedLogsInput(path=str(partitioned)), START, END)
    assert found is not None
    names = {os.path.relpath(p, partitioned) for p in found.placed}
    in_margin = {n for n, *_ in PARTITIONED if not n.startswith("date=2026-03-10")}
    assert names == {n for n, _, _, placed in PARTITIONED if placed}
    assert {os.path.relpath(p, partitioned) for p in found.unplaced} == in_margin - names
    by_day = {
        day: sorted(
            os.path.relpath(s.split("|")[0].removeprefix("file:"), partitioned) for s in states
        )
        for day, states in found.states.items()
    }
    assert by_day == {
        START: [
            "date=2026-02-28/margin.parquet",
            "date=2026-03-01/nulls-only.parquet",
            "date=2026-03-01/one-day.parquet",
            "date=2026-03-02/two-days.parquet",
            "date=2026-03-03/groups.parquet",
        ],
        dt.date(2026, 3, 2): ["date=2026-03-02/millis.parquet", "date=2026-03-02/two-days.parquet"],
        END: ["date=2026-03-03/groups.parquet"],
    }


@pytest.mark.parametrize(
    "layout", ["partitioned", "partitioned by _date", "flat", "flat, wall-clock times"]
)
def test_the_day_states_equal_the_narrow_pass_over_every_row(
    spark: SparkSession,
    partitioned: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    layout: str,
) -> None:
    root = partitioned
    if layout == "partitioned by _date":  # Spark lists `_` names that hold `=`
        root = tmp_path / "underscore"
        _dataset(root, [(n.replace("date=", "_date="), *rest) for n, *rest in PARTITIONED])
    elif layout != "partitioned":  # no date partitions: nulls are on no day, every file is read
        root = tmp_path / "flat"
        flat = [(n.replace("date=", "d"), *rest) for n, *rest in PARTITIONED]
        _dataset(root, flat, wall_clock=layout.endswith("wall-clock times"))
    config = _config(root, tmp_path)
    days = [START, dt.date(2026, 3, 2), END]
    with_footers = day_inputs(spark, config, "v1", days, [])
    monkeypatch.setattr(inputs, "footer_days", lambda *args, **kwargs: None)
    rows_only = day_inputs(spark, config, "v1", days, [])
    assert with_footers == rows_only
    assert [with_footers[d].files for d in days] == (
        [6, 4, 1] if layout.startswith("partitioned") else [5, 5, 1]
    )
