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
from roost.protocol import LAGGED as LAGGED_FRAME, PROTOCOL_VERSION, QUEUE_BYTES, encode
from roost.tui.daemon_link import BATCH_EVENTS, DaemonLink

Handler = Callable[[dict[str, Any], asyncio.StreamWriter], Awaitable[None]]


async def serve(path: Path, handler: Handler) -> asyncio.Server:
    """A server that answers hello and hands every other request to ``handler``."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            frame = json.loads(line)
            if frame["op"] == "hello":
                writer.write(encode({"id": frame["id"], "ok": True, "result": {"version": PROTOCOL_VERSION}}))
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


def flood_of_rows(count: int, size: int) -> Handler:
    """Answer subscribe, then push ``count`` row events of about ``size`` bytes each, at once."""

    async def handler(frame: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        if frame["op"] == "subscribe":
            writer.write(encode({"id": frame["id"], "ok": True, "result": {"sub": 1, "count": 0, "more": 0}}))
            try:
                for n in range(count):
                    writer.write(encode({"event": "row", "sub": 1, "row": {"id": f"j{n}", "last_text": "x" * size}}))
                    await writer.drain()
            except ConnectionError:
                pass  # the client let the connection go

    return handler


async def test_a_consumer_that_stops_taking_events_is_let_go_at_the_clients_bound(sock):
    server = await serve(sock, flood_of_rows(count=400, size=64 * 1024))  # 25 MB of pushes
    client = await AsyncClient.connect(sock)
    await client.subscribe("agent_view")
    while client.end_code is None:  # nobody takes the events: they wait, up to the bound
        await asyncio.sleep(0.001)
    assert client.end_code == LAGGED and "fell behind taking the daemon's events" in (client.end_reason or "")
    assert QUEUE_BYTES - 70 * 1024 < client._queued <= QUEUE_BYTES  # held: up to the bound, not past it
    taken = [event async for event in client.events()]  # what was held is still there, then the end
    assert 0 < len(taken) < 70 and client._queued == 0
    await client.close()
    server.close()


async def test_a_consumer_that_keeps_up_takes_a_flood_far_past_the_bound(sock):
    server = await serve(sock, flood_of_rows(count=400, size=64 * 1024))
    client = await AsyncClient.connect(sock)
    await client.subscribe("agent_view")
    seen = 0
    async for _ in client.events():
        seen += 1
        if seen == 400:
            break
    assert client.end_code is None and seen == 400
    await client.close()
    server.close()


async def test_the_apps_link_holds_a_bounded_batch_queue_and_leaves_the_rest_with_the_client() -> None:
    class Source:
        yielded = 0

        async def events(self):  # type: ignore[no-untyped-def]
            for n in range(10 * BATCH_EVENTS):
                Source.yielded += 1
                yield {"event": "row", "sub": 1, "row": {"id": f"j{n}"}}

    batches = DaemonLink(Source()).batches(window=0)  # type: ignore[arg-type]
    first = await batches.__anext__()  # the app takes one batch, then is busy
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(first) <= BATCH_EVENTS + 1
    assert Source.yielded <= len(first) + BATCH_EVENTS + 2  # the reader waits for the app
    rest = [event async for batch in batches for event in batch]
    assert len(first) + len(rest) == 10 * BATCH_EVENTS  # and nothing was lost
