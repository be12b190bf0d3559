"""A LangGraph ReAct agent (``langgraph.prebuilt.create_react_agent`` on
``langchain_openai.ChatOpenAI``) playing a registered text env with one function tool, as a
harness for the recording proxy.

``ChatOpenAI()`` runs with its defaults (chat completions; the OpenAI client reads
``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``, which ``agentrl.rollout.harness`` sets to the
episode's proxy endpoint), so every model call of the graph is a recorded, token-faithful
turn. The tool is a plain ``@tool`` function.

Run by hand against a proxy (``agentrl proxy serve``, then create an episode)::

    OPENAI_BASE_URL=http://127.0.0.1:8000/e/<key>/v1 OPENAI_API_KEY=<key> \\
    AGENTRL_ENV_ID=agentrl/Toy-v0 AGENTRL_SEED=0 python examples/harness_langgraph.py

Options: ``--max-steps`` (graph steps, LangGraph's ``recursion_limit``; one model call and one
tool call are two steps; default 40). Needs ``pip install 'agentrl[harness]'``.
"""

from __future__ import annotations

import argparse

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.prebuilt import create_react_agent

from harness_env import INSTRUCTIONS, ToolEnv


def build_agent(env: ToolEnv):
    """The compiled ReAct graph: ``ChatOpenAI()`` with ``env.act`` as its tool."""
    return create_react_agent(ChatOpenAI(), [tool(env.act, parse_docstring=True)], prompt=INSTRUCTIONS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-steps", type=int, default=40)
    args = ap.parse_args()
    env = ToolEnv()
    try:
        build_agent(env).invoke({"messages": [("user", env.first_observation)]},
                                {"recursion_limit": args.max_steps})
    except GraphRecursionError:
        pass  # out of steps: the episode ends where it is (the verifier scores the log)
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
