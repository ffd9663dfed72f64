-- Every alert (status 'alert') with its culprits: the top 5 keys of unique_clusters_crowding on
-- its day, k and segment row, by redundant slots, and what those slots cost in prompt tokens and
-- dollars; the lines `logmetrics alerts` prints under an alert, without the baseline means (the
-- report and the printed lines give those). One row per alert and culprit; an alert whose day
-- has no crowding rows keeps one row with null culprit columns.
--
-- `logmetrics views --config ...` creates it over the configured tables (catalog names, or
-- delta.`<path>` for a path warehouse). By hand, ${schema} is the tables' catalog schema:
--   spark-sql --hivevar schema=main.retrieval_metrics -f src/logmetrics/tables/sql/unique_clusters_alert_culprits.sql
CREATE OR REPLACE VIEW ${schema}.unique_clusters_alert_culprits
COMMENT 'Each alert with its top 5 crowding keys (culprits) and their redundant slots, tokens, USD.'
AS
SELECT
  a.metric_date,
  a.k,
  a.segment,
  a.segment_value,
  CASE WHEN a.segment = 'all' THEN 'all traffic' ELSE concat(a.segment, '=', a.segment_value) END
    AS segment_label,
  a.statistic,
  a.value,
  a.baseline_mean,
  a.delta,
  a.`limit`,
  a.baseline_days,
  c.rank,
  CASE
    WHEN c.cluster_id IS NOT NULL THEN concat('cluster ', c.cluster_id)
    WHEN c.chunk_id IS NOT NULL THEN concat('chunk ', c.chunk_id)
  END AS culprit,
  c.redundant_slots,
  c.redundant_tokens,
  c.redundant_usd,
  c.requests_affected,
  c.share_of_redundant_slots
FROM ${schema}.unique_clusters_alerts AS a
LEFT JOIN ${schema}.unique_clusters_crowding AS c
  ON c.metric_date = a.metric_date
  AND c.k = a.k
  AND c.segment = a.segment
  AND c.segment_value = a.segment_value
  AND c.rank <= 5
WHERE a.status = 'alert';
