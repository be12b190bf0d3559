"""A harness for the credit-audit test: ``examples/harness_agent.py``'s loop through the recording
proxy, except that the command it sends is the env's walkthrough step, or, when the CRC-32 of
the model's reply is 0 mod 3, an admissible action picked by it (a slip; a tiny random model
never writes a valid command itself), so a group's episodes differ in outcome and their turns
get advantages to audit."""

from __future__ import annotations

import json
import os
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from harness_agent import SYSTEM, ask, show  # noqa: E402


def main() -> int:
    from openai import OpenAI

    from agentrl.env import make

    env = make(os.environ["AGENTRL_ENV_ID"], **json.loads(os.environ.get("AGENTRL_ENV_KWARGS", "{}")))
    obs, info = env.reset(seed=int(os.environ.get("AGENTRL_SEED", "0")))
    client = OpenAI(max_retries=0)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": show(obs, info)}]
    plan = list(info["walkthrough"])
    with open(os.environ.get("AGENTRL_ACTION_LOG") or os.devnull, "a", encoding="utf-8") as log:
        for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
            reply = ask(client, messages, 8, False)
            acts, h = info["admissible_actions"], zlib.crc32(reply.encode("utf-8"))
            action = acts[(h // 3) % len(acts)] if h % 3 == 0 or not plan else plan.pop(0)
            log.write(json.dumps({"action": action}) + "\n")
            log.flush()
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
            messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": show(obs, info)}]
    env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
