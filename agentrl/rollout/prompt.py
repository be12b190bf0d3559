"""The system prompt template (``policy.system_prompt``, ``LoopConfig.system_prompt``).

A template is text with placeholders written ``{name}``; any other brace is kept as written
(a JSON example in the prompt needs no escaping). The placeholders:

- ``{env_instructions}``: the env's own instructions, ``info["instructions"]`` of its reset
  (``agentrl.env.contract.INFO_INSTRUCTIONS``), or, when the env gives none, the generic
  ``DEFAULT_INSTRUCTIONS`` ("You are an agent playing a text game. ...").
- ``{action_format}``: the action format's one sentence on how to write the action
  (``agentrl.rollout.parsing``; ``tag:action``: "Think briefly, then write your action as
  <action>your action</action>."; ``whole``: "Reply with the action only, e.g. `go north`.").
  Leave it out of a template to drop the sentence (e.g. a ``whole`` format in a game without
  directions, whose own instructions say how to answer).

The default, ``DEFAULT_SYSTEM_PROMPT = "{env_instructions} {action_format}"``, renders the
system prompt every env got before templates existed, unless the env gives instructions.
The rendered text is stripped of leading and trailing whitespace.
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_INSTRUCTIONS", "DEFAULT_SYSTEM_PROMPT", "PLACEHOLDERS", "check_template", "render_system"]

DEFAULT_INSTRUCTIONS = "You are an agent playing a text game. Each turn you read the game's output and choose one command."
DEFAULT_SYSTEM_PROMPT = "{env_instructions} {action_format}"
PLACEHOLDERS = ("env_instructions", "action_format")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")


def check_template(template: str) -> None:
    """Refuse a template that is not a string or names an unknown placeholder.

    Raises:
        ValueError: naming the unknown placeholder and the allowed ones.
    """
    if not isinstance(template, str):
        raise ValueError(f"the system prompt template must be a string, got {type(template).__name__}")
    unknown = [m.group(1) for m in _PLACEHOLDER.finditer(template) if m.group(1) not in PLACEHOLDERS]
    if unknown:
        allowed = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
        raise ValueError(f"unknown placeholder {{{unknown[0]}}} in the system prompt template; the allowed "
                         f"placeholders are {allowed} (other braces are kept as written)")


def render_system(template: str, env_instructions: str | None, format_instructions: str) -> str:
    """The system message: ``template`` with ``{env_instructions}`` (``env_instructions``, or
    ``DEFAULT_INSTRUCTIONS`` when None or blank) and ``{action_format}`` (the format's sentence)
    filled in, stripped.

    Raises:
        ValueError: an unknown placeholder (``check_template``).
    """
    check_template(template)
    values = {"env_instructions": (env_instructions or "").strip() or DEFAULT_INSTRUCTIONS,
              "action_format": format_instructions}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template).strip()
