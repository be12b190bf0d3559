"""Stored or user-given text made safe to print on a terminal.

Stored text (observations, actions, task ids, run ids, errors) is untrusted: written raw it
can carry terminal control sequences (``"\\x1b[2J"`` clears the screen, OSC sequences set
the title or write to the clipboard), and rich parses ``[...]`` in plain strings as markup
(``"[/]"`` raises ``MarkupError``). ``visible`` shows every control character except newline
and tab as a ``\\xNN`` / ``\\uNNNN`` escape; ``text`` wraps the result in a ``rich.text.Text``,
which rich never parses as markup; ``markup_safe`` escapes it for an f-string that also holds
markup of our own.
"""

from __future__ import annotations

import re

# C0 controls but newline and tab, DEL, C1 controls; bidi overrides/isolates (text that reads
# in another order than it runs, "trojan source")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(s: object) -> str:
    """``str(s)`` with each control character except ``\\n`` and ``\\t`` written as an escape
    (``"\\x1b"`` becomes the four characters ``\\x1b``); other text unchanged."""
    return _CONTROL.sub(_escape, str(s))


def text(s: object, style: str = ""):
    """``rich.text.Text`` of ``visible(s)``: printed literally (no markup), in ``style``."""
    from rich.text import Text

    return Text(visible(s), style=style)


def markup_safe(s: object) -> str:
    """``visible(s)`` with rich markup escaped, for use inside a markup string."""
    from rich.markup import escape

    return escape(visible(s))
