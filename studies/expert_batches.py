"""The batches and the expert values of the expert-fidelity study (``studies/expert_fidelity.py``).

``load_policy`` builds a cell's sampler (SmolLM2 as packaged or after the main job, or none for the
scripted noisy walkthrough); ``collect_batch`` samples one batch into the cell's turn store with
the cell's sampler — chains (``agentrl.rollout.collector.collect`` or the scripted policy),
Tree-GRPO's trees (``agentrl.rollout.tree.sample_trees``) or RTPO's reverse-turn branches
(``agentrl.rollout.reverse.run_rtpo_iteration`` at a fixed policy: no update between rounds);
``expert_table`` computes every stored episode's expert values, a branch on its whole
root-to-leaf path (its parents' actions, then its own).
"""

from __future__ import annotations

import json
from pathlib import Path

from studies.runner import Cell

SAMPLERS = ("chains", "hiper", "tree", "rtpo")  #: hiper: chains in HiPER's tagged format (the config says)


def load_policy(cell: Cell, run_dir: Path):
    """(config, policy) of the cell: the env's example config with its overrides, the packaged
    SmolLM2 (bf16 where the CPU has AVX-512-BF16/AMX, else fp32), and for ``main`` the checkpoint
    of the README's main job (trained here once, then reused); policy None for the noisy walkthrough."""
    from agentrl.eval import load_eval_policy
    from agentrl.train.checks import load_checked_config
    from studies.learning import auto_dtype

    c = cell.config
    dtype = auto_dtype()
    cfg = load_checked_config(c["config"], [*c["overrides"], f"policy.dtype={dtype}", f"run.out_dir={run_dir}",
                                            "run.name=sampler", "rollout.num_workers=1"])
    if c["policy"] == "noisy_walkthrough":
        return cfg, None
    ckpt = None
    if c["policy"] == "main":
        from agentrl.train import train

        main_cfg = load_checked_config("examples/gigpo_textworld.yaml", [f"policy.dtype={dtype}", "run.name=main",
                                                                         f"run.out_dir={run_dir}", "run.eval_before=false",
                                                                         "run.eval_every=0"])
        ckpt = run_dir / "main" / "checkpoints" / f"iter_{main_cfg.run.iterations:06d}"
        if not ckpt.is_dir():
            train(main_cfg, resume=True)
    return cfg, load_eval_policy(cfg, ckpt)


def _scripted(cfg, store, run_id: str, n_groups: int, group: int, seed: int) -> None:
    from agentrl.eval import env_kwargs
    from agentrl.rollout import RolloutRequest
    from agentrl.rollout.scripted import run_scripted

    episodes = []
    run_scripted(RolloutRequest(cfg.env.id, "noisy_walkthrough", n_groups * group, group, seed, cfg.env.max_turns,
                                env_kwargs(cfg, "train"), num_slots=min(8, n_groups * group), num_workers=1),
                 episodes.append)
    for ep in episodes:
        ep.run_id = run_id
        for t in ep.turns:
            t.run_id = run_id
    store.add_episodes(sorted(episodes, key=lambda e: e.episode_id), run_id=run_id)


