"""Response bodies: OpenAI ``chat.completion`` / ``text_completion`` objects and their SSE
streams (MODELS.md §5.4).

A stream carries the role delta, content deltas (one per decoded token step; a step whose
text is an incomplete UTF-8 character waits for the next), one tool-call delta after
parsing, the final chunk with ``finish_reason``, ``usage`` when
``stream_options.include_usage`` is set, then ``data: [DONE]``. Concatenated deltas equal
the non-streamed content. The turn is recorded (``PendingCall.commit``) just before the
final chunk is sent, so it exists once the client has that chunk; the call is finished
when the stream ends: normally → the delivered turn stays; closed early (client gone
before ``[DONE]``) → an aborted, non-trainable turn.
"""

from __future__ import annotations

import secrets
import time
from typing import AsyncIterator

import orjson

from agentrl.proxy.calls import PendingCall
from agentrl.proxy.messages import assistant_message


def text_deltas(tokenizer, token_ids, content: str) -> list[tuple[str, int, int]]:
    """Split ``content`` into per-token-step deltas ``(text, tok_start, tok_end)``.

    A delta ends after token ``k`` when the decoded prefix ``ids[:k]`` is a prefix of
    ``content`` and adds text; the remainder goes into the last delta, so
    ``"".join(d[0] for d in deltas) == content``.
    """
    ids = [int(i) for i in token_ids]
    out, emitted, start = [], 0, 0
    for k in range(1, len(ids) + 1):
        prefix = tokenizer.decode(ids[:k], skip_special_tokens=False)
        if len(prefix) > emitted and content.startswith(prefix):
            out.append((prefix[emitted:], start, k))
            emitted, start = len(prefix), k
    if emitted < len(content):
        out.append((content[emitted:], start, len(ids)))
    return out


def _usage(call: PendingCall) -> dict:
    p, c = int(call.plan.prompt_ids.size), int(call.completion.token_ids.size)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def logprob_items(call: PendingCall, lo: int, hi: int) -> list[dict]:
    """OpenAI logprob entries of completion tokens ``lo:hi``: ``{token, logprob, bytes,
    top_logprobs}`` (``token`` is the vocabulary entry; ``top_logprobs`` holds the request's
    ``top_logprobs`` most likely alternatives, raw-logit logprobs)."""
    tok = call.core.renderer.tokenizer
    c = call.completion
    ids, lps, k_top = c.token_ids, c.logprobs, call.request.top_logprobs if c.top_ids is not None else 0
    items = []
    for k in range(lo, hi):
        text = tok.convert_ids_to_tokens(int(ids[k]))
        top = []
        for j in range(k_top):
            alt = tok.convert_ids_to_tokens(int(c.top_ids[k, j]))
            top.append({"token": alt, "logprob": float(c.top_logprobs[k, j]), "bytes": list(alt.encode())})
        items.append({"token": text, "logprob": float(lps[k]) if lps.size else None,
                      "bytes": list(text.encode()), "top_logprobs": top})
    return items


def _logprobs(call: PendingCall, lo: int, hi: int) -> dict:
    return {"content": logprob_items(call, lo, hi)}


def chat_body(call: PendingCall) -> dict:
    """The non-streamed ``chat.completion`` object of a call."""
    choice = {"index": 0, "message": assistant_message(call.content, call.tool_calls),
              "finish_reason": call.finish_reason,
              "logprobs": _logprobs(call, 0, call.completion.token_ids.size) if call.request.logprobs else None}
    body = {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion", "created": int(time.time()),
            "model": call.request.model or call.core.model_name, "choices": [choice], "usage": _usage(call)}
    if call.request.return_token_ids:
        choice["token_ids"] = call.completion.token_ids.tolist()
        body["prompt_token_ids"] = call.plan.prompt_ids.tolist()
    return body


