"""Damaged and drifted inputs: a run either fails in one line naming the file, before it
publishes anything, or quarantines what it cannot read and flags the days it may belong to.
Never a silent partial day, never a wrong published number.

The data is hand-built (pyarrow), three days in `date=YYYY-MM-DD` partitions; expected numbers
come from the pure-Python reference over the rows a reader can see.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

import reference
from logmetrics.cli import main

pytestmark = pytest.mark.slow

START = dt.date(2026, 3, 1)
DATES = [START + dt.timedelta(days=i) for i in range(3)]
END = DATES[-1]
KS = (2, 5)
CLUSTERS = [("a", "A"), ("a2", "A"), ("b", "B"), ("c", None), ("d", "D")]
CHUNKS = ["a", "a2", "b", "c", "d", "zz"]  # zz is not in the cluster table


INT32 = pa.int32()
UTC_MICROS = pa.timestamp("us", tz="UTC")


def _entry_type(rank: pa.DataType = INT32) -> pa.DataType:
    return pa.struct([("rank", rank), ("chunk_id", pa.string())])


def _rows(day: dt.date, n: int, prefix: str) -> list[dict[str, Any]]:
    """n requests served on `day`, list i being a rotation of the chunks."""
    out = []
    for i in range(n):
        served = dt.datetime.combine(day, dt.time(1 + i), tzinfo=dt.UTC)
        chunks = (CHUNKS[i % 6 :] + CHUNKS[: i % 6])[: 2 + i % 4]
        results = [{"rank": r + 1, "chunk_id": c} for r, c in enumerate(chunks)]
        out.append({"request_id": f"{prefix}{day:%d}-{i}", "served_at": served, "results": results})
    return out


def _write(
    path: Path,
    rows: list[dict[str, Any]],
    rank: pa.DataType = INT32,
    served_at: pa.DataType = UTC_MICROS,
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "request_id": pa.array([r["request_id"] for r in rows], pa.string()),
            "served_at": pa.array([r["served_at"] for r in rows], served_at),
            "results": pa.array([r["results"] for r in rows], pa.list_(_entry_type(rank))),
        }
    )
    pq.write_table(table, path)
    return path


def _logs(root: Path, days: dict[dt.date, list[dict[str, Any]]]) -> dict[dt.date, Path]:
    return {
        day: _write(root / f"date={day}" / "part-0.parquet", rows) for day, rows in days.items()
    }


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _clusters(root: Path) -> Path:
    path = root / "clusters" / "part-0.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(
        pa.table({"chunk_id": [c for c, _ in CLUSTERS], "cluster_id": [k for _, k in CLUSTERS]}),
        path,
    )
    return path.parent


def _config(
    root: Path, logs: Path, fmt: str = "parquet", days_per_chunk: int = 3, **settings: str
) -> Path:
    # Ranges with days that hold no row are what these tests read; readiness is tested elsewhere
    # (tests/test_operator_view.py), so such days are computed.
    served = f"{{path: '{logs}', format: {fmt}, allow_empty_days: true"
    if "on_corrupt" in settings:
        served += f", on_corrupt: {settings.pop('on_corrupt')}"
    text = (
        "inputs:\n"
        f"  served_logs: {served}}}\n"
        f"  clusters: {{path: '{_clusters(root)}', format: parquet}}\n"
        f"output: {{warehouse: '{root / 'warehouse'}'}}\n"
        f"metrics: {{ks: {list(KS)}}}\n"
        f"backfill: {{days_per_chunk: {days_per_chunk}}}\n"
        f"quality: {{on_failure: {settings.pop('on_failure', 'fail')}, "
        "max_missing_cluster_rate: 1.0, max_malformed_rate: 1.0}\n"
        "spark: {master: 'local[1]', driver_memory: 1g}\n"
    )
    path = root / "config.yaml"
    path.write_text(text)
    return path


def _backfill(config: Path) -> int:
    return main(["backfill", "--config", str(config), "--start", str(START), "--end", str(END)])


def _table(spark: SparkSession, root: Path, name: str) -> list[dict[str, Any]]:
    path = root / "warehouse" / name
    if not (path / "_delta_log").is_dir():
        return []
    return [r.asDict() for r in spark.read.format("delta").load(str(path)).collect()]


def _published_daily(spark: SparkSession, root: Path) -> dict[tuple[dt.date, int], dict]:
    return {
        (r["metric_date"], r["k"]): r
        for r in _table(spark, root, "unique_clusters_daily")
        if r["segment"] == "all"
    }


def _assert_daily_equals_reference(
    published: dict[tuple[dt.date, int], dict], rows: list[dict[str, Any]], days: list[dt.date]
) -> None:
    for day in days:
        for want in reference.daily(rows, CLUSTERS, KS, 4, day, day):
            got = published[(day, want["k"])]
            assert {k: got[k] for k in want} == want, (day, want["k"])


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("logmetrics: error")]
    assert len(lines) == 1, lines
    return lines[0]


# --- corrupt files -----------------------------------------------------------------------


def test_a_truncated_parquet_file_fails_the_run_naming_it_before_anything_is_published(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _logs(tmp_path / "logs", {d: _rows(d, 4, "r") for d in DATES})
    _truncate(files[END])  # the last day, in a chunk of its own: the others could publish first
    assert _backfill(_config(tmp_path, tmp_path / "logs", days_per_chunk=1)) == 1
    line = _error_line(capsys)
    assert str(files[END]) in line and "cannot be read" in line
    assert "on_corrupt" in line
    assert _table(spark, tmp_path, "unique_clusters_daily") == []
    assert _table(spark, tmp_path, "unique_clusters_by_query") == []


def test_quarantined_corrupt_file_is_listed_its_days_flagged_and_the_rest_exact(
    spark: SparkSession, tmp_path: Path
) -> None:
    days = {d: _rows(d, 4, "r") for d in DATES}
    _logs(tmp_path / "logs", days)
    # The first file of the first partition: the one Spark would infer the schema from.
    broken = _write(tmp_path / "logs" / f"date={START}" / "0-broken.parquet", _rows(START, 3, "x"))
    _truncate(broken)
    config = _config(tmp_path, tmp_path / "logs", on_corrupt="quarantine", on_failure="warn")
    assert _backfill(config) == 0

    quarantine = _table(spark, tmp_path, "quarantine")
    listed = [q for q in quarantine if q["reason"] == "corrupt_file"]
    # The partition of START may hold rows served the day before or after (a partition's date
    # need not be the UTC date): both days of the run are flagged, and only those.
    assert sorted(q["metric_date"] for q in listed) == DATES[:2]
    assert all(json.loads(q["raw"])["file"] == str(broken) for q in listed)
    published = _published_daily(spark, tmp_path)
    passed = {day: published[(day, KS[0])]["dq_passed"] for day in DATES}
    assert passed == {DATES[0]: False, DATES[1]: False, DATES[2]: True}
    checks = {
        r["metric_date"]: r["observed_value"]
        for r in _table(spark, tmp_path, "data_quality")
        if r["check"] == "readable_inputs"
    }
    assert [checks[d] for d in DATES] == [1.0, 1.0, 0.0]
    # What could be read is computed exactly: every file but the broken one.
    readable = [row for rows in days.values() for row in rows]
    _assert_daily_equals_reference(published, readable, DATES)


def test_a_json_line_that_does_not_parse_fails_or_is_quarantined(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(START, 5, "j")
    logs = tmp_path / "json" / "logs.jsonl"
    logs.parent.mkdir()
    lines = [
        json.dumps({**r, "served_at": r["served_at"].isoformat()}, ensure_ascii=False) for r in rows
    ]
    broken = lines[2][: len(lines[2]) // 2]  # cut off mid-line
    logs.write_text("\n".join([*lines[:2], broken, *lines[3:]]) + "\n")

    assert _backfill(_config(tmp_path, logs.parent, fmt="json")) == 1
    line = _error_line(capsys)
    assert str(logs) in line and "not JSON" in line
    assert _table(spark, tmp_path, "unique_clusters_daily") == []

    config = _config(tmp_path / "q", logs.parent, fmt="json", on_corrupt="quarantine")
    assert _backfill(config) == 3  # the run's days fail readable_inputs (blocking): held
    quarantine = _table(spark, tmp_path / "q", "quarantine")
    corrupt = [q for q in quarantine if q["reason"] == "corrupt_line"]
    # Unpartitioned logs: the line may belong to any day of the run.
    assert sorted(q["metric_date"] for q in corrupt) == DATES
    assert {json.loads(q["raw"])["line"] for q in corrupt} == {broken}

    warn = _config(tmp_path / "w", logs.parent, fmt="json", on_corrupt="quarantine")
    assert main(["backfill", "--config", str(warn), "--start", str(START), "--end", str(END),
                 "--set", "quality.on_failure=warn"]) == 0  # fmt: skip
    published = _published_daily(spark, tmp_path / "w")
    assert {published[(d, KS[0])]["dq_passed"] for d in DATES} == {False}
    _assert_daily_equals_reference(published, rows[:2] + rows[3:], DATES)


# --- schema drift ------------------------------------------------------------------------


def test_a_rank_stored_as_text_in_one_file_is_named_and_nothing_published(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _logs(tmp_path / "logs", {d: _rows(d, 4, "r") for d in DATES[:2]})
    text_ranks = [
        {**r, "results": [{**e, "rank": str(e["rank"])} for e in r["results"]]}
        for r in _rows(END, 4, "r")
    ]
    drifted = _write(tmp_path / "logs" / f"date={END}" / "part-0.parquet", text_ranks, pa.string())
    assert _backfill(_config(tmp_path, tmp_path / "logs", days_per_chunk=1)) == 1
    line = _error_line(capsys)
    assert str(drifted) in line
    assert "'results.rank' must be an integer, found string" in line
    assert _table(spark, tmp_path, "unique_clusters_daily") == []


def test_off_contract_json_lines_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = "2026-03-01T10:00:00+00:00"
    for i, (line, column) in enumerate(
        [
            ({"request_id": "r", "served_at": served, "results": "x"}, "'results'"),
            (
                {"request_id": "r", "served_at": served, "results": [{"rank": "first"}]},
                "'results.rank' must be an integer, got 'first'",
            ),
        ]
    ):
        root = tmp_path / str(i)
        logs = root / "json" / "logs.jsonl"
        logs.parent.mkdir(parents=True)
        logs.write_text(json.dumps(line) + "\n")
        assert _backfill(_config(root, logs.parent, fmt="json")) == 1
        error = _error_line(capsys)
        assert str(logs) in error and column in error


def test_files_that_disagree_on_a_type_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _logs(tmp_path / "logs", {START: _rows(START, 2, "r")})
    texts = [{**r, "served_at": r["served_at"].isoformat()} for r in _rows(END, 2, "r")]
    other = _write(
        tmp_path / "logs" / f"date={END}" / "part-0.parquet", texts, served_at=pa.string()
    )
    assert _backfill(_config(tmp_path, tmp_path / "logs")) == 1
    line = _error_line(capsys)
    assert str(other) in line and "'served_at' as string" in line


def test_lossless_variants_across_files_are_read_alike(spark: SparkSession, tmp_path: Path) -> None:
    """int32 ranks in one file and int64 in another; instants stored in another time zone;
    ISO 8601 text with offsets (its own dataset), a text that is no timestamp quarantined."""
    first, second = _rows(START, 4, "r"), _rows(DATES[1], 4, "s")
    _write(tmp_path / "logs" / f"date={START}" / "part-0.parquet", first, pa.int32())
    _write(
        tmp_path / "logs" / f"date={DATES[1]}" / "part-0.parquet",
        second,
        pa.int64(),
        pa.timestamp("us", tz="Asia/Tokyo"),
    )
    assert _backfill(_config(tmp_path, tmp_path / "logs")) == 0
    published = _published_daily(spark, tmp_path)
    _assert_daily_equals_reference(published, first + second, DATES)

    texts = _rows(START, 4, "t")
    tokyo = dt.timezone(dt.timedelta(hours=9))
    as_text = [{**r, "served_at": r["served_at"].astimezone(tokyo).isoformat()} for r in texts]
    garbage = {**texts[0], "request_id": "bad-time", "served_at": "yesterday at noon"}
    root = tmp_path / "text"  # partitioned: a row without a usable time is placed by it
    _write(
        root / "logs" / f"date={START}" / "part-0.parquet",
        [*as_text, garbage],
        served_at=pa.string(),
    )
    assert _backfill(_config(root, root / "logs")) == 0
    _assert_daily_equals_reference(_published_daily(spark, root), texts, DATES)
    (quarantined,) = _table(spark, root, "quarantine")
    assert quarantined["reason"] == "invalid_served_at"
    assert quarantined["request_id"] == "bad-time"
    assert "yesterday at noon" in quarantined["raw"]


# --- conflicting duplicates ----------------------------------------------------------------


def test_conflicting_copies_of_a_request_keep_the_earliest_and_are_counted(
    spark: SparkSession, tmp_path: Path
) -> None:
    rows = _rows(START, 4, "r")
    later = dt.timedelta(minutes=5)
    same = {**rows[0], "served_at": rows[0]["served_at"] + later}  # a redelivery
    other = {**rows[1], "served_at": rows[1]["served_at"] + later, "results": rows[3]["results"]}
    earlier = {**rows[2], "served_at": rows[2]["served_at"] - later, "results": []}
    _write(tmp_path / "logs" / f"date={START}" / "part-0.parquet", [*rows, same, other, earlier])
    config = _config(tmp_path, tmp_path / "logs")
    assert _backfill(config) == 0  # consistent_duplicates is a warning by default

    _assert_daily_equals_reference(
        _published_daily(spark, tmp_path), [*rows, same, other, earlier], DATES
    )
    checks = {
        r["metric_date"]: r
        for r in _table(spark, tmp_path, "data_quality")
        if r["check"] == "consistent_duplicates"
    }
    # Two requests have copies that disagree: rows[1] (with `other`) and rows[2] (`earlier`,
    # the kept one, has an empty list); rows[0]'s redelivery repeats it.
    assert checks[START]["observed_value"] == 2.0
    assert not checks[START]["success"] and checks[START]["severity"] == "warning"
    assert checks[DATES[1]]["observed_value"] == 0.0
    daily = _published_daily(spark, tmp_path)
    assert daily[(START, KS[0])]["duplicate_rows"] == 3


def test_rows_no_day_can_hold_are_reported(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without date partitions, a row without a usable served_at belongs to no day: the run
    says how many there are instead of losing them silently."""
    rows = _rows(START, 3, "r")
    texts = [{**r, "served_at": r["served_at"].isoformat()} for r in rows]
    undated = [{**rows[0], "served_at": None}, {**rows[1], "served_at": "not a time"}]
    _write(tmp_path / "logs" / "part-0.parquet", texts + undated, served_at=pa.string())
    with caplog.at_level("WARNING", logger="logmetrics"):
        assert _backfill(_config(tmp_path, tmp_path / "logs")) == 0
    assert "2 row(s) of the served logs have no usable served_at" in caplog.text
    _assert_daily_equals_reference(_published_daily(spark, tmp_path), rows, DATES)
