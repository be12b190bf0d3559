"""agentrl.train — the training loop and its stages (layer L4, above eval; below view and cli).

One room for the loop (DESIGN.md "Scale-out"): ``loop`` (``train``: iterations, eval, logging,
checkpoints; the data-parallel wiring: rank 0 rolls out and stores, every rank updates),
``steps`` (one iteration's rollout on the in-process engine, engine workers, trees or a
harness; the update plan and its steps; RTPO's rounds; weight sync), ``critic`` (turn-PPO's
turn-level critic), ``run_dir`` (setting a previous run aside, resume bookkeeping) and
``launches`` (a resume only with the run's own config; every launch recorded).

May import: every agentrl package below it (rollout, store, credit, update, distributed, eval, llm,
env, L0) and torch.
"""

from agentrl.train.launches import Launch
from agentrl.train.loop import CONSOLE_KEYS, IterationResult, RunParts, TrainResult, start_run, train
from agentrl.train.run_dir import set_aside, set_aside_interrupted

__all__ = ["Launch", "CONSOLE_KEYS", "IterationResult", "RunParts", "TrainResult", "start_run", "train", "set_aside",
           "set_aside_interrupted"]
