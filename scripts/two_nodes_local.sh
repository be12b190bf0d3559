#!/usr/bin/env bash
# Two Ray "nodes" on this machine, then a 2-iteration run with the trainer on the head node and
# 2 engine actors on the other (docs/scaling.md, "Two nodes"). The ray start / agentrl train
# commands are those of two real machines, with this machine's IP for both and each node's own
# raylet ports; each node runs as `ray start --block` in the background and is stopped by its own
# PID at the end (never `ray stop`, which would stop every Ray on the machine).
# Usage: bash scripts/two_nodes_local.sh [MODEL_DIR] [key=value ...]   (default model: the tests' tiny one)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"; RAY="$ROOT/.venv/bin/ray"
MODEL="${1:-$("$PY" -c 'import pathlib, tempfile; from agentrl.llm.tiny import tiny_model_dir
print(tiny_model_dir(pathlib.Path(tempfile.gettempdir()) / "agentrl-test-cache"))')}"
shift || true
WORK="$(mktemp -d -t agentrl-2nodes.XXXXXX)"
IP="$("$PY" -c 'import ray; print(ray.util.get_node_ip_address())')"
HEAD_PORT="${AGENTRL_RAY_PORT:-6390}"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
# Ray >= 2.59 turns token authentication on for a `ray start --head` cluster: every node and the
# driver need RAY_AUTH_MODE=token and the same token (here a fresh one, for this cluster only)
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN="$("$PY" -c 'import secrets; print(secrets.token_hex(32))')"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
# node A (head): the trainer
"$RAY" start --head --block --node-ip-address "$IP" --port "$HEAD_PORT" --num-cpus 1 \
  --resources '{"trainer_node": 1}' --node-manager-port 6391 --object-manager-port 6392 \
  --include-dashboard false --temp-dir "$WORK/ray" >"$WORK/head.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do grep -q "Ray runtime started" "$WORK/head.log" && break; sleep 1; done
# node B: the engine actors
"$RAY" start --block --address "$IP:$HEAD_PORT" --node-ip-address "$IP" --num-cpus 1 \
  --resources '{"engine_node": 2}' --node-manager-port 6393 --object-manager-port 6394 \
  >"$WORK/engine.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do grep -q "Ray runtime started" "$WORK/engine.log" && break; sleep 1; done
# the run, started on node A
cd "$WORK"
RAY_ADDRESS="$IP:$HEAD_PORT" "$ROOT/.venv/bin/agentrl" train "$ROOT/examples/gigpo_toy.yaml" \
  policy.model="$MODEL" policy.dtype=float32 policy.num_threads=1 policy.lora=null log.console=false \
  run.out_dir="$WORK/runs" run.iterations=2 run.eval_every=0 run.save_every=0 \
  rollout.groups_per_iteration=2 rollout.num_workers=1 \
  rollout.backend=ray rollout.engines=2 \
  'rollout.placement.engine_resources={engine_node: 1}' rollout.placement.engine_cpus=0.5 \
  rollout.placement.separate_nodes=true 'rollout.placement.broadcast_ports=[29600,29609]' "$@"
tail -n 2 "$WORK/runs/gigpo_toy/metrics.jsonl"
echo "run folder and Ray logs: $WORK"
