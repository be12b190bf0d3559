"""OpenAI Responses API (``POST /v1/responses``) on the recording core.

A Responses request is parsed into the same ``ChatRequest`` as a chat completion, so it
goes through the same ``ProxyCore``: episode keys and base URLs, token-in/token-out
continuation, retries and forks, exact ids and logprobs, rewards. Mapping:

* ``instructions`` → a leading system message; ``input`` (a string, or items) → messages:
  ``message`` items (roles ``user | system | developer | assistant``; ``input_text`` /
  ``output_text`` parts), ``function_call`` items → the assistant message's tool calls
  (``call_id`` is the call id; consecutive ones, and an assistant message of the same
  response just before them, form one assistant message, as the reply was), and
  ``function_call_output`` items → ``tool`` messages. ``reasoning`` items are skipped (the
  policy emits none; their count is recorded as ``input.reasoning``); other item types are
  a 400 naming ``input[i].type``.
* ``previous_response_id``: the conversation of that response (its input items and its
  output, not its ``instructions``, as OpenAI does) is put before ``input``. Responses of
  the open episode are kept in memory (the last 256); an unknown id is a 400.
* ``tools``: ``function`` tools (``{type, name, description, parameters}``) become chat
  tools; hosted tools (``web_search``, ``file_search`` ...) are a 400 naming ``tools[i].type``.
* ``max_output_tokens`` → ``max_tokens``; ``temperature``, ``top_p``, ``seed`` as in chat;
  ``top_logprobs`` and ``include: ["message.output_text.logprobs"]`` return logprobs on the
  ``output_text`` part. ``tool_choice`` ``required`` / ``{"type": "function", "name": N}`` force
  a tool call and ``text.format`` ``json_object`` / ``json_schema`` JSON output
  (``agentrl.proxy.forcing``). Refused (400): other ``tool_choice`` / ``text.format`` types,
  ``background: true``, ``conversation``, ``prompt``.

The reply is a ``response`` object whose ``output`` is an assistant ``message`` item (when
there is text, or no tool call) followed by one ``function_call`` item per tool call;
status ``incomplete`` (``max_output_tokens``) when the token budget ran out. Streaming
sends ``response.created``, ``response.in_progress``, per item ``output_item.added`` /
``content_part.added`` / ``output_text.delta``… / ``output_text.done`` /
``content_part.done`` / ``output_item.done`` (``function_call_arguments.delta`` / ``.done``
for calls), then ``response.completed`` (or ``response.incomplete``); the turn is recorded
just before that last event, as for chat.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import orjson

from agentrl.llm.base import SamplingParams
from agentrl.proxy.calls import PendingCall
from agentrl.proxy.errors import bad
from agentrl.proxy.forcing import responses_grammar
from agentrl.proxy.sse import _usage, content_ids, logprob_items, text_deltas
from agentrl.proxy.wire import (IGNORED_KEYS, ChatRequest, ToolCall, WireMessage, content_text, flag, number,
                                parse_sampling, parse_top_logprobs, unknown_keys)

#: Keys read by ``parse_responses`` (the rest of ``IGNORED_KEYS`` and these are accepted and ignored).
_KEYS = frozenset({"input", "instructions", "tools", "tool_choice", "stream", "temperature", "top_p", "seed",
                   "max_output_tokens", "top_logprobs", "include", "text", "previous_response_id", "background",
                   "conversation", "prompt", "truncation", "max_tool_calls", "prompt_cache_retention"}) | IGNORED_KEYS
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
LOGPROBS_INCLUDE = "message.output_text.logprobs"
MAX_STORED = 256  # responses kept per open episode for previous_response_id


@dataclass
class ResponsesCall:
    """What a Responses reply needs besides the ``PendingCall``.

    Attributes:
        req: the parsed request. rid / hexid: the response id (``resp_<hex>``) and its hex.
        instructions: as sent. conv: the conversation without the instructions message
            (stored for ``previous_response_id``). tools / tool_choice: echoed back.
        previous: ``previous_response_id``. logprobs: return logprobs on ``output_text``.
        max_output_tokens: as sent. created: unix time.
    """

    req: ChatRequest
    instructions: str | None
    conv: tuple[WireMessage, ...]
    tools: list = field(default_factory=list)
    tool_choice: Any = "auto"
    previous: str | None = None
    logprobs: bool = False
    max_output_tokens: int | None = None
    hexid: str = field(default_factory=lambda: secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def rid(self) -> str:
        return f"resp_{self.hexid}"


def _stem(item_id: Any) -> str | None:
    """The response part of an output item id (``msg_<hex>``, ``fc_<hex>_<i>`` → ``<hex>``)."""
    parts = item_id.split("_") if isinstance(item_id, str) else []
    return parts[1] if len(parts) > 1 else None


def parse_input(raw: Any) -> tuple[tuple[WireMessage, ...], int]:
    """``input`` → messages and the number of skipped ``reasoning`` items.
    Raises ``WireError`` 400 naming the bad item."""
    if isinstance(raw, str):
        return (WireMessage("user", raw),), 0
    if not isinstance(raw, list) or not raw:
        raise bad("'input' must be a non-empty string or a list of input items", "input")
    out: list[WireMessage] = []
    skipped, prev_stem, prev_assistant = 0, None, False
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(f"{where} must be an object, got {type(item).__name__}", where)
        kind = item.get("type") or ("message" if "role" in item else None)
        stem = _stem(item.get("id"))
        if kind == "message":
            role = _ROLES.get(item.get("role")) if isinstance(item.get("role"), str) else None
            if role is None:
                raise bad(f"{where}.role is {item.get('role')!r}; use one of {sorted(_ROLES)}", f"{where}.role")
            out.append(WireMessage(role, content_text(item.get("content"), where)))
            prev_assistant = role == "assistant"
        elif kind == "function_call":
            name, args, call_id = item.get("name"), item.get("arguments", "{}"), item.get("call_id")
            if not isinstance(name, str) or not isinstance(call_id, str):
                raise bad(f"{where} (function_call) needs string 'name' and 'call_id'", where)
            args = args if isinstance(args, str) else orjson.dumps(args).decode()
            tc = ToolCall(call_id, name, args)
            same = prev_stem is None or stem is None or prev_stem == stem
            if prev_assistant and same:  # one reply: its message and its calls
                last = out[-1]
                out[-1] = WireMessage("assistant", last.content, last.tool_calls + (tc,))
            else:
                out.append(WireMessage("assistant", "", (tc,)))
            prev_assistant = True
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise bad(f"{where} (function_call_output) needs a string 'call_id'", f"{where}.call_id")
            out.append(WireMessage("tool", content_text(item.get("output"), f"{where}.output"), tool_call_id=call_id))
            prev_assistant = False
        elif kind == "reasoning":
            skipped += 1
            continue
        else:
            raise bad(f"{where}.type is {kind!r}; the recording proxy takes message, function_call, "
                      f"function_call_output and reasoning items", f"{where}.type")
        prev_stem = stem
    return tuple(out), skipped


def parse_tools(raw: Any) -> tuple[dict, ...]:
    """Responses ``function`` tools → chat tool dicts. Raises ``WireError`` 400 on hosted tools."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise bad("'tools' must be a list of tool objects", "tools")
    out = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("name"), str):
            kind = t.get("type") if isinstance(t, dict) else type(t).__name__
            raise bad(f"tools[{i}] has type {kind!r}; only function tools with a 'name' run through the recording "
                      f"proxy (hosted tools run on OpenAI's servers)", f"tools[{i}].type")
        out.append({"type": "function",
                    "function": {k: t[k] for k in ("name", "description", "parameters") if t.get(k) is not None}})
    return tuple(out)


