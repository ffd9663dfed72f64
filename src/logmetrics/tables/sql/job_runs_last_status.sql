-- The run ledger's last word on each day: its latest finished row (published, held or failed),
-- or, when no run finished it, its latest started row (still running, or killed); the row a
-- run reads to decide whether to compute the day again (docs/tables.md, job_runs).
--
-- `logmetrics views --config ...` creates it over the configured tables (catalog names, or
-- delta.`<path>` for a path warehouse). By hand, ${schema} is the tables' catalog schema:
--   spark-sql --hivevar schema=main.retrieval_metrics -f src/logmetrics/tables/sql/job_runs_last_status.sql
CREATE OR REPLACE VIEW ${schema}.job_runs_last_status
COMMENT 'Per day, the latest finished row of the run ledger (else its latest started one).'
AS
SELECT
  metric_date,
  status,
  reason,
  run_id,
  started_at,
  finished_at,
  rows_read,
  queries,
  code_version,
  error
FROM (
  SELECT
    r.*,
    row_number() OVER (
      PARTITION BY r.metric_date
      ORDER BY r.status <> 'started' DESC, r.finished_at DESC NULLS LAST, r.started_at DESC,
        r.run_id DESC
    ) AS nth
  FROM ${schema}.job_runs AS r
) AS ranked
WHERE nth = 1;
