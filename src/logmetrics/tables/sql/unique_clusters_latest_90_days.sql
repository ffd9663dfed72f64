-- The latest 90 published days of unique_clusters_daily, all traffic and segments, with the
-- columns a dashboard plots; segment_label names the row for a filter ('all traffic',
-- 'surface=app'). "Latest" counts back from the newest published date, not from
-- today, so a dashboard does not go blank while a backfill catches up.
--
-- `logmetrics views --config ...` creates it over the configured tables (catalog names, or
-- delta.`<path>` for a path warehouse). By hand, ${schema} is the tables' catalog schema:
--   spark-sql --hivevar schema=main.retrieval_metrics -f src/logmetrics/tables/sql/unique_clusters_latest_90_days.sql
CREATE OR REPLACE VIEW ${schema}.unique_clusters_latest_90_days
COMMENT 'unique_clusters_daily over the latest 90 published days (filter on segment).'
AS
SELECT
  d.metric_date,
  d.k,
  d.segment,
  d.segment_value,
  CASE WHEN d.segment = 'all' THEN 'all traffic' ELSE concat(d.segment, '=', d.segment_value) END
    AS segment_label,
  d.queries,
  d.median,
  d.p10,
  d.p90,
  d.mean,
  d.threshold,
  d.share_at_or_below_threshold,
  d.missing_cluster_rate,
  d.dq_passed
FROM ${schema}.unique_clusters_daily AS d
WHERE d.metric_date > (SELECT date_sub(max(metric_date), 90) FROM ${schema}.unique_clusters_daily);
