"""The README as a stranger uses it: `logmetrics demo` in a clone (a git repository holding only
the shipped config and .gitignore), its output read as a person reads it, then every
`logmetrics` command of the README, as written, against that demo's data and warehouse, and
the clone's `git status` clean after them. The suite's Spark settings are layered over the
shipped config through $LOGMETRICS_CONFIG, which the commands read as they do without
--config. The demo and the commands run through the CLI's own entry point in the suite's
session, from the clone: a JVM of their own would be most of their time (the demo as a
process took 251 s under the suite's load, 65 s alone), and what a process adds to the
terminal, the JVM's own output kept out of it, is tests/test_cli_process.py's. The session's
local file system resolves relative paths from the clone while the commands run, as a
process started there would (`_relative_to`).

The dashboard the README points to (deploy/databricks/dashboards/logmetrics.lvdash.json) is
tested here too, on the demo's warehouse: every dataset's SQL runs on it through Spark SQL,
the catalog and schema the bundle names replaced by a schema holding the demo's tables and the
views `logmetrics views` creates, and every widget reads a dataset it defines and columns that
dataset returns."""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import os
import re
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from pyspark.sql import SparkSession

import lvdash
from logmetrics.cli import main
from logmetrics.config import OutputConfig
from logmetrics.tables.catalog import OUTPUT_TABLES, table_location
from logmetrics.tables.views import create_views
from suite_session import ACCELERATOR, TEST_CONF

# The demo is 60,000 requests (600,000 served rows), not the few hundred of the suite's other
# runs: compiled (tests/conftest.py, `compiled`). A whole run a user meets first: the Makefile's
# WHOLE_RUN_TESTS, run on Comet, the default engine, by `make test-guarantees`, not `make test`.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("compiled")]

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
MOST_LINES = 60


class Demo(NamedTuple):
    root: Path
    env: dict[str, str]
    status: int
    stdout: str
    stderr: str


def _commands() -> list[tuple[list[str], int]]:
    """Every `logmetrics` command of the README's bash blocks, in order, as the shell splits it
    (comments dropped, a line ending in `\\` joined to the next), each with the exit status
    its comment names (`exit N:`), else 0."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```$", README, re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if not line.startswith("logmetrics "):
                continue
            status = re.search(r"#.*\bexit (\d):", line)
            argv = shlex.split(line, comments=True)
            commands.append((argv, int(status.group(1)) if status else 0))
    return commands


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def _tree(root: Path) -> set[str]:
    """Every file and directory under `root` but `.git`, empty and git-ignored ones included:
    what `git status` does not show (an ignored `spark-warehouse/`, an empty directory)."""
    return {
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.relative_to(root).parts[0] != ".git"
    }


def _outputs(argv: list[str]) -> tuple[str, ...]:
    """Where a README command may write in the clone: the warehouse and the logs the shipped
    config names, and its own `--out`."""
    named = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--out"]
    return ("warehouse", "logs", *named)


def _clone(root: Path) -> None:
    """`root` as a fresh clone holds it before `make demo`: the shipped config and the
    .gitignore, committed."""
    shutil.copytree(REPO / "conf", root / "conf")
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=readme", "-c", "user.email=readme@test", "commit", "-qm", "clone")


@contextlib.contextmanager
def _relative_to(spark: SparkSession, root: Path) -> Iterator[None]:
    """The suite's JVM resolves relative paths from `root`, as the JVM of a `logmetrics`
    process started there does: its local file system's working directory, for the block (the
    JVM's own working directory is the suite's, fixed when it started)."""
    jvm = spark._jvm
    local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark._jsc.hadoopConfiguration())
    before = local.getWorkingDirectory()
    local.setWorkingDirectory(jvm.org.apache.hadoop.fs.Path(root.as_uri()))
    try:
        yield
    finally:
        local.setWorkingDirectory(before)


@pytest.fixture(scope="module")
def demo(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Demo:
    root = tmp_path_factory.mktemp("stranger")
    _clone(root)
    # the suite's Spark settings (its engine: Comet in `make test-guarantees`, which runs this
    # module; few partitions), outside the clone
    suite = tmp_path_factory.mktemp("suite") / "suite.yaml"
    settings = {
        "master": "local[2]",
        "driver_memory": "2g",
        "accelerator": ACCELERATOR,
        "conf": TEST_CONF,
    }
    # The shipped config's relative paths, made absolute under the stranger's directory: the
    # commands share the suite's JVM, whose working directory is not that one.
    shipped = yaml.safe_load((root / "conf" / "local.yaml").read_text())
    inputs = {
        name: {"path": str(root / source["path"])} for name, source in shipped["inputs"].items()
    }
    output = {"warehouse": str(root / shipped["output"]["warehouse"])}
    suite.write_text(yaml.safe_dump({"inputs": inputs, "output": output, "spark": settings}))
    env = {"LOGMETRICS_CONFIG": f"conf/local.yaml{os.pathsep}{suite}"}
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(stdout), redirect_stderr(stderr):
        patch.chdir(root)
        patch.setenv("LOGMETRICS_CONFIG", env["LOGMETRICS_CONFIG"])
        status = main(["demo"])
    return Demo(root, env, status, stdout.getvalue(), stderr.getvalue())


def test_the_demo_says_each_thing_once(demo: Demo) -> None:
    """The demo's terminal: under 60 lines, each alert once (it was printed three times), the
    README's worked example among them as it stands there (the three planted culprits with
    their cost), the failing warning check once, a line per chunk plus progress lines, and a
    closing line with the run's wall time."""
    assert demo.status == 0, demo.stderr[-3000:]
    lines = (demo.stdout + demo.stderr).splitlines()
    assert len(lines) < MOST_LINES, "\n".join(lines)
    alerts = [line for line in lines if line.startswith(("ALERT ", "IMPROVEMENT "))]
    assert len(alerts) == len(set(alerts)) >= 1
    example = README.split("The demo\nprints, among others:\n\n```\n", 1)[1].split("```", 1)[0]
    start = lines.index(example.splitlines()[0])
    assert lines[start : start + 6] == example.splitlines()
    assert sum("unique_cluster_chunk_ids failed on 30 of 30 days" in line for line in lines) == 1
    assert (
        sum(line.startswith("2026-10-01..2026-10-30: 30 day(s) published") for line in lines) == 1
    )
    progress = [line for line in lines if line.startswith("  2026-10-01..2026-10-30: ")]
    assert len(progress) <= 12
    assert lines[-1].startswith("done in ") and "30 day(s) published; 7 alert(s)" in lines[-1]
    assert "report: reports/demo/index.html" in lines