def collect_batch(cfg, policy, store, run_id: str, n_groups: int, group: int, seed: int,
                  sampler: str = "chains") -> None:
    """Sample one batch of ``n_groups`` tasks (env seeds ``seed + g``) into ``store`` under ``run_id``:
    ``group`` chains per task, or (``tree``) Tree-GRPO's trees with the config's ``rollout.tree``, or
    (``rtpo``) ``group`` bases per task and their reverse-turn continuations. Raises ValueError for
    another sampler or a tree sampler without a policy."""
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; choose one of {SAMPLERS}")
    if policy is None:
        if sampler != "chains":
            raise ValueError("the scripted noisy walkthrough samples plain chains only")
        return _scripted(cfg, store, run_id, n_groups, group, seed)
    from agentrl.eval import env_kwargs, loop_config
    from agentrl.llm.base import SamplingParams
    from agentrl.rollout.collector import CollectConfig, collect
    from agentrl.rollout.tree import add_linked

    cc = CollectConfig(env_id=cfg.env.id, n_groups=n_groups, group_size=group, seed=seed, loop=loop_config(cfg),
                       sampling=SamplingParams(temperature=1.0, max_tokens=cfg.policy.max_tokens, seed=seed),
                       env_kwargs=env_kwargs(cfg, "train"), num_slots=min(16, n_groups * group), num_workers=1,
                       run_id=run_id, progress=False, return_hidden=sampler in ("chains", "hiper"))
    if sampler in ("chains", "hiper"):
        store.add_episodes(collect(policy.engine, policy.renderer, cc), run_id=run_id)
    elif sampler == "tree":
        from agentrl.rollout.tree import sample_trees

        add_linked(store, sample_trees(policy.engine, policy.renderer, cc, cfg.rollout.tree).episodes, run_id=run_id)
    else:
        from agentrl.rollout.reverse import run_rtpo_iteration

        # a fixed policy: the fidelity of RTPO's credit at one policy, not its learning schedule
        add_linked(store, run_rtpo_iteration(policy.engine, policy.renderer, cc, cfg.rollout.tree, lambda rnd: None),
                   run_id=run_id)


def _paths(episodes) -> dict[int, tuple[list[str], list[float], list[str]]]:
    """Per episode id: (actions, rewards, anchors) of its whole root-to-leaf path up to its last
    turn (a branch: its parent's path up to the node it branches from, then its own turns)."""
    from agentrl.rollout.tree import PARENT_KEY

    by_id, out = {e.episode_id: e for e in episodes}, {}

    def path(e):
        if e.episode_id not in out:
            head: tuple[list, list, list] = ([], [], [])
            if e.turns and PARENT_KEY in e.turns[0].info:  # the parent's path is whole from the root: index by t
                pe, pt = e.turns[0].info[PARENT_KEY]
                head = tuple(x[: int(pt) + 1] for x in path(by_id[int(pe)]))  # type: ignore[assignment]
            out[e.episode_id] = (head[0] + [t.action for t in e.turns], head[1] + [t.reward for t in e.turns],
                                 head[2] + [t.anchor_obs for t in e.turns])
        return out[e.episode_id]

    for e in episodes:
        path(e)
    return out


def expert_table(cfg, episodes, c: dict, cache) -> dict:
    """Per ok episode id: ``ExpertValues`` (``agentrl.env.expert``) of its whole path, indexed by the
    turns' ``t`` (a branch's rows read entries ``t0`` on)."""
    import gymnasium as gym

    from agentrl.env.expert import META_EXPERT_KWARGS, expert_values
    from agentrl.types import EpisodeStatus
    from agentrl.env.registry import env_metadata
    from agentrl.eval import env_kwargs

    kw = {**env_kwargs(cfg, "train"), **dict(env_metadata(cfg.env.id).get(META_EXPERT_KWARGS) or {}),
          "max_turns": cfg.env.max_turns + c["max_expert_steps"] + 1}
    env = gym.make(cfg.env.id, **kw).unwrapped
    key = json.dumps([cfg.env.id, kw], sort_keys=True, default=str)  # names the env in the cache
    paths, out = _paths(episodes), {}
    try:
        for i, ep in enumerate(episodes):
            if ep.status != EpisodeStatus.OK or not ep.turns:
                continue
            actions, rewards, anchors = paths[ep.episode_id]
            out[ep.episode_id] = expert_values(
                env, actions, seed=ep.seed, rewards=rewards, anchors=anchors, terminated=bool(ep.turns[-1].terminated),
                gamma=c["gamma"], max_expert_steps=c["max_expert_steps"], cache=cache, env_key=key)
            if i % 8 == 7:
                cache.save()
    finally:
        env.close()
        cache.save()
    return out

