"""What counts as a secret, and how it is kept out of error messages and log lines.

Secrets (Databricks tokens, cloud keys) never come from a logmetrics config file: they come from
the environment or the orchestrator (docs/config.md, "Secrets"). The config rejects a Spark
setting whose key looks secret; what logmetrics does print that may carry one (a Spark Connect
URL's `;token=...`, a master URL's password) is redacted here.
"""

from __future__ import annotations

import re

# Spark's own default `spark.redaction.regex`: the keys Spark hides in its UI and event logs.
SECRET_KEY = re.compile(r"(?i)secret|password|token|access[.]?key")
REDACTED = "*****"

_URL_PASSWORD = re.compile(r"(?<=://)([^/@:;]*):[^/@;]*@")
_URL_PARAM = re.compile(r"([;?&])([^;?&=/]+)=([^;?&]*)")


def looks_secret(key: str) -> bool:
    """True when `key` names a secret by Spark's rule (token, secret, password, access key)."""
    return SECRET_KEY.search(key) is not None


def redact_url(url: str) -> str:
    """`url` with a password (`user:pw@`) and secret-looking parameters (`;token=...`, as in
    Spark Connect's `sc://host:443/;token=...`) replaced by REDACTED."""
    url = _URL_PASSWORD.sub(rf"\1:{REDACTED}@", url)
    return _URL_PARAM.sub(lambda m: f"{m[1]}{m[2]}={REDACTED if looks_secret(m[2]) else m[3]}", url)
