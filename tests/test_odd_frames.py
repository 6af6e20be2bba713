"""Odd frames against the real daemon socket: JSON that Python would choke on or echo as invalid
JSON (deep nesting, a 5,000-digit integer, NaN, Infinity, 1e400), a duplicate key, and numbers no
argument allows are answered ``bad_json`` / ``bad_args`` with the request's id, the connection
serves on, and the daemon log holds no traceback. A worker's line with the same things is a
``malformed`` event, and its reader goes on."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from roost.daemon.processes.process import Worker
from roost.drivers.base import Adapter, Launch
from roost.drivers.pi import PiAdapter

ODD_JSON = [
    (b'{"id": 11, "op": "status", "args": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested too deep"),
    (b'{"id": 12, "op": "logs", "args": {"job": "x", "after": ' + b"7" * 5000 + b"}}",
     "an integer of 5000 digits is out of range"),
    (b'{"id": 13, "op": "status", "args": {}, "x": NaN}', "NaN is not a JSON number"),
    (b'{"id": 14, "op": "status", "args": {"x": Infinity}}', "Infinity is not a JSON number"),
    (b'{"id": 15, "op": "status", "args": {}, "n": 1e400}', "the number 1e400 is out of range"),
    (b'{"id": 16, "op": "status", "op": "shutdown", "args": {}}', "the key 'op' appears twice"),
    (b'{"id": 17, "op": "status", "args": {"a": {"b": 1, "b": 2}}}', "the key 'b' appears twice"),
]


@pytest.mark.parametrize("frame, words", ODD_JSON, ids=[w for _, w in ODD_JSON])
def test_odd_json_is_bad_json_with_its_id_and_no_traceback(daemon, frame, words):
    client = daemon.raw()
    client.send(frame + b"\n")
    req_id = int(frame.split(b":", 1)[1].split(b",", 1)[0])
    reply = client.reply(req_id)
    assert reply["error"]["code"] == "bad_json" and words in reply["error"]["message"], reply
    assert client.call("status", req_id=99)["pid"] == daemon.proc.pid, "the connection serves on"
    client.close()
    assert "Traceback" not in daemon.log_text()


def test_an_id_that_is_not_json_is_never_echoed(daemon):
    client = daemon.raw()
    for bad in (b"NaN", b"Infinity", b"1e400", b"9" * 5000):
        client.send(b'{"id": ' + bad + b', "op": "status"}\n')
        reply = client.frame()  # RawClient parses with json.loads: an invalid echo would not be read back
        assert reply["id"] is None and reply["error"]["code"] == "bad_json"
    client.close()
    assert "Traceback" not in daemon.log_text()


@pytest.mark.parametrize("op, args, words", [
    ("logs", {"job": "x", "after": 10 ** 400}, None),  # 401 digits: bad_json before it is a number at all
    ("logs", {"job": "x", "after": 2 ** 63}, "'after' must be between 0 and 9223372036854775807"),
    ("logs", {"job": "x", "before": -1}, "'before' must be between 0"),
    ("logs", {"job": "x", "limit": 10 ** 19}, "'limit' must be between 1 and 2000"),
    ("diff", {"job": "x", "offset": 2 ** 63}, "'offset' must be between 0"),
    ("unsubscribe", {"sub": -(2 ** 63)}, "'sub' must be between 0"),
    ("hello", {"version": 2 ** 64}, None),
])
def test_numbers_outside_an_arguments_range_are_bad_args(daemon, op, args, words):
    client = daemon.raw()
    job = daemon.spawn("say hi")
    client.send({"id": 21, "op": op, "args": {**args, **({"job": job} if "job" in args else {})}})
    reply = client.reply(21)
    if words is None:
        assert reply["error"]["code"] in ("bad_json", "bad_args"), reply
    else:
        assert reply["error"]["code"] == "bad_args" and words in reply["error"]["message"], reply
    client.close()
    assert "Traceback" not in daemon.log_text()


# -- the worker side --------------------------------------------------------------------------------------------
WRITER = r"""
import sys
w = sys.stdout.buffer.write
w(b'{"type": "text", "text": ' + b"[" * 200000 + b"]" * 200000 + b"}\n")
w(b'{"type": "usage", "usage": {"input": ' + b"9" * 5000 + b"}}\n")
w(b'{"type": "usage", "usage": {"input": NaN}}\n')
w(b'{"type": "usage", "usage": {"input": 1e400}}\n')
w(b'{"type": "text", "type": "note", "text": "twice"}\n')
w(b'{"type": "text", "text": "after the odd ones"}\n')
"""


@pytest.mark.parametrize("adapter", [Adapter, lambda: PiAdapter("fake", "m", retry=False)],
                         ids=["protocol", "pi"])
async def test_a_worker_line_with_odd_json_is_malformed_and_reading_goes_on(tmp_path, adapter):
    events: list[dict[str, Any]] = []

    async def on_exit(code: int, stderr: list[str]) -> None:
        pass

    launch = Launch(argv=[sys.executable, "-c", WRITER], env={}, cwd=str(tmp_path))
    worker = Worker("j1", launch, adapter(), tmp_path / "j1.log", events.extend, on_exit)  # each step: a list
    await worker.start()
    await asyncio.wait_for(worker.exited.wait(), 30)
    worker.release()  # what the engine does once the exit is committed: the shim ends
    assert [e["type"] for e in events[:5]] == ["malformed"] * 5, events
    if isinstance(worker.adapter, PiAdapter):
        return  # pi's own events are not roost's: the last line means nothing to it
    assert events[5:] == [{"type": "text", "text": "after the odd ones"}]
