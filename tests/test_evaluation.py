"""Judged evaluation (`logmetrics evaluate`): recall@k and nDCG@k against ir_measures
(pytrec_eval, i.e. trec_eval's code), cluster metrics and the paired test against values worked
out by hand, the Delta table's replace-by-run behaviour, and the command end to end."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any

import ir_measures
import numpy as np
import pandas as pd
import pytest
from ir_measures import Qrel, R, ScoredDoc, nDCG
from pyspark.sql import DataFrame, SparkSession

from logmetrics.cli import main
from logmetrics.config import load_config
from logmetrics.flows.evaluation import evaluation_summary, run_evaluation
from logmetrics.rules.cluster_keys import cluster_keys
from logmetrics.rules.evaluation import (
    compare_runs,
    evaluation_results,
    ks_df,
    paired_randomisation_test,
    per_query_metrics,
    run_counts,
    with_judgments,
    with_list_positions,
)
from logmetrics.schemas import ALL_QUERIES
from logmetrics.tables.catalog import EVALUATION_RESULTS_TABLE, read_table

RUN_SCHEMA = (
    "run string, query_id string, rank long, chunk_id string, input_file string, input_row long"
)
JUDGMENT_SCHEMA = "query_id string, chunk_id string, grade int"
CLUSTER_SCHEMA = "chunk_id string, cluster_id string"

Key = tuple[str, str, int, str]


def _runs_df(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    """(run, query_id, rank, chunk_id) in input order: input_row is the row's index."""
    return spark.createDataFrame([(*row, "f", i) for i, row in enumerate(rows)], RUN_SCHEMA)


