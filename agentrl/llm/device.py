"""``policy.device`` → a ``torch.device`` (the one place the device string is resolved).

The config keeps the string form (``auto | cpu | cuda | cuda:N``, checked torch-free at parse
time by ``agentrl.config.sections.PolicyConfig``); ``load_policy``, ``HFEngine.from_pretrained``
and the critic call ``resolve_device`` when they build a model, so a missing GPU is reported
before any rollout.
"""

from __future__ import annotations

import torch

from agentrl.config import ConfigError
from agentrl.config.sections import DEVICE_PATTERN

__all__ = ["resolve_device"]


def resolve_device(spec: str | torch.device) -> torch.device:
    """The torch device named by ``policy.device``.

    Args:
        spec: ``auto`` (the current CUDA device when ``torch.cuda.is_available()``, else CPU),
            ``cpu``, ``cuda`` (the current CUDA device, ``torch.cuda.current_device()``, which a
            distributed launcher may have set per rank with ``torch.cuda.set_device``),
            ``cuda:N``, or a ``torch.device`` (checked the same way).
    Returns:
        ``torch.device("cpu")`` or ``torch.device("cuda", index)`` — always with an index for
        CUDA, so two resolutions of the same spec compare equal.
    Raises:
        ConfigError: a string that is none of these forms; ``cuda``/``cuda:N`` when no CUDA
            device is visible; ``cuda:N`` with N >= ``torch.cuda.device_count()``. The message
            names ``policy.device`` and the fix.
    """
    if isinstance(spec, torch.device):
        spec = str(spec)
    if not isinstance(spec, str) or DEVICE_PATTERN.fullmatch(spec) is None:
        raise ConfigError(f"policy.device={spec!r} is not a device; use auto, cpu, cuda or cuda:N (N = 0, 1, ...)")
    if spec == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if spec == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if available else torch.device("cpu")
    if not available:
        raise ConfigError(f"policy.device={spec} but no CUDA device is visible (torch.cuda.is_available() is False; "
                          f"torch {torch.__version__}, CUDA build {torch.version.cuda}); set policy.device: cpu or "
                          "auto, or run where a GPU and a CUDA build of torch are present")
    if spec == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    index, count = int(spec.split(":")[1]), torch.cuda.device_count()
    if index >= count:
        raise ConfigError(f"policy.device={spec} but only {count} CUDA device(s) are visible (cuda:0..cuda:{count - 1}; "
                          "CUDA_VISIBLE_DEVICES renumbers them from 0); set policy.device to one of those, cuda or auto")
    return torch.device("cuda", index)
