"""``policy.device``: the config form (torch-free), ``resolve_device`` (CUDA faked with
monkeypatch, so the cuda / cuda:N logic is tested on a CPU-only machine), and that the policy,
the HF engine and the critic are placed on the resolved device (the ``meta`` device stands in
for a GPU: a model there proves the placement call happened) and train on CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from agentrl.config import ConfigError, PolicyConfig, config_from_dict

ROOT = Path(__file__).resolve().parents[2]
ENV = {"id": "agentrl/Toy-v0"}


def _fake_cuda(monkeypatch, available: bool, count: int = 0, current: int = 0) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)


# ------------------------------------------------------------------ config (string form)
@pytest.mark.parametrize("spec", ["auto", "cpu", "cuda", "cuda:0", "cuda:1", "cuda:12"])
def test_config_accepts_device_forms(spec):
    cfg = config_from_dict({"env": ENV, "policy": {"device": spec}})
    assert cfg.policy.device == spec
    assert config_from_dict({"env": ENV}, [f"policy.device={spec}"]).policy.device == spec


def test_config_device_defaults_to_auto():
    assert PolicyConfig().device == "auto"


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "cuda:", "CUDA", "cuda:-1", "cuda:0:1", "mps", "", " cpu"])
def test_config_rejects_other_devices(spec):
    with pytest.raises(ConfigError, match=r"policy\.device=.*auto, cpu, cuda or cuda:N"):
        config_from_dict({"env": ENV, "policy": {"device": spec}})


def test_config_parse_stays_torch_free():
    code = ("import sys; from agentrl.config import config_from_dict; "
            "config_from_dict({'env': {'id': 'x'}, 'policy': {'device': 'cuda:3'}}); "
            "assert 'torch' not in sys.modules, 'config parsing imported torch'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


# ------------------------------------------------------------------ resolve_device
def test_auto_is_cpu_without_cuda(monkeypatch):
    from agentrl.llm.device import resolve_device

    if not torch.cuda.is_available():  # the real answer on this machine, unpatched
        assert resolve_device("auto") == torch.device("cpu")
    _fake_cuda(monkeypatch, available=False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


def test_auto_and_cuda_pick_the_current_cuda_device(monkeypatch):
    from agentrl.llm.device import resolve_device

    _fake_cuda(monkeypatch, available=True, count=4, current=2)
    assert resolve_device("auto") == torch.device("cuda", 2)
    assert resolve_device("cuda") == torch.device("cuda", 2)


def test_cuda_without_a_device_names_the_key_and_the_fix(monkeypatch):
    from agentrl.llm.device import resolve_device

    if not torch.cuda.is_available():  # unpatched: this machine really has no GPU
        with pytest.raises(ConfigError, match="policy.device=cuda but no CUDA device is visible"):
            resolve_device("cuda")
    _fake_cuda(monkeypatch, available=False)
    for spec in ("cuda", "cuda:0", torch.device("cuda", 1)):
        with pytest.raises(ConfigError, match=r"no CUDA device is visible.*set policy.device: cpu or auto"):
            resolve_device(spec)


def test_cuda_index_bound(monkeypatch):
    from agentrl.llm.device import resolve_device

    _fake_cuda(monkeypatch, available=True, count=2)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match=r"policy.device=cuda:2 but only 2 CUDA device\(s\) are visible"):
        resolve_device("cuda:2")
    _fake_cuda(monkeypatch, available=True, count=1)
    with pytest.raises(ConfigError, match="cuda:0..cuda:0"):
        resolve_device("cuda:1")


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "meta", 3])
def test_resolve_rejects_garbage(spec):
    from agentrl.llm.device import resolve_device

    with pytest.raises(ConfigError, match="policy.device"):
        resolve_device(spec)


# ------------------------------------------------------------------ placement
def _meta_device(monkeypatch) -> list:
    """Make ``resolve_device`` answer ``meta`` (a stand-in for a GPU) and record its specs."""
    import agentrl.llm.device as dev

    seen: list = []

    def fake(spec):
        seen.append(spec)
        return torch.device("meta")

    monkeypatch.setattr(dev, "resolve_device", fake)
    return seen


def test_load_policy_places_model_on_resolved_device(monkeypatch, tiny_dir):
    from agentrl.llm.policy import load_policy

    seen = _meta_device(monkeypatch)
    policy = load_policy(PolicyConfig(model=str(tiny_dir), device="cuda:1", dtype="bfloat16"))
    assert seen[0] == "cuda:1"
    params = list(policy.model.parameters())
    assert {p.device.type for p in params} == {"meta"} and {p.dtype for p in params} == {torch.bfloat16}
    assert policy.engine.model is policy.model


def test_hf_engine_from_pretrained_device(monkeypatch, tiny_dir):
    from agentrl.llm.hf import HFEngine

    assert {p.device.type for p in HFEngine.from_pretrained(tiny_dir, device="cpu").model.parameters()} == {"cpu"}
    _meta_device(monkeypatch)
    assert {p.device.type for p in HFEngine.from_pretrained(tiny_dir, device="cuda").model.parameters()} == {"meta"}


def test_missing_cuda_fails_before_loading_weights(monkeypatch, tiny_dir):
    import agentrl.llm.models as models
    from agentrl.llm.hf import HFEngine
    from agentrl.llm.policy import load_policy

    _fake_cuda(monkeypatch, available=False)

    def no_load(name):
        raise AssertionError("the model was looked up before the device was checked")

    monkeypatch.setattr(models, "resolve_model", no_load)
    with pytest.raises(ConfigError, match="policy.device=cuda"):
        load_policy(PolicyConfig(model=str(tiny_dir), device="cuda"))
    with pytest.raises(ConfigError, match="policy.device=cuda:0"):
        HFEngine.from_pretrained(tiny_dir, device="cuda:0")


def test_critic_follows_policy_device(monkeypatch, tiny_dir):
    from agentrl.train.critic import make_critic

    cfg = config_from_dict({"env": ENV, "policy": {"model": str(tiny_dir), "device": "cpu"}})
    assert {p.device.type for p in make_critic(cfg).model.parameters()} == {"cpu"}
    seen = _meta_device(monkeypatch)
    cuda_cfg = config_from_dict({"env": ENV, "policy": {"model": str(tiny_dir), "device": "cuda:0"}})
    critic = make_critic(cuda_cfg)
    assert seen == ["cuda:0"]
    assert {p.device.type for p in critic.model.parameters()} == {"meta"}  # backbone and value head


def test_cpu_policy_trains_one_update(tiny_dir):
    from agentrl.config import UpdateConfig
    from agentrl.llm.base import SamplingParams
    from agentrl.llm.policy import load_policy
    from agentrl.update import batch_logprobs, build_batch, make_optimizer, update

    torch.set_num_threads(1)
    policy = load_policy(PolicyConfig(model=str(tiny_dir), device="cpu"))
    assert {p.device.type for p in policy.model.parameters()} == {"cpu"}
    prompts = [np.arange(5, 15), np.arange(30, 42)]
    outs = policy.engine.generate(prompts, SamplingParams(max_tokens=6, seed=0), return_hidden=True)
    for o in outs:  # every array the engine returns is CPU numpy
        assert isinstance(o.token_ids, np.ndarray) and isinstance(o.logprobs, np.ndarray)
        assert isinstance(o.hidden, np.ndarray) and o.hidden.dtype == np.float32
    assert isinstance(policy.engine.score(prompts[0], outs[0].token_ids.tolist()), np.ndarray)
    batch = build_batch(prompts, [o.token_ids for o in outs], [o.logprobs for o in outs],
                        np.array([1.0, -1.0]), pad_id=policy.pad_id)
    before = batch_logprobs(policy.model, batch)
    stats = update(policy.model, make_optimizer(policy.model, lr=1e-3), batch, UpdateConfig(micro_batch=1))
    assert stats.tokens == batch.num_tokens and np.isfinite(stats.loss)
    assert not torch.allclose(before, batch_logprobs(policy.model, batch))