def _judgments_df(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame(rows, JUDGMENT_SCHEMA)


def _keys_df(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    return cluster_keys(spark.createDataFrame(rows, CLUSTER_SCHEMA))


def _metrics(
    spark: SparkSession,
    runs: list[tuple[Any, ...]],
    judgments: list[tuple[Any, ...]],
    clusters: list[tuple[Any, ...]],
    ks: tuple[int, ...],
    names: tuple[str, ...] = ("A",),
    level: int = 1,
    gain: str = "exponential",
) -> dict[Key, float]:
    df = per_query_metrics(
        _runs_df(spark, runs),
        _judgments_df(spark, judgments),
        _keys_df(spark, clusters),
        list(names),
        ks,
        level,
        gain,  # type: ignore[arg-type]
    )
    return {(r.run, r.query_id, r.k, r.metric): r.value for r in df.collect()}


# --- the seed's worked example -------------------------------------------------------------

SEED_QUERY = "invoice dispute window"
# Eight relevant documents graded 3,3,3,3,2,2,2,1 in rank order; the first four are one
# paragraph (Zendesk article, Confluence paste, PDF export, MediaWiki copy), and the two
# unjudged results at ranks 9 and 10 are copies too: five distinct pieces of evidence.
SEED_RUN = [
    ("A", SEED_QUERY, rank, chunk)
    for rank, chunk in enumerate(
        [
            "zendesk",
            "confluence",
            "pdf",
            "mediawiki",
            "handbook",
            "faq",
            "policy",
            "email",
            "handbook-copy",
            "email-copy",
        ],
        start=1,
    )
]
SEED_JUDGMENTS = [
    (SEED_QUERY, chunk, grade)
    for chunk, grade in [
        ("zendesk", 3),
        ("confluence", 3),
        ("pdf", 3),
        ("mediawiki", 3),
        ("handbook", 2),
        ("faq", 2),
        ("policy", 2),
        ("email", 1),
    ]
]
SEED_CLUSTERS = [
    ("zendesk", "para-1"),
    ("confluence", "para-1"),
    ("pdf", "para-1"),
    ("mediawiki", "para-1"),
    ("handbook", "hb"),
    ("handbook-copy", "hb"),
    ("faq", None),  # in the table with a null cluster id: a singleton
    ("email", "mail"),
    ("email-copy", "mail"),
    # "policy" is absent from the cluster table: a singleton too
]


def test_seed_worked_example(spark: SparkSession) -> None:
    ks = ks_df(spark, [10])
    counts = (
        _runs_df(spark, SEED_RUN)
        .transform(with_list_positions)
        .transform(
            with_judgments, _judgments_df(spark, SEED_JUDGMENTS), _keys_df(spark, SEED_CLUSTERS), 1
        )
        .transform(run_counts, ks, 1, "exponential")
        .collect()
    )
    assert len(counts) == 1
    # The seed's 21.475 is the exact 21.47589 cut to three decimals (rounding gives 21.476).
    assert counts[0]["dcg"] == pytest.approx(21.475889041327374, abs=1e-9)
    assert 21.475 <= counts[0]["dcg"] < 21.476

    got = _metrics(spark, SEED_RUN, SEED_JUDGMENTS, SEED_CLUSTERS, (10,))
    assert got[("A", SEED_QUERY, 10, "ndcg")] == pytest.approx(1.0, abs=1e-12)
    assert got[("A", SEED_QUERY, 10, "recall")] == 1.0
    # para-1, hb, s:faq, s:policy, mail: five distinct clusters for eight relevant documents.
    assert got[("A", SEED_QUERY, 10, "unique_clusters")] == 5.0
    assert got[("A", SEED_QUERY, 10, "cluster_recall")] == 1.0


def test_seed_dcg_by_hand() -> None:
    """The figure itself, from the seed's table: gain 2^g - 1, discount 1/log2(rank + 1)."""
    grades = [3, 3, 3, 3, 2, 2, 2, 1]
    dcg = sum((2**g - 1) / math.log2(rank + 1) for rank, g in enumerate(grades, start=1))
    assert math.floor(dcg * 1000) / 1000 == 21.475  # the seed's figure, cut to 3 decimals
    assert 7 + 7 / math.log2(3) + 7 / 2 + 7 / math.log2(5) == pytest.approx(
        dcg - 3 * (1 / math.log2(6) + 1 / math.log2(7) + 1 / 3) - 1 / math.log2(9)
    )


# --- recall@k and nDCG@k against ir_measures -------------------------------------------------

GAINS = {"exponential": {g: 2**g - 1 for g in range(0, 5)}, "linear": None}


def _reference(
    runs: list[tuple[Any, ...]],
    judgments: list[tuple[Any, ...]],
    ks: tuple[int, ...],
    gain: str,
    level: int = 1,
) -> dict[Key, float]:
    """ir_measures (pytrec_eval) on the same input. trec_eval orders by score, so each list is
    given scores that fall with our order (rank, ties by input position), and a chunk listed
    twice is given once, at its first position (our documented convention)."""
    indexed = sorted(
        enumerate(runs), key=lambda item: (item[1][0], item[1][1], item[1][2], item[0])
    )
    scored: dict[str, list[ScoredDoc]] = {}
    seen: set[tuple[str, str, str]] = set()
    for position, (_, (run, qid, _rank, chunk)) in enumerate(indexed):
        if (run, qid, chunk) in seen:
            continue
        seen.add((run, qid, chunk))
        scored.setdefault(run, []).append(ScoredDoc(qid, chunk, float(10_000 - position)))
    qrels = [Qrel(qid, chunk, grade) for qid, chunk, grade in judgments]
    gains = GAINS[gain]
    measures = {}
    for k in ks:
        measures[R(rel=level) @ k] = (k, "recall")
        ndcg = nDCG(cutoff=k) if gains is None else nDCG(cutoff=k, gains=gains)
        measures[ndcg] = (k, "ndcg")
    out: dict[Key, float] = {}
    for run, docs in scored.items():
        for metric in ir_measures.pytrec_eval.iter_calc(list(measures), qrels, docs):
            k, name = measures[metric.measure]
            out[(run, metric.query_id, k, name)] = metric.value
    return out


def _ours(got: dict[Key, float], reference: dict[Key, float]) -> dict[Key, float]:
    return {key: got[key] for key in reference}


HAND_RUNS = [
    # q1: ties at rank 2 (input order decides), an unjudged chunk, a grade-0 chunk
    ("A", "q1", 1, "d1"),
    ("A", "q1", 2, "d3"),
    ("A", "q1", 2, "d2"),
    ("A", "q1", 3, "x"),
    ("A", "q1", 4, "d0"),
    # q2: a list shorter than every k, out of order in the input, a repeated chunk
    ("A", "q2", 5, "e2"),
    ("A", "q2", 1, "e1"),
    ("A", "q2", 2, "e2"),
    # q3: has only non-relevant judgments: left out
    ("A", "q3", 1, "z1"),
    ("B", "q1", 1, "x"),
    ("B", "q1", 2, "d2"),
    ("B", "q2", 1, "e3"),
]
HAND_JUDGMENTS = [
    ("q1", "d1", 1),
    ("q1", "d2", 3),
    ("q1", "d3", 2),
    ("q1", "d0", 0),
    ("q1", "d4", 2),  # relevant, never retrieved: the ideal ordering counts it
    ("q2", "e1", 2),
    ("q2", "e2", 1),
    ("q2", "e3", 1),
    ("q3", "z1", 0),
]


@pytest.mark.parametrize("gain", ["exponential", "linear"])
def test_recall_and_ndcg_match_ir_measures(spark: SparkSession, gain: str) -> None:
    ks = (1, 2, 3, 10)
    got = _metrics(spark, HAND_RUNS, HAND_JUDGMENTS, [], ks, names=("A", "B"), gain=gain)
    reference = _reference(HAND_RUNS, HAND_JUDGMENTS, ks, gain)
    reference = {key: v for key, v in reference.items() if key[1] != "q3"}
    assert len(reference) == 2 * 2 * len(ks) * 2  # runs x queries x ks x metrics
    assert _ours(got, reference) == pytest.approx(reference, abs=1e-9, rel=0)
    # q3 has no relevant judgment: no row for it, in any run or metric.
    assert not [key for key in got if key[1] == "q3"]


def test_hand_values_with_ties_repeats_and_short_lists(spark: SparkSession) -> None:
    """The same input, worked out by hand (linear gain), so the reference itself is checked."""
    got = _metrics(spark, HAND_RUNS, HAND_JUDGMENTS, [], (2, 10), gain="linear")
    log2 = math.log2
    # q1, order d1, d3, d2, x, d0 (d3 before d2: input order breaks the rank tie)
    ideal_q1 = 3 + 2 / log2(3) + 2 / 2 + 1 / log2(5)
    assert got[("A", "q1", 2, "ndcg")] == pytest.approx((1 + 2 / log2(3)) / (3 + 2 / log2(3)))
    assert got[("A", "q1", 10, "ndcg")] == pytest.approx((1 + 2 / log2(3) + 3 / 2) / ideal_q1)
    assert got[("A", "q1", 2, "recall")] == pytest.approx(2 / 4)
    assert got[("A", "q1", 10, "recall")] == pytest.approx(3 / 4)
    # q2, order e1, e2, e2: the repeat counts once; k = 10 takes the whole list
    ideal_q2 = 2 + 1 / log2(3) + 1 / 2
    assert got[("A", "q2", 10, "ndcg")] == pytest.approx((2 + 1 / log2(3)) / ideal_q2)
    assert got[("A", "q2", 10, "recall")] == pytest.approx(2 / 3)
    # the production metric takes the slots as they are: e1, e2, e2 hold two clusters (both
    # chunks are singletons, absent from the empty cluster table)
    assert got[("A", "q2", 10, "unique_clusters")] == 2.0


@pytest.mark.parametrize("gain", ["exponential", "linear"])
def test_random_lists_match_ir_measures(spark: SparkSession, gain: str) -> None:
    """Generated lists (fixed seed) with rank ties, repeats, unjudged chunks and short lists."""
    rng = random.Random(11)
    runs: list[tuple[Any, ...]] = []
    judgments: list[tuple[Any, ...]] = []
    for q in range(25):
        qid = f"q{q}"
        pool = [f"c{q}-{i}" for i in range(15)]
        judged = rng.sample(pool, rng.randint(1, 8))
        judgments += [(qid, chunk, rng.choice([0, 1, 1, 2, 3, 4])) for chunk in judged]
        for run in ("A", "B"):
            for _ in range(rng.randint(0, 14)):
                runs.append((run, qid, rng.randint(1, 8), rng.choice(pool)))
    rng.shuffle(runs)
    ks = (1, 3, 5, 10, 20)
    got = _metrics(spark, runs, judgments, [], ks, names=("A", "B"), gain=gain)
    reference = _reference(runs, judgments, ks, gain)
    evaluated = {qid for qid, _, grade in judgments if grade >= 1}
    reference = {key: v for key, v in reference.items() if key[1] in evaluated}
    assert len(reference) > 300
    assert _ours(got, reference) == pytest.approx(reference, abs=1e-9, rel=0)
    # A judged query a run has no list for scores 0 (ir_measures leaves it out).
    missing = {
        (run, qid)
        for run in ("A", "B")
        for qid in evaluated
        if (run, qid, 1, "ndcg") not in reference
    }
    for run, qid in missing:
        assert got[(run, qid, 10, "recall")] == 0.0
        assert got[(run, qid, 10, "ndcg")] == 0.0


def test_relevance_level(spark: SparkSession) -> None:
    """recall counts grade >= level; nDCG keeps every positive grade's gain (trec_eval)."""
    ks = (2, 5)
    got = _metrics(
        spark, HAND_RUNS, HAND_JUDGMENTS, [], ks, names=("A", "B"), level=2, gain="linear"
    )
    reference = _reference(HAND_RUNS, HAND_JUDGMENTS, ks, "linear", level=2)
    reference = {key: v for key, v in reference.items() if key[1] != "q3"}
    assert len(reference) == 2 * 2 * len(ks) * 2
    assert _ours(got, reference) == pytest.approx(reference, abs=1e-9, rel=0)
    assert got[("A", "q2", 5, "recall")] == 1.0  # e1, the only grade >= 2, is found


# --- cluster metrics by hand ------------------------------------------------------------------


def test_cluster_recall_by_hand(spark: SparkSession) -> None:
    clusters = [
        ("a", "c1"),
        ("a", "c9"),  # listed twice: the smallest cluster id wins (c1)
        ("b", None),
        ("b", "c1"),  # a null and a cluster id: c1
        ("c", None),  # only null: singleton s:c
        ("e", "c2"),
        (None, "c3"),
        # d and f are absent: singletons s:d, s:f
    ]
    judgments = [("q1", "a", 2), ("q1", "c", 1), ("q1", "d", 1), ("q1", "e", 0), ("q1", "f", 1)]
    # relevant clusters: c:c1 (a), s:c, s:d, s:f -> 4
    runs = [("A", "q1", 1, "b"), ("A", "q1", 2, "e"), ("A", "q1", 3, "d"), ("A", "q1", 4, "x")]
    got = _metrics(spark, runs, judgments, clusters, (1, 2, 4, 10))
    assert got[("A", "q1", 1, "cluster_recall")] == 1 / 4  # b is in a's cluster, unjudged itself
    assert got[("A", "q1", 2, "cluster_recall")] == 1 / 4  # e's c2 holds no relevant chunk
    assert got[("A", "q1", 4, "cluster_recall")] == 2 / 4  # + s:d
    assert got[("A", "q1", 10, "cluster_recall")] == 2 / 4
    assert got[("A", "q1", 2, "unique_clusters")] == 2.0
    assert got[("A", "q1", 4, "unique_clusters")] == 4.0
    assert got[("A", "q1", 4, "recall")] == 1 / 4  # only d is a relevant chunk in the list


def test_query_without_relevant_judgments_is_left_out_of_the_averages(spark: SparkSession) -> None:
    runs = [("A", "q1", 1, "a"), ("A", "q2", 1, "b"), ("A", "q3", 1, "c"), ("A", "q4", 1, "z")]
    judgments = [("q1", "a", 1), ("q2", "x", 1), ("q3", "c", 0)]  # q3: none relevant; q4: none
    df = per_query_metrics(
        _runs_df(spark, runs),
        _judgments_df(spark, judgments),
        _keys_df(spark, []),
        ["A"],
        (1,),
        1,
        "exponential",
    )
    rows = {(r.query_id, r.metric): (r.value, r.queries) for r in evaluation_results(df).collect()}
    assert {q for q, _ in rows} == {"q1", "q2", ALL_QUERIES}
    assert rows[(ALL_QUERIES, "recall")] == (0.5, 2)
    assert rows[(ALL_QUERIES, "unique_clusters")] == (1.0, 2)


def test_empty_run(spark: SparkSession) -> None:
    got = _metrics(spark, [], [("q1", "a", 1)], [], (5,))
    assert got == {
        ("A", "q1", 5, "recall"): 0.0,
        ("A", "q1", 5, "ndcg"): 0.0,
        ("A", "q1", 5, "unique_clusters"): 0.0,
        ("A", "q1", 5, "cluster_recall"): 0.0,
    }


# --- the paired test ----------------------------------------------------------------------


def test_paired_randomisation_exact_by_hand() -> None:
    a = np.zeros(5)
    # five positive differences: of 32 sign assignments, only all + and all - are as extreme
    assert paired_randomisation_test(a, np.ones(5)) == 2 / 32
    # differences +1, -1 and a tie: every assignment of the two non-zero ones is as extreme
    assert paired_randomisation_test(np.zeros(3), np.array([1.0, -1.0, 0.0])) == 1.0
    assert paired_randomisation_test(np.ones(4), np.ones(4)) == 1.0
    # +3, +1: sums 4, 2, -2, -4 -> |sum| >= 4 twice of four
    assert paired_randomisation_test(np.zeros(2), np.array([3.0, 1.0])) == 0.5


def test_paired_randomisation_sampled() -> None:
    a, b = np.zeros(30), np.ones(30)
    p = paired_randomisation_test(a, b, samples=2000, seed=1)
    assert p == 1 / 2001  # P(all 30 signs equal) ~ 2e-9: no draw is as extreme
    # 14 differences: 16384 assignments > 4000 samples, so drawn; against the exact p-value,
    # enumerated here
    diffs = np.random.default_rng(5).normal(loc=0.3, size=14)
    observed = abs(diffs.sum())
    exact = np.mean(
        [abs(np.dot(signs, diffs)) >= observed for signs in itertools.product((1, -1), repeat=14)]
    )
    p1 = paired_randomisation_test(np.zeros(14), diffs, samples=4000, seed=3)
    assert p1 == paired_randomisation_test(np.zeros(14), diffs, samples=4000, seed=3)
    assert 0.01 < exact < 0.9
    assert p1 == pytest.approx(exact, abs=0.03)


def test_compare_runs_by_hand() -> None:
    rows = [
        ("A", "q1", 10, "recall", 0.5),
        ("A", "q2", 10, "recall", 1.0),
        ("B", "q1", 10, "recall", 1.0),
        ("B", "q2", 10, "recall", 1.0),
        ("B", "q3", 10, "recall", 0.0),  # only B has q3: not paired
        ("A", ALL_QUERIES, 10, "recall", 0.75),
    ]
    per_query = pd.DataFrame(rows, columns=["run", "query_id", "k", "metric", "value"])
    out = compare_runs(per_query, "A", "B")
    assert out.to_dict("records") == [
        {
            "metric": "recall",
            "k": 10,
            "a": 0.75,
            "b": 1.0,
            "diff": 0.25,
            "p_value": 1.0,
            "queries": 2,
        }
    ]


# --- files, the Delta table and the command -------------------------------------------------


def _write_trec_run(path: Path, lines: list[tuple[str, str, int]]) -> Path:
    """(qid, docno, rank) lines in the given order; scores fall with rank, ties share one."""
    path.write_text(
        "".join(f"{q} Q0 {d} {r} {100 - r:.1f} tag\n" for q, d, r in lines), encoding="utf-8"
    )
    return path


def _write_qrels(path: Path, lines: list[tuple[str, str, int]]) -> Path:
    path.write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in lines), encoding="utf-8")
    return path


