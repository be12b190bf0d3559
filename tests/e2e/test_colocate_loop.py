"""Issue 36 item 2: a colocated engine sleeps through every update and wakes for the weight
sync and the next rollout — checked through the real training loop (``agentrl.train.train``)
with a stand-in engine that records its calls: an HF engine over its own copy of the model
(weights pushed after every update, like vLLM) plus ``sleep`` / ``wake_up``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_train_loop import _cfg  # noqa: E402

from agentrl.train.colocate import can_sleep, engine_asleep  # noqa: E402


class RecordingEngine:
    """Delegates to an ``HFEngine`` copy; logs ``generate``, ``sleep``, ``wake_up`` and
    ``update_weights`` in ``log`` (shared with the optimizer-step spy) and refuses to sample
    or load weights while the part they need is asleep (as vLLM would fail)."""

    def __init__(self, inner, log: list) -> None:
        self.__dict__.update(inner=inner, log=log, asleep=set())

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        setattr(self.inner, name, value)  # policy_version, model, ...

    def generate(self, *args, **kwargs):
        assert not self.asleep, f"generate while {sorted(self.asleep)} asleep"
        if not self.log or self.log[-1] != "generate":
            self.log.append("generate")
        return self.inner.generate(*args, **kwargs)

    def sleep(self) -> None:
        self.log.append("sleep")
        self.asleep.update({"weights", "kv_cache"})

    def wake_up(self, tags=None) -> None:
        self.log.append("wake_up:" + ("all" if tags is None else ",".join(tags)))
        self.asleep.difference_update(self.asleep if tags is None else tags)

    def update_weights(self, source, version: int) -> None:
        assert "weights" not in self.asleep, "weights pushed into a sleeping engine"
        self.log.append(f"update_weights:{version}")
        self.inner.update_weights(source, version)
        self.asleep.discard("kv_cache")  # what VLLMEngine.update_weights does after the push


def _stand_in(monkeypatch, log: list) -> list:
    """Make ``train`` load the policy with a ``RecordingEngine`` and log every optimizer step;
    returns the list the loaded ``Policy`` is appended to."""
    import agentrl.train.loop as loop
    import agentrl.train.plan as plan
    from agentrl.distributed import engine_copy
    from agentrl.llm.policy import Policy, load_policy

    policies = []

    def load(cfg):
        p = load_policy(cfg)
        policies.append(Policy(engine=RecordingEngine(engine_copy(p), log), renderer=p.renderer, model=p.model,
                               pad_id=p.pad_id, shares_weights=False))
        return policies[-1]

    real_update = plan.update

    def step(model, *args, **kwargs):
        log.append("step:" + ("asleep" if policies[-1].engine.asleep else "awake"))
        return real_update(model, *args, **kwargs)

    monkeypatch.setattr(loop, "load_policy", load)
    monkeypatch.setattr(plan, "update", step)
    return policies


def test_the_loop_sleeps_the_engine_through_each_update(tiny_dir, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from agentrl.train import train
    from agentrl.update.lora import inference_state_dict

    log: list[str] = []
    policies = _stand_in(monkeypatch, log)
    result = train(_cfg(tiny_dir, tmp_path, iterations=2, run__eval_every=0), resume=False)
    assert result.state.iteration == 2 and result.state.optimizer_steps >= 1
    assert log[0] == "update_weights:0"  # start_run: the engine gets the trainer's weights
    phases = "|".join(log[1:]).split("generate|")[1:]  # after each iteration's rollout
    assert len(phases) == 2
    steps = []
    for it, phase in enumerate(phases, start=1):  # an iteration without contrast takes no step
        calls = phase.rstrip("|").split("|")
        steps += [c for c in calls if c.startswith("step:")]
        assert calls == ["sleep", *[c for c in calls if c.startswith("step:")], "wake_up:weights",
                         f"update_weights:{it}"], calls
    assert len(steps) == result.state.optimizer_steps and set(steps) == {"step:asleep"}  # all asleep
    engine = policies[-1].engine
    assert not engine.asleep and engine.policy_version == 2
    pushed = engine.inner.model.state_dict()
    trained = inference_state_dict(policies[-1].model)
    initial = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).state_dict()
    assert any(not torch.equal(pushed[n], initial[n]) for n in initial)  # the updates changed the weights
    for name, value in trained.items():  # the last push carried the trained weights
        assert torch.equal(pushed[name], value), name


class _Fake:
    def __init__(self) -> None:
        self.calls = []

    def sleep(self) -> None:
        self.calls.append("sleep")

    def wake_up(self, tags=None) -> None:
        self.calls.append(("wake_up", tags))


def test_engine_asleep_wakes_everything_when_the_update_fails():
    fake = _Fake()
    with engine_asleep(fake):
        assert fake.calls == ["sleep"]
    assert fake.calls == ["sleep", ("wake_up", ("weights",))]  # the KV cache waits for the weight push
    fake.calls.clear()
    with pytest.raises(RuntimeError, match="out of memory"):
        with engine_asleep(fake):
            raise RuntimeError("out of memory")
    assert fake.calls == ["sleep", ("wake_up", None)]  # fully awake: it can still evaluate or close
    plain = object()  # an engine without sleep/wake_up (HFEngine): untouched
    assert not can_sleep(plain) and can_sleep(fake)
    with engine_asleep(plain):
        pass


def test_rtpo_rounds_sleep_the_engine_too(tiny_dir, tmp_path, monkeypatch):
    """``rollout.sampler: rtpo`` updates between its reverse-turn rounds (``rtpo_iteration``):
    each round's update runs asleep, then the weights wake and are pushed."""
    from agentrl.train import train

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trees"))
    import trees_fake_envs as fake

    fake.register_dense()  # shaping reward: sibling continuations differ, so rounds take steps
    log: list[str] = []
    _stand_in(monkeypatch, log)
    cfg = _cfg(tiny_dir, tmp_path, name="rtpo", iterations=1, run__eval_every=0, rollout__sampler="rtpo",
               rollout__group_size=2, algorithm__estimator="rtpo", env__id=fake.DENSE_ID)
    result = train(cfg, resume=False)
    syncs = [c for c in log if c.startswith("update_weights:")]
    assert syncs == [f"update_weights:{v}" for v in range(result.state.policy_version + 1)] and len(syncs) >= 2
    rounds = [k for k, c in enumerate(log) if c.startswith("update_weights:")][1:]  # after start_run's push
    for k in rounds:
        j = max(i for i in range(k) if log[i] == "sleep")
        assert log[j + 1:k - 1] == ["step:asleep"] * (k - 1 - j - 1) and log[k - 1] == "wake_up:weights", log[j:k]
        assert "generate" not in log[j:k]
    assert log.count("step:asleep") == result.state.optimizer_steps >= 1
