-- redundancy_cost_daily over the latest 90 published days (counted back from the newest date of
-- unique_clusters_daily, as unique_clusters_latest_90_days does) at the ks the run measured
-- (those of unique_clusters_daily: the table itself holds every k from 1 to the largest), all
-- traffic and segments: what the redundant slots of each day's top-k cost.
--
-- `logmetrics views --config ...` creates it over the configured tables (catalog names, or
-- delta.`<path>` for a path warehouse). By hand, ${schema} is the tables' catalog schema:
--   spark-sql --hivevar schema=main.retrieval_metrics -f src/logmetrics/tables/sql/redundancy_cost_latest_90_days.sql
CREATE OR REPLACE VIEW ${schema}.redundancy_cost_latest_90_days
COMMENT 'redundancy_cost_daily at the measured ks over the latest 90 published days.'
AS
SELECT
  c.metric_date,
  c.k,
  c.segment,
  c.segment_value,
  CASE WHEN c.segment = 'all' THEN 'all traffic' ELSE concat(c.segment, '=', c.segment_value) END
    AS segment_label,
  c.queries,
  c.slots,
  c.redundant_slots,
  c.redundant_tokens,
  c.redundant_usd
FROM ${schema}.redundancy_cost_daily AS c
LEFT SEMI JOIN ${schema}.unique_clusters_daily AS d
  ON d.metric_date = c.metric_date
  AND d.k = c.k
  AND d.segment = c.segment
  AND d.segment_value = c.segment_value
WHERE c.metric_date > (SELECT date_sub(max(metric_date), 90) FROM ${schema}.unique_clusters_daily);
