"""Sizes at the door and in every reply: oversize titles, labels and names are refused where they
enter, with the field, its size and the cap; a record holding megabytes (an older roost's, seeded
through the store's own API) leaves every listing working; children are paged, so a job with
5,000 of them is listed whole by the CLI, the client, the agents' tool and ``wait-children``."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DaemonHarness, seed_store

from roost import bounds
from roost.client import AsyncClient
from roost.models import Job, State
from roost.programs import mcp_server
from roost.protocol import MAX_FRAME, PAGE_BYTES
from roost.socket_connect import ClientError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "protocols.md"


def test_docs_quote_every_cap_as_the_code_defines_it():
    text = DOCS.read_text()
    caps = {name: value for name, value in vars(bounds).items() if name.endswith(("_MAX", "_CHARS"))}
    assert len(caps) >= 10
    for name, value in caps.items():
        assert re.search(rf"`{name}`\s*\|\s*{value:,}\b".replace(",", ",?"), text), f"{name} = {value} in docs"


def refusal(daemon: DaemonHarness, op: str, **args) -> str:
    with daemon.client() as client, pytest.raises(ClientError) as info:
        client.call(op, **args)
    assert info.value.code == "bad_args", info.value.message
    return info.value.message


@pytest.mark.parametrize("args, words", [
    ({"title": "t" * 900_000}, "spawn: argument 'title' is 900000 characters, over the 200-character cap"),
    ({"labels": {f"k{i}": "v" * 120_000 for i in range(8)}},  # ten would be over the frame: too_large
     "spawn: the value of label 'k0' is 120000 characters, over the 1024-character cap"),
    ({"labels": {f"k{i}": "v" * 900 for i in range(10)}},
     "spawn: labels of 9020 characters in all, over the 8192-character cap"),
    ({"labels": {f"k{i}": "v" for i in range(33)}}, "spawn: 33 labels, over the 32-label cap"),
    ({"labels": {"k" * 65: "v"}}, "is 65 characters, over the 64-character cap"),
    ({"labels": {"n": 3}}, "spawn: label 'n' must be a string, not int"),
    ({"cwd": "/" + "d" * 5000}, "spawn: argument 'cwd' is 5001 characters, over the 4096-character cap"),
    ({"driver": "x" * 129}, "spawn: argument 'driver' is 129 characters, over the 128-character cap"),
    ({"branch": "b" * 300, "worktree": True}, "argument 'branch' is 300 characters, over the 255-character cap"),
    ({"host": "h" * 200}, "argument 'host' is 200 characters"),
])
def test_oversize_spawns_are_refused_at_the_door_naming_field_size_and_cap(daemon, args, words):
    assert words in refusal(daemon, "spawn", prompt="say hi", **{"cwd": str(daemon.home), **args})
    assert daemon.call("status")["jobs"] == 0, "nothing was kept"


def test_label_and_rename_are_capped_too_and_the_job_is_unchanged(daemon):
    job = daemon.spawn("say hi", labels={f"k{i}": "v" for i in range(31)})
    assert "over the 200-character cap" in refusal(daemon, "rename", job=job, title="t" * 900_000)
    for i in range(10):  # ten labels of 120 KB, one request each
        assert "is 120000 characters, over the 1024-character cap" in refusal(daemon, "label", job=job,
                                                                              key=f"big{i}", value="v" * 120_000)
    daemon.call("label", job=job, key="k31", value="the 32nd")
    assert "would have 33 labels, over the 32-label cap" in refusal(daemon, "label", job=job, key="k32", value="x")
    daemon.call("label", job=job, key="k0", value="replaced: still 32")
    row = daemon.show(job)
    assert len(row["labels"]) == 32 and row["labels"]["k0"] == "replaced: still 32"
    assert row["title"] == "say hi"


def test_an_error_quotes_at_most_a_little_of_what_it_refuses(daemon):
    message = refusal(daemon, "list", states=["x" * 100])
    assert len(message) < 300
    with daemon.client() as client, pytest.raises(ClientError) as info:
        client.call("show", job="j" * 128)
    assert info.value.code == "unknown_job" and len(info.value.message) < 300


# -- records bigger than the door lets in --------------------------------------------------------------------
BIG_TITLE = "T" * 3_000_000
BIG_LABELS = {f"label{i}": "v" * 400_000 for i in range(10)}


def record(harness: DaemonHarness, job_id: str, at: float, **fields) -> Job:
    values = {"title": f"job {job_id}", "driver": "builtin", "cwd": str(harness.home), "state": State.DONE, **fields}
    return Job(id=job_id, created_at=at, updated_at=at, state_since=at, **values)


@pytest.fixture
def oversized(roost_home) -> DaemonHarness:
    harness = DaemonHarness(roost_home)
    seed_store(harness, [record(harness, "big1", 1000.0, title=BIG_TITLE, labels=BIG_LABELS),
                         record(harness, "big2", 1001.0, title="ok", labels=BIG_LABELS, cwd="/" + "c" * 2_000_000),
                         record(harness, "fine", 1002.0, title="a fine job")])
    harness.write_config("")
    harness.start()
    yield harness
    harness.stop()


def cli(harness: DaemonHarness, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "roost.cli", *args], env=harness.env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, f"roost {' '.join(args)}: {proc.stderr}"
    return proc


def test_a_record_with_megabytes_leaves_every_listing_working(oversized):
    assert "a fine job" in cli(oversized, "ls", "--all").stdout
    listed = json.loads(cli(oversized, "ls", "--json").stdout)
    assert {row["id"] for row in listed} == {"big1", "big2", "fine"}
    for job in ("big1", "big2", "fine"):
        shown = json.loads(cli(oversized, "show", job, "--json").stdout)
        assert len(shown["title"]) <= bounds.TITLE_MAX and len(shown["cwd"]) <= bounds.PATH_MAX
        assert sum(len(k) + len(v) for k, v in shown["labels"].items()) <= bounds.LABELS_CHARS
    raw = oversized.raw()
    row = raw.call("show", job="big1")
    assert row["title"].endswith("…") and row["labels_left_out"] > 0
    assert raw.call("list", full=True)["total"] == 3
    assert max(raw.sizes) < PAGE_BYTES
    raw.close()

    async def agent_view() -> list[dict]:
        client = await AsyncClient.connect(oversized.paths.socket, client="test")
        try:
            return (await client.subscribe("agent_view"))[1]
        finally:
            await client.close()

    assert {row["id"] for row in asyncio.run(agent_view())} == {"big1", "big2", "fine"}


# -- children, paged ------------------------------------------------------------------------------------------
KIDS = 5000


@pytest.fixture
def crowded(roost_home) -> DaemonHarness:
    """A real built-in parent, spawned and idle, then (daemon stopped) 5,000 children written as
    records through the store's API — 5,000 real spawns would take minutes on a shared machine,
    and the daemon reads nothing but the store at start. The last child waits on a question, so
    ``wait-children`` has one child to wait for, on the last page."""
    harness = DaemonHarness(roost_home)
    harness.write_config("")
    harness.start()
    parent = harness.spawn("say I am the parent", title="parent", lifetime="session")
    at = harness.wait_state(parent, "idle")["created_at"]
    harness.stop()
    kids = [record(harness, f"k{i:04d}", at + 1 + i, parent=parent, depth=1,
                   state=State.WAITING if i == KIDS - 1 else State.DONE, question="which one?" if i == KIDS - 1
                   else "") for i in range(KIDS)]
    seed_store(harness, kids)
    harness.start()
    harness.parent = parent  # type: ignore[attr-defined]
    yield harness
    harness.stop()


def test_five_thousand_children_are_listed_whole_everywhere(crowded):
    parent = crowded.parent  # type: ignore[attr-defined]
    want = [f"k{i:04d}" for i in range(KIDS)]
    assert [row["id"] for row in crowded.children(parent)] == want
    out = cli(crowded, "children", parent).stdout.splitlines()
    assert len(out) == KIDS and out[0].startswith("k0000") and out[-1].startswith(f"k{KIDS - 1}")
    assert [r["id"] for r in json.loads(cli(crowded, "children", parent, "--json").stdout)] == want
    raw = crowded.raw()
    first = raw.call("children", job=parent)
    assert first["total"] == KIDS and first["next"] and len(first["rows"]) < KIDS
    assert max(raw.sizes) < MAX_FRAME
    raw.close()

    # The agents' tool (MCP; pi's extension does the same): a page, and the cursor for the next.
    def call(op: str, **args):
        with crowded.client() as client:
            return client.call(op, **{"job": parent, **{k: v for k, v in args.items() if v is not None}})

    seen: list[str] = []
    cursor = None
    while True:
        text = mcp_server.run_tool("roost_children", {"cursor": cursor} if cursor else {}, call)
        lines = text["content"][0]["text"].splitlines()
        more = lines[-1].startswith("more: ")
        seen += [line.split()[0] for line in (lines[:-1] if more else lines)]
        if not more:
            break
        cursor = lines[-1].rsplit(" ", 1)[1]
    assert seen == want


def test_wait_children_reads_every_page_before_it_ends(crowded):
    parent = crowded.parent  # type: ignore[attr-defined]
    crowded.call("send", job=parent, text="wait-children\nsay all settled")
    crowded.wait_state(parent, "working")
    last = f"k{KIDS - 1}"
    assert crowded.show(last)["state"] == "waiting"
    assert crowded.show(parent)["state"] == "working", "the child on the last page still holds it"
    crowded.call("stop", job=last)
    assert crowded.wait_state(parent, "idle", timeout=30)["last_text"] == "all settled"
    stopped = [e["ts"] for e in crowded.call("logs", job=last)["entries"] if e["data"].get("state") == "stopped"]
    said = [e["ts"] for e in crowded.call("logs", job=parent)["entries"] if e["data"].get("text") == "all settled"]
    assert stopped and said and said[-1] >= stopped[-1], "it went on only once the last child had settled"
