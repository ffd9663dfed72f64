"""One line for a failure (`errors.failure_line`): an error from the JVM says its root cause
and where its full trace is (the run's log file), whatever shape Py4J gave it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from logmetrics.cli import logs
from logmetrics.errors import InputError, failure_line


@pytest.fixture
def trace_file() -> Path:
    """A command's logging, as `main` sets it up: the run's log file (the suite's run logs go
    to a temp dir: tests/conftest.py)."""
    logs.setup_logging("INFO", "text", "errors-test")
    assert logs._LOG_ROOT is not None
    return logs._LOG_ROOT / "logmetrics-errors-test.log"


def _line_and_trace(line: str) -> tuple[str, Path | None]:
    """The line before `; full trace in`, and the file it names."""
    head, _, where = line.partition("; full trace in ")
    return head, Path(where) if where else None


def test_a_py4j_error_names_its_root_cause_and_the_run_log(
    spark: SparkSession, trace_file: Path
) -> None:
    """A call the JVM refuses (Py4J's `Trace:` error, no Java exception object) and the bare
    error Py4J raises when the JVM does not answer (the process gone: a test cannot kill the
    suite's JVM, so it is built as Py4J builds it). Fails if the line is Py4J's first line
    alone, with nothing of why or where to look. An error logmetrics words itself stays its
    first line: it has no trace worth reading."""
    with pytest.raises(Py4JError) as refused:
        spark._jvm.java.lang.Integer.parseInt(1, 2, 3)  # no such method
    assert _line_and_trace(failure_line(refused.value)) == (
        "An error occurred while calling z:java.lang.Integer.parseInt. (root cause: "
        "py4j.Py4JException: Method parseInt([class java.lang.Integer, class java.lang.Integer, "
        "class java.lang.Integer]) does not exist)",
        trace_file,
    )
    unanswered = Py4JError("An error occurred while calling o76.sql")
    assert _line_and_trace(failure_line(unanswered)) == (
        "An error occurred while calling o76.sql (root cause: the JVM did not answer: it "
        "stopped, or the connection to it broke)",
        trace_file,
    )
    worded = InputError("served logs at logs/: file x.parquet: column 'results' is missing\nmore")
    assert (
        failure_line(worded) == "served logs at logs/: file x.parquet: column 'results' is missing"
    )


def _damaged_data_page(path: Path) -> None:
    """A Parquet file whose footer still reads but whose first data page does not: the schema
    is inferred, and the read fails in the scan of the file's rows."""
    pq.write_table(pa.table({"x": list(range(2_000))}), path, compression="snappy")
    data = bytearray(path.read_bytes())
    data[4:400] = b"\x5a" * 396
    path.write_bytes(bytes(data))


def test_a_file_spark_fails_to_read_is_named_by_its_path(
    spark: SparkSession, tmp_path: Path, trace_file: Path
) -> None:
    """Spark's FAILED_READ_FILE line names the file as a path: plain Spark's `file:///tmp/...`
    URI as `/tmp/...`, and where the line names none (Comet's native reader: `reading file .`,
    the file only in a cause, without its leading `/`: built here by Spark's own error
    factory, since the suite runs plain Spark), the cause's file, its `/` restored. Fails on a
    line with `file .` or a `file:` URI."""
    path = tmp_path / "part-0.parquet"
    _damaged_data_page(path)
    with pytest.raises((PySparkException, Py4JJavaError)) as failed:
        spark.read.parquet(str(path)).collect()
    line, _ = _line_and_trace(failure_line(failed.value))
    assert line.startswith(
        f"[FAILED_READ_FILE.NO_HINT] Encountered error while reading file {path}.  SQLSTATE"
    ), line

    jvm = spark._jvm
    native = f"Parquet error: Failed to fetch metadata for file {str(path).lstrip('/')}: EOF"
    cause = jvm.org.apache.spark.SparkException(native)
    unnamed = jvm.org.apache.spark.sql.errors.QueryExecutionErrors.cannotReadFilesError(cause, "")
    with pytest.raises(Py4JJavaError) as thrown:
        jvm.scala.util.Failure(unnamed).get()  # throws it, as a failed action would
    line, _ = _line_and_trace(failure_line(thrown.value))
    assert line == (
        f"[FAILED_READ_FILE.NO_HINT] Encountered error while reading file {path}.  SQLSTATE: "
        f"KD001 (root cause: org.apache.spark.SparkException: Parquet error: Failed to fetch "
        f"metadata for file {path}: EOF)"
    )
