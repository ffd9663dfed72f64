"""`logmetrics generate` and `logmetrics demo`: synthetic traffic, backfilled and printed."""

from __future__ import annotations

import csv
import datetime as dt
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from logmetrics.config import Config, SparkConfig, default_k
from logmetrics.console import say
from logmetrics.errors import ConfigError
from logmetrics.synthetic import PlantedChange, PlantedFlood, write_judged_set

if TYPE_CHECKING:
    from logmetrics.flows.backfill import RunSummary

log = logging.getLogger(__name__)

DEMO_START = dt.date(2026, 10, 1)
DEMO_SEED = 7
DEMO_REPORT_DIR = Path("reports/demo")
DAILY_SHOWN = 7  # days of the daily table printed
DEMO_LIST_LENGTH = 20  # top-20 lists: the k-sweep shows the marginal rate past k = 10
DEMO_WEEKLY_AMPLITUDE = 0.04  # the repeat probability's weekly season (synthetic.weekly_shift)
# The regression: on one day three articles, each copied into several sources (a Zendesk
# article, its Confluence paste, its PDF export, ...), flood the app surface's lists.
DEMO_JUDGED_SURFACE = "app"  # the judged set's queries: the flooded surface's (write_judged_set)
DEMO_FLOODS = (  # (cluster_id, share of app's queries, copies)
    ("kb-reset-password", 0.30, 5),
    ("kb-sso-setup-guide", 0.20, 4),
    ("kb-billing-faq", 0.15, 3),
)
# The detector's calibration the demo publishes through `inputs.calibration`: its cluster table
# measured against the generator's truth (`synthetic.pair_calibration`), as a team measures its
# detector on labelled pairs. The generator groups the copies it made, so it has no similarity
# cut-off: the row's threshold is a nominal 1.0.
DEMO_CALIBRATION = "calibration.csv"  # under the served logs' parent, beside the clusters
DEMO_DETECTOR = "demo-generator"
DEMO_DETECTOR_THRESHOLD = 1.0
DEMO_CALIBRATION_PAIRS = 1000  # drawn from the detector's pairs, and as many from the true ones


def demo_regression(days: int) -> list[PlantedFlood]:
    """The demo's planted regression: on its second-to-last day, when that day has the default
    baseline (the same weekday 3 weeks back at least) to be judged against; else none."""
    if days < 23:
        return []
    day = DEMO_START + dt.timedelta(days=days - 2)
    return [
        PlantedFlood(day, cluster_id, share, copies, "surface", "app")
        for cluster_id, share, copies in DEMO_FLOODS
    ]


def generate_dataset(
    out: Path,
    start: dt.date,
    days: int,
    queries_per_day: int,
    seed: int,
    list_length: int = 10,
    dirty: bool = True,
    clusters_format: str = "delta",
    spark: SparkSession | None = None,
    weekly_amplitude: float = 0.0,
    planted: Sequence[PlantedChange] = (),
    floods: Sequence[PlantedFlood] = (),
) -> None:
    """Write served logs (Parquet, by date) and a cluster table (Delta or Parquet) under `out`."""
    from logmetrics.synthetic import generate

    data = generate(
        out,
        start,
        days,
        queries_per_day,
        seed,
        list_length=list_length,
        dirty=dirty,
        weekly_amplitude=weekly_amplitude,
        planted=planted,
        floods=floods,
    )
    clusters = out / "clusters_parquet"
    if clusters_format == "delta":
        from logmetrics.session import get_spark

        spark = spark or get_spark(SparkConfig())
        clusters = out / "clusters"
        spark.read.parquet(str(out / "clusters_parquet")).write.format("delta").mode(
            "overwrite"
        ).save(str(clusters))
    say(
        log,
        f"generated {data.requests:,} requests over {days} day(s) from {start}: served logs "
        f"{out / 'served_logs'}, cluster table {clusters} ({clusters_format})",
    )


