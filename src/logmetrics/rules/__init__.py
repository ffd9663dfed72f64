"""The rules, pure and free of I/O: the per-request metric, daily aggregation, crowding, cluster
keys, the alert rule and judged evaluation. They import only schemas, config and errors."""
