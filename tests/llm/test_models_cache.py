"""Packaged-model cache: names, paths, checksums (no conversion here; that is the slow tier)."""

from __future__ import annotations

import pytest

from agentrl.llm import models


def test_lookup_by_name_and_alias_and_did_you_mean():
    assert models.lookup("smollm2") is models.lookup("smollm2-135m-instruct")
    with pytest.raises(KeyError, match="smollm2"):
        models.lookup("smolm2")


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path))
    assert models.model_dir("smollm2") == tmp_path / "models" / "smollm2-135m-instruct"
    assert not models.is_prepared("smollm2")
    with pytest.raises(FileNotFoundError, match="agentrl models prepare smollm2"):
        models.resolve_model("smollm2-135m-instruct")


def test_resolve_path_and_checksum_roundtrip(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    assert models.resolve_model(str(tmp_path)) == tmp_path
    sums = models.write_checksum(tmp_path)
    assert set(sums) == {"config.json", "model.safetensors"} and len(sums["config.json"]) == 64
    models.verify_checksum(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"weightz")
    with pytest.raises(ValueError, match="corrupt"):
        models.verify_checksum(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        models.resolve_model(str(tmp_path / "empty"))


@pytest.mark.slow
def test_prepared_smollm2_verifies_and_has_expected_config(smollm2_dir):
    import json

    models.verify_checksum(smollm2_dir)
    cfg = json.loads((smollm2_dir / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]) == (30, 576, 49152)
    assert cfg["dtype"] == "bfloat16"
    assert models.resolve_model("smollm2-135m-instruct") == smollm2_dir
