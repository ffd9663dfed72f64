"""`python -m benchmarks.object_storage` (also part of `make bench`): the nightly of
`benchmarks.big_clusters` with everything on S3, against the same nightly on local files.

A real S3 server (SeaweedFS on loopback, `benchmarks.s3_server`) holds the logs, the 20M-chunk
cluster table (`big_clusters.BIG`) and the warehouse. Each side's first night (day 1) builds and
keeps the cluster keys, once (`<warehouse>/_cluster_keys`, on S3 for the S3 side); then, in
each of `--rounds` rounds, alternately, each side's nightly of day 2 into a fresh copy of its
first night's warehouse (kept keys included), each a process of its own with only the paths
(and, for S3, the endpoint) configured. Then `--rounds` skips of day 2 on S3, already done.

Reported: the medians and the round ratios S3 / local of the nightly's wall time, its keys'
phases (the targets: a ratio within 1.2, the second night's keys under 10 s), the skip's wall
time (under 5 s), and both sides' published daily rows, equal or not.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import shutil
import socket
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pyarrow import fs as pafs

from benchmarks import machine, report, s3_server
from benchmarks.big_clusters import BIG, KEY_PHASES, run_config, stage_args
from benchmarks.datasets import REPO, Dataset, ensure_big_clusters, repo_relative
from benchmarks.fixed_cost import _phases
from benchmarks.measure import run_measured
from logmetrics import storage

log = logging.getLogger("benchmarks")

BUCKET = "logmetrics-bench"
SIDES = ("local", "s3")
TARGET_RATIO, TARGET_KEYS_S, TARGET_SKIP_S = 1.2, 10.0, 5.0
README_MARKERS = ("<!-- bench:object-storage:start -->", "<!-- bench:object-storage:end -->")
LOGMETRICS = str(REPO / ".venv" / "bin" / "logmetrics")


def _config(side: str, dataset: Dataset, run_dir: Path, warehouse: str, server: Any) -> Path:
    """big_clusters' config (the defaults but the paths); on S3 its paths and endpoint."""
    config = run_config(dataset.served_logs, dataset.clusters, run_dir)
    config["output"] = {"warehouse": warehouse}
    if side == "s3":
        config["inputs"]["served_logs"]["path"] = f"s3a://{BUCKET}/logs"
        config["inputs"]["clusters"]["path"] = f"s3a://{BUCKET}/clusters"
        config["spark"]["conf"] = server.spark_conf
    path = run_dir / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _s3_copy(fs: pafs.FileSystem, source: str, target: str) -> None:
    fs.delete_dir_contents(target, missing_dir_ok=True)
    pafs.copy_files(source, target, source_filesystem=fs, destination_filesystem=fs)


def _run(command: list[str], log_file: Path, server: Any = None) -> dict[str, Any]:
    """One run, timed; on the S3 side what the server did meanwhile (CPU, requests)."""
    before = server.usage() if server is not None else {}
    began = time.time()
    measured = run_measured(command, log=log_file, cwd=REPO, timeout_s=1800)
    phases = _phases(measured.log, began, measured.wall_s)
    after = server.usage() if server is not None else {}
    return {
        "server": {k: round(after[k] - before.get(k, 0.0), 2) for k in after},
        "ok": measured.ok,
        "exit_code": measured.exit_code,
        "wall_s": measured.wall_s,
        "peak_tree_pss_gib": round(measured.peak_tree_pss / report.GIB, 3),
        "keys_s": round(sum(phases.get(p, 0.0) for p in KEY_PHASES), 3),
        "phases_s": phases,
        "log": repo_relative(measured.log),
    }


