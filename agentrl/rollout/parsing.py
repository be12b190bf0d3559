"""Action formats: how an action is read out of a completion's text.

Formats (``parse_format``):
- ``"tag:NAME"`` (default ``tag:action``): the text inside the first ``<NAME>…</NAME>``;
- ``"regex:PATTERN"``: group 1 of the first match (``re.DOTALL``);
- ``"whole"``: the whole completion.
The action is the extracted text *exactly* (code and JSON tool calls keep every newline
and indent) unless the env asks for normalisation (``normalize``; an env declares it in
its class's ``metadata["agentrl.action_normalize"]``, ``agentrl.env.action_normalization``):
``"whitespace"`` strips it and collapses whitespace runs to one space (text-game commands).
No match or a blank action is *unparsable*: the loop sends ``""`` to the env and stores the
turn with ``action_valid=False`` (the env answers with its invalid-action feedback).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentrl.env.contract import ACTION_EXACT, normalize_action


@dataclass(frozen=True)
class ParsedAction:
    """Result of parsing one completion.

    Attributes:
        text: the action text ("" when unparsable).
        ok: the format matched and the action is non-empty.
    """

    text: str
    ok: bool


@dataclass(frozen=True)
class ActionFormat:
    """A compiled action format.

    Attributes:
        spec: the format string it was built from.
        pattern: compiled regex with one group, or None for the whole completion.
        instructions: one sentence telling the model how to write its action.
    """

    spec: str
    pattern: re.Pattern | None
    instructions: str

    def parse(self, text: str, normalize: str = ACTION_EXACT) -> ParsedAction:
        """Extract the action from ``text`` and normalise it as ``normalize`` says
        (``"exact"``: unchanged, ``"whitespace"``; see the module docstring)."""
        if self.pattern is None:
            raw = text
        else:
            m = self.pattern.search(text)
            if m is None:
                return ParsedAction("", False)
            raw = m.group(1)
        if not raw.strip():
            return ParsedAction("", False)
        return ParsedAction(normalize_action(raw, normalize), True)


def parse_format(spec: str = "tag:action") -> ActionFormat:
    """Compile an action format string.

    Raises:
        ValueError: an unknown kind, an invalid tag name, or a regex without a group.
    """
    kind, _, arg = spec.partition(":")
    if kind == "whole" and not arg:
        return ActionFormat(spec, None, "Reply with the action only, e.g. `go north`.")
    if kind == "tag" and re.fullmatch(r"[A-Za-z_][\w-]*", arg or ""):
        pat = re.compile(rf"<{re.escape(arg)}>(.*?)</{re.escape(arg)}>", re.DOTALL)
        return ActionFormat(spec, pat, f"Think briefly, then write your action as <{arg}>your action</{arg}>.")
    if kind == "regex" and arg:
        try:
            pat = re.compile(arg, re.DOTALL)
        except re.error as exc:
            raise ValueError(f"action format {spec!r}: invalid regex ({exc})") from None
        if pat.groups < 1:
            raise ValueError(f"action format {spec!r}: the regex needs one capture group around the action")
        return ActionFormat(spec, pat, "Write your action in the required format.")
    raise ValueError(f"unknown action format {spec!r}; use 'tag:action', 'regex:<pattern with one group>' or 'whole'")
