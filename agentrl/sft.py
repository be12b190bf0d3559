"""SFT warm-start on expert walkthroughs, rendered exactly as the RL prompts.

Each env's reset info may carry an expert action list (``walkthrough``: TextWorld
walkthroughs, the toy env's shortest path, ALFWorld planner walkthroughs, the WebShop
oracle). ``expert_episodes`` replays them through the **same** ``EpisodeDriver`` and
context strategy as ``agentrl train`` (``agentrl.eval.loop_config``), feeding as the
"completion" of each turn the expert action rendered in the action format, tokenized on
its own, plus EOS — exactly a sequence the constrained decoder could emit. The prompts are
therefore token-identical to RL prompts, and ``build_batch`` gives the same loss mask (1 on
completion tokens only). ``train_sft`` minimises the token-mean cross-entropy of those
tokens (renormalised over the admissible actions when ``policy.action_constraint`` is
``admissible``) and writes an HF folder that ``agentrl train`` starts from with
``policy.model: <folder>``.
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from agentrl.config import Config, ConfigError
from agentrl.env.contract import INFO_WALKTHROUGH
from agentrl.env.pool import EnvPool
from agentrl.env.registry import action_normalization
from agentrl.eval import env_kwargs, loop_config
from agentrl.llm.base import FINISH_STOP, Completion
from agentrl.llm.chat import ChatRenderer
from agentrl.llm.constrained import completion_sequences, turn_allowed_ids
from agentrl.rollout.agent_loop import EpisodeDriver, LoopConfig
from agentrl.train.checks import checked_config_from_dict
from agentrl.types import Episode, EpisodeStatus, Turn


@dataclass(frozen=True)
class SFTConfig:
    """``sft`` section of an SFT config (the rest is a normal ``agentrl train`` config).

    Attributes:
        episodes: walkthrough episodes to replay (env seeds ``seed .. seed + episodes − 1``
            of ``env.split``), ≥ 1.
        epochs: passes over the expert turns, ≥ 1.
        lr: AdamW learning rate. batch_turns: turns per optimizer step (≥ 1).
        micro_batch: rows per forward pass. grad_clip: max gradient norm (0 = off).
        seed: env seed base and shuffle seed. num_slots: parallel env slots.
        out: output folder (default ``run.out_dir/run.name/sft``).
    """

    episodes: int = 64
    epochs: int = 2
    lr: float = 1e-4
    batch_turns: int = 16
    micro_batch: int = 4
    grad_clip: float = 1.0
    seed: int = 0
    num_slots: int = 8
    out: str = ""

    def __post_init__(self) -> None:
        if min(self.episodes, self.epochs, self.batch_turns, self.micro_batch, self.num_slots) < 1 or self.lr <= 0:
            raise ConfigError("sft.episodes, epochs, batch_turns, micro_batch, num_slots must be >= 1 and sft.lr > 0")


def split_sft_config(raw: Mapping[str, Any], overrides: Sequence[str] = ()) -> tuple[Config, SFTConfig]:
    """Split a parsed YAML mapping (+ ``key=value`` overrides) into the train ``Config`` and
    the ``sft`` section.

    Raises:
        ConfigError: unknown ``sft.*`` key (names the valid ones), or any train-config error
            (``agentrl.train.checks.checked_config_from_dict``: the registries are consulted).
    """
    raw = dict(raw or {})
    sft_raw = dict(raw.pop("sft", None) or {})
    rest = []
    for o in overrides:
        key, sep, val = o.partition("=")
        if key.startswith("sft.") and sep:
            sft_raw[key[4:]] = val
        else:
            rest.append(o)
    names = {f.name: f for f in dataclasses.fields(SFTConfig)}
    unknown = set(sft_raw) - set(names)
    if unknown:
        raise ConfigError(f"unknown sft key(s) {sorted(unknown)}; valid: {', '.join(names)}")
    typed = {k: (type(getattr(SFTConfig(), k)))(v) for k, v in sft_raw.items()}
    return checked_config_from_dict(raw, rest), SFTConfig(**typed)


def load_sft_config(path: str | Path, overrides: Sequence[str] = ()) -> tuple[Config, SFTConfig]:
    """Read a YAML SFT config (a train config + optional ``sft:`` section) with overrides.

    Raises:
        ConfigError: missing file, invalid YAML, unknown keys (see ``split_sft_config``).
    """
    from agentrl.config import _yaml_load  # the project's YAML loader (1e-4 is a float)

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist; pass the path of a YAML file (see examples/)")
    raw = _yaml_load(p.read_text(encoding="utf-8"))
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(f"{p}: the top level must be a mapping of sections")
    return split_sft_config(raw or {}, overrides)


def expert_completion(action: str, loop: LoopConfig, renderer: ChatRenderer) -> Completion:
    """The completion an expert emits: ``action`` in the action format, encoded on its own,
    plus EOS (logprobs 0, finish ``stop``)."""
    ids = completion_sequences([action], loop.action_format, renderer.encode, renderer.eos_token_id)[0]
    return Completion(token_ids=ids, logprobs=np.zeros(ids.size, np.float32), finish_reason=FINISH_STOP)


@dataclass(frozen=True)
class ExpertData:
    """Replayed walkthroughs.

    Attributes:
        episodes: the replayed episodes (status ok), in seed order.
        skipped: seeds whose reset had no walkthrough or failed.
        won: replayed episodes that ended won (a walkthrough cut by ``env.max_turns`` is not).
    """

    episodes: list[Episode]
    skipped: int
    won: int

    @property
    def turns(self) -> list[Turn]:
        return [t for e in self.episodes for t in e.turns]


def expert_episodes(cfg: Config, renderer: ChatRenderer, max_context: int, n: int, seed: int = 0,
                    num_slots: int = 8) -> ExpertData:
    """Replay ``n`` walkthroughs (env seeds ``seed..seed+n-1``) through ``EpisodeDriver`` in
    lock-step over ``num_slots`` env slots.

    Raises:
        EnvPoolError: the env cannot be constructed.
    """
    loop, done, skipped = loop_config(cfg), [], 0
    normalize = action_normalization(cfg.env.id)  # the env's action normalisation, as in collect
    slots_n = max(1, min(num_slots, n))
    with EnvPool(cfg.env.id, slots_n, env_kwargs=env_kwargs(cfg, cfg.env.split), num_workers=cfg.rollout.num_workers,
                 step_timeout_s=cfg.rollout.step_timeout_s, max_observation_chars=cfg.env.max_observation_chars) as pool:
        for start in range(0, n, slots_n):
            seeds = list(range(seed + start, seed + min(n, start + slots_n)))
            results = pool.reset(list(range(len(seeds))), seeds)
            drivers, plans = {}, {}
            for s, sd in enumerate(seeds):
                res = results[s]
                ep = Episode(episode_id=start + s, group_id=start + s, env_id=cfg.env.id,
                             task_id=str(res.info.get("task_id", sd)), seed=sd, run_id="sft")
                drv = EpisodeDriver(ep, renderer, loop, max_context, normalize)
                walk = list(res.info.get(INFO_WALKTHROUGH) or ())
                drv.start(res)
                if drv.done or not walk:
                    skipped += 1
                    continue
                drivers[s], plans[s] = drv, walk
            while drivers:
                actions = {s: d.act(expert_completion(plans[s].pop(0), loop, renderer)) for s, d in drivers.items()}
                step = pool.step(actions)
                for s in list(drivers):
                    if drivers[s].observe(step[s]) or not plans[s]:
                        done.append(drivers.pop(s).episode)
    ok = sorted((e for e in done if e.status == EpisodeStatus.OK and e.turns), key=lambda e: e.seed)
    skipped += len(done) - len(ok)
    return ExpertData(episodes=ok, skipped=skipped, won=sum(bool(e.turns[-1].info.get("won")) for e in ok))


def sft_batch(turns: Sequence[Turn], renderer: ChatRenderer, pad_id: int, *, constrained: bool, pack: bool = False):
    """``TrainBatch`` of expert turns: the RL ``build_batch`` with advantages 1 and logprobs 0;
    with ``constrained``, the per-position allowed ids of each turn (turns whose expert
    action is not admissible stay unconstrained)."""
    from agentrl.update.batch import build_batch

    allowed = None
    if constrained:
        allowed = []
        for t in turns:
            try:
                allowed.append(turn_allowed_ids(t, renderer.encode, renderer.eos_token_id))
            except ValueError:  # the expert action is not among the admissible ones
                allowed.append(None)
    return build_batch([t.prompt_ids for t in turns], [t.completion_ids for t in turns],
                       [np.zeros(t.completion_ids.size, np.float32) for t in turns], np.ones(len(turns)),
                       pad_id=pad_id, pack=pack, allowed=allowed)


def sft_loss(model, turns: Sequence[Turn], renderer: ChatRenderer, pad_id: int, *, constrained: bool,
             micro_batch: int = 4) -> float:
    """Token-mean cross-entropy (nats) of the expert completion tokens under ``model``."""
    from agentrl.update.logprobs import batch_logprobs

    batch = sft_batch(turns, renderer, pad_id, constrained=constrained)
    lp = batch_logprobs(model, batch, micro_batch=micro_batch)
    return float(-(lp * batch.loss_mask).sum() / batch.loss_mask.sum())


@dataclass(frozen=True)
class SFTResult:
    """What ``train_sft`` reports: the HF folder written, the mean loss (nats/token) of the
    first and the last epoch, the numbers of expert episodes/turns, walkthroughs won, steps."""

    out_dir: Path
    first_epoch_loss: float
    last_epoch_loss: float
    episodes: int
    turns: int
    won: int
    steps: int
    seconds: float


def train_sft(cfg: Config, sft: SFTConfig, *, log=print) -> SFTResult:
    """Replay walkthroughs, fit the policy to them, save an HF folder (model + tokenizer).

    Raises:
        ValueError: no walkthrough turn (the env gives no ``walkthrough`` at reset).
        FileNotFoundError / KeyError: the policy model is missing / unknown.
    """
    from agentrl.llm.policy import load_policy
    from agentrl.update.lora import prepare_policy
    from agentrl.update.step import make_optimizer, sft_update

    t0 = time.perf_counter()
    policy = load_policy(cfg.policy)
    data = expert_episodes(cfg, policy.renderer, policy.engine.max_context, sft.episodes, sft.seed, sft.num_slots)
    turns = data.turns
    if not turns:
        raise ValueError(f"no expert turns: {cfg.env.id} gave no '{INFO_WALKTHROUGH}' at reset for seeds "
                         f"{sft.seed}..{sft.seed + sft.episodes - 1}; SFT needs an env with walkthroughs")
    log(f"sft: {len(data.episodes)} walkthroughs ({data.won} won, {data.skipped} skipped), {len(turns)} turns")
    constrained = cfg.policy.action_constraint == "admissible"
    model = prepare_policy(policy.model, cfg.update, cfg.policy.lora)
    optimizer = make_optimizer(model, sft.lr, cfg.update.weight_decay)
    rng, losses, steps = random.Random(sft.seed), [], 0
    for epoch in range(sft.epochs):
        order = list(range(len(turns)))
        rng.shuffle(order)
        epoch_losses = []
        for i in range(0, len(order), sft.batch_turns):
            chunk = [turns[k] for k in order[i : i + sft.batch_turns]]
            batch = sft_batch(chunk, policy.renderer, policy.pad_id, constrained=constrained)
            epoch_losses.append(sft_update(model, optimizer, batch, micro_batch=sft.micro_batch, grad_clip=sft.grad_clip))
            steps += 1
        losses.append(float(np.mean(epoch_losses)))
        log(f"sft: epoch {epoch + 1}/{sft.epochs} loss {losses[-1]:.4f} nats/token")
    out = Path(sft.out) if sft.out else Path(cfg.run.out_dir) / cfg.run.name / "sft"
    save_hf_folder(model, policy.renderer.tokenizer, out)
    return SFTResult(out_dir=out, first_epoch_loss=losses[0], last_epoch_loss=losses[-1], episodes=len(data.episodes),
                     turns=len(turns), won=data.won, steps=steps, seconds=time.perf_counter() - t0)


def save_hf_folder(model, tokenizer, out: Path) -> Path:
    """Write ``model`` (LoRA adapters merged into the weights) and ``tokenizer`` to ``out``
    as an HF folder loadable by ``policy.model: <out>``. Returns ``out``."""
    merge = getattr(model, "merge_and_unload", None)
    model = merge() if merge is not None else model
    if getattr(model, "is_gradient_checkpointing", False):
        model.gradient_checkpointing_disable()
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
