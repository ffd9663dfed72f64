"""Issue 18, done when: a backfill of generated history with a weekly season and planted changes
finds exactly what was planted, every row agrees with an independent implementation of the rule
(tests/reference.py), and `logmetrics alerts --fail-on-alert` exits 4 only on a range holding
an alert.

One warehouse, built once and read by every test here: 25 days x 1,800 queries, segments by
surface, ks 5 and 10, default alert settings, crowding on; a backfill of all days but the last,
then the detector ships a new cluster table version and the nightly `run` computes the last day.
Surfaces: web ~55% (~990 queries a day), app ~35% (~630), api ~10% (~180, always under
min_queries: the tiny segment).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

import reference
from logmetrics.cli import main
from logmetrics.config import load_config
from logmetrics.synthetic import PlantedChange, PlantedFlood, generate

# A backfill through the CLI (25 days, then a nightly) of 45,000 requests, every row against the
# independent rule: the Makefile's WHOLE_RUN_TESTS, run on Comet, the default engine, by `make
# test-guarantees` (not `make test`, nor the inner loop).
pytestmark = pytest.mark.slow

START = dt.date(2026, 9, 7)  # a Monday
DAYS = 25
END = START + dt.timedelta(days=DAYS - 1)
FIRST_JUDGED = START + dt.timedelta(days=21)  # the first day with 3 same-weekday baseline days
REGRESSED = START + dt.timedelta(days=22)  # app repeats more: fewer clusters
IMPROVED = START + dt.timedelta(days=23)  # web repeats less: more clusters
WILD = START + dt.timedelta(days=24)  # api (tiny) goes wild: still too few queries to judge
PLANTED = [
    PlantedChange(REGRESSED, 0.12, "surface", "app"),
    PlantedChange(IMPROVED, -0.10, "surface", "web"),
    PlantedChange(WILD, 0.20, "surface", "api"),
]
# Issue 26: on the regressed day three named clusters flood app's lists on top of it.
FLOODS = [
    PlantedFlood(REGRESSED, "zendesk-reset-password", 0.30, 4, "surface", "app"),
    PlantedFlood(REGRESSED, "sso-setup-guide", 0.20, 3, "surface", "app"),
    PlantedFlood(REGRESSED, "billing-faq", 0.12, 3, "surface", "app"),
]
# Issue 26: the detector's calibration, measured for version 0 (at two thresholds) only.
CALIBRATION_CSV = (
    "cluster_table_version,detector,threshold,pair_precision,pair_recall,measured_on,sample_pairs\n"
    "0,minhash-2026-09,0.8,0.97,0.91,2026-09-01,2000\n"
    "0,minhash-2026-09,0.9,0.99,0.84,2026-09-01,2000\n"
)
QUERIES_PER_DAY = 1800
KS = (5, 10)
NUMBERS = ["value", "baseline_mean", "baseline_sd", "delta", "limit", "min_effect"]


def _config(data: Path, warehouse: Path, logs: bool = True, calibration: str = "") -> Path:
    name = f"{warehouse.name}{'' if logs else '-alerts-only'}{calibration and '-' + calibration}"
    path = warehouse.parent / f"{name}.yaml"
    served = f"  served_logs: {{path: '{data / 'served_logs'}'}}\n" if logs else ""
    calibrated = (
        f"  calibration: {{path: '{data / calibration}', format: csv}}\n" if calibration else ""
    )
    path.write_text(
        "inputs:\n"
        + served
        + calibrated
        + f"  clusters: {{path: '{data / 'clusters'}'}}\n"
        + f"output: {{warehouse: '{warehouse}'}}\n"
        + f"metrics: {{ks: {list(KS)}, segment_by: [surface]}}\n"
        + "backfill: {days_per_chunk: 25}\n"
        + "crowding: {enabled: true}\n"
        + "spark: {master: 'local[1]', driver_memory: 1g}\n"
    )
    return path


@pytest.fixture(scope="module")
def built(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("alerts")
    data = root / "data"
    generate(
        data,
        START,
        DAYS,
        QUERIES_PER_DAY,
        seed=18,
        dirty=False,
        weekly_amplitude=0.04,
        planted=PLANTED,
        floods=FLOODS,
    )
    spark.read.parquet(str(data / "clusters_parquet")).write.format("delta").save(
        str(data / "clusters")
    )
    warehouse = root / "warehouse"
    (data / "calibration.csv").write_text(CALIBRATION_CSV)
    config = _config(data, warehouse, calibration="calibration.csv")
    before = str(END - dt.timedelta(days=1))
    with _warnings("logmetrics.flows.calibration") as backfill_warnings:
        backfill = ["backfill", "--config", str(config), "--start", str(START), "--end", before]
        assert main(backfill) == 0
    # The same cluster table committed again: version 1, nothing changed but the version.
    clusters = spark.read.format("delta").load(str(data / "clusters")).localCheckpoint()
    clusters.write.format("delta").mode("overwrite").save(str(data / "clusters"))
    # Only the new day is computed from the new version: no look-back restating the days before
    # it (`run` would restate them, clusters_changed, under the default nightly.lookback_days).
    run = ["run", "--config", str(config), "--date", str(END), "--set", "nightly.lookback_days=0"]
    with _warnings("logmetrics.flows.calibration") as run_warnings:
        assert main(run) == 0
    return {
        "data": data,
        "warehouse": warehouse,
        "config": config,
        "calibration_warnings": (backfill_warnings, run_warnings),
    }


@contextlib.contextmanager
def _warnings(logger: str) -> Iterator[list[str]]:
    """The warning lines `logger` emits inside the block."""
    lines: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger(logger).addHandler(handler)
    try:
        yield lines
    finally:
        logging.getLogger(logger).removeHandler(handler)


def _table(spark: SparkSession, warehouse: Path, name: str) -> pd.DataFrame:
    return spark.read.format("delta").load(str(warehouse / name)).toPandas()


def _alerts(spark: SparkSession, warehouse: Path) -> pd.DataFrame:
    rows = _table(spark, warehouse, "unique_clusters_alerts")
    return rows.sort_values(["metric_date", "k", "segment", "segment_value", "statistic"])


def _expected(daily: pd.DataFrame) -> list[dict[str, Any]]:
    rows = daily.to_dict("records")
    for row in rows:
        row["histogram"] = [int(c) for c in row["histogram"]]
        version = row["cluster_table_version"]
        row["cluster_table_version"] = None if pd.isna(version) else int(version)
    days = sorted({r["metric_date"] for r in rows})
    return reference.alerts(rows, days)


def _same(actual: Any, expected: Any) -> bool:
    if expected is None:
        return actual is None or (isinstance(actual, float) and math.isnan(actual))
    if isinstance(expected, float):
        return actual == pytest.approx(expected, rel=1e-12, abs=1e-15)
    return bool(actual == expected)


def test_every_row_agrees_with_the_independent_rule(
    spark: SparkSession, built: dict[str, Any]
) -> None:
    daily = _table(spark, built["warehouse"], "unique_clusters_daily")
    expected = _expected(daily)
    actual = _alerts(spark, built["warehouse"]).to_dict("records")
    assert len(actual) == len(expected) == DAYS * len(KS) * 4 * 2  # 4 = all + 3 surfaces
    for got, want in zip(actual, expected, strict=True):
        mismatched = {
            name: (got[name], value) for name, value in want.items() if not _same(got[name], value)
        }
        assert mismatched == {}, (want["metric_date"], want["segment_value"], want["k"])


def test_the_planted_changes_are_found_and_nothing_else(
    spark: SparkSession, built: dict[str, Any]
) -> None:
    """The regressed segment alerts on both statistics at every k, the improved one improves,
    and every other judged row is `ok`: a rule that fired one statistic only (say the mean
    never alerting, or alerting the wrong way round), judged the tiny segment, or fired on a
    quiet day fails."""
    rows = _alerts(spark, built["warehouse"])
    status = {
        (r.metric_date, r.segment_value, r.k, r.statistic): r.status for r in rows.itertuples()
    }
    alerts = {key for key, value in status.items() if value == "alert"}
    improvements = {key for key, value in status.items() if value == "improvement"}
    # The regressed segment, at every k and on both statistics; all traffic too, as it is big.
    assert {key for key in alerts if key[1] == "app"} == {
        (REGRESSED, "app", k, s) for k in KS for s in ("share_at_or_below_threshold", "mean")
    }
    assert (REGRESSED, "all", 10, "share_at_or_below_threshold") in alerts
    assert {key[:2] for key in alerts} == {(REGRESSED, "app"), (REGRESSED, "all")}
    assert {key[:2] for key in improvements} == {(IMPROVED, "web"), (IMPROVED, "all")}
    assert {
        (IMPROVED, "web", k, s) for k in KS for s in ("share_at_or_below_threshold", "mean")
    } <= (improvements)
    for (day, value, _, _), verdict in status.items():
        if value == "api":
            assert verdict == "too_few_queries"
        elif day < FIRST_JUDGED:
            assert verdict == "insufficient_baseline"
        elif (day, value) not in {(REGRESSED, "app"), (REGRESSED, "all")} | {
            (IMPROVED, "web"),
            (IMPROVED, "all"),
        }:
            assert verdict == "ok", (day, value)
    # api's wild day is its worst by far, and still not judged (nor any api day a baseline).
    api = rows[(rows.segment_value == "api") & (rows.k == 10) & (rows.statistic == "mean")]
    wild = api[api.metric_date == WILD].value.iloc[0]
    assert wild < api[api.metric_date != WILD].value.min() - 0.5
    assert set(api.baseline_days) == {0}


def test_value_and_baseline_mean_are_exact(spark: SparkSession, built: dict[str, Any]) -> None:
    """The value is the published daily row's own number; the baseline mean is the mean of the
    same weekday's rows 1, 2 and 3 weeks before."""
    daily = _table(spark, built["warehouse"], "unique_clusters_daily").set_index(
        ["metric_date", "k", "segment_value"]
    )
    rows = _alerts(spark, built["warehouse"])
    judged = rows[(rows.metric_date == REGRESSED) & (rows.segment_value == "app")]
    assert len(judged) == 4
    for r in judged.itertuples():
        assert r.value == daily.loc[(r.metric_date, r.k, "app"), r.statistic]
        weeks = [
            daily.loc[(r.metric_date - dt.timedelta(weeks=w), r.k, "app"), r.statistic]
            for w in (1, 2, 3)
        ]
        assert r.baseline_mean == pytest.approx(sum(weeks) / 3, rel=1e-15)
        assert r.baseline_days == 3
        assert r.queries == daily.loc[(r.metric_date, r.k, "app"), "queries"]


