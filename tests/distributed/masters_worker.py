"""Worker of tests/distributed/test_master_weights_dp.py, run under ``torchrun --nproc-per-node 2``.

Reads ``setup.pt`` (the initial float32 weights of the tiny model, the batch, the update config)
and, through FSDP2 + ``train_on_batch(dp=ctx)`` with AdamW (``make_optimizer``):

1. ``moved``: bf16 full fine-tuning at lr 1e-5 for ``steps`` optimizer steps, plain (bf16
   parameters) and with float32 masters (``keep_master_weights`` → ``MixedPrecisionPolicy``):
   the gathered parameters, the weights the engines get (``iter_inference_weights``) and the
   dtypes of parameters, gradients and a projection's output;
2. ``resume``: masters, k steps, a DCP checkpoint (``save_checkpoint``), m more steps; then a
   fresh model and optimizer loaded from the checkpoint (``load_checkpoint``) and the same m
   steps: both runs' full parameters and optimizer states.

Rank 0 writes ``out.pt``. Usage: ``masters_worker.py DIR``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "update")]

from torch.distributed.checkpoint.state_dict import (  # noqa: E402
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
)

from agentrl.distributed import DistContext, iter_inference_weights, leave_rank, parallelize  # noqa: E402
from agentrl.update import make_optimizer, prepare_policy, train_on_batch  # noqa: E402
from agentrl.update.checkpoint import TrainState, load_checkpoint, save_checkpoint  # noqa: E402
from agentrl.update.master_weights import keep_master_weights  # noqa: E402
from update_fixtures import tiny_model  # noqa: E402

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _model(init: dict, cfg, masters: bool, ctx: DistContext):
    model = tiny_model(0).to(torch.bfloat16)
    model.load_state_dict(init)
    model = prepare_policy(model, cfg)
    if masters:
        keep_master_weights(model, torch.bfloat16, autocast=False)
    model = parallelize(model, ctx)
    return model, make_optimizer(model, cfg.lr)


def _steps(model, opt, batch, cfg, ctx, first: int, n: int) -> None:
    for i in range(first, first + n):
        train_on_batch(model, opt, batch, cfg, seed=i, dp=ctx)


def _full(model, opt) -> tuple[dict, dict]:
    params = get_model_state_dict(model, options=FULL)
    optim = get_optimizer_state_dict(model, opt, options=FULL)
    return params, optim


def main() -> None:
    torch.set_num_threads(1)
    folder = Path(sys.argv[1])
    setup = torch.load(folder / "setup.pt", weights_only=False)
    init, batch, cfg = setup["init"], setup["batch"], setup["cfg"]
    ctx = DistContext.from_env("cpu")
    out: dict = {"world_size": ctx.world_size}
    for name in ("plain", "masters"):
        model, opt = _model(init, cfg, name == "masters", ctx)
        seen: list = []
        model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, a, o: seen.append(o.dtype))
        _steps(model, opt, batch, cfg, ctx, 0, setup["steps"])
        grads = {p.grad.dtype for p in model.parameters() if p.grad is not None}
        streamed = {n: t.detach().cpu().clone() for n, t in iter_inference_weights(model)}
        out[name] = {"params": get_model_state_dict(model, options=FULL), "streamed": streamed,
                     "param_dtypes": {p.dtype for p in model.parameters()}, "grad_dtypes": grads,
                     "compute_dtypes": set(seen)}
    k, m = setup["k"], setup["m"]
    model, opt = _model(init, cfg, True, ctx)
    _steps(model, opt, batch, cfg, ctx, 0, k)
    save_checkpoint(folder / "run", model, opt, TrainState(iteration=1, optimizer_steps=k), dp=ctx)
    _steps(model, opt, batch, cfg, ctx, k, m)
    out["uninterrupted"] = _full(model, opt)
    fresh, fresh_opt = _model(init, cfg, True, ctx)
    state = load_checkpoint(folder / "run" / "checkpoints" / "iter_000001", fresh, fresh_opt, dp=ctx)
    _steps(fresh, fresh_opt, batch, cfg, ctx, k, m)
    out["resumed"] = _full(fresh, fresh_opt)
    out["state"] = state
    if ctx.is_main:
        torch.save(out, folder / "out.pt")
    ctx.close(wait=True)
    leave_rank(0)  # finalisation aborts a finished rank now and then (agentrl.distributed.context.leave_rank)


if __name__ == "__main__":
    main()
