"""OpenAI-format tool calls for ``HumanEvalToolsEnv``: the tool schemas and a lenient,
explicit parser.

Accepted action strings (exactly one call per turn):

* an OpenAI ``tool_call`` object: ``{"id": "call_1", "type": "function", "function":
  {"name": "submit", "arguments": "{\\"code\\": \\"...\\"}"}}`` (arguments as a JSON string
  or an object);
* the short form ``{"name": "submit", "arguments": {"code": "..."}}``;
* an assistant message ``{"tool_calls": [...]}`` or a one-element JSON list of calls;
* Hermes/Qwen text: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass

from agentrl.llm.tool_text import tool_call_blocks

TOOL_NAMES = ("run_python", "submit")
TOOLS: list[dict] = [
    {"type": "function", "function": {
        "name": "run_python",
        "description": "Run Python code in a fresh sandbox and return its exit code, stdout and stderr. "
                       "Use it to try your function on examples; it does not run the hidden tests.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "Python source"}},
                       "required": ["code"]}}},
    {"type": "function", "function": {
        "name": "submit",
        "description": "Submit the complete function for grading against the hidden tests.",
        "parameters": {"type": "object", "properties": {
            "code": {"type": "string", "description": "the complete function, imports included"}},
            "required": ["code"]}}},
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A parsed call: tool ``name``, its ``code`` argument and the caller's ``call_id``
    (empty when none was given)."""

    name: str
    code: str
    call_id: str = ""


class ToolCallError(ValueError):
    """The action is not one valid call of ``run_python``/``submit``; the message says why
    and is shown to the agent."""


def _calls_from(obj: object) -> list:
    if isinstance(obj, dict) and "tool_calls" in obj:
        obj = obj["tool_calls"]
    if isinstance(obj, list):
        return obj
    return [obj]


def parse_tool_call(action: str) -> ToolCall:
    """Parse ``action`` into one ``ToolCall``.

    Raises:
        ToolCallError: not JSON, no call, several calls, unknown tool (closest name
            suggested) or a missing/non-string ``code`` argument.
    """
    tagged = [b.body for b in tool_call_blocks(action)]
    texts = tagged if tagged else [action.strip()]
    calls = []
    for text in texts:
        try:
            calls += _calls_from(json.loads(text))
        except json.JSONDecodeError as exc:
            raise ToolCallError(f"the tool call is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if len(calls) != 1:
        raise ToolCallError(f"expected exactly one tool call per turn, got {len(calls)}")
    call = calls[0]
    if not isinstance(call, dict):
        raise ToolCallError("a tool call must be a JSON object with 'name' and 'arguments'")
    fn = call.get("function", call)
    name, args = fn.get("name") if isinstance(fn, dict) else None, fn.get("arguments", {}) if isinstance(fn, dict) else {}
    if name not in TOOL_NAMES:
        guess = difflib.get_close_matches(str(name), TOOL_NAMES, n=1)
        hint = f"; did you mean {guess[0]!r}?" if guess else ""
        raise ToolCallError(f"unknown tool {name!r}{hint} Available tools: {', '.join(TOOL_NAMES)}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolCallError(f"the arguments of {name} are not valid JSON ({exc.msg})") from None
    code = args.get("code") if isinstance(args, dict) else None
    if not isinstance(code, str) or not code.strip():
        raise ToolCallError(f"{name} needs a non-empty string argument 'code'")
    return ToolCall(name, code, str(call.get("id", "")))
