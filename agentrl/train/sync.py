"""The weight sync after every update, bounded in time and checked by a probe.

``sync_weights`` makes every engine sample from the trainer's current weights:

- in-process HF (one process): the engine samples from the trained model object itself, so
  only the version moves;
- one process with a separate engine (vLLM): the merged weights are pushed with
  ``engine.update_weights``;
- data-parallel (torchrun): every rank streams the FSDP2 shards into **its own** engine, on
  its own device (``agentrl.distributed.iter_inference_weights``: one parameter all-gathered
  at a time, LoRA merged there); with engine workers (``rollout.engines`` ≥ 1) the weights
  are gathered to rank 0 instead, which pushes them to the workers.

``SyncCheck`` then scores a fixed probe (prompt + completion) on every engine that does not
share the trained model and compares it with the trainer's own logprobs of the same tokens
(what hurt verl, TRL and AReaL users most: syncs that silently push nothing). A gap above
the tolerance, or an engine whose probe did not move at all (bit for bit) while the
trainer's moved by more than a tenth of the tolerance, stops the run
with one line naming the engine, the version and the gap. ``deadline`` bounds the sync:
past ``rollout.sync_timeout_s`` the process says so in one line, dumps its threads' stacks
and exits (a hung collective cannot be interrupted from Python).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from agentrl.config import Config
from agentrl.distributed import DistContext, inference_state, iter_inference_weights
from agentrl.llm.policy import Policy
from agentrl.types import Message
from agentrl.update.batch import build_batch
from agentrl.update.logprobs import batch_logprobs
from agentrl.update.lora import inference_state_dict

__all__ = ["SyncError", "sync_weights", "deadline", "SyncCheck", "synced", "PROBE_PROMPT", "PROBE_ANSWER"]

#: The probe's user message and assistant answer (fixed: the same tokens after every sync).
PROBE_PROMPT = "Weight-sync probe. Reply with the numbers from one to five."
PROBE_ANSWER = "one two three four five"
#: Exit status of a process stopped by ``deadline``.
DEADLINE_EXIT = 3


class SyncError(RuntimeError):
    """A weight sync did not reach an engine (the probe disagrees with the trainer)."""


def sync_weights(policy: Policy, version: int | None = None, engines=None, dp: DistContext | None = None, *,
                 workers: bool | None = None) -> None:
    """Make the engines sample from the trainer's current weights, as policy ``version``
    (default: the engine's version + 1, i.e. after one more update); see the module doc.

    Args:
        engines: rank 0's engine workers or asynchronous stream (``rollout.engines`` ≥ 1), or None.
        dp: the data-parallel ranks (a **collective** then: every rank calls it).
        workers: whether rank 0 has engine workers (default: ``engines is not None``); every
            rank of a data-parallel run must pass the same value (it picks the collective).
    """
    version = policy.engine.policy_version + 1 if version is None else int(version)
    workers = engines is not None if workers is None else workers
    if policy.shares_weights:
        policy.engine.policy_version = version
        if engines is not None:
            engines.push_weights(inference_state_dict(policy.model), version)
        return
    if dp is None:
        state = inference_state_dict(policy.model)
    elif not workers:  # every rank: its own engine, from the shards on its device
        policy.engine.update_weights(iter_inference_weights(policy.model), version)
        return
    else:  # rank 0 gathers for its workers (and its engine, which evaluates); the others only count
        state = inference_state(policy.model, dp)
        if state is None:
            policy.engine.policy_version = version
            return
    policy.engine.update_weights(state, version)
    if engines is not None:
        engines.push_weights(state, version)


@contextmanager
def deadline(seconds: float, what: str):
    """Run the body within ``seconds``; past that, write one line naming ``what`` and the
    setting to stderr, dump every thread's stack (``faulthandler``) and exit the process with
    status ``DEADLINE_EXIT`` (a collective or an engine stuck in C cannot be interrupted)."""
    def fire() -> None:
        sys.stderr.write(f"[agentrl] {what} did not finish in {seconds:g} s (rollout.sync_timeout_s); "
                         "stopping the run (thread stacks follow)\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(DEADLINE_EXIT)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def probe_tokens(renderer) -> tuple[np.ndarray, np.ndarray]:
    """(int32[P] prompt ids, int32[C] completion ids + EOS) of the fixed probe, rendered with
    the policy's chat template."""
    prompt = renderer.render_ids([Message(role="user", content=PROBE_PROMPT)], add_generation_prompt=True)
    answer = np.concatenate([renderer.encode(PROBE_ANSWER), [renderer.eos_token_id]]).astype(np.int32)
    return np.asarray(prompt, dtype=np.int32), answer


def trainer_logprobs(model: torch.nn.Module, prompt: np.ndarray, completion: np.ndarray) -> np.ndarray:
    """float32[C] logprobs of ``completion`` after ``prompt`` under the trained ``model``, by the
    update's own forward (``batch_logprobs``; a collective for an FSDP2-sharded model)."""
    batch = build_batch([prompt], [completion], [np.zeros(completion.size, np.float32)], np.zeros(1), pad_id=0)
    lp = batch_logprobs(model, batch, micro_batch=1)[0]  # (T,)
    return lp[prompt.size: prompt.size + completion.size].numpy()


def default_tolerance(model: torch.nn.Module) -> float:
    """Max |logprob gap| (nats) of a good sync: 1e-3 for float32 weights, 0.5 for bf16/fp16
    (different kernels and batch shapes round differently; a missed sync moves more)."""
    dtype = next((p.dtype for p in model.parameters()), torch.float32)
    return 1e-3 if dtype == torch.float32 else 0.5


@dataclass
class SyncCheck:
    """The probe after every weight sync (``rollout.sync_probe``).

    Attributes:
        prompt / completion: the probe's token ids (``probe_tokens``).
        tolerance: max |engine − trainer| logprob gap in nats.
        always: probe even an engine that samples from the trained model itself.
        last: per engine label, the (engine, trainer) probe logprobs of the previous check.
        at_version: asynchronous rollouts: the trainer's probe logprobs per recent version.
        checked: engines probed by the last ``check`` (every rank's together).
    """

    prompt: np.ndarray
    completion: np.ndarray
    tolerance: float
    always: bool = False
    last: dict = field(default_factory=dict)
    at_version: dict = field(default_factory=dict)
    checked: int = 0

    @classmethod
    def from_config(cls, cfg: Config, policy: Policy) -> "SyncCheck | None":
        """The run's check, or None (``rollout.sync_probe: never``, or ``auto`` with nothing to probe)."""
        mode = cfg.rollout.sync_probe
        if mode == "never" or (mode == "auto" and policy.shares_weights and not cfg.rollout.engines):
            return None
        prompt, completion = probe_tokens(policy.renderer)
        # the engines' dtype: float32 masters (update.master_weights) sample in policy.dtype
        tol = cfg.rollout.sync_probe_tol or (default_tolerance(policy.model) if cfg.policy.dtype == "float32" else 0.5)
        return cls(prompt, completion, tol, always=mode == "always")

    def engine_scores(self, policy: Policy, engines, local: bool) -> list[tuple[str, np.ndarray, int | None]]:
        """``(label, float32[C], the policy version it holds or None)`` of every engine this
        process checks: its own (when ``local``) and its engine workers (which say their version)."""
        out = []
        if local and (self.always or not policy.shares_weights):
            out.append(("engine", np.asarray(policy.engine.score(self.prompt, self.completion), np.float32), None))
        for s in engines.score(self.prompt, self.completion) if hasattr(engines, "score") else ():
            out.append((f"engine worker {s.worker}", np.asarray(s.logprobs, np.float32), int(s.policy_version)))
        return out

    def verdict(self, label: str, engine: np.ndarray, trainer: np.ndarray, version: int,
                held: int | None = None) -> tuple[float, str | None]:
        """(max |gap|, None when good, else the one-line reason) of one engine's probe;
        ``held``: the version the engine says it holds (None: not reported) — any other than
        ``version`` fails, whatever the gap (weights the trainer did not push)."""
        gap = float(np.abs(engine - trainer).max())
        if held is not None and held != int(version):
            return gap, (f"{label} holds policy version {held}, but the trainer pushed {version}: it loaded weights "
                         "the trainer did not send")
        before = self.last.get(label)
        self.last[label] = (engine, trainer)
        if gap > self.tolerance:
            return gap, (f"{label} at policy version {version}: probe logprobs differ from the trainer's by "
                         f"{gap:.3g} nats (tolerance {self.tolerance:.3g}, rollout.sync_probe_tol)")
        if before is not None:
            moved = float(np.abs(trainer - before[1]).max())
            if moved > 0.1 * self.tolerance and np.array_equal(engine, before[0]):
                return gap, (f"{label} at policy version {version}: its probe logprobs did not change while the "
                             f"trainer's moved by {moved:.3g} nats: the sync loaded nothing")
        return gap, None

    def check(self, policy: Policy, engines, dp: DistContext | None, version: int, *,
              local: bool = True) -> float:
        """Probe every engine after the sync to ``version``; returns the largest gap (nats).
        Data-parallel: a collective (the trainer's forward); every rank checks its own engine
        (``local``) and rank 0 its engine workers, and every rank raises the same error.

        Raises:
            SyncError: naming the first failing engine (its rank), the version and the gap.
        """
        trainer = trainer_logprobs(policy.model, self.prompt, self.completion)
        rank = f"rank {dp.rank}'s " if dp is not None and dp.world_size > 1 else ""
        found = [self.verdict(rank + lbl, lp, trainer, version, held)
                 for lbl, lp, held in self.engine_scores(policy, engines, local)]
        worst, self.checked = self._conclude(found, dp)
        return worst

    def check_reports(self, policy: Policy, stream, dp: DistContext | None, version: int) -> tuple[float, int]:
        """Asynchronous rollouts: the workers load versions on their own and score the probe
        after each load (``EngineStream.probe_reports``). Records the trainer's probe logprobs
        at ``version`` (a collective under data parallelism) and checks every report received
        since the last call against the trainer's logprobs at the report's version. Returns
        (largest gap, reports checked).

        Raises:
            SyncError: naming the first failing worker, its version and the gap.
        """
        self.at_version[int(version)] = trainer_logprobs(policy.model, self.prompt, self.completion)
        found = []
        for worker, v, lp in stream.probe_reports() if hasattr(stream, "probe_reports") else ():
            if v > int(version):  # the trainer's newest push is `version`: nothing above it was sent
                found.append((float("inf"), f"engine worker {worker} loaded policy version {v}, newer than any the "
                              f"trainer pushed ({version}): weights the trainer did not send"))
                continue
            ref = self.at_version.get(v)
            if ref is None:  # older than the versions kept (a worker that slept through several)
                continue
            gap = float(np.abs(np.asarray(lp, np.float32) - ref).max())
            found.append((gap, None if gap <= self.tolerance else (
                f"engine worker {worker} at policy version {v}: probe logprobs differ from the trainer's by "
                f"{gap:.3g} nats (tolerance {self.tolerance:.3g}, rollout.sync_probe_tol)")))
        for old in sorted(self.at_version)[:-16]:  # a worker is never more than S versions behind
            del self.at_version[old]
        return self._conclude(found, dp)

    @staticmethod
    def _conclude(found: list, dp: DistContext | None) -> tuple[float, int]:
        """(largest gap, verdicts) over every rank's verdicts, or the first failure raised on every rank."""
        if dp is not None:
            every = dp.gather_object(found)
            found = dp.broadcast_object(None if every is None else [x for part in every for x in part])
        worst = max((gap for gap, _ in found), default=0.0)
        bad = next((why for _, why in found if why is not None), None)
        if bad is not None:
            raise SyncError(f"weight sync check failed: {bad}; the engine samples from other weights than the "
                            "trainer's (check the weight transport; rollout.sync_probe: never skips this check)")
        return worst, len(found)


def synced(policy: Policy, cfg: Config, check: SyncCheck | None, engines=None, dp: DistContext | None = None,
           version: int | None = None) -> dict[str, float]:
    """``sync_weights`` within ``rollout.sync_timeout_s``, then ``check`` (when given); returns
    the metrics ``sync/seconds`` and, when probed, ``sync/probe_max_abs_diff`` (nats),
    ``sync/probe_s`` and ``sync/probe_engines`` (engines probed) — asynchronous rollouts:
    ``sync/probe_reports`` (worker loads checked since the last sync) instead.

    Raises:
        SyncError: see ``SyncCheck.check``.
    """
    t0 = time.perf_counter()
    target = policy.engine.policy_version + 1 if version is None else int(version)
    workers = bool(cfg.rollout.engines)
    with deadline(cfg.rollout.sync_timeout_s, f"the weight sync to policy version {target}"):
        sync_weights(policy, target, engines=engines, dp=dp, workers=workers)
    out = {"sync/seconds": time.perf_counter() - t0}
    if check is not None and cfg.rollout.max_staleness:  # workers load versions on their own and report
        t1 = time.perf_counter()
        out["sync/probe_max_abs_diff"], out["sync/probe_reports"] = check.check_reports(policy, engines, dp, target)
        out["sync/probe_s"] = time.perf_counter() - t1
    elif check is not None:
        t1 = time.perf_counter()
        local = dp is None or not workers or dp.is_main  # with workers only rank 0's engine is kept in sync
        out["sync/probe_max_abs_diff"] = check.check(policy, engines, dp, target, local=local)
        out["sync/probe_engines"] = float(check.checked)
        out["sync/probe_s"] = time.perf_counter() - t1
    return out
