"""``agentrl train`` with a weight sync that loads nothing on purpose (the engines' bug the sync
probe exists to catch): ``HFEngine.update_weights`` consumes the streamed weights — every rank
must, they are all-gathered as they come — and moves the version, but copies nothing. Run by
tests/distributed/test_rank_rollouts.py under torchrun: ``noop_sync_main.py CFG [overrides]``.
"""

from __future__ import annotations

import sys

from agentrl.llm.hf import HFEngine


def _load_nothing(self, source, version: int) -> None:
    for _ in source.items() if hasattr(source, "items") else source:
        pass
    self.policy_version = int(version)


if __name__ == "__main__":
    HFEngine.update_weights = _load_nothing
    from agentrl.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