def test_alerts_command_exit_codes_and_output(
    spark: SparkSession, built: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """From the published table alone: the config has no served logs."""
    config = _config(built["data"], built["warehouse"], logs=False)
    before = _alerts(spark, built["warehouse"])

    def alerts(start: dt.date, end: dt.date, *flags: str) -> int:
        argv = ["alerts", "--config", str(config), "--start", str(start), "--end", str(end)]
        return main([*argv, *flags])

    assert alerts(FIRST_JUDGED, END, "--fail-on-alert") == 4
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if line.startswith(("ALERT ", "IMPROVEMENT "))]
    fired = before[before.status.isin(["alert", "improvement"])]
    assert len(set(lines)) == len(lines) == len(fired)  # each said once, and only on stdout
    assert not any("ALERT " in line or "IMPROVEMENT " in line for line in err.splitlines())
    raised = int((fired.status == "alert").sum())
    assert out.splitlines()[-1] == (
        f"{FIRST_JUDGED}..{END}: {(END - FIRST_JUDGED).days + 1} day(s) judged, {raised} "
        f"alert(s), {len(fired) - raised} improvement(s)"
    )
    assert f"ALERT {REGRESSED} surface=app k=10 share_at_or_below_threshold: " in out
    assert f"IMPROVEMENT {IMPROVED} surface=web k=10 mean: " in out
    assert all(" vs baseline " in line and " ± " in line for line in lines)
    # Right below each alert, its day's top 5 crowding keys of its k and segment row, in rank
    # order; an alert of the same row with the same keys after it (the share after the mean)
    # says they are those above.
    crowding = _table(spark, built["warehouse"], "unique_clusters_crowding")
    top = crowding[
        (crowding.metric_date == REGRESSED)
        & (crowding.k == 10)
        & (crowding.segment_value == "app")
        & (crowding["rank"] <= 5)
    ].sort_values("rank")
    block = out.split(f"ALERT {REGRESSED} surface=app k=10 ")[1]
    culprits = block.splitlines()[1:6]
    assert len(top) == 5 and [c.split(":")[0] for c in culprits] == [
        f"  #{r.rank} cluster {r.cluster_id}" if r.cluster_id else f"  #{r.rank} chunk {r.chunk_id}"
        for r in top.itertuples()
    ]
    assert [int(c.split(": ")[1].split()[0]) for c in culprits] == list(top.redundant_slots)
    assert "logmetrics: error: " in err and "alert(s)" in err
    assert alerts(REGRESSED, REGRESSED) == 0  # without --fail-on-alert an alert is news
    assert alerts(FIRST_JUDGED, FIRST_JUDGED, "--fail-on-alert") == 0
    assert alerts(IMPROVED, END, "--fail-on-alert") == 0  # improvements do not fail
    capsys.readouterr()
    # Re-judging replaces the rows with the same verdicts and numbers (a new run id).
    after = _alerts(spark, built["warehouse"])
    volatile = ["run_id", "computed_at"]
    pd.testing.assert_frame_equal(
        before.drop(columns=volatile).reset_index(drop=True),
        after.drop(columns=volatile).reset_index(drop=True),
    )
    assert set(after[after.metric_date >= FIRST_JUDGED].run_id) != set(
        before[before.metric_date >= FIRST_JUDGED].run_id
    )


