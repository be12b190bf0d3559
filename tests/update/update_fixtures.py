"""Shared helpers for tests/update: a tiny random causal LM and synthetic multi-turn turns.

The model is a 2-layer Qwen3 with vocab 256 and hidden 32 (~40k params), built in memory
from a fixed seed; fp32, eager attention, one thread. ``sgd`` and ``assert_same_step`` compare
the optimizer steps of two computation paths (micro-batch sizes, shared prefix, 1 process vs
2 ranks) without AdamW's amplification of rounding noise.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

VOCAB = 256
PAD = 0


def tiny_model(seed: int = 0) -> Qwen3ForCausalLM:
    """A freshly initialised tiny Qwen3 causal LM in train mode (dropout is 0)."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
                      tie_word_embeddings=True, pad_token_id=PAD, eos_token_id=1, bos_token_id=None)
    model = Qwen3ForCausalLM(cfg).float()
    model.train()
    return model


def episode_turns(rng: np.random.Generator, n_turns: int, *, first_prompt: int = 5, obs: int = 3,
                  max_completion: int = 6) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Prompt/completion ids of one append-only episode: each next prompt is the previous
    prompt + completion + ``obs`` new tokens (bridge + observation), all ids in 2..VOCAB-1."""
    prompts, comps = [], []
    prompt = rng.integers(2, VOCAB, size=first_prompt).astype(np.int32)
    for _ in range(n_turns):
        comp = rng.integers(2, VOCAB, size=int(rng.integers(1, max_completion + 1))).astype(np.int32)
        prompts.append(prompt)
        comps.append(comp)
        prompt = np.concatenate([prompt, comp, rng.integers(2, VOCAB, size=obs).astype(np.int32)])
    return prompts, comps


def random_turns(seed: int, episodes: tuple[int, ...] = (3, 1, 2)) -> tuple[list, list, list, np.ndarray]:
    """Turns of several episodes (``episodes`` = turns per episode), with random behaviour
    logprobs (negative) and advantages float64[N]."""
    rng = np.random.default_rng(seed)
    prompts, comps = [], []
    for n in episodes:
        p, c = episode_turns(rng, n)
        prompts += p
        comps += c
    lps = [(-rng.random(c.size) * 3).astype(np.float32) for c in comps]
    adv = rng.normal(size=len(prompts))
    return prompts, comps, lps, adv


def sgd(model: torch.nn.Module, lr: float = 0.1, momentum: float = 0.0) -> torch.optim.SGD:
    """SGD over the trainable parameters, for comparing the steps of two computation paths: its
    update is linear in the gradient, so the float noise of two paths (another summation order,
    AVX2 vs AVX-512 kernels) stays noise in the weights. AdamW's first step is lr·g/(|g| + eps):
    ~lr·sign(g), so a near-zero gradient entry whose rounding differs moves by up to 2·lr on one
    path only (and a global gradient scale, e.g. a wrong clip norm, cancels out of it)."""
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr, momentum=momentum)


def step_mismatch(a: dict, b: dict, before: dict, rel: float = 1e-3) -> float:
    """How far apart weights ``a`` and ``b`` (name → tensor) are after the same SGD steps from
    ``before`` on two computation paths, as a multiple of what float noise allows (≤ 1: the same
    steps). Per tensor the allowance is ``rel`` of how far the steps moved its largest entry, or
    4·eps of its largest weight (four float32 ulps: ``w − lr·g`` rounds on each path, each step),
    whichever is larger."""
    assert a.keys() == b.keys() == before.keys() and len(a) > 0
    eps = torch.finfo(torch.float32).eps
    worst = 0.0
    for n in a:
        step = float((a[n] - before[n]).abs().max())
        allowed = max(rel * step, 4 * eps * float(before[n].abs().max()), 1e-12)
        worst = max(worst, float((a[n] - b[n]).abs().max()) / allowed)
    return worst


def assert_same_step(a: dict, b: dict, before: dict, rel: float = 1e-3) -> None:
    """``a`` and ``b`` took the same steps from ``before`` (``step_mismatch`` ≤ 1), and the steps
    moved the weights."""
    differ = {n: (float((a[n] - b[n]).abs().max()), float((a[n] - before[n]).abs().max()))  # (gap, step)
              for n in a if not torch.equal(a[n], b[n])}
    assert step_mismatch(a, b, before, rel) <= 1.0, differ
    assert max(float((a[n] - before[n]).abs().max()) for n in a) > 1e-4


def grouped_batch():
    """A ``TrainBatch`` of 3 tasks × 3 episodes of 1-3 append-only turns whose episodes of a task
    start from the same 12-token prompt (rows that share a prefix), with episode ids, π_old =
    the tiny model's logprobs − 0.2 and reference logprobs from another seed."""
    from agentrl.update import batch_logprobs, build_batch

    rng = np.random.default_rng(5)
    prompts, comps, episodes = [], [], []
    for task in range(3):
        first = rng.integers(2, VOCAB, size=12)
        for ep in range(3):
            prompt = first
            for _ in range(int(rng.integers(1, 4))):
                comp = rng.integers(2, VOCAB, size=int(rng.integers(1, 5)))
                prompts.append(prompt)
                comps.append(comp)
                episodes.append(task * 3 + ep)
                prompt = np.concatenate([prompt, comp, rng.integers(2, VOCAB, size=3)])
    b = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], rng.normal(size=len(prompts)), pad_id=PAD,
                    episodes=episodes)
    lp = batch_logprobs(tiny_model(0), b)
    return b.with_(old_logprobs=(lp - 0.2) * b.loss_mask, ref_logprobs=batch_logprobs(tiny_model(1), b))
