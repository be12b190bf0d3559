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
masters). LoRA adapters need none: peft keeps them in float32.

The policy's full fine-tuning (``update.master_weights``) keeps its masters differently: the
**parameters themselves** are float32 (``keep_master_weights``) and only the compute runs in
half precision — under FSDP2 by ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``
(``agentrl.distributed.parallelize`` reads ``compute_dtype``), in one process by
``torch.autocast`` around the model's forward. A plain AdamW then steps float32 tensors, and
DCP checkpoints the float32 parameters and moments by name like any float32 run (the same files
from N ranks or one process). The engines still get half-precision weights: the weight streams
cast to ``compute_dtype`` at their source (``agentrl.update.lora.inference_state_dict``,
``agentrl.distributed.weights``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["HALF_DTYPES", "MasterAdamW", "needs_master_weights", "keep_master_weights", "compute_dtype",
           "to_compute_dtype"]

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


#: Attribute of a model whose float32 parameters are masters: the half dtype it computes in.
_COMPUTE_DTYPE = "agentrl_compute_dtype"


def compute_dtype(model: torch.nn.Module) -> torch.dtype | None:
    """The half dtype ``model`` computes in over float32 master parameters (``keep_master_weights``),
    or None for a model that computes in its parameters' own dtype."""
    return getattr(model, _COMPUTE_DTYPE, None)


def to_compute_dtype(model: torch.nn.Module, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (a weight of ``model`` on its way to an inference engine) cast to the model's
    ``compute_dtype`` (a new tensor), unchanged when the model has none or it is not floating."""
    dtype = compute_dtype(model)
    return tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor


def keep_master_weights(model: torch.nn.Module, dtype: torch.dtype, *, autocast: bool) -> torch.nn.Module:
    """Make ``model``'s parameters (and buffers) float32 masters that compute in ``dtype`` (in
    place; returns the same object). Call it after gradient checkpointing is set up and before
    ``agentrl.distributed.parallelize``, which then shards the float32 parameters with
    ``MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=float32)``.

    Args:
        model: an HF causal LM without LoRA adapters (full fine-tuning), any dtype.
        dtype: ``torch.bfloat16`` or ``torch.float16``: the forward/backward compute dtype and
            the dtype the engines are given (``to_compute_dtype``).
        autocast: True in one process (no FSDP2): every call of the model runs under
            ``torch.autocast(device, dtype)`` (a pre-hook enters it, an always-called hook
            leaves it; hooks registered later with ``prepend=True``, like the update's LM-head
            hook, run inside). False when FSDP2 will cast instead.
    Raises:
        ValueError: ``dtype`` is not half precision, or the model has LoRA adapters.
    """
    if dtype not in HALF_DTYPES:
        raise ValueError(f"master weights compute in bfloat16 or float16, got {dtype}; float32 weights need none")
    if hasattr(model, "get_base_model"):
        raise ValueError("master weights are for full fine-tuning; LoRA adapters are float32 already "
                         "(set update.master_weights: auto or off)")
    model.to(torch.float32)
    setattr(model, _COMPUTE_DTYPE, dtype)
    if autocast:
        device = next(model.parameters()).device.type
        active: list = []

        def enter(module, args):
            ctx = torch.autocast(device_type=device, dtype=dtype)
            ctx.__enter__()
            active.append(ctx)

        def leave(module, args, output):
            active.pop().__exit__(None, None, None)

        model.register_forward_pre_hook(enter)
        model.register_forward_hook(leave, always_call=True)
    return model
