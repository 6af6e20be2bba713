"""A simulated machine for bench/scale_sim.py: ``python bench/scale_node/node.py DIR``.

It listens on DIR/node.sock, where each worker relay (roost/programs/builtin_agent.py beside this
file) connects, and speaks the worker protocol for all of them: it answers the daemon's commands
and writes the scripted events the bench asks for on stdin, each text stamped with the time it
was written so a subscriber can tell how late its push came.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

FILLER = "reading src/parser.py and the tests around it; the nested blocks case fails on line 212"


class Node:
    """The workers connected to this node's socket, and the scripted events it writes to them."""

    def __init__(self) -> None:
        self.workers: list[asyncio.StreamWriter] = []
        self.events = 0
        self.bytes = 0
        self.kind = ""
        self.rate = 0.0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = json.loads(await reader.readline())
        self.workers.append(writer)
        try:
            while line := await reader.readline():
                self.answer(writer, json.loads(line), hello["session"])
        finally:
            self.workers.remove(writer)

    def answer(self, w: asyncio.StreamWriter, cmd: dict[str, Any], session: str) -> None:
        data = {"session": session, "busy": False} if cmd["type"] == "get_state" else None
        self.send(w, {"type": "response", "id": cmd.get("id"), "command": cmd["type"], "success": True,
                      **({"data": data} if data else {})}, count=False)
        if cmd["type"] == "prompt":  # the bench's first prompt: a turn that ends at once
            self.send(w, {"type": "turn_start", "run": cmd.get("run")}, count=False)
            self.send(w, {"type": "turn_end", "run": cmd.get("run"), "outcome": "ok"}, count=False)

    def send(self, w: asyncio.StreamWriter, event: dict[str, Any], count: bool = True) -> None:
        """Write one line; ``count``: it is (part of) a scripted unit, so its bytes are counted."""
        line = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        w.write(line)
        if count:
            self.bytes += len(line)

    def unit(self, w: asyncio.StreamWriter) -> None:
        """One scripted event of the current kind ("turn": a whole own turn, three lines)."""
        stamp = f"t={time.time():.6f} "
        self.events += 1
        if self.kind == "text":
            self.send(w, {"type": "text", "text": stamp + FILLER})
        elif self.kind == "tool":
            self.send(w, {"type": "tool", "name": "read", "args": {"path": "src/parser.py"},
                          "result": stamp + FILLER, "error": False})
        else:
            self.send(w, {"type": "turn_start", "own": True})
            self.send(w, {"type": "text", "text": stamp + FILLER})
            self.send(w, {"type": "turn_end", "run": None, "own": True, "outcome": "ok"})

    def own_turn(self, begin: bool) -> None:
        """Text and tool events run inside one own turn per worker, begun and ended around a phase."""
        for w in self.workers:
            if begin:
                self.send(w, {"type": "turn_start", "own": True}, count=False)
            else:
                self.send(w, {"type": "turn_end", "run": None, "own": True, "outcome": "ok"}, count=False)

    async def emit(self) -> None:
        """Write ``rate`` units a second round robin over the workers, in 10 ms steps."""
        owed, k, last = 0.0, 0, time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            owed += self.rate * (now - last)
            last = now
            while owed >= 1 and self.workers:
                self.unit(self.workers[k % len(self.workers)])
                k += 1
                owed -= 1

    async def control(self) -> None:
        """stdin: ``begin`` / ``end`` an own turn on every worker, ``KIND RATE`` begins a phase,
        ``idle`` ends it, ``stats`` prints the counts."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).decode().split():
            if line[0] == "stats":
                counts = {"events": self.events, "bytes": self.bytes, "workers": len(self.workers)}
                print(json.dumps(counts), flush=True)
            elif line[0] in ("begin", "end"):
                self.own_turn(begin=line[0] == "begin")
            elif line[0] == "idle":
                self.kind, self.rate = "", 0.0
            else:
                self.kind, self.rate = line[0], float(line[1])


async def run_node(where: Path) -> None:
    node = Node()
    server = await asyncio.start_unix_server(node.serve, path=str(where / "node.sock"), limit=1 << 20)
    emitter = asyncio.create_task(node.emit())
    await node.control()
    emitter.cancel()
    server.close()


if __name__ == "__main__":
    asyncio.run(run_node(Path(sys.argv[1])))
