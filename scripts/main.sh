#!/usr/bin/env bash
# The main job: set-up (idempotent), then GiGPO training of SmolLM2-135M-Instruct on real
# TextWorld games (CPU-sized budget; the 16-game held-out panel is evaluated before and after
# training and the summary prints before -> after with the paired interval of the difference),
# then the replay of what it stored: the episode list and every turn of one episode (tokens,
# reward, validity, advantage). The eval episodes are the store's runs main/eval-before and
# main/eval-iter4.
# Extra arguments are config overrides, e.g. `bash scripts/main.sh run.iterations=2`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# The example trains in bf16, ~3x faster than fp32 on CPUs with AVX-512-BF16/AMX but ~13x slower
# on CPUs without them (measured on an AVX2-only AMD EPYC): there, without a GPU, train in fp32.
dtype=()
if ! grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null && ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "[main] this CPU has no AVX-512-BF16/AMX: training in float32 (policy.dtype=float32)"
  dtype=(policy.dtype=float32)
fi
.venv/bin/agentrl train examples/gigpo_textworld.yaml run.name=main "${dtype[@]}" "$@" --no-resume
.venv/bin/agentrl replay runs/main/store.sqlite --run main --limit 12
.venv/bin/agentrl replay runs/main/store.sqlite --run main --episode 0
