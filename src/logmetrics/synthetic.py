"""Synthetic served logs and duplicate-cluster table, for tests and demos of logmetrics.

A corpus of chunks is grouped into duplicate clusters (many singletons, a long tail of big
clusters). Each served top-k list draws a new cluster or repeats one already in the list, with
a per-query repeat probability, calibrated so that at k=10 the median unique-clusters@10 is
about 6 and about 14% of queries have 4 or fewer. With ``dirty=True`` the awkward cases the
job must survive are mixed in at small rates. Each day is generated with numpy in one go and
written with pyarrow from offsets, so 90 days x 40,000 queries take seconds, not minutes.

For the alerts (docs/alerts.md), two optional knobs move the repeat probability, and so the
metric: a weekly season (``weekly_amplitude``) and changes planted on chosen days, in all
traffic or one segment value (``PlantedChange``). Without them the output is what it always was.

The generator knows which chunks are truly copies (``true_clusters``): against that truth a
cluster table's pair precision and recall can be measured on sampled pairs
(``pair_calibration``), as a team measures its near-duplicate detector; the demo publishes
its own that way.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

RESULT_TYPE = pa.struct([pa.field("rank", pa.int32()), pa.field("chunk_id", pa.string())])
SERVED_LOGS_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.string()),
        pa.field("served_at", pa.timestamp("us", tz="UTC")),
        pa.field("results", pa.list_(RESULT_TYPE)),
        pa.field("surface", pa.string()),
        pa.field("index_version", pa.string()),
    ]
)
CLUSTERS_SCHEMA = pa.schema(
    [pa.field("chunk_id", pa.string()), pa.field("cluster_id", pa.string())]
)

# Corpus shape: cluster sizes ~ Zipf(a), so most clusters are singletons with a long tail.
CLUSTER_SIZE_ZIPF_A = 2.2
MAX_CLUSTER_SIZE = 400
MIN_CORPUS_CHUNKS = 20_000
CORPUS_CHUNKS_PER_DAILY_QUERY = 5

# Per-query probability that a slot repeats a cluster already in the list: Beta(a, b), mean
# 0.48. Together with the spread from lists that hold nothing repeatable (singletons), this
# gives median 6 and ~14% of queries <= 4 at k=10 (checked in tests/test_synthetic.py).
REPEAT_BETA_A = 19.2
REPEAT_BETA_B = 20.8
# Of the repeats, the share that serve the very same chunk again rather than another member.
SAME_CHUNK_REPEAT_RATE = 0.04
# How many times a draw is retried when it hits a cluster or chunk already in the list.
REDRAW_ATTEMPTS = 4

# Dirty-mode rates. Counts are rounded stochastically from these, per day.
DUPLICATE_REQUEST_RATE = 0.005  # requests written twice with identical content
SHUFFLED_LIST_RATE = 0.05  # lists stored in shuffled array order
RANK_GAP_LIST_RATE = 0.02  # lists whose ranks skip one to three numbers
RANK_TIE_LIST_RATE = 0.005  # lists where two entries share a rank
NULL_CHUNK_ENTRY_RATE = 0.001  # entries with a null chunk_id
NULL_RANK_ENTRY_RATE = 0.001  # entries with a null rank
EMPTY_LIST_RATE = 0.002  # requests served with an empty list
MALFORMED_ROW_RATE = 0.0002  # extra rows with a null results, request_id or served_at
UNCLUSTERED_CHUNK_RATE = 0.004  # corpus chunks absent from the cluster table
NULL_CLUSTER_ID_RATE = 0.01  # singleton chunks listed with a null cluster_id
DOUBLE_LISTED_CHUNK_RATE = 0.0005  # chunks listed a second time with another (or null) cluster

SURFACES = ("web", "app", "api")
SURFACE_WEIGHTS = (0.55, 0.35, 0.10)
INDEX_VERSIONS = ("v1", "v2")
INDEX_V2_ROLLOUT_DAYS = 60  # v2's share of traffic grows linearly to 100% over this many days

SEGMENT_VALUES = {"surface": SURFACES, "index_version": INDEX_VERSIONS}

_US_PER_DAY = 86_400 * 1_000_000
_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class GeneratedData:
    """Where the data went and how much of it there is.

    ``requests`` counts distinct well-formed requests (days x queries_per_day); ``rows`` every
    row written, including redelivered copies and malformed rows; ``entries`` every result
    entry in those rows (null ones included); ``cluster_rows`` the rows of the cluster table.
    """

    out_dir: Path
    served_logs: Path
    clusters: Path
    start: dt.date
    days: int
    requests: int
    rows: int
    entries: int
    cluster_rows: int

    @property
    def end(self) -> dt.date:
        """The last generated date (inclusive)."""
        return self.start + dt.timedelta(days=self.days - 1)


@dataclass(frozen=True)
class PlantedChange:
    """A change planted on one day: the repeat probability of the queries of one segment value
    (``segment`` = ``surface`` or ``index_version``), or of all traffic (``segment`` None),
    moves by ``repeat_shift``. Positive: more repeats, fewer unique clusters, a regression.

    A segment's lists are drawn again for its queries, with the shift, from a stream of their
    own (the rest of the day is unchanged); with ``dirty``, a shuffled list among them keeps its
    shuffled ranks, so its new chunks are not in drawn order (5% of lists; harmless here)."""

    date: dt.date
    repeat_shift: float
    segment: str | None = None
    value: str | None = None

    def __post_init__(self) -> None:
        if self.segment is None:
            if self.value is not None:
                raise ValueError("a change to all traffic has no segment value")
        elif self.value not in SEGMENT_VALUES.get(self.segment, ()):
            raise ValueError(f"no segment value {self.segment}={self.value!r} in generated logs")


@dataclass(frozen=True)
class PlantedFlood:
    """A named duplicate cluster flooding the lists on one day, as a popular article copied
    into several sources would: in ``share`` of the queries of one segment value (or of all
    traffic, ``segment`` None) slots 2 to ``members`` + 1 are served from the cluster's
    ``members`` distinct copies, so each such top-k (k > ``members``) holds ``members`` - 1
    redundant slots of it. The cluster joins the cluster table as ``cluster_id``, its copies as
    chunks ``<cluster_id>/copy-<n>``. Floods of one day share one draw: a query gets at most
    one, so their shares must sum to at most 1."""

    date: dt.date
    cluster_id: str
    share: float
    members: int = 4
    segment: str | None = None
    value: str | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.share <= 1.0 or self.members < 2:
            raise ValueError("a flood needs 0 < share <= 1 and at least 2 members")
        if self.segment is not None and self.value not in SEGMENT_VALUES.get(self.segment, ()):
            raise ValueError(f"no segment value {self.segment}={self.value!r} in generated logs")

    def chunk_ids(self) -> list[str]:
        return [f"{self.cluster_id}/copy-{n}" for n in range(1, self.members + 1)]


def weekly_shift(date: dt.date, amplitude: float) -> float:
    """The weekly season's move of the repeat probability on ``date``: ``amplitude`` on
    Sundays, ``-amplitude`` midweek, a cosine of the weekday (mean 0 over a week)."""
    return amplitude * float(np.cos(2 * np.pi * (date.isoweekday() % 7) / 7))


@dataclass(frozen=True)
class _Corpus:
    chunk_ids: pa.Array  # string id of chunk number i
    cluster_of: np.ndarray  # chunk number -> cluster number
    cluster_start: np.ndarray  # cluster number -> first chunk number (members are contiguous)
    cluster_size: np.ndarray  # cluster number -> member count


def generate(
    out_dir: str | Path,
    start: dt.date,
    days: int,
    queries_per_day: int,
    seed: int,
    list_length: int = 10,
    dirty: bool = True,
    weekly_amplitude: float = 0.0,
    planted: Sequence[PlantedChange] = (),
    floods: Sequence[PlantedFlood] = (),
    corpus_chunks: int | None = None,
) -> GeneratedData:
    """Write ``days`` daily partitions of served logs plus the cluster table under ``out_dir``.

    Layout: ``served_logs/date=YYYY-MM-DD/part-00000.parquet`` and
    ``clusters_parquet/part-00000.parquet``; both directories are replaced if present. The row
    content depends only on the arguments (day i does not depend on ``days``).
    ``weekly_amplitude`` adds a weekly season to every query's repeat probability
    (``weekly_shift``); ``planted`` changes chosen days; ``floods`` plants named clusters.
    ``corpus_chunks``: the number of chunks the lists are drawn from (by default
    CORPUS_CHUNKS_PER_DAILY_QUERY per daily query, at least MIN_CORPUS_CHUNKS).
    """
    if days < 1 or queries_per_day < 1 or list_length < 1:
        raise ValueError("days, queries_per_day and list_length must all be >= 1")
    out = Path(out_dir)
    served_dir = out / "served_logs"
    clusters_dir = out / "clusters_parquet"
    for directory in (served_dir, clusters_dir):
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)

    corpus_seq, *day_seqs = np.random.SeedSequence(seed).spawn(days + 1)
    corpus_rng, corpus = _corpus(corpus_seq, queries_per_day, corpus_chunks)
    for day in {f.date for f in floods}:
        if sum(f.share for f in floods if f.date == day) > 1.0:
            raise ValueError(f"the floods of {day} share more than all queries")
    cluster_table = _with_floods(_cluster_table(corpus_rng, corpus, dirty), floods)
    clusters_path = clusters_dir / "part-00000.parquet"
    pq.write_table(cluster_table, clusters_path)

    rows = entries = 0
    for day_index, day_seq in enumerate(day_seqs):
        date = start + dt.timedelta(days=day_index)
        changes = [c for c in planted if c.date == date]
        table = _day_table(
            np.random.default_rng(day_seq),
            corpus,
            date,
            day_index,
            queries_per_day,
            list_length,
            dirty,
            shift=weekly_shift(date, weekly_amplitude)
            + sum(c.repeat_shift for c in changes if c.segment is None),
            segment_changes=[c for c in changes if c.segment is not None],
            plant_rng=np.random.default_rng((seed, day_index, 18)),
            floods=[f for f in floods if f.date == date],
            flood_rng=np.random.default_rng((seed, day_index, 26)),
        )
        partition = served_dir / f"date={date.isoformat()}"
        partition.mkdir()
        pq.write_table(table, partition / "part-00000.parquet")
        rows += table.num_rows
        entries += len(table.column("results").combine_chunks().flatten())

    return GeneratedData(
        out_dir=out,
        served_logs=served_dir,
        clusters=clusters_path,
        start=start,
        days=days,
        requests=days * queries_per_day,
        rows=rows,
        entries=entries,
        cluster_rows=cluster_table.num_rows,
    )


def true_clusters(
    seed: int,
    queries_per_day: int,
    floods: Sequence[PlantedFlood] = (),
    corpus_chunks: int | None = None,
) -> pa.Table:
    """The generator's truth about the chunks `generate` serves with these arguments: each
    chunk once, with the cluster it is truly a copy in (CLUSTERS_SCHEMA, a singleton with a
    cluster of its own), flood copies in their flood's cluster. The cluster table `generate`
    writes is this table with ``dirty=False``; with ``dirty`` it has a detector's faults
    (chunks left out, listed twice, null ids), which `pair_calibration` measures."""
    corpus_seq = np.random.SeedSequence(seed).spawn(1)[0]  # generate's first child, any days
    corpus_rng, corpus = _corpus(corpus_seq, queries_per_day, corpus_chunks)
    return _with_floods(_cluster_table(corpus_rng, corpus, dirty=False), floods)


def _corpus(
    seq: np.random.SeedSequence, queries_per_day: int, corpus_chunks: int | None
) -> tuple[np.random.Generator, _Corpus]:
    """The corpus drawn from `seq`, and the generator that draws the cluster table after it."""
    n_chunks = corpus_chunks or max(
        MIN_CORPUS_CHUNKS, CORPUS_CHUNKS_PER_DAILY_QUERY * queries_per_day
    )
    rng = np.random.default_rng(seq)
    return rng, _make_corpus(rng, n_chunks)


def _with_floods(cluster_table: pa.Table, floods: Sequence[PlantedFlood]) -> pa.Table:
    """The cluster table with each flooded cluster's copies appended (one member list per
    cluster id)."""
    flooded = list({f.cluster_id: f for f in floods}.values())
    if not flooded:
        return cluster_table
    copies = [{"chunk_id": c, "cluster_id": f.cluster_id} for f in flooded for c in f.chunk_ids()]
    return pa.concat_tables([cluster_table, pa.Table.from_pylist(copies, CLUSTERS_SCHEMA)])


@dataclass(frozen=True)
class PairCalibration:
    """A detector's pair precision and recall measured on samples of labelled pairs, as a team
    measures its own (docs/alerts.md): ``detected`` pairs drawn from those the cluster table
    puts in one cluster, ``detected_true`` of them true copies; ``copies`` pairs drawn from the
    true copy pairs, ``copies_detected`` of them in one cluster of the table; ``labelled`` the
    distinct pairs of the two samples."""

    detected: int
    detected_true: int
    copies: int
    copies_detected: int
    labelled: int

    @property
    def precision(self) -> float:
        """Of the sampled pairs the table puts in one cluster, the share that are copies."""
        return self.detected_true / self.detected if self.detected else 1.0

    @property
    def recall(self) -> float:
        """Of the sampled pairs of copies, the share the table puts in one cluster."""
        return self.copies_detected / self.copies if self.copies else 1.0


def pair_calibration(clusters: pa.Table, truth: pa.Table, pairs: int, seed: int) -> PairCalibration:
    """`clusters` (a cluster table, CLUSTERS_SCHEMA) measured against `truth` (`true_clusters`)
    over the chunks `truth` lists: up to `pairs` pairs drawn without replacement, uniformly,
    from the pairs `clusters` puts in one cluster (the job's rule: a chunk takes its smallest
    non-null cluster id; one absent or with null ids only is alone), each labelled by the
    truth; as many from the true copy pairs, each looked up in `clusters`. A sample at least as
    large as its population is the whole of it: the figures are then exact."""
    chunks = truth.column("chunk_id").to_pylist()
    true_of = dict(zip(chunks, truth.column("cluster_id").to_pylist(), strict=True))
    found = job_clusters(clusters)
    true_group = _group_codes([true_of[c] for c in chunks])
    found_group = _group_codes([found.get(c) for c in chunks])
    rng = np.random.default_rng((seed, 65))
    detected = _sample_pairs(found_group, pairs, rng)
    copies = _sample_pairs(true_group, pairs, rng)

    def together(group: np.ndarray, sample: np.ndarray) -> int:
        a, b = group[sample[:, 0]], group[sample[:, 1]]
        return int(((a == b) & (a >= 0)).sum())

    labelled = len({(int(a), int(b)) for a, b in np.concatenate([detected, copies])})
    return PairCalibration(
        detected=len(detected),
        detected_true=together(true_group, detected),
        copies=len(copies),
        copies_detected=together(found_group, copies),
        labelled=labelled,
    )


def job_clusters(clusters: pa.Table) -> dict[str, str]:
    """Each chunk's cluster id as the job counts it (`rules.cluster_keys`): its smallest
    non-null cluster id; a chunk with null ids only, or absent, has none (it is alone)."""
    cluster_of: dict[str, str] = {}
    for chunk, cluster in zip(
        clusters.column("chunk_id").to_pylist(),
        clusters.column("cluster_id").to_pylist(),
        strict=True,
    ):
        if chunk is not None and cluster is not None:
            known = cluster_of.get(chunk)
            cluster_of[chunk] = cluster if known is None else min(known, cluster)
    return cluster_of


def _group_codes(labels: list[str | None]) -> np.ndarray:
    """An integer per chunk naming its group, -1 for a chunk alone (a null label)."""
    codes: dict[str, int] = {}
    return np.array(
        [-1 if label is None else codes.setdefault(label, len(codes)) for label in labels],
        dtype=np.int64,
    )


def _sample_pairs(group: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Up to `n` distinct pairs (i, j), i < j, of chunks in one group (`_group_codes`), drawn
    uniformly without replacement; every pair when there are at most `n`. Shape (m, 2)."""
    order = np.argsort(group, kind="stable")
    order = order[group[order] >= 0]
    _, starts, sizes = np.unique(group[order], return_index=True, return_counts=True)
    per_group = sizes * (sizes - 1) // 2
    ends = np.cumsum(per_group)
    total = int(ends[-1]) if len(ends) else 0
    picks = np.sort(rng.choice(total, size=min(n, total), replace=False))
    which = np.searchsorted(ends, picks, side="right")
    t = picks - (ends[which] - per_group[which])  # the pair's index in its group: j(j-1)/2 + i
    j = ((1 + np.sqrt(1 + 8 * t.astype(np.float64))) // 2).astype(np.int64)
    j -= j * (j - 1) // 2 > t  # float rounding, one step either way
    j += (j + 1) * j // 2 <= t
    i = t - j * (j - 1) // 2
    first, second = order[starts[which] + i], order[starts[which] + j]
    return np.stack([np.minimum(first, second), np.maximum(first, second)], axis=1)


UNSERVED_CLUSTER_SIZES = (2, 6)
"""The sizes (smallest, largest; uniform) of the multi-member clusters of `unserved_chunks`."""


def unserved_chunks(
    first: int, count: int, multi_member_share: float, seed: int, batch: int = 1_000_000
) -> Iterator[pa.Table]:
    """Cluster-table rows (CLUSTERS_SCHEMA) of `count` chunks that no generated log serves, in
    tables of at most `batch` rows: what grows a generated corpus to a real one's size. Chunks
    numbered from `first` (ids `chunk-<number>` as the corpus's, 8 digits at least, so numbers
    past the corpus's never meet its ids); about `multi_member_share` of them in clusters of
    UNSERVED_CLUSTER_SIZES members (ids `dup-<8 digits>`, never a corpus cluster's 7), the rest
    singletons with a cluster id of their own. Built from numpy arrays a batch at a time."""
    rng = np.random.default_rng((seed, 53))
    lo, hi = UNSERVED_CLUSTER_SIZES
    cluster_number = 0
    for start in range(first, first + count, batch):
        n = min(batch, first + count - start)
        multi = round(n * multi_member_share)
        sizes = rng.integers(lo, hi + 1, size=multi // lo + 1)
        sizes = sizes[np.cumsum(sizes) <= multi]
        size = np.concatenate([sizes, np.ones(n - int(sizes.sum()), dtype=np.int64)])
        cluster = cluster_number + np.repeat(np.arange(len(size)), size)
        cluster_number += len(size)
        # Members of a cluster are not neighbours in the file.
        order = rng.permutation(n)
        yield pa.table(
            {
                "chunk_id": _ids("chunk-", start + order, 8),
                "cluster_id": _ids("dup-", cluster[order], 8),
            },
            schema=CLUSTERS_SCHEMA,
        )


def _stochastic_round(rng: np.random.Generator, expected: float) -> int:
    """An integer count with the given expectation and at most one away from it."""
    whole = int(expected)
    return whole + int(rng.random() < expected - whole)


def _pick(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    """Indices of about ``rate * n`` distinct items out of ``n``."""
    return rng.choice(n, size=min(n, _stochastic_round(rng, rate * n)), replace=False)


def _ids(prefix: str, numbers: np.ndarray, width: int) -> pa.Array:
    """Zero-padded string ids such as ``chunk-00012345`` (string order = numeric order)."""
    digits = pc.utf8_lpad(pa.array(numbers, pa.int64()).cast(pa.string()), width=width, padding="0")
    return pc.binary_join_element_wise(prefix, digits, "")


def _make_corpus(rng: np.random.Generator, n_chunks: int) -> _Corpus:
    """Chunks grouped into duplicate clusters with Zipf-distributed sizes."""
    sizes: list[np.ndarray] = []
    total = 0
    while total < n_chunks:
        batch = np.minimum(rng.zipf(CLUSTER_SIZE_ZIPF_A, size=n_chunks // 2 + 1), MAX_CLUSTER_SIZE)
        sizes.append(batch)
        total += int(batch.sum())
    size = np.concatenate(sizes)
    end = np.cumsum(size)
    n_clusters = int(np.searchsorted(end, n_chunks)) + 1
    size = size[:n_clusters].copy()
    size[-1] -= int(end[n_clusters - 1]) - n_chunks  # trim the last cluster to fit exactly
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    cluster_of = np.repeat(np.arange(n_clusters), size)
    # Id strings are assigned in a random order so members of a cluster do not look alike.
    chunk_ids = _ids("chunk-", rng.permutation(n_chunks), 8)
    return _Corpus(chunk_ids, cluster_of, start, size)


def _cluster_table(rng: np.random.Generator, corpus: _Corpus, dirty: bool) -> pa.Table:
    """The (chunk_id, cluster_id) table; dirty adds absent chunks, nulls and double listings."""
    n_chunks = len(corpus.chunk_ids)
    n_clusters = len(corpus.cluster_size)
    cluster_names = _ids("dup-", rng.permutation(n_clusters), 7)
    chunk = np.arange(n_chunks)
    cluster = corpus.cluster_of.copy()
    null_cluster = np.zeros(n_chunks, dtype=bool)
    if dirty:
        singleton_chunks = chunk[corpus.cluster_size[corpus.cluster_of] == 1]
        null_cluster[
            rng.choice(
                singleton_chunks,
                size=_stochastic_round(rng, NULL_CLUSTER_ID_RATE * len(singleton_chunks)),
                replace=False,
            )
        ] = True
        listed = np.ones(n_chunks, dtype=bool)
        listed[_pick(rng, n_chunks, UNCLUSTERED_CHUNK_RATE)] = False
        chunk, cluster, null_cluster = chunk[listed], cluster[listed], null_cluster[listed]
        # A few chunks listed twice: a second, different cluster id, or a null one.
        again = _pick(rng, len(chunk), DOUBLE_LISTED_CHUNK_RATE)
        again = again[~null_cluster[again]]
        if len(again) == 0:
            again = np.flatnonzero(~null_cluster)[:3]
        other = (cluster[again] + rng.integers(1, n_clusters, size=len(again))) % n_clusters
        second_null = rng.random(len(again)) < 0.5
        chunk = np.concatenate([chunk, chunk[again]])
        cluster = np.concatenate([cluster, other])
        null_cluster = np.concatenate([null_cluster, second_null])
        order = rng.permutation(len(chunk))
        chunk, cluster, null_cluster = chunk[order], cluster[order], null_cluster[order]
    cluster_ids = cluster_names.take(pa.array(cluster, mask=null_cluster))
    return pa.table(
        {"chunk_id": corpus.chunk_ids.take(pa.array(chunk)), "cluster_id": cluster_ids},
        schema=CLUSTERS_SCHEMA,
    )


def _draw_lists(
    rng: np.random.Generator, corpus: _Corpus, n_queries: int, length: int, shift: float = 0.0
) -> np.ndarray:
    """Chunk numbers of shape (n_queries, length), in intended rank order.

    Slot 0 is a new cluster. Each later slot, with the query's repeat probability (moved by
    ``shift``, kept in [0, 1]), repeats a cluster already in the list (another member, or rarely
    the very same chunk); otherwise, or when nothing in the list has another member, it draws a
    cluster not yet in the list.
    """
    n_chunks = len(corpus.chunk_ids)
    chunks = np.empty((n_queries, length), dtype=np.int64)
    clusters = np.empty((n_queries, length), dtype=np.int64)
    repeat_p = rng.beta(REPEAT_BETA_A, REPEAT_BETA_B, size=n_queries)
    if shift:
        repeat_p = np.clip(repeat_p + shift, 0.0, 1.0)
    rows = np.arange(n_queries)

    def new_chunks(who: np.ndarray, j: int) -> np.ndarray:
        chosen = rng.integers(0, n_chunks, size=len(who))
        for _ in range(REDRAW_ATTEMPTS):
            clash = (clusters[who, :j] == corpus.cluster_of[chosen][:, None]).any(axis=1)
            if not clash.any():
                break
            chosen[clash] = rng.integers(0, n_chunks, size=int(clash.sum()))
        return chosen

    chunks[:, 0] = new_chunks(rows, 0)
    clusters[:, 0] = corpus.cluster_of[chunks[:, 0]]
    for j in range(1, length):
        slot = np.full(n_queries, -1, dtype=np.int64)
        repeat = rng.random(n_queries) < repeat_p
        same = repeat & (rng.random(n_queries) < SAME_CHUNK_REPEAT_RATE)
        slot[same] = chunks[same, rng.integers(0, j, size=int(same.sum()))]

        # Another member of a multi-member cluster already in the list.
        who = np.flatnonzero(repeat & ~same)
        eligible = corpus.cluster_size[clusters[who, :j]] >= 2
        keys = np.where(eligible, rng.random(eligible.shape), -1.0)
        source = keys.argmax(axis=1)
        has = eligible.any(axis=1)
        who, source = who[has], source[has]
        cluster = clusters[who, source]
        size = corpus.cluster_size[cluster]
        offset = chunks[who, source] - corpus.cluster_start[cluster]
        open_ = np.ones(len(who), dtype=bool)
        member = chunks[who, source]
        for _ in range(REDRAW_ATTEMPTS):
            step = 1 + (rng.random(len(who)) * (size - 1)).astype(np.int64)
            candidate = corpus.cluster_start[cluster] + (offset + step) % size
            taken = (chunks[who, :j] == candidate[:, None]).any(axis=1)
            accept = open_ & ~taken
            member[accept] = candidate[accept]
            open_ &= ~accept
            if not open_.any():
                break
        slot[who[~open_]] = member[~open_]

        # Everything else (including repeats with nothing left to repeat) draws a new cluster.
        fresh = np.flatnonzero(slot < 0)
        slot[fresh] = new_chunks(fresh, j)
        chunks[:, j] = slot
        clusters[:, j] = corpus.cluster_of[slot]
    return chunks


def _lists(
    corpus: _Corpus,
    flat_chunks: np.ndarray,
    flat_ranks: np.ndarray,
    lengths: np.ndarray,
    null_chunk: np.ndarray,
    null_rank: np.ndarray,
) -> pa.ListArray:
    """The day's result lists, one ListArray from the flattened entries and the lengths."""
    entries = pa.StructArray.from_arrays(
        [
            pa.array(flat_ranks, pa.int32(), mask=null_rank),
            corpus.chunk_ids.take(pa.array(flat_chunks, mask=null_chunk)),
        ],
        fields=list(RESULT_TYPE),
    )
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), entries)


def _day_table(
    rng: np.random.Generator,
    corpus: _Corpus,
    date: dt.date,
    day_index: int,
    n_queries: int,
    length: int,
    dirty: bool,
    shift: float = 0.0,
    segment_changes: Sequence[PlantedChange] = (),
    plant_rng: np.random.Generator | None = None,
    floods: Sequence[PlantedFlood] = (),
    flood_rng: np.random.Generator | None = None,
) -> pa.Table:
    """One day's served-log rows as a pyarrow table (no ``date`` column)."""
    chunks = _draw_lists(rng, corpus, n_queries, length, shift)
    ranks = np.tile(np.arange(1, length + 1, dtype=np.int32), (n_queries, 1))
    lengths = np.full(n_queries, length, dtype=np.int64)
    if dirty:
        gap = _pick(rng, n_queries, RANK_GAP_LIST_RATE)
        gap_at = rng.integers(1, length, size=len(gap)) if length > 1 else np.zeros(0, np.int64)
        ranks[gap] += (np.arange(length) >= gap_at[:, None]) * rng.integers(
            1, 4, size=(len(gap), 1), dtype=np.int32
        )
        tie = _pick(rng, n_queries, RANK_TIE_LIST_RATE)
        tie_at = rng.integers(1, length, size=len(tie)) if length > 1 else np.zeros(0, np.int64)
        ranks[tie] -= (np.arange(length) >= tie_at[:, None]).astype(np.int32)
        shuffled = _pick(rng, n_queries, SHUFFLED_LIST_RATE)
        order = np.argsort(rng.random((len(shuffled), length)), axis=1)
        chunks[shuffled] = np.take_along_axis(chunks[shuffled], order, axis=1)
        ranks[shuffled] = np.take_along_axis(ranks[shuffled], order, axis=1)
        lengths[_pick(rng, n_queries, EMPTY_LIST_RATE)] = 0

    # The day's request lists as one ListArray built from offsets.
    keep = np.arange(length) < lengths[:, None]
    null_chunk = np.zeros(int(keep.sum()), dtype=bool)
    null_rank = np.zeros(int(keep.sum()), dtype=bool)
    if dirty:
        null_chunk[_pick(rng, len(null_chunk), NULL_CHUNK_ENTRY_RATE)] = True
        null_rank[_pick(rng, len(null_rank), NULL_RANK_ENTRY_RATE)] = True

    day_start = (date - _EPOCH).days * _US_PER_DAY
    served_at = day_start + rng.integers(0, _US_PER_DAY, size=n_queries)
    request_ids = _ids(f"req-{date:%Y%m%d}-", np.arange(n_queries), 7)
    surface = rng.choice(len(SURFACES), size=n_queries, p=SURFACE_WEIGHTS)
    v2_share = min(1.0, (day_index + 1) / INDEX_V2_ROLLOUT_DAYS)
    version = (rng.random(n_queries) < v2_share).astype(np.int64)
    for change in segment_changes:  # drawn again, from their own stream: the rest is as ever
        assert plant_rng is not None and change.value is not None
        codes = surface if change.segment == "surface" else version
        who = codes == SEGMENT_VALUES[str(change.segment)].index(change.value)
        redrawn = _draw_lists(
            plant_rng, corpus, int(who.sum()), length, shift + change.repeat_shift
        )
        chunks[who] = redrawn
    chunk_ids = corpus.chunk_ids
    if floods:  # flood copies are numbered after the corpus: the draws above are untouched
        assert flood_rng is not None
        draw = flood_rng.random(n_queries)
        below = 0.0
        for flood in floods:
            if flood.segment is None:
                who = np.ones(n_queries, dtype=bool)
            else:
                codes = surface if flood.segment == "surface" else version
                who = codes == SEGMENT_VALUES[flood.segment].index(str(flood.value))
            who &= (draw >= below) & (draw < below + flood.share)
            below += flood.share
            slots = min(flood.members, length - 1)
            first = len(chunk_ids)
            chunks[who, 1 : 1 + slots] = np.arange(first, first + slots)
            chunk_ids = pa.concat_arrays([chunk_ids, pa.array(flood.chunk_ids(), pa.string())])
    lists = _lists(
        replace(corpus, chunk_ids=chunk_ids),
        chunks[keep],
        ranks[keep],
        lengths,
        null_chunk,
        null_rank,
    )

    # Rows point at a request (for id, surface, version), a list and a timestamp; -1 means null.
    row_request = np.arange(n_queries)
    row_list = np.arange(n_queries)
    row_time = served_at.copy()
    row_null_time = np.zeros(n_queries, dtype=bool)
    if dirty:
        again = _pick(rng, n_queries, DUPLICATE_REQUEST_RATE)
        row_request = np.concatenate([row_request, again])
        row_list = np.concatenate([row_list, again])
        row_time = np.concatenate([row_time, served_at[again]])
        row_null_time = np.concatenate([row_null_time, np.zeros(len(again), dtype=bool)])
        # Malformed rows copy a real request and null one field. The null-results copy is
        # served earlier than the original, so a job that dedupes before dropping malformed
        # rows picks it; the null-served_at copy sorts first under Spark's nulls-first order.
        n_bad = _stochastic_round(rng, MALFORMED_ROW_RATE * len(row_request))
        source = rng.integers(0, n_queries, size=n_bad)
        kind = (rng.integers(0, 3) + np.arange(n_bad)) % 3
        bad_request = np.where(kind == 1, -1, source)
        bad_list = np.where(kind == 0, -1, source)
        earlier = day_start + (rng.random(n_bad) * (served_at[source] - day_start)).astype(np.int64)
        bad_time = np.where(kind == 0, earlier, served_at[source])
        row_request = np.concatenate([row_request, bad_request])
        row_list = np.concatenate([row_list, bad_list])
        row_time = np.concatenate([row_time, bad_time])
        row_null_time = np.concatenate([row_null_time, kind == 2])

    # Log order: by time, with null-time rows at random places.
    sort_time = np.where(
        row_null_time, day_start + rng.integers(0, _US_PER_DAY, len(row_time)), row_time
    )
    order = np.argsort(sort_time, kind="stable")
    row_request, row_list = row_request[order], row_list[order]
    row_time, row_null_time = row_time[order], row_null_time[order]
    meta = np.maximum(row_request, row_list)  # a malformed row still has its source's metadata

    return pa.table(
        {
            "request_id": request_ids.take(pa.array(row_request, mask=row_request < 0)),
            "served_at": pa.array(row_time, pa.int64(), mask=row_null_time).cast(
                SERVED_LOGS_SCHEMA.field("served_at").type
            ),
            "results": lists.take(pa.array(row_list, mask=row_list < 0)),
            "surface": pa.array(SURFACES).take(pa.array(surface[meta])),
            "index_version": pa.array(INDEX_VERSIONS).take(pa.array(version[meta])),
        },
        schema=SERVED_LOGS_SCHEMA,
    )


JUDGED_QUERIES = 20
"""Queries in the judged set the demo writes (`write_judged_set`)."""
_GRADES = (2, 2, 2, 1, 1, 1, 1, 1, 1, 1)  # by a cluster's place among a list's distinct ones


def write_judged_set(
    out_dir: str | Path, day: dt.date, surface: str, queries: int = JUDGED_QUERIES
) -> Path:
    """A small judged set for `logmetrics evaluate` to try, made from the served lists of `day`
    under ``out_dir`` (as `generate` wrote them), in TREC files under ``out_dir/eval``:

    - ``original.run``: the first `queries` requests of `surface` that day (by request id,
      those with a whole list), each its list as it was served;
    - ``dedup.run``: the same lists with every chunk of a cluster after the cluster's first
      left out, ranks closed up: what an index without the copies would have served;
    - ``judgments.qrels``: every chunk of each list judged by a rule: the chunks of the list's
      first 3 distinct clusters grade 2, of the next 7 grade 1, the rest 0. A copy is as
      relevant as the chunk it copies, so recall@10 counts copies and hardly tells the two
      runs apart where cluster_recall@10 and unique_clusters@10 do.

    A chunk's cluster is its smallest cluster id in the cluster table (the job's rule), else
    the chunk itself. Returns the directory."""
    out = Path(out_dir)
    cluster_of = job_clusters(pq.read_table(out / "clusters_parquet"))
    served = pq.read_table(out / "served_logs" / f"date={day.isoformat()}").to_pylist()
    lists: dict[str, list[str]] = {}
    for row in sorted(served, key=lambda r: r["request_id"] or ""):
        entries = row["results"] or []
        whole = all(e is not None and None not in (e["rank"], e["chunk_id"]) for e in entries)
        if row["request_id"] and row["surface"] == surface and entries and whole:
            ranked = sorted(entries, key=lambda e: e["rank"])
            lists.setdefault(row["request_id"], [e["chunk_id"] for e in ranked])
        if len(lists) == queries:
            break
    judged = out / "eval"
    judged.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[str]] = {"original": [], "dedup": []}
    qrels = []
    for query, chunks in lists.items():
        keys = [cluster_of.get(chunk, f"chunk:{chunk}") for chunk in chunks]
        distinct = list(dict.fromkeys(keys))
        firsts = [chunks[keys.index(key)] for key in distinct]
        for name, ranked in (("original", chunks), ("dedup", firsts)):
            runs[name] += [
                f"{query} Q0 {chunk} {rank} {1 / rank:.4f} {name}"
                for rank, chunk in enumerate(ranked, start=1)
            ]
        grade = {k: _GRADES[i] if i < len(_GRADES) else 0 for i, k in enumerate(distinct)}
        qrels += [
            f"{query} 0 {chunk} {grade[key]}"
            for chunk, key in dict.fromkeys(zip(chunks, keys, strict=True))
        ]
    for name, lines in runs.items():
        (judged / f"{name}.run").write_text("\n".join(lines) + "\n")
    (judged / "judgments.qrels").write_text("\n".join(qrels) + "\n")
    return judged
