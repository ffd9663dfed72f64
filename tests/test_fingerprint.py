"""What the config fingerprint holds (`Config.fingerprint`, `job_runs.config_fingerprint`): key
by key, which settings restate a published day when they change (`config_changed`) and which do
not, and what docs/config.md and docs/tables.md say of it. A pure function: no Spark.

tests/test_config.py checks a sample of keys through `--set`; here every leaf key of the config
must be placed on one side, so a new key makes its author decide."""

from __future__ import annotations

import copy
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from logmetrics.config import Config

REPO = Path(__file__).resolve().parents[1]
LOG_COLUMNS = ("request_id", "served_at", "results", "rank", "chunk_id", "tokens")
SPAN_COLUMNS = ("span_id", "trace_id", "name", "start_time_unix_nano", "attributes", "resource")

# A table by name takes the place of the path: set together.
INSTEAD = {
    "inputs.served_logs.table": "inputs.served_logs.path",
    "inputs.clusters.table": "inputs.clusters.path",
}

# Every leaf key with its value in BASE (below) replaced by another valid one.
# A change to any of these can change what a day publishes: it restates the day.
FINGERPRINTED: dict[str, Any] = {
    "inputs.served_logs.path": "/data/other-logs",
    "inputs.served_logs.format": "delta",
    "inputs.served_logs.on_corrupt": "quarantine",
    "inputs.served_logs.date_partition": "none",
    "inputs.served_logs.table": "main.serving.retrieval_log",
    "inputs.served_logs.shape": "exploded",
    **{f"inputs.served_logs.columns.{name}": f"own_{name}" for name in LOG_COLUMNS},
    # Against SPANS_BASE (a spans table): what is read as a request.
    **{f"inputs.served_logs.columns.{name}": f"own_{name}" for name in SPAN_COLUMNS},
    "inputs.served_logs.spans.convention": "openinference",
    "inputs.served_logs.spans.chunk_id": "metadata.chunk_id",
    "inputs.served_logs.spans.tokens": "metadata.tokens",
    "inputs.clusters.path": "/data/other-clusters",
    "inputs.clusters.table": "main.dedup.clusters",
    "inputs.clusters.format": "parquet",
    "inputs.clusters.version": 3,
    "inputs.clusters.columns.chunk_id": "id",
    "inputs.clusters.columns.cluster_id": "dup_group",
    "metrics.ks": [5],
    "metrics.threshold": 3,
    "metrics.segment_by": ["surface"],
    "cost.tokens_per_slot": 400,
    "cost.usd_per_million_input_tokens": 2.5,
    "crowding.enabled": False,
    "crowding.top_clusters": 20,
    "quality.enabled": False,
    "quality.on_failure": "warn",
    "quality.max_missing_cluster_rate": 0.2,
    "quality.max_malformed_rate": 0.05,
    "quality.min_volume_ratio": 0.25,
    "quality.volume_window_days": 14,
    "quality.missing_chunks_top_n": 10,
    **{
        f"quality.severity.{check}": "warning" if level == "blocking" else "blocking"
        for check, level in {
            "missing_cluster_rate": "blocking",
            "malformed_rate": "blocking",
            "positive_ranks": "warning",
            "unique_request_ids": "blocking",
            "unique_cluster_chunk_ids": "warning",
            "non_empty_cluster_ids": "warning",
            "volume": "warning",
            "consistent_duplicates": "warning",
            "readable_inputs": "blocking",
            "non_empty_day": "blocking",
        }.items()
    },
    "alerts.statistics": ["mean"],
    "alerts.baseline": "trailing",
    "alerts.baseline_weeks": 6,
    "alerts.baseline_days": 14,
    "alerts.min_queries": 100,
    "alerts.min_baseline_days": 2,
    "alerts.sigmas": 4.0,
    "alerts.min_effect.share_at_or_below_threshold": 0.05,
    "alerts.min_effect.mean": 0.5,
}
# ...and these change no number a day publishes: when a day is ready, what the detector measured
# (shown beside the numbers), where the output goes, how Spark runs, how days are chunked and
# looked back on, the judged evaluation (its own command and table).
NOT_FINGERPRINTED: dict[str, Any] = {
    "inputs.served_logs.ready_marker": "_SUCCESS",
    "inputs.served_logs.allow_empty_days": True,
    "inputs.clusters.detector": "minhash-0.8-2026-11",
    "inputs.calibration.path": "/data/other-calibration.csv",
    "inputs.calibration.format": "csv",
    "output.warehouse": "/elsewhere",
    "output.catalog": "main",
    "output.schema": "metrics",
    "output.table_properties": {"delta.enableChangeDataFeed": "true"},
    "backfill.days_per_chunk": 7,
    "backfill.broadcast_max_chunks": 10,
    "backfill.keep_cluster_keys": False,
    "backfill.cluster_keys_dir": "/keys",
    "nightly.lookback_days": 1,
    "spark.master": "local[1]",
    "spark.driver_memory": "1g",
    "spark.log_dir": None,
    "spark.profile": "long",
    "spark.accelerator": "none",
    "spark.conf": {"spark.sql.shuffle.partitions": "8"},
    "evaluation.runs.path": "/runs/other",
    "evaluation.runs.format": "trec",
    "evaluation.judgments.path": "/other-qrels",
    "evaluation.judgments.format": "trec",
    "evaluation.ks": [5],
    "evaluation.relevance_level": 2,
    "evaluation.gain": "linear",
    "evaluation.compare": ["bm25", "dense"],
    "evaluation.samples": 200,
    "evaluation.seed": 1,
}

