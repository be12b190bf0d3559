"""Portable checkpoints: a run's trained policy as folders that plain ``transformers`` and
``peft`` (and vLLM's LoRA loader) load, with no agentrl installed.

``export_checkpoint(run_dir, out)`` reads ``<run_dir>/config.yaml`` and a checkpoint
(``checkpoints/iter_<N>``, default the latest), rebuilds the policy exactly as evaluation does
(``agentrl.eval.load_eval_policy``) and writes

* ``out/merged/``: a Hugging Face model folder (``config.json``, ``model.safetensors``,
  ``generation_config.json``) with the adapters merged into the base weights out of place
  (``agentrl.update.lora.inference_state_dict``; for full fine-tuning, the trained weights),
  in the policy's dtype, plus the tokenizer and its chat template;
* ``out/adapter/`` (LoRA runs only): peft's ``adapter_config.json`` + ``adapter_model.safetensors``
  (load with ``PeftModel.from_pretrained(base, out/"adapter")``; the base is
  ``base_model_name_or_path``, the folder the run trained from);
* ``out/agentrl_export.json``: run, checkpoint, iteration and the base model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ExportResult", "export_checkpoint", "checkpoint_folder"]

FORMATS = ("both", "merged", "adapter")


@dataclass(frozen=True)
class ExportResult:
    """Where an export went: ``merged`` / ``adapter`` folders (None when not written), the
    checkpoint folder read and its iteration (completed iterations, as in ``iter_<N>``)."""

    merged: Path | None
    adapter: Path | None
    checkpoint: Path
    iteration: int


def checkpoint_folder(run_dir: str | Path, iteration: int | None = None) -> Path:
    """``<run_dir>/checkpoints/iter_<iteration>`` (default: the latest).

    Raises:
        FileNotFoundError: no such run folder, no checkpoint, or no checkpoint of that
            iteration (the message lists the ones there are).
    """
    from agentrl.update.checkpoint import latest_checkpoint

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no config.yaml); pass runs/NAME of a training run")
    if iteration is None:
        folder = latest_checkpoint(run_dir)
        if folder is None:
            raise FileNotFoundError(f"{run_dir} has no checkpoint yet; train at least one iteration (run.save_every)")
        return folder
    folder = run_dir / "checkpoints" / f"iter_{iteration:06d}"
    if not (folder / "state.pt").is_file():
        have = sorted(int(p.name[5:]) for p in (run_dir / "checkpoints").glob("iter_*") if (p / "state.pt").is_file())
        raise FileNotFoundError(f"{run_dir} has no checkpoint of iteration {iteration}; it has {have or 'none'}")
    return folder


def export_checkpoint(run_dir: str | Path, out: str | Path, *, iteration: int | None = None,
                      fmt: str = "both") -> ExportResult:
    """Write the run's policy at ``iteration`` (default: the latest checkpoint) under ``out``
    (see the module docstring). ``fmt``: ``both`` (the adapter only when the run used LoRA) |
    ``merged`` | ``adapter``.

    Raises:
        FileNotFoundError: see ``checkpoint_folder``. FileExistsError: ``out`` exists and is
            not empty. ValueError: unknown ``fmt``, or ``adapter`` for a run without LoRA.
    """
    from agentrl.eval import load_eval_policy
    from agentrl.train.checks import load_checked_config
    from agentrl.update.checkpoint import TrainState
    from agentrl.update.lora import inference_state_dict

    if fmt not in FORMATS:
        raise ValueError(f"export format {fmt!r}: choose one of {FORMATS}")
    run_dir, out = Path(run_dir), Path(out)
    folder = checkpoint_folder(run_dir, iteration)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty; pass a new folder (nothing was written)")
    cfg = load_checked_config(run_dir / "config.yaml")
    lora = cfg.policy.lora is not None
    if fmt == "adapter" and not lora:
        raise ValueError(f"{run_dir} trained without LoRA (policy.lora is null): there is no adapter; "
                         f"use --format merged")
    policy = load_eval_policy(cfg, folder)
    model = policy.model
    merged = adapter = None
    if fmt in ("both", "merged"):
        merged = out / "merged"
        base = model.get_base_model() if lora else model
        state = inference_state_dict(model)  # adapters merged out of place; the policy is untouched
        _plain_copy(base, state).save_pretrained(merged)
        policy.renderer.tokenizer.save_pretrained(merged)
    if lora and fmt in ("both", "adapter"):
        adapter = out / "adapter"
        model.save_pretrained(adapter)
    import torch

    state = TrainState(**torch.load(folder / "state.pt", weights_only=False)["state"])
    (out / "agentrl_export.json").write_text(json.dumps({
        "run": str(run_dir), "checkpoint": str(folder), "iteration": state.iteration,
        "base_model": cfg.policy.model, "lora": lora, "dtype": cfg.policy.dtype}, indent=2) + "\n")
    return ExportResult(merged, adapter, folder, state.iteration)


def _plain_copy(base, state: dict):
    """A plain HF model of ``base``'s class and config holding ``state`` (plain parameter
    names, e.g. the merged weights): no LoRA modules, tied embeddings re-tied."""
    import torch

    with torch.device("meta"):
        plain = type(base)(base.config)
    plain.load_state_dict(state, assign=True)
    plain.tie_weights()
    return plain.to(next(base.parameters()).dtype)
