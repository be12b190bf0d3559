"""``OpenAIHTTPEngine``: any OpenAI-compatible server over HTTP (httpx).

Token-faithful mode (vLLM ≥ 0.10.2, MODELS.md §3.4): ``POST /v1/completions`` with
``prompt: list[list[int]]`` (one batched request), ``return_token_ids: true`` and
``logprobs: 0``; each choice carries ``token_ids`` and ``logprobs.token_logprobs`` of the
sampled tokens (vLLM default ``raw_logprobs``). When the server returns no ``token_ids``
(a plain OpenAI-compatible server), the engine falls back to text: it needs a tokenizer
to decode prompts and re-encode completions, and flags every completion
``token_faithful=False`` (evaluation only, never training).

Transient failures are retried with bounded exponential backoff (tenacity): a refused or
reset connection, a connect timeout, and HTTP 429 / 502 / 503 / 504 (``retries`` more
attempts, waits ``backoff_s``·2^k capped at 8 s); anything else, and the last failure, raise.

Weight updates follow vLLM's dev-mode routes (``VLLM_SERVER_DEV_MODE=1``, §3.2):
``/pause`` → ``/collective_rpc reload_weights`` → ``/update_weight_version`` →
``/reset_prefix_cache`` → ``/resume``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

import httpx
import numpy as np
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from agentrl.deadline import call_with_deadline
from agentrl.llm.base import FINISH_ABORT, FINISH_LENGTH, FINISH_STOP, Completion, SamplingParams, check_prompts, clamp_max_tokens

_REASONS = {"stop": FINISH_STOP, "length": FINISH_LENGTH, "abort": FINISH_ABORT}
RETRY_STATUS = frozenset({429, 502, 503, 504})
# connection refused/reset, connect timeout, a dropped response; not a read timeout (a slow server)
_TRANSIENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadError, httpx.RemoteProtocolError,
              httpx.WriteError)


class TransientHTTPError(RuntimeError):
    """A retryable HTTP status (429 / 502 / 503 / 504) from the server."""


class OpenAIHTTPEngine:
    """``LLMClient`` over an OpenAI-compatible ``/v1/completions`` endpoint.

    Args:
        base_url: server root, e.g. ``"http://127.0.0.1:8000"`` (``/v1`` is appended).
        model: the served model name.
        eos_token_id: id that ends an assistant message (sent as a stop id).
        max_context: the served model's context length in tokens.
        tokenizer: optional; needed only for text-only servers (decode prompts, encode completions).
        api_key: bearer token, if the server wants one.
        timeout_s: per-request timeout in seconds: each network operation and, in total, each
            request's whole answer (``agentrl.deadline``: a server trickling bytes cannot hold a call).
        retries: extra attempts after a transient failure (≥ 0; see the module docstring).
        backoff_s: first wait between attempts in seconds (doubling, capped at 8 s).
        transport: an ``httpx`` transport (tests pass ``httpx.MockTransport``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        eos_token_id: int,
        max_context: int,
        tokenizer=None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        transport: httpx.BaseTransport | None = None,
        retries: int = 3,
        backoff_s: float = 0.5,
    ) -> None:
        if retries < 0 or backoff_s < 0:
            raise ValueError(f"retries ({retries}) and backoff_s ({backoff_s}) must be >= 0")
        self.retries, self.backoff_s = int(retries), float(backoff_s)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = float(timeout_s)
        self._client_kwargs = {"base_url": base_url.rstrip("/"), "headers": headers, "timeout": timeout_s,
                               "transport": transport}
        self.client = httpx.Client(**self._client_kwargs)
        self._client_lock = threading.Lock()
        self.model = model
        self.eos_token_id = int(eos_token_id)
        self.max_context = int(max_context)
        self.tokenizer = tokenizer
        self.policy_version = 0
        self.token_faithful = True  # becomes False after a text-only answer

    def _replace_client(self, stuck) -> None:
        """Close ``stuck`` (a request on it passed its deadline) and give later calls a fresh client
        (once, under a lock: two callers past their deadlines on the same client make one)."""
        with self._client_lock:
            if self.client is stuck:
                self.client = httpx.Client(**self._client_kwargs)
        stuck.close()

    def _send(self, client, path: str, json: dict | None, params: dict | None):
        """One POST on ``client`` within the total deadline; a client another caller closed after
        its deadline meanwhile is a transient failure (the retry takes the fresh one)."""
        try:
            return call_with_deadline(lambda: client.post(path, json=json, params=params), self.timeout_s,
                                      what=f"POST {path}", abandon=lambda: self._replace_client(client))
        except RuntimeError as exc:
            if client.is_closed and client is not self.client:
                raise TransientHTTPError(f"POST {path}: its client was replaced after another call's deadline") from exc
            raise

    def _post(self, path: str, json: dict | None = None, params: dict | None = None) -> dict:
        """POST with retries of transient failures, each attempt answered in full within
        ``timeout_s`` (a total deadline, ``agentrl.deadline``). Raises RuntimeError (HTTP error),
        ``agentrl.deadline.DeadlineExceeded`` (not retried) or the last ``httpx`` transport error
        after the retries."""
        for attempt in Retrying(stop=stop_after_attempt(self.retries + 1), reraise=True,
                                wait=wait_exponential(multiplier=self.backoff_s, max=8.0),
                                retry=retry_if_exception_type((*_TRANSIENT, TransientHTTPError))):
            with attempt:
                r = self._send(self.client, path, json, params)
                if r.status_code in RETRY_STATUS:
                    raise TransientHTTPError(f"POST {path} failed with HTTP {r.status_code}: {r.text[:500]}")
        if r.status_code >= 400:
            raise RuntimeError(f"POST {path} failed with HTTP {r.status_code}: {r.text[:500]}")
        return r.json() if r.content else {}

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *, return_hidden: bool = False
    ) -> list[Completion]:
        """Batched ``/v1/completions`` requests (see ``LLMClient.generate``): one per distinct
        new-token budget, each prompt getting ``min(max_tokens, max_context − its length)``
        (the API takes one ``max_tokens`` per request).

        Raises:
            ValueError: ``return_hidden`` (not available over HTTP); a prompt that fills the context.
            RuntimeError: HTTP error, a malformed answer, or a text-only server without a tokenizer.
        """
        if return_hidden:
            raise ValueError("OpenAIHTTPEngine cannot return hidden states; use HFEngine for policy.return_hidden")
        rows = check_prompts(prompts)
        budgets = [clamp_max_tokens(p.size, sampling.max_tokens, self.max_context) for p in rows]
        out: list[Completion | None] = [None] * len(rows)
        for budget in sorted(set(budgets), reverse=True):
            idx = [i for i, b in enumerate(budgets) if b == budget]
            for i, c in zip(idx, self._request([rows[i] for i in idx], budget, sampling)):
                out[i] = c
        return out

    def _request(self, rows: list[np.ndarray], budget: int, sampling: SamplingParams) -> list[Completion]:
        """One ``/v1/completions`` request for ``rows``, ``budget`` new tokens each."""
        body = {
            "model": self.model,
            "prompt": [p.tolist() for p in rows],
            "max_tokens": budget,
            "temperature": 0.0 if sampling.greedy else sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "stop_token_ids": [self.eos_token_id, *sampling.stop_token_ids],
            "skip_special_tokens": False,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        data = self._post("/v1/completions", json=body)
        choices = sorted(data.get("choices", []), key=lambda c: c.get("index", 0))
        if len(choices) != len(rows):
            raise RuntimeError(f"/v1/completions returned {len(choices)} choices for {len(rows)} prompts")
        return [self._parse(c, sampling) for c in choices]

    def _parse(self, choice: dict, sampling: SamplingParams) -> Completion:
        reason = _REASONS.get(choice.get("finish_reason") or "length", FINISH_LENGTH)
        ids = choice.get("token_ids")
        lp = (choice.get("logprobs") or {}).get("token_logprobs")
        if ids is not None:
            ids = [int(i) for i in ids]
            if reason == FINISH_STOP and (not ids or ids[-1] not in {self.eos_token_id, *sampling.stop_token_ids}):
                ids.append(self.eos_token_id)  # some servers drop the stop id; it was sampled
                lp = None if lp is None else [*lp, float("nan")]
            lps = np.asarray(lp, np.float32) if lp is not None and len(lp) == len(ids) else np.zeros(0, np.float32)
            return Completion(ids, lps, reason, self.policy_version, text=choice.get("text"),
                              logprob_mode="raw" if lps.size else "none")
        if self.tokenizer is None:
            raise RuntimeError("the server returned text only (no token_ids); pass tokenizer= to re-encode (eval only)")
        self.token_faithful = False
        text = choice.get("text", "")
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        if reason == FINISH_STOP and (not ids or ids[-1] != self.eos_token_id):
            ids.append(self.eos_token_id)
        return Completion(ids, np.zeros(0, np.float32), reason, self.policy_version, text=text,
                          token_faithful=False, logprob_mode="none")

    def update_weights(self, source: object, version: int) -> None:
        """Reload a checkpoint folder on a vLLM dev-mode server and set the version.

        Raises:
            TypeError: ``source`` is not a path (tensors cannot be sent over HTTP here).
        """
        if not isinstance(source, (str, Path)):
            raise TypeError("OpenAIHTTPEngine.update_weights needs a checkpoint folder path the server can read")
        self.pause("wait")
        try:
            self._post("/collective_rpc", json={"method": "reload_weights", "kwargs": {"weights_path": str(source)}})
            self._post("/update_weight_version", json={"new_version": str(version)})
            self._post("/reset_prefix_cache")
        finally:
            self.resume()
        self.policy_version = int(version)

    def pause(self, mode: str = "wait") -> None:
        """``POST /pause?mode=...`` (``wait`` | ``abort`` | ``keep``)."""
        if mode not in ("wait", "abort", "keep"):
            raise ValueError(f"pause mode must be 'wait', 'abort' or 'keep', got {mode!r}")
        self._post("/pause", params={"mode": mode})

    def resume(self) -> None:
        """``POST /resume``."""
        self._post("/resume")

    def close(self) -> None:
        """Close the HTTP client (idempotent)."""
        self.client.close()
