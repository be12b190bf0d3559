"""AdamW on float32 master copies of half-precision parameters (mixed-precision training).

A bf16 weight keeps 8 significant bits: an update below half its spacing (~0.4 % of the weight)
rounds away. AdamW's first steps move every weight by ~lr, so at lr 1e-5 on SmolLM2-135M in bf16
only 2–3 % of a decoder matrix's entries change per step and the norm gains (|w| ≈ 1.8) never do;
at 1e-4, 15–20 % (measured on the packaged model, 2026-12-03). ``MasterAdamW`` keeps a float32
copy of every trained parameter, lets ``torch.optim.AdamW`` step that copy, and writes it back
rounded to the parameter's dtype — small updates accumulate in float32 until they show (the
"master weights" of mixed-precision training, Micikevicius et al., arXiv 1710.03740).

It is used where agentrl trains full half-precision weights outside the DCP checkpoint of the
policy: turn-PPO's critic (``agentrl.train.critic.make_critic``, saved in ``critic.pt`` with its
masters). The policy trains LoRA adapters, which peft keeps in float32.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["HALF_DTYPES", "MasterAdamW", "needs_master_weights"]

#: Weight dtypes whose small updates round away without a float32 master copy.
HALF_DTYPES = (torch.bfloat16, torch.float16)


def needs_master_weights(params: Iterable[torch.Tensor]) -> bool:
    """True when any parameter is bf16 or fp16 (its small updates would round away)."""
    return any(p.dtype in HALF_DTYPES for p in params)


class MasterAdamW(torch.optim.Optimizer):
    """AdamW (arXiv 1711.05101) stepping float32 masters of ``params``.

    ``param_groups`` hold the model's own parameters (so gradient clipping over them works as
    with any optimizer); ``step`` hands their gradients, upcast, to an inner
    ``torch.optim.AdamW`` over the masters and copies the masters back into the parameters.

    Args:
        params: the trained parameters (any dtype; float32 ones get a master too, the same values).
        lr, betas: as ``torch.optim.AdamW``; weight_decay: as there, but 0 by default (AdamW's
            is 0.01).
    Raises:
        ValueError: ``params`` is empty.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.999)) -> None:
        params = list(params)
        if not params:
            raise ValueError("MasterAdamW got no parameters; pass the trained (requires_grad) ones")
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay, "betas": betas})
        self.masters = [p.detach().to(torch.float32, copy=True) for p in params]
        self.inner = torch.optim.AdamW(self.masters, lr=lr, weight_decay=weight_decay, betas=betas)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 — see the class docstring
        if closure is not None:
            raise ValueError("MasterAdamW.step takes no closure")
        params = [p for g in self.param_groups for p in g["params"]]
        group = self.param_groups[0]
        for g in self.inner.param_groups:  # lr / weight decay set on this optimizer reach the inner one
            g.update(lr=group["lr"], weight_decay=group["weight_decay"], betas=group["betas"])
        for p, m in zip(params, self.masters):
            m.grad = None if p.grad is None else p.grad.to(torch.float32)
        self.inner.step()
        for p, m in zip(params, self.masters):
            if m.grad is not None:
                p.copy_(m)
                m.grad = None
        return None

    def state_dict(self) -> dict:
        """The inner AdamW's state (moments, steps) and the float32 masters."""
        return {"inner": self.inner.state_dict(), "masters": [m.detach().to("cpu", copy=True) for m in self.masters]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what ``state_dict`` returned (the parameters themselves are the model's to load).

        Raises:
            ValueError: the saved masters do not match these parameters' count or shapes.
        """
        masters = state_dict.get("masters") if isinstance(state_dict, dict) else None
        if masters is None or [m.shape for m in masters] != [m.shape for m in self.masters]:
            raise ValueError("MasterAdamW.load_state_dict: not a MasterAdamW state for these parameters "
                             "(different count or shapes of masters)")
        for m, saved in zip(self.masters, masters):
            m.copy_(saved)
        self.inner.load_state_dict(state_dict["inner"])
