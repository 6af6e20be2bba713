"""Subscriptions, in process: each subscriber gets the snapshot and the changes of what it
subscribed to and nothing else; row changes are coalesced per loop pass (the last state wins).

The Publisher runs on a real JobIndex and Store; the connection is a stand-in that keeps the
frames it was sent (the real one's queue is tested in test_backpressure.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from roost.daemon.storage.index import JobIndex
from roost.daemon.server.publisher import SNAPSHOT_BYTES, Publisher
from roost.daemon.storage.store import Store
from roost.models import Job, State
from roost.protocol import MAX_FRAME, PAGE_BYTES, ProtocolError


class FakeConn:
    """Keeps what it was sent, decoded."""

    def __init__(self, conn_id: int = 1) -> None:
        self.conn_id = conn_id
        self.frames: list[dict[str, Any]] = []
        self.sizes: list[int] = []

    def send(self, frame: bytes) -> None:
        assert frame.endswith(b"\n") and frame.count(b"\n") == 1
        self.sizes.append(len(frame))
        self.frames.append(json.loads(frame))

    def take(self) -> list[dict[str, Any]]:
        frames, self.frames = self.frames, []
        return frames


@pytest.fixture
def world(tmp_path: Path) -> tuple[JobIndex, Store, Publisher]:
    index = JobIndex()
    store = Store(tmp_path / "roost.db")
    yield index, store, Publisher(index, store)
    store.close()


def job(index: JobIndex, job_id: str, parent: str | None = None, state: State = State.IDLE, **kw: Any) -> Job:
    depth = index.get(parent).depth + 1 if parent else 0
    kw = {"title": job_id, "cwd": "/", **kw}
    record = Job(id=job_id, driver="builtin", state=state, parent=parent, depth=depth,
                 created_at=float(len(index.jobs)), **kw)
    index.add(record)
    return record


def change(index: JobIndex, publisher: Publisher, record: Job, **fields: Any) -> None:
    """What the engine does after a commit: change the record, tell the index, tell the publisher."""
    for name, value in fields.items():
        setattr(record, name, value)
    publisher.rows_changed(index.update(record))


async def next_pass() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def pushed_ids(frames: list[dict[str, Any]]) -> list[str]:
    return [f["row"]["id"] for f in frames if f.get("event") == "row"]


async def test_agent_view_gets_its_snapshot_first_then_only_roots_and_orphans(world):
    index, _, publisher = world
    root = job(index, "root", pid=4)  # its worker is up: its children are not orphans
    kid = job(index, "kid", parent="root", state=State.WORKING)
    other = job(index, "other")
    conn = FakeConn()
    result = publisher.subscribe(conn, 7, "agent_view")
    snapshot = conn.take()
    assert [f["event"] for f in snapshot] == ["rows"] and snapshot[0]["req"] == 7
    assert {r["id"] for r in snapshot[0]["rows"]} == {"root", "other"}
    assert result == {"sub": snapshot[0]["sub"], "count": 2, "more": 0,
                      "counts": {"working": 0, "subagents": 0, "queued": 0, "slots_used": 0, "cap": 0}}

    change(index, publisher, kid, last_text="busy")  # a child of an open parent: not for the view
    await next_pass()
    assert pushed_ids(conn.take()) == []

    change(index, publisher, root, pid=None)  # the parent closed: its working child is an orphan now
    publisher.rows_changed(["kid"])
    await next_pass()
    assert sorted(pushed_ids(conn.take())) == ["kid", "root"]

    change(index, publisher, root, pid=5)  # open again: the kid is pushed once more, then no longer
    publisher.rows_changed(["kid"])
    await next_pass()
    frames = conn.take()
    assert sorted(pushed_ids(frames)) == ["kid", "root"]
    assert next(f["row"] for f in frames if f["row"]["id"] == "kid")["parent_open"] is True
    change(index, publisher, kid, last_text="still busy")
    await next_pass()
    assert pushed_ids(conn.take()) == []
    change(index, publisher, other, last_text="a root")
    await next_pass()
    assert pushed_ids(conn.take()) == ["other"]


async def test_inline_agent_view_gets_every_row(world):
    index, _, publisher = world
    job(index, "root", pid=4)
    kid = job(index, "kid", parent="root")
    conn = FakeConn()
    publisher.subscribe(conn, 1, "agent_view", inline=True)
    assert {r["id"] for r in conn.take()[0]["rows"]} == {"root", "kid"}
    change(index, publisher, kid, state=State.WORKING)
    await next_pass()
    assert sorted(pushed_ids(conn.take())) == ["kid", "root"]


async def test_row_changes_are_coalesced_per_loop_pass_and_the_last_state_wins(world):
    index, _, publisher = world
    root = job(index, "root")
    conn = FakeConn()
    publisher.subscribe(conn, 1, "agent_view")
    conn.take()
    for text in ("one", "two", "three"):
        change(index, publisher, root, last_text=text)
    assert conn.frames == [], "nothing is pushed before the loop gets to run"
    await next_pass()
    frames = conn.take()
    assert len(frames) == 1 and frames[0]["row"]["last_text"] == "three"


async def test_subtree_gets_its_job_and_everything_below_and_nothing_else(world):
    index, _, publisher = world
    top = job(index, "top", pid=1)
    mid = job(index, "mid", parent="top", pid=2)
    leaf = job(index, "leaf", parent="mid")
    job(index, "side", parent="top")
    elsewhere = job(index, "else")
    conn = FakeConn()
    result = publisher.subscribe(conn, 3, "subtree", job="mid")
    assert [r["id"] for r in conn.take()[0]["rows"]] == ["leaf"]
    assert result["count"] == 1 and result["more"] == 0
    change(index, publisher, leaf, state=State.WORKING)
    change(index, publisher, elsewhere, state=State.WORKING)
    await next_pass()
    assert sorted(pushed_ids(conn.take())) == ["leaf", "mid"]  # top is above the subtree
    change(index, publisher, mid, last_text="x")
    change(index, publisher, top, last_text="y")
    await next_pass()
    assert pushed_ids(conn.take()) == ["mid"]


async def test_an_archived_row_is_pushed_once_more_so_clients_drop_it(world):
    index, _, publisher = world
    root = job(index, "root")
    conn = FakeConn()
    publisher.subscribe(conn, 1, "agent_view")
    conn.take()
    change(index, publisher, root, archived_at=123.0)
    await next_pass()
    assert [f["row"]["archived_at"] for f in conn.take()] == [123.0]


async def test_timeline_entries_go_to_that_jobs_subscribers_only(world):
    index, store, publisher = world
    job(index, "a")
    job(index, "b")
    first = store.add_timeline("a", "text", {"text": "before"})
    a_conn, b_conn, view = FakeConn(1), FakeConn(2), FakeConn(3)
    result = publisher.subscribe(a_conn, 1, "timeline", job="a", after=first["seq"] - 1)
    assert [f["entry"]["data"]["text"] for f in a_conn.take()] == ["before"]
    assert result["count"] == 1 and not result["skipped"]
    publisher.subscribe(b_conn, 1, "timeline", job="b")
    publisher.subscribe(view, 1, "agent_view")
    b_conn.take(), view.take()
    publisher.timeline(store.add_timeline("a", "text", {"text": "live"}))
    assert [f["entry"]["data"]["text"] for f in a_conn.take()] == ["live"]
    assert b_conn.frames == [] and view.frames == []


async def test_a_timeline_snapshot_from_long_ago_sends_the_newest_and_says_it_skipped(world):
    index, store, publisher = world
    job(index, "a")
    with store.transaction():
        seqs = [store.add_timeline("a", "text", {"text": str(i)})["seq"] for i in range(2500)]
    conn = FakeConn()
    result = publisher.subscribe(conn, 1, "timeline", job="a", after=0)
    assert result["count"] == 2000 and result["skipped"] is True
    assert [f["entry"]["seq"] for f in conn.frames] == seqs[-2000:]


async def test_a_big_snapshot_comes_in_frames_under_the_limit_and_stops_at_its_budget(world):
    index, _, publisher = world
    for i in range(8000):
        job(index, f"j{i:04d}", title="t" * 60, cwd="/" + "d" * 200, last_text="x" * 4000)
    conn = FakeConn()
    result = publisher.subscribe(conn, 1, "agent_view", limit=5000)
    assert max(conn.sizes) < PAGE_BYTES + 4096 < MAX_FRAME
    assert sum(conn.sizes) <= SNAPSHOT_BYTES + 4096 * len(conn.sizes)
    sent = sum(len(f["rows"]) for f in conn.frames)
    assert sent == result["count"] < 5000, "the byte budget, not the limit, ended this snapshot"
    assert result["count"] + result["more"] == 8000


async def test_unsubscribe_and_forget_stop_the_pushes(world):
    index, store, publisher = world
    root = job(index, "root")
    conn, other = FakeConn(1), FakeConn(2)
    view = publisher.subscribe(conn, 1, "agent_view")["sub"]
    publisher.subscribe(conn, 2, "timeline", job="root")
    with pytest.raises(ProtocolError):
        publisher.unsubscribe(other, view)  # not its subscription
    publisher.unsubscribe(conn, view)
    conn.take()
    change(index, publisher, root, last_text="x")
    await next_pass()
    assert conn.frames == []
    publisher.forget(conn)
    publisher.timeline(store.add_timeline("root", "text", {"text": "x"}))
    assert conn.frames == []


def test_subtree_and_timeline_need_a_known_job(world):
    _, _, publisher = world
    with pytest.raises(ProtocolError) as info:
        publisher.subscribe(FakeConn(), 1, "subtree")
    assert info.value.code == "bad_args"
    with pytest.raises(ProtocolError) as info:
        publisher.subscribe(FakeConn(), 1, "timeline", job="nope")
    assert info.value.code == "unknown_job"


# -- a real daemon ----------------------------------------------------------------------------------------
def read_until(client, done) -> list[dict[str, Any]]:
    """Frames up to and including the first for which ``done`` is true (each read has a deadline)."""
    frames = []
    while True:
        frames.append(client.frame())
        if done(frames[-1]):
            return frames


def row_says(job_id: str, text: str):
    return lambda f: f.get("event") == "row" and f["row"]["id"] == job_id and f["row"]["last_text"] == text


def test_each_subscriber_gets_only_what_it_subscribed_to(daemon):
    parent = daemon.spawn("say parent")
    daemon.wait_state(parent, "idle")  # its worker stays up: its children are not orphans
    child = daemon.spawn("say child", parent=parent)
    other = daemon.spawn("say other")
    for job_id in (child, other):
        daemon.wait_state(job_id, "idle")
    transcript, panel, view = daemon.raw(), daemon.raw(), daemon.raw()
    transcript.call("subscribe", what="timeline", job=child, after=daemon.timeline(child)[-1]["seq"])
    snapshot: list[dict[str, Any]] = []
    panel.send({"id": 1, "op": "subscribe", "args": {"what": "subtree", "job": parent}})
    assert panel.reply(1, snapshot)["result"]["count"] == 1
    assert [r["id"] for r in snapshot[0]["rows"]] == [child]
    view.send({"id": 1, "op": "subscribe", "args": {"what": "agent_view"}})
    snapshot = []
    view.reply(1, snapshot)
    assert {r["id"] for f in snapshot for r in f["rows"]} == {parent, other}

    daemon.call("send", job=other, text="say elsewhere")
    daemon.wait_state(other, "idle")
    daemon.call("send", job=child, text="say marker")
    daemon.wait_state(child, "idle")
    daemon.call("send", job=other, text="say after the marker")

    seen = read_until(transcript, lambda f: f["entry"]["data"].get("text") == "marker")
    assert {f["entry"]["job"] for f in seen} == {child}
    seen = read_until(panel, row_says(child, "marker"))
    assert {f["row"]["id"] for f in seen} <= {parent, child}
    seen = read_until(view, row_says(other, "after the marker"))
    rows = [f["row"] for f in seen if f.get("event") == "row"]  # and the working and queued counts
    assert child not in {row["id"] for row in rows}, "a child of an open parent is not in the view"
    assert any(row["id"] == other and row["last_text"] == "elsewhere" for row in rows)
    for client in (transcript, panel, view):
        client.close()


async def test_a_job_detached_out_of_a_subtree_is_pushed_there_once_more(world):
    index, _, publisher = world
    job(index, "top", pid=1)
    mid = job(index, "mid", parent="top")
    job(index, "leaf", parent="mid")
    conn = FakeConn()
    publisher.subscribe(conn, 1, "subtree", job="top")
    conn.take()
    publisher.rows_changed(index.reparent(mid, None))  # what detach does
    await next_pass()
    frames = conn.take()
    assert sorted(pushed_ids(frames)) == ["leaf", "mid", "top"]
    assert next(f["row"] for f in frames if f["row"]["id"] == "mid")["parent"] is None
    change(index, publisher, mid, last_text="not yours any more")
    await next_pass()
    assert conn.frames == []
