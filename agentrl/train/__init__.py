"""agentrl.train — the training loop and its stages (layer L4, above eval; below view and cli).

One room for the loop (DESIGN.md "Scale-out"): ``loop`` (``train``: iterations, eval, logging,
checkpoints; the data-parallel wiring: rank 0 rolls out and stores, every rank updates),
``steps`` (one iteration's rollout on the in-process engine, engine workers, trees or a
harness; the update plan and its steps; RTPO's rounds; weight sync), ``critic`` (turn-PPO's
turn-level critic), ``run_dir`` (setting a previous run aside, resume bookkeeping),
``launches`` (a resume only with the run's own config; every launch recorded) and ``checks``
(the config checks against the registries: env, loss, estimator; ``check_config``).

May import: every agentrl package below it (rollout, store, credit, update, distributed, eval, llm,
env, L0) and torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# name -> submodule; each is imported on first use (PEP 562), so ``agentrl.train.checks`` (the
# registry checks ``agentrl eval``, ``agentrl sft`` and ``--print-config`` run) does not import
# the loop, torch or the engines
_EXPORTS = {
    "Launch": "launches", "CONSOLE_KEYS": "loop", "IterationResult": "metrics", "RunParts": "loop", "TrainResult": "loop",
    "start_run": "loop", "train": "loop", "set_aside": "run_dir", "set_aside_interrupted": "run_dir",
    "check_config": "checks", "load_checked_config": "checks", "checked_config_from_dict": "checks",
}
__all__ = list(_EXPORTS)

if TYPE_CHECKING:
    from agentrl.train.checks import check_config, checked_config_from_dict, load_checked_config
    from agentrl.train.launches import Launch
    from agentrl.train.loop import CONSOLE_KEYS, RunParts, TrainResult, start_run, train
    from agentrl.train.metrics import IterationResult
    from agentrl.train.run_dir import set_aside, set_aside_interrupted


def __getattr__(name: str):
    """``agentrl.train.NAME`` for the names of ``__all__``, imported from their submodule on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'agentrl.train' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"agentrl.train.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
