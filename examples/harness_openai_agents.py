"""An OpenAI Agents SDK agent (``openai-agents``: ``agents.Agent`` / ``Runner``) playing a
registered text env with one function tool, as a harness for the recording proxy.

The SDK runs with its defaults: its default model and model settings and its default API,
the **Responses API** (``POST {OPENAI_BASE_URL}/responses``), the client built from
``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` — which ``agentrl.rollout.harness`` sets to the
episode's proxy endpoint, so every model call is a recorded, token-faithful turn. The one
change is that tracing is off: the SDK would otherwise upload each run's trace (prompts and
tool outputs) to OpenAI's servers with that key.

Run by hand against a proxy (``agentrl proxy serve``, then create an episode)::

    OPENAI_BASE_URL=http://127.0.0.1:8000/e/<key>/v1 OPENAI_API_KEY=<key> \\
    AGENTRL_ENV_ID=agentrl/Toy-v0 AGENTRL_SEED=0 python examples/harness_openai_agents.py

The SDK raises on a reply cut by the token budget (``status: "incomplete"``) or a malformed
tool call; the agent then stops and the episode is scored as far as it got (a harness error
would leave it unscored). Options: ``--max-turns`` (model calls per episode, default 16). Needs
``pip install 'agentrl[harness]'``.
"""

from __future__ import annotations

import argparse

from agents import Agent, MaxTurnsExceeded, ModelBehaviorError, Runner, function_tool, set_tracing_disabled

from harness_env import INSTRUCTIONS, ToolEnv


def build_agent(env: ToolEnv) -> Agent:
    """The agent: the game instructions and ``env.act`` as its function tool."""
    return Agent(name="player", instructions=INSTRUCTIONS, tools=[function_tool(env.act)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-turns", type=int, default=16)
    args = ap.parse_args()
    set_tracing_disabled(True)
    env = ToolEnv()
    try:
        Runner.run_sync(build_agent(env), env.first_observation, max_turns=args.max_turns)
    except (MaxTurnsExceeded, ModelBehaviorError):
        # out of model calls, or a reply the SDK rejects (cut by the token budget: `response.incomplete`;
        # a malformed or unknown tool call): the episode ends where it is, and the verifier scores the log
        pass
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
