-- Week-over-week: per ISO week (Monday to Sunday, UTC dates), k and segment, the week's figures
-- computed from added counts (histograms add across days; daily quantiles and means do not
-- average), the previous week's, and the change. A week with missing days says so in `days`.
--
-- `logmetrics views --config ...` creates it over the configured tables (catalog names, or
-- delta.`<path>` for a path warehouse). By hand, ${schema} is the tables' catalog schema:
--   spark-sql --hivevar schema=main.retrieval_metrics -f src/logmetrics/tables/sql/unique_clusters_weekly.sql
CREATE OR REPLACE VIEW ${schema}.unique_clusters_weekly
COMMENT 'Weekly unique-clusters figures from added daily counts, with the week-over-week change.'
AS
WITH daily AS (
  SELECT
    date_trunc('WEEK', metric_date) AS week_start,
    k,
    segment,
    segment_value,
    metric_date,
    queries,
    -- sum over the day's queries of unique_clusters: sum of i * histogram[i]
    aggregate(
      zip_with(histogram, sequence(0, k), (n, i) -> n * i), 0L, (acc, x) -> acc + x
    ) AS unique_clusters_total,
    aggregate(slice(histogram, 1, threshold + 1), 0L, (acc, n) -> acc + n) AS at_or_below,
    threshold,
    results,
    missing_cluster_results
  FROM ${schema}.unique_clusters_daily
),
weekly AS (
  SELECT
    CAST(week_start AS DATE) AS week_start,
    k,
    segment,
    segment_value,
    count(*) AS days,
    sum(queries) AS queries,
    sum(unique_clusters_total) / nullif(sum(queries), 0) AS mean_unique_clusters,
    sum(at_or_below) / nullif(sum(queries), 0) AS share_at_or_below_threshold,
    max(threshold) AS threshold,
    sum(missing_cluster_results) / nullif(sum(results), 0) AS missing_cluster_rate
  FROM daily
  GROUP BY week_start, k, segment, segment_value
),
with_previous AS (
  SELECT
    w.*,
    p.queries AS previous_queries,
    p.mean_unique_clusters AS previous_mean_unique_clusters,
    p.share_at_or_below_threshold AS previous_share_at_or_below_threshold,
    p.missing_cluster_rate AS previous_missing_cluster_rate
  FROM weekly AS w
  LEFT JOIN weekly AS p
    ON p.week_start = date_sub(w.week_start, 7)
    AND p.k = w.k AND p.segment = w.segment AND p.segment_value = w.segment_value
)
SELECT
  *,
  mean_unique_clusters - previous_mean_unique_clusters AS mean_unique_clusters_change,
  share_at_or_below_threshold - previous_share_at_or_below_threshold
    AS share_at_or_below_threshold_change,
  queries / nullif(previous_queries, 0) - 1 AS queries_change_ratio
FROM with_previous;
