"""Issue 23 item 12: every sub-command's --help is plain text (no reStructuredText markup from
the module docstrings) and shows the options' defaults."""

from __future__ import annotations

import argparse

import pytest

from agentrl.cli import build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_help_is_plain_text(name: str) -> None:
    text = _subcommands()[name].format_help()
    assert "``" not in text and "**" not in text and ":func:" not in text, text


def test_help_shows_defaults() -> None:
    text = " ".join(_subcommands()["rollout"].format_help().split())
    assert "total episodes, a multiple of --group (default: 8)" in text
    assert "SQLite turn store file (created if missing)" in text and "(default: None)" not in text
