"""Action formats: how an action is read out of a completion's text.

Formats (``parse_format``):
- ``"tag:NAME"`` (default ``tag:action``): the text inside the first ``<NAME>…</NAME>``;
- ``"regex:PATTERN"``: group 1 of the first match (``re.DOTALL``);
- ``"whole"``: the whole completion;
- ``"hiper"``: HiPER's three tags (ALGORITHMS.md §14.2), ``<switch>KEEP|SWITCH</switch>
  <subgoal>…</subgoal><action>…</action>``: the action is the ``<action>`` text as with
  ``tag:action``, and ``parse_hiper`` reads the switch, the subgoal and the character span of
  each tag (the agent loop records them in ``Turn.info``).
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
from typing import Callable

import numpy as np

from agentrl.env.contract import ACTION_EXACT, normalize_action
from agentrl.llm.chat import ChatRenderer


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
        turn_info: optional ``(renderer, completion_ids int[C]) -> dict``: what the format reads
            from a completion besides the action, merged into ``Turn.info`` by the agent loop
            (``hiper``: the switch, the subgoal and each tag's token span, ``hiper_info``); an
            estimator that needs them declares the format (``register_estimator(action_format=...)``).
    """

    spec: str
    pattern: re.Pattern | None
    instructions: str
    turn_info: Callable[[ChatRenderer, np.ndarray], dict] | None = None

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


HIPER_FORMAT = "hiper"
HIPER_INSTRUCTIONS = ("Each turn, first decide whether to keep your current subgoal or switch to a new one: "
                      "<switch>KEEP</switch> or <switch>SWITCH</switch>; then state the subgoal you pursue as "
                      "<subgoal>your subgoal</subgoal>; then write your action as <action>your action</action>.")
_HIPER_TAGS = {name: re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL) for name in ("switch", "subgoal", "action")}


@dataclass(frozen=True)
class HiperTags:
    """HiPER's tags of one completion (ALGORITHMS.md §14.2).

    Attributes:
        switch: True iff the ``<switch>`` content, stripped and upper-cased, is not a keep value
            (a new segment starts); a missing or empty tag is KEEP (False).
        subgoal: the exact ``<subgoal>`` content, None when the tag is missing.
        spans: ``{"switch" | "subgoal" | "action": (start, end) or None}``, character ranges of
            each first tag *with* its tags in the text; ``action`` is the whole text when the
            completion has no ``<action>`` tag (it is then trained with A^lo, §14.5).
    """

    switch: bool
    subgoal: str | None
    spans: dict

    @property
    def has_switch(self) -> bool:
        """The completion has a ``<switch>`` tag (a switch span)."""
        return self.spans["switch"] is not None


def parse_hiper(text: str, keep_values: tuple[str, ...] = ("KEEP",)) -> HiperTags:
    """Read HiPER's ``<switch>``, ``<subgoal>`` and ``<action>`` tags from a completion's text
    (the first of each; arXiv 2602.16165, upstream ``AlfredTWEnvOptions`` projection).

    Args:
        text: the completion text (decoded from its ids, without EOS).
        keep_values: switch contents (compared stripped and upper-cased) that mean KEEP.
    Returns:
        ``HiperTags``.
    """
    found = {name: pat.search(text) for name, pat in _HIPER_TAGS.items()}
    sw = found["switch"]
    switch = sw is not None and bool(sw.group(1).strip()) and sw.group(1).strip().upper() not in \
        {k.strip().upper() for k in keep_values}
    spans = {name: (m.start(), m.end()) if m is not None else None for name, m in found.items()}
    if spans["action"] is None:
        spans["action"] = (0, len(text))
    sub = found["subgoal"]
    return HiperTags(switch, None if sub is None else sub.group(1), spans)


def hiper_info(renderer: ChatRenderer, completion_ids: np.ndarray) -> dict:
    """``Turn.info`` entries of HiPER's tags in a completion (``agentrl.rollout.parsing.parse_hiper`` on
    its decoded text): ``switch`` (bool, not KEEP), ``switch_span`` (bool, a ``<switch>`` tag is there),
    ``subgoal`` (str; absent when the tag is missing) and ``hiper_spans``: ``{"switch" | "subgoal" |
    "action": [start, end] or None}``, token ranges in ``completion_ids`` (tags included; the action
    span is the whole completion without EOS when there is no ``<action>`` tag)."""
    tags = parse_hiper(renderer.completion_text(completion_ids))
    names = ("switch", "subgoal", "action")
    spans = renderer.token_spans(completion_ids, [tags.spans[k] for k in names])
    info = {"switch": tags.switch, "switch_span": tags.has_switch,
            "hiper_spans": {k: None if sp is None else [int(sp[0]), int(sp[1])] for k, sp in zip(names, spans)}}
    if tags.subgoal is not None:
        info["subgoal"] = tags.subgoal
    return info


def parse_format(spec: str = "tag:action") -> ActionFormat:
    """Compile an action format string.

    Raises:
        ValueError: an unknown kind, an invalid tag name, or a regex without a group.
    """
    kind, _, arg = spec.partition(":")
    if spec == HIPER_FORMAT:
        return ActionFormat(spec, _HIPER_TAGS["action"], HIPER_INSTRUCTIONS, hiper_info)
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
    raise ValueError(f"unknown action format {spec!r}; use 'tag:action', 'regex:<pattern with one group>', 'whole' or 'hiper'")