def run_demo(config: Config, days: int, queries_per_day: int, run_id: str) -> RunSummary:
    """Generate `days` of traffic (once): top-20 lists, a weekly season and one planted
    regression day in one segment, and a judged set from that day's lists for `evaluate`
    (`synthetic.write_judged_set`, under <data>/eval); measure the cluster table against the
    generator's truth and give it as `inputs.calibration` (unless the config names one:
    `_with_calibration`); backfill it into the warehouse (which publishes the calibration,
    judges every day, names what crowds each day's lists and says each alert with its
    culprits), print what was planted and the last week of the daily table, and write the
    report of the range under reports/demo. The run's summary, for the CLI's closing lines."""
    from logmetrics.flows.backfill import run_range
    from logmetrics.session import get_spark

    logs, cluster_table = config.inputs.logs(), config.inputs.clusters
    if logs.path is None or logs.shape != "nested" or logs.columns.mapped():
        raise ConfigError("demo: inputs.served_logs must be a path, in the contract's own shape")
    out = Path(logs.path).parent
    if (
        cluster_table.path is None
        or Path(cluster_table.path) != out / "clusters"
        or cluster_table.format != "delta"
    ):
        raise ConfigError(
            "demo: inputs.clusters must be a Delta table at <served_logs parent>/clusters"
        )
    spark = get_spark(config.spark, days=days)
    planted = demo_regression(days)
    params = {
        "start": DEMO_START.isoformat(),
        "days": days,
        "qpd": queries_per_day,
        "seed": DEMO_SEED,
        "list_length": DEMO_LIST_LENGTH,
        "weekly_amplitude": DEMO_WEEKLY_AMPLITUDE,
        "floods": [[str(p.date), p.cluster_id, p.share, p.members, p.value] for p in planted],
    }
    marker = out / "_demo.json"
    end = DEMO_START + dt.timedelta(days=days - 1)
    judged = out / "eval"
    if not marker.exists() or json.loads(marker.read_text()) != params:
        generate_dataset(
            out,
            DEMO_START,
            days,
            queries_per_day,
            DEMO_SEED,
            list_length=DEMO_LIST_LENGTH,
            spark=spark,
            weekly_amplitude=DEMO_WEEKLY_AMPLITUDE,
            floods=planted,
        )
        marker.write_text(json.dumps(params))
        shutil.rmtree(judged, ignore_errors=True)
    if not judged.is_dir():  # the regression's day, whose app lists are crowded
        write_judged_set(out, planted[0].date if planted else end, DEMO_JUDGED_SURFACE)
    say(log, f"judged set for `logmetrics evaluate` (conf/eval.yaml): {judged}")
    if config.inputs.calibration is None:  # the user's own, if they gave one
        config = _with_calibration(spark, config, out, queries_per_day, planted)
    for flood in planted[:1]:
        clusters = ", ".join(f"{f.cluster_id} ({f.members} copies)" for f in planted)
        say(log, f"planted on {flood.date} in {flood.segment}={flood.value}'s lists: {clusters}")
    summary = run_range(
        spark, config, DEMO_START, end, run_id, dt.datetime.now(dt.UTC).replace(microsecond=0)
    )
    _print_daily(spark, config, max(DEMO_START, end - dt.timedelta(days=DAILY_SHOWN - 1)), end)
    from logmetrics.report import load_report_data, render

    index = render(load_report_data(spark, config, DEMO_START, end), DEMO_REPORT_DIR)
    print(f"report: {index}")
    return summary


