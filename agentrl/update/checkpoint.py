"""Checkpoints of a training run: trainable weights, optimizer, RNG states and counters.

A checkpoint is written only at an iteration boundary (after the update and the weight
sync of iteration ``k``), into ``<run_dir>/checkpoints/iter_<k>/``, and
``<run_dir>/checkpoints/latest`` names the newest one. Resuming restores everything, so an
interrupted-then-resumed run performs the same optimizer steps as an uninterrupted one
(PITFALLS P7): resuming at the final iteration trains nothing and writes nothing; a run
whose checkpoint closed iteration k continues with iteration k + 1.

Format: ``iter_<k>/dcp/`` holds the trainable weights (all parameters for full fine-tuning,
the adapters under LoRA) and the optimizer state through ``torch.distributed.checkpoint``
(DCP), keyed by parameter names, so a checkpoint written by N data-parallel ranks (FSDP2
shards) loads into M ranks or into one process, and the other way round. ``iter_<k>/state.pt``
holds the counters and rank 0's RNG states. Checkpoints of older versions (weights and
optimizer inside ``state.pt``) are still read in one process.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

__all__ = ["TrainState", "CheckpointError", "save_checkpoint", "latest_checkpoint", "load_weights", "load_checkpoint",
           "checkpoint_weights"]


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into this model (other LoRA / model settings, a
    missing or damaged shard, the old format on N ranks); the message names the fix."""


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


def _options(strict: bool = True):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # the trainable parameters only; loading them leaves the frozen ones (LoRA's base) missing on purpose
    return StateDictOptions(ignore_frozen_params=True, strict=strict)


def _distributed(dp) -> bool:
    return bool(dp is not None and getattr(dp, "distributed", False))


def _is_main(dp) -> bool:
    return dp is None or bool(getattr(dp, "is_main", True))


