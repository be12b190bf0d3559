#!/usr/bin/env bash
# GPU check for a lent accelerator machine (torch + CUDA, transformers, peft; no network, no
# vLLM, no model files): random-weight Qwen2.5-1.5B (its published config, built in memory,
# bf16) through agentrl's own code paths. Sections (scripts/gpu_check.py's doc says more):
#   device_paths  policy.device placement end to end (tiny model)
#   rollout       HF-engine tokens/s at batch 16 and 64 × 128 new tokens; seeded repeat from a
#                 cold prefix cache (+ informational warm-cache repeat)
#   rollout_peak  peak CUDA memory of 128 prompts × 4096 tokens + 256 new, per-row seeds:
#                 peak vs model bytes + KV cache bytes (from the config), tokens/s
#   update_lora / update_full  FSDP2 (agentrl.distributed, 1 rank) update tokens/s, peak
#                 memory, and the weight push to a second engine copy
#   dp2           2 ranks (NCCL) when torch sees >= 2 GPUs: FSDP2 steps, each rank's streamed
#                 weight sync and probe gap; else {"skipped": "1 GPU"} (not counted in ok)
# Prints one JSON object and writes it to $OUT/gpu_check.json when $OUT is set; exit 0 when
# every check that ran holds. Extra arguments go to scripts/gpu_check.py (e.g. --model smollm2,
# --only rollout, --dp2 cpu). CPU smoke run of the same paths:
#   scripts/gpu_check.sh --device cpu --model tiny
# Runs from the checkout without installing agentrl. Pre-flight: every package agentrl's
# code paths import from the checkout (module-level imports of agentrl.llm.hf / .policy,
# agentrl.update, agentrl.distributed, agentrl.train.sync and what they pull in); the missing
# ones are named in one line with the pip command (exit 2), then torch, its CUDA build and
# transformers are printed before anything runs.
# Budget: ≤ 8 min on an H200 (estimate ~3 min: builds ~10 s each, rollout ~20 s,
# rollout_peak 2 passes of ~30 s, 4 optimizer steps per update mode; dp2 bounded at 300 s
# and skipped on 1 GPU).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
cd "$ROOT"
"$PY" - <<'PYEOF'
import importlib.util, sys
# import name -> pip name. agentrl.train (sync, critic) imports the loop, so the env, store
# and proxy layers come with it: gymnasium, pyarrow, orjson, rich; transformers needs
# tokenizers, safetensors and jinja2 (chat templates), peft needs accelerate.
need = {"torch": "torch", "transformers": "transformers", "peft": "peft", "numpy": "numpy", "yaml": "pyyaml",
        "gymnasium": "gymnasium", "rich": "rich", "pyarrow": "pyarrow", "orjson": "orjson",
        "tokenizers": "tokenizers", "safetensors": "safetensors", "jinja2": "jinja2", "accelerate": "accelerate"}
missing = [pip for mod, pip in need.items() if importlib.util.find_spec(mod) is None]
if missing:
    print(f"gpu_check: missing Python packages: {' '.join(missing)}; install them: "
          f"{sys.executable} -m pip install {' '.join(missing)}", file=sys.stderr)
    sys.exit(2)
import torch, transformers
cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(f"gpu_check: torch {torch.__version__} (CUDA build {torch.version.cuda}, {cuda} GPU(s) visible), "
      f"transformers {transformers.__version__}, python {sys.version.split()[0]}", flush=True)
PYEOF
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "gpu_check: nvidia-smi not found"
args=("$@")
[ -n "${OUT:-}" ] && args+=(--out "$OUT/gpu_check.json")
exec "$PY" scripts/gpu_check.py "${args[@]}"
