"""Which day a command computes or judges: `--date`, the day before `--day-before` (a
scheduler's trigger date), or yesterday (UTC). Parsing only, no Spark."""

from __future__ import annotations

import datetime as dt

import pytest

from logmetrics.cli import main
from logmetrics.cli.alerts import alerts_range
from logmetrics.cli.compute import run_day
from logmetrics.cli.parser import build_parser
from logmetrics.errors import ConfigError

CONFIG = ["--config", "job.yaml"]


def _parse(*argv: str) -> object:
    return build_parser().parse_args(list(argv))


def test_run_computes_the_day_before_the_trigger_date_across_a_month_and_a_year() -> None:
    assert run_day(_parse("run", *CONFIG, "--day-before", "2026-03-01")) == dt.date(2026, 2, 28)
    assert run_day(_parse("run", *CONFIG, "--day-before", "2028-03-01")) == dt.date(2028, 2, 29)
    assert run_day(_parse("run", *CONFIG, "--day-before", "2027-01-01")) == dt.date(2026, 12, 31)
    assert run_day(_parse("run", *CONFIG, "--date", "2026-03-01")) == dt.date(2026, 3, 1)


def test_run_without_a_date_computes_yesterday_utc() -> None:
    before = dt.datetime.now(dt.UTC).date()
    day = run_day(_parse("run", *CONFIG))
    after = dt.datetime.now(dt.UTC).date()
    assert day in {before - dt.timedelta(days=1), after - dt.timedelta(days=1)}


def test_alerts_judge_the_one_day_the_run_computed() -> None:
    run = run_day(_parse("run", *CONFIG, "--day-before", "2026-03-02"))
    judged = alerts_range(_parse("alerts", *CONFIG, "--day-before", "2026-03-02"))
    assert judged == (run, run) == (dt.date(2026, 3, 1), dt.date(2026, 3, 1))
    ranged = alerts_range(_parse("alerts", *CONFIG, "--start", "2026-03-01", "--end", "2026-03-03"))
    assert ranged == (dt.date(2026, 3, 1), dt.date(2026, 3, 3))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["alerts", *CONFIG], "give --start and --end, or --day-before"),
        (["alerts", *CONFIG, "--start", "2026-03-01"], "give --start and --end, or --day-before"),
        (
            ["alerts", *CONFIG, "--day-before", "2026-03-02", "--end", "2026-03-01"],
            "--day-before replaces --start and --end",
        ),
        (["alerts", *CONFIG, "--start", "2026-03-02", "--end", "2026-03-01"], "is after --end"),
    ],
)
def test_alerts_need_one_way_of_naming_their_days(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        alerts_range(_parse(*argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["run", *CONFIG, "--date", "2026-03-01", "--day-before", "2026-03-02"],
        ["run", *CONFIG, "--day-before", "0001-01-01"],
        ["run", *CONFIG, "--day-before", "2026-02-30"],
        ["alerts", *CONFIG, "--day-before", "{{job.trigger.time.iso_date}}"],
    ],
)
def test_bad_day_before_is_a_usage_error_before_spark_starts(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("logmetrics: error: ")


def test_the_entry_point_leaves_with_the_exit_status(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wheel task may ignore what the entry point returns: a failure leaves as SystemExit,
    success returns normally."""
    from logmetrics import cli
    from logmetrics.cli import app

    monkeypatch.setattr(app, "main", lambda: 4)
    with pytest.raises(SystemExit) as left:
        cli.entry_point()
    assert left.value.code == 4
    monkeypatch.setattr(app, "main", lambda: 0)
    assert cli.entry_point() is None
