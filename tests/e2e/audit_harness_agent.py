"""A harness for the credit-audit test: ``examples/harness_agent.py``'s loop through the recording
proxy, except that the command it sends is the env's walkthrough step, or, when the CRC-32 of
the model's reply is 0 mod 3, an admissible action picked by it (a slip; a tiny random model
never writes a valid command itself), so a group's episodes differ in outcome and their turns
get advantages to audit. ``audit_harness_agent.py MAX_TURNS``."""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from harness_agent import OpenAI, play  # noqa: E402


def main() -> int:
    plan: list[str] | None = None

    def choose(reply: str, info: dict) -> str:
        nonlocal plan
        plan = list(info["walkthrough"]) if plan is None else plan  # the reset info comes first
        acts, h = info["admissible_actions"], zlib.crc32(reply.encode("utf-8"))
        return acts[(h // 3) % len(acts)] if h % 3 == 0 or not plan else plan.pop(0)

    play(OpenAI(max_retries=0), int(sys.argv[1]) if len(sys.argv) > 1 else 3, 8, choose=choose)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
