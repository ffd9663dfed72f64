"""The program's parser: the global options, and each command's arguments as its module adds
them, in the order `logmetrics --help` lists them. A usage error is a ConfigError: one line,
exit 2, before Spark starts."""

from __future__ import annotations

import argparse
import re

from logmetrics.cli import alerts, compute, demo, evaluate, readiness, report, upkeep
from logmetrics.cli.common import CONFIG_ENV
from logmetrics.console import did_you_mean
from logmetrics.errors import ConfigError

DESCRIPTION = """\
logmetrics counts the distinct near-duplicate clusters in every served top-k list
(unique-clusters@k), and publishes exact daily distributions, quality checks and alerts as
Delta tables."""

EPILOG = f"""\
The config: --config FILE (repeatable; later files win), else ${CONFIG_ENV}, else
./conf/local.yaml or ./logmetrics.yaml. --set section.key=value overrides one key.

Exit status: 0 done; 1 bad input (`alerts` or `report` over days with nothing published,
too) or a failed run; 2 bad config or command line; 3 a day failed a blocking data-quality
check and was not published; 4 `alerts --fail-on-alert` found an alert;
5 a day's logs are not ready (no files yet, or no ready marker); 130 / 143 stopped by SIGINT
(Ctrl-C) / SIGTERM at a safe point (a second signal stops at once).

Run `logmetrics COMMAND --help` for a command's options. Docs: README.md, docs/."""

COMMANDS = (
    compute.add_run,
    readiness.add_ready,
    compute.add_backfill,
    demo.add_generate,
    report.add_report,
    evaluate.add_evaluate,
    upkeep.add_maintain,
    alerts.add_alerts,
    upkeep.add_views,
    demo.add_demo,
)
"""Each adds its command (its arguments and handler) to the parser's commands."""


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
COMMAND = "COMMAND"
"""The commands' place in the usage line."""
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<known>.*)\)$")


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is a ConfigError (one line, exit 2) like every other, which
    the CLI prints after its one prefix (`logmetrics: error: `): a command's own errors name
    the command (`run: argument --date: ...`), a choice misspelt gets a suggestion, and no
    command at all lists the commands."""

    def error(self, message: str) -> None:  # type: ignore[override]
        commands = [
            name
            for action in self._actions
            if isinstance(action, argparse._SubParsersAction)
            for name in action.choices
        ]
        if commands and message == f"the following arguments are required: {COMMAND}":
            message = (
                f"give a command: {', '.join(commands[:-1])} or {commands[-1]} "
                "(`logmetrics --help` says what each does)"
            )
        invalid = _INVALID_CHOICE.search(message)
        if invalid:
            known = [name.strip().strip("'") for name in invalid["known"].split(",")]
            suggestion = did_you_mean(invalid["given"], known)
            message = message.replace(invalid[0], f"invalid choice: {invalid['given']!r}")
            message += f"{suggestion} (choose from {', '.join(known)})"
        command = self.prog.removeprefix("logmetrics").strip()
        raise ConfigError(f"{command}: {message}" if command else message)


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="logmetrics",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _global_options(parser, defaults=True)
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        title="commands",
        metavar=COMMAND,
        parser_class=_ArgumentParser,
    )
    for add in COMMANDS:
        add(commands)
    for command in commands.choices.values():
        _global_options(command, defaults=False)
    return parser


def _global_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """--log-level and --log-format, before the command (`defaults`: the program's, with their
    defaults) or after it (each command's: given there, they win; not given, the program's
    value stands)."""
    options = parser.add_argument_group("logging") if not defaults else parser
    options.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="INFO" if defaults else argparse.SUPPRESS,
        help="logmetrics' records below this level are dropped, from the terminal and the "
        "run's log alike (default INFO: the summary and every event; DEBUG adds detail)",
    )
    options.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text" if defaults else argparse.SUPPRESS,
        help="text: a summary on the terminal and every record in logs/logmetrics-<run "
        "id>.log; json: every record as one JSON object per line on stderr, for log shippers "
        "(default text)",
    )
