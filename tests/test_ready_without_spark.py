"""`logmetrics ready` judged from the files, as an Airflow worker's sensor asks it: without a JVM
and without PySpark, for every shape of Parquet and JSON-lines logs (one file or many), with the
user's own column names; a misspelt name, a line that does not parse, and a command that does
need Spark on a worker without PySpark each say one line.

All cases run in one process with PySpark made unimportable (the worker installed without the
`local` extra), then once more as a normal install while the test watches the process for a
`java` child. The expected answers are known by hand: day one has rows, day two has none."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

DAY, EMPTY = dt.date(2026, 11, 2), dt.date(2026, 11, 4)
NAMES = {
    "nested": {"request_id": "qid", "served_at": "ts", "results": "hits", "chunk_id": "doc"},
    "ids": {"request_id": "qid", "served_at": "ts", "results": "hit_ids"},
    "exploded": {"request_id": "qid", "served_at": "ts", "rank": "pos", "chunk_id": "doc"},
}
# Three requests a day on DAY and the day before, one of them at 23:30 -02:00 on the day before
# (01:30 UTC on DAY); an empty list; in the exploded shape a request is a row per result.
REQUESTS = [
    ("q1", "2026-11-02T09:14:03.120Z", ["a", "b", "a"]),
    ("q2", "2026-11-01T23:30:00-02:00", ["c"]),
    ("q3", "2026-11-02 18:00:00", []),
    ("q0", "2026-11-01T08:00:00Z", ["d", "e"]),
]


def _rows(shape: str) -> list[dict[str, Any]]:
    names = NAMES[shape]
    rows: list[dict[str, Any]] = []
    for request_id, served_at, chunks in REQUESTS:
        head = {names["request_id"]: request_id, names["served_at"]: served_at}
        if shape == "nested":
            hits = [{"doc": c, "pos": i} for i, c in enumerate(chunks, start=1)]
            rows.append({**head, "hits": hits})
        elif shape == "ids":
            rows.append({**head, "hit_ids": chunks, "user_query": "private text"})
        else:
            rows += [{**head, "pos": i, "doc": c} for i, c in enumerate(chunks or [None], start=1)]
    return rows


def _partition(served_at: str) -> str:
    """The partition a shipper would file a row in: the day of its own clock."""
    return served_at[:10]


def _write(root: Path, shape: str, fmt: str, layout: str) -> None:
    """The logs as `fmt` files: `dated` in date=YYYY-MM-DD directories, or `one` file."""
    rows = _rows(shape)
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        where = f"date={_partition(row['ts'])}" if layout == "dated" else "."
        groups.setdefault(where, []).append(row)
    for where, group in groups.items():
        folder = root / where
        folder.mkdir(parents=True, exist_ok=True)
        if fmt == "json":
            lines = "".join(json.dumps(r) + "\n" for r in group)
            (folder / "part-0.jsonl").write_text(lines)
        else:  # served_at as a timestamp, as Parquet logs store it
            table = pa.Table.from_pylist([{**r, "ts": _moment(r["ts"])} for r in group])
            pq.write_table(table, folder / "part-0.parquet")


def _moment(text: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(text)
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)


CASES = [
    ("parquet", "nested", "dated"),
    ("parquet", "ids", "dated"),
    ("parquet", "exploded", "dated"),
    ("json", "nested", "dated"),
    ("json", "ids", "one"),
    ("json", "exploded", "dated"),
    ("parquet", "spans", "dated"),  # MLflow's spans: the start's INT64 nanoseconds
    ("otlp", "spans", "one"),  # OpenInference's spans as an OpenTelemetry Collector exports them
]
# Three requests a trace each: MLflow's of five spans (agent, tool, retriever, reranker, LLM),
# OpenInference's of four (chain, retriever, reranker, LLM).
SPANS_ON_DAY = {"parquet": 3 * 5, "otlp": 3 * 4}


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ready")
    pq.write_table(pa.table({"chunk_id": ["a"], "cluster_id": ["g"]}), root / "clusters.parquet")
    found = {}
    for fmt, shape, layout in CASES:
        logs = root / f"{fmt}-{shape}"
        name = f"{fmt}-{shape}"
        if shape == "spans":
            _write_spans(logs, fmt)
            found[name] = _config(root, name, logs, fmt, shape, {})
            continue
        _write(logs, shape, fmt, layout)
        found[name] = _config(root, name, logs, fmt, shape, NAMES[shape])
    broken = root / "json-broken"
    _write(broken, "ids", "json", "dated")
    with open(broken / f"date={DAY}" / "part-0.jsonl", "a") as out:
        out.write('{"qid": "q9", "ts": \n')
    found["json-broken"] = _config(root, "json-broken", broken, "json", "ids", NAMES["ids"])
    typo = {**NAMES["ids"], "served_at": "tss"}
    found["json-typo"] = _config(root, "json-typo", root / "json-ids", "json", "ids", typo)
    return found


def _write_spans(root: Path, fmt: str) -> None:
    """Three requests on DAY as traces the real SDKs make: MLflow's as a Parquet spans table in
    date partitions, OpenInference's as one OTLP/JSON file."""
    import traces_sdk

    requests = traces_sdk.sample_requests(3, dt.datetime.combine(DAY, dt.time(9), dt.UTC))
    if fmt == "otlp":
        root.mkdir(parents=True)
        lines = traces_sdk.openinference_traces(requests).otlp_lines()
        (root / "traces.jsonl").write_text("\n".join(lines) + "\n")
        return
    (root / f"date={DAY}").mkdir(parents=True)
    rows = traces_sdk.mlflow_traces(requests).rows()
    pq.write_table(traces_sdk.spans_table(rows), root / f"date={DAY}" / "part-0.parquet")


