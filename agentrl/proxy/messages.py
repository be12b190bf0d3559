"""Wire messages ↔ template messages, tool calls, and the canonical form used to compare
histories.

Tools follow the Hermes / Qwen convention, which the proxy applies itself because the
renderer passes only ``role`` and ``content`` to the chat template: tool definitions are
appended to the system message inside ``<tools></tools>``, the model answers a call as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` and tool results are ``tool``
messages. ``split_tool_calls`` parses the sampled text back into OpenAI ``tool_calls``
(only the wire response is parsed: the recorded ids stay the sampled ones).
"""

from __future__ import annotations

import secrets
from typing import Sequence

import orjson

from agentrl.llm.tool_text import tool_call_blocks
from agentrl.proxy.wire import ToolCall, WireMessage
from agentrl.types import Message

TOOLS_HEADER = ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n")
TOOLS_FOOTER = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                "\"arguments\": <args-json-object>}\n</tool_call>")


def _args_obj(arguments: str):
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments


def format_tool_call(tc: ToolCall) -> str:
    """The text a model writes for one call (Hermes format)."""
    body = orjson.dumps({"name": tc.name, "arguments": _args_obj(tc.arguments)}).decode()
    return f"<tool_call>\n{body}\n</tool_call>"


def to_template(messages: Sequence[WireMessage], tools: Sequence[dict]) -> tuple[Message, ...]:
    """Template messages for ``messages``: tools folded into the system message (one is
    added when absent), assistant tool calls written out as ``<tool_call>`` blocks."""
    out = []
    for m in messages:
        content = m.content
        if m.role == "assistant" and m.tool_calls:
            content = "\n".join([content] * bool(content) + [format_tool_call(tc) for tc in m.tool_calls])
        out.append(Message(m.role, content))
    if tools:
        listed = "\n".join(orjson.dumps(t, option=orjson.OPT_SORT_KEYS).decode() for t in tools)
        spec = TOOLS_HEADER + listed + TOOLS_FOOTER
        if out and out[0].role == "system":
            out[0] = Message("system", out[0].content + spec)
        else:
            out.insert(0, Message("system", spec.lstrip()))
    return tuple(out)


def split_tool_calls(text: str, *, tools_offered: bool) -> tuple[str, tuple[ToolCall, ...]]:
    """Content and tool calls of a sampled assistant text.

    Blocks (``agentrl.llm.tool_text``: closed ones and a final unterminated one) that do not
    hold a JSON object with a string ``name`` stay in the content.
    Without ``tools_offered`` nothing is parsed. Each call gets a fresh id ``call_<hex>``.
    """
    if not tools_offered:
        return text, ()
    calls, kept, last = [], [], 0
    for m in tool_call_blocks(text):
        try:
            obj = orjson.loads(m.body)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        args = obj.get("arguments", {})
        calls.append(ToolCall(f"call_{secrets.token_hex(12)}", obj["name"],
                              args if isinstance(args, str) else orjson.dumps(args).decode()))
        kept.append(text[last:m.start])
        last = m.end
    kept.append(text[last:])
    return ("".join(kept).strip() if calls else text), tuple(calls)


def canonical(m: WireMessage) -> tuple:
    """Comparison key of a message for the history-extension test (MODELS.md §5.5):
    assistant turns with tool calls are anchored on the call ids and names with
    whitespace-insensitive argument JSON; every other field must match exactly."""
    calls = tuple((tc.id, tc.name, orjson.dumps(_args_obj(tc.arguments), option=orjson.OPT_SORT_KEYS))
                  for tc in m.tool_calls)
    return (m.role, m.content.strip() if calls else m.content, calls, m.tool_call_id)


def thread_key(messages: Sequence[WireMessage], tools: Sequence[dict]) -> bytes:
    """Fingerprint of a thread: the system message (and tools). Sub-agents and side calls
    (titles, summaries) usually bring their own system prompt, so they do not break the
    main thread's token prefix; a compaction that keeps the system prompt is a fork."""
    system = messages[0].content if messages and messages[0].role == "system" else ""
    return orjson.dumps([system, list(tools)], option=orjson.OPT_SORT_KEYS)


def assistant_message(content: str, calls: Sequence[ToolCall]) -> dict:
    """The OpenAI ``message`` object of a reply."""
    msg: dict = {"role": "assistant", "content": content if (content or not calls) else None}
    if calls:
        msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for c in calls]
    return msg
