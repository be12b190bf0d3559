"""Pull the Python code out of an agent's answer (markdown fences when present)."""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_PY_TAGS = {"", "python", "py", "python3"}


def extract_code(text: str, entry_point: str | None = None) -> str | None:
    """The code in ``text``, or None when there is none.

    With fenced blocks: the last Python (or untagged) block that defines ``entry_point``,
    else the last Python/untagged block (an unterminated final fence counts). Without
    fences: the whole text if it parses as Python and is not blank.
    """
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    py = [body for tag, body in blocks if tag in _PY_TAGS and body.strip()]
    if py:
        if entry_point:
            defining = [b for b in py if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", b, re.M)]
            if defining:
                return defining[-1].rstrip() + "\n"
        return py[-1].rstrip() + "\n"
    if blocks or not text.strip():
        return None
    try:
        ast.parse(text)
    except SyntaxError:
        try:  # a body-only completion (indented statements) is also code
            ast.parse("def _f():\n" + text)
        except SyntaxError:
            return None
    return text
