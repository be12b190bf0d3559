"""Per-row seeded sampling for ``HFEngine``: each prompt of a batch draws from its own generator.

``SamplingParams.row_seeds`` gives one seed per prompt. The engine then decodes greedily
over scores processed by ``RowGumbelSampler``: temperature and top-p are applied exactly as
transformers' sampling warpers do (``TemperatureLogitsWarper``, ``TopPLogitsWarper``), then
each row adds i.i.d. standard Gumbel noise drawn from its own ``torch.Generator`` (seeded
with the row's seed) and the argmax is taken. By the Gumbel-max identity
``argmax_i(s_i + G_i) ~ softmax(s)``, so a row samples exactly from
softmax(top_p(logits / T)) — the distribution of ``do_sample=True`` — while its draws depend
only on its own seed and step, never on the batch it shares (a sampler seeded once per
batch draws row b's tokens from a stream that the other rows also consume). The stored
logprobs still come from the raw logits (``agentrl.llm.step_logprobs``).
"""

from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["RowGumbelSampler", "gumbel_noise"]


def gumbel_noise(generator: torch.Generator, n: int, device: torch.device) -> torch.Tensor:
    """float32[n] i.i.d. standard Gumbel draws ``-log(-log U)``, U ~ Uniform[0, 1) from ``generator``.

    U = 0 gives −inf (that id is never the argmax); the float32 grid of U leaves the
    distribution exact to ~1e-7 in probability.
    """
    u = torch.rand(n, generator=generator, device=device, dtype=torch.float32)
    return -torch.log(-torch.log(u))


class RowGumbelSampler:
    """Logits processor: warp each row (temperature, top-p), then add that row's Gumbel noise.

    Args:
        seeds: one int seed per batch row (any int; reduced mod 2**64).
        temperature: softmax temperature (> 0).
        top_p: nucleus mass in (0, 1]; 1 keeps every id.
        device: the scores' device (the generators live there).
    Shape:
        ``__call__(input_ids (B, L), scores (B, V) float) -> (B, V)``; greedy decoding of the
        result samples one id per row.
    Raises:
        ValueError: a non-positive temperature or top-p outside (0, 1].
    """

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float, device: torch.device) -> None:
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        if not temperature > 0 or not 0 < top_p <= 1:
            raise ValueError(f"RowGumbelSampler needs temperature > 0 and top_p in (0, 1], got {temperature}, {top_p}")
        self.warpers = [TemperatureLogitsWarper(temperature)] if temperature != 1.0 else []
        if top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p))
        self.generators = []
        for s in seeds:
            g = torch.Generator(device=device)
            g.manual_seed(int(s) % 2**64)
            self.generators.append(g)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for w in self.warpers:
            scores = w(input_ids, scores)
        if scores.shape[0] != len(self.generators):
            raise ValueError(f"RowGumbelSampler has {len(self.generators)} row seeds for a batch of {scores.shape[0]}")
        noise = torch.stack([gumbel_noise(g, scores.shape[1], scores.device) for g in self.generators])  # (B, V)
        return scores.float() + noise
