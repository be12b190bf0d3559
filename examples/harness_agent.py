"""A plain agent written against the official ``openai`` SDK, playing a registered text env.

It knows nothing about agentrl's training: it reads ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``
like any OpenAI program, so when ``agentrl.rollout.harness`` runs it, every chat call goes
through the recording proxy and becomes a token-faithful turn. The env contract it follows
(``agentrl.rollout.harness``): play ``AGENTRL_ENV_ID`` reset with ``AGENTRL_SEED`` (and the task
``AGENTRL_TASK_ID`` when set) and append each action sent to the env to ``AGENTRL_ACTION_LOG``
as ``{"action": ...}`` — the trainer replays those actions in its own env for the reward.

``--json-actions`` asks for structured output: every call sends ``response_format`` with a JSON
schema whose ``action`` is one of the env's admissible actions, which the proxy enforces by
grammar-constrained decoding — a small model (SmolLM2-135M) then never writes an invalid
command (free-form, nearly all of its commands are invalid). ``examples/harness_toy.yaml``
trains it that way.

Run by hand against a proxy (``agentrl proxy serve``, then create an episode)::

    OPENAI_BASE_URL=http://127.0.0.1:8000/e/<key>/v1 OPENAI_API_KEY=<key> \\
    AGENTRL_ENV_ID=agentrl/Toy-v0 AGENTRL_SEED=0 python examples/harness_agent.py --json-actions

Options: ``--max-turns`` (default 8), ``--max-tokens`` per reply (default 32), ``--stream``,
``--json-actions``, ``--goal`` (a sentence saying what to achieve, put in the system prompt; the
env's own ``info["instructions"]`` are used when it gives them), ``--window K`` (K > 0: each call
sends only the system prompt, the turn number, the last K actions and the current observation
instead of the whole conversation — a short prompt a small model does not fall into repeating itself in; the
proxy then records each call as a new segment), ``--goal-each-turn`` (with ``--window``: the goal heads each
user message — ``Goal: ...`` — instead of sitting in the system prompt; SmolLM2-135M follows it more there:
on the toy env P(open door | at the locked door) 0.09 → 0.26 and P(take key | the key's room) 0.55 → 0.65
for one prompt each, measured by scoring the admissible actions).
"""

from __future__ import annotations

import argparse
import json
import os
import re

from openai import OpenAI

SYSTEM = ("You are playing a text game. Reply with exactly one command inside <action></action> tags, "
          "for example <action>go east</action>.")
SYSTEM_JSON = "You are playing a text game. Answer with the next command as JSON: {\"action\": \"...\"}."
_ACTION = re.compile(r"<action>(.*?)</action>", re.S)


def parse_action(text: str) -> str:
    """The command inside ``<action>`` tags, a ``{"action": ...}`` object's, else the first non-empty line."""
    m = _ACTION.search(text)
    if m:
        return m.group(1).strip()
    try:
        obj = json.loads(text)
        if isinstance(obj, dict) and isinstance(obj.get("action"), str):
            return obj["action"].strip()
    except ValueError:
        pass
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def show(obs: str, info: dict) -> str:
    acts = info.get("admissible_actions")
    return f"{obs}\nAdmissible actions: {', '.join(acts)}" if acts else obs


def action_format(info: dict) -> dict | None:
    """``response_format`` whose only field ``action`` is one of the admissible actions (None when
    the env lists none)."""
    acts = info.get("admissible_actions")
    if not acts:
        return None
    schema = {"type": "object", "properties": {"action": {"type": "string", "enum": list(acts)}},
              "required": ["action"], "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": "command", "schema": schema, "strict": True}}


def ask(client: OpenAI, messages: list[dict], max_tokens: int, stream: bool, response_format: dict | None = None) -> str:
    """One chat call; the reply text (streamed or not)."""
    extra = {"response_format": response_format} if response_format else {}
    if not stream:
        out = client.chat.completions.create(model="policy", messages=messages, max_tokens=max_tokens, **extra)
        return out.choices[0].message.content or ""
    chunks = client.chat.completions.create(model="policy", messages=messages, max_tokens=max_tokens, stream=True,
                                            **extra)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def windowed(system: str, actions: list[str], current: str, k: int, max_turns: int, goal: str = "") -> list[dict]:
    """The messages of a windowed call: the system prompt, then (``goal`` given) the goal, the turn number,
    the last ``k`` actions and the current observation in one user message. The turn number keeps two
    calls from ever being identical: the proxy reads an exact resend as a retry of the last call."""
    done = f"Your last actions: {', '.join(actions[-k:])}.\n" if actions else ""
    turn = f"Turn {len(actions) + 1} of {max_turns}.\n"
    head = f"Goal: {goal}\n" if goal else ""
    return [{"role": "system", "content": system}, {"role": "user", "content": head + turn + done + current}]


def play(client: OpenAI, max_turns: int, max_tokens: int, stream: bool = False, choose=None,
         json_actions: bool = False, goal: str = "", window: int = 0, goal_each_turn: bool = False) -> None:
    """Play one episode of the env the harness contract names, logging each action;
    ``choose(reply, info) -> action`` picks the command (default: ``parse_action(reply)``);
    ``goal_each_turn`` (with ``window``): the goal heads each user message instead of the system prompt."""
    from agentrl.env import make  # any gymnasium text env works; agentrl's registry has the ids

    env = make(os.environ["AGENTRL_ENV_ID"], **json.loads(os.environ.get("AGENTRL_ENV_KWARGS", "{}")))
    task = os.environ.get("AGENTRL_TASK_ID", "")
    obs, info = env.reset(seed=int(os.environ.get("AGENTRL_SEED", "0")), options={"task_id": task} if task else None)
    goal = str(info.get("instructions") or goal).strip()
    system = SYSTEM_JSON if json_actions else SYSTEM
    in_user = goal if goal_each_turn and window > 0 else ""
    messages = [{"role": "system", "content": f"{system} {goal}" if goal and not in_user else system},
                {"role": "user", "content": show(obs, info)}]
    log_path, actions = os.environ.get("AGENTRL_ACTION_LOG"), []
    with open(log_path or os.devnull, "a", encoding="utf-8") as log:
        for _ in range(max_turns):
            sent = windowed(messages[0]["content"], actions, show(obs, info), window, max_turns, in_user) \
                if window > 0 else messages
            reply = ask(client, sent, max_tokens, stream, action_format(info) if json_actions else None)
            action = choose(reply, info) if choose is not None else parse_action(reply)
            actions.append(action)
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
    ap.add_argument("--json-actions", action="store_true",
                    help="structured output: each reply is {\"action\": one of the admissible actions}")
    ap.add_argument("--goal", default="", help="what to achieve, for the system prompt (the env's own instructions "
                                                 "win when it gives them)")
    ap.add_argument("--window", type=int, default=0,
                    help="K > 0: send only the last K actions and the current observation (default 0: the whole chat)")
    ap.add_argument("--goal-each-turn", action="store_true",
                    help="with --window: the goal heads each user message instead of the system prompt")
    args = ap.parse_args()
    play(OpenAI(max_retries=0), args.max_turns, args.max_tokens, args.stream,  # base URL and key from the environment
         json_actions=args.json_actions, goal=args.goal, window=args.window, goal_each_turn=args.goal_each_turn)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
