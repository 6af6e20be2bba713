"""The clients against a daemon that misbehaves: one that never answers, one that answers with an
error carrying no id, one that drops a slow reader. A small in-test server plays that daemon, so
each case happens for sure, not by timing."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from roost.client import LAGGED, AsyncClient, Client, ClientError
from roost.protocol import LAGGED as LAGGED_FRAME, encode

Handler = Callable[[dict[str, Any], asyncio.StreamWriter], Awaitable[None]]


async def serve(path: Path, handler: Handler) -> asyncio.Server:
    """A server that answers hello and hands every other request to ``handler``."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            frame = json.loads(line)
            if frame["op"] == "hello":
                writer.write(encode({"id": frame["id"], "ok": True, "result": {"version": 2}}))
            else:
                await handler(frame, writer)
            await writer.drain()

    return await asyncio.start_unix_server(connection, str(path))


async def never(frame: dict[str, Any], writer: asyncio.StreamWriter) -> None:
    return None


async def id_less_error(frame: dict[str, Any], writer: asyncio.StreamWriter) -> None:
    writer.write(encode({"id": None, "ok": False, "error": {"code": "too_large", "message": "frame too big"}}))


async def snapshot_then_lag(frame: dict[str, Any], writer: asyncio.StreamWriter) -> None:
    if frame["op"] == "subscribe":
        writer.write(encode({"event": "rows", "req": frame["id"], "sub": 7, "rows": [{"id": "a"}, {"id": "b"}]}))
        writer.write(encode({"event": "row", "sub": 3, "row": {"id": "other"}}))
        writer.write(encode({"id": frame["id"], "ok": True, "result": {"sub": 7, "count": 2, "more": 0}}))
        writer.write(encode({"event": "row", "sub": 7, "row": {"id": "a", "state": "idle"}}))
        writer.write(encode(LAGGED_FRAME))
        writer.close()


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "s.sock"


async def test_a_call_that_gets_no_answer_times_out(sock):
    server = await serve(sock, never)
    client = await AsyncClient.connect(sock)
    started = time.monotonic()
    with pytest.raises(ClientError) as info:
        await client.call("status", timeout=0.3)
    assert info.value.code == "timeout" and "status" in info.value.message
    assert time.monotonic() - started < 5
    await client.close()
    server.close()


async def test_an_error_without_an_id_answers_the_oldest_waiting_request(sock):
    answered = asyncio.Event()

    async def one_error_for_two(frame: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        if frame["op"] == "status":
            await id_less_error(frame, writer)
            answered.set()
        else:
            await answered.wait()
            writer.write(encode({"id": frame["id"], "ok": True, "result": "second"}))

    server = await serve(sock, one_error_for_two)
    client = await AsyncClient.connect(sock)
    first = asyncio.create_task(client.call("status", timeout=5))
    await asyncio.sleep(0)  # the first request is sent before the second
    second = asyncio.create_task(client.call("show", job="x", timeout=5))
    with pytest.raises(ClientError) as info:
        await first
    assert info.value.code == "too_large"
    assert await second == "second"
    await client.close()
    server.close()


async def test_subscribe_collects_its_snapshot_and_lagged_ends_the_stream_with_a_reason(sock):
    server = await serve(sock, snapshot_then_lag)
    client = await AsyncClient.connect(sock)
    result, rows = await client.subscribe("agent_view")
    assert result["sub"] == 7 and [r["id"] for r in rows] == ["a", "b"]
    events = [event async for event in client.events()]
    assert [e["row"]["id"] for e in events] == ["other", "a"]
    assert client.end_code == LAGGED and "fell behind" in (client.end_reason or "")
    with pytest.raises(ClientError) as info:
        await client.call("status", timeout=1)
    assert info.value.code == LAGGED
    await client.close()
    server.close()


def in_thread(sock: Path, handler: Handler) -> Callable[[], None]:
    """Run the fake daemon on its own loop for the blocking client; returns a stop function."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def main() -> None:
        await serve(sock, handler)
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(main()), loop.run_forever()), daemon=True)
    thread.start()
    ready.wait(5)
    return lambda: loop.call_soon_threadsafe(loop.stop)


def test_the_blocking_client_times_out_and_takes_an_id_less_error_as_its_answer(sock, tmp_path):
    stop = in_thread(sock, never)
    try:
        client = Client.connect(sock)
        with pytest.raises(ClientError) as info:
            client.call("status", timeout=0.3)
        assert info.value.code == "timeout"
    finally:
        stop()
    other = tmp_path / "t.sock"
    stop = in_thread(other, id_less_error)
    try:
        with Client.connect(other) as client, pytest.raises(ClientError) as info:
            client.call("status", timeout=5)
        assert info.value.code == "too_large"
    finally:
        stop()


def test_the_blocking_client_keeps_events_that_arrive_during_a_call_and_raises_lagged(sock):
    stop = in_thread(sock, snapshot_then_lag)
    try:
        with Client.connect(sock) as client:
            result, rows = client.subscribe("agent_view")
            assert result["sub"] == 7 and [r["id"] for r in rows] == ["a", "b"]
            assert client.read_event(timeout=5)["row"]["id"] == "other"
            assert client.read_event(timeout=5)["row"]["state"] == "idle"
            with pytest.raises(ClientError) as info:
                client.read_event(timeout=5)
            assert info.value.code == LAGGED
    finally:
        stop()
