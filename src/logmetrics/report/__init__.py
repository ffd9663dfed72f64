"""`logmetrics report`: the published tables drawn as PNG figures on one self-contained HTML page.

Its modules follow the page's making: `load` reads the tables (Spark), `frames` builds one small
frame per section (pandas), `figures` draws each section's figure (matplotlib), `page` writes
index.html.
"""

from __future__ import annotations

from logmetrics.report.load import load_report_data
from logmetrics.report.page import render

__all__ = ["load_report_data", "render"]
