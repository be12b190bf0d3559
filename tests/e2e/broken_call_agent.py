"""A harness (plain ``openai`` SDK) for test_broken_episodes.py: plays ``agentrl/Toy-v0`` and,
by its role, loses a model call that it then retries — a harness that swallows an error and
exits 0, whose episode must still never be trained on.

Role = the order in which the members of one group (one seed) start, taken from files created
atomically in ``--roles-dir/<seed>/``. Even seeds: member 0 sends one call the proxy refuses
(a prompt over the model's context) then wins, member 1 wins, member 2 only looks (loses).
Odd seeds: members 0 and 1 lose a call then win, member 2 wins. Each call's reply is ignored:
the actions are the walkthrough or ``look``, so rewards are known in advance.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import openai
from openai import OpenAI

PLANS = {0: [(True, True), (False, True), (False, False)], 1: [(True, True), (True, True), (False, True)]}


def role(roles_dir: Path, seed: int) -> int:
    folder = roles_dir / str(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for j in range(3):
        try:
            os.close(os.open(folder / str(j), os.O_CREAT | os.O_EXCL))
            return j
        except FileExistsError:
            continue
    raise SystemExit(f"more than 3 members for seed {seed}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--roles-dir", required=True)
    ap.add_argument("--max-turns", type=int, default=12)
    args = ap.parse_args()
    from agentrl.env import make

    seed = int(os.environ["AGENTRL_SEED"])
    lose_call, win = PLANS[seed % 2][role(Path(args.roles_dir), seed)]
    client = OpenAI(max_retries=0)
    if lose_call:
        try:
            client.chat.completions.create(model="policy", max_tokens=4,
                                           messages=[{"role": "user", "content": "look " * 5000}])
            raise SystemExit("the oversized prompt was accepted")
        except openai.BadRequestError:
            pass  # a harness that swallows the error and goes on
    env = make(os.environ["AGENTRL_ENV_ID"], **json.loads(os.environ.get("AGENTRL_ENV_KWARGS", "{}")))
    obs, info = env.reset(seed=seed)
    plan = list(info["walkthrough"]) if win else ["look"] * args.max_turns
    messages = [{"role": "user", "content": obs}]
    with open(os.environ["AGENTRL_ACTION_LOG"], "a", encoding="utf-8") as log:
        for action in plan[:args.max_turns]:
            client.chat.completions.create(model="policy", messages=messages, max_tokens=4)
            log.write(json.dumps({"action": action}) + "\n")
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
            messages += [{"role": "assistant", "content": action}, {"role": "user", "content": obs}]
    env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