def time_rounds(dataset: Dataset, out_dir: Path, server: Any, rounds: int) -> dict[str, Any]:
    """The first nights, then the nightly of day 2 alternately on each side, then the skips."""
    fs = server.filesystem()
    s3_root = f"{BUCKET}"
    day1, day2 = BIG.start.isoformat(), (BIG.start + dt.timedelta(days=1)).isoformat()
    warehouses = {"local": str(out_dir / "local" / "warehouse"), "s3": f"s3a://{BUCKET}/warehouse"}
    firsts = {"local": out_dir / "local-first", "s3": f"{s3_root}/first-night"}
    first_runs = {}
    for side in SIDES:
        run_dir = out_dir / f"{side}-first-run"
        if side == "local":
            shutil.rmtree(out_dir / "local", ignore_errors=True)
        else:
            fs.delete_dir_contents(f"{s3_root}/warehouse", missing_dir_ok=True)
        config = _config(side, dataset, run_dir, warehouses[side], server)
        command = [LOGMETRICS, "--log-format", "json", "run", "--config", str(config)]
        first_runs[side] = _run([*command, "--date", day1], run_dir / "run.log")
        if not first_runs[side]["ok"]:
            raise RuntimeError(f"the {side} first night failed: {first_runs[side]['log']}")
        if side == "local":
            shutil.rmtree(firsts["local"], ignore_errors=True)
            shutil.copytree(out_dir / "local" / "warehouse", firsts["local"])
        else:
            _s3_copy(fs, f"{s3_root}/warehouse", str(firsts["s3"]))
        log.info("%s first night: %.1f s", side, first_runs[side]["wall_s"])
    nights = []
    for round_ in range(rounds):
        for side in SIDES if round_ % 2 == 0 else tuple(reversed(SIDES)):
            run_dir = out_dir / f"{side}-night"
            if side == "local":
                shutil.rmtree(out_dir / "local" / "warehouse", ignore_errors=True)
                shutil.copytree(firsts["local"], out_dir / "local" / "warehouse")
            else:
                _s3_copy(fs, str(firsts["s3"]), f"{s3_root}/warehouse")
            config = _config(side, dataset, run_dir, warehouses[side], server)
            command = [LOGMETRICS, "--log-format", "json", "run", "--config", str(config)]
            measured = _run(
                [*command, "--date", day2],
                run_dir / f"run-{round_}.log",
                server if side == "s3" else None,
            )
            night = {"round": round_, "side": side, **measured}
            nights.append(night)
            log.info(
                "round %d/%d %s nightly: %s %.1f s, keys %.1f s",
                round_ + 1,
                rounds,
                side,
                "ok" if night["ok"] else f"FAILED ({night['log']})",
                night["wall_s"],
                night["keys_s"],
            )
    skips = []
    config = _config("s3", dataset, out_dir / "s3-skip", warehouses["s3"], server)
    for round_ in range(rounds):
        command = [LOGMETRICS, "--log-format", "json", "run", "--config", str(config)]
        skip = _run([*command, "--date", day2], out_dir / "s3-skip" / f"run-{round_}.log")
        said = (REPO / skip["log"]).read_text(errors="replace")
        skip["skipped"] = "already done from the same inputs and config" in said
        skip["spark_started"] = "starting local Spark" in said
        skips.append(skip)
        log.info("skip on S3: %.1f s", skip["wall_s"])
    return {"first_nights": first_runs, "nights": nights, "skips": skips, "warehouses": warehouses}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_outputs(warehouses: dict[str, str], server: Any) -> dict[str, Any]:
    """Both sides' published rows of every day table, read with delta-rs: equal or not."""
    from deltalake import DeltaTable

    options = {
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": s3_server.REGION,
        "AWS_ACCESS_KEY_ID": server.access_key,
        "AWS_SECRET_ACCESS_KEY": server.secret_key,
    }
    volatile = {"run_id", "computed_at", "checked_at", "quarantined_at", "details"}
    out: dict[str, Any] = {}
    for table in ("unique_clusters_by_query", "unique_clusters_daily", "unique_clusters_crowding"):
        rows = {}
        for side, warehouse in warehouses.items():
            delta = DeltaTable(
                f"{warehouse}/{table}", storage_options=options if side == "s3" else None
            )
            data = delta.to_pyarrow_table()
            keep = [c for c in data.column_names if c not in volatile]
            rows[side] = sorted(map(repr, data.select(keep).to_pylist()))
        out[table] = {"ok": rows["local"] == rows["s3"], "rows": len(rows["local"])}
    return out


def summarize(timed: dict[str, Any]) -> dict[str, Any]:
    nights = timed["nights"]
    by_side = {side: [n for n in nights if n["side"] == side] for side in SIDES}
    ratios = [
        s3["wall_s"] / local["wall_s"]
        for local, s3 in zip(by_side["local"], by_side["s3"], strict=True)
    ]
    skips = timed["skips"]

    def median(side: str, key: str) -> float:
        return round(statistics.median(n[key] for n in by_side[side]), 1)

    summary = {
        "ok": all(n["ok"] for n in nights) and all(s["ok"] for s in skips),
        "night_wall_s": {s: median(s, "wall_s") for s in SIDES},
        "night_keys_s": {s: median(s, "keys_s") for s in SIDES},
        "ratio_s3_over_local": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "first_night_wall_s": {s: timed["first_nights"][s]["wall_s"] for s in SIDES},
        "skip_wall_s": round(statistics.median(s["wall_s"] for s in skips), 2),
        "skip_all_s": [s["wall_s"] for s in skips],
        "skip_without_spark": all(s["skipped"] and not s["spark_started"] for s in skips),
    }
    summary["targets"] = {
        "ratio": summary["ratio_s3_over_local"] <= TARGET_RATIO,
        "keys": summary["night_keys_s"]["s3"] < TARGET_KEYS_S,
        "skip": summary["skip_wall_s"] < TARGET_SKIP_S and summary["skip_without_spark"],
    }
    return summary


