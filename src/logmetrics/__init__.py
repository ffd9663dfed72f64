"""logmetrics: unique-clusters@k over served top-k logs, as exact daily distributions in Delta."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("logmetrics")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0+unknown"
