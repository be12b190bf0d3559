"""An agent on the official ``anthropic`` SDK (Messages API with tools: the ``tool_use`` /
``tool_result`` loop) playing a registered text env, as a harness for the recording proxy.

``anthropic.Anthropic()`` reads ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``, which
``agentrl.rollout.harness`` sets to the episode's proxy endpoint (the base URL without
``/v1``: the SDK appends ``/v1/messages``), so every ``messages.create`` is a recorded,
token-faithful turn. The model name is only a label for the proxy.

Run by hand against a proxy (``agentrl proxy serve``, then create an episode)::

    ANTHROPIC_BASE_URL=http://127.0.0.1:8000/e/<key> ANTHROPIC_API_KEY=<key> \\
    AGENTRL_ENV_ID=agentrl/Toy-v0 AGENTRL_SEED=0 python examples/harness_anthropic.py

Options: ``--max-turns`` (model calls per episode, default 16), ``--max-tokens`` per reply
(default 256), ``--model`` (default ``claude-sonnet-4-5``).
"""

from __future__ import annotations

import argparse

import anthropic

from harness_env import INSTRUCTIONS, PARAMETERS, TOOL_DOC, TOOL_NAME, ToolEnv

TOOLS = [{"name": TOOL_NAME, "description": TOOL_DOC, "input_schema": PARAMETERS}]


def play(client: anthropic.Anthropic, env: ToolEnv, *, model: str, max_turns: int, max_tokens: int) -> None:
    """The agent loop: call the model; run each ``tool_use`` block and answer with its
    ``tool_result``; stop when the model answers without a tool call or turns run out."""
    messages: list[dict] = [{"role": "user", "content": env.first_observation}]
    for _ in range(max_turns):
        reply = client.messages.create(model=model, max_tokens=max_tokens, system=INSTRUCTIONS, tools=TOOLS,
                                       messages=messages)
        calls = [b for b in reply.content if b.type == "tool_use"]
        if reply.stop_reason != "tool_use" or not calls:
            return
        messages.append({"role": "assistant", "content": reply.content})
        results = []
        for call in calls:
            command = call.input.get("command") if isinstance(call.input, dict) else None
            if call.name == TOOL_NAME and isinstance(command, str):
                results.append({"type": "tool_result", "tool_use_id": call.id, "content": env.act(command)})
            else:
                results.append({"type": "tool_result", "tool_use_id": call.id, "is_error": True,
                                "content": f"unknown tool {call.name!r} or no 'command' string; use {TOOL_NAME}"})
        messages.append({"role": "user", "content": results})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-turns", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--model", default="claude-sonnet-4-5")
    args = ap.parse_args()
    env = ToolEnv()
    try:
        play(anthropic.Anthropic(), env, model=args.model, max_turns=args.max_turns, max_tokens=args.max_tokens)
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
