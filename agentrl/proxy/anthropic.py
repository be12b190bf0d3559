"""Anthropic Messages API (``POST /v1/messages``) on the recording core.

Anthropic SDKs append ``/v1/messages`` to their base URL and send the key as ``x-api-key``:
give them ``EpisodeHandle.anthropic_base_url`` (``http://host:port/e/{key}``), or the root URL
with the episode key as the API key. A Messages request is parsed into the same
``ChatRequest`` as a chat completion, so it is recorded by the same ``ProxyCore`` (episode
keys, token-in/token-out continuation, retries and forks, exact ids and logprobs, rewards).
Mapping:

* ``system`` (a string or text blocks) → a leading system message; ``messages``: ``user``
  text blocks → a user message, each ``tool_result`` block → a ``tool`` message answering
  ``tool_use_id`` (in block order); ``assistant`` text blocks → the content and
  ``tool_use`` blocks → its tool calls (``input`` as JSON arguments); ``thinking`` /
  ``redacted_thinking`` blocks are skipped (the policy emits none; recorded in
  ``ignored_fields`` as ``messages.thinking``); images and documents are a 400 naming the
  block.
* ``tools``: custom tools (``{name, description, input_schema}``) become chat tools; server
  tools (``web_search_…``, ``bash_…`` …) are a 400 naming ``tools[i].type``.
* ``max_tokens``, ``temperature``, ``top_p`` as in chat; ``stop_sequences`` are ``stop``
  strings (``agentrl.proxy.stops``; ``stop_reason: "stop_sequence"`` and ``stop_sequence``
  name the one matched). ``tool_choice`` ``any`` / ``{"type": "tool", "name": N}`` force a tool
  call and ``output_config.format`` ``json_schema`` JSON output (``agentrl.proxy.forcing``);
  other types are a 400. ``top_k``,
  ``thinking`` and other unknown keys are ignored and recorded (``unknown_fields``).

The reply is a ``message``: a ``text`` block (when there is text, or no tool call), then one
``tool_use`` block per call; ``stop_reason`` ``end_turn | max_tokens | stop_sequence |
tool_use``. Streaming sends ``message_start``, per block ``content_block_start`` /
``content_block_delta`` (``text_delta``, ``input_json_delta``) / ``content_block_stop``,
``message_delta`` (stop reason, output tokens) and ``message_stop``; the turn is recorded
just before ``message_stop``. Errors use Anthropic's body ``{"type": "error", "error":
{"type", "message"}}``.
"""

from __future__ import annotations

import secrets
from typing import Any, AsyncIterator

import orjson

from agentrl.llm.base import SamplingParams
from agentrl.proxy.calls import PendingCall
from agentrl.proxy.errors import WireError, bad
from agentrl.proxy.forcing import messages_grammar
from agentrl.proxy.sse import content_ids, text_deltas
from agentrl.proxy.wire import (ChatRequest, ToolCall, WireMessage, content_text, flag, parse_sampling, parse_stop,
                                unknown_keys)

_KEYS = frozenset({"model", "messages", "system", "max_tokens", "temperature", "top_p", "stop_sequences", "stream",
                   "tools", "tool_choice", "output_config", "metadata", "service_tier", "cache_control",
                   "inference_geo", "speed", "diagnostics", "user_profile_id", "workspace_id"})
_ERROR_TYPES = {"conflict": "invalid_request_error", "server_error": "overloaded_error"}


def error_body(exc: WireError) -> bytes:
    """Anthropic's error body for a ``WireError`` (the message names the parameter)."""
    kind = _ERROR_TYPES.get(exc.kind, exc.kind)
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": exc.message, "param": exc.param}})


def _tool_use(block: dict, where: str) -> ToolCall:
    name, tid, args = block.get("name"), block.get("id"), block.get("input", {})
    if not isinstance(name, str) or not isinstance(tid, str):
        raise bad(f"{where} (tool_use) needs string 'id' and 'name'", where)
    return ToolCall(tid, name, args if isinstance(args, str) else orjson.dumps(args).decode())


def parse_messages(raw: Any) -> tuple[tuple[WireMessage, ...], int]:
    """Anthropic ``messages`` → wire messages and the number of skipped thinking blocks.
    Raises ``WireError`` 400 naming the bad message or block."""
    if not isinstance(raw, list) or not raw:
        raise bad("'messages' must be a non-empty list of {role, content} objects", "messages")
    out: list[WireMessage] = []
    skipped = 0
    for i, m in enumerate(raw):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            raise bad(f"messages[{i}].role is {role!r}; use 'user' or 'assistant' (system goes in 'system')",
                      f"messages[{i}].role")
        content = m.get("content")
        if isinstance(content, str) or content is None:
            out.append(WireMessage(role, content or ""))
            continue
        if not isinstance(content, list):
            raise bad(f"messages[{i}].content must be a string or a list of content blocks", f"messages[{i}].content")
        text, calls = [], []
        for j, block in enumerate(content):
            where = f"messages[{i}].content[{j}]"
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            if kind == "text":
                if not isinstance(block.get("text"), str):
                    raise bad(f"{where}.text must be a string", where)
                text.append(block["text"])
            elif kind in ("thinking", "redacted_thinking"):
                skipped += 1
            elif kind == "tool_use" and role == "assistant":
                calls.append(_tool_use(block, where))
            elif kind == "tool_result" and role == "user":
                if text:  # text before a result: its own user message, in order
                    out.append(WireMessage("user", "".join(text)))
                    text = []
                tid = block.get("tool_use_id")
                if not isinstance(tid, str):
                    raise bad(f"{where} (tool_result) needs a string 'tool_use_id'", where)
                out.append(WireMessage("tool", content_text(block.get("content"), where), tool_call_id=tid))
            else:
                raise bad(f"{where} has type {kind!r}; {role} messages take text"
                          f"{', tool_use' if role == 'assistant' else ', tool_result'} and thinking blocks",
                          f"{where}.type")
        if role == "assistant":
            out.append(WireMessage("assistant", "".join(text), tuple(calls)))
        elif text or not any(b.get("type") == "tool_result" for b in content if isinstance(b, dict)):
            out.append(WireMessage("user", "".join(text)))
    return tuple(out), skipped


