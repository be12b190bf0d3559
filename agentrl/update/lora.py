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
from agentrl.update.master_weights import to_compute_dtype

__all__ = ["apply_lora", "prepare_policy", "reference_logprobs", "inference_state_dict", "merge_lora_state",
           "iter_merged"]


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
    """The weights an inference engine needs, under the plain HF parameter names: for a peft
    LoRA model its own state dict merged out of place (``merge_lora_state``; the training
    model is never touched, so repeated calls leave its weights bit-identical — an in-place
    merge + unmerge drifts them in bf16); a plain model returns its ``state_dict()`` (float32
    masters cast to their ``compute_dtype``, ``agentrl.update.master_weights``).
    Shape: one tensor per parameter, as in the base model.

    Raises:
        NotImplementedError: see ``merge_lora_state``.
    """
    if not hasattr(model, "get_base_model"):
        return {k: to_compute_dtype(model, v) for k, v in model.state_dict().items()}
    return merge_lora_state(model.state_dict(), model)


_PEFT_PREFIX = "base_model.model."


def _lora_layers(model: torch.nn.Module) -> dict[str, tuple[float, bool]]:
    """``{module name: (scaling, fan_in_fan_out)}`` of every peft LoRA layer of ``model``
    (names as in ``model.state_dict()``).

    Raises:
        NotImplementedError: not exactly one active adapter, a LoRA variant (e.g. DoRA) whose
        merge is not ``W + ΔW``, or adapters on a non-linear layer (e.g. embeddings).
    """
    out = {}
    for name, mod in model.named_modules():
        if not (hasattr(mod, "lora_A") and hasattr(mod, "scaling") and hasattr(mod, "base_layer")):
            continue
        active = [a for a in getattr(mod, "active_adapters", ["default"]) if a in mod.lora_A]
        if len(active) != 1:
            raise NotImplementedError(f"{name}: {len(active)} active LoRA adapters; merging supports exactly one")
        adapter = active[0]
        if adapter in getattr(mod, "lora_variant", {}) or getattr(mod, "use_dora", {}).get(adapter, False):
            raise NotImplementedError(f"{name}: a LoRA variant (e.g. DoRA) has no plain W + dW merge; use plain LoRA")
        if not (isinstance(mod.lora_A[adapter], torch.nn.Linear) and isinstance(mod.lora_B[adapter], torch.nn.Linear)):
            raise NotImplementedError(f"{name}: LoRA on a {type(mod.base_layer).__name__} is not merged here; "
                                      "target linear projections (policy.lora.target_modules)")
        out[name] = (float(mod.scaling[adapter]), bool(getattr(mod, "fan_in_fan_out", False)), adapter)
    return out


def merge_lora_state(state, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Plain-HF-named inference weights from a **full** state dict of the peft ``model`` (its
    own ``state_dict()``, or the FSDP2 shards gathered by ``agentrl.distributed.inference_state``).

    Each wrapped linear's ``base_layer.weight`` W (out, in) becomes ``W + scaling · (B @ A)``
    (A (r, in), B (out, r); computed in float32 and rounded once to W's dtype, so it equals
    peft's merge; transposed for ``fan_in_fan_out`` layers) in a new tensor; adapter tensors
    are dropped and the ``base_model.model.`` / ``.base_layer`` parts of the names removed.
    Other tensors are detached clones. A model without LoRA layers gets its names unchanged.

    Raises:
        KeyError: an adapter tensor is missing from ``state``; NotImplementedError: see
        ``_lora_layers``.
    """
    return {name: value if fresh else value.detach().clone()
            for name, value, fresh in iter_merged(list(state.keys()), state.__getitem__, model)}


def iter_merged(keys, get, model: torch.nn.Module):
    """The merge of ``merge_lora_state`` one tensor at a time, for streaming weight syncs.

    Args:
        keys: the peft model's state-dict keys in order (every rank of a data-parallel run
            passes the same list, so the collectives inside ``get`` run in the same order).
        get: ``key -> full tensor`` (e.g. a plain lookup, or a DTensor's ``full_tensor()``);
            called once per key that is used, adapter tensors when their base weight comes.
        model: the (peft) model the keys belong to.
    Yields:
        ``(plain HF name, tensor, fresh)``: ``fresh`` True when the tensor is newly computed
        (a merged weight), False when it is ``get``'s own tensor (clone it to keep it).
    Raises:
        KeyError / NotImplementedError: as ``merge_lora_state``.
    """
    layers = _lora_layers(model) if hasattr(model, "get_base_model") else {}
    keyset = set(keys)
    with torch.no_grad():
        for key in keys:
            if ".lora_" in key:
                continue
            module = key.rsplit(".base_layer.", 1)[0] if key.endswith(".base_layer.weight") else None
            value, fresh = get(key), False
            if module in layers:
                scaling, transposed, adapter = layers[module]
                b, a = f"{module}.lora_B.{adapter}.weight", f"{module}.lora_A.{adapter}.weight"
                if b not in keyset or a not in keyset:
                    raise KeyError(f"{module}: adapter tensors {b!r} / {a!r} missing from the state dict")
                delta = get(b).float() @ get(a).float()
                value, fresh = (value.float() + (delta.T if transposed else delta) * scaling).to(value.dtype), True
            name = key[len(_PEFT_PREFIX):] if key.startswith(_PEFT_PREFIX) else key
            yield name.replace(".base_layer.", "."), value, fresh
