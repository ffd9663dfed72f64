"""Each line the terminal gives says one true thing, once: a bare `logmetrics` lists its
commands; an S3 endpoint that does not answer is one sentence, whichever endpoint it is; a
backfill none of whose days is ready says so, its error before its closing line; a range of one
day is that day. Run in this process (`logmetrics.cli.main`), none of them needs Spark."""

from __future__ import annotations

import datetime as dt
import io
import socket
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from logmetrics import storage
from logmetrics.cli import main
from logmetrics.errors import InputError
from logmetrics.synthetic import generate

START = dt.date(2026, 4, 1)


def _terminal(argv: list[str]) -> tuple[int, list[str]]:
    """The exit status, and stdout and stderr as one terminal shows them: in the order written."""
    shown = io.StringIO()
    with redirect_stdout(shown), redirect_stderr(shown):
        status = main(argv)
    return status, shown.getvalue().splitlines()


def test_a_bare_logmetrics_lists_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """It said `the following arguments are required: COMMAND` and nothing of the commands."""
    assert main([]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "logmetrics: error: give a command: run, ready, backfill, generate, report, evaluate, "
        "maintain, alerts, views or demo (`logmetrics --help` says what each does)"
    ]
    assert main(["--log-level", "DEBUG"]) == 2  # options, but still no command
    assert "give a command: run, ready, " in capsys.readouterr().err


def _dead_endpoint() -> str:
    """An http:// endpoint on loopback where nothing listens (a port just freed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_an_s3_endpoint_that_does_not_answer_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The configured endpoint is named; without one (AWS's own) the line said `the S3 endpoint
    the AWS endpoint does not answer`. Both from the error a real request to a dead endpoint
    raises."""
    monkeypatch.setattr(storage, "_settings", storage.current_settings())  # restored after
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "logmetrics-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "logmetrics-test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    endpoint = _dead_endpoint()
    storage.configure(
        {
            "spark.hadoop.fs.s3a.endpoint": endpoint,
            "spark.hadoop.fs.s3a.path.style.access": "true",
        }
    )
    path = "s3a://metrics/wh"
    with pytest.raises(InputError) as named:
        storage.check_reachable(path, f"warehouse at {path}")
    assert str(named.value) == f"warehouse at {path}: the S3 endpoint {endpoint} does not answer"
    place = storage._checked(path)  # the checks' few tries: the store's own patience is minutes
    assert place is not None
    with pytest.raises(OSError) as refused:
        place.fs.get_file_info("metrics")
    storage.configure({})  # no endpoint set: AWS's
    assert storage.problem(path, refused.value) == (
        "AWS's S3 endpoint does not answer (no spark.hadoop.fs.s3a.endpoint is set)"
    )


@pytest.fixture
def one_day(tmp_path: Path) -> Path:
    """A job over one day of generated local Parquet logs (START), no ready marker: a day no
    file holds a row of is not ready, as the footers say without Spark."""
    generate(tmp_path / "data", START, days=1, queries_per_day=5, seed=5)
    config = tmp_path / "job.yaml"
    config.write_text(
        "inputs:\n"
        f"  served_logs: {{path: '{tmp_path / 'data' / 'served_logs'}'}}\n"
        f"  clusters: {{path: '{tmp_path / 'data' / 'clusters_parquet'}', format: parquet}}\n"
        f"output: {{warehouse: '{tmp_path / 'wh'}'}}\n"
    )
    return config


@pytest.mark.parametrize(
    ("days", "named", "why"),
    [
        (3, "no day of 2026-04-11..2026-04-13 is ready", "no log file holds a row of any of them"),
        (1, "2026-04-11", "no log file holds a row of it"),
    ],
)
def test_a_backfill_with_no_ready_day_says_so_before_its_closing_line(
    one_day: Path, days: int, named: str, why: str
) -> None:
    """Over days no log file holds a row of: the error, then the closing line (it came first,
    and the error said `nothing was computed for them, only for the ready days` of a range
    with none), the range named once, as `A..B`, or a day of its own as that day."""
    first = START + dt.timedelta(days=10)
    last = first + dt.timedelta(days=days - 1)
    argv = ["backfill", "--config", str(one_day), "--start", str(first), "--end", str(last)]
    status, lines = _terminal(argv)
    assert status == 5
    assert len(lines) == 2, lines
    assert lines[0] == f"logmetrics: error: input not ready: {named}: {why}; nothing was computed"
    assert lines[1].startswith("done in ")
    assert f": 0 day(s) published, {days} not ready; 0 alert(s); tables in " in lines[1]
