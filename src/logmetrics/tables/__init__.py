"""The tables: readers of the inputs (served logs, cluster table, runs, judgments, file scan),
the catalogue of the Delta tables logmetrics writes, its writes and reads, the BI views over
them, and Delta paths."""
