"""The rules, pure and free of I/O: the per-request metric, daily aggregation, crowding, cluster
keys, the alert rule, the detector's calibration and judged evaluation. They import only
schemas, config and errors."""
