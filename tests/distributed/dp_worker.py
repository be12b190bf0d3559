"""Worker of tests/distributed/test_dp_update.py, run under ``torchrun --nproc-per-node N``.

Reads ``cases.pt`` (the initial weights, the batch, and per case the update config, LoRA
on/off and whether normalisation is per-rank), trains each case for ``cfg.epochs`` ×
minibatches optimizer steps through FSDP2 + ``update(dp=ctx)``, and rank 0 writes the
stats and the gathered full parameters to ``out.pt``. Usage: ``dp_worker.py DIR``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "update")]

from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict  # noqa: E402

import agentrl.update.step as step  # noqa: E402
import agentrl.update.token_head as token_head  # noqa: E402
from agentrl.distributed import DistContext, parallelize  # noqa: E402
from agentrl.update import apply_rollout_correction, make_optimizer, prepare_policy, train_on_batch  # noqa: E402
from agentrl.update.lora import apply_lora  # noqa: E402
from update_fixtures import tiny_model  # noqa: E402


def _per_rank_scale(mine, norm_tokens, dp):
    """The bug the test must catch: each rank normalises by its own counts."""
    return step.LossScale.of(mine.loss_mask, mine.turn_ids, norm_tokens)


def run_case(case: dict, init: dict, batch, ctx: DistContext) -> dict:
    model = tiny_model(0)
    if case["lora"] is not None:
        model = apply_lora(model, case["lora"])
    model.load_state_dict(init[case["name"]])
    model = parallelize(prepare_policy(model, case["cfg"]), ctx)
    opt = make_optimizer(model, case["cfg"].lr, case["cfg"].weight_decay)
    real = step._global_scale
    if case["per_rank"]:
        step._global_scale = _per_rank_scale
    batch, _ = apply_rollout_correction(model, batch, case["cfg"])  # every rank, same batch (FSDP2 forwards match)
    try:
        stats = train_on_batch(model, opt, batch, case["cfg"], seed=5, dp=ctx)
    finally:
        step._global_scale = real
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {"stats": [s.__dict__ for s in stats], "params": full}


def main() -> None:
    torch.set_num_threads(1)
    folder = Path(sys.argv[1])
    spec = torch.load(folder / "cases.pt", weights_only=False)
    token_head.CHUNK_BYTES = spec["chunk_bytes"]  # the LM head in chunks of a few tokens, as in the 1-process run
    ctx = DistContext.from_env("cpu")
    out = {c["name"]: run_case(c, spec["init"], spec["batch"], ctx) for c in spec["cases"]}
    if ctx.is_main:
        torch.save(out, folder / "out.pt")
    ctx.close()


if __name__ == "__main__":
    main()
