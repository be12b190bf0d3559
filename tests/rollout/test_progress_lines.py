"""Issue 23 item 5: progress a person can read in a log file — plain lines with count, rate and
ETA when stdout is not a terminal (a rich bar on a terminal), through ``agentrl rollout`` too."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from agentrl.cli import main
from agentrl.rollout.progress import INTERVAL_ENV, PhaseProgress


def _lines(buf: io.StringIO) -> list[str]:
    return [x for x in buf.getvalue().splitlines() if x.strip()]


def test_plain_lines_with_rate_and_eta_when_not_a_terminal(monkeypatch) -> None:
    clock = iter([100.0, 110.0, 120.0, 130.0, 140.0]).__next__
    monkeypatch.setattr("agentrl.rollout.progress.time.monotonic", clock)
    buf = io.StringIO()
    with PhaseProgress("rollout", 4, console=Console(file=buf), interval_s=5.0) as p:
        p.advance(1, turns=3)   # t = 110: 1/4 after 10 s
        p.advance(1, turns=7)   # t = 120
        p.advance(2, turns=12)  # t = 130: done, no mid line for the last units; the end line at t = 140
    lines = _lines(buf)
    assert lines[0] == "rollout: 0/4 episodes · 0 s elapsed"
    assert lines[1] == "rollout: 1/4 episodes · 3 turns · 0.10 episodes/s · 10 s elapsed · ETA 30 s"
    assert lines[2] == "rollout: 2/4 episodes · 7 turns · 0.10 episodes/s · 20 s elapsed · ETA 20 s"
    assert lines[3] == "rollout: 4/4 episodes · 12 turns · 0.10 episodes/s · 40 s elapsed · done"
    assert len(lines) == 4


def test_interval_limits_the_lines_and_a_terminal_gets_a_bar(monkeypatch) -> None:
    buf = io.StringIO()
    with PhaseProgress("eval", 50, console=Console(file=buf), interval_s=3600) as p:
        for _ in range(50):
            p.advance()
    assert len(_lines(buf)) == 2  # the start and the end only
    term = io.StringIO()
    with PhaseProgress("eval", 3, console=Console(file=term, force_terminal=True, width=80)) as p:
        p.advance(3)
    assert "ETA" not in term.getvalue() and "━" in term.getvalue()  # rich's bar, not plain lines
    quiet = io.StringIO()
    with PhaseProgress("eval", 3, console=Console(file=quiet), enabled=False) as p:
        p.advance(3)
    assert quiet.getvalue() == ""
    monkeypatch.setenv(INTERVAL_ENV, "soon")
    with pytest.raises(ValueError, match="AGENTRL_PROGRESS_INTERVAL_S='soon' is not a number"):
        PhaseProgress("x", 1)


def test_rollout_cli_writes_plain_progress_lines(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "0")
    rc = main(["rollout", "agentrl/Toy-v0", "--policy", "random", "--episodes", "4", "--group", "2",
               "--store", str(tmp_path / "s.sqlite"), "--workers", "1"])
    out = capsys.readouterr().out
    assert rc == 0
    assert re.search(r"rollout agentrl/Toy-v0 · random: 0/4 episodes", out)
    assert re.search(r"rollout agentrl/Toy-v0 · random: 4/4 episodes · [\d.]+ episodes/s · \d+ s elapsed · done", out)