def completion_body(call: PendingCall) -> dict:
    """The non-streamed ``text_completion`` object of a ``completions`` call."""
    choice = {"index": 0, "text": call.content, "finish_reason": call.finish_reason, "logprobs": None}
    if call.request.logprobs:
        lp = _logprobs(call, 0, call.completion.token_ids.size)["content"]
        choice["logprobs"] = {"tokens": [x["token"] for x in lp], "token_logprobs": [x["logprob"] for x in lp],
                              "top_logprobs": [{t["token"]: t["logprob"] for t in x["top_logprobs"]} for x in lp]
                              if call.request.top_logprobs else None}
    body = {"id": f"cmpl-{secrets.token_hex(12)}", "object": "text_completion", "created": int(time.time()),
            "model": call.request.model or call.core.model_name, "choices": [choice], "usage": _usage(call)}
    if call.request.return_token_ids:
        choice["token_ids"] = call.completion.token_ids.tolist()
        body["prompt_token_ids"] = call.plan.prompt_ids.tolist()
    return body


def _event(obj) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


async def sse_chat(call: PendingCall) -> AsyncIterator[bytes]:
    """SSE stream of a chat call; records the turn before the final chunk and finishes the
    call when the stream ends (see module doc)."""
    delivered = False
    try:
        head = {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": call.request.model or call.core.model_name}
        req, ids = call.request, call.completion.token_ids

        def chunk(delta: dict, lo: int = 0, hi: int = 0, finish=None, **extra) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish,
                      "logprobs": _logprobs(call, lo, hi) if req.logprobs and hi > lo else None}
            if req.return_token_ids:
                choice["token_ids"] = ids[lo:hi].tolist()
            return _event({**head, "choices": [choice], **extra})

        first = {"prompt_token_ids": call.plan.prompt_ids.tolist()} if req.return_token_ids else {}
        yield chunk({"role": "assistant", "content": ""}, **first)
        deltas = text_deltas(call.core.renderer.tokenizer, content_ids(call), call.content) if not call.tool_calls \
            else [(call.content, 0, ids.size)] * bool(call.content)
        for text, lo, hi in deltas:
            yield chunk({"content": text}, lo, hi)
        if call.tool_calls:
            msg = assistant_message(call.content, call.tool_calls)
            calls = [{"index": i, **tc} for i, tc in enumerate(msg["tool_calls"])]
            yield chunk({"tool_calls": calls}, 0 if not call.content else ids.size, ids.size)
        last = deltas[-1][2] if deltas and not call.tool_calls else ids.size
        final = chunk({}, last, ids.size, finish=call.finish_reason)
        call.commit()
        yield final
        if req.include_usage:
            yield _event({**head, "choices": [], "usage": _usage(call)})
        yield b"data: [DONE]\n\n"
        delivered = True
    finally:
        call.finish(delivered)


async def sse_completion(call: PendingCall) -> AsyncIterator[bytes]:
    """SSE stream of a ``completions`` call (text deltas, final chunk, ``[DONE]``)."""
    delivered = False
    try:
        head = {"id": f"cmpl-{secrets.token_hex(12)}", "object": "text_completion", "created": int(time.time()),
                "model": call.request.model or call.core.model_name}
        for text, _, _ in text_deltas(call.core.renderer.tokenizer, content_ids(call), call.content):
            yield _event({**head, "choices": [{"index": 0, "text": text, "finish_reason": None, "logprobs": None}]})
        final = _event({**head, "choices": [{"index": 0, "text": "", "finish_reason": call.finish_reason,
                                             "logprobs": None}]})
        call.commit()
        yield final
        if call.request.include_usage:
            yield _event({**head, "choices": [], "usage": _usage(call)})
        yield b"data: [DONE]\n\n"
        delivered = True
    finally:
        call.finish(delivered)


def content_ids(call: PendingCall):
    """The completion ids without a trailing EOS (those the reply text decodes from)."""
    ids = call.completion.token_ids
    return ids[:-1] if ids.size and int(ids[-1]) == call.core.renderer.eos_token_id else ids
