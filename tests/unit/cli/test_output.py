"""allot_cli.output: tables, times and numbers as people read them; `main`'s own exits."""

from __future__ import annotations

from datetime import UTC, datetime

from allot_cli.main import main
from allot_cli.output import ago, number, span, table, when

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_table_aligns_and_right_aligns_numbers():
    assert table(["ID", "NAME", "GPUS"], [[7, "resnet", 8], [12, "a", None]],
                 right=(0, 2)).splitlines() == [
        "ID  NAME    GPUS",
        " 7  resnet     8",
        "12  a"]


def test_spans_and_times():
    assert [span(s) for s in (5, 59, 60, 3599, 3600, 4800, 86400, 90000, -120)] == [
        "5s", "59s", "1m", "59m", "1h", "1h 20m", "1d", "1d 1h", "2m"]
    assert when("2026-05-01T13:20:00Z", NOW) == "2026-05-01 13:20 UTC (in 1h 20m)"
    assert when("2026-05-01T11:55:00.123+00:00", NOW) == "2026-05-01 11:55 UTC (5m ago)"
    assert when(None, NOW) == "-"
    assert ago("2026-04-29T12:00:00Z", NOW) == "2d"
    assert [number(v) for v in (8.0, 7.5, 3, None)] == ["8", "7.5", "3", "-"]


def test_help_version_and_usage_errors_exit_as_argparse_says(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "allot 0.1.0"
    assert main(["--help"]) == 0
    assert "exit codes: 0 ok, 1 refused" in capsys.readouterr().out
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["list", "--limit", "0"]) == 2
    assert "0 < 1: must be at least 1" in capsys.readouterr().err
