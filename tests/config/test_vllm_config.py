"""``policy.vllm`` (issue 36 item 2): defaults, range checks with one-line errors, and
``update.rollout_correction: auto`` resolved at load time (``tis`` where the sampler is not the
trained model itself, else ``none``; explicit values kept)."""

from __future__ import annotations

import pytest

from agentrl.config import ConfigError, VLLMSpec, config_from_dict, dump_config, load_config, to_dict

BASE = {"env": {"id": "agentrl/Toy-v0"}}


def _cfg(*overrides: str):
    return config_from_dict(BASE, list(overrides))


def test_defaults_are_null_until_the_engine_is_built() -> None:
    spec = _cfg().policy.vllm
    assert spec == VLLMSpec()
    assert (spec.max_model_len, spec.gpu_memory_utilization, spec.enforce_eager, spec.max_num_seqs,
            spec.enable_sleep_mode) == (None, None, None, None, None)
    assert spec.enable_prefix_caching is True and spec.weight_bucket_mb == 512.0
    got = _cfg("policy.vllm.max_model_len=4096", "policy.vllm.gpu_memory_utilization=0.5",
               "policy.vllm.enforce_eager=false", "policy.vllm.max_num_seqs=64", "policy.vllm.weight_bucket_mb=1",
               "policy.device=cuda", "policy.vllm.enable_sleep_mode=true").policy.vllm
    assert got == VLLMSpec(4096, 0.5, False, True, 64, True, 1.0)
    assert isinstance(got.weight_bucket_mb, float)


@pytest.mark.parametrize("override, match", [
    ("policy.vllm.max_model_len=8", r"policy\.vllm\.max_model_len must be >= 16 tokens or null"),
    ("policy.vllm.gpu_memory_utilization=0", r"policy\.vllm\.gpu_memory_utilization must be in \(0, 1\]"),
    ("policy.vllm.gpu_memory_utilization=1.5", r"policy\.vllm\.gpu_memory_utilization must be in \(0, 1\]"),
    ("policy.vllm.max_num_seqs=0", r"policy\.vllm\.max_num_seqs must be >= 1 or null"),
    ("policy.vllm.weight_bucket_mb=0", r"policy\.vllm\.weight_bucket_mb must be > 0"),
    ("policy.vllm.enforce_eager=maybe", r"policy\.vllm\.enforce_eager: expected bool"),
    ("policy.vllm.max_model_len=4k", r"policy\.vllm\.max_model_len: expected int"),
    ("policy.vllm.sleep_mode=true", r"unknown config key 'policy\.vllm\.sleep_mode'; did you mean "
                                    r"'policy\.vllm\.enable_sleep_mode'\?"),
])
def test_bad_values_name_the_key_and_the_fix(override, match) -> None:
    with pytest.raises(ConfigError, match=match):
        _cfg(override)


def test_sleep_mode_on_cpu_is_refused_at_parse_time() -> None:
    with pytest.raises(ConfigError, match=r"enable_sleep_mode=true needs CUDA .*policy\.device: cpu"):
        _cfg("policy.device=cpu", "policy.vllm.enable_sleep_mode=true")
    assert _cfg("policy.device=cpu", "policy.vllm.enable_sleep_mode=false").policy.vllm.enable_sleep_mode is False
    assert _cfg("policy.vllm.enable_sleep_mode=true").policy.vllm.enable_sleep_mode is True  # auto: checked at load


@pytest.mark.parametrize("overrides, expected", [
    ((), "none"),  # in-process fp32 HF: the sampler is the trained model
    (("policy.engine=vllm",), "tis"),
    (("policy.dtype=bfloat16",), "tis"),  # KV-cache sampling vs the update's full forward in bf16
    (("rollout.engines=1",), "tis"),  # engine-worker copies
    (("policy.engine=vllm", "update.rollout_correction=none"), "none"),  # explicit values are kept
    (("update.rollout_correction=icepop",), "icepop"),
    (("policy.engine=vllm", "update.rollout_correction=mis"), "mis"),
])
def test_auto_rollout_correction_is_resolved_at_load(overrides, expected) -> None:
    assert _cfg(*overrides).update.rollout_correction == expected


def test_the_dumped_config_records_the_values_in_effect_and_loads_back(tmp_path) -> None:
    cfg = _cfg("policy.engine=vllm", "policy.vllm.max_model_len=3072")
    path = dump_config(cfg, tmp_path / "config.yaml")
    raw = to_dict(cfg)
    assert raw["update"]["rollout_correction"] == "tis" and raw["policy"]["vllm"]["max_model_len"] == 3072
    assert load_config(path) == cfg