def markdown(results: dict[str, Any]) -> str:
    s = results["summary"]
    phases = ("cluster keys", "served chunks", "main pass", "all writes, wall", "start-up")
    median = {
        side: {
            p: statistics.median(
                n["phases_s"].get(p, 0.0) for n in results["nights"] if n["side"] == side
            )
            for p in phases
        }
        for side in SIDES
    }
    lines = [
        f"Measured {results['generated_at']} on {results['machine_line']}, against "
        f"{results['server']} on loopback. A nightly day (40,000 requests) against the "
        "20M-chunk cluster table with its kept keys, each side's run a process; medians of "
        f"{results['parameters']['rounds']} alternating rounds.",
        "",
        "| | local files | S3 | S3 / local (target) |",
        "|---|---:|---:|---:|",
        f"| nightly, wall | {s['night_wall_s']['local']:.1f} s | {s['night_wall_s']['s3']:.1f} s "
        f"| {s['ratio_s3_over_local']:.2f} (<= {TARGET_RATIO}) |",
        f"| its keys (kept, read back) | {s['night_keys_s']['local']:.1f} s "
        f"| {s['night_keys_s']['s3']:.1f} s | (< {TARGET_KEYS_S:.0f} s on S3) |",
    ]
    for p in phases:
        lines.append(f"| {p} | {median['local'][p]:.1f} s | {median['s3'][p]:.1f} s | |")
    lines += [
        f"| first night (keys built and kept) | {s['first_night_wall_s']['local']:.1f} s "
        f"| {s['first_night_wall_s']['s3']:.1f} s | |",
        "",
        f"Round ratios S3 / local: {', '.join(f'{r:.2f}' for r in s['ratios'])}. A skip of the "
        f"day, already done, on S3: {s['skip_wall_s']:.2f} s (median of "
        f"{', '.join(f'{x:.2f}' for x in s['skip_all_s'])}; target under {TARGET_SKIP_S:.0f} s), "
        + ("no JVM started." if s["skip_without_spark"] else "**Spark was started**."),
    ]
    served = [n["server"] for n in results["nights"] if n["side"] == "s3" and n.get("server")]
    if served:
        requests = {
            k.removeprefix("requests "): statistics.median(s.get(k, 0.0) for s in served)
            for k in sorted({k for s in served for k in s if k.startswith("requests ")})
        }
        lines += [
            "",
            f"The S3 server during a nightly: {statistics.median(s['cpu_s'] for s in served):.1f} "
            "CPU seconds, requests "
            + ", ".join(f"{k} {v:.0f}" for k, v in requests.items() if v)
            + ".",
        ]
    checks = results["checks"]
    lines += [
        "",
        "Published rows, S3 against local files: "
        + ", ".join(f"{t}: {'equal' if c['ok'] else 'DIFFERENT'}" for t, c in checks.items())
        + ".",
    ]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> dict[str, Any]:
    out_dir = args.out_dir / "object-storage"
    out_dir.mkdir(parents=True, exist_ok=True)
    dataset = ensure_big_clusters(BIG, args.data_dir)
    shutil.rmtree(out_dir / "s3-server", ignore_errors=True)
    with s3_server.running(out_dir / "s3-server", metrics_port=_free_port()) as server:
        server.bucket(BUCKET)
        storage.configure(server.spark_conf)
        for name, local in (("logs", dataset.served_logs), ("clusters", dataset.clusters)):
            began = time.monotonic()
            s3_server.upload(local, f"s3a://{BUCKET}/{name}")
            log.info("uploaded %s in %.1f s", name, time.monotonic() - began)
        timed = time_rounds(dataset, out_dir, server, args.rounds)
        checks = check_outputs(timed["warehouses"], server)
    return {
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine_line": machine.summary_line(machine.describe(REPO)),
        "commit": machine.git_commit(REPO),
        "server": "SeaweedFS 4.53 (deploy/s3/seaweedfs.sh)",
        "parameters": {"rounds": args.rounds, "dataset": BIG.marker()},
        "summary": summarize(timed),
        "checks": checks,
        **timed,
    }


def record(results: dict[str, Any], results_file: Path, readme: Path) -> str:
    return report.record_section(
        results, "object_storage", markdown(results), results_file, readme, README_MARKERS
    )


def ok(results: dict[str, Any]) -> bool:
    return bool(results["summary"]["ok"] and all(c["ok"] for c in results["checks"].values()))


def main(argv: Sequence[str] | None = None) -> int:
    args = stage_args(argv, "object_storage", __doc__)
    results = run(args)
    print(record(results, args.results, args.readme))
    return 0 if ok(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
