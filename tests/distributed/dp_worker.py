"""Worker of tests/distributed/test_dp_update.py, run under ``torchrun --nproc-per-node N``.

Reads ``cases.pt`` (the initial weights, the batch, and per case the update config, LoRA
on/off and whether normalisation is per-rank), trains each case for ``cfg.epochs`` ×
minibatches optimizer steps (``update_fixtures.sgd`` with momentum, as the 1-process run)
through FSDP2 + ``update(dp=ctx)``, and rank 0 writes the stats and the gathered full
parameters to ``out.pt``, with the inference weights each rank streamed from its shards
after the steps (``iter_inference_weights``) and π_old of the rollout correction recomputed
both sharded by rows (``dp=ctx``) and replicated. Usage: ``dp_worker.py DIR``.
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
from agentrl.distributed import DistContext, iter_inference_weights, leave_rank, parallelize  # noqa: E402
from agentrl.update import apply_rollout_correction, prepare_policy, train_on_batch  # noqa: E402
from agentrl.update.lora import apply_lora  # noqa: E402
from update_fixtures import sgd, tiny_model  # noqa: E402


def _per_rank_scale(mine, norm_tokens, dp):
    """The bug the test must catch: each rank normalises by its own counts."""
    return step.LossScale.of(mine.loss_mask, mine.turn_ids, norm_tokens)


def run_case(case: dict, init: dict, batch, ctx: DistContext) -> dict:
    model = tiny_model(0)
    if case["lora"] is not None:
        model = apply_lora(model, case["lora"])
    model.load_state_dict(init[case["name"]])
    model = parallelize(prepare_policy(model, case["cfg"]), ctx)
    opt = sgd(model, case["cfg"].lr, momentum=0.9)
    real = step._global_scale
    if case["per_rank"]:
        step._global_scale = _per_rank_scale
    replicated, _ = apply_rollout_correction(model, batch, case["cfg"])  # every rank recomputes every row
    batch, _ = apply_rollout_correction(model, batch, case["cfg"], dp=ctx)  # each rank its rows, all-gathered
    try:
        stats = train_on_batch(model, opt, batch, case["cfg"], seed=5, dp=ctx)
    finally:
        step._global_scale = real
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    streamed = {n: t.detach().cpu().clone() for n, t in iter_inference_weights(model)}  # every rank, in order
    return {"stats": [s.__dict__ for s in stats], "params": full, "streamed": streamed,
            "old_sharded": batch.old_logprobs, "old_replicated": replicated.old_logprobs}


def main() -> None:
    torch.set_num_threads(1)
    folder = Path(sys.argv[1])
    spec = torch.load(folder / "cases.pt", weights_only=False)
    token_head.CHUNK_BYTES = spec["chunk_bytes"]  # the LM head in chunks of a few tokens, as in the 1-process run
    ctx = DistContext.from_env("cpu")
    out = {c["name"]: run_case(c, spec["init"], c.get("batch", spec["batch"]), ctx) for c in spec["cases"]}  # a case may bring its own
    streams = ctx.gather_object({k: v["streamed"] for k, v in out.items()})  # every rank's own stream
    if ctx.is_main:
        out["streams_per_rank"] = streams
        torch.save(out, folder / "out.pt")
    ctx.close(wait=True)
    leave_rank(0)  # finalisation aborts a finished rank now and then (agentrl.distributed.context.leave_rank)


if __name__ == "__main__":
    main()
