"""``agentrl proxy serve`` under SIGTERM and on a busy port (issue 20 item 3).

SIGTERM (what ``kill``, systemd and container runtimes send) stores the open episodes as
``aborted``, exactly as Ctrl-C does; a port already in use is one line on stderr, exit 2,
before the model is loaded.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from agentrl.cli import main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(root: str, proc: subprocess.Popen, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"proxy exited early: {proc.communicate()}")
        try:
            if httpx.get(f"{root}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("proxy did not come up")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stores_open_episodes_as_aborted(tiny_dir, tmp_path, capsys, sig):
    store, port = tmp_path / "proxy.sqlite", _free_port()
    root, auth = f"http://127.0.0.1:{port}", {"Authorization": "Bearer tok"}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "agentrl", "proxy", "serve", "--policy", str(tiny_dir),
                             "--store", str(store), "--port", str(port), "--admin-token", "tok", "--max-tokens", "4",
                             "--run", "sig"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tmp_path)
    try:
        _wait_healthy(root, proc)
        made = httpx.post(f"{root}/admin/episodes", json={"seed": 1}, headers=auth).json()
        r = httpx.post(f"{made['base_url']}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]},
                       timeout=60)
        assert r.status_code == 200
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    capsys.readouterr()
    assert main(["replay", str(store), "--episode", str(made["episode_id"])]) == 0
    text = capsys.readouterr().out
    assert "aborted" in text


def test_port_in_use_is_one_line_exit_2(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(["proxy", "serve", "--policy", "no-such-model", "--store", str(tmp_path / "s.sqlite"),
                     "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"127.0.0.1:{port}" in err and "in use" in err and "--port" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "s.sqlite").exists()


def test_sigterm_while_paused_with_a_call_waiting_stops_promptly(tiny_dir, tmp_path, capsys):
    """A call held at a paused gate keeps its episode busy; SIGTERM then waited for it in
    close_episode (600 s, then a TimeoutError traceback with no episode stored). The shutdown
    resumes the gate first, so every open episode is stored as aborted and it exits 0."""
    import threading

    store, port = tmp_path / "proxy.sqlite", _free_port()
    root, auth = f"http://127.0.0.1:{port}", {"Authorization": "Bearer tok"}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "agentrl", "proxy", "serve", "--policy", str(tiny_dir),
                             "--store", str(store), "--port", str(port), "--admin-token", "tok", "--max-tokens", "2",
                             "--run", "paused"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tmp_path)
    try:
        _wait_healthy(root, proc)
        made = [httpx.post(f"{root}/admin/episodes", json={"seed": k}, headers=auth).json() for k in range(2)]
        assert httpx.post(f"{root}/admin/pause", headers=auth, timeout=30).status_code == 200
        held = threading.Thread(target=lambda: httpx.post(
            f"{made[0]['base_url']}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]},
            timeout=90), daemon=True)
        held.start()
        time.sleep(1.0)  # the call waits at the paused gate, its episode busy
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and "Traceback" not in err, err
    capsys.readouterr()
    for m in made:
        assert main(["replay", str(store), "--episode", str(m["episode_id"])]) == 0
        assert "aborted" in capsys.readouterr().out
