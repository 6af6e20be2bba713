"""Frames at real scale: no reply is ever over MAX_FRAME, oversize requests are answered with
their id, junk and silence on one connection don't disturb the others, and the daemon closes
connections that never say hello and refuses connections past its cap."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from conftest import DaemonHarness

from roost.client import ClientError
from roost.daemon.server.handlers import HANDLERS
from roost.daemon.storage.store import Store
from roost.models import Job, State
from roost.protocol import (HELLO_TIMEOUT, MAX_CONNECTIONS, MAX_FRAME, OPS, PROTOCOL_VERSION, ErrorCode, ProtocolError,
                            parse_request, read_frame, request_id)


# -- in process ---------------------------------------------------------------------------------------
def test_every_operation_has_a_handler():
    assert set(HANDLERS) == set(OPS)


@pytest.mark.parametrize("args, message", [
    ({"states": "idle"}, "'states' must be a list of str"),
    ({"states": ["idle", 3]}, "'states' must be a list of str"),
    ({"limit": 0}, "'limit' must be between 1 and 1000, got 0"),
    ({"limit": 1001}, "'limit' must be between 1 and 1000"),
    ({"limit": True}, "'limit' must be int"),
    ({"cursor": 5}, "'cursor' must be str or null"),
])
def test_list_arguments_are_checked(args, message):
    with pytest.raises(ProtocolError) as info:
        parse_request({"id": 1, "op": "list", "args": args})
    assert info.value.code == ErrorCode.BAD_ARGS and message in info.value.message


def test_subscribe_names_what_it_watches():
    assert parse_request({"id": 1, "op": "subscribe", "args": {"what": "timeline", "job": "a", "after": 3}})[1] \
        == "subscribe"
    with pytest.raises(ProtocolError) as info:
        parse_request({"id": 1, "op": "subscribe", "args": {"what": "everything"}})
    assert "one of agent_view, subtree, timeline" in info.value.message
    with pytest.raises(ProtocolError):
        parse_request({"id": 1, "op": "watch"})  # gone: subscribe replaces it


def test_a_request_id_is_found_in_the_first_bytes_of_a_broken_frame():
    assert request_id(b'{"id": 42, "op": "send", "args": {"text": "aaaa') == 42
    assert request_id(b'{"op":"x","id":-3}') == -3
    assert request_id(b'{"op": "send", "args": {"text": "') is None
    assert request_id(b'{"text": "' + b"a" * 10000 + b'", "id": 7}') is None  # too far in to look


async def test_read_frame_discards_an_oversize_line_and_reports_its_id():
    reader = asyncio.StreamReader(limit=MAX_FRAME)
    reader.feed_data(b'{"id":9,"op":"send","args":{"text":"' + b"a" * (3 * MAX_FRAME) + b'"}}\n{"id":10}\n')
    reader.feed_eof()
    with pytest.raises(ProtocolError) as info:
        await read_frame(reader)
    assert info.value.code == ErrorCode.TOO_LARGE and info.value.req_id == 9
    assert await read_frame(reader) == b'{"id":10}\n'


# -- a real daemon ----------------------------------------------------------------------------------------
LONG_TEXT = "0123456789" * 400  # 4,000 characters: what a job's last_text may hold


def seed(harness: DaemonHarness, count: int) -> None:
    """Records written through the store's own API before the daemon starts: thousands of real
    spawns would take minutes, and the daemon reads nothing but the store at start."""
    harness.paths.ensure()
    store = Store(harness.paths.store)
    with store.transaction():
        for i in range(count):
            store.save_job(Job(id=f"s{i:05d}", title=f"seeded job {i}", driver="builtin", cwd=str(harness.home),
                               state=State.DONE, created_at=1_000_000.0 + i, updated_at=1_000_000.0 + i,
                               last_text=LONG_TEXT, driver_opts={"options": {"note": LONG_TEXT}}))
    store.close()


@pytest.fixture
def seeded(roost_home) -> DaemonHarness:
    harness = DaemonHarness(roost_home)
    seed(harness, 3000)
    harness.write_config("")
    harness.start()
    yield harness
    harness.stop()


@pytest.mark.parametrize("full", [False, True])
def test_listing_thousands_of_long_records_pages_under_the_frame_limit(seeded, full):
    client = seeded.raw()
    ids: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = client.call("list", limit=1000, cursor=cursor, full=full)
        ids += [row["id"] for row in page["rows"]]
        pages += 1
        cursor = page["next"]
        if cursor is None:
            break
    assert ids == [f"s{i:05d}" for i in range(3000)], "every row, once, in creation order"
    assert max(client.sizes) < MAX_FRAME
    assert pages > 3, "the byte budget, not the limit, ended the pages"
    client.close()


def test_slim_rows_carry_the_peek_line_and_show_the_whole_record(seeded):
    client = seeded.raw()
    row = client.call("list", limit=1)["rows"][0]
    assert len(row["last_text"]) <= 200 and "driver_opts" not in row
    assert client.call("show", job=row["id"])["last_text"] == LONG_TEXT
    client.close()


def test_an_oversize_request_gets_too_large_with_its_id_and_the_next_is_served(daemon):
    client = daemon.raw()
    client.send(b'{"id": 77, "op": "send", "args": {"job": "x", "text": "' + b"a" * (2 * MAX_FRAME) + b'"}}\n')
    reply = client.reply(77)
    assert reply["error"]["code"] == "too_large" and "limit" in reply["error"]["message"]
    assert client.call("status", req_id=78)["pid"] == daemon.proc.pid
    client.close()


def test_random_bytes_and_a_line_held_open_do_not_disturb_other_clients(daemon):
    noisy = daemon.raw(hello=False)
    noisy.send(os.urandom(256 * 1024))
    holding = daemon.raw()
    holding.send(b'{"id": 5, "op": "status", "args": {')  # and never finishes it
    job = daemon.spawn("say still serving")
    assert daemon.wait_state(job, "idle")["last_text"] == "still serving"
    noisy.send(b"\n")
    noisy.call("hello", req_id=3, version=PROTOCOL_VERSION)  # the noisy connection itself still works
    assert noisy.call("status", req_id=4)["jobs"] == 1
    noisy.close()
    holding.close()


def test_a_connection_that_never_says_hello_is_closed_after_the_timeout(daemon):
    started = time.monotonic()
    silent = daemon.raw(hello=False, timeout=HELLO_TIMEOUT + 10)
    frames = silent.until_closed()
    waited = time.monotonic() - started
    assert [f["error"]["code"] for f in frames] == ["no_hello"]
    assert HELLO_TIMEOUT - 0.5 < waited < HELLO_TIMEOUT + 5


def test_silent_connections_and_the_connection_cap(daemon):
    started = time.monotonic()
    silent = [daemon.raw(hello=False, timeout=30) for _ in range(MAX_CONNECTIONS)]
    over = daemon.raw(hello=False)
    frames = over.until_closed()
    assert [f["error"]["code"] for f in frames] == ["busy"]
    assert "512" in frames[0]["error"]["message"]
    assert time.monotonic() - started < HELLO_TIMEOUT, "the cap was reached before any hello timed out"
    for sock in silent[:500]:  # every silent one is closed once its hello is overdue
        assert sock.until_closed()[0]["error"]["code"] == "no_hello"

    def only_this_one() -> bool:
        """A client sees its end before the daemon has counted the connection gone: busy, for a moment."""
        try:
            return daemon.call("status")["connections"] == 1
        except ClientError as exc:
            if exc.code != "busy":
                raise
            return False

    assert daemon.wait_for(only_this_one, what="the silent ones to go")
    assert daemon.call("status")["jobs"] == 0, "and a new client is served again"
    for sock in silent:
        sock.close()
    over.close()
