-- Each data-quality check on each computed day, with its outcome: 'passed'; 'warned', a warning
-- check failed (the day was published all the same); 'blocked', a blocking check failed (the day
-- was held back under quality.on_failure: fail, published with dq_passed = false under warn);
-- 'not judged', nothing to judge that day. job_runs_last_status says what became of the day.
--
-- `logmetrics views --config ...` creates it over the configured tables (catalog names, or
-- delta.`<path>` for a path warehouse). By hand, ${schema} is the tables' catalog schema:
--   spark-sql --hivevar schema=main.retrieval_metrics -f src/logmetrics/tables/sql/data_quality_outcomes.sql
CREATE OR REPLACE VIEW ${schema}.data_quality_outcomes
COMMENT 'Each data-quality check per day: passed, warned, blocked or not judged.'
AS
SELECT
  q.metric_date,
  q.`check`,
  CASE
    WHEN q.success IS NULL THEN 'not judged'
    WHEN q.success THEN 'passed'
    WHEN q.severity = 'blocking' THEN 'blocked'
    WHEN q.severity = 'warning' THEN 'warned'
  END AS outcome,
  q.observed_value,
  q.threshold,
  q.severity,
  q.run_id,
  q.checked_at
FROM ${schema}.data_quality AS q;
