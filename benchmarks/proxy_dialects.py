"""Per-call latency of the recording proxy in each dialect (issue 24): chat completions,
Responses and Anthropic Messages, same conversations, same scripted engine, interleaved.

Each round plays one 8-turn episode per dialect over HTTP (httpx, keep-alive; the body is
built by hand, so the client's cost is the same in every dialect) against the tiny ChatML
tokenizer's renderer and a ``ScriptedEngine``; p50 / p99 per call, and the difference to chat.

    python benchmarks/proxy_dialects.py [--rounds 30] [--turns 8] [--out benchmarks/results/proxy_dialects.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np


def _bodies(dialect: str, turns: int):
    """Request bodies of one episode, each extending the last reply (``reply`` is sent back)."""
    conv: list = []
    for k in range(turns):
        obs = f"You are in room {k} of {turns}. Exits: north, east. A lamp is here."
        if dialect == "chat":
            conv.append({"role": "user", "content": obs})
            body = {"model": "p", "messages": [{"role": "system", "content": "You play a text game."}, *conv]}
        elif dialect == "responses":
            conv.append({"role": "user", "content": obs})
            body = {"model": "p", "instructions": "You play a text game.", "input": list(conv)}
        else:
            conv.append({"role": "user", "content": obs})
            body = {"model": "p", "max_tokens": 64, "system": "You play a text game.", "messages": list(conv)}
        reply = yield body
        conv.append(reply)


def _reply(dialect: str, out: dict):
    if dialect == "chat":
        return {"role": "assistant", "content": out["choices"][0]["message"]["content"]}
    if dialect == "responses":
        return out["output"][0]
    return {"role": "assistant", "content": out["content"]}


ROUTES = {"chat": "chat/completions", "responses": "responses", "messages": "messages"}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--out", default="benchmarks/results/proxy_dialects.json")
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.scripted import ScriptedEngine
    from agentrl.llm.tiny import tiny_model_dir
    from agentrl.proxy import RecordingProxy

    tok = AutoTokenizer.from_pretrained(tiny_model_dir(Path(tempfile.gettempdir()) / "agentrl-test-cache"))
    renderer = ChatRenderer(tok)
    engine = ScriptedEngine([tok.encode("go north and take the lamp", add_special_tokens=False) + [tok.eos_token_id]],
                            eos_token_id=tok.eos_token_id)
    lat: dict[str, list[float]] = {d: [] for d in ROUTES}
    with RecordingProxy(engine, renderer) as proxy, httpx.Client(timeout=30) as http:
        proxy.start()
        for r in range(args.rounds + 2):  # 2 warm-up rounds
            for dialect, route in ROUTES.items():
                h = proxy.create_episode()
                gen, reply = _bodies(dialect, args.turns), None
                body = next(gen)
                while True:
                    t0 = time.perf_counter()
                    out = http.post(f"{h.base_url}/{route}", json=body).json()
                    if r >= 2:
                        lat[dialect].append(time.perf_counter() - t0)
                    reply = _reply(dialect, out)
                    try:
                        body = gen.send(reply)
                    except StopIteration:
                        break
                ep = proxy.close_episode(h.episode_id)
                assert ep.turns[-1].info["prompt_source"] == "tito" and ep.turns[-1].info["forks"] == 0, dialect
    res = {d: {"p50_ms": round(float(np.percentile(x, 50)) * 1e3, 3), "p99_ms": round(float(np.percentile(x, 99)) * 1e3, 3),
               "calls": len(x)} for d, x in lat.items()}
    for d in ("responses", "messages"):
        res[d]["p50_vs_chat_ms"] = round(res[d]["p50_ms"] - res["chat"]["p50_ms"], 3)
    res["config"] = {"rounds": args.rounds, "turns": args.turns}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
