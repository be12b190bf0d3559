"""``inference_state_dict`` of a LoRA model: the merged weights W + scale·B·A computed out of
place — the training model stays bit-identical however often it is called (the in-place
merge + unmerge drifted bf16 weights by ~1 ulp per call, issue 19), the values equal peft's
own merge, and the merged plain model computes the peft model's logits."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from agentrl.config import LoraSpec  # noqa: E402
from agentrl.update.lora import apply_lora, inference_state_dict  # noqa: E402

from update_fixtures import tiny_model  # noqa: E402


def _lora(dtype: torch.dtype):
    model = apply_lora(tiny_model().to(dtype), LoraSpec(rank=4, alpha=8.0, target_modules=("q_proj", "v_proj")))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)  # a trained adapter (B = 0 at init would merge to W)
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_merge_is_out_of_place_and_equals_peft_merge(dtype):
    model = _lora(dtype)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    states = [inference_state_dict(model) for _ in range(3)]
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k  # the training weights never move
    model.merge_adapter()
    reference = {k.replace(".base_layer.", "."): v.clone() for k, v in model.get_base_model().state_dict().items()
                 if "lora_" not in k}
    model.unmerge_adapter()
    for state in states:
        assert state.keys() == reference.keys()
        for k in reference:
            assert torch.equal(state[k], reference[k]), k
    assert not torch.equal(states[0]["model.layers.0.self_attn.q_proj.weight"],
                           before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"])


def test_merged_plain_model_computes_the_lora_logits():
    model = _lora(torch.float32).eval()
    plain = tiny_model().eval()
    plain.load_state_dict(inference_state_dict(model))
    ids = torch.tensor([[5, 17, 99, 3, 250, 41, 7]])
    with torch.no_grad():
        assert torch.allclose(plain(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