# Every section set, so that every leaf key has a value to change (`evaluation.runs.<name>`
# stands for each run's keys).
BASE: dict[str, Any] = {
    "inputs": {
        "served_logs": {"path": "/data/logs"},
        "clusters": {"path": "/data/clusters"},
        "calibration": {"path": "/data/calibration"},
    },
    "output": {"warehouse": "/warehouse", "schema": "retrieval"},
    "evaluation": {
        "runs": {"bm25": {"path": "/runs/bm25"}, "dense": {"path": "/runs/dense"}},
        "judgments": {"path": "/qrels"},
    },
}


SPANS_BASE: dict[str, Any] = {
    **BASE,
    "inputs": {**BASE["inputs"], "served_logs": {"path": "/data/spans", "shape": "spans"}},
}
"""BASE reading a spans table: the base of the keys only spans have."""


def _base_for(key: str) -> dict[str, Any]:
    spans = key.startswith("inputs.served_logs.spans.") or key.split(".")[-1] in SPAN_COLUMNS
    return SPANS_BASE if spans and key.startswith("inputs.served_logs.") else BASE


def _leaf_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every leaf key of the config, dotted; a mapping of sections (`evaluation.runs`) counts
    its value's keys once."""
    keys = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        options = [field.annotation]
        while any(typing.get_origin(o) in (typing.Union, types.UnionType, dict) for o in options):
            options = [a for o in options for a in (typing.get_args(o) or (o,))]
        models = [t for t in options if isinstance(t, type) and issubclass(t, BaseModel)]
        keys += _leaf_keys(models[0], f"{key}.") if models else [key]
    return keys


def _with(key: str, value: Any) -> Config:
    """BASE (SPANS_BASE for a key only spans have) with `key` set to `value` (each run of
    `evaluation.runs` for a run's key)."""
    raw = copy.deepcopy(_base_for(key))
    *parents, leaf = key.split(".")
    nodes = [raw]
    for part in parents:
        nodes = [node.setdefault(part, {}) for node in nodes]
        if part == "runs" and key.startswith("evaluation."):
            nodes = [run for node in nodes for run in node.values()]
    for node in nodes:
        node[leaf] = value
        if key in INSTEAD:
            del node[INSTEAD[key].rsplit(".", 1)[1]]
    return Config.model_validate(raw)


def test_every_key_is_placed_in_or_out_of_the_fingerprint() -> None:
    """A key added to the config without saying whether it restates days fails here."""
    keys = _leaf_keys(Config)
    assert len(keys) > 60
    assert not FINGERPRINTED.keys() & NOT_FINGERPRINTED.keys()
    assert sorted(keys) == sorted([*FINGERPRINTED, *NOT_FINGERPRINTED])


@pytest.mark.parametrize(("key", "value"), FINGERPRINTED.items(), ids=list(FINGERPRINTED))
def test_a_key_that_changes_what_a_day_publishes_changes_the_fingerprint(
    key: str, value: Any
) -> None:
    """A key the fingerprint left out (a forgotten section, e.g. crowding's; a key deleted
    with the ready marker) would leave published days as the old setting made them."""
    base = Config.model_validate(_base_for(key))
    changed = _with(key, value)
    assert _value(changed, key) != _value(base, key)  # the change took
    assert changed.fingerprint() != base.fingerprint()


@pytest.mark.parametrize(("key", "value"), NOT_FINGERPRINTED.items(), ids=list(NOT_FINGERPRINTED))
def test_a_key_that_changes_no_number_keeps_the_fingerprint(key: str, value: Any) -> None:
    """Setting a ready marker, allowing empty days, a calibration table or a detector label
    must not restate every published day (a fingerprint over the whole `inputs` section fails
    here), nor must where the output goes or how Spark runs."""
    base = Config.model_validate(BASE)
    changed = _with(key, value)
    assert _value(changed, key) != _value(base, key)
    assert changed.fingerprint() == base.fingerprint()


