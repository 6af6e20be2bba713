"""The data path's costs that can be guarded without a clock (issue 19): a timeline entry is
encoded once between the worker's event and its subscribers, the lone-surrogate check encodes
nothing, a start loads records with the collector off, and `roost ls` imports only what it needs.
The timings themselves are bench/run.py's (scale, output)."""

from __future__ import annotations

import gc
import json
import subprocess
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from roost.daemon.processes.shim_process import open_process
from roost.programs.shim import PIPE_BYTES
from roost.daemon.storage import recovery
from roost.daemon.storage.index import JobIndex
from roost.daemon.server.publisher import entry_bytes
from roost.daemon.storage.store import Store
from roost.drivers.base import Launch
from roost.models import Job, State
from roost.protocol import ENTRY_MAX, has_lone_surrogate, without_lone_surrogates

#: A command's piece of output: ENTRY_MAX characters.
PIECE = ("line 0000001 " + "x" * 66 + "\n") * (ENTRY_MAX // 80)


@pytest.fixture
def encodes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every object json.dumps is asked to encode that holds PIECE, wherever it is called from."""
    seen: list[Any] = []
    real = json.dumps

    def counting(obj: Any, *args: Any, **kwargs: Any) -> str:
        if "line 0000001 xxx" in real(obj, *args, **kwargs):
            seen.append(obj)
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(json, "dumps", counting)
    return seen


def test_an_entry_is_encoded_once_from_the_worker_event_to_the_subscribers_frame(tmp_path: Path,
                                                                                 encodes: list[Any]) -> None:
    store = Store(tmp_path / "roost.db")
    event = without_lone_surrogates({"type": "text", "text": PIECE})
    with store.transaction():
        entry = store.add_timeline("j1", "text", {"text": event["text"]}, 1.5)
    frame = entry_bytes(entry)
    assert len(encodes) == 1  # the store's write; the check and the frame reuse it
    assert json.loads(frame) == {"seq": entry["seq"], "job": "j1", "ts": 1.5, "kind": "text", "data": {"text": PIECE}}
    assert json.loads(frame) == store.timeline_page("j1")["entries"][0]


def test_an_entry_with_escapes_is_framed_as_utf8_so_it_stays_under_the_frame_limit(tmp_path: Path) -> None:
    """The store writes ASCII (an astral character is a 12-byte escaped pair); the frame is UTF-8."""
    store = Store(tmp_path / "roost.db")
    text = "\U0001f600" * ENTRY_MAX
    entry = store.add_timeline("j1", "text", {"text": text}, 1.0)
    frame = entry_bytes(entry)
    assert json.loads(frame)["data"]["text"] == text
    assert len(frame) < 4 * ENTRY_MAX + 200


def test_the_lone_surrogate_check_walks_without_encoding(encodes: list[Any]) -> None:
    nested: Any = {"type": "tool", "args": [{"k": PIECE}], "result": "ok"}
    assert not has_lone_surrogate(nested)
    assert without_lone_surrogates(nested) is nested
    assert encodes == []
    assert has_lone_surrogate({"a": [1, {"b": "fine \ud800 not"}]})
    assert has_lone_surrogate({"key \udc00": 1})
    assert without_lone_surrogates({"a": ["x\ud83d"]}) == {"a": ["x\ufffd"]}
    deep: Any = "end"
    for _ in range(5000):  # deeper than Python's recursion limit: the walk is iterative
        deep = [deep]
    assert not has_lone_surrogate(deep)


def test_records_load_with_the_collector_off_and_stay_frozen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "roost.db")
    with store.transaction():
        for i in range(50):
            store.save_job(Job(id=f"j{i}", title="t", driver="builtin", cwd="/", state=State.DONE,
                               parent=None if i % 10 == 0 else f"j{i - i % 10}", depth=0 if i % 10 == 0 else 1))
    during: list[bool] = []
    real_load = JobIndex.load

    def load(self: JobIndex, jobs: Any) -> None:
        during.append(gc.isenabled())
        real_load(self, jobs)

    monkeypatch.setattr(JobIndex, "load", load)
    frozen = gc.get_freeze_count()
    index = JobIndex()
    try:
        recovery.load_records(store, index)
        assert during == [False] and gc.isenabled()
        assert gc.get_freeze_count() > frozen
        assert len(index.jobs) == 50 and index.counts("j0") == (9, 0)
    finally:
        gc.unfreeze()


def test_the_cli_imports_no_event_loop_no_textual_no_config_parser() -> None:
    """`roost ls` and the other one-request commands: the blocking client only."""
    code = ("import sys, roost.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('asyncio', 'textual', 'rich', 'tomllib', 'platformdirs') or m in ('roost.config', 'roost.daemon')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_record_keeps_its_fields_in_slots_not_a_dict_of_its_own(tmp_path: Path) -> None:
    """A per-instance __dict__ was a third of a loaded record's memory (3.5 KB a record, 2.1 KB
    with slots, in process, bench/run.py scale's trees)."""
    store = Store(tmp_path / "roost.db")
    store.save_job(Job(id="j1", title="t", driver="builtin", cwd="/", state=State.DONE))
    job = store.jobs()[0]
    assert not hasattr(job, "__dict__")
    with pytest.raises(AttributeError):
        job.not_a_field = 1  # type: ignore[attr-defined]


async def test_a_workers_stdout_pipe_has_room_for_several_pieces_of_output() -> None:
    """At Linux's 64 KiB pipe each 64 KiB piece of a command's output was a read, a drain and a
    commit of its own; with PIPE_BYTES (set by the worker's shim) several share one transaction
    (bench/run.py output). The pipe is the bound: a worker ahead of its shim blocks once it is full,
    and the shim stops reading while the daemon has not acknowledged half of what it keeps."""
    fcntl = pytest.importorskip("fcntl")
    limit = int(Path("/proc/sys/fs/pipe-max-size").read_text()) if Path("/proc/sys/fs/pipe-max-size").exists() else 0
    if not hasattr(fcntl, "F_GETPIPE_SZ") or limit < PIPE_BYTES:
        pytest.skip("pipe sizes cannot be set to PIPE_BYTES here")
    process = await open_process("j1", Launch(argv=[sys.executable, "-c", "import sys; sys.stdin.read()"],
                                              env={}, cwd="/"))
    try:
        for fd, room in ((1, PIPE_BYTES), (2, None)):  # the worker's own ends, reached through /proc
            end = os.open(f"/proc/{process.pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
            try:
                size = fcntl.fcntl(end, fcntl.F_GETPIPE_SZ)
            finally:
                os.close(end)
            assert size == room if room else size < PIPE_BYTES, "stdout only"
    finally:
        process.link.close_stdin()
        await process.exited
        process.link.release()
