"""The failure policy end to end: a day with 12% unknown chunks against a 5% gate."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

import reference
from contract import SERVED_LOGS
from logmetrics.cli import main
from logmetrics.quality.gx_suite import CHECKS

pytestmark = pytest.mark.slow

DAYS = [dt.date(2026, 5, 1) + dt.timedelta(days=i) for i in range(4)]
BAD_DAY = DAYS[1]  # 60 of its 500 entries are unknown to the cluster table: exactly 0.12
QUIET_DAY = DAYS[3]  # a tenth of the usual traffic: the volume check warns
KS = (5, 10)
DROP = {
    "segment",
    "segment_value",
    "run_id",
    "computed_at",
    "cluster_table_version",
    "dq_passed",
    "rows_read",
}
DROP |= {"duplicate_rows", "quarantined_rows", "quarantined_entries"}


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for day in DAYS:
        requests = 5 if day == QUIET_DAY else 50
        for i in range(requests):
            served_at = dt.datetime.combine(day, dt.time(1), tzinfo=dt.UTC) + dt.timedelta(
                minutes=i
            )
            results = []
            for rank in range(1, 11):
                unknown = day == BAD_DAY and (i * 10 + rank) % 25 in (1, 2, 3)  # 12%
                chunk = f"unknown-{i}-{rank}" if unknown else f"chunk-{(i * 7 + rank) % 40}"
                results.append({"rank": rank, "chunk_id": chunk})
            rows.append({"request_id": f"{day}-{i}", "served_at": served_at, "results": results})
    # One malformed row on the first day.
    rows.append({"request_id": "broken", "served_at": rows[0]["served_at"], "results": None})
    return rows


CLUSTERS = [(f"chunk-{c}", f"cluster-{c % 13}") for c in range(40)]


@pytest.fixture(scope="module")
def inputs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gates")
    spark.createDataFrame(
        [(r["request_id"], r["served_at"], r["results"]) for r in _rows()], SERVED_LOGS
    ).write.parquet(str(root / "logs"))
    spark.createDataFrame(CLUSTERS, "chunk_id string, cluster_id string").write.format(
        "delta"
    ).save(str(root / "clusters"))
    return root


def _run(inputs: Path, warehouse: Path, on_failure: str) -> int:
    config = warehouse.parent / f"{warehouse.name}-{on_failure}.yaml"
    config.write_text(
        "inputs:\n"
        f"  served_logs: {{path: '{inputs / 'logs'}'}}\n"
        f"  clusters: {{path: '{inputs / 'clusters'}'}}\n"
        f"output: {{warehouse: '{warehouse}'}}\n"
        f"metrics: {{ks: {list(KS)}}}\n"
        "backfill: {days_per_chunk: 2}\n"
        f"quality: {{max_missing_cluster_rate: 0.05, max_malformed_rate: 0.05, "
        f"on_failure: {on_failure}}}\n"
    )
    argv = ["backfill", "--config", str(config), "--start", str(DAYS[0]), "--end", str(DAYS[-1])]
    return main(argv)


def _table(spark: SparkSession, warehouse: Path, name: str) -> DataFrame:
    return spark.read.format("delta").load(str(warehouse / name))


def test_fail_policy_holds_back_the_bad_day_and_names_the_check(
    spark: SparkSession, inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse = tmp_path / "wh"
    assert _run(inputs, warehouse, "fail") == 3
    err = capsys.readouterr().err
    failed = [line for line in err.splitlines() if "not published:" in line]
    assert failed == [f"  not published: {BAD_DAY} missing_cluster_rate = 0.12 (threshold 0.05)"]

    daily = _table(spark, warehouse, "unique_clusters_daily")
    assert sorted({r.metric_date for r in daily.collect()}) == [DAYS[0], DAYS[2], DAYS[3]]
    by_query_days = {
        r.metric_date
        for r in _table(spark, warehouse, "unique_clusters_by_query")
        .select("metric_date")
        .distinct()
        .collect()
    }
    assert by_query_days == {DAYS[0], DAYS[2], DAYS[3]}

    good = [d for d in DAYS if d != BAD_DAY]
    got = sorted(
        ({k: v for k, v in r.asDict().items() if k not in DROP} for r in daily.collect()),
        key=lambda r: (r["metric_date"], r["k"]),
    )
    expected = [
        r
        for r in reference.daily(_rows(), CLUSTERS, KS, 4, DAYS[0], DAYS[-1])
        if r["metric_date"] in good
    ]
    assert got == expected

    checks = {
        (r.metric_date, r.check): r for r in _table(spark, warehouse, "data_quality").collect()
    }
    assert len(checks) == len(DAYS) * len(CHECKS)  # every day checked, pass or fail
    bad = checks[(BAD_DAY, "missing_cluster_rate")]
    assert (bad.success, bad.observed_value, bad.threshold, bad.severity) == (
        False,
        60 / 500,
        0.05,
        "blocking",
    )
    assert "expect_column_values_to_be_between" in bad.details
    assert checks[(DAYS[0], "missing_cluster_rate")].success is True
    assert checks[(DAYS[0], "malformed_rate")].observed_value == 1 / 51
    volume = checks[(QUIET_DAY, "volume")]
    assert (volume.success, volume.severity) == (False, "warning")
    assert volume.observed_value == 5 / ((50 + 50 + 50) / 3)

    quarantine = _table(spark, warehouse, "quarantine").collect()
    assert [(r.metric_date, r.reason, r.request_id) for r in quarantine] == [
        (DAYS[0], "null_results", "broken")
    ]
    missing = _table(spark, warehouse, "missing_cluster_chunks").where(f"metric_date = '{BAD_DAY}'")
    assert missing.count() == 60  # 60 distinct unknown chunks, served once each
    assert {r.serves for r in missing.collect()} == {1}


def test_earlier_publication_of_a_failing_day_stays_as_it_was(
    spark: SparkSession, inputs: Path, tmp_path: Path
) -> None:
    warehouse = tmp_path / "wh"
    assert _run(inputs, warehouse, "warn") == 0
    daily = _table(spark, warehouse, "unique_clusters_daily")
    flags = {(r.metric_date, r.k): r.dq_passed for r in daily.collect()}
    assert flags == {(d, k): d != BAD_DAY for d in DAYS for k in KS}  # warnings do not flag
    before = {r.metric_date: r.run_id for r in daily.collect()}

    assert _run(inputs, warehouse, "fail") == 3
    after = {
        r.metric_date: r.run_id for r in _table(spark, warehouse, "unique_clusters_daily").collect()
    }
    assert after[BAD_DAY] == before[BAD_DAY]  # untouched by the failing run
    assert all(after[d] != before[d] for d in DAYS if d != BAD_DAY)