@pytest.fixture()
def eval_inputs(spark: SparkSession, tmp_path: Path) -> dict[str, Path]:
    # The seed's query against the original index (copies fill the window) and a deduplicated
    # one (one copy per cluster, so other relevant evidence gets in), plus a second query.
    original = [(SEED_QUERY.replace(" ", "_"), c, r) for _, _, r, c in SEED_RUN]
    dedup_chunks = ["zendesk", "handbook", "faq", "policy", "email", "fresh-1", "fresh-2"]
    deduplicated = [(SEED_QUERY.replace(" ", "_"), c, r) for r, c in enumerate(dedup_chunks, 1)]
    judgments = [(SEED_QUERY.replace(" ", "_"), c, g) for _, c, g in SEED_JUDGMENTS]
    judgments += [(SEED_QUERY.replace(" ", "_"), "fresh-1", 2), ("q2", "a", 1), ("q2", "b", 0)]
    judgments += [("q3", "none", 0)]  # a judged query with no relevant judgment
    original += [("q2", "a", 1), ("q2", "b", 2), ("q4", "a", 1)]  # q4: judged nowhere
    deduplicated += [("q2", "b", 1), ("q2", "a", 2)]
    clusters = tmp_path / "clusters"
    spark.createDataFrame(SEED_CLUSTERS, CLUSTER_SCHEMA).write.parquet(str(clusters))
    return {
        "original": _write_trec_run(tmp_path / "original.run", original),
        "dedup": _write_trec_run(tmp_path / "dedup.run", deduplicated),
        "qrels": _write_qrels(tmp_path / "judgments.qrels", judgments),
        "clusters": clusters,
        "warehouse": tmp_path / "warehouse",
    }


