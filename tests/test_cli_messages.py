"""Each line the terminal gives says one true thing, once: a bare `logmetrics` lists its
commands; an S3 endpoint that does not answer is one sentence, whichever endpoint it is. Run in
this process (`logmetrics.cli.main`), none of them needs Spark."""

from __future__ import annotations

import socket

import pytest

from logmetrics.cli import main
from logmetrics.errors import InputError
from logmetrics.tables import storage


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
    place = storage.place(path)
    assert place is not None
    with pytest.raises(OSError) as refused:
        place.fs.get_file_info("metrics")
    storage.configure({})  # no endpoint set: AWS's
    assert storage.problem(path, refused.value) == (
        "AWS's S3 endpoint does not answer (no spark.hadoop.fs.s3a.endpoint is set)"
    )
