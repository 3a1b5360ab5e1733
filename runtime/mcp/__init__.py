"""MCP (Model Context Protocol) tools for replies: the servers a user configured (config.py), which of
them the user approved to start (approvals.py) and a manager that runs them off the caller's thread
with the official `mcp` SDK (client.py). No Qt here: the app, the CLI and the tests share it."""