def test_the_readme_commands_run_as_written(
    demo: Demo,
    spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each `logmetrics` command of the README, in its order, exits as its comment says (0
    unless `exit N:`): the Commands block, the layered config's backfill and `evaluate` on
    the demo's judged set, which says where its scores are. Nothing was written where the
    user did not ask: each command changed the clone only under the warehouse, the logs and
    its own `--out` (every file and directory compared before and after it, git-ignored and
    empty ones included), and the clone's `git status` is clean after them (views.sql beside
    the warehouse, every output in a directory .gitignore names). Fails on a command that
    cannot run as written (`evaluate --config eval.yaml`, a config file the clone lacks), a
    file left in the working tree, or a directory such as `spark-warehouse/` made beside the
    outputs. (Spark's own files are a process's: the commands here share the suite's JVM,
    whose working directory is not the clone; tests/test_cli_process.py's backfill checks
    them.)"""
    commands = _commands()
    assert [argv[1] for argv, _ in commands][-2:] == ["backfill", "evaluate"]
    assert len(commands) >= 10 and [status for _, status in commands].count(4) == 1
    monkeypatch.chdir(demo.root)
    monkeypatch.setenv("LOGMETRICS_CONFIG", demo.env["LOGMETRICS_CONFIG"])
    capsys.readouterr()
    with _relative_to(spark, demo.root):
        for argv, status in commands:
            before = _tree(demo.root)
            assert main(argv[1:]) == status, (argv, capsys.readouterr().err[-2000:])
            if argv[1:4] == ["run", "--date", "2026-10-30"] and "--force" in argv:
                out = capsys.readouterr().out  # a range of one day is that day
                lines = out.splitlines()
                assert any(line.startswith("2026-10-30: 1 day(s) published, ") for line in lines)
                assert "2026-10-30..2026-10-30" not in out, out
            outputs = _outputs(argv)
            elsewhere = {
                path
                for path in before ^ _tree(demo.root)
                if not any(path == out or path.startswith(f"{out}/") for out in outputs)
            }
            assert elsewhere == set(), (argv, elsewhere)
    said = capsys.readouterr().out
    assert (demo.root / "reports" / "october" / "index.html").is_file()
    assert (demo.root / "warehouse" / "views.sql").is_file()
    assert "scores of original, dedup per query and averaged: warehouse/evaluation_results" in said
    scores = spark.read.format("delta").load(str(demo.root / "warehouse" / "evaluation_results"))
    mean = {
        (r.run, r.metric): r.value for r in scores.where("query_id = 'ALL' AND k = 10").collect()
    }
    # As the README says of the judged set: recall@10 hardly moves, nDCG@10 falls, the
    # cluster metrics rise, by the figures it quotes; and the count of queries left out that
    # it promises is printed.
    assert abs(mean[("dedup", "recall")] - mean[("original", "recall")]) < 0.01
    for metric in ("cluster_recall", "unique_clusters"):
        assert mean[("dedup", metric)] > mean[("original", metric)] + 0.1, metric
    quoted = {
        "ndcg": r"nDCG@10 falls, and clearly \(from about ([\d.]+) to ([\d.]+)\)",
        "cluster_recall": r"top 10 \(([\d.]+) to ([\d.]+)\)",
        "unique_clusters": r"unique_clusters@10 \(([\d.]+) to ([\d.]+)\)",
    }
    for metric, pattern in quoted.items():
        found = re.search(pattern, README)
        assert found, metric
        for run, text in zip(("original", "dedup"), found.groups(), strict=True):
            digits = len(text.split(".")[1])
            assert f"{mean[(run, metric)]:.{digits}f}" == text, (metric, run)
    assert "20 queries with a relevant judgment evaluated; 0 without one left out" in said
    assert _git(demo.root, "status", "--porcelain", "--untracked-files=all") == ""


def test_the_demo_publishes_its_detector_calibration_and_its_report_shows_it(
    demo: Demo, spark: SparkSession
) -> None:
    """The first report a user opens shows the detector's calibration, not "None published":
    the demo measures its cluster table against the generator's truth, writes the row where
    `inputs.calibration` reads it (data/demo/calibration.csv), the run publishes it as
    detector_calibration for the table's version, and the report lists it. Its figures are
    the ones the README quotes; the terminal says it once."""
    path = demo.root / "data" / "demo" / "calibration.csv"
    (row,) = list(csv.DictReader(path.read_text().splitlines()))
    assert (row["cluster_table_version"], row["detector"]) == ("0", "demo-generator")
    precision, recall = float(row["pair_precision"]), float(row["pair_recall"])
    assert 0.95 < recall <= precision <= 1.0 and 1000 < int(row["sample_pairs"]) <= 2000
    quoted = re.search(r"pairs\s+each \(([\d.]+) and ([\d.]+):", README)
    assert quoted and quoted.groups() == (f"{precision:.3f}", f"{recall:.3f}")
    said = [line for line in demo.stdout.splitlines() if "inputs.calibration" in line]
    assert len(said) == 1 and f"pair recall {recall:.3f}" in said[0], said

    table = spark.read.format("delta").load(str(demo.root / "warehouse" / "detector_calibration"))
    (published,) = table.collect()
    assert (published.cluster_table_version, published.detector) == (0, "demo-generator")
    assert (published.pair_precision, published.pair_recall) == (precision, recall)
    assert published.sample_pairs == int(row["sample_pairs"])

    page = (demo.root / "reports" / "demo" / "index.html").read_text()
    section = re.search(r'<section id="calibration">(.*?)</section>', page, re.S)
    assert section and "None published" not in section.group(1)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", section.group(1))
    assert cells[:4] == ["0", "2026-10-01", "2026-10-30", "demo-generator"]
    assert f"{recall:.3g}" in cells and f"{precision:.3g}" in cells


# --- the dashboard, on the demo's warehouse ---------------------------------------------------


@pytest.fixture(scope="module")
def dashboard_schema(demo: Demo, spark: SparkSession) -> Iterator[str]:
    """The schema the bundle names (dataset_catalog, dataset_schema) played by one of the
    session's catalog, made current: the demo's tables registered in it under their names, at
    their paths, and the views `logmetrics views` creates for a catalog schema."""
    name = f"dashboard_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {name} LOCATION '{demo.root / 'dashboard_db'}'")
    for table in OUTPUT_TABLES:
        location = table_location(str(demo.root / "warehouse"), table)
        if (Path(location) / "_delta_log").is_dir():  # a table nothing wrote: none
            spark.sql(f"CREATE TABLE {name}.{table.name} USING DELTA LOCATION '{location}'")
    created, left_out = create_views(spark, OutputConfig(schema=name))
    assert len(created) == 7 and left_out == []
    current = spark.catalog.currentDatabase()
    spark.catalog.setCurrentDatabase(name)
    yield name
    spark.catalog.setCurrentDatabase(current)
    spark.sql(f"DROP DATABASE {name} CASCADE")  # external tables: the demo's files stay


@pytest.fixture(scope="module")
def dashboard_rows(spark: SparkSession, dashboard_schema: str) -> dict[str, Any]:
    """Each dataset's rows, as Spark SQL returns them for its SQL as the dashboard holds it."""
    return {name: spark.sql(sql).toPandas() for name, sql in lvdash.datasets(lvdash.load()).items()}


