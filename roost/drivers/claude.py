"""The Claude Code driver: one long-lived ``claude -p`` per job, speaking stream-json both ways (its
adapter, and what it relies on of Claude Code, measured: ``drivers/claude_stream.py``)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Mapping

from roost.drivers.base import Adapter, Driver, Launch, LaunchContext, base_urls, existing_cwd, find_agent_program, inherited_env
from roost.drivers.claude_stream import ClaudeAdapter
from roost.drivers.mcp import MCP_NAME, mcp_config
from roost.drivers.usage import ClaudeSpend, budget_guard, claude_session_base
from roost.models import Job

INSTALL_HINT = "npm install -g @anthropic-ai/claude-code"


class ClaudeDriver(Driver):
    env_prefixes = ("ANTHROPIC_", "CLAUDE_", "AWS_BEARER_TOKEN_BEDROCK", "NODE_")
    kind = "claude"
    ready_timeout = 60.0
    caps_spend = True

    def __init__(self) -> None:
        self._options: Mapping[str, Any] = {}
        self._config_dir = ""
        self._remote = False

    def check(self, options: Mapping[str, Any]) -> None:
        find_agent_program("Claude Code", str(options.get("command", "claude")), options.get("env") or {},
                           INSTALL_HINT, "18")

    def launch(self, job: Job, ctx: LaunchContext) -> Launch:
        options = self._options = ctx.options
        extra_env: Mapping[str, str] = options.get("env") or {}
        program = find_agent_program("Claude Code", str(options.get("command", "claude")), extra_env,
                                     INSTALL_HINT, "18")
        cwd = existing_cwd(job, "Claude Code")
        configured = str(options.get("config_dir") or "")
        config_dir = ctx.state_dir / "claude-config" if not configured else None
        self._remote = ctx.remote  # its session files are there, not here
        if config_dir is not None:
            config_dir.mkdir(parents=True, exist_ok=True)
        argv = [program, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
                "--mcp-config", json.dumps(mcp_config()), "--allowedTools", f"mcp__{MCP_NAME}"]
        if options.get("model"):
            argv += ["--model", str(options["model"])]
        if options.get("permission_mode"):
            argv += ["--permission-mode", str(options["permission_mode"])]
        if options.get("allowed_tools"):
            argv += ["--allowedTools", *map(str, options["allowed_tools"])]
        if options.get("ask_permission", True):
            argv += ["--permission-prompt-tool", "stdio"]
        argv += [str(a) for a in options.get("args") or ()]
        argv += budget_guard(job.driver_opts.get("budget_usd"))
        session = job.session or str(uuid.uuid4())
        if job.session:
            argv += ["--resume", session]
        elif job.fork_of:  # a fork's first start: Claude Code copies the conversation into the new id
            argv += ["--resume", job.fork_of, "--fork-session", "--session-id", session]
        else:
            argv += ["--session-id", session]
        env = inherited_env({"CLAUDE_CONFIG_DIR": str(config_dir or configured), **extra_env, **ctx.roost_env(job)})
        self._config_dir = env["CLAUDE_CONFIG_DIR"]
        env.setdefault("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        # Each Bash command in the job's directory (a `cd` does not carry over, measured): the cwd its approval shows.
        env.setdefault("CLAUDE_BASH_MAINTAIN_PROJECT_WORKING_DIR", "1")
        return Launch(argv=argv, env=env, cwd=cwd, session=session, record=ctx.record(job),
                      writable=(self._config_dir,))

    def provider_urls(self, options: Mapping[str, Any]) -> list[str]:
        return base_urls(options, {"ANTHROPIC_BASE_URL": "https://api.anthropic.com"})

    def fork(self, source: Job, sessions_dir: Path, new_id: str) -> tuple[str | None, str | None]:
        """Claude Code forks a session itself (``--resume SRC --fork-session``) at the fork's first start."""
        return None, source.session

    def adapter(self, job: Job) -> Adapter:
        spend = ClaudeSpend(claude_session_base(None if self._remote else self._config_dir, job.session))
        return ClaudeAdapter(session=job.session, cwd=job.cwd, config_dir=self._config_dir, spend=spend)
