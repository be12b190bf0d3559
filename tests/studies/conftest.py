"""Puts the repository root first on ``sys.path`` so ``import studies`` finds the repo's studies/
package (not tests/studies/, a folder of the same name) however pytest was started."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