def test_every_dashboard_dataset_returns_rows_on_the_demo_warehouse(
    dashboard_rows: dict[str, Any],
) -> None:
    assert sorted(dashboard_rows) == [
        "alert_culprits", "cost", "k_sweep", "ledger", "quality", "trend_band", "trend_share",
    ]  # fmt: skip
    empty = [name for name, rows in dashboard_rows.items() if rows.empty]
    assert empty == []


def test_every_widget_reads_a_dataset_it_defines_and_columns_that_dataset_returns(
    spark: SparkSession, dashboard_rows: dict[str, Any]
) -> None:
    """The check by name (lvdash.problems), and each widget query run by Spark as a warehouse
    would run it: the widget's fields over its dataset's rows, grouped when it aggregates."""
    dashboard = lvdash.load()
    columns = {name: list(rows.columns) for name, rows in dashboard_rows.items()}
    assert lvdash.problems(dashboard, columns) == []
    sql = lvdash.datasets(dashboard)
    queries = [q["query"] for _, w in lvdash.widgets(dashboard) for q in w["queries"]]
    assert len(queries) == 16
    for query in queries:
        assert spark.sql(lvdash.widget_sql(query, sql[query["datasetName"]])).take(1), query


def test_a_widget_reading_a_missing_column_or_dataset_fails_the_check(
    spark: SparkSession, dashboard_rows: dict[str, Any]
) -> None:
    """The band chart's median renamed `median_p50` in its field and its encoding: the check
    names it, and Spark cannot run the widget's query; a widget of a dataset that is not
    defined, and an encoding of a field its query lacks, are named too."""
    from pyspark.errors import AnalysisException

    columns = {name: list(rows.columns) for name, rows in dashboard_rows.items()}
    dashboard = copy.deepcopy(lvdash.load())
    band = _widget(dashboard, "trend_band_chart")
    (median,) = [f for f in band["queries"][0]["query"]["fields"] if f["name"] == "median"]
    median["expression"] = "`median_p50`"
    assert lvdash.problems(dashboard, columns) == [
        "trend/trend_band_chart: field median reads median_p50, not a column of trend_band "
        "(metric_date, k, segment_label, queries, p10, median, p90)"
    ]
    sql = lvdash.datasets(dashboard)["trend_band"]
    with pytest.raises(AnalysisException, match="median_p50"):
        spark.sql(lvdash.widget_sql(band["queries"][0]["query"], sql)).collect()

    dashboard = copy.deepcopy(lvdash.load())
    _widget(dashboard, "cost_chart")["queries"][0]["query"]["datasetName"] = "costs"
    _widget(dashboard, "trend_share_chart")["spec"]["encodings"]["color"]["fieldName"] = "kk"
    assert lvdash.problems(dashboard, columns) == [
        "trend/trend_share_chart: encodes kk, which its query does not define",
        "cost/cost_chart: dataset costs is not defined",
    ]