def parse_tools(raw: Any) -> tuple[dict, ...]:
    """Anthropic custom tools → chat tool dicts. Raises ``WireError`` 400 on server tools."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise bad("'tools' must be a list of tool objects", "tools")
    out = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict) or t.get("type") not in (None, "custom") or not isinstance(t.get("name"), str):
            kind = t.get("type") if isinstance(t, dict) else type(t).__name__
            raise bad(f"tools[{i}] has type {kind!r}; only custom tools ({{name, description, input_schema}}) run "
                      f"through the recording proxy", f"tools[{i}].type")
        fn = {"name": t["name"]}
        if t.get("description") is not None:
            fn["description"] = t["description"]
        if t.get("input_schema") is not None:
            fn["parameters"] = t["input_schema"]
        out.append({"type": "function", "function": fn})
    return tuple(out)


def parse_anthropic(data: dict, default: SamplingParams, *, strict: bool = False) -> ChatRequest:
    """Parse a Messages body into a ``ChatRequest`` (dialect ``messages``). Raises ``WireError`` 400."""
    ignored = unknown_keys(data, _KEYS, "messages", strict)
    choice = data.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else choice
    config = data.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise bad(f"'output_config' must be an object, got {config!r}", "output_config")
    system = data.get("system")
    system = content_text(system, "system") if system is not None else ""
    conv, skipped = parse_messages(data.get("messages"))
    sub = {k: data[k] for k in ("temperature", "top_p", "max_tokens") if k in data}
    sampling, sent = parse_sampling(sub, default)
    tools = parse_tools(data.get("tools"))
    grammar = messages_grammar(choice, (config or {}).get("format"), tools)
    return ChatRequest(messages=((WireMessage("system", system),) if system else ()) + conv,
                       tools=tools if kind != "none" else (), sampling=sampling, sent=sent,
                       stream=flag(data, "stream"), model=str(data.get("model") or ""),
                       stop=parse_stop(data.get("stop_sequences"), "stop_sequences"),
                       ignored=ignored + (("messages.thinking",) if skipped else ()), dialect="messages",
                       grammar=grammar)


def _blocks(call: PendingCall) -> list[dict]:
    blocks = [{"type": "text", "text": call.content}] if call.content or not call.tool_calls else []
    for tc in call.tool_calls:
        try:
            args = orjson.loads(tc.arguments)
        except orjson.JSONDecodeError:
            args = None
        blocks.append({"type": "tool_use", "id": tc.id, "name": tc.name,
                       "input": args if isinstance(args, dict) else {"arguments": tc.arguments}})
    return blocks


def _stop(call: PendingCall) -> tuple[str, str | None]:
    if call.tool_calls:
        return "tool_use", None
    if call.stop is not None:
        return "stop_sequence", call.stop.stop
    return ("max_tokens" if call.finish_reason == "length" else "end_turn"), None


def message_body(call: PendingCall, mid: str | None = None, *, final: bool = True) -> dict:
    """The ``message`` object of a call (``final=False``: the ``message_start`` shell)."""
    reason, seq = _stop(call) if final else (None, None)
    return {"id": mid or f"msg_{secrets.token_hex(12)}", "type": "message", "role": "assistant",
            "model": call.request.model or call.core.model_name, "content": _blocks(call) if final else [],
            "stop_reason": reason, "stop_sequence": seq,
            "usage": {"input_tokens": int(call.plan.prompt_ids.size),
                      "output_tokens": int(call.completion.token_ids.size) if final else 0}}


async def sse_anthropic(call: PendingCall) -> AsyncIterator[bytes]:
    """The Messages event stream of a call; records the turn just before ``message_stop``
    and finishes the call when the stream ends (as ``sse.sse_chat``)."""
    delivered = False

    def ev(kind: str, **data) -> bytes:
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"
    try:
        yield ev("message_start", message=message_body(call, f"msg_{secrets.token_hex(12)}", final=False))
        for index, block in enumerate(_blocks(call)):
            if block["type"] == "text":
                yield ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
                deltas = (text_deltas(call.core.renderer.tokenizer, content_ids(call), call.content)
                          if not call.tool_calls else [(call.content, 0, 0)])
                for text, _, _ in deltas:
                    yield ev("content_block_delta", index=index, delta={"type": "text_delta", "text": text})
            else:
                yield ev("content_block_start", index=index, content_block={**block, "input": {}})
                yield ev("content_block_delta", index=index,
                         delta={"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()})
            yield ev("content_block_stop", index=index)
        reason, seq = _stop(call)
        yield ev("message_delta", delta={"stop_reason": reason, "stop_sequence": seq},
                 usage={"output_tokens": int(call.completion.token_ids.size)})
        final = ev("message_stop")
        call.commit()
        yield final
        delivered = True
    finally:
        call.finish(delivered)
