"""Checkpoints of a training run: trainable weights, optimizer, RNG states and counters.

A checkpoint is written only at an iteration boundary (after the update and the weight
sync of iteration ``k``), into ``<run_dir>/checkpoints/iter_<k>/state.pt``, and
``<run_dir>/checkpoints/latest`` names the newest one. Resuming restores everything, so an
interrupted-then-resumed run performs the same optimizer steps as an uninterrupted one
(PITFALLS P7): resuming at the final iteration trains nothing and writes nothing; a run
whose checkpoint closed iteration k continues with iteration k + 1.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass(frozen=True)
class TrainState:
    """Counters saved with a checkpoint.

    Attributes:
        iteration: number of completed iterations (the next one to run has this index).
        optimizer_steps: optimizer steps taken so far.
        policy_version: the engine's policy version after the last sync.
        episodes_stored: episodes of this run in the store at save time (store position).
    """

    iteration: int = 0
    optimizer_steps: int = 0
    policy_version: int = 0
    episodes_stored: int = 0


def _trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters that train (all of them for full fine-tuning, adapters under LoRA)."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(run_dir: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    state: TrainState) -> Path:
    """Write ``iter_<state.iteration>/state.pt`` atomically and point ``latest`` at it.

    Returns:
        The checkpoint folder.
    """
    folder = Path(run_dir) / "checkpoints" / f"iter_{state.iteration:06d}"
    folder.mkdir(parents=True, exist_ok=True)
    payload = {
        "state": asdict(state),
        "model": _trainable_state(model),
        "optimizer": optimizer.state_dict(),
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
    }
    tmp = folder / "state.pt.tmp"
    torch.save(payload, tmp)
    os.replace(tmp, folder / "state.pt")
    latest = folder.parent / "latest"
    latest.with_suffix(".tmp").write_text(folder.name)
    os.replace(latest.with_suffix(".tmp"), latest)
    return folder


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The folder named by ``checkpoints/latest``, or None when the run has none."""
    latest = Path(run_dir) / "checkpoints" / "latest"
    if not latest.is_file():
        return None
    folder = latest.parent / latest.read_text().strip()
    if not (folder / "state.pt").is_file():
        raise FileNotFoundError(f"{latest} names {folder}, which has no state.pt; delete {latest} to start over")
    return folder


def load_weights(folder: str | Path, model: torch.nn.Module) -> dict:
    """Copy a checkpoint's trainable weights into ``model``; return the whole payload.

    Raises:
        FileNotFoundError: ``folder`` has no state.pt.
        RuntimeError: the checkpoint's parameter names do not match the model's trainable
            parameters (e.g. resumed with different LoRA settings).
    """
    path = Path(folder) / "state.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; pass a folder like runs/NAME/checkpoints/iter_000010")
    payload = torch.load(path, map_location="cpu", weights_only=False)
    params = dict(model.named_parameters())
    want = {n for n, p in params.items() if p.requires_grad}
    if set(payload["model"]) != want:
        diff = sorted(set(payload["model"]) ^ want)[:5]
        raise RuntimeError(f"checkpoint {folder} does not match the model's trainable parameters (e.g. {diff}); "
                           "use the same policy/LoRA settings as the run that wrote it")
    with torch.no_grad():
        for name, value in payload["model"].items():
            params[name].copy_(value.to(params[name].dtype))
    return payload


def load_checkpoint(folder: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> TrainState:
    """Restore weights, optimizer and RNG states from ``folder``; return its counters.

    Raises:
        FileNotFoundError / RuntimeError: see ``load_weights``.
    """
    payload = load_weights(folder, model)
    optimizer.load_state_dict(payload["optimizer"])
    random.setstate(payload["rng"]["python"])
    np.random.set_state(payload["rng"]["numpy"])
    torch.set_rng_state(payload["rng"]["torch"])
    return TrainState(**payload["state"])