def _eval_config(path: Path, inputs: dict[str, Path], runs: dict[str, str] | None = None) -> Path:
    runs = runs or {"original": str(inputs["original"]), "dedup": str(inputs["dedup"])}
    lines = [
        "inputs:",
        "  served_logs: {path: unused, format: parquet}",
        f"  clusters: {{path: '{inputs['clusters']}', format: parquet}}",
        f"output: {{warehouse: '{inputs['warehouse']}'}}",
        "evaluation:",
        "  runs:",
        *[f"    {name}: {{path: '{p}', format: trec}}" for name, p in runs.items()],
        f"  judgments: {{path: '{inputs['qrels']}', format: trec}}",
        "  ks: [5, 10]",
        "  samples: 1000",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.slow
def test_evaluate_end_to_end(
    spark: SparkSession,
    eval_inputs: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _eval_config(tmp_path / "eval.yaml", eval_inputs)
    assert main(["evaluate", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "dedup vs original (paired randomisation test, two-sided):" in out
    # The count the README promises, said once: q3 (judged only as not relevant) and q4 (in
    # a run, never judged) are left out.
    assert out.splitlines()[0] == (
        "2 queries with a relevant judgment evaluated; 2 without one left out of the averages "
        "(1 judged only as not relevant, 1 not judged)"
    )
    assert out.count("left out") == 1
    lines = {line.split()[0]: line.split() for line in out.splitlines() if "@" in line}
    # unique_clusters@10: original 5 (seed query) and 2 (q2) -> 3.5; dedup 7 and 2 -> 4.5
    assert lines["unique_clusters@10"][1:4] == ["3.5000", "4.5000", "+1.0000"]
    # cluster_recall@10, seed query: 6 relevant clusters (para-1, hb, s:faq, s:policy, mail,
    # s:fresh-1); the original finds 5, the deduplicated run all 6; q2 both 1.0
    assert lines["cluster_recall@10"][1:3] == [f"{(5 / 6 + 1) / 2:.4f}", "1.0000"]

    summary = evaluation_summary(spark, load_config([config]).output)
    assert sorted(summary["run"].unique()) == ["dedup", "original"]
    assert len(summary) == 2 * 2 * 4  # runs x ks x metrics
    recall = summary.set_index(["run", "k", "metric"])["value"]
    # seed query: the original finds 8 of 9 relevant, dedup 6 of 9 (copies out, fresh-1 in);
    # q2: both find a at rank 1 or 2
    assert recall[("original", 10, "recall")] == pytest.approx((8 / 9 + 1) / 2)
    assert recall[("dedup", 10, "recall")] == pytest.approx((6 / 9 + 1) / 2)


@pytest.mark.slow
def test_evaluating_a_run_again_replaces_only_its_rows(
    spark: SparkSession, eval_inputs: dict[str, Path], tmp_path: Path
) -> None:
    config = load_config([_eval_config(tmp_path / "both.yaml", eval_inputs)])
    run_evaluation(spark, config, "run-1", pd.Timestamp("2026-01-01", tz="UTC").to_pydatetime())
    table = read_table(spark, config.output, EVALUATION_RESULTS_TABLE)
    assert table is not None
    before = {
        tuple(r)
        for r in table.select("run", "query_id", "k", "metric", "value", "run_id").collect()
    }

    # original again, on a shorter run file: only its rows change, and none of its old remain
    shorter = _write_trec_run(tmp_path / "short.run", [("q2", "b", 1)])
    again = load_config(
        [_eval_config(tmp_path / "again.yaml", eval_inputs, {"original": str(shorter)})]
    )
    run_evaluation(spark, again, "run-2", pd.Timestamp("2026-01-02", tz="UTC").to_pydatetime())
    table = read_table(spark, config.output, EVALUATION_RESULTS_TABLE)
    assert table is not None
    after = {
        tuple(r)
        for r in table.select("run", "query_id", "k", "metric", "value", "run_id").collect()
    }

    assert {r for r in after if r[0] == "dedup"} == {r for r in before if r[0] == "dedup"}
    original = {r for r in after if r[0] == "original"}
    assert {r[5] for r in original} == {"run-2"}
    assert len(original) == len({r for r in before if r[0] == "original"})  # same queries and ks
    values = {(r[1], r[2], r[3]): r[4] for r in original}
    assert values[("q2", 10, "recall")] == 0.0  # b is not relevant
    assert values[("invoice_dispute_window", 10, "recall")] == 0.0  # no list: scores 0


def test_missing_path_is_one_line(
    eval_inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _eval_config(
        tmp_path / "eval.yaml", eval_inputs, {"original": str(tmp_path / "nowhere.run")}
    )
    assert main(["evaluate", "--config", str(config)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"logmetrics: error: run 'original' at {tmp_path / 'nowhere.run'}: path does not exist"
    ]


def test_missing_column_is_one_line(
    spark: SparkSession,
    eval_inputs: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "bad_run"
    spark.createDataFrame([("q2", "a")], "query_id string, chunk_id string").write.parquet(str(bad))
    config = _eval_config(tmp_path / "eval.yaml", eval_inputs)
    text = config.read_text().replace(
        f"original: {{path: '{eval_inputs['original']}', format: trec}}",
        f"original: {{path: '{bad}', format: parquet}}",
    )
    config.write_text(text)
    assert main(["evaluate", "--config", str(config)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"logmetrics: error: run 'original' at {bad}: required column 'rank' is missing "
        "(found: chunk_id, query_id)"
    ]


def test_malformed_trec_line_is_one_line(
    eval_inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.run"
    broken.write_text("q2 Q0 a 1 9.0 tag\nq2 Q0 b 2\n", encoding="utf-8")
    config = _eval_config(tmp_path / "eval.yaml", eval_inputs, {"original": str(broken)})
    assert main(["evaluate", "--config", str(config)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "expected lines of 6 fields (qid Q0 docno rank score tag), got 'q2 Q0 b 2'" in err[0]


def test_evaluate_without_an_evaluation_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        "inputs:\n  served_logs: {path: x}\n  clusters: {path: y}\noutput: {warehouse: w}\n"
    )
    assert main(["evaluate", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("logmetrics: error: evaluation: required section")


def test_csv_and_parquet_inputs(spark: SparkSession, tmp_path: Path) -> None:
    """Text columns from csv are converted; a grade that is not an integer is named."""
    from logmetrics.config import JudgmentsInput, RunInput
    from logmetrics.errors import InputError
    from logmetrics.inputs.judged import read_judgments, read_run

    csv = tmp_path / "judgments.csv"
    csv.write_text("query_id,chunk_id,grade\nq1,a,2\nq1,b,\n", encoding="utf-8")
    got = read_judgments(spark, JudgmentsInput(path=str(csv), format="csv")).collect()
    assert [tuple(r) for r in got] == [("q1", "a", 2), ("q1", "b", None)]
    csv.write_text("query_id,chunk_id,grade\nq1,a,high\n", encoding="utf-8")
    with pytest.raises(InputError, match="column 'grade' must hold integers, got 'high'"):
        read_judgments(spark, JudgmentsInput(path=str(csv), format="csv"))

    parquet = tmp_path / "run"
    spark.createDataFrame([(7, 2, 5)], "query_id int, rank int, chunk_id long").write.parquet(
        str(parquet)
    )
    row = read_run(spark, "A", RunInput(path=str(parquet), format="parquet")).first()
    assert row is not None
    assert (row["query_id"], row["rank"], row["chunk_id"]) == ("7", 2, "5")


def _python_cluster_metrics(
    runs: list[tuple[Any, ...]],
    judgments: list[tuple[Any, ...]],
    clusters: list[tuple[Any, ...]],
    ks: tuple[int, ...],
    names: tuple[str, ...],
) -> dict[Key, float]:
    """unique_clusters and cluster_recall from the issue's rules, in plain Python."""
    ids: dict[str, list[str]] = {}
    for chunk, cluster in clusters:
        if chunk is not None:
            ids.setdefault(chunk, []).extend([cluster] if cluster is not None else [])

    def key(chunk: str) -> str:
        return f"c:{min(ids[chunk])}" if ids.get(chunk) else f"s:{chunk}"

    judged: dict[str, set[str]] = {}
    for qid, chunk, grade in judgments:
        if grade >= 1:
            judged.setdefault(qid, set()).add(key(chunk))
    lists: dict[tuple[str, str], list[str]] = {}
    for _, (run, qid, _rank, chunk) in sorted(
        enumerate(runs), key=lambda item: (item[1][2], item[0])
    ):
        lists.setdefault((run, qid), []).append(chunk)
    out: dict[Key, float] = {}
    for run in names:
        for qid, relevant in judged.items():
            chunks = lists.get((run, qid), [])
            for k in ks:
                found = {key(chunk) for chunk in chunks[:k]}
                out[(run, qid, k, "unique_clusters")] = float(len(found))
                out[(run, qid, k, "cluster_recall")] = len(found & relevant) / len(relevant)
    return out


def test_original_vs_deduplicated_every_figure_matches_independent_references(
    spark: SparkSession,
) -> None:
    """Generated judged runs against an original and a deduplicated index (fixed seed): every
    per-query figure and every average equals ir_measures (recall, nDCG) or the plain-Python
    rules (unique_clusters, cluster_recall)."""
    rng = random.Random(23)
    chunks = [f"d{i}" for i in range(60)]
    clusters: list[tuple[Any, ...]] = []
    for chunk in chunks:
        draw = rng.random()
        if draw < 0.6:
            clusters.append((chunk, f"k{rng.randint(0, 14)}"))
        elif draw < 0.7:
            clusters.append((chunk, None))
        elif draw < 0.8:
            clusters += [(chunk, f"k{rng.randint(0, 14)}"), (chunk, None)]
        # else: absent from the cluster table
    first_cluster = {chunk: cluster for chunk, cluster in reversed(clusters)}
    runs: list[tuple[Any, ...]] = []
    judgments: list[tuple[Any, ...]] = []
    for q in range(20):
        qid = f"q{q}"
        judgments += [(qid, c, rng.choice([0, 1, 2, 3])) for c in rng.sample(chunks, 10)]
        original = [rng.choice(chunks) for _ in range(rng.randint(0, 12))]
        deduplicated, seen = [], set()  # the index keeps one chunk per cluster id
        for chunk in original:
            cluster = first_cluster.get(chunk)
            if cluster is None or cluster not in seen:
                deduplicated.append(chunk)
                seen.add(cluster)
        runs += [("original", qid, rank, c) for rank, c in enumerate(original, 1)]
        runs += [("dedup", qid, rank, c) for rank, c in enumerate(deduplicated, 1)]
    ks = (1, 5, 10)
    names = ("original", "dedup")
    rows = evaluation_results(
        per_query_metrics(
            _runs_df(spark, runs),
            _judgments_df(spark, judgments),
            _keys_df(spark, clusters),
            list(names),
            ks,
            1,
            "exponential",
        )
    ).collect()
    got = {(r.run, r.query_id, r.k, r.metric): r.value for r in rows}

    expected = _python_cluster_metrics(runs, judgments, clusters, ks, names)
    evaluated = {qid for qid, _, grade in judgments if grade >= 1}
    reference = _reference(runs, judgments, ks, "exponential")
    for run in names:
        for qid in evaluated:
            for k in ks:
                for metric in ("recall", "ndcg"):  # no list: 0 (ir_measures leaves it out)
                    expected[(run, qid, k, metric)] = reference.get((run, qid, k, metric), 0.0)
    for run, k, metric in {(r, k, m) for r, _, k, m in list(expected)}:
        values = [v for (r, q, kk, m), v in expected.items() if (r, kk, m) == (run, k, metric)]
        expected[(run, ALL_QUERIES, k, metric)] = sum(values) / len(values)
    assert len(expected) == 2 * (len(evaluated) + 1) * len(ks) * 4
    assert got == pytest.approx(expected, abs=1e-9, rel=0)
