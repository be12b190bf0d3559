#!/usr/bin/env bash
# The test command: set-up (idempotent) then the whole test suite, slow tests included.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"` for the fast tier.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/lint-imports
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
