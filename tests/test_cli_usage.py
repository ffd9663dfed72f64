"""The command line as a person meets it, parsing only (no Spark): one error prefix, the global
options after the command too, a suggestion for a misspelt command, help for every option,
and a command's arguments and handler in one module of the `cli` package."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from logmetrics.cli import main
from logmetrics.cli.parser import COMMANDS, build_parser

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "logmetrics" / "cli"


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one stderr line of a usage error (exit 2)."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_an_error_says_logmetrics_once(capsys: pytest.CaptureFixture[str]) -> None:
    """Fails on a prefix said twice (`logmetrics: error: logmetrics: unrecognized ...`), for
    the parser's errors and for a command's own check of its arguments."""
    assert _error(["run", "--date", "2026-10-30", "--bogus"], capsys) == (
        "logmetrics: error: unrecognized arguments: --bogus"
    )
    assert _error(["run", "--date", "2026-13-01"], capsys) == (
        "logmetrics: error: run: argument --date: '2026-13-01' is not a date (YYYY-MM-DD)"
    )
    assert _error(["alerts", "--start", "2026-10-30"], capsys) == (
        "logmetrics: error: alerts: give --start and --end, or --day-before"
    )


def test_the_global_options_go_before_or_after_the_command() -> None:
    """`--log-format json` and `--log-level` after the command, as before it; given in neither
    place, the defaults; given after it, they win over what came before."""
    parse = build_parser().parse_args
    after = parse(["run", "--date", "2026-10-30", "--log-format", "json", "--log-level", "DEBUG"])
    before = parse(["--log-format", "json", "--log-level", "DEBUG", "run", "--date", "2026-10-30"])
    neither = parse(["run", "--date", "2026-10-30"])
    both = parse(["--log-level", "ERROR", "ready", "--log-level", "WARNING"])
    assert (after.log_format, after.log_level) == (before.log_format, before.log_level)
    assert (after.log_format, after.log_level) == ("json", "DEBUG")
    assert (neither.log_format, neither.log_level) == ("text", "INFO")
    assert (both.command, both.log_level) == ("ready", "WARNING")


def test_a_misspelt_command_or_choice_gets_a_suggestion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _error(["backfil"], capsys) == (
        "logmetrics: error: argument COMMAND: invalid choice: 'backfil'; did you mean "
        "'backfill'? (choose from run, ready, backfill, generate, report, evaluate, maintain, "
        "alerts, views, demo)"
    )
    assert "did you mean 'json'?" in _error(["run", "--log-format", "jsn"], capsys)
    nothing_close = _error(["frobnicate"], capsys)
    assert "did you mean" not in nothing_close and "(choose from run, ready" in nothing_close


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_option_of_every_command_has_help() -> None:
    """Fails on an option `--help` lists with nothing beside it (`--log-level` was one)."""
    parser = build_parser()
    bare = [
        f"{name} {action.option_strings[0]}"
        for name, command in {"logmetrics": parser, **_commands(parser)}.items()
        for action in command._actions
        if action.option_strings and action.help in (None, "", argparse.SUPPRESS)
    ]
    assert bare == []


def test_run_help_says_what_the_look_back_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as left:
        main(["run", "--help"])
    assert left.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "looks back on the nightly.lookback_days days before it (default 3)" in shown
    assert "the days looked back on are still computed only when their inputs changed" in shown


def test_a_command_is_one_module() -> None:
    """Each command's arguments and its handler are in one module of the `cli` package (the
    function that adds it to the parser is beside the handler), and no module of the package
    grows back into the whole face."""
    for add in COMMANDS:
        added = _commands(_added_by(add))
        assert added, add
        for name, command in added.items():
            handler = command.get_default("handler")
            assert handler.__module__ == add.__module__, name
            assert add.__module__ not in ("logmetrics.cli.app", "logmetrics.cli.parser"), name
    longest = max(len(path.read_text().splitlines()) for path in PACKAGE.glob("*.py"))
    assert longest < 400


def _added_by(add: object) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add(parser.add_subparsers())  # type: ignore[operator]
    return parser
