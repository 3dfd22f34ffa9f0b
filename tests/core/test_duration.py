"""One duration syntax: ``m`` is minutes everywhere; a retention refuses it as ambiguous."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sagacity.cli import main
from sagacity.config._duration import parse_duration, parse_retention, parse_seconds
from sagacity.consumers.archive._retention import parse_keep
from sagacity.errors import DurationError, RetentionError
from sagacity.producer._topic import DAY_MS
from sagacity.producer._topic import parse_retention as topic_retention


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("15m", 900), ("2h", 7200), ("7d", 604800), (" 3M ", 180)]
)
def test_short_durations_are_seconds_and_m_is_minutes(text: str, seconds: float) -> None:
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "15", "1.5h", "-3m", "0s", "ten", "2mo", "1y", "5x"])
def test_short_durations_refuse_anything_else_with_a_message(text: str) -> None:
    with pytest.raises(DurationError, match="is not a duration"):
        parse_seconds(text)


def test_a_retention_takes_days_months_or_years_and_refuses_m() -> None:
    assert parse_retention("13mo").months == 13
    assert parse_retention("2y").months == 24
    assert parse_retention("183d").months == 7  # days round up: a retention never shrinks
    with pytest.raises(DurationError, match=r"'24m' is ambiguous .* write 24mo for months"):
        parse_retention("24m")
    with pytest.raises(DurationError, match="unit must be one of d/mo/y"):
        parse_retention("48h")


def test_every_retention_option_reads_the_same_syntax() -> None:
    assert topic_retention("13mo") == 13 * 30 * DAY_MS
    assert topic_retention("infinite") == -1
    assert parse_keep("13mo") == 13
    with pytest.raises(DurationError, match="ambiguous"):
        topic_retention("13m")
    with pytest.raises(RetentionError, match="ambiguous"):
        parse_keep("24m")
    assert parse_duration("24m", units=("m",)).seconds == 1440


def test_the_cli_refuses_an_ambiguous_retention_with_one_line() -> None:
    runner = CliRunner()
    topic = runner.invoke(
        main, ["topic", "create", "--bootstrap-servers", "127.0.0.1:1", "--retention", "13m"]
    )
    assert topic.exit_code == 2
    assert "ambiguous" in topic.output
    keep = runner.invoke(
        main, ["archive", "retention", "--database-url", "postgresql://x/y", "--keep", "24m"]
    )
    assert keep.exit_code == 2
    assert "'24m' is ambiguous" in keep.output
    window = runner.invoke(
        main, ["approvals", "--url", "http://127.0.0.1:9", "stats", "--window", "2mo"]
    )
    assert window.exit_code == 2
    assert "unit must be one of s/m/h/d" in window.output
