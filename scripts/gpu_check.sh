#!/usr/bin/env bash
# GPU smoke check for a lent accelerator machine (torch + transformers only, no network, no
# vLLM, no model files): HF-engine generation and one update step in bf16 on a random
# SmolLM2-sized model built in memory; prints one JSON object (tokens/s, step time, checks)
# and writes it to $OUT/gpu_check.json when $OUT is set. Exit 0 when every check holds.
# Runs from the checkout without installing agentrl: it imports only torch and transformers
# (+ numpy and pyyaml, which transformers requires) — what the lent machine has.
# Budget: ~1-2 min on an H200 (model build ~10 s, generation 16×128 tokens, one step).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
cd "$ROOT"
"$PY" - <<'PYEOF'
import importlib.util, sys
need = ["torch", "transformers", "numpy", "yaml"]
missing = [m for m in need if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: missing Python packages {missing}; install them (pip install ...) and rerun")
PYEOF
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "gpu_check: nvidia-smi not found"
args=("$@")
[ -n "${OUT:-}" ] && args+=(--out "$OUT/gpu_check.json")
exec "$PY" scripts/gpu_check.py "${args[@]}"