def parse_responses(data: dict, default: SamplingParams, *, strict: bool = False, stored=None) -> ResponsesCall:
    """Parse a ``responses`` body. ``stored``: ``response id → conversation`` of the episode
    (for ``previous_response_id``). Raises ``WireError`` 400 naming the parameter."""
    ignored = unknown_keys(data, _KEYS, "responses", strict)
    for key in ("conversation", "prompt"):
        if data.get(key) is not None:
            raise bad(f"'{key}' (server-side state) is not supported by the recording proxy; send the "
                      f"conversation in 'input' (or use previous_response_id)", key)
    if flag(data, "background"):
        raise bad("'background' responses are not supported by the recording proxy; send background=false", "background")
    choice = data.get("tool_choice")
    fmt = (data.get("text") or {}).get("format") if isinstance(data.get("text"), dict) else data.get("text")
    include = data.get("include") or []
    if not isinstance(include, list) or not all(isinstance(x, str) for x in include):
        raise bad("'include' must be a list of strings", "include")
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad("'instructions' must be a string or null", "instructions")
    conv, skipped = parse_input(data.get("input"))
    previous = data.get("previous_response_id")
    if previous is not None:
        if not isinstance(previous, str) or stored is None or previous not in stored:
            raise bad(f"'previous_response_id' {previous!r} is not a response of this episode (the proxy keeps the "
                      f"last {MAX_STORED} of the open episode); send the whole conversation in 'input'",
                      "previous_response_id")
        conv = stored[previous] + conv
    max_out = number(data, "max_output_tokens", int, None)
    if max_out is not None and max_out < 1:
        raise bad(f"'max_output_tokens' must be >= 1, got {max_out}", "max_output_tokens")
    sub = {k: data[k] for k in ("temperature", "top_p", "seed") if k in data}
    if max_out is not None:
        sub["max_tokens"] = max_out
    sampling, sent = parse_sampling(sub, default)
    if "max_tokens" in sent:
        sent["max_output_tokens"] = sent.pop("max_tokens")
    top = parse_top_logprobs(data)
    tools = parse_tools(data.get("tools"))
    grammar = responses_grammar(choice, fmt, tools)
    messages = ((WireMessage("system", instructions),) if instructions else ()) + conv
    if not messages:
        raise bad("'input' has no message (only reasoning items)", "input")
    req = ChatRequest(messages=messages, tools=tools if choice != "none" else (), sampling=sampling, sent=sent,
                      stream=flag(data, "stream"), logprobs=top > 0 or LOGPROBS_INCLUDE in include,
                      model=str(data.get("model") or ""), top_logprobs=top,
                      ignored=ignored + (("input.reasoning",) if skipped else ()), dialect="responses",
                      grammar=grammar)
    return ResponsesCall(req, instructions, conv, list(data.get("tools") or []), choice or "auto", previous,
                         req.logprobs, max_out)


