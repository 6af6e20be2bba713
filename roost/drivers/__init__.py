"""Agent runtimes: each driver turns one kind of agent into the worker protocol."""

from __future__ import annotations

from roost.drivers.base import Driver, DriverError


def driver_for(kind: str) -> Driver:
    """The driver for a profile's kind (imported on demand so the CLI stays light)."""
    if kind == "builtin":
        from roost.drivers.builtin import BuiltinDriver

        return BuiltinDriver()
    if kind == "pi":
        from roost.drivers.pi import PiDriver

        return PiDriver()
    if kind == "claude":
        from roost.drivers.claude import ClaudeDriver

        return ClaudeDriver()
    if kind == "codex":
        from roost.drivers.codex import CodexDriver

        return CodexDriver()
    if kind == "command":
        from roost.drivers.command import CommandDriver

        return CommandDriver()
    raise DriverError(f"unknown driver kind {kind!r} (known: builtin, pi, command, claude, codex)")
