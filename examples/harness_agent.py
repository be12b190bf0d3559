"""A plain agent written against the official ``openai`` SDK, playing a registered text env.

It knows nothing about agentrl's training: it reads ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``
like any OpenAI program, so when ``agentrl.rollout.harness`` runs it, every chat call goes
through the recording proxy and becomes a token-faithful turn. The env contract it follows
(``agentrl.rollout.harness``): play ``AGENTRL_ENV_ID`` reset with ``AGENTRL_SEED`` and append
each action sent to the env to ``AGENTRL_ACTION_LOG`` as ``{"action": ...}`` — the trainer
replays those actions in its own env to compute the reward.

Run by hand against a proxy (``agentrl proxy serve``, then create an episode)::

    OPENAI_BASE_URL=http://127.0.0.1:8000/e/<key>/v1 OPENAI_API_KEY=<key> \\
    AGENTRL_ENV_ID=agentrl/Toy-v0 AGENTRL_SEED=0 python examples/harness_agent.py

Options: ``--max-turns`` (default 8), ``--max-tokens`` per reply (default 32), ``--stream``.
"""

from __future__ import annotations

import argparse
import json
import os
import re

from openai import OpenAI

SYSTEM = ("You are playing a text game. Reply with exactly one command inside <action></action> tags, "
          "for example <action>go east</action>.")
_ACTION = re.compile(r"<action>(.*?)</action>", re.S)


def parse_action(text: str) -> str:
    """The command inside ``<action>`` tags, else the first non-empty line."""
    m = _ACTION.search(text)
    if m:
        return m.group(1).strip()
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def show(obs: str, info: dict) -> str:
    acts = info.get("admissible_actions")
    return f"{obs}\nAdmissible actions: {', '.join(acts)}" if acts else obs


def ask(client: OpenAI, messages: list[dict], max_tokens: int, stream: bool) -> str:
    """One chat call; the reply text (streamed or not)."""
    if not stream:
        out = client.chat.completions.create(model="policy", messages=messages, max_tokens=max_tokens)
        return out.choices[0].message.content or ""
    chunks = client.chat.completions.create(model="policy", messages=messages, max_tokens=max_tokens, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def play(client: OpenAI, max_turns: int, max_tokens: int, stream: bool = False, choose=None) -> None:
    """Play one episode of the env the harness contract names, logging each action;
    ``choose(reply, info) -> action`` picks the command (default: ``parse_action(reply)``)."""
    from agentrl.env import make  # any gymnasium text env works; agentrl's registry has the ids

    env = make(os.environ["AGENTRL_ENV_ID"], **json.loads(os.environ.get("AGENTRL_ENV_KWARGS", "{}")))
    obs, info = env.reset(seed=int(os.environ.get("AGENTRL_SEED", "0")))
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": show(obs, info)}]
    log_path = os.environ.get("AGENTRL_ACTION_LOG")
    with open(log_path or os.devnull, "a", encoding="utf-8") as log:
        for _ in range(max_turns):
            reply = ask(client, messages, max_tokens, stream)
            action = choose(reply, info) if choose is not None else parse_action(reply)
            log.write(json.dumps({"action": action}) + "\n")
            log.flush()
            obs, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
            messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": show(obs, info)}]
    env.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--stream", action="store_true")
    args = ap.parse_args()
    play(OpenAI(max_retries=0), args.max_turns, args.max_tokens, args.stream)  # base URL and key from the environment
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
