"""The demo tree: what `roost demo` spawns so a new user sees every state on the built-in agent."""

from __future__ import annotations

import os
from typing import Any, Protocol

#: (title, script) for each root job; children and grandchildren come from the scripts' spawns.
DEMO_JOBS: tuple[tuple[str, str], ...] = (
    ("refactor the parser",
     "say planning the refactor\n"
     "spawn say reading the grammar; work 20; report done grammar read\n"
     "spawn say writing tests; spawn work 25;; report done fixtures ready; work 30; report done tests written\n"
     "spawn work 4; report done quick check passed\n"
     "wait-children\n"
     "say all subagents finished\n"
     "report done refactor planned"),
    ("review the release notes",
     "say looking for someone to ask\n"
     "spawn work 2; ask which version should the notes cover?\n"
     "spawn work 3; fail the changelog file is missing\n"
     "work 40\n"
     "say review finished"),
    ("migrate the database",
     "spawn work 2; report blocked need credentials for the staging database\n"
     "spawn work 60; report done migration dry run finished\n"
     "ask should I run the migration on production?"),
    ("say hello", "say hello from the built-in agent\nsay send me a script: say, work, spawn, ask, report…"),
)


class _Caller(Protocol):
    def call(self, op: str, **args: Any) -> Any: ...


def spawn_demo(client: _Caller, cwd: str | None = None) -> list[str]:
    """Spawn the demo roots; returns their ids, first spawned first."""
    ids = []
    for title, script in DEMO_JOBS:
        row = client.call("spawn", prompt=script, title=title, cwd=cwd or os.getcwd())
        ids.append(row["id"])
    return ids
