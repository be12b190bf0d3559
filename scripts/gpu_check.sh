#!/usr/bin/env bash
# GPU check for a lent accelerator machine (torch + CUDA, transformers, peft; no network, no
# vLLM, no model files): random-weight Qwen2.5-1.5B (its published config, built in memory,
# bf16) through agentrl's own code paths — policy.device placement end to end, HF-engine
# rollout tokens/s at batch 16 and 64, FSDP2 (agentrl.distributed, 1 rank) update tokens/s and peak
# CUDA memory for LoRA and full fine-tuning, and the weight push to a second engine copy.
# Prints one JSON object and writes it to $OUT/gpu_check.json when $OUT is set; exit 0 when
# every check holds. Extra arguments go to scripts/gpu_check.py (e.g. --model smollm2,
# --only rollout). CPU smoke run of the same paths: scripts/gpu_check.sh --device cpu --model tiny.
# Runs from the checkout without installing agentrl: it needs torch, transformers, peft,
# numpy and pyyaml — what the lent machine has.
# Budget: a few minutes on an H200 (≤ 8 min): builds ~10 s each, generation 16/64 × 128
# tokens, 4 optimizer steps per mode.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
cd "$ROOT"
"$PY" - <<'PYEOF'
import importlib.util, sys
need = ["torch", "transformers", "peft", "numpy", "yaml"]
missing = [m for m in need if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: missing Python packages {missing}; install them (pip install ...) and rerun")
PYEOF
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "gpu_check: nvidia-smi not found"
args=("$@")
[ -n "${OUT:-}" ] && args+=(--out "$OUT/gpu_check.json")
exec "$PY" scripts/gpu_check.py "${args[@]}"
