"""The rules, pure and free of I/O: the per-request metric, the daily aggregation, cluster keys,
the alert rule and the judged-evaluation metrics. They import only schemas, config and errors."""
