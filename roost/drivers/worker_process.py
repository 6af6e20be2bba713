"""The worker side of the worker protocol, for roost's own Python workers (the built-in agent and
the command driver's worker): commands in on stdin, responses and events out on stdout, one turn
at a time, and every turn that starts ends exactly once — also when it is aborted before it began.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from roost.worker_protocol import response, turn_end

LINE_LIMIT = 1 << 20


class WorkerProcess:
    """Subclasses give ``run_turn``; they may take steers and abort their own way."""

    #: What a refused steer says; None means steers are taken (``steer`` is overridden).
    steer_refusal: str | None = "this worker takes messages between turns only"

    def __init__(self, session_path: Path) -> None:
        self.session_path = session_path
        self.turn: asyncio.Task[None] | None = None
        self.turn_run: Any = None
        self.turn_ended = True

    @property
    def busy(self) -> bool:
        return self.turn is not None and not self.turn.done()

    def emit(self, event: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    def end_turn(self, run: Any, outcome: str, **fields: Any) -> None:
        self.turn_ended = True
        self.emit(turn_end(run, outcome, **fields))

    async def run_turn(self, run: Any, message: str) -> None:
        """Carry out one prompt, emitting events, and end it with ``end_turn``."""
        raise NotImplementedError

    def steer(self, message: str) -> None:
        """Take a note into the turn in flight (only called when ``steer_refusal`` is None)."""

    async def abort(self) -> None:
        """Cut the turn in flight short; idempotent. A turn cancelled before it began still ends."""
        if self.turn is not None and not self.turn.done():
            self.turn.cancel()
            try:
                await self.turn
            except asyncio.CancelledError:
                pass
        if not self.turn_ended:
            self.end_turn(self.turn_run, "aborted")

    async def handle(self, frame: dict[str, Any]) -> None:
        kind, req_id = frame.get("type"), frame.get("id")
        if kind == "get_state":
            self.emit(response(req_id, kind, True, {"session": str(self.session_path), "busy": self.busy}))
        elif kind == "prompt":
            if self.busy:
                self.emit(response(req_id, kind, False, error="a turn is running"))
                return
            self.emit(response(req_id, kind, True))
            self.turn_run, self.turn_ended = frame.get("run"), False
            self.turn = asyncio.create_task(self.run_turn(frame.get("run"), str(frame.get("message", ""))))
        elif kind == "steer":
            if self.steer_refusal is not None or not self.busy:
                self.emit(response(req_id, kind, False, error=self.steer_refusal or "no turn is running"))
                return
            self.emit(response(req_id, kind, True))
            self.steer(str(frame.get("message", "")))
        elif kind == "abort":
            await self.abort()
            self.emit(response(req_id, kind, True))
        else:
            self.emit(response(req_id, str(kind), False, error=f"unknown command: {kind}"))

    def on_start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Set up process-level handlers before the first command (signals, say)."""

    def run(self) -> None:
        """Serve the daemon until it closes stdin (what a worker program's ``main`` calls)."""
        try:
            asyncio.run(self.main())
        except KeyboardInterrupt:
            pass

    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        self.on_start(loop)
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            line = await reader.readline()
            if not line:
                break  # the daemon went away: nobody is left to answer to
            try:
                frame = json.loads(line)
            except json.JSONDecodeError as exc:
                self.emit(response(None, "parse", False, error=f"Failed to parse command: {exc}"))
                continue
            await self.handle(frame)
        await self.abort()
