"""``agentrl proxy serve`` records into a turn store that ``agentrl replay`` shows (info included)."""

from __future__ import annotations

import argparse
import json
import socket
import threading

import httpx
import openai
import pytest

from agentrl.cli import main
from agentrl.cli.proxy import serve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_proxy_serve_records_into_store_and_replay_shows_info(tiny_dir, tmp_path, capsys):
    store = tmp_path / "proxy.sqlite"
    port = _free_port()
    args = argparse.Namespace(policy=str(tiny_dir), store=str(store), host="127.0.0.1", port=port, run="harness-run",
                              mode="tito", admin_token="tok", max_tokens=8, max_batch=4)
    ready, stop = threading.Event(), threading.Event()
    th = threading.Thread(target=serve, args=(args,), kwargs={"ready": ready, "stop": stop})
    th.start()
    try:
        assert ready.wait(120)
        root, auth = f"http://127.0.0.1:{port}", {"Authorization": "Bearer tok"}
        made = httpx.post(f"{root}/admin/episodes", json={"env_id": "agentrl/Toy-v0", "seed": 4}, headers=auth).json()
        client = openai.OpenAI(base_url=made["base_url"], api_key=made["api_key"], max_retries=0)
        messages = [{"role": "system", "content": "Play."}, {"role": "user", "content": "You are in room 1 of 3."}]
        out = client.chat.completions.create(model="p", messages=messages, seed=1)
        messages += [out.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Nothing happens."}]
        client.chat.completions.create(model="p", messages=messages, seed=2)
        assert httpx.post(f"{root}/admin/episodes/{made['episode_id']}/reward", json={"reward": 1.0},
                          headers=auth).status_code == 200
        closed = httpx.post(f"{root}/admin/episodes/{made['episode_id']}/close", json={}, headers=auth).json()
        assert closed["turns"] == 2 and closed["return"] == 1.0
        httpx.post(f"{root}/admin/episodes", json={}, headers=auth)  # left open: stored as aborted on shutdown
    finally:
        stop.set()
        th.join(60)
    capsys.readouterr()
    assert main(["replay", str(store), "--episode", "0"]) == 0
    text = capsys.readouterr().out
    assert "status ok" in text and "return 1" in text
    infos = [json.loads(line.split("info ", 1)[1]) for line in text.splitlines() if line.startswith("info ")]
    assert [i["segment"] for i in infos] == [0, 0] and [i["prompt_source"] for i in infos] == ["rendered", "tito"]
    assert main(["replay", str(store)]) == 0
    assert "aborted" in capsys.readouterr().out


class _Captured(Exception):
    pass


def test_serve_flags_reach_the_proxy_and_a_bad_schema_file_is_named(tiny_dir, tmp_path, monkeypatch):
    """``--tool-schemas FILE``, ``--force-tools`` and ``--resends`` are the proxy's constraints
    (``rollout.harness``'s in a training run); a file that is not {name: schema} stops before the
    model loads, naming itself and the fix."""
    import agentrl.proxy
    from agentrl.cli import build_parser

    seen = {}

    def fake_proxy(*a, **kw):
        seen.update(kw)
        raise _Captured

    schema = {"act": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
    (tmp_path / "tools.json").write_text(json.dumps(schema))
    monkeypatch.setattr(agentrl.proxy, "RecordingProxy", fake_proxy)
    base = ["proxy", "serve", "--policy", str(tiny_dir), "--store", str(tmp_path / "s.sqlite"), "--port", "0"]
    args = build_parser().parse_args(base + ["--tool-schemas", str(tmp_path / "tools.json"), "--force-tools",
                                            "--resends", "new_call", "--only-tools", "act", "look"])
    with pytest.raises(_Captured):
        serve(args)
    assert seen["tool_schemas"] == schema and seen["force_tools"] is True and seen["resends"] == "new_call"
    assert seen["only_tools"] == ["act", "look"]
    plain = build_parser().parse_args(base)
    with pytest.raises(_Captured):
        serve(plain)
    assert seen["tool_schemas"] is None and seen["force_tools"] is False and seen["resends"] == "retry"
    assert seen["only_tools"] is None
    (tmp_path / "bad.json").write_text(json.dumps(["act"]))
    for bad, match in ((tmp_path / "bad.json", "mapping each tool name to a JSON schema object"),
                       (tmp_path / "none.json", "cannot read it as JSON")):
        with pytest.raises(ValueError, match=match) as err:
            serve(build_parser().parse_args(base + ["--tool-schemas", str(bad)]))
        assert str(bad) in str(err.value)
