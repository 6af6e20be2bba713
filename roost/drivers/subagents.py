"""Provider-native subagents (Claude Code's ``Task`` calls): not roost jobs, only what the parent's
stream says about them, as worker-protocol ``subagent`` events the daemon puts on the parent's timeline.

Claude Code announces each with a ``task_started`` frame (the id of the call that started it, its
description and prompt), streams its messages with that id as ``parent_tool_use_id``, and says how
it ended with ``task_notification`` (``completed``, ``failed`` or ``stopped``); a subagent in the
foreground also ends when its call returns.

A Bash command run in the background (``run_in_background``) is announced the same way, as a task of
``task_type`` ``local_bash``: it is no subagent but a command running in the background of the job,
and it is said as one, in ``background`` events (a note on the job's timeline when it starts and
how it ended), never as a row of the subagent panel. It runs in Claude Code's process tree: a stop
of the job (its abort, also between turns while one runs) or the worker's end ends it."""

from __future__ import annotations

from typing import Any, Mapping

from roost.drivers.base import SNAPSHOT_ENTRIES, newest

#: How much of a subagent's prompt, progress or result one event carries.
TEXT_MAX = 4000
#: How much of a background command a note quotes.
COMMAND_MAX = 2000
#: How a background command's end is said, by the status Claude Code gives it.
_COMMAND_ENDS = {"completed": "ended", "failed": "failed", "stopped": "was stopped", "killed": "was stopped"}


def background(ident: str, running: bool, message: str) -> dict[str, Any]:
    """A ``background`` event: the command ``ident`` (the call that started it) runs, or has ended."""
    return {"type": "background", "id": ident, "running": running, "message": message}


def subagent(ident: str, title: str, state: str, text: str) -> dict[str, Any]:
    """A ``subagent`` event: the subagent ``ident`` (the call that started it) is now ``state``."""
    return {"type": "subagent", "id": ident, "title": title, "state": state, "text": text[-TEXT_MAX:]}


class SubagentTracker:
    """The subagents a turn started and not yet finished, by the id of the call that started each."""

    def __init__(self) -> None:
        self.titles: dict[str, str] = {}
        self.background: set[str] = set()
        #: The commands running in the background of the job (not subagents), by the call that started each.
        self.commands: dict[str, str] = {}

    def snapshot(self) -> dict[str, Any]:
        """The newest subagents running, for a daemon that re-adopts the worker (``Adapter.snapshot``)."""
        return {"titles": newest(self.titles), "background": sorted(self.background)[-SNAPSHOT_ENTRIES:],
                "commands": newest(self.commands)}

    def restore(self, state: Mapping[str, Any]) -> None:
        self.titles = {str(k): str(v) for k, v in (state.get("titles") or {}).items()}
        self.background = {str(k) for k in state.get("background") or ()}
        self.commands = {str(k): str(v) for k, v in (state.get("commands") or {}).items()}

    def start_command(self, ident: str, command: str) -> list[dict[str, Any]]:
        """A command the agent runs in the background of the job (Claude Code's ``local_bash`` task)."""
        self.commands[ident] = command[:COMMAND_MAX]
        return [background(ident, True, f"a command runs in the background of this job: {self.commands[ident]}")]

    def start(self, ident: str, call: Mapping[str, Any], background: bool) -> list[dict[str, Any]]:
        prompt = str(call.get("prompt") or "")
        title = str(call.get("description") or prompt.split("\n", 1)[0] or "subagent")[:200]
        self.titles[ident] = title
        if background:
            self.background.add(ident)
        return [subagent(ident, title, "working", prompt)]

    def progress(self, ident: str, text: str) -> list[dict[str, Any]]:
        """What a subagent said, when it said something and it is one this tracker knows."""
        if ident not in self.titles or not text.strip():
            return []
        return [subagent(ident, self.titles[ident], "working", text.strip())]

    def returned(self, ident: str, result: str, error: bool) -> list[dict[str, Any]]:
        """The call that started ``ident`` returned: the end of a subagent in the foreground only."""
        return [] if ident in self.background or ident in self.commands else self.finish(ident, result, error)

    def end_command(self, ident: str, status: str, summary: str) -> list[dict[str, Any]]:
        """A background command ended (``status``: Claude Code's word); [] when it is none of the job's."""
        command = self.commands.pop(ident, None)
        if command is None:
            return []
        said = f"the command in the background of this job {_COMMAND_ENDS.get(status, status or 'ended')}: {command}"
        return [background(ident, False, said + (f" ({summary[:TEXT_MAX]})" if summary else ""))]

    def finish(self, ident: str, result: str, error: bool, stopped: bool = False) -> list[dict[str, Any]]:
        """``ident`` ended: done, failed, or stopped (by a stop of roost's, or by its parent)."""
        self.background.discard(ident)
        title = self.titles.pop(ident, None)
        if title is None:
            return []
        if stopped:
            return [subagent(ident, title, "stopped", f"stopped before it finished: {result}")]
        return [subagent(ident, title, "failed" if error else "done", result)]
