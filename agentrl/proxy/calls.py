"""One proxied call: prompt (TITO) → engine → reply → one recorded ``Turn``.

``ProxyCore.start_async`` (event loop) / ``start`` (any thread) takes the episode (calls of an
episode are serialised), passes the pause gate, builds the prompt and waits for the engine
worker.
The returned ``PendingCall`` is *committed* just before the reply's last bytes are sent
(``commit``: the turn is appended and the thread advanced, so ``set_reward(turn=t)`` and
``list_episodes`` see it as soon as the client has the reply) and *finished* once the reply
was delivered or the client hung up (``finish``: the deferred drift metric, then the
episode is released for its next call). A client that disconnects before the end of the
reply (mid-stream, or before a non-streamed body went out) yields a turn with
``info["trainable"] = False``, ``finish_reason = "abort"`` and no completion ids: the
sampled ids are dropped from training and the thread's history is put back where it was.
A failing drift measurement never loses the turn: ``token_prefix_ok`` is None and
``info["drift_error"]`` says why (also logged with the episode id).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from agentrl.llm.base import FINISH_ABORT, FINISH_LENGTH, Completion, LLMClient, SamplingParams
from agentrl.llm.chat import ChatRenderer
from agentrl.llm.grammar import compiler_for, grammar_info
from agentrl.proxy.encoder import Encoder
from agentrl.proxy.forcing import server_constraints
from agentrl.proxy.engine import EngineWorker, Gate
from agentrl.proxy.errors import WireError
from agentrl.proxy.messages import canonical, split_tool_calls
from agentrl.proxy.retry import drop_completion, restore, retry_target, rewind, supersede, threads_before
from agentrl.proxy.sessions import EpisodeSession, SessionRegistry
from agentrl.proxy.stops import StopCut, cut_completion, find_stop
from agentrl.proxy.turn_fields import failure_of, mark_aborted, observation_of, sampling_info, tool_call_checks
from agentrl.proxy.tito import (MODES, PromptPlan, commit_thread, drift_of, new_segment, plan_chat, plan_completion,
                                thread_index)
from agentrl.proxy.wire import ChatRequest, ToolCall, WireMessage
from agentrl.types import Turn

log = logging.getLogger(__name__)


@dataclass
class PendingCall:
    """A generated reply waiting to be delivered and recorded.

    Attributes:
        session: the episode. plan: how the prompt was built. request: the parsed request.
        completion: the engine's output. content / tool_calls: the parsed reply.
        finish_reason: OpenAI finish reason (``stop | length | tool_calls``).
        text: the decoded completion (EOS dropped). sampling: the effective sampling
            parameters. version_start: policy version at admission.
        turn: the recorded turn (after ``commit`` or ``finish``).
        stop: where a ``stop`` string cut the completion (``agentrl.proxy.stops``), else None.
    """

    core: "ProxyCore"
    session: EpisodeSession
    plan: PromptPlan
    request: ChatRequest
    completion: Completion
    text: str
    content: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    sampling: SamplingParams
    version_start: int
    t_start: float
    turn: Turn | None = None
    stop: StopCut | None = None
    _done: bool = field(default=False, repr=False)
    _prev: object = field(default=None, repr=False)  # the thread's last full encode (drift base)
    _thread: object = field(default=None, repr=False)  # the ThreadState this call committed
    _undo: tuple | None = field(default=None, repr=False)  # (segment, n_segments, forks, old thread)
    retry_of: "PendingCall | None" = field(default=None, repr=False)  # the call this one resends
    _superseded: tuple | None = field(default=None, repr=False)  # supersede's token, for unrecord

    def commit(self) -> Turn:
        """Record the turn as delivered, before the reply's last bytes are sent (idempotent;
        the episode stays held until ``finish``)."""
        if self.turn is None:
            self.turn = self.core.record(self, True)
        return self.turn

    def finish(self, delivered: bool) -> Turn:
        """Complete the call (idempotent): record the turn unless ``commit`` did, measure the
        deferred drift metric, then release the gate and the episode.

        Args:
            delivered: the client received the whole reply; False records an aborted,
                non-trainable turn (or turns the committed one into it) and keeps the
                thread's history where it was.
        """
        if self._done:
            return self.turn
        self._done = True
        try:
            if self.turn is None:
                self.turn = self.core.record(self, delivered)
            elif not delivered:
                self.turn = self.core.unrecord(self)
            self.core.measure(self)
        finally:
            self.core.gate.leave()
            self.session.release()
        return self.turn


class ProxyCore:
    """Everything behind the routes: renderer, engine worker, gate and sessions.

    Args:
        engine: any ``LLMClient`` (token-in/token-out).
        renderer: the policy's ``ChatRenderer``.
        registry: the episode sessions.
        mode: ``tito`` | ``retokenize`` | ``strict`` (``agentrl.proxy.tito``).
        sampling: defaults for parameters a request leaves out.
        measure_drift: compute ``token_prefix_ok`` on TITO calls (one full re-encode per call,
            done in ``measure``, i.e. after the reply was sent).
        max_batch: most prompts per engine call.
        model_name: the id served on ``GET models``.
        unknown_fields: ``ignore`` (unknown request keys are ignored and recorded in
            ``info["ignored_fields"]``) | ``refuse`` (a 400); None: ``refuse`` in ``strict``
            mode, else ``ignore``. Null-valued keys are always ignored.
        while_paused / retry_after_s: a call during a weight update waits or gets 429 (``Gate``).
        tool_schemas / force_tools / only_tools: the server's tool-call constraints (``forcing.server_constraints``).
        resends: ``retry`` (an exact resend of the last call supersedes it, ``agentrl.proxy.retry``)
            | ``new_call`` (its own turn: a stateless agent's prompt can repeat on purpose).
    Raises:
        ValueError: an unknown mode, ``unknown_fields``, ``while_paused`` or ``resends`` value.
    """

    def __init__(self, engine: LLMClient, renderer: ChatRenderer, registry: SessionRegistry, *, mode: str = "tito",
                 sampling: SamplingParams | None = None, measure_drift: bool = True, max_batch: int = 32,
                 model_name: str = "policy", unknown_fields: str | None = None, while_paused: str = "hold",
                 retry_after_s: float = 1.0, tool_schemas: dict | None = None, force_tools: bool = False,
                 only_tools: tuple[str, ...] | None = None,
                 resends: str = "retry") -> None:
        if mode not in MODES:
            raise ValueError(f"proxy mode must be one of {MODES}, got {mode!r}")
        unknown_fields = unknown_fields or ("refuse" if mode == "strict" else "ignore")
        if unknown_fields not in ("ignore", "refuse"):
            raise ValueError(f"unknown_fields must be 'ignore' or 'refuse', got {unknown_fields!r}")
        self.strict_fields = unknown_fields == "refuse"
        try:  # engines that return the top alternatives per step take generate(..., top_logprobs=K)
            params = inspect.signature(engine.generate).parameters
        except (TypeError, ValueError):
            params = {}
        self.top_logprobs_ok, self.grammar_ok = "top_logprobs" in params, "grammars" in params
        self.engine, self.renderer, self.registry, self.mode = engine, renderer, registry, mode
        self.sampling = sampling or SamplingParams()
        self.measure_drift, self.model_name = measure_drift, model_name
        self.worker = EngineWorker(engine, max_batch=max_batch)
        self.gate = Gate(while_paused, retry_after_s)
        self.tool_schemas, self.force_tools = dict(tool_schemas or {}), bool(force_tools)
        self.only_tools = tuple(only_tools) if only_tools else None
        if resends not in ("retry", "new_call"):
            raise ValueError(f"resends must be 'retry' or 'new_call', got {resends!r}")
        self.resends = resends
        self._render_lock = threading.Lock()  # fast tokenizers are not safe under concurrent calls
        self.encoder = Encoder(renderer)  # renderer.encode's ids, faster; incremental full re-encodes

    def start(self, session: EpisodeSession, req: ChatRequest) -> PendingCall:
        """Admit, build the prompt, generate (blocking). The caller must ``finish`` the result.

        Raises:
            WireError: 409 closed episode, 400 bad prompt (strict drift, context overflow),
                429 during a weight update (``while_paused: reject``), 503 engine failure;
                a 400 or 503 is noted on the episode (it closes ``aborted``).
        """
        req = self._constrained(req)
        session.acquire()
        try:
            self.gate.enter()
        except BaseException:
            session.release()
            raise
        try:
            plan, sampling, version, t0, retry = self._plan(session, req)
            fut = self.worker.submit(plan.prompt_ids, sampling, req.top_logprobs, self._grammar(req))
            return self._pending(session, req, plan, sampling, version, t0, self._engine_result(fut), retry)
        except BaseException as exc:
            if isinstance(exc, WireError):
                session.note_failure("model_call_failed", f"answered {exc.status}: {exc.message}")
            self.gate.leave()
            session.release()
            raise

    async def start_async(self, session: EpisodeSession, req: ChatRequest, run) -> PendingCall:
        """``start`` for the event loop: admission and rendering run inline when they need no
        waiting (``run(fn)`` runs the blocking waits in a thread), the engine is awaited."""
        req = self._constrained(req)
        if not session.try_acquire():
            await run(session.acquire)
        try:
            if not self.gate.try_enter():
                await run(self.gate.enter)
        except BaseException:
            session.release()
            raise
        try:
            plan, sampling, version, t0, retry = self._plan(session, req)
            fut = self.worker.submit(plan.prompt_ids, sampling, req.top_logprobs, self._grammar(req))
            try:
                await asyncio.wrap_future(fut)
            except (ValueError, RuntimeError):
                pass  # the engine's refusal: ``_engine_result`` turns it into a 400 / 503 as in ``start``
            return self._pending(session, req, plan, sampling, version, t0, self._engine_result(fut), retry)
        except BaseException:
            self.gate.leave()
            session.release()
            raise

    def _plan(self, session: EpisodeSession,
              req: ChatRequest) -> tuple[PromptPlan, SamplingParams, int, float, "PendingCall | None"]:
        t0 = time.time()
        if req.top_logprobs and not self.top_logprobs_ok:
            raise WireError(400, f"'top_logprobs' needs an engine that returns the top alternatives of each token; "
                                 f"{type(self.engine).__name__} does not (HFEngine does); remove 'top_logprobs'",
                            param="top_logprobs" if req.dialect != "completions" else "logprobs")
        retry = retry_target(session, req) if self.resends == "retry" else None  # planned as the first attempt
        threads = session.threads if retry is None else threads_before(session, retry)
        with self._render_lock:
            if req.prompt is not None:
                plan = plan_completion(self.renderer, threads, req, encoder=self.encoder)
            else:
                plan = plan_chat(self.renderer, threads, req, mode=self.mode, measure_drift=self.measure_drift,
                                 encoder=self.encoder)
        limit = int(self.engine.max_context)
        if plan.prompt_ids.size >= limit:  # refused here, so it never fails a whole engine batch
            raise WireError(400, f"the prompt has {plan.prompt_ids.size} tokens and leaves no room in the model's "
                                 f"context of {limit} tokens; shorten or compact the conversation", param="messages")
        return plan, session.effective(req.sampling), int(self.engine.policy_version), t0, retry

    def _constrained(self, req: ChatRequest) -> ChatRequest:
        """``req`` with the server's tool-call constraints applied to its grammar (``forcing``)."""
        if not (self.tool_schemas or self.force_tools or self.only_tools) or req.prompt is not None:
            return req
        grammar = server_constraints(req.grammar, req.tools, self.tool_schemas, self.force_tools, self.only_tools)
        return req if grammar is req.grammar else dataclasses.replace(req, grammar=grammar)

    def _grammar(self, req: ChatRequest):
        """The compiled grammar of ``req`` (None: unconstrained). Raises ``WireError`` 400 when
        the engine cannot constrain (names it), llguidance is missing or rejects the schema."""
        if req.grammar is None:
            return None
        param = "tool_choice" if req.grammar.kind == "tool_call" else {
            "chat": "response_format", "responses": "text.format"}.get(req.dialect, "output_config.format")
        if not self.grammar_ok:
            raise WireError(400, f"'{param}' needs grammar-constrained decoding with exact constrained logprobs, "
                                 f"which {type(self.engine).__name__} does not provide (HFEngine does); remove "
                                 f"'{param}' or serve the policy with the HF engine", param=param)
        try:
            with self._render_lock:
                return compiler_for(self.renderer).compile(req.grammar)
        except (ImportError, ValueError) as exc:
            raise WireError(400, f"'{param}' cannot be honoured: {exc}", param=param) from None

    @staticmethod
    def _engine_result(fut) -> Completion:
        try:
            return fut.result()
        except ValueError as exc:  # prompt too long for the context
            raise WireError(400, str(exc), param="messages") from None
        except RuntimeError as exc:
            raise WireError(503, f"the engine refused the call ({exc}); retry later", kind="server_error") from None

    def _pending(self, session: EpisodeSession, req: ChatRequest, plan: PromptPlan, sampling: SamplingParams,
                 version: int, t0: float, completion: Completion, retry: "PendingCall | None" = None) -> PendingCall:
        cut = None
        with self._render_lock:
            if req.stop and completion.finish_reason != FINISH_ABORT:
                cut = find_stop(self.renderer.completion_text, completion.token_ids, req.stop)
                if cut is not None:
                    completion = cut_completion(completion, cut)
            text = self.renderer.completion_text(completion.token_ids)
        content, calls = split_tool_calls(text[:cut.chars] if cut else text, tools_offered=bool(req.tools))
        reason = "tool_calls" if calls else ("length" if completion.finish_reason == FINISH_LENGTH else "stop")
        return PendingCall(self, session, plan, req, completion, text, content, calls, reason, sampling, version, t0,
                           retry_of=retry, stop=cut)

    def record(self, call: PendingCall, delivered: bool) -> Turn:
        """Append the call's ``Turn`` to its episode and, when delivered, advance its thread
        (see the module docstring). Drift measured before generating (``retokenize``,
        ``strict``) goes into ``info`` here; a pending one is left to ``measure``."""
        s, plan, c = call.session, call.plan, call.completion
        mixed = int(c.policy_version) != call.version_start  # weights changed while it was generated
        aborted = not delivered or c.finish_reason == FINISH_ABORT or mixed
        if aborted:
            s.note_failure(*failure_of(call.version_start, int(c.policy_version), delivered))
        retry_of = None
        if call.retry_of is not None and not aborted:
            call._superseded = supersede(s, call.retry_of)
            retry_of = call._superseded[0]
        old = s.threads.get(plan.key)
        call._prev = old.rendered if old is not None else None
        info = {"call": s.calls, "thread": thread_index(s.threads, plan.key), "prompt_source": plan.source,
                "cause": plan.cause, "fork": plan.fork and not aborted,
                "finish_reason": "abort" if aborted else call.finish_reason,
                "trainable": not aborted, "stream": call.request.stream, "sampling": sampling_info(call.sampling),
                "sampling_sent": call.request.sent, "policy_version_start": call.version_start,
                "token_faithful": bool(c.token_faithful), "logprob_mode": c.logprob_mode,
                "latency_s": round(time.time() - call.t_start, 6), "tool_calls": len(call.tool_calls),
                "dialect": call.request.dialect}
        info.update(tool_call_checks(call.text[:call.stop.chars] if call.stop else call.text, call.tool_calls,
                                     call.request.tools))
        if call.request.ignored:
            info["ignored_fields"] = list(call.request.ignored)
        if call.stop is not None:
            info["stop"], info["stop_cut_tokens"] = call.stop.stop, call.stop.dropped
        if call.request.grammar is not None:
            info.update(grammar_info(call.request.grammar, c))
        if plan.token_prefix_ok is not None:
            info["token_prefix_ok"] = plan.token_prefix_ok
            if plan.first_mismatch is not None:
                info["first_mismatch"] = plan.first_mismatch
        ids, lps = c.token_ids, c.logprobs
        if aborted:
            mark_aborted(info, int(ids.size))
            ids, lps = np.zeros(0, np.int32), np.zeros(0, np.float32)
        else:
            call._undo = (s.segment, s.n_segments, s.forks, old)
            if new_segment(plan, s.threads, s.segment) or s.segment is None:
                s.segment = s.n_segments
                s.n_segments += 1
            s.forks += int(plan.fork)
            reply = None
            if call.request.prompt is None:
                reply = canonical(WireMessage("assistant", call.content, call.tool_calls))
            call._thread = commit_thread(s.threads, plan, call.request, reply, c.token_ids, call.text, s.segment)
            info["segment"], info["forks"] = s.segment, s.forks
            s.last_call = call
        if retry_of is not None:
            info["retry_of"] = retry_of
        ep = s.episode
        obs = observation_of(call.request)
        turn = Turn(run_id=ep.run_id, episode_id=ep.episode_id, group_id=ep.group_id, t=len(ep.turns), observation=obs,
                    anchor_obs=obs, action=self.renderer_text(call), action_valid=not aborted, reward=None,
                    prompt_ids=plan.prompt_ids, completion_ids=ids, completion_logprobs=lps,
                    policy_version=int(c.policy_version), info=info)
        ep.turns.append(turn)
        s.calls += 1
        return turn

    def unrecord(self, call: PendingCall) -> Turn:
        """Turn a call recorded as delivered whose reply did not go out into an aborted,
        non-trainable turn (same ``t``, reward kept): the thread and the segment counters
        go back to where they were before the call."""
        s, t = call.session, call.turn
        if call._undo is None:  # recorded as aborted already
            return t
        s.note_failure("client_disconnected", "the client hung up before the whole reply was delivered")
        rewind(s, call)
        if s.last_call is call:
            s.last_call = None
        if call._superseded is not None:  # the first attempt was superseded by this reply: it stays
            restore(s, call._superseded)
            call._superseded = None
        info = {k: v for k, v in t.info.items() if k not in ("segment", "forks", "retry_of")}
        mark_aborted(info, int(t.completion_ids.size))
        return drop_completion(s, t, info)

    def measure(self, call: PendingCall) -> None:
        """The deferred drift metric of a recorded call (``tito`` mode): fills the turn's
        ``token_prefix_ok`` / ``first_mismatch`` and keeps the full encode as the thread's
        base for the next call's. Never raises: a failure sets ``token_prefix_ok = None``
        and ``info["drift_error"]`` (``"Type: message"``) and is logged with the episode id."""
        plan, info = call.plan, call.turn.info
        if plan.drift_head is None:
            return
        try:
            with self._render_lock:
                plan = call.plan = drift_of(plan, self.encoder, call._prev)
        except Exception as exc:  # noqa: BLE001 - the turn is recorded; only its metric is missing
            info["token_prefix_ok"] = None
            info["drift_error"] = f"{type(exc).__name__}: {exc}"
            log.warning("episode %d turn %d: drift measurement failed (%s); turn kept without it",
                        call.session.episode.episode_id, call.turn.t, info["drift_error"], exc_info=True)
            return
        info["token_prefix_ok"] = plan.token_prefix_ok
        if plan.first_mismatch is not None:
            info["first_mismatch"] = plan.first_mismatch
        if call._thread is not None:
            call._thread.rendered = plan.rendered

    def renderer_text(self, call: PendingCall) -> str:
        """The action text of a call: the reply content, or its tool calls as JSON lines."""
        if call.tool_calls:
            calls = "\n".join(f'{{"name": "{tc.name}", "arguments": {tc.arguments}}}' for tc in call.tool_calls)
            return f"{call.content}\n{calls}".strip()
        return call.content

    def close(self) -> None:
        """Stop the engine worker."""
        self.worker.close()
