"""sandboxes — isolated code execution (``Sandbox`` protocol, ``ExecResult``); imports
nothing of agentrl."""
