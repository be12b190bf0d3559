"""Env-hub tests need the ``hubs`` extra (openenv-core, fastapi, uvicorn, httpx)."""

import os

import pytest

pytest.importorskip("openenv.core", reason="needs the hubs extra: pip install 'agentrl[hubs]'")
os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
