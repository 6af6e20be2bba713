"""roost's tools as an MCP server (roost/programs/mcp_server.py), as the agents that take MCP servers
(Claude Code, Codex) are told to start it."""

from __future__ import annotations

import sys
from typing import Any

#: The MCP server name roost's tools go by; Claude Code calls them ``mcp__roost__<tool>``.
MCP_NAME = "roost"


def mcp_config() -> dict[str, Any]:
    """The MCP config that gives an agent roost's tools (shared by the Claude Code and Codex drivers). It
    names no job and holds no token: it is on Claude Code's command line, which any process can read
    (/proc/PID/cmdline). The server takes the job from the environment: Claude Code passes its own
    on, where the daemon put ROOST_SOCKET, ROOST_JOB_ID and ROOST_TOKEN; Codex is given them (codex.py)."""
    return {"mcpServers": {MCP_NAME: {"type": "stdio", "command": sys.executable,
                                      "args": ["-m", "roost.programs.mcp_server"]}}}
