"""Pure-Python reference for unique-clusters@k, written straight from the rules.

The Spark job is tested against this module, so it favours being obviously correct over
being fast: plain loops, dicts and sorted(), no numpy and no Spark.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# (output key, fraction) for the percentiles of rule 8.
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p10", 0.10),
    ("p25", 0.25),
    ("median", 0.50),
    ("p75", 0.75),
    ("p90", 0.90),
)

ClusterKey = tuple[str, str]


def mismatched(got: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """How a published row differs from the reference's: each column of `want` whose value
    `got` does not hold, as (got, want). Floats are equal to 12 significant digits (Spark and
    Python add in different orders), other values exactly."""
    return {c: (got[c], v) for c, v in want.items() if not _same(got[c], v)}


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-15)
    return bool(got == want)


def cluster_lookup(clusters: Iterable[tuple[str | None, str | None]]) -> dict[str, str | None]:
    """chunk_id -> smallest non-null cluster_id; None if listed only with nulls (rule 5)."""
    table: dict[str, str | None] = {}
    for chunk_id, cluster_id in clusters:
        if chunk_id is None:  # a table row without a chunk can never match a served entry
            continue
        if chunk_id not in table:
            table[chunk_id] = cluster_id
        elif cluster_id is not None:
            current = table[chunk_id]
            if current is None or cluster_id < current:
                table[chunk_id] = cluster_id
    return table


def cluster_key(chunk_id: str, table: Mapping[str, str | None]) -> ClusterKey:
    """("c", cluster_id) for a clustered chunk, ("s", chunk_id) for a singleton (rule 5)."""
    cluster_id = table.get(chunk_id)
    if cluster_id is None:
        return ("s", chunk_id)
    return ("c", cluster_id)


def utc_date(served_at: dt.datetime) -> dt.date:
    """The UTC calendar date of a timestamp (rule 2); a naive datetime is taken to be UTC."""
    if served_at.tzinfo is None:
        return served_at.date()
    return served_at.astimezone(dt.UTC).date()


def is_malformed(row: Mapping[str, Any]) -> bool:
    """Rule 0: a null request_id, served_at or results keeps the row out of the metrics."""
    return (
        row.get("request_id") is None or row.get("served_at") is None or row.get("results") is None
    )


def valid_entries_in_rank_order(
    results: Sequence[Mapping[str, Any] | None],
) -> list[Mapping[str, Any]]:
    """Rule 3: drop entries with a null rank or chunk_id, then a stable sort on rank."""
    valid = [
        entry
        for entry in results
        if entry is not None and entry.get("rank") is not None and entry.get("chunk_id") is not None
    ]
    # sorted() is stable, so entries with equal ranks keep their array order.
    return sorted(valid, key=lambda entry: entry["rank"])


def served_requests(
    rows: Iterable[Mapping[str, Any]], start: dt.date, end: dt.date
) -> dict[tuple[dt.date, str], Mapping[str, Any]]:
    """Rules 0-2: well-formed rows in range, one per (metric_date, request_id), earliest kept."""
    kept: dict[tuple[dt.date, str], Mapping[str, Any]] = {}
    for row in rows:
        if is_malformed(row):
            continue
        metric_date = utc_date(row["served_at"])
        if not start <= metric_date <= end:
            continue
        key = (metric_date, row["request_id"])
        if key not in kept or row["served_at"] < kept[key]["served_at"]:
            kept[key] = row
    return kept


def row_day(row: Mapping[str, Any]) -> dt.date | None:
    """The day a row is read for: the UTC date of its served_at, else its date partition
    (`date`, if it has one), else none: a row without either is not read."""
    if row.get("served_at") is not None:
        return utc_date(row["served_at"])
    partition = row.get("date")
    if isinstance(partition, str):
        return dt.date.fromisoformat(partition)
    return partition


def row_accounting(
    rows: Iterable[Mapping[str, Any]], start: dt.date, end: dt.date, shape: str = "nested"
) -> dict[dt.date, dict[str, int]]:
    """Per date in [start, end], every row read accounted for, from the rows as `shape` stores
    them: `rows_read`, `duplicate_rows`, `quarantined_rows` and `kept_rows`, where rows_read =
    kept_rows + duplicate_rows + quarantined_rows.

    - A nested or ids row is one copy of its request. An exploded row is one result (`rank`,
      `chunk_id`, `tokens`), the rows of one (request_id, served_at) one copy.
    - A malformed row (null request_id or served_at; in a nested or ids row, null results too)
      is quarantined: one quarantine row per row.
    - Of a request's copies on a day the earliest is kept. Its rows are kept rows, once each:
      a nested or ids copy's row; an exploded copy's distinct rows. Every other row read is a
      duplicate row: each repeat of a kept row, every row of the request's other copies."""
    out = {
        day: {"rows_read": 0, "duplicate_rows": 0, "quarantined_rows": 0, "kept_rows": 0}
        for day in dates_between(start, end)
    }
    exploded = shape == "exploded"
    copies: dict[tuple[dt.date, str], dict[Any, list[Any]]] = {}
    for row in rows:
        day = row_day(row)
        if day not in out:
            continue
        out[day]["rows_read"] += 1
        if exploded:  # a result's row: there is no list to be null
            malformed = row.get("request_id") is None or row.get("served_at") is None
        else:
            malformed = is_malformed(row)
        if malformed:
            out[day]["quarantined_rows"] += 1
        else:
            content = (row.get("rank"), row.get("chunk_id"), row.get("tokens"))
            request = copies.setdefault((day, row["request_id"]), {})
            request.setdefault(row["served_at"], []).append(content if exploded else row)
    for (day, _), by_time in copies.items():
        read = sum(len(copy_rows) for copy_rows in by_time.values())
        kept_copy = by_time[min(by_time)]
        kept = len(set(kept_copy)) if exploded else 1
        out[day]["kept_rows"] += kept
        out[day]["duplicate_rows"] += read - kept
    return out


