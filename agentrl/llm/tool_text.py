"""Hermes / Qwen tool-call blocks in sampled text — the one parser of the format.

The chat templates of Qwen2.5/Qwen3, Hermes and SmolLM2 write a function call as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. ``tool_call_blocks`` finds them
as vLLM's Hermes parser does: every closed block, and a final block left unterminated (a
completion cut by ``max_tokens`` or a stop id right after the JSON). The proxy
(``agentrl.proxy.messages.split_tool_calls``) and the tool-use code env
(``envs/code/tool_calls.py``) both read calls through it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["OPEN_TAG", "CLOSE_TAG", "ToolCallBlock", "tool_call_blocks"]

OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)


@dataclass(frozen=True, slots=True)
class ToolCallBlock:
    """One block: ``body`` (the text between the tags, stripped; JSON if well-formed) and the
    character span ``[start, end)`` of the whole block in the text."""

    body: str
    start: int
    end: int


def tool_call_blocks(text: str) -> list[ToolCallBlock]:
    """The ``<tool_call>`` blocks of ``text`` in order (closed ones, then possibly one
    unterminated block running to the end of the text). ``[]`` when there is none."""
    if OPEN_TAG not in text:
        return []
    return [ToolCallBlock(m.group(1), m.start(), m.end()) for m in _BLOCK.finditer(text)]