def _config(
    root: Path, name: str, logs: Path, fmt: str, shape: str, columns: dict[str, str]
) -> Path:
    config = {
        "inputs": {
            "served_logs": {"path": str(logs), "format": fmt, "shape": shape, "columns": columns},
            "clusters": {"path": str(root / "clusters.parquet"), "format": "parquet"},
        },
        "output": {"warehouse": str(root / f"warehouse-{name}")},
        "spark": {"log_dir": str(root / "logs")},
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# Runs `logmetrics` once per argument list in one process, each command's exit status and its
# output captured; with BLOCK, PySpark and Py4J cannot be imported (a worker without them).
SCRIPT = textwrap.dedent(
    """
    import contextlib, io, json, sys

    class NoSpark:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pyspark", "py4j", "delta"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    if sys.argv[1] == "block":
        sys.meta_path.insert(0, NoSpark())
    from logmetrics.cli import main

    answers = []
    for argv in json.loads(sys.argv[2]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
        answers.append([status, out.getvalue(), err.getvalue()])
    answers.append("pyspark" in sys.modules)
    print(json.dumps(answers))
    """
)


def _commands(configs: dict[str, Path]) -> list[list[str]]:
    commands = []
    for name in [f"{fmt}-{shape}" for fmt, shape, _ in CASES]:
        for day in (DAY, EMPTY):
            commands.append(["ready", "--config", str(configs[name]), "--date", str(day)])
    for name in ("json-broken", "json-typo"):
        commands.append(["ready", "--config", str(configs[name]), "--date", str(DAY)])
    quarantine = ["--set", "inputs.served_logs.on_corrupt=quarantine"]
    commands.append(["ready", "--config", str(configs["json-broken"]), "--date", str(DAY)])
    commands[-1] += quarantine
    commands.append(["run", "--config", str(configs["json-typo"]), "--date", str(DAY)])
    commands.append(["run", "--config", str(configs["parquet-nested"]), "--date", str(DAY)])
    return commands


def _run(configs: dict[str, Path], mode: str) -> tuple[list[Any], bool, set[str]]:
    """The answers of every command, whether PySpark was imported, and the names of the
    process's children seen while it ran (polled every 20 ms)."""
    commands = _commands(configs)
    if mode == "normal":
        commands = commands[:-2]  # the runs would start Spark here: that is not this check
    process = psutil.Popen(
        [sys.executable, "-c", SCRIPT, mode, json.dumps(commands)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    children: set[str] = set()
    while process.poll() is None:
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                children.add(child.name())
        time.sleep(0.02)
    out, err = process.communicate()
    assert process.returncode == 0, err
    *answers, imported = json.loads(out)
    return answers, imported, children


def _check(answers: list[Any]) -> None:
    by_case = iter(answers)
    for fmt, shape, _ in CASES:
        status, out, err = next(by_case)
        assert (status, err) == (0, ""), (fmt, shape)
        assert out.startswith(f"{DAY}: ready (no ready marker configured"), (fmt, shape, out)
        rows = 5 if shape == "exploded" else 3  # q1's three results, q2's one, q3's null row
        if shape == "spans":
            rows = SPANS_ON_DAY[fmt]  # every span starting on the day, of any kind
        counted = "rows in them by their footers" if fmt == "parquet" else "rows of it in them"
        if fmt != "parquet" or shape == "spans":  # the rows of the day, whatever file holds them
            assert f"{rows} {counted}" in out, (fmt, shape, out)
        status, out, err = next(by_case)
        assert status == 5 and out == "", (fmt, shape)
        assert err == (
            f"logmetrics: error: input not ready: {EMPTY}: no log file holds a row of it; no "
            "ready marker is configured, so its files were judged\n"
        ), (fmt, shape)
    status, out, err = next(by_case)  # a line that does not parse, under on_corrupt: fail
    assert status == 1 and out == "" and err.count("\n") == 1
    assert "a line of " in err and "cannot be read (not JSON" in err
    assert err.rstrip().endswith("(inputs.served_logs.on_corrupt: quarantine computes the rest)")
    status, out, err = next(by_case)  # a misspelt served_at: said from the first lines
    assert (status, out) == (1, "")
    assert err == (
        "logmetrics: error: columns.served_at: no column 'tss' in the served logs; did you "
        "mean 'ts'?\n"
    )
    status, out, err = next(by_case)  # the same line under quarantine: named, left out
    assert (status, err) == (0, "")
    assert "3 rows of it in them; 1 input(s) that may hold rows of it cannot be read" in out


def test_ready_answers_from_the_files_without_pyspark(configs: dict[str, Path]) -> None:
    """PySpark cannot be imported: every `ready` answers as the files say, `run` says a misspelt
    column of JSON lines before it needs Spark, and otherwise (it needs Spark) says in one line
    what to install."""
    answers, imported, _ = _run(configs, "block")
    *ready, typo, (status, out, err) = answers
    _check(ready)
    assert not imported
    assert typo == [1, "", ready[-2][2]]  # `run` says the misspelt column before any Spark
    assert (status, out) == (1, "") and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("logmetrics: error: this command needs Spark, and pyspark is not ")
    assert "pip install 'logmetrics[local]'" in err


def test_ready_starts_no_jvm(configs: dict[str, Path]) -> None:
    """A normal install (PySpark there): the same answers, and no `java` process is started."""
    answers, _, children = _run(configs, "normal")
    _check(answers)
    assert not any("java" in name for name in children), children
