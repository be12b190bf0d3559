"""Where a judge's verdict comes from (``agentrl.rollout.judge``): one chat prompt in, the
verdict's JSON text out, constrained to a JSON schema.

- ``HTTPJudgeClient``: any OpenAI-compatible server (``POST {base_url}/chat/completions`` with
  ``response_format: json_schema``; vLLM, SGLang, a hosted API, ``agentrl proxy serve``), over
  ``httpx``;
- ``EngineJudgeClient``: an ``LLMClient`` in this process (the policy's own engine, or a second
  one) with grammar-constrained decoding (``agentrl.llm.grammar``: the reply is valid JSON
  under the schema by construction), greedy.

Both raise ``JudgeCallError`` (what failed, in one line) on any failure; timeouts and retries
are the caller's (``Judge``).
"""

from __future__ import annotations

import os
import threading
from typing import Mapping, Protocol, Sequence

from agentrl.llm.base import LLMClient, SamplingParams
from agentrl.llm.chat import ChatRenderer
from agentrl.types import Message


class JudgeCallError(RuntimeError):
    """One judge call failed (transport, HTTP status, an engine error or an empty reply)."""


class JudgeClient(Protocol):
    """``complete(messages, schema, max_tokens) -> str``: the judge's reply text for chat
    ``messages`` (``[{"role", "content"}]``), asked to be JSON valid under ``schema``.
    ``name``: how the client is shown (``policy``, ``local:<model>``, the URL)."""

    name: str

    def complete(self, messages: Sequence[Mapping[str, str]], schema: Mapping, max_tokens: int) -> str: ...


class HTTPJudgeClient:
    """An OpenAI-compatible chat endpoint as the judge.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended).
        model: the model name sent.
        api_key_env: environment variable with the bearer key (None: no key, or ``EMPTY``).
        timeout_s: seconds per HTTP call.
    """

    def __init__(self, base_url: str, model: str = "judge", api_key_env: str | None = None,
                 timeout_s: float = 60.0) -> None:
        import httpx

        self.name, self.model = base_url, model
        key = os.environ.get(api_key_env, "") if api_key_env else ""
        headers = {"Authorization": f"Bearer {key or 'EMPTY'}"}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)

    def complete(self, messages: Sequence[Mapping[str, str]], schema: Mapping, max_tokens: int) -> str:
        import httpx

        body = {"model": self.model, "messages": list(messages), "max_tokens": int(max_tokens), "temperature": 0.0,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "verdict", "schema": dict(schema), "strict": True}}}
        try:
            r = self._http.post("/chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise JudgeCallError(f"{type(exc).__name__} calling {self.name}: {exc}") from None
        if r.status_code != 200:
            raise JudgeCallError(f"{self.name} answered {r.status_code}: {r.text[:300]}")
        try:
            text = r.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeCallError(f"{self.name} sent no chat completion: {r.text[:300]}") from None
        if not isinstance(text, str) or not text.strip():
            raise JudgeCallError(f"{self.name} sent an empty reply")
        return text

    def close(self) -> None:
        self._http.close()


class EngineJudgeClient:
    """An in-process engine as the judge: the chat template of ``renderer``, greedy decoding
    constrained to the schema (``agentrl.llm.grammar``), one call at a time.

    Args:
        engine: an ``LLMClient`` whose ``generate`` takes ``grammars`` (``HFEngine``).
        renderer: its ``ChatRenderer``.
        name: how the client is shown (``policy`` or ``local:<model>``).
    Raises:
        ValueError: the engine cannot constrain its output (no ``grammars`` argument).
    """

    def __init__(self, engine: LLMClient, renderer: ChatRenderer, name: str = "policy") -> None:
        import inspect

        if "grammars" not in inspect.signature(engine.generate).parameters:
            raise ValueError(f"a local judge needs grammar-constrained decoding, which {type(engine).__name__} does "
                             "not provide (HFEngine does); serve that model over HTTP and give its URL as "
                             "reward.judge.endpoint")
        self.engine, self.renderer, self.name = engine, renderer, name
        self._lock = threading.Lock()

    def complete(self, messages: Sequence[Mapping[str, str]], schema: Mapping, max_tokens: int) -> str:
        from agentrl.llm.grammar import GrammarSpec, compiler_for

        with self._lock:
            try:
                prompt = self.renderer.render_ids([Message(m["role"], m["content"]) for m in messages],
                                                  add_generation_prompt=True)
                grammar = compiler_for(self.renderer).compile(GrammarSpec.json_schema(schema))
                (c,) = self.engine.generate([prompt], SamplingParams(greedy=True, max_tokens=int(max_tokens)),
                                            grammars=[grammar])
            except (ValueError, RuntimeError) as exc:
                raise JudgeCallError(f"{self.name}: {type(exc).__name__}: {exc}") from None
            return self.renderer.completion_text(c.token_ids)
