"""LoRA adapters through peft (arXiv 2106.09685), optionally on the top n layers only.

LEARNING.md: LoRA r=16, alpha 32 on the top 6 of 30 layers learned on CPU at ~1 M trainable
parameters; all-layer LoRA cost 2× the time and 3× the memory. With adapters, the frozen
reference for the KL term is the same model with adapters disabled (``reference_logprobs``).
"""

from __future__ import annotations

import torch

from agentrl.config import LoraSpec, UpdateConfig
from agentrl.update.batch import TrainBatch
from agentrl.update.logprobs import batch_logprobs

__all__ = ["apply_lora", "prepare_policy", "reference_logprobs"]


def _num_layers(model: torch.nn.Module) -> int:
    n = getattr(model.config, "num_hidden_layers", None)
    if not isinstance(n, int):
        raise ValueError("top_n_layers needs model.config.num_hidden_layers; set policy.lora.top_n_layers=null")
    return n


def apply_lora(model: torch.nn.Module, spec: LoraSpec) -> torch.nn.Module:
    """Wrap ``model`` with peft LoRA adapters as ``spec`` says; base weights are frozen.

    Args:
        model: an HF causal LM.
        spec: ``agentrl.config.LoraSpec`` (rank, alpha, dropout, target_modules,
            top_n_layers: adapters only on layers L−n..L−1).
    Returns:
        the ``peft.PeftModel`` (same forward signature; ``.disable_adapter()`` gives the base).
    Raises:
        ImportError: peft is not installed (extra ``llm``).
        ValueError: ``top_n_layers`` exceeds the number of layers, or no module matched.
    """
    try:
        import peft
    except ModuleNotFoundError as exc:  # pragma: no cover - peft is in the llm extra
        raise ImportError("LoRA needs peft: pip install 'agentrl[llm]'") from exc
    layers = None
    if spec.top_n_layers is not None:
        n_layers = _num_layers(model)
        if spec.top_n_layers > n_layers:
            raise ValueError(f"policy.lora.top_n_layers={spec.top_n_layers} but the model has {n_layers} layers")
        layers = list(range(n_layers - spec.top_n_layers, n_layers))
    cfg = peft.LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                          target_modules=list(spec.target_modules), layers_to_transform=layers,
                          bias="none", task_type="CAUSAL_LM")
    try:
        return peft.get_peft_model(model, cfg)
    except ValueError as exc:
        raise ValueError(f"LoRA target_modules {list(spec.target_modules)} did not match the model: {exc}") from exc


def prepare_policy(model: torch.nn.Module, cfg: UpdateConfig, lora: LoraSpec | None = None) -> torch.nn.Module:
    """Make an HF causal LM ready for ``update``: gradient checkpointing when
    ``cfg.gradient_checkpointing`` (non-reentrant, so it works with frozen embeddings under
    LoRA; same gradients, less activation memory, ~1 extra forward), then LoRA adapters
    when ``lora`` is given. Returns the (possibly wrapped) model in train mode."""
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora is not None:
        model = apply_lora(model, lora)
    model.train()
    return model


def reference_logprobs(model: torch.nn.Module, batch: TrainBatch, *, micro_batch: int = 4,
                       temperature: float = 1.0) -> torch.Tensor:
    """(B, T) float32 logprobs of the frozen reference policy.

    ``model`` is either the peft-wrapped policy (the reference is its base, adapters
    disabled — no copy of the weights) or, for full fine-tuning, a separate frozen copy of
    the initial model (never the model being trained)."""
    disable = getattr(model, "disable_adapter", None)
    if disable is None:
        return batch_logprobs(model, batch, micro_batch=micro_batch, temperature=temperature)
    with disable():
        return batch_logprobs(model, batch, micro_batch=micro_batch, temperature=temperature)


def inference_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights an inference engine needs, under the plain HF parameter names.

    For a peft LoRA model each wrapped weight is merged out of place, ``W + scale · B A``
    computed in fp32 and rounded once to the weight dtype, and the
    ``base_model.model.`` / ``base_layer.`` prefixes are removed; the training model is
    never touched, so repeated calls leave its weights bit-identical (an in-place
    merge + unmerge drifts them in bf16). A plain model returns its ``state_dict()``.
    Shape: one tensor per parameter, as in the base model.
    Raises:
        NotImplementedError: a LoRA variant (e.g. DoRA) whose merge is not ``W + ΔW``.
    """
    if not hasattr(model, "get_base_model"):
        return dict(model.state_dict())
    base = model.get_base_model()
    merged = {}
    with torch.no_grad():
        for name, module in base.named_modules():
            if not hasattr(module, "get_delta_weight") or not hasattr(module, "lora_A") or module.merged:
                continue
            weight = module.get_base_layer().weight
            total = weight.float()
            for adapter in module.active_adapters:
                if adapter in getattr(module, "lora_variant", {}):
                    raise NotImplementedError(f"inference_state_dict: LoRA variant of {name} has no plain W + dW merge")
                if adapter in module.lora_A:
                    total = total + _delta_fp32(module, adapter)
            merged[f"{name}.base_layer.weight"] = total.to(weight.dtype)  # one rounding to the weight dtype
    out = {}
    for name, t in base.state_dict().items():
        if "lora_" in name:
            continue
        out[name.replace(".base_layer.", ".")] = merged[name] if name in merged else t.detach().clone()
    return out


def _delta_fp32(module: torch.nn.Module, adapter: str) -> torch.Tensor:
    """float32 ``scale · B A`` of a peft LoRA layer (shaped like its base weight): computed
    here for linear adapters, peft's ``get_delta_weight`` (cast up) for other layer types."""
    a, b = module.lora_A[adapter], module.lora_B[adapter]
    if not (isinstance(a, torch.nn.Linear) and isinstance(b, torch.nn.Linear)):
        return module.get_delta_weight(adapter).float()
    delta = b.weight.float() @ a.weight.float()  # (out, in)
    if getattr(module, "fan_in_fan_out", False):
        delta = delta.T
    return delta * module.scaling[adapter]
