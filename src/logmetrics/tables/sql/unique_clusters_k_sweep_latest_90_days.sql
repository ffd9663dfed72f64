-- The k-sweep over the latest 90 published days (counted back from the newest date of
-- unique_clusters_daily, as unique_clusters_latest_90_days does), per segment row and slot k:
-- the mean number of distinct clusters in the top-k from added totals
-- (sum(unique_clusters_total) / sum(queries), never a mean of daily means), the distinct
-- fraction (mean / k) and the marginal rate (mean at k minus mean at k - 1: the new clusters
-- the k-th slot brings).
--
-- `logmetrics views --config ...` creates it over the configured tables (catalog names, or
-- delta.`<path>` for a path warehouse). By hand, ${schema} is the tables' catalog schema:
--   spark-sql --hivevar schema=main.retrieval_metrics -f src/logmetrics/tables/sql/unique_clusters_k_sweep_latest_90_days.sql
CREATE OR REPLACE VIEW ${schema}.unique_clusters_k_sweep_latest_90_days
COMMENT 'Per segment row and k over the latest 90 days: mean unique clusters, distinct fraction, marginal rate.'
AS
WITH totals AS (
  SELECT
    s.k,
    s.segment,
    s.segment_value,
    count(*) AS days,
    sum(s.queries) AS queries,
    sum(s.unique_clusters_total) AS unique_clusters_total,
    sum(s.unique_clusters_total) / nullif(sum(s.queries), 0) AS mean_unique_clusters
  FROM ${schema}.unique_clusters_k_sweep AS s
  WHERE s.metric_date > (SELECT date_sub(max(metric_date), 90) FROM ${schema}.unique_clusters_daily)
  GROUP BY s.k, s.segment, s.segment_value
)
SELECT
  t.k,
  t.segment,
  t.segment_value,
  CASE WHEN t.segment = 'all' THEN 'all traffic' ELSE concat(t.segment, '=', t.segment_value) END
    AS segment_label,
  t.days,
  t.queries,
  t.unique_clusters_total,
  t.mean_unique_clusters,
  t.mean_unique_clusters / t.k AS distinct_fraction,
  CASE
    WHEN t.k = 1 THEN t.mean_unique_clusters
    ELSE t.mean_unique_clusters - p.mean_unique_clusters
  END AS marginal_rate
FROM totals AS t
LEFT JOIN totals AS p
  ON p.k = t.k - 1
  AND p.segment = t.segment
  AND p.segment_value = t.segment_value;