def test_a_new_cluster_table_version_is_flagged(spark: SparkSession, built: dict[str, Any]) -> None:
    """The last day was computed from version 1 of the cluster table, its baseline days from
    version 0: the detector changed, not necessarily the index, and every row of the day that
    has a baseline says so. The numbers are the same (the table's content is)."""
    rows = _alerts(spark, built["warehouse"])
    last = rows[rows.metric_date == END]
    assert set(last.cluster_table_version) == {1}
    judged = last[last.baseline_days > 0]
    assert len(judged) == 3 * len(KS) * 2  # all traffic, web and app x ks x statistics
    assert judged.cluster_table_changed.all()
    assert not last[last.baseline_days == 0].cluster_table_changed.any()
    assert set(rows[rows.metric_date < END].cluster_table_version) == {0}
    assert not rows[rows.metric_date < END].cluster_table_changed.any()


def test_by_query_carries_the_segment_columns(spark: SparkSession, built: dict[str, Any]) -> None:
    """Issue 26, part 3: each request's `surface` as the logs hold it, and a segment's daily
    row is exactly its queries in unique_clusters_by_query (the drill-down a dashboard does)."""
    by_query = spark.read.format("delta").load(str(built["warehouse"] / "unique_clusters_by_query"))
    assert by_query.columns[:4] == ["metric_date", "request_id", "served_at", "surface"]
    day = by_query.where(f"metric_date = '{REGRESSED}'")
    logs = pd.read_parquet(built["data"] / "served_logs" / f"date={REGRESSED}")
    got = day.where("k = 10").select("request_id", "surface").toPandas()
    assert dict(zip(got.request_id, got.surface, strict=True)) == {
        r: reference.segment_of({"surface": s}, "surface")
        for r, s in zip(logs.request_id, logs.surface, strict=True)
    }
    daily = _table(spark, built["warehouse"], "unique_clusters_daily")
    rows = daily[(daily.metric_date == REGRESSED) & (daily.segment == "surface")]
    counts = day.groupBy("k", "surface").count().toPandas()
    assert {(r.k, r.segment_value, r.queries) for r in rows.itertuples()} == {
        (r.k, r.surface, r["count"]) for _, r in counts.iterrows()
    }