def remember(stored: dict, rc: ResponsesCall, call: PendingCall) -> None:
    """Keep the conversation of a reply under its response id (for ``previous_response_id``)."""
    stored[rc.rid] = rc.conv + (WireMessage("assistant", call.content, call.tool_calls),)
    while len(stored) > MAX_STORED:
        del stored[next(iter(stored))]


def _message_item(call: PendingCall, rc: ResponsesCall, text: str, status: str, logprobs: list) -> dict:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}
    return {"type": "message", "id": f"msg_{rc.hexid}", "status": status, "role": "assistant",
            "content": [part] if status == "completed" else []}


def _call_item(rc: ResponsesCall, i: int, tc: ToolCall, done: bool) -> dict:
    return {"type": "function_call", "id": f"fc_{rc.hexid}_{i}", "call_id": tc.id, "name": tc.name,
            "arguments": tc.arguments if done else "", "status": "completed" if done else "in_progress"}


def _has_message(call: PendingCall) -> bool:
    return bool(call.content) or not call.tool_calls


def _all_logprobs(call: PendingCall, rc: ResponsesCall) -> list:
    return logprob_items(call, 0, call.completion.token_ids.size) if rc.logprobs else []


def response_body(call: PendingCall, rc: ResponsesCall, *, final: bool = True) -> dict:
    """The ``response`` object of a call (``final=False``: in progress, no output yet)."""
    output = []
    if final and _has_message(call):
        output.append(_message_item(call, rc, call.content, "completed", _all_logprobs(call, rc)))
    if final:
        output += [_call_item(rc, i, tc, True) for i, tc in enumerate(call.tool_calls)]
    incomplete = final and call.finish_reason == "length"
    status = ("incomplete" if incomplete else "completed") if final else "in_progress"
    u = _usage(call)
    s = call.sampling
    return {"id": rc.rid, "object": "response", "created_at": rc.created, "status": status,
            "completed_at": int(time.time()) if final else None, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": rc.instructions, "max_output_tokens": rc.max_output_tokens,
            "model": call.request.model or call.core.model_name, "output": output, "parallel_tool_calls": True,
            "previous_response_id": rc.previous, "temperature": None if s.greedy else s.temperature,
            "text": {"format": {"type": "text"}}, "tool_choice": rc.tool_choice, "tools": rc.tools, "top_p": s.top_p,
            "top_logprobs": call.request.top_logprobs, "truncation": "disabled", "metadata": {},
            "usage": {"input_tokens": u["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": u["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": u["total_tokens"]} if final else None}


async def sse_responses(call: PendingCall, rc: ResponsesCall) -> AsyncIterator[bytes]:
    """The Responses event stream of a call; records the turn before the final event and
    finishes the call when the stream ends (as ``sse.sse_chat``)."""
    delivered, seq = False, 0

    def ev(kind: str, **data) -> bytes:
        nonlocal seq
        seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, "sequence_number": seq - 1,
                                                                        **data}) + b"\n\n"
    try:
        head = response_body(call, rc, final=False)
        yield ev("response.created", response=head)
        yield ev("response.in_progress", response=head)
        index, mid = 0, f"msg_{rc.hexid}"
        if _has_message(call):
            lp = rc.logprobs
            yield ev("response.output_item.added", output_index=0, item=_message_item(call, rc, "", "in_progress", []))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield ev("response.content_part.added", item_id=mid, output_index=0, content_index=0, part=part)
            ids = call.completion.token_ids
            deltas = (text_deltas(call.core.renderer.tokenizer, content_ids(call), call.content)
                      if not call.tool_calls else [(call.content, 0, ids.size)])
            for text, lo, hi in deltas:
                yield ev("response.output_text.delta", item_id=mid, output_index=0, content_index=0, delta=text,
                         logprobs=logprob_items(call, lo, hi) if lp else [])
            done = _message_item(call, rc, call.content, "completed", _all_logprobs(call, rc))
            yield ev("response.output_text.done", item_id=mid, output_index=0, content_index=0, text=call.content,
                     logprobs=done["content"][0]["logprobs"])
            yield ev("response.content_part.done", item_id=mid, output_index=0, content_index=0,
                     part=done["content"][0])
            yield ev("response.output_item.done", output_index=0, item=done)
            index = 1
        for i, tc in enumerate(call.tool_calls):
            item, out = _call_item(rc, i, tc, False), index + i
            yield ev("response.output_item.added", output_index=out, item=item)
            yield ev("response.function_call_arguments.delta", item_id=item["id"], output_index=out,
                     delta=tc.arguments)
            yield ev("response.function_call_arguments.done", item_id=item["id"], output_index=out,
                     arguments=tc.arguments, name=tc.name)
            yield ev("response.output_item.done", output_index=out, item=_call_item(rc, i, tc, True))
        body = response_body(call, rc)
        final = ev("response.incomplete" if body["status"] == "incomplete" else "response.completed", response=body)
        call.commit()
        yield final
        delivered = True
    finally:
        call.finish(delivered)