@contextmanager
def _quiet():
    """DCP warns that it runs without a process group in one process; that is intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        yield


@contextmanager
def _interrupts_unwrapped():
    """DCP catches every rank's ``BaseException`` and raises one ``CheckpointException`` holding them;
    a ``KeyboardInterrupt`` among them (SIGTERM's ``agentrl.cli.train.Terminated`` is one) is raised
    as itself, so a signal during a checkpoint stops the run as it does anywhere else (exit 143,
    ``latest`` still on the previous checkpoint) instead of failing it with a traceback."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        yield
    except CheckpointException as exc:
        interrupt = next((e for e, _ in exc.failures.values() if isinstance(e, KeyboardInterrupt)), None)
        if interrupt is None:
            raise
        raise interrupt from None


def _trainable_tree(model: torch.nn.Module) -> dict:
    """The model state dict (plain or FSDP2 ``DTensor`` shards) of the trainable parameters by
    name; a frozen tensor tied to another name (LoRA's frozen ``lm_head`` = embeddings) is left
    out too, which ``ignore_frozen_params`` alone misses."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    names = {n for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}
    return {k: v for k, v in get_model_state_dict(model, options=_options()).items() if k in names}


def _has_optimizer_state(optimizer: torch.optim.Optimizer) -> bool:
    """False before the first step (DCP's optimizer state dict would then run a fake step)."""
    return any(bool(s) for s in optimizer.state.values())


def save_checkpoint(run_dir: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    state: TrainState, dp=None, extra: Callable[[Path], object] | None = None) -> Path:
    """Write ``iter_<state.iteration>/`` (DCP weights + optimizer, ``state.pt``) and then point
    ``latest`` at it (a crash before that leaves ``latest`` on the previous checkpoint).

    Args:
        dp: the run's ``agentrl.distributed.DistContext`` when data-parallel: then a **collective**
            (every rank writes its shards; rank 0 alone writes ``state.pt`` and ``latest``).
        extra: called by rank 0 with the folder before ``latest`` moves, to write what else
            the checkpoint holds (turn-PPO's critic, ``agentrl.train.critic.save_critic``).
    Returns:
        The checkpoint folder.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    folder = Path(run_dir) / "checkpoints" / f"iter_{state.iteration:06d}"
    with_optim = _has_optimizer_state(optimizer)
    tree = {"model": _trainable_tree(model)}
    if with_optim:
        tree["optim"] = get_optimizer_state_dict(model, optimizer, options=_options())
    with _quiet(), _interrupts_unwrapped():
        dcp.save(tree, checkpoint_id=str(folder / "dcp"), no_dist=not _distributed(dp))
    if _is_main(dp):
        payload = {"format": "dcp", "optimizer_saved": with_optim, "state": asdict(state),
                   "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}}
        tmp = folder / "state.pt.tmp"
        torch.save(payload, tmp)
        os.replace(tmp, folder / "state.pt")
        if extra is not None:
            extra(folder)
        latest = folder.parent / "latest"
        latest.with_suffix(".tmp").write_text(folder.name)
        os.replace(latest.with_suffix(".tmp"), latest)
    if _distributed(dp):
        dp.barrier()
    return folder


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The folder named by ``checkpoints/latest``, or None when the run has none.

    Raises:
        FileNotFoundError: ``latest`` names a folder without ``state.pt``.
    """
    latest = Path(run_dir) / "checkpoints" / "latest"
    if not latest.is_file():
        return None
    folder = latest.parent / latest.read_text().strip()
    if not (folder / "state.pt").is_file():
        raise FileNotFoundError(f"{latest} names {folder}, which has no state.pt; delete {latest} to start over")
    return folder


def _payload(folder: str | Path) -> dict:
    path = Path(folder) / "state.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; pass a folder like runs/NAME/checkpoints/iter_000010")
    return torch.load(path, map_location="cpu", weights_only=False)


def _check_names(folder, saved: set[str], want: set[str]) -> None:
    if saved != want:
        diff = sorted(saved ^ want)[:5]
        raise CheckpointError(f"checkpoint {folder} does not match the model's trainable parameters (e.g. {diff}); "
                           "use the same policy/LoRA settings as the run that wrote it")


def _load_dcp(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, payload: dict,
              dp) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_model_state_dict, set_optimizer_state_dict

    saved = {k.removeprefix("model.") for k in _dcp_keys(folder / "dcp") if k.startswith("model.")}
    tree = {"model": _trainable_tree(model)}
    _check_names(folder, saved, set(tree["model"]))  # names of the trainable tensors (tied ones included)
    load_optim = optimizer is not None and payload.get("optimizer_saved", False)
    if load_optim:
        tree["optim"] = get_optimizer_state_dict(model, optimizer, options=_options())
    try:
        with _quiet(), _interrupts_unwrapped():
            dcp.load(tree, checkpoint_id=str(folder / "dcp"), no_dist=not _distributed(dp))
    except (Exception, CheckpointException) as exc:  # DCP's wrapper of every rank's failure is a BaseException
        first = next((ln.strip() for ln in str(exc).splitlines() if "Error" in ln or "mismatch" in ln), str(exc))
        raise CheckpointError(f"checkpoint {folder} cannot be loaded into this model ({first[:300]}); resume with the "
                              "policy/LoRA settings that wrote it, or start over with --no-resume (an earlier "
                              "iter_* folder can be named in checkpoints/latest)") from exc
    set_model_state_dict(model, tree["model"], options=_options(strict=False))  # names checked above
    if load_optim:
        set_optimizer_state_dict(model, optimizer, tree["optim"], options=_options())


def _dcp_keys(path: Path) -> list[str]:
    from torch.distributed.checkpoint import FileSystemReader

    return list(FileSystemReader(str(path)).read_metadata().state_dict_metadata)


def load_weights(folder: str | Path, model: torch.nn.Module, dp=None) -> dict:
    """Copy a checkpoint's trainable weights into ``model`` (plain or FSDP2-sharded with
    ``dp``); return the ``state.pt`` payload (counters, RNG).

    Raises:
        FileNotFoundError: ``folder`` has no state.pt.
        CheckpointError: the checkpoint's parameter names or shapes do not match the model's
            trainable parameters (e.g. resumed with different LoRA settings), a shard is
            missing or damaged, or an old-format checkpoint is loaded into data-parallel ranks.
    """
    payload = _payload(folder)
    if payload.get("format") == "dcp":
        _load_dcp(Path(folder), model, None, payload, dp)
        return payload
    if _distributed(dp):
        raise CheckpointError(f"checkpoint {folder} has the pre-DCP format (weights inside state.pt); resume it in one "
                           "process (python -m agentrl train ...) once, then its next checkpoints load on N ranks")
    _check_names(folder, set(payload["model"]), {n for n, p in model.named_parameters() if p.requires_grad})
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in payload["model"].items():
            params[name].copy_(value.to(params[name].dtype))
    return payload


def load_checkpoint(folder: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    dp=None) -> TrainState:
    """Restore weights, optimizer and RNG states from ``folder`` (any world size → this
    one; a collective when ``dp`` is data-parallel); return its counters.

    Raises:
        FileNotFoundError / CheckpointError: see ``load_weights``.
    """
    payload = _payload(folder)
    if payload.get("format") == "dcp":
        _load_dcp(Path(folder), model, optimizer, payload, dp)
    else:
        load_weights(folder, model, dp)
        optimizer.load_state_dict(payload["optimizer"])
    random.setstate(payload["rng"]["python"])
    np.random.set_state(payload["rng"]["numpy"])
    torch.set_rng_state(payload["rng"]["torch"])
    return TrainState(**payload["state"])


def checkpoint_weights(folder: str | Path) -> dict[str, torch.Tensor]:
    """The trainable weights of a checkpoint as full CPU tensors by parameter name, without a
    model (either format; e.g. to compare two runs' checkpoints)."""
    payload = _payload(folder)
    if payload.get("format") != "dcp":
        return dict(payload["model"])
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = FileSystemReader(str(Path(folder) / "dcp"))
    meta = reader.read_metadata().state_dict_metadata
    tree = {"model": {k.removeprefix("model."): torch.empty(m.size, dtype=m.properties.dtype)
                      for k, m in meta.items() if k.startswith("model.") and isinstance(m, TensorStorageMetadata)}}
    with _quiet():
        dcp.load(tree, storage_reader=reader, no_dist=True)
    return tree["model"]