def test_the_planted_floods_are_the_alerts_top_culprits(
    spark: SparkSession, built: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26, done when: three clusters planted on one day are, in order, the top three
    culprits of that day's alert, with their redundant slots as the independent rule counts
    them from the raw logs (tests/reference.py)."""
    config = _config(built["data"], built["warehouse"], logs=False)
    argv = ["alerts", "--config", str(config), "--start", str(REGRESSED), "--end", str(REGRESSED)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    logs = pd.read_parquet(built["data"] / "served_logs" / f"date={REGRESSED}")
    rows = [
        {**r, "results": list(r["results"]), "metric_date": REGRESSED}
        for r in logs.to_dict("records")
    ]
    clusters = pd.read_parquet(built["data"] / "clusters_parquet")
    expected = reference.crowding(
        rows,
        list(zip(clusters.chunk_id, clusters.cluster_id, strict=True)),
        [10],
        3,
        REGRESSED,
        REGRESSED,
        ("surface", "app"),
    )
    assert [r["cluster_id"] for r in expected] == [f.cluster_id for f in FLOODS]
    # Both statistics alert, and their culprits (the same keys) are listed once, right below
    # the first (the mean), the share's line saying they are those above; never among the
    # baseline days' keys (mean 0 there, and new), each with its price: the logs carry no
    # `tokens`, so 510 tokens a slot at 3 USD per million (the defaults), written as in the
    # README's example (0.42M / 42.3k / 510 tokens).
    lines = out.splitlines()
    head = f"ALERT {REGRESSED} surface=app k=10 "
    heads = [i for i, line in enumerate(lines) if line.startswith(head)]
    assert [lines[i].split()[4] for i in heads] == ["mean:", "share_at_or_below_threshold:"]
    assert heads[1] == heads[0] + 6 and lines[heads[1]].endswith("; culprits as above")
    assert lines[heads[0] + 1 : heads[0] + 4] == [
        f"  #{r['rank']} cluster {r['cluster_id']}: {r['redundant_slots']} redundant slots, "
        f"{_tokens(r['redundant_slots'] * 510)} tokens, "
        f"{r['redundant_slots'] * 510 * 3.0 / 1e6:.2f} USD "
        "(baseline mean 0.0), NEW among the baseline's top keys"
        for r in expected
    ]
    assert [r["redundant_usd"] for r in expected] == [
        r["redundant_slots"] * 510 * 3.0 / 1e6 for r in expected
    ]


def _tokens(count: int) -> str:
    if count >= 100_000:
        return f"{count / 1e6:.2f}M"
    return f"{count / 1e3:.1f}k" if count >= 1_000 else str(count)


def test_the_crowding_table_equals_the_reference_over_every_day_and_segment(
    spark: SparkSession, built: dict[str, Any]
) -> None:
    """unique_clusters_crowding as the real pipeline published it (candidates collected, named,
    given their examples, written per chunk; all traffic and each surface; the last day from
    the `run`), every column, equals `reference.crowding` over the raw logs: a wrong
    requests_affected, share, cluster size or example list fails, not only a wrong rank."""
    logs = ds.dataset(built["data"] / "served_logs", format="parquet", partitioning="hive")
    rows = logs.to_table(columns=["request_id", "served_at", "results", "surface"]).to_pylist()
    clusters = pd.read_parquet(built["data"] / "clusters_parquet")
    cluster_rows = list(zip(clusters.chunk_id, clusters.cluster_id, strict=True))
    published = _table(spark, built["warehouse"], "unique_clusters_crowding")
    top = load_config([built["config"]]).crowding.top_clusters
    segments = sorted(set(zip(published.segment, published.segment_value, strict=True)))
    assert segments == [("all", "all"), ("surface", "api"), ("surface", "app"), ("surface", "web")]
    for name, value in segments:
        expected = reference.crowding(
            rows, cluster_rows, KS, top, START, END, None if name == "all" else (name, value)
        )
        ours = published[(published.segment == name) & (published.segment_value == value)]
        got = sorted(
            ({c: _plain(r[c]) for c in expected[0]} for r in ours.to_dict("records")),
            key=lambda r: (r["metric_date"], r["k"], r["rank"]),
        )
        assert len(got) == len(expected), (name, value)
        for actual, want in zip(got, expected, strict=True):
            assert actual == want, (name, value)


def _plain(value: Any) -> Any:
    """A pandas cell as the reference writes it: None for a null, a list for an array."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def test_the_calibration_is_published_warned_about_and_shown(
    spark: SparkSession, built: dict[str, Any], tmp_path: Path
) -> None:
    """Issue 26, part 4: the calibration rows are published as detector_calibration; the run
    that computed a day from version 1, which no row describes, warned once (the backfill,
    all on version 0, not at all); the report shows each version's calibration once and the day
    the version changed."""
    from logmetrics.report import load_report_data, render

    published = _table(spark, built["warehouse"], "detector_calibration")
    assert sorted(
        (r.cluster_table_version, r.detector, r.threshold, r.pair_precision, r.pair_recall)
        + (r.measured_on, r.sample_pairs)
        for r in published.itertuples()
    ) == [
        (0, "minhash-2026-09", 0.8, 0.97, 0.91, dt.date(2026, 9, 1), 2000),
        (0, "minhash-2026-09", 0.9, 0.99, 0.84, dt.date(2026, 9, 1), 2000),
    ]
    backfill_warnings, run_warnings = built["calibration_warnings"]
    assert backfill_warnings == []
    assert len(run_warnings) == 1 and "cluster table version 1" in run_warnings[0]
    assert f"1 day(s) of {END} were computed" in run_warnings[0]

    data = load_report_data(spark, load_config([built["config"]]), START, END)
    assert data.calibration is not None
    shown = data.calibration
    assert list(shown.cluster_table_version) == [0, 0, 1]
    assert list(shown.calibrated) == [True, True, False]
    assert (shown.first_day.iloc[0], shown.last_day.iloc[0]) == (START, END - dt.timedelta(1))
    assert (shown.first_day.iloc[2], shown.last_day.iloc[2]) == (END, END)
    page = render(data, tmp_path / "report").read_text()
    assert page.count(f"The version changed on {END}: version 1") == 1  # once, not per figure
    assert page.count("No calibration row for version(s) 1.") == 1


