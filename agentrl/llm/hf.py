"""``HFEngine``: a transformers causal LM in-process (the default backend, CPU or GPU).

Batched sampling with left padding; temperature / top-p / max-tokens / stop ids; seeded
(``torch.random.fork_rng`` so the global stream is untouched). Logprobs of the sampled
tokens come from the **raw** logits, never from the processed scores (MODELS.md §2.5),
one decoding step at a time (``agentrl.llm.step_logprobs``: a (B, V) row per step, never the
(B, T, V) tensor of ``generate(output_logits=True)``). With ``allowed`` (constrained decoding,
``agentrl.llm.constrained``) each row follows a token trie and its logprobs are
renormalised over the allowed ids at each step. Loads weights in fp32 by default (the packaged
SmolLM2 folder is stored in bf16; bf16 → fp32 is exact). The engine follows its model's device:
inputs go to it, and every returned array (token ids, logprobs, hidden states) is CPU numpy.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import torch

from agentrl.llm.base import (
    PauseGate,
    FINISH_LENGTH,
    FINISH_STOP,
    Completion,
    SamplingParams,
    check_allowed,
    check_prompts,
    clamp_max_tokens,
    context_batches,
)
from agentrl.llm.constrained import TokenTrie
from agentrl.llm.decode_attention import set_decode_attention
from agentrl.llm.grammar import Grammar
from agentrl.llm.grammar_decode import GrammarLogits
from agentrl.llm.prefix_cache import PrefixKVCache, supports_prefix_cache
from agentrl.llm.step_logprobs import StepLogprobs, hf_model
from agentrl.llm.trie_decode import TrieMask

#: Default ``HFEngine(prefix_cache_mb=...)``: 1 GiB of cached keys/values.
DEFAULT_PREFIX_CACHE_MB = 1024


class HFEngine:
    """In-process transformers engine implementing ``LLMClient``.

    Args:
        model: a ``PreTrainedModel`` (causal LM), already on its device.
        eos_token_id: id that ends an assistant turn (e.g. ``<|im_end|>``).
        pad_token_id: id used for left padding (never attended to); default EOS.
        max_context: context length in tokens; default ``config.max_position_embeddings``.
        num_threads: torch intra-op threads (1 on the shared 2-core machine, MODELS.md §2.6);
            0 = ``OMP_NUM_THREADS`` when set, else all cores; None leaves torch's setting.
        prefix_cache_mb: memory bound (MiB) of the prefix KV cache that lets a prompt start
            from the keys/values of the longest prefix already computed (``agentrl.llm.prefix_cache``);
            0 turns it off. Models with sliding-window or hybrid caches always run uncached.
        decode_attention: ``grouped`` (default) switches an ``sdpa`` model to
            ``agentrl.llm.decode_attention.grouped_attention`` (decode steps without copying the
            cache); ``sdpa`` switches it back. The model object is shared with the trainer: its
            longer forwards run ``sdpa`` either way.
    Raises:
        ValueError: no EOS id, a negative ``prefix_cache_mb``, an unknown ``decode_attention``.
    """

    token_faithful = True

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        eos_token_id: int,
        pad_token_id: int | None = None,
        max_context: int | None = None,
        num_threads: int | None = 1,
        prefix_cache_mb: int = DEFAULT_PREFIX_CACHE_MB,
        decode_attention: str = "grouped",
    ) -> None:
        if eos_token_id is None:
            raise ValueError("HFEngine needs eos_token_id (the token that ends an assistant message)")
        if num_threads == 0:
            num_threads = _default_threads()
        if num_threads:
            torch.set_num_threads(num_threads)
        self.model = model.eval()
        self.eos_token_id = int(eos_token_id)
        self.pad_token_id = int(self.eos_token_id if pad_token_id is None else pad_token_id)
        self.max_context = int(max_context or model.config.max_position_embeddings)
        self.policy_version = 0
        self._gate = PauseGate()
        if prefix_cache_mb < 0:
            raise ValueError(f"HFEngine prefix_cache_mb must be >= 0 (0 = off), got {prefix_cache_mb}")
        self.prefix_cache = (PrefixKVCache(prefix_cache_mb << 20)
                             if prefix_cache_mb and supports_prefix_cache(model) else None)
        self.attention = set_decode_attention(model, decode_attention)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: str = "float32", device: str | torch.device = "cpu",
                        **kw) -> "HFEngine":
        """Load an HF folder (model + tokenizer ids) in ``dtype`` (fp32 by default) on
        ``device`` (a ``policy.device`` form: ``auto | cpu | cuda | cuda:N``, or a
        ``torch.device``; CPU by default). The device is resolved before the weights are read.

        Raises:
            FileNotFoundError: ``path`` is not a model folder.
            ConfigError: ``device`` names CUDA that is not there (``agentrl.llm.device``).
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from agentrl.llm.device import resolve_device

        if not (Path(path) / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a Hugging Face model folder (no config.json)")
        target = resolve_device(device)
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(target)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        return cls(model, eos_token_id=tok.eos_token_id, pad_token_id=pad, **kw)

    # ------------------------------------------------------------------ sampling
    @torch.inference_mode()
    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *, return_hidden: bool = False,
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None, top_logprobs: int = 0,
        grammars: Sequence[Grammar | None] | None = None,
    ) -> list[Completion]:
        """Sample one completion per prompt (see ``LLMClient.generate``).

        Shape: B prompts of lengths P_i → B completions of C_i ≤ max_tokens tokens.
        ``top_logprobs=K`` > 0: each completion also carries the K most likely ids of every
        step and their raw-logit logprobs (``Completion.top_ids`` / ``top_logprobs``, int32 /
        float32[C_i, K]; the unconstrained distribution).
        ``allowed``: per prompt, the allowed completions (id sequences ending with EOS) or
        None (unconstrained); constrained rows follow the trie, greedy or sampled
        (temperature / top-p apply to the restricted distribution), and their logprobs are
        the raw-logit log-softmax restricted to the allowed ids of each step.
        ``grammars``: per prompt a compiled ``agentrl.llm.grammar.Grammar`` or None; such a row
        samples only what its grammar allows (a forced tool call, JSON) and its logprobs are
        renormalised over the grammar's allowed ids of each step (``Completion.grammar_masks``
        holds those bitmasks; ``agentrl.llm.grammar_decode``). A row may not have both.
        ``sampling.row_seeds``: each row samples from its own seeded generator
        (``agentrl.llm.row_sampling``; the same distribution, batch-independent draws).
        ``sampling.seed``: the draws repeat for the same seed and the global torch RNG is left
        as it was; None draws fresh randomness from (and advances) the global RNG.
        Each prompt gets ``min(max_tokens, max_context − its length)`` new tokens; prompts
        whose padded batch would not fit the context run in separate batches
        (``context_batches``).
        Raises:
            ValueError: empty prompt, a prompt that fills the context, ``allowed`` or
                ``grammars`` of the wrong length, a row with both, a grammar that does not compile.
            RuntimeError: paused with mode ``"abort"``.
        """
        self._gate.admit()
        rows = check_prompts(prompts)
        allowed = check_allowed(allowed, len(rows))
        budgets = [clamp_max_tokens(p.size, sampling.max_tokens, self.max_context) for p in rows]
        batches = context_batches([p.size for p in rows], budgets, self.max_context)
        grammars = check_allowed(grammars, len(rows), "grammars")
        if any(a is not None and g is not None for a, g in zip(allowed, grammars)):
            raise ValueError("a prompt has both allowed completions and a grammar; constrain it with one of them")
        if len(batches) > 1:  # a long prompt would cut a short one's room (or overrun absolute positions)
            return self._generate_split(rows, sampling, batches, return_hidden, allowed, top_logprobs, grammars)
        return self._generate_batch(rows, sampling, budgets, return_hidden, allowed, top_logprobs, grammars)

    def _generate_batch(self, rows: list[np.ndarray], sampling: SamplingParams, budgets: list[int],
                        return_hidden: bool, allowed: list, top_logprobs: int, grammars: list) -> list[Completion]:
        """``generate`` of one batch that fits the context (arguments checked)."""
        from transformers import LogitsProcessorList

        tries = [None if a is None else TokenTrie(a) for a in allowed]
        ids, mask = _left_pad(rows, self.pad_token_id)  # (B, P)
        ids, mask = ids.to(_device(self.model)), mask.to(_device(self.model))  # GPU: inputs on the model's device
        past = self._cached_prefixes(rows, ids.device)  # keys/values of every prompt but its last token, or None
        stops = [self.eos_token_id, *sampling.stop_token_ids]
        kwargs = self._generate_kwargs(ids, mask, max(budgets), stops, sampling, past)
        gmask = GrammarLogits(grammars, ids.shape[1], set(stops), budgets) if any(g is not None for g in grammars) else None
        steps = StepLogprobs(tries, gmask, ids.shape[1], set(stops), budgets, top_logprobs)  # raw-logit logprobs
        procs = [steps] + ([TrieMask(tries, ids.shape[1], set(stops))] if any(t is not None for t in tries) else [])
        procs += [gmask] if gmask is not None else []
        if sampling.row_seeds is not None and not sampling.greedy:  # Gumbel-max over the warped scores, argmax
            procs.append(_row_sampler(sampling, len(rows), ids.device))
        kwargs["logits_processor"] = LogitsProcessorList(procs)
        with steps.attach(hf_model(self.model), hidden=return_hidden):
            out = self._run_generate(kwargs, sampling.seed)
        new = out.sequences[:, ids.shape[1] :]  # (B, T)
        if self.prefix_cache is not None:
            self.prefix_cache.store(rows, mask, new, [_length(new[b], budgets[b], set(stops)) for b in range(len(rows))],
                                    out.past_key_values)
        sampled, top = steps.finish(out.sequences)  # (B, T) float32; top-k (B, T, K) ids and logprobs
        outs = [
            self._one(new[b], sampled[b], budgets[b], set(stops), None if steps.hidden is None else steps.hidden[b],
                      None if top is None else (top[0][b], top[1][b]))
            for b in range(len(rows))
        ]
        for b, c in enumerate(outs):
            if grammars[b] is not None:
                c.grammar_masks = np.stack(gmask.masks[b][:c.token_ids.size]) if c.token_ids.size else None
                c.grammar_close_at = gmask.close_at[b]
        return outs

    def _generate_kwargs(self, ids: torch.Tensor, mask: torch.Tensor, max_new: int, stops: list[int],
                         sampling: SamplingParams, past) -> dict:
        """``model.generate`` keyword arguments (without logits processors)."""
        kwargs = dict(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, eos_token_id=stops,
                      pad_token_id=self.pad_token_id, return_dict_in_generate=True, do_sample=not sampling.greedy)
        if past is not None:
            kwargs["past_key_values"] = past
        if sampling.row_seeds is not None and not sampling.greedy:  # each row samples from its own generator
            kwargs["do_sample"] = False
        elif not sampling.greedy:  # top_k=0: no top-k cut (the model's generation_config may set one)
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        return kwargs

    def _run_generate(self, kwargs: dict, seed: int | None):
        """``model.generate(**kwargs)`` in eval mode; a ``seed`` forks and seeds the RNG (the
        global stream is left as it was), None draws from (and advances) the global RNG."""
        was_training = self.model.training  # the trainer may share this model object
        self.model.eval()
        try:
            dev = _device(self.model)  # on a GPU manual_seed reseeds CUDA too: fork (restore) that stream as well
            if seed is None:
                return self.model.generate(**kwargs)
            with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
                torch.manual_seed(seed)
                return self.model.generate(**kwargs)
        finally:
            self.model.train(was_training)

    def _cached_prefixes(self, rows: list[np.ndarray], device: torch.device):
        """The prefix cache's keys/values for ``rows`` laid out as ``_left_pad``'s batch (a
        ``DynamicCache`` of its first P − 1 columns), or None (no cache, or plain is cheaper)."""
        if self.prefix_cache is None:
            return None
        self.prefix_cache.check_weights(self.model)
        was_training = self.model.training
        self.model.eval()
        try:
            batch = self.prefix_cache.prepare(rows, self.model, device)
        finally:
            self.model.train(was_training)
        return None if batch is None else batch.cache

    def _generate_split(self, rows: list[np.ndarray], sampling: SamplingParams, batches: list[list[int]],
                        return_hidden: bool, allowed: list, top_logprobs: int = 0,
                        grammars: list | None = None) -> list[Completion]:
        """``generate`` over ``batches`` (row indices) one after the other, answers in row order."""
        out: list[Completion | None] = [None] * len(rows)
        for idx in batches:
            sub = sampling if sampling.row_seeds is None else replace(
                sampling, row_seeds=tuple(sampling.row_seeds[i] for i in idx))
            sub_allowed = None if all(a is None for a in allowed) else [allowed[i] for i in idx]
            sub_gram = None if not grammars or all(g is None for g in grammars) else [grammars[i] for i in idx]
            for i, c in zip(idx, self.generate([rows[i] for i in idx], sub, return_hidden=return_hidden,
                                               allowed=sub_allowed, top_logprobs=top_logprobs, grammars=sub_gram)):
                out[i] = c
        return out

    def _one(self, new: torch.Tensor, lp: torch.Tensor, budget: int, stops: set[int], hidden, top=None) -> Completion:
        toks = new[:budget].tolist()
        end = next((k + 1 for k, t in enumerate(toks) if t in stops), None)
        reason = FINISH_STOP if end is not None else FINISH_LENGTH
        end = end if end is not None else len(toks)
        return Completion(
            token_ids=np.asarray(toks[:end], dtype=np.int32),
            logprobs=lp[:end].cpu().numpy().astype(np.float32),
            finish_reason=reason,
            policy_version=self.policy_version,
            hidden=None if hidden is None else hidden.cpu().numpy().astype(np.float32),
            top_ids=None if top is None else top[0][:end].cpu().numpy(),
            top_logprobs=None if top is None else top[1][:end].cpu().numpy(),
        )

    # ------------------------------------------------------------------ scoring
    @torch.inference_mode()
    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> np.ndarray:
        """Teacher-forced logprobs of ``completion_ids`` after ``prompt_ids``.

        Returns:
            float32[C], log-softmax of the raw logits at each completion position.
        """
        seq = torch.tensor([list(prompt_ids) + list(completion_ids)], dtype=torch.long, device=_device(self.model))
        logits = self.model(input_ids=seq).logits[0].float()  # (L, V)
        p = len(prompt_ids)
        lp = logits[p - 1 : -1].log_softmax(-1)  # (C, V)
        return lp.gather(-1, seq[0, p:].unsqueeze(-1)).squeeze(-1).cpu().numpy().astype(np.float32)

    # ------------------------------------------------------------------ control
    def update_weights(self, source: str | Path | Mapping | Iterable, version: int) -> None:
        """Load weights (safetensors folder/file, state dict or ``(name, tensor)`` pairs), strict.

        Pairs are consumed one at a time and copied into the model as they come (a streamed
        sync from FSDP2 shards, ``agentrl.distributed.iter_inference_weights``, never holds
        the whole state twice); an unexpected name stops the load at once, a missing one is
        reported at the end. The version moves only after a complete load.

        Raises:
            FileNotFoundError: a path without safetensors files.
            RuntimeError: missing or unexpected parameter names.
        """
        if isinstance(source, (str, Path)):
            from safetensors.torch import load_file

            p = Path(source)
            files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
            if not files or not all(f.is_file() for f in files):
                raise FileNotFoundError(f"no .safetensors weights at {p}")
            state: dict = {}
            for f in files:
                state.update(load_file(str(f)))
            source = state
        pairs = source.items() if isinstance(source, Mapping) else source
        own = self.model.state_dict()
        required = set(own)
        if getattr(self.model.config, "tie_word_embeddings", False):
            required.discard("lm_head.weight")  # tied to the embeddings; checkpoints often omit it
        seen: set[str] = set()
        with torch.no_grad():
            for name, t in pairs:
                if name not in own:
                    raise RuntimeError(f"update_weights: unexpected parameter {name!r} (this model has e.g. "
                                       f"{sorted(own)[:3]})")
                own[name].copy_(t.to(own[name].dtype))
                seen.add(name)
        missing = required - seen
        if missing:
            raise RuntimeError(f"update_weights: missing {sorted(missing)[:5]} ({len(missing)} parameter(s) not loaded)")
        self.policy_version = int(version)

    def reset_prefix_cache(self) -> None:
        """Drop every cached prefix (``agentrl.llm.prefix_cache``); collects call it first."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    def pause(self, mode: str = "wait") -> None:
        """``wait``/``keep``: new ``generate`` calls block until ``resume``; ``abort``: they raise."""
        self._gate.pause(mode)

    def resume(self) -> None:
        """Admit requests again."""
        self._gate.resume()


def _length(new: torch.Tensor, budget: int, stops: set[int]) -> int:
    """Tokens of one row's completion: up to and including its first stop id, within ``budget``."""
    toks = new[:budget].tolist()
    return next((k + 1 for k, t in enumerate(toks) if t in stops), len(toks))


