"""How ``agentrl <command> --help`` reads: the sub-command module docstrings without their
reStructuredText markup (````code````, ``**bold**``, ``:func:`x``` become plain text), the
paragraphs kept as written, and each option's default shown (``(default: X)``) unless its help
already names one or there is none to show (None, False, a suppressed default)."""

from __future__ import annotations

import argparse
import re

__all__ = ["HelpFormatter", "plain_doc", "polish"]

_ROLE = re.compile(r":[a-z]+:`([^`]+)`")


def plain_doc(text: str | None) -> str | None:
    """``text`` with RST inline markup removed (``None`` stays ``None``)."""
    if text is None:
        return None
    text = _ROLE.sub(r"\1", text)
    return text.replace("``", "").replace("**", "")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Raw description (paragraphs as written) plus each option's default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        default = action.default
        if ("default" in help_text or default in (None, False, argparse.SUPPRESS) or action.option_strings == []
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction))):
            return help_text
        return f"{help_text} (default: %(default)s)"


def polish(parser: argparse.ArgumentParser) -> None:
    """Apply ``HelpFormatter`` and ``plain_doc`` to ``parser`` and every sub-command parser below it."""
    parser.formatter_class = HelpFormatter
    parser.description = plain_doc(parser.description)
    parser.epilog = plain_doc(parser.epilog)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                polish(sub)
        elif action.help:
            action.help = plain_doc(action.help)
