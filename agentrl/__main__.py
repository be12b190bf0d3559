"""``python -m agentrl`` runs the CLI."""

import sys

from agentrl.cli import main

sys.exit(main())
