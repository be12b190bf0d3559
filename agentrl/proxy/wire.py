"""OpenAI wire format: parse requests into dataclasses, build responses and error bodies.

A known parameter the proxy cannot honour (``n`` > 1, ``logit_bias``, penalties) is a 400 with an OpenAI-style body ``{"error":
{"message", "type", "param", "code"}}`` naming the parameter and the fix. A key the proxy
does not know is ignored and recorded (``ChatRequest.ignored`` → the turn's
``info["ignored_fields"]``) so a newer SDK does not break training; with ``strict=True`` a
non-null unknown key is a 400 instead (null-valued keys never are).
Forced tools (``tool_choice`` ``required`` / a named function) and JSON output
(``response_format`` ``json_object`` / ``json_schema``) become ``ChatRequest.grammar``
(``agentrl.proxy.forcing``), sampled under a grammar by engines that support it.
Sampling maps onto ``SamplingParams``: ``temperature == 0`` means greedy;
``max_completion_tokens`` is the chat name of ``max_tokens`` (both sent and different: 400).
Flags (``stream``, ``logprobs``, ...) must be JSON booleans, ``stream_options`` an object,
token-id prompts ids of the vocabulary: a wrong type is a 400, never a guess or a 500.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from agentrl.llm.base import SamplingParams
from agentrl.llm.grammar import GrammarSpec
from agentrl.proxy.errors import WireError, bad  # noqa: F401  (WireError: what every parse_* raises)
from agentrl.proxy.forcing import chat_grammar

#: Request keys accepted and ignored (they do not change what is sampled).
IGNORED_KEYS = frozenset({"model", "user", "metadata", "store", "parallel_tool_calls", "service_tier", "stream_options",
                          "prediction", "modalities", "reasoning_effort", "safety_identifier", "prompt_cache_key",
                          "verbosity"})
_ZERO_KEYS = ("presence_penalty", "frequency_penalty")  # accepted only when 0 / null
_CHAT_KEYS = frozenset({"messages", "tools", "tool_choice", "stream", "temperature", "top_p", "max_tokens",
                        "max_completion_tokens", "seed", "stop", "n", "logprobs", "top_logprobs", "return_token_ids",
                        "response_format", "logit_bias", *_ZERO_KEYS}) | IGNORED_KEYS
_COMPLETION_KEYS = (_CHAT_KEYS - {"messages", "tools", "tool_choice", "max_completion_tokens", "response_format",
                                  "top_logprobs"}) | {"prompt"}
#: Smallest positive ``temperature`` (as vLLM's sampling epsilon); below it use 0 for greedy.
MIN_TEMPERATURE = 1e-5
#: Most ``stop`` strings and ``top_logprobs`` per request (OpenAI's limits: 4 and 20; we allow more stops).
MAX_STOPS, MAX_TOP_LOGPROBS = 16, 20
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


@dataclass(frozen=True)
class ToolCall:
    """One function call of an assistant message (``arguments`` is a JSON text)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class WireMessage:
    """One chat message as sent on the wire (content parts joined to text).

    Attributes:
        role: ``system | user | assistant | tool`` (``developer`` is read as ``system``).
        content: the text ("" when null).
        tool_calls: the assistant's function calls.
        tool_call_id: for ``tool`` messages, the call answered.
    """

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True)
class ChatRequest:
    """A parsed ``POST chat/completions`` (or ``completions``: ``prompt`` set, no messages).

    Attributes:
        messages: the conversation.
        tools: tool definitions as sent (JSON-like dicts, passed to the prompt verbatim).
        sampling: the effective sampling parameters (before episode overrides).
        sent: the sampling parameters as sent (for the record).
        stream / include_usage: SSE streaming and the final usage chunk.
        logprobs: return per-token logprobs in the response.
        return_token_ids: return prompt and completion token ids (vLLM extension).
        prompt: ``completions`` only — the prompt text or token ids.
        model: the model name the client asked for (echoed back).
        stop: stop strings; the reply ends before the first one (``agentrl.proxy.stops``).
        top_logprobs: the K most likely alternatives to return per token (0: none).
        ignored: unknown keys sent with a non-null value (recorded, not honoured).
        dialect: ``chat | completions | responses | messages`` (the route's API).
        grammar: what the completion must be (a forced tool call, JSON output), or None.
    """

    messages: tuple[WireMessage, ...] = ()
    tools: tuple[dict, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    sent: dict = field(default_factory=dict)
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    return_token_ids: bool = False
    prompt: str | tuple[int, ...] | None = None
    model: str = ""
    stop: tuple[str, ...] = ()
    top_logprobs: int = 0
    ignored: tuple[str, ...] = ()
    dialect: str = "chat"
    grammar: GrammarSpec | None = None


def loads(body: bytes) -> dict:
    """Parse a JSON object body. Raises ``WireError`` 400 on malformed JSON or a non-object."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad(f"the request body is not valid JSON ({exc}); send a JSON object") from None
    if not isinstance(data, dict):
        raise bad(f"the request body must be a JSON object, got {type(data).__name__}")
    return data


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text", "output_text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad(f"{where}.content[{i}] has type {kind!r}; only text parts are supported", f"{where}.content")
            text = part.get("text", "")
            if not isinstance(text, str):  # never str(None) == "None" (or a dict's repr) into the prompt
                raise bad(f"{where}.content[{i}].text must be a string, got {text!r}", f"{where}.content")
            out.append(text)
        return "".join(out)
    raise bad(f"{where}.content must be a string, null or a list of text parts", f"{where}.content")


def _tool_calls(raw: Any, where: str) -> tuple[ToolCall, ...]:
    if not raw:
        return ()
    if not isinstance(raw, list):
        raise bad(f"{where}.tool_calls must be a list", f"{where}.tool_calls")
    out = []
    for i, tc in enumerate(raw):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad(f"{where}.tool_calls[{i}] needs function.name", f"{where}.tool_calls")
        args = fn.get("arguments", "{}")
        args = args if isinstance(args, str) else orjson.dumps(args).decode()
        out.append(ToolCall(str(tc.get("id") or ""), fn["name"], args))  # a null id is no id, not "None"
    return tuple(out)


def parse_messages(raw: Any) -> tuple[WireMessage, ...]:
    """``messages`` → ``WireMessage``s. Raises ``WireError`` 400 naming the bad message."""
    if not isinstance(raw, list) or not raw:
        raise bad("'messages' must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(raw):
        sent = m.get("role") if isinstance(m, dict) else m
        role = _ROLES.get(sent) if isinstance(m, dict) and isinstance(sent, str) else None
        if role is None:
            raise bad(f"messages[{i}].role is {sent!r}; use one of {sorted(_ROLES)}", f"messages[{i}].role")
        content = m.get("content")
        if type(content) is str and not m.get("tool_calls") and not m.get("tool_call_id"):  # the common case
            out.append(WireMessage(role, content))
            continue
        where = f"messages[{i}]"
        out.append(WireMessage(role, _text(content, where), _tool_calls(m.get("tool_calls"), where),
                               str(m.get("tool_call_id") or "")))
    return tuple(out)


def _flag(data: dict, key: str, where: str = "") -> bool:
    """``data[key]`` as a bool (missing/null → False). Raises ``WireError`` 400 unless a JSON boolean."""
    v = data.get(key)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise bad(f"'{where}{key}' must be true or false, got {v!r}", where + key)
    return v


def _include_usage(data: dict) -> bool:
    """``stream_options.include_usage``. Raises ``WireError`` 400 unless ``stream_options`` is an
    object (or null) and ``include_usage`` a boolean."""
    opts = data.get("stream_options")
    if opts is None:
        return False
    if not isinstance(opts, dict):
        raise bad(f"'stream_options' must be an object such as {{\"include_usage\": true}} or null, got {opts!r}",
                  "stream_options")
    return _flag(opts, "include_usage", "stream_options.")


def check_token_ids(ids: tuple[int, ...], vocab_size: int | None) -> None:
    """Raise ``WireError`` 400 (param ``prompt``) when an id is outside ``[0, vocab_size)``
    (``[0, 2**31)`` when the vocabulary size is unknown)."""
    limit = vocab_size or 1 << 31
    outside = [i for i in ids if not 0 <= i < limit]
    if outside:
        raise bad(f"'prompt' has {len(outside)} token id(s) outside the vocabulary [0, {limit}), e.g. {outside[:3]}; "
                  "send ids of this model's tokenizer", "prompt")


def _max_tokens(data: dict, default: int) -> int:
    """``max_completion_tokens`` or its older name ``max_tokens`` (≥ 1). Raises ``WireError``
    400 when both are sent and differ, or the value is not an integer ≥ 1."""
    new, old = _number(data, "max_completion_tokens", int, None), _number(data, "max_tokens", int, None)
    if new is not None and old is not None and new != old:
        raise bad(f"'max_completion_tokens' ({new}) and 'max_tokens' ({old}) differ; send one of them "
                  "(max_tokens is the older name of the same limit)", "max_completion_tokens")
    key, value = ("max_completion_tokens", new) if new is not None else ("max_tokens", old)
    if value is None:
        return default
    if value < 1:
        raise bad(f"'{key}' must be >= 1, got {value}", key)
    return value


def _number(data: dict, key: str, kind: type, default):
    v = data.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float) if kind is float else int):
        raise bad(f"'{key}' must be a{'n integer' if kind is int else ' number'}, got {v!r}", key)
    return kind(v)


def parse_sampling(data: dict, default: SamplingParams) -> tuple[SamplingParams, dict]:
    """Effective ``SamplingParams`` from the request (missing keys keep ``default``) and
    the sampling keys as sent. Raises ``WireError`` 400 on unsupported or out-of-range values."""
    for key in _ZERO_KEYS:
        if data.get(key) not in (None, 0, 0.0):
            raise bad(f"'{key}' is not supported by the recording proxy (it would change the sampling "
                      f"distribution unrecorded); remove it or set it to 0", key)
    if data.get("n") not in (None, 1):
        raise bad("'n' must be 1: a harness that keeps one of n choices would train on choices nobody rewards or "
                  "continues; for n samples of a prompt open n episodes of one group (group_id)", "n")
    if data.get("logit_bias"):
        raise bad("'logit_bias' is not supported by the recording proxy; remove it", "logit_bias")
    temperature = _number(data, "temperature", float, default.temperature)
    if temperature < 0:
        raise bad(f"'temperature' must be >= 0 (0 = greedy), got {temperature}", "temperature")
    if 0 < temperature < MIN_TEMPERATURE:  # logits / t overflow to inf: the sampler fails (a 500 before)
        raise bad(f"'temperature' must be 0 (greedy) or >= {MIN_TEMPERATURE:g}, got {temperature}", "temperature")
    max_tokens = _max_tokens(data, default.max_tokens)
    seed = _number(data, "seed", int, default.seed)
    top_p = _number(data, "top_p", float, default.top_p)
    try:
        sampling = SamplingParams(temperature=temperature if temperature > 0 else 1.0, top_p=top_p,
                                  max_tokens=max_tokens,
                                  seed=seed, greedy=default.greedy or temperature == 0,
                                  stop_token_ids=default.stop_token_ids)
    except ValueError as exc:
        raise bad(str(exc).replace("SamplingParams.", "")) from None
    sent = {k: data[k] for k in ("temperature", "top_p", "max_tokens", "max_completion_tokens", "seed") if k in data}
    return sampling, sent


def parse_stop(value: Any, key: str = "stop") -> tuple[str, ...]:
    """``stop`` (null, a string or a list of strings) as a tuple of non-empty strings.
    Raises ``WireError`` 400 on another type or more than ``MAX_STOPS`` strings."""
    if value is None or value == "":
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(x, str) for x in stops):
        raise bad(f"'{key}' must be a string or a list of strings, got {value!r}", key)
    if len(stops) > MAX_STOPS:
        raise bad(f"'{key}' has {len(stops)} strings; send at most {MAX_STOPS}", key)
    return tuple(dict.fromkeys(x for x in stops if x))


def parse_top_logprobs(data: dict, key: str = "top_logprobs") -> int:
    """``top_logprobs`` as an int in ``[0, MAX_TOP_LOGPROBS]``. Raises ``WireError`` 400."""
    k = _number(data, key, int, 0)
    if not 0 <= k <= MAX_TOP_LOGPROBS:
        raise bad(f"'{key}' must be between 0 and {MAX_TOP_LOGPROBS}, got {k}", key)
    return k


def unknown_keys(data: dict, allowed: frozenset, route: str, strict: bool) -> tuple[str, ...]:
    """The keys of ``data`` outside ``allowed`` with a non-null value (sorted), to be ignored
    and recorded. Raises ``WireError`` 400 naming the first one when ``strict``."""
    unknown = tuple(sorted(k for k, v in data.items() if k not in allowed and v is not None))
    if unknown and strict:
        raise bad(f"parameter '{unknown[0]}' is not supported on {route} by the recording proxy, which refuses "
                  f"unknown parameters (unknown_fields='refuse'); remove it or run the proxy with "
                  f"unknown_fields='ignore' (supported: {', '.join(sorted(allowed - IGNORED_KEYS))})", unknown[0])
    return unknown


def parse_chat(data: dict, default: SamplingParams, *, strict: bool = False) -> ChatRequest:
    """Parse a ``chat/completions`` body (``strict``: unknown keys are a 400). Raises ``WireError`` 400."""
    ignored = unknown_keys(data, _CHAT_KEYS, "chat/completions", strict)
    tools = data.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise bad("'tools' must be a list of tool objects", "tools")
    choice = data.get("tool_choice")
    grammar = chat_grammar(choice, data.get("response_format"), tuple(tools))
    top = parse_top_logprobs(data)
    sampling, sent = parse_sampling(data, default)
    return ChatRequest(messages=parse_messages(data.get("messages")), tools=tuple(tools) if choice != "none" else (),
                       sampling=sampling, sent=sent, stream=_flag(data, "stream"), include_usage=_include_usage(data),
                       logprobs=_flag(data, "logprobs") or top > 0, return_token_ids=_flag(data, "return_token_ids"),
                       model=str(data.get("model") or ""), stop=parse_stop(data.get("stop")), top_logprobs=top,
                       ignored=ignored, grammar=grammar)


def parse_completion(data: dict, default: SamplingParams, vocab_size: int | None = None, *,
                     strict: bool = False) -> ChatRequest:
    """Parse a legacy ``completions`` body (``prompt``: a string or a list of token ids, each
    in ``[0, vocab_size)``; ``logprobs`` = K > 1 asks for the top K). Raises ``WireError`` 400."""
    ignored = unknown_keys(data, _COMPLETION_KEYS, "completions", strict)
    prompt = data.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        prompt = tuple(prompt)
        check_token_ids(prompt, vocab_size)
    elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str) and prompt[0]:
        prompt = prompt[0]
    elif not isinstance(prompt, str) or not prompt:
        raise bad("'prompt' must be a non-empty string or a list of token ids (one prompt per request)", "prompt")
    sampling, sent = parse_sampling(data, default)
    logprobs = data.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, int):
        raise bad(f"'logprobs' must be an integer (0 or 1) or null, got {logprobs!r}", "logprobs")
    if logprobs is not None and not 0 <= logprobs <= MAX_TOP_LOGPROBS:
        raise bad(f"'logprobs' must be between 0 and {MAX_TOP_LOGPROBS}, got {logprobs}", "logprobs")
    top = int(logprobs) if logprobs and logprobs > 1 else 0
    return ChatRequest(prompt=prompt, sampling=sampling, sent=sent, stream=_flag(data, "stream"),
                       include_usage=_include_usage(data), logprobs=bool(logprobs),
                       return_token_ids=_flag(data, "return_token_ids"), model=str(data.get("model") or ""),
                       stop=parse_stop(data.get("stop")), top_logprobs=top, ignored=ignored, dialect="completions")


#: The parsing helpers the other dialects (``responses``, ``anthropic``) share.
content_text, number, flag = _text, _number, _flag
