"""Shared helpers for tests/update: a tiny random causal LM and synthetic multi-turn turns.

The model is a 2-layer Qwen3 with vocab 256 and hidden 32 (~40k params), built in memory
from a fixed seed; fp32, eager attention, one thread.
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
