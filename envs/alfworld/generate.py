"""Generate new solvable ALFWorld games for all six task types (ENVIRONMENTS.md §2.5).

Each game is sampled from the wheel's scene vocabulary (``agentrl_envs.alfworld.scene``), written
as PDDL (``agentrl_envs.alfworld.pddl_writer``), then checked: the Fast Downward planner must find
a plan and replaying that plan in the PDDL engine must win within ``max_turns`` commands.
Only checked games are written, in the kept folder layout
``<out>/<task_type>-<Obj>-None-<Recep|Lamp>-<scene>/trial_gen_s<seed>_<i>/{game.tw-pddl,traj_data.json}``,
and their plans go to the walkthrough cache (``agentrl_envs.alfworld.expert``) so the env returns
``info["walkthrough"]`` for them at no planner cost.

CLI: ``python -m agentrl_envs.alfworld.generate --n 12 --seed 0 --out DIR`` (also
``agentrl generate alfworld ...``). Play them with
``make("agentrl/ALFWorld-v0", split="train", generated_dir=DIR)``.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path

from agentrl.env.contract import require_module
from agentrl_envs.alfworld import expert, pddl_writer
from agentrl_envs.alfworld.data import TASK_TYPES
from agentrl_envs.alfworld.scene import sample_task


@dataclass(frozen=True)
class GeneratedGame:
    """One written game: its folder, task type and the checked plan (list of commands)."""

    path: Path
    task_type: str
    walkthrough: tuple[str, ...]


def check_game(game: dict[str, object], max_turns: int = 50) -> list[str] | None:
    """Plan ``game`` with Fast Downward and replay the plan; return the plan when the
    replay wins within ``max_turns`` commands, else ``None``. ~0.1–1 s per game."""
    textworld = require_module("textworld", "alfworld")
    pddl = require_module("textworld.envs.pddl", "alfworld")
    tw_env = require_module("alfworld.agents.environment.alfred_tw_env", "alfworld")
    env = tw_env.AlfredDemangler(pddl.PddlEnv(textworld.EnvInfos(won=True, extras=["walkthrough"])))
    try:
        env.load(dict(game))
        state = env.reset()
        plan = list(state.get("extra.walkthrough") or [])
        if not plan or len(plan) > max_turns or state["won"]:
            return None
        for command in plan:
            state, _, _ = env.step(command)
        return plan if state["won"] else None
    except Exception:  # noqa: BLE001 - a malformed sample is rejected, not fatal
        return None
    finally:
        env.close()


def generate(n: int, seed: int, out: str | Path, task_types: tuple[str, ...] = TASK_TYPES,
             max_tries: int = 20) -> list[GeneratedGame]:
    """Write ``n`` checked games to ``out``, cycling through ``task_types`` (game ``i`` has
    type ``task_types[i % len(task_types)]``), deterministic in ``seed``.

    Raises:
        ValueError: ``n < 1`` or an unknown task type.
        RuntimeError: ``max_tries`` samples in a row failed the planner check.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    bad = [t for t in task_types if t not in TASK_TYPES]
    if bad:
        raise ValueError(f"unknown ALFWorld task type(s) {bad}; choose from {TASK_TYPES}")
    out = Path(out)
    games = []
    for i in range(n):
        task_type = task_types[i % len(task_types)]
        games.append(_one(task_type, seed, i, out, max_tries))
    return games


def _one(task_type: str, seed: int, i: int, out: Path, max_tries: int) -> GeneratedGame:
    trial = f"trial_gen_s{seed}_{i:05d}"
    for attempt in range(max_tries):
        rng = random.Random(f"alfworld-gen/{seed}/{i}/{attempt}")
        task = sample_task(task_type, rng)
        game = pddl_writer.game_dict(task, f"plan_{trial}")
        plan = check_game(game)
        if plan is None:
            continue
        game["solvable"] = True
        second = task.toggle or task.recep
        folder = out / f"{task_type}-{task.obj}-None-{second}-{task.scene_num}" / trial
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "game.tw-pddl").write_text(json.dumps(game), encoding="utf-8")
        (folder / "traj_data.json").write_text(json.dumps(pddl_writer.traj_data(task, trial), indent=1), encoding="utf-8")
        expert.store_walkthrough(game, plan)
        return GeneratedGame(folder, task_type, tuple(plan))
    raise RuntimeError(f"{max_tries} sampled {task_type} games in a row failed the planner check (seed {seed}, game {i})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI flags: ``--n``, ``--seed``, ``--out``, ``--task-types``."""
    parser.add_argument("--n", type=int, required=True, help="number of games to write")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (deterministic output)")
    parser.add_argument("--out", required=True, help="output folder (json_2.1.1-style layout)")
    parser.add_argument("--task-types", nargs="+", default=list(TASK_TYPES), choices=TASK_TYPES,
                        help="task types to cycle through (default: all six)")


def run(args: argparse.Namespace) -> int:
    """CLI handler: generate and print one line per game; returns 0."""
    for g in generate(args.n, args.seed, args.out, tuple(args.task_types)):
        print(f"{g.task_type:34s} {len(g.walkthrough):3d} steps  {g.path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m agentrl_envs.alfworld.generate``."""
    parser = argparse.ArgumentParser(prog="python -m agentrl_envs.alfworld.generate", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
