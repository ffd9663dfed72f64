"""`python -m logmetrics.cli`: the `logmetrics` command."""

from __future__ import annotations

from logmetrics.cli.app import entry_point

if __name__ == "__main__":
    entry_point()