def _widget(dashboard: dict[str, Any], name: str) -> dict[str, Any]:
    (widget,) = [w for _, w in lvdash.widgets(dashboard) if w["name"] == name]
    return widget


def test_the_dashboard_shows_the_readme_s_alert_with_its_culprits(
    dashboard_rows: dict[str, Any],
) -> None:
    """The Alerts page's rows for the README's featured alert (surface=app, k=10, the mean)
    are the culprit lines the README shows: the same keys, in order, with the same slots."""
    example = README.split("The demo\nprints, among others:\n\n```\n", 1)[1].split("```", 1)[0]
    printed = re.findall(r"#(\d) (cluster \S+): (\d+) redundant slots", example)
    rows = dashboard_rows["alert_culprits"]
    alert = rows[
        (rows["segment_label"] == "surface=app") & (rows["k"] == 10) & (rows["statistic"] == "mean")
    ].sort_values("rank")
    shown = [(str(r.rank), r.culprit, str(r.redundant_slots)) for r in alert.itertuples()]
    assert shown == printed and len(printed) == 5
    assert set(alert["delta"].round(3)) == {-0.501}


def test_the_dashboard_shows_the_demo_s_data_quality_as_the_run_said_it(
    dashboard_rows: dict[str, Any],
) -> None:
    """The demo's closing warning, `unique_cluster_chunk_ids failed on 30 of 30 days`: the
    Data quality page's only non-passing outcomes are that check's 30 warnings and the first
    day's volume, which has no day before it to judge by; the ledger's last word on each of
    the 30 days: published."""
    quality = dashboard_rows["quality"]
    failing = quality[quality["outcome"] != "passed"]
    assert sorted(set(zip(failing["check"], failing["outcome"], strict=True))) == [
        ("unique_cluster_chunk_ids", "warned"),
        ("volume", "not judged"),
    ]
    assert (failing["check"] == "unique_cluster_chunk_ids").sum() == 30
    assert len(quality) == 30 * 10
    ledger = dashboard_rows["ledger"]
    assert len(ledger) == 30 and set(ledger["status"]) == {"published"}