def _check_ks(ks: Iterable[int]) -> list[int]:
    out = sorted(set(ks))
    if any(k < 1 for k in out):
        raise ValueError(f"every k must be >= 1, got {out}")
    return out


def by_query(
    rows: Iterable[Mapping[str, Any]],
    clusters: Iterable[tuple[str | None, str | None]],
    ks: Iterable[int],
    start: dt.date,
    end: dt.date,
    segment: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One dict per (metric_date, request_id, k), sorted in that order (rules 0-7); with
    `segment` (column, value), only the requests in that segment."""
    table = cluster_lookup(clusters)
    k_values = _check_ks(ks)
    out: list[dict[str, Any]] = []
    requests = served_requests(rows, start, end)
    for metric_date, request_id in sorted(requests):
        row = requests[(metric_date, request_id)]
        if segment is not None and segment_of(row, segment[0]) != segment[1]:
            continue
        entries = valid_entries_in_rank_order(row["results"])
        missing = sum(1 for entry in entries if entry["chunk_id"] not in table)
        for k in k_values:
            top_k = entries[:k]
            out.append(
                {
                    "metric_date": metric_date,
                    "request_id": request_id,
                    "served_at": row["served_at"],
                    "k": k,
                    "unique_clusters": len({cluster_key(e["chunk_id"], table) for e in top_k}),
                    "results": len(entries),
                    "missing_cluster_results": missing,
                }
            )
    return out


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """numpy.percentile's default 'linear' method, by hand: position = fraction * (n - 1).

    The interpolation is done from the nearer neighbour, as numpy does, so that results agree
    to the last bit rather than only approximately.
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    position = (n - 1) * fraction
    lower = math.floor(position)
    upper = min(lower + 1, n - 1)
    weight = position - lower
    a, b = sorted_values[lower], sorted_values[upper]
    if weight >= 0.5:
        return float(b - (b - a) * (1 - weight))
    return float(a + (b - a) * weight)


def dates_between(start: dt.date, end: dt.date) -> list[dt.date]:
    """Every date from start to end inclusive (empty when start > end)."""
    return [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]


def daily(
    rows: Iterable[Mapping[str, Any]],
    clusters: Iterable[tuple[str | None, str | None]],
    ks: Iterable[int],
    threshold: int,
    start: dt.date,
    end: dt.date,
    segment: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One dict per (metric_date, k) for every date in [start, end], sorted (rule 8); with
    `segment`, the segment's requests on the dates it has any."""
    k_values = _check_ks(ks)
    per_query = by_query(rows, clusters, k_values, start, end, segment)
    days = dates_between(start, end)
    if segment is not None:
        days = sorted({q["metric_date"] for q in per_query})
    out: list[dict[str, Any]] = []
    for metric_date in days:
        for k in k_values:
            queries = [q for q in per_query if q["metric_date"] == metric_date and q["k"] == k]
            values = sorted(q["unique_clusters"] for q in queries)
            n = len(values)
            histogram = [0] * (k + 1)
            for value in values:
                histogram[value] += 1
            results = sum(q["results"] for q in queries)
            missing = sum(q["missing_cluster_results"] for q in queries)
            row: dict[str, Any] = {
                "metric_date": metric_date,
                "k": k,
                "queries": n,
                "empty_queries": sum(1 for q in queries if q["results"] == 0),
                "histogram": histogram,
            }
            for name, fraction in PERCENTILES:
                row[name] = percentile(values, fraction) if n else None
            row["mean"] = sum(values) / n if n else None
            row["threshold"] = threshold
            row["share_at_or_below_threshold"] = (
                sum(1 for v in values if v <= threshold) / n if n else None
            )
            row["results"] = results
            row["missing_cluster_results"] = missing
            row["missing_cluster_rate"] = missing / results if results else None
            out.append(row)
    return out


# --- the k-sweep and the redundancy cost (issue 6) ----------------------------------------


def segment_of(row: Mapping[str, Any], column: str) -> str:
    """A request's segment value as the daily tables name it: text, '(null)' for a null."""
    value = row.get(column)
    return "(null)" if value is None else str(value)


def _day_requests(
    rows: Iterable[Mapping[str, Any]],
    start: dt.date,
    end: dt.date,
    segment: tuple[str, str] | None,
) -> dict[dt.date, list[list[Mapping[str, Any]]]]:
    """Per date, the valid entries in rank order of each served request (of one segment)."""
    per_day: dict[dt.date, list[list[Mapping[str, Any]]]] = {}
    for (metric_date, _), row in sorted(served_requests(rows, start, end).items()):
        if segment is not None and segment_of(row, segment[0]) != segment[1]:
            continue
        per_day.setdefault(metric_date, []).append(valid_entries_in_rank_order(row["results"]))
    return per_day


def k_sweep(
    rows: Iterable[Mapping[str, Any]],
    clusters: Iterable[tuple[str | None, str | None]],
    max_k: int,
    start: dt.date,
    end: dt.date,
    segment: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One dict per (metric_date, k) for k = 1..max_k: the mean over the day's queries of
    unique-clusters@k, that mean / k, and mean@k - mean@(k-1) (for k = 1, the mean).
    Without `segment`, every date in range; with it, the dates the segment has queries on."""
    table = cluster_lookup(clusters)
    per_day = _day_requests(rows, start, end, segment)
    days = dates_between(start, end) if segment is None else sorted(per_day)
    out: list[dict[str, Any]] = []
    for metric_date in days:
        lists = [
            [cluster_key(e["chunk_id"], table) for e in entries]
            for entries in per_day.get(metric_date, [])
        ]
        n = len(lists)
        previous = 0.0
        for k in range(1, max_k + 1):
            total = sum(len(set(keys[:k])) for keys in lists)
            mean = total / n if n else None
            out.append(
                {
                    "metric_date": metric_date,
                    "k": k,
                    "queries": n,
                    "unique_clusters_total": total,
                    "mean_unique_clusters": mean,
                    "distinct_fraction": None if mean is None else mean / k,
                    "marginal_rate": None if mean is None else mean - previous,
                }
            )
            previous = mean if mean is not None else 0.0
    return out


def redundancy_cost(
    rows: Iterable[Mapping[str, Any]],
    clusters: Iterable[tuple[str | None, str | None]],
    ks: Iterable[int],
    tokens_per_slot: int,
    usd_per_million_input_tokens: float,
    start: dt.date,
    end: dt.date,
    segment: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One dict per (metric_date, k): slots of the top-k whose cluster already appeared above
    them in the same list, their tokens (the entry's `tokens`, else tokens_per_slot) and USD."""
    table = cluster_lookup(clusters)
    per_day = _day_requests(rows, start, end, segment)
    days = dates_between(start, end) if segment is None else sorted(per_day)
    out: list[dict[str, Any]] = []
    for metric_date in days:
        requests = per_day.get(metric_date, [])
        for k in _check_ks(ks):
            slots = redundant = tokens = 0
            for entries in requests:
                seen: set[ClusterKey] = set()
                for entry in entries[:k]:
                    slots += 1
                    key = cluster_key(entry["chunk_id"], table)
                    if key in seen:
                        redundant += 1
                        own = entry.get("tokens")
                        tokens += tokens_per_slot if own is None else own
                    seen.add(key)
            out.append(
                {
                    "metric_date": metric_date,
                    "k": k,
                    "queries": len(requests),
                    "slots": slots,
                    "redundant_slots": redundant,
                    "redundant_tokens": tokens,
                    "redundant_usd": tokens * usd_per_million_input_tokens / 1_000_000,
                }
            )
    return out


def crowding(
    rows: Iterable[Mapping[str, Any]],
    clusters: Iterable[tuple[str | None, str | None]],
    ks: Iterable[int],
    top: int,
    start: dt.date,
    end: dt.date,
    segment: tuple[str, str] | None = None,
    tokens_per_slot: int = 510,
    usd_per_million_input_tokens: float = 3.0,
) -> list[dict[str, Any]]:
    """One dict per (metric_date, k, rank): the `top` cluster keys by redundant slots (a key
    with n entries in a request's top-k takes n - 1), ties by the key's text (the cluster id,
    or the chunk id of a chunk that is its own key; a cluster before a chunk of the same text),
    only keys with a redundant slot; sorted by (metric_date, k, rank). The tokens of a key's
    redundant slots are its entries' after the first in the top-k (their own `tokens`, else
    `tokens_per_slot`), priced as `redundancy_cost` prices them."""
    table = cluster_lookup(clusters)
    members: dict[str, int] = {}
    for cluster_id in table.values():
        if cluster_id is not None:
            members[cluster_id] = members.get(cluster_id, 0) + 1
    per_day: dict[dt.date, list[tuple[str, list[Mapping[str, Any]]]]] = {}
    for (metric_date, request_id), row in sorted(served_requests(rows, start, end).items()):
        if segment is not None and segment_of(row, segment[0]) != segment[1]:
            continue
        entries = valid_entries_in_rank_order(row["results"])
        per_day.setdefault(metric_date, []).append((request_id, entries))
    out: list[dict[str, Any]] = []
    for metric_date in sorted(per_day):
        for k in _check_ks(ks):
            redundant: dict[ClusterKey, int] = {}
            tokens: dict[ClusterKey, int] = {}
            affected: dict[ClusterKey, list[str]] = {}
            for request_id, entries in per_day[metric_date]:
                counts: dict[ClusterKey, int] = {}
                for entry in entries[:k]:
                    key = cluster_key(entry["chunk_id"], table)
                    counts[key] = counts.get(key, 0) + 1
                    if counts[key] >= 2:
                        own = entry.get("tokens")
                        spent = tokens_per_slot if own is None else own
                        tokens[key] = tokens.get(key, 0) + spent
                for key, n in counts.items():
                    if n >= 2:
                        redundant[key] = redundant.get(key, 0) + n - 1
                        affected.setdefault(key, []).append(request_id)
            total = sum(redundant.values())
            ranked = sorted(redundant, key=lambda key: (-redundant[key], key[1], key[0]))
            for rank, key in enumerate(ranked[:top], start=1):
                kind, name = key
                out.append(
                    {
                        "metric_date": metric_date,
                        "k": k,
                        "rank": rank,
                        "cluster_id": name if kind == "c" else None,
                        "chunk_id": name if kind == "s" else None,
                        "redundant_slots": redundant[key],
                        "requests_affected": len(affected[key]),
                        "share_of_redundant_slots": redundant[key] / total,
                        "cluster_size": members[name] if kind == "c" else 1,
                        "example_request_ids": sorted(affected[key])[:3],
                        "redundant_tokens": tokens[key],
                        "redundant_usd": tokens[key] * usd_per_million_input_tokens / 1_000_000,
                    }
                )
    return out


# --- alerts on the metric itself (issue 18) -------------------------------------------------

ALERT_DEFAULTS: dict[str, Any] = {
    "statistics": ("share_at_or_below_threshold", "mean"),
    "baseline": "same_weekday",
    "baseline_weeks": 4,
    "baseline_days": 28,
    "min_queries": 500,
    "min_baseline_days": 3,
    "sigmas": 3.0,
    "min_effect": {"share_at_or_below_threshold": 0.02, "mean": 0.2},
}


def histogram_statistic(statistic: str, histogram: Sequence[int], threshold: int) -> float | None:
    """The day's share at or below the threshold, or mean, read off its histogram."""
    n = sum(histogram)
    if n == 0:
        return None
    if statistic == "share_at_or_below_threshold":
        return sum(histogram[: threshold + 1]) / n
    return sum(i * c for i, c in enumerate(histogram)) / n


def alerts(
    daily_rows: Iterable[Mapping[str, Any]], days: Iterable[dt.date], **settings: Any
) -> list[dict[str, Any]]:
    """Issue 18's rule, from its text, over published daily rows (`metric_date`, `k`,
    `segment`, `segment_value`, `queries`, `histogram`, `threshold`, `dq_passed`,
    `cluster_table_version`): one dict per (day, k, segment, segment_value, statistic) of the
    rows of `days`, with every number the issue names. Values come from the histograms."""
    rule = {**ALERT_DEFAULTS, **settings}
    published = {
        (r["metric_date"], r["k"], r["segment"], r["segment_value"]): r for r in daily_rows
    }
    out = []
    for (day, k, segment, value), row in sorted(published.items()):
        if day not in set(days):
            continue
        if rule["baseline"] == "same_weekday":
            before = [day - dt.timedelta(days=7 * w) for w in range(1, rule["baseline_weeks"] + 1)]
        else:
            before = [day - dt.timedelta(days=d) for d in range(1, rule["baseline_days"] + 1)]
        baseline = []
        for past_day in before:
            past = published.get((past_day, k, segment, value))
            if past is not None and past["dq_passed"] and past["queries"] >= rule["min_queries"]:
                baseline.append(past)
        n = row["queries"]
        for statistic in sorted(rule["statistics"]):
            today = histogram_statistic(statistic, row["histogram"], row["threshold"])
            values = [
                histogram_statistic(statistic, b["histogram"], b["threshold"]) for b in baseline
            ]
            mean = sum(values) / len(values) if values else None
            sd = None
            if len(values) >= 2:
                sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
            limit = None
            if today is not None and sd is not None:
                if statistic == "share_at_or_below_threshold":
                    noise = today * (1 - today) / n
                else:
                    spread = sum(c * (i - today) ** 2 for i, c in enumerate(row["histogram"])) / n
                    noise = spread / n
                limit = rule["sigmas"] * math.sqrt(sd**2 + noise)
            delta = None if today is None or mean is None else today - mean
            floor = rule["min_effect"][statistic]
            if n < rule["min_queries"]:
                status = "too_few_queries"
            elif len(baseline) < rule["min_baseline_days"]:
                status = "insufficient_baseline"
            elif abs(delta) >= floor and abs(delta) > limit:
                worse = delta > 0 if statistic == "share_at_or_below_threshold" else delta < 0
                status = "alert" if worse else "improvement"
            else:
                status = "ok"
            out.append(
                {
                    "metric_date": day,
                    "k": k,
                    "segment": segment,
                    "segment_value": value,
                    "statistic": statistic,
                    "value": today,
                    "baseline_mean": mean,
                    "baseline_sd": sd,
                    "baseline_days": len(baseline),
                    "queries": n,
                    "delta": delta,
                    "limit": limit,
                    "min_effect": floor,
                    "status": status,
                    "cluster_table_version": row["cluster_table_version"],
                    "cluster_table_changed": any(
                        b["cluster_table_version"] != row["cluster_table_version"] for b in baseline
                    ),
                }
            )
    return out