def _row_sampler(sampling: SamplingParams, n: int, device: torch.device):
    """``RowGumbelSampler`` for ``sampling.row_seeds`` (one per prompt; ``ValueError`` otherwise)."""
    from agentrl.llm.row_sampling import RowGumbelSampler

    if len(sampling.row_seeds) != n:
        raise ValueError(f"SamplingParams.row_seeds has {len(sampling.row_seeds)} seeds for {n} prompts; pass one per prompt")
    return RowGumbelSampler(sampling.row_seeds, sampling.temperature, sampling.top_p, device)


def _default_threads() -> int:
    """``OMP_NUM_THREADS`` when it is a positive integer, else the number of usable cores."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _device(model: torch.nn.Module) -> torch.device:
    """Device of the model's first parameter (CPU for a parameterless module)."""
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def _left_pad(rows: list[np.ndarray], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad int rows: returns ids int64[B, P] and attention mask int64[B, P]."""
    width = max(r.size for r in rows)
    ids = np.full((len(rows), width), pad, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, width - r.size :] = r
        mask[i, width - r.size :] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def load_hf_policy(name_or_path: str, *, max_context: int | None = None, device: str | torch.device = "cpu"):
    """Engine and chat renderer for a policy name (``smollm2-135m-instruct``) or HF folder.

    Returns:
        ``(HFEngine, ChatRenderer)``; the model in fp32 on ``device`` (CPU by default; the
        forms of ``policy.device``), 1 torch thread.
    Raises:
        FileNotFoundError: the packaged model is not prepared (names the command).
        KeyError: neither a packaged name nor a folder ("did you mean").
    """
    from transformers import AutoTokenizer

    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.models import resolve_model

    path = resolve_model(name_or_path)
    return HFEngine.from_pretrained(path, max_context=max_context, device=device), ChatRenderer(AutoTokenizer.from_pretrained(path))