def test_the_optional_sections_keep_the_fingerprint_whether_set_or_not() -> None:
    """Adding a calibration table or an evaluation section to a config restates nothing."""
    bare = copy.deepcopy(BASE)
    del bare["inputs"]["calibration"], bare["evaluation"]
    assert Config.model_validate(bare).fingerprint() == Config.model_validate(BASE).fingerprint()


def test_a_config_without_the_later_input_keys_keeps_its_recorded_fingerprint() -> None:
    """`table`, `shape` and `columns` came after days were published: at their defaults, set or
    not, they leave BASE's fingerprint as the releases before them recorded it (so an upgrade
    restates nothing)."""
    recorded = "04c12c97a2113fb2"  # BASE's fingerprint before the keys existed
    assert Config.model_validate(BASE).fingerprint() == recorded
    spelled_out = copy.deepcopy(BASE)
    spelled_out["inputs"]["served_logs"].update(
        {"table": None, "shape": "nested", "columns": {"request_id": None}}
    )
    spelled_out["inputs"]["clusters"]["columns"] = {"cluster_id": None}
    assert Config.model_validate(spelled_out).fingerprint() == recorded
    # The spans shape's keys (span columns, `spans`) at their defaults leave a mapped config's
    # fingerprint as it was recorded before them.
    mapped = copy.deepcopy(BASE)
    mapped["inputs"]["served_logs"]["columns"] = {"request_id": "qid"}
    recorded_mapped = "addca55a88c12eda"  # a config mapping request_id, before spans existed
    assert Config.model_validate(mapped).fingerprint() == recorded_mapped
    mapped["inputs"]["served_logs"]["spans"] = {"convention": "mlflow"}
    assert Config.model_validate(mapped).fingerprint() == recorded_mapped


def test_the_fingerprint_is_stable_and_short() -> None:
    """The same config gives the same 16 hex characters in any process (sorted-key JSON, not
    a dict's order or Python's salted hash)."""
    first = Config.model_validate(BASE).fingerprint()
    reordered = {key: BASE[key] for key in reversed(list(BASE))}
    assert Config.model_validate(reordered).fingerprint() == first
    assert re.fullmatch(r"[0-9a-f]{16}", first)


def _value(config: Config, key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if isinstance(node, dict):
            node = next(iter(node.values())) if part not in node else node[part]
        node = getattr(node, "schema_name" if part == "schema" else part, node)
    return node


def _sections(sentence: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", sentence))


def test_the_docs_name_the_fingerprinted_sections_and_keys() -> None:
    """docs/config.md (and docs/tables.md's job_runs) name the sections the fingerprint is
    taken over and those it leaves out, and say of each key of a fingerprinted section that
    is left out that it is (a doc that forgot crowding's section, or a key dropped from the
    fingerprint without a word, fails)."""
    fingerprinted = {key.split(".")[0] for key in FINGERPRINTED}
    left_out = {key.split(".")[0] for key in NOT_FINGERPRINTED} - fingerprinted
    config_md = (REPO / "docs" / "config.md").read_text()
    paragraph = " ".join(
        re.search(r"\*\*Config fingerprint\.\*\*(.*?)\n\n", config_md, re.S).group(1).split()
    )
    over = re.search(r"SHA-256 over the (.*?) sections", paragraph)
    assert over and _sections(over.group(1)) == fingerprinted
    not_over = re.search(r"Changes to ([^.]*?) do not", paragraph)
    assert not_over and _sections(not_over.group(1)) == left_out
    tables_md = " ".join((REPO / "docs" / "tables.md").read_text().split())
    hashed = re.search(r"`config_fingerprint` \(a hash of the (.*?) sections", tables_md)
    assert hashed and _sections(hashed.group(1)) == fingerprinted

    # Each key's row (or, for a whole subsection, its text) says which side it is on.
    said: dict[str, str] = {}
    for heading, body in re.findall(
        r"^#{3,4} `([a-z_.]+)`[^\n]*\n(.*?)(?=^#|\Z)", config_md, re.M | re.S
    ):
        intro = body.split("\n|", 1)[0]
        for key, row in re.findall(r"^\| `([a-z_.]+)` \|(.*)$", body, re.M):
            text = row + (intro if "Not part of the config fingerprint" in intro else "")
            if "Not part of the config fingerprint" in text:
                said[f"{heading}.{key}"] = "out"
            elif "Part of the config fingerprint" in text:
                said[f"{heading}.{key}"] = "in"
    assert {k for k, side in said.items() if side == "in"} <= FINGERPRINTED.keys()
    out = {k for k, side in said.items() if side == "out"}
    assert out <= NOT_FINGERPRINTED.keys()
    in_a_fingerprinted_section = {
        key for key in NOT_FINGERPRINTED if key.split(".")[0] in fingerprinted
    }
    assert out == in_a_fingerprinted_section