def demo_calibration(
    out: Path,
    queries_per_day: int,
    floods: Sequence[PlantedFlood],
    version: int | None,
    measured_on: dt.date,
    pairs: int = DEMO_CALIBRATION_PAIRS,
    seed: int = DEMO_SEED,
    corpus_chunks: int | None = None,
) -> dict[str, Any]:
    """The demo's calibration row (`schemas.CALIBRATION`'s columns) for the cluster table
    `generate` wrote under `out` with these arguments, at Delta `version`: its pair precision
    and recall against the generator's truth (`synthetic.true_clusters`), measured on `pairs`
    pairs drawn from each side (`synthetic.pair_calibration`)."""
    import pyarrow.parquet as pq

    from logmetrics.synthetic import pair_calibration, true_clusters

    truth = true_clusters(seed, queries_per_day, floods, corpus_chunks)
    measured = pair_calibration(pq.read_table(out / "clusters_parquet"), truth, pairs, seed)
    return {
        "cluster_table_version": version,
        "detector": DEMO_DETECTOR,
        "threshold": DEMO_DETECTOR_THRESHOLD,
        "pair_precision": measured.precision,
        "pair_recall": measured.recall,
        "measured_on": measured_on.isoformat(),
        "sample_pairs": measured.labelled,
    }


def _with_calibration(
    spark: SparkSession,
    config: Config,
    out: Path,
    queries_per_day: int,
    floods: Sequence[PlantedFlood],
) -> Config:
    """Measure the demo's cluster table (`demo_calibration`, at the version the run will
    read), write the row as a CSV file a user would give, and return the config with
    `inputs.calibration` naming it: the run checks and publishes it as `detector_calibration`,
    and the report shows it."""
    from logmetrics.config import CalibrationInput
    from logmetrics.inputs.clusters import read_clusters
    from logmetrics.schemas import CALIBRATION

    version = read_clusters(spark, config.inputs.clusters).version
    row = demo_calibration(out, queries_per_day, floods, version, dt.datetime.now(dt.UTC).date())
    path = out / DEMO_CALIBRATION
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=CALIBRATION.fieldNames())
        writer.writeheader()
        writer.writerow(row)
    say(
        log,
        f"detector calibration (inputs.calibration): {path}: pair precision "
        f"{row['pair_precision']:.3f}, pair recall {row['pair_recall']:.3f} on "
        f"{row['sample_pairs']:,} pairs sampled against the generator's truth",
    )
    source = CalibrationInput(path=str(path), format="csv")
    return config.model_copy(
        update={"inputs": config.inputs.model_copy(update={"calibration": source})}
    )


def _print_daily(spark: SparkSession, config: Config, start: dt.date, end: dt.date) -> None:
    from logmetrics.schemas import ALL_TRAFFIC
    from logmetrics.tables.catalog import DAILY_TABLE, read_table, table_ref

    k = default_k(config.metrics.ks)
    location = table_ref(config.output, DAILY_TABLE)
    daily = read_table(spark, config.output, DAILY_TABLE)
    if daily is None:
        print("unique_clusters_daily is empty: no day was published")
        return
    rows = (
        daily.where(
            F.col("metric_date").between(start, end)
            & (F.col("k") == k)
            & (F.col("segment") == ALL_TRAFFIC)
        )
        .orderBy("metric_date")
        .collect()
    )
    threshold = config.metrics.threshold
    print(f"\nunique_clusters_daily at k={k}, all traffic ({location}):")
    print(
        f"{'metric_date':<12}{'queries':>9}{'median':>8}{'p10':>6}{'p90':>6}{'mean':>7}"
        f"{'share<=' + str(threshold):>10}{'missing':>9}"
    )
    for r in rows:
        share = (
            "-" if r.share_at_or_below_threshold is None else f"{r.share_at_or_below_threshold:.1%}"
        )
        missing = "-" if r.missing_cluster_rate is None else f"{r.missing_cluster_rate:.2%}"
        median = "-" if r.median is None else f"{r.median:g}"
        p10 = "-" if r.p10 is None else f"{r.p10:g}"
        p90 = "-" if r.p90 is None else f"{r.p90:g}"
        mean = "-" if r.mean is None else f"{r.mean:.2f}"
        print(
            f"{r.metric_date!s:<12}{r.queries:>9}{median:>8}{p10:>6}{p90:>6}{mean:>7}"
            f"{share:>10}{missing:>9}"
        )
    print(f"(the last {len(rows)} day(s); every day, k and segment is in the table)\n")
