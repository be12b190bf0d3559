"""Every registered env resets and steps from 8 threads of a fresh process at once (one env per thread).

A harness's verifier replays run in threads of the trainer (``agentrl.rollout.harness``). TextWorld and
ALFWorld parse their games with TextWorld's module-global parser, which is not thread-safe: 10 of 16
verifier replays of the first held-out evaluation of examples/harness_textworld.yaml failed inside it
(IndexError, TypeError, FailedToken), as did 2–8 of 8 ALFWorld resets and steps here
(``agentrl_envs.textworld.engine_lock``). In a fresh process nothing
is parsed and cached yet, so each env id gets its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentrl.env import local_ids

_PROBE = """
import os
from concurrent.futures import ThreadPoolExecutor
from agentrl.env import MissingExtraError, make

def one(i):
    env = make(os.environ['PROBE_ENV_ID'])
    try:
        obs, info = env.reset(seed=i)
        for _ in range(3):  # steps too: TextWorld parses its text grammars lazily during a step
            acts = info.get("admissible_actions") or []
            if not acts:
                break
            obs, reward, terminated, truncated, info = env.step(acts[-1])
            if terminated or truncated:
                break
        return "ok"
    except MissingExtraError:
        return "missing-extra"
    except Exception as exc:
        return type(exc).__name__
    finally:
        env.close()

with ThreadPoolExecutor(8) as pool:
    got = " ".join(pool.map(one, range(8)))
with open(os.environ["PROBE_RESULT"], "w") as f:  # not stdout / argv: ALFWorld's planner uses both
    f.write(got)
"""


@pytest.mark.parametrize("env_id", local_ids())  # Remote-v0 needs a server: tests/envs_remote
def test_every_env_loads_from_many_threads_of_a_fresh_process(env_id, tmp_path):
    result = tmp_path / "result.txt"
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PROBE_ENV_ID": env_id, "PROBE_RESULT": str(result)})
    assert out.returncode == 0, out.stderr[-2000:]
    got = result.read_text().split()
    if got == ["missing-extra"] * 8:
        pytest.skip(f"{env_id}: optional extra not installed")
    assert got == ["ok"] * 8, f"{env_id}: {' '.join(got)}"
