"""The suite's class-data archive (the JDK's application class-data sharing, CDS): the classes
a backfill loads (Spark, Delta, Comet, Hadoop, Scala: about 16,000), parsed and verified once
and mapped into every JVM the suite starts, instead of read from their jars again by each.

`make test` builds it once per .venv (`python tests/class_archive.py`: a
2-day backfill in a JVM that writes the archive as it exits, about a minute); the suite's own
session (tests/conftest.py) and the backfill processes tests start (test_orchestration.py)
start with `OPTIONS`. A JVM that cannot use the archive (missing, or built for other jars or
another JDK) starts as it would without it and says nothing (`-Xlog:cds=off`): the archive
changes how fast a JVM starts, never what it computes. Measured (2026-12-03, 3 alternating
pairs, platform floor: start Spark and Delta, one 1-row commit): 19.1 / 21.8 / 18.4 s without,
13.9 / 13.4 / 12.6 s with.

Test-only: logmetrics itself starts its JVM as Spark does (a production archive would have to
be rebuilt with every change of the JDK, Spark or the jars, and the platform floor the fixed
cost is measured against starts without one).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARCHIVE = REPO / ".venv" / "logmetrics-classes.jsa"
OPTIONS = f"-XX:SharedArchiveFile={ARCHIVE} -Xlog:cds=off -Xlog:cds+dynamic=off"
"""Java options that map the archive where it fits this JVM, silently ignore it otherwise."""


def build(out: Path) -> None:
    """Run a 2-day backfill on the suite's session settings in a JVM that dumps the classes it
    loaded into `out` as it exits; wait for that JVM to end, then move the archive into place
    (a failed or interrupted dump leaves no archive behind, only slower tests)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from logmetrics.cli import main
    from logmetrics.config import SparkConfig
    from logmetrics.session import local_conf, resolve_lock
    from logmetrics.synthetic import generate
    from suite_session import TEST_CONF  # the suite's session, with the same Java options

    partial = out.with_name(out.name + ".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="logmetrics-cds-") as tmp:
        root = Path(tmp)
        start = dt.date(2026, 4, 1)
        generate(root / "data", start, days=2, queries_per_day=40, seed=3)
        java = (
            TEST_CONF["spark.driver.extraJavaOptions"].replace(OPTIONS, "")
            + f" -XX:ArchiveClassesAtExit={partial}"
            " -Xlog:cds=off -Xlog:cds+dynamic=off"  # a line per class it leaves out, otherwise
        )
        settings = SparkConfig(
            master="local[2]",
            driver_memory="2g",
            log_dir=str(root / "logs"),
            conf={**TEST_CONF, "spark.driver.extraJavaOptions": java},
        )
        builder = SparkSession.builder.appName("logmetrics-class-archive")
        for key, value in {**local_conf(settings), "spark.sql.warehouse.dir": tmp}.items():
            builder = builder.config(key, value)
        with resolve_lock():
            spark = builder.getOrCreate()
        config = root / "job.yaml"
        config.write_text(
            f"inputs:\n  served_logs: {{path: '{root / 'data' / 'served_logs'}'}}\n"
            f"  clusters: {{path: '{root / 'data' / 'clusters_parquet'}', format: parquet}}\n"
            f"output: {{warehouse: '{root / 'wh'}'}}\n"
            "crowding: {enabled: true}\n"
        )
        end = start + dt.timedelta(days=1)
        if main(["backfill", "--config", str(config), "--start", str(start), "--end", str(end)]):
            raise SystemExit("class archive: the backfill it runs failed")
        gateway = SparkContext._gateway
        assert gateway is not None
        spark.stop()  # the JVM stays up, without its Python-side servers
        # The archive is written as the JVM exits: the call never returns (the connection
        # closes under it).
        with contextlib.suppress(Exception):
            gateway.jvm.java.lang.System.exit(0)
        gateway.proc.wait(timeout=900)
    if not partial.exists():
        raise SystemExit(f"class archive: the JVM wrote no archive at {partial}")
    shutil.move(partial, out)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ARCHIVE
    build(target)
    print(f"class archive: {target.stat().st_size / 2**20:.0f} MiB at {target}")
