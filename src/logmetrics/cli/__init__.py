"""The face: the `logmetrics` command line, its logging and exit codes; the only place that knows
"yesterday". A module per command or family holds its arguments and its handler; the work is in
`flows`.

- `app`: `main`, the console script's `entry_point` and `run_job` (jobs/*.py): one command run,
  its errors as one line and an exit status.
- `parser`: the program's parser, assembled from the commands' own arguments (`arguments`: the
  argument types and the options several commands share).
- `logs`: the run's logging; `common`: what every command does before its work (its config, the
  session, the writer lease).
- The commands: `compute` (run, backfill), `readiness` (ready, and the not-ready answers `run`
  and `backfill` share), `alerts`, `report`, `evaluate`, `upkeep` (views, maintain), `demo`
  (generate, demo).
"""

from __future__ import annotations

from logmetrics.cli.app import entry_point, main, run_job

__all__ = ["entry_point", "main", "run_job"]