@pytest.mark.parametrize(
    ("csv", "message"),
    [
        (
            "cluster_table_version,threshold,pair_precision,pair_recall,measured_on,sample_pairs\n"
            "1,0.8,1.5,0.9,2026-09-01,100\n",
            "row 1: pair_precision must be within [0, 1], got 1.5",
        ),
        (
            "cluster_table_version,threshold,pair_precision,measured_on,sample_pairs\n"
            "1,0.8,0.9,2026-09-01,100\n",
            "required column 'pair_recall' is missing",
        ),
        (
            "threshold,pair_precision,pair_recall,measured_on,sample_pairs\n"
            "0.8,0.9,0.9,2026-09-01,100\n",
            "needs a column 'cluster_table_version' or 'detector'",
        ),
        (
            "detector,threshold,pair_precision,pair_recall,measured_on,sample_pairs\n"
            "m,0.8,0.9,0.9,yesterday,100\n",
            "column 'measured_on' must hold dates, got 'yesterday'",
        ),
    ],
    ids=["precision-above-1", "missing-column", "no-key", "not-a-date"],
)
def test_invalid_calibration_is_an_input_error_before_anything_is_published(
    built: dict[str, Any], csv: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (built["data"] / "bad.csv").write_text(csv)
    config = _config(built["data"], built["warehouse"], calibration="bad.csv")
    logs_before = {p: p.stat().st_mtime_ns for p in built["warehouse"].glob("*/_delta_log/*")}
    argv = ["run", "--config", str(config), "--date", str(END), "--set", "nightly.lookback_days=0"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"logmetrics: error: calibration at {built['data'] / 'bad.csv'}" in err
    assert message in err
    assert "Traceback" not in err and "at org.apache" not in err
    after = {p: p.stat().st_mtime_ns for p in built["warehouse"].glob("*/_delta_log/*")}
    assert after == logs_before  # not one commit: nothing published, no ledger row
