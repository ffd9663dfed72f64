"""Orchestration, one module per flow: the backfill loop, a chunk's compute and write, the
ledger, the alerts, calibration and evaluation flows. Flows call rules, quality and tables;
nothing calls up."""
