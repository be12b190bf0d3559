"""Identical resends through the proxy: a harness retry is one turn, not two.

Agent harnesses resend a request when they did not accept the reply (a client timeout, a
parse failure, an SDK's automatic retry). When a request of an episode repeats the *last
delivered call* exactly (the same thread and canonical messages, or the same
``completions`` prompt), the proxy treats it as a **retry** of that call (issue 19 item 4):

* the prompt is planned against the episode's state *before* that call, so it extends the
  history exactly as the first attempt did (no fork, no new segment);
* once the retry's reply is delivered, the first attempt's turn is *superseded*: it keeps its
  ``t`` and reward slot but loses its completion ids (``info["trainable"] = False``,
  ``info["superseded_by_retry"] = True``, ``info["superseded_completion_tokens"] = n``), and
  the segment / fork counters and the thread go back to where they were before it. The retry's
  turn records ``info["retry_of"]`` = the first attempt's ``t``.

So the episode trains on one copy of the turn: the one whose reply the harness went on with.
A retry that is itself not delivered changes nothing (the first attempt stays) — also when
its reply was recorded and the client left before the last bytes went out: ``restore`` puts
the first attempt's turn, thread and counters back.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from agentrl.proxy.messages import canonical, thread_key
from agentrl.proxy.tito import ThreadState
from agentrl.proxy.wire import ChatRequest

__all__ = ["request_signature", "retry_target", "threads_before", "supersede", "restore", "rewind", "drop_completion"]


def request_signature(req: ChatRequest) -> tuple:
    """What makes two requests identical resends: the ``completions`` prompt, or the thread key
    with the canonical messages and the grammar (a resend that now forces a tool or JSON is a new
    request; sampling parameters do not count)."""
    if req.prompt is not None:
        return ("completions", req.prompt)
    return ("chat", thread_key(req.messages, req.tools), tuple(canonical(m) for m in req.messages), req.grammar)


def retry_target(session, req: ChatRequest):
    """The episode's last delivered call (a ``PendingCall``) when ``req`` resends it exactly, else None."""
    last = session.last_call
    if last is None or last._undo is None or last.turn is None:
        return None
    return last if request_signature(req) == request_signature(last.request) else None


def threads_before(session, last) -> dict[bytes, ThreadState]:
    """A copy of the episode's threads as they were before ``last`` was recorded."""
    threads = dict(session.threads)
    old = last._undo[3]
    if old is None:
        threads.pop(last.plan.key, None)
    else:
        threads[last.plan.key] = old
    return threads


def supersede(session, last) -> tuple:
    """Undo ``last`` (a delivered call being retried): restore the thread and the segment / fork
    counters, and turn its turn into a superseded, non-trainable one (ids dropped, ``t`` and
    reward kept). Returns what ``restore`` needs to take it back (its first item is the
    superseded turn's ``t``). The caller holds the episode."""
    token = (last.turn.t, last, last.turn, last._undo, last._thread, session.segment, session.n_segments,
             session.forks, session.threads.get(last.plan.key))
    rewind(session, last)
    turn = last.turn
    info = {k: v for k, v in turn.info.items() if k not in ("segment", "forks")}
    info.update(fork=False, trainable=False, superseded_by_retry=True,
                superseded_completion_tokens=int(turn.completion_ids.size))
    last.turn = drop_completion(session, turn, info)
    session.last_call = None
    return token


def rewind(session, call) -> None:
    """Put the episode's thread of ``call`` and its segment / fork counters back to where they
    were before ``call`` was recorded as delivered (``call._undo``); the call keeps no undo."""
    session.segment, session.n_segments, session.forks, old = call._undo
    if old is None:
        session.threads.pop(call.plan.key, None)
    else:
        session.threads[call.plan.key] = old
    call._undo = call._thread = None


def drop_completion(session, turn, info: dict):
    """Replace ``turn`` in its episode by a copy without completion ids (not valid, ``info``
    given), atomically for ``set_reward``; returns the copy (same ``t``, reward kept)."""
    with session.cv:
        new = dataclasses.replace(turn, action_valid=False, completion_ids=np.zeros(0, np.int32),
                                  completion_logprobs=np.zeros(0, np.float32), info=info)
        session.episode.turns[turn.t] = new
    return new


def restore(session, token: tuple) -> None:
    """Take back a ``supersede`` whose retry was not delivered after all (the client left after
    the retry was recorded): the first attempt's turn (with any reward set meanwhile), its
    thread, the segment / fork counters and ``last_call`` are as before the retry. The caller
    holds the episode and has undone the retry's own changes."""
    _, last, turn, undo, thread, session.segment, session.n_segments, session.forks, state = token
    session.threads[last.plan.key] = state
    last._undo, last._thread = undo, thread
    with session.cv:  # atomic for set_reward
        turn = dataclasses.replace(turn, reward=session.episode.turns[turn.t].reward)
        session.episode.turns[turn.t] = turn
    last.turn = turn
    session.last_call = last
