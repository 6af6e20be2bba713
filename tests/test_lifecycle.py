"""The subagent lifecycle with real built-in workers: auto-close, the idle reaper, reports and
wakes, lifetimes, archive, detach and parent_open (issue 3, seeds 000-004)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from roost.client import ClientError

from conftest import DaemonHarness, environ_of, pid_alive

FAST = "subagent_auto_close_delay = 0.6\n"


def reports_in(daemon: DaemonHarness, job: str) -> list[dict]:
    """The report batches a parent received (each one prompt or steer)."""
    return [e["data"] for e in daemon.timeline(job) if e["kind"] == "reports"]


def said(batch: dict) -> str:
    """What the children said in one reports entry (the timeline keeps them structured)."""
    return "\n".join(r["text"] for r in batch["reports"])


def closed_entries(daemon: DaemonHarness, job: str) -> list[dict]:
    return [e["data"] for e in daemon.timeline(job) if e["kind"] == "closed"]


def workers_of(job: str) -> list[int]:
    """The top processes of the live trees that carry this job's id: how many workers it really has
    (a worker in its walls is bwrap, bwrap again, then the agent, each with the job's id)."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and environ_of(int(proc.name)).get("ROOST_JOB_ID") == job and pid_alive(int(proc.name)):
            pids.add(int(proc.name))
    return sorted(pid for pid in pids if parent_of(pid) not in pids)


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def only_child(daemon: DaemonHarness, parent: str) -> dict:
    return daemon.wait_for(lambda: (kids := daemon.children(parent)) and kids[0], what="a child")


# -- subagent auto-close -------------------------------------------------------------------------------
def test_a_done_report_closes_the_childs_worker_and_keeps_its_record(daemon_factory):
    daemon = daemon_factory(FAST)
    parent = daemon.spawn("spawn say working on it; report done all fixed")
    child = only_child(daemon, parent)["id"]
    done = daemon.wait_state(child, "done")
    assert done["worker_up"]
    closed = daemon.wait_row(child, lambda r: r["reaped"], timeout=5, what="auto-close")
    assert closed["state"] == "done" and closed["pid"] is None and not pid_alive(done["pid"])
    assert closed_entries(daemon, child)[0]["reason"].startswith("done: subagent auto-close")
    # A wrong "ended" report would come with the close, so before a message sent after it: the
    # parent (up, between turns) would take it in before the marker's turn.
    daemon.call("send", job=parent, text="say marker")
    daemon.wait_for(lambda: "marker" in daemon.texts(parent), what="the parent's marker turn")
    batches = reports_in(daemon, parent)
    assert len(batches) == 1 and [(r["state"], r["text"]) for r in batches[0]["reports"]] == [("done", "all fixed")]
    assert daemon.show(parent)["state"] != "failed"


def first_close_reason(daemon: DaemonHarness, job: str) -> str:
    """Why the job's worker was first closed, once it was."""
    daemon.wait_row(job, lambda r: r["reaped"], what="a close")
    return closed_entries(daemon, job)[0]["reason"]


#: An idle reaper three auto-close delays long: its close, a later event, shows auto-close let be.
REAPER_AFTER_AUTO_CLOSE = FAST + "idle_timeout = 1.8\n"


def test_a_blocked_report_does_not_close_the_worker(daemon_factory):
    daemon = daemon_factory(REAPER_AFTER_AUTO_CLOSE)
    parent = daemon.spawn("spawn report blocked need the api key")
    child = only_child(daemon, parent)["id"]
    daemon.wait_state(child, "blocked")
    assert first_close_reason(daemon, child) == "idle for 1.8s"


def test_with_auto_close_off_done_children_keep_their_workers(daemon_factory):
    daemon = daemon_factory(REAPER_AFTER_AUTO_CLOSE + "subagent_auto_close = false\n")
    parent = daemon.spawn("spawn report done ok")
    child = only_child(daemon, parent)["id"]
    daemon.wait_state(child, "done")
    assert first_close_reason(daemon, child) == "idle for 1.8s"


def test_a_child_waiting_for_its_own_children_closes_only_after_them(daemon_factory):
    daemon = daemon_factory(FAST)
    root = daemon.spawn("spawn spawn wait-for g;; report done g; report done c")
    child = only_child(daemon, root)["id"]
    grandchild = only_child(daemon, child)["id"]
    daemon.wait_state(child, "done")
    daemon.at_gate(grandchild, "g")
    assert not daemon.show(child)["reaped"], "held open while its child works"
    daemon.release("g")
    daemon.wait_state(grandchild, "done")
    # While the grandchild worked, the child was held open by it.
    assert not any(e["kind"] == "closed" for e in daemon.timeline(child)
                   if e["ts"] < daemon.show(grandchild)["state_since"])
    daemon.wait_row(child, lambda r: r["reaped"], timeout=5, what="the child to close after its child")
    daemon.wait_row(grandchild, lambda r: r["reaped"], timeout=5)


def test_a_session_lifetime_child_is_kept_until_its_owner_closes_it(daemon_factory):
    daemon = daemon_factory(FAST + '[drivers.keeper]\nkind = "builtin"\nlifetime = "workflow"\n')
    root = daemon.spawn("say root")
    daemon.wait_state(root, "idle")
    explicit = daemon.spawn("report done kept", parent=root, lifetime="session")
    profile = daemon.spawn("report done kept too", parent=root, driver="keeper")
    default = daemon.spawn("report done closed", parent=root)
    assert [daemon.show(j)["lifetime"] for j in (explicit, profile, default)] == ["session", "workflow", "task"]
    daemon.wait_row(default, lambda r: r["reaped"], timeout=5)
    assert daemon.show(explicit)["worker_up"] and daemon.show(profile)["worker_up"]
    assert daemon.call("close", job=explicit) == {"closed": True}
    row = daemon.wait_row(explicit, lambda r: r["reaped"])
    assert row["state"] == "done", "closing is not stopping"
    assert daemon.call("send", job=explicit, text="recall")["outcome"] == "resumed"


def test_only_the_owner_job_may_close_a_child(daemon):
    root = daemon.spawn("spawn say one\nspawn say two")
    daemon.wait_for(lambda: len(daemon.children(root)) == 2, what="two children")
    one, two = (k["id"] for k in daemon.children(root))
    row = daemon.wait_state(one, "idle")
    daemon.wait_state(two, "idle")
    token = environ_of(row["pid"])["ROOST_TOKEN"]
    with daemon.client(job=one, token=token) as as_one:
        with pytest.raises(ClientError) as info:
            as_one.call("close", job=two)
    assert info.value.code == "auth" and "owner" in info.value.message


# -- the idle reaper -------------------------------------------------------------------------------------
def test_the_idle_reaper_closes_idle_workers_but_not_pinned_or_attached_ones(daemon_factory):
    daemon = daemon_factory("idle_timeout = 0.8\n")
    plain, pinned, attached = (daemon.spawn(f"wait-for pinned\nsay {n}") for n in ("plain", "pinned", "attached"))
    for job in (plain, pinned, attached):
        daemon.at_gate(job, "pinned")
    daemon.call("pin", job=pinned)  # while they work: no idle second counts before pin and attach
    with daemon.client() as holder:
        holder.call("attach", job=attached)
        daemon.release("pinned")
        row = daemon.wait_row(plain, lambda r: r["reaped"], what="the reaper")
        assert row["state"] == "idle" and row["pid"] is None
        daemon.wait_state(pinned, "idle")
        daemon.wait_state(attached, "idle")
        # A job idle after these two: once the reaper closed it, their turn had come too.
        probe = daemon.spawn("say probe")
        daemon.wait_row(probe, lambda r: r["reaped"], what="the reaper on a later job")
        assert daemon.show(pinned)["worker_up"] and daemon.show(attached)["worker_up"]
    daemon.wait_row(attached, lambda r: r["reaped"], what="the reaper once released")
    assert daemon.call("send", job=plain, text="recall")["outcome"] == "resumed"
    assert "wait-for pinned" in daemon.wait_state(plain, "idle")["last_text"], "its session came back"


def test_the_reaper_spares_a_parent_whose_child_still_runs(daemon_factory):
    daemon = daemon_factory("idle_timeout = 0.5\n")
    parent = daemon.spawn("spawn wait-for late; report done late")
    child = only_child(daemon, parent)["id"]
    daemon.wait_state(parent, "idle")
    daemon.at_gate(child, "late")
    probe = daemon.spawn("say probe")  # idle after the parent: once it is reaped, the parent's turn came
    daemon.wait_row(probe, lambda r: r["reaped"], what="the reaper on a later job")
    assert daemon.show(parent)["worker_up"], "a running child holds its parent open"
    assert daemon.show(child)["state"] == "working"
    daemon.release("late")


def test_a_message_racing_the_reaper_is_never_lost_and_never_makes_two_workers(daemon_factory):
    daemon = daemon_factory("idle_timeout = 0.3\n")
    job = daemon.spawn("say 0")
    daemon.wait_state(job, "idle")
    rng = random.Random(7)
    for n in range(1, 16):
        # The sleep is the point here, not a wait for something: it puts each message at a random
        # place around the reaper's deadline, and what is asserted holds whichever side it lands.
        time.sleep(rng.uniform(0.2, 0.45))
        result = daemon.call("send", job=job, text=f"say {n}")
        assert result["outcome"] in ("delivered", "resumed", "queued")
        daemon.wait_for(lambda: f"{n}" in daemon.texts(job), what=f"message {n} to be answered")
        assert len(workers_of(job)) <= 1
    assert [t for t in daemon.texts(job) if t.isdigit()] == [str(n) for n in range(16)]


# -- reports and wakes -----------------------------------------------------------------------------------
def test_reports_are_held_while_the_parent_works_and_delivered_batched(daemon):
    parent = daemon.spawn("spawn*2 report done part finished\nwait-for parent\nsay parent done")
    daemon.wait_for(lambda: len(daemon.children(parent)) == 2, what="children")
    for kid in daemon.children(parent):
        daemon.wait_state(kid["id"], "done")
    assert reports_in(daemon, parent) == [], "held while the parent's turn runs"
    assert daemon.show(parent)["state"] == "working"
    daemon.release("parent")
    daemon.wait_for(lambda: reports_in(daemon, parent), timeout=5, what="the batch")
    batches = reports_in(daemon, parent)
    assert len(batches) == 1 and len(batches[0]["reports"]) == 2
    assert "noted 2 reports from subagents" in daemon.texts(parent)


def test_a_question_is_delivered_at_once_while_the_parent_works(daemon):
    parent = daemon.spawn("spawn ask which database?\nwait-for never")
    child = only_child(daemon, parent)["id"]
    daemon.wait_state(child, "waiting")
    batch = daemon.wait_for(lambda: reports_in(daemon, parent), timeout=3, what="the question")[0]
    assert batch.get("steer") and [(r["kind"], r["text"]) for r in batch["reports"]] == [("question", "which database?")]
    assert daemon.show(parent)["state"] == "working"
    daemon.wait_for(lambda: any("noted while working" in t for t in daemon.texts(parent)), what="the note")
    daemon.call("stop", job=parent)


def test_every_finished_turn_reaches_the_parent_not_only_the_first(daemon_factory):
    daemon = daemon_factory("subagent_auto_close = false\n")
    parent = daemon.spawn("spawn say first turn")
    child = only_child(daemon, parent)["id"]
    daemon.wait_state(child, "idle")
    daemon.wait_for(lambda: len(reports_in(daemon, parent)) == 1, what="the first report")
    daemon.call("send", job=child, text="report done second turn")
    daemon.wait_for(lambda: len(reports_in(daemon, parent)) == 2, what="the second report")
    assert "second turn" in said(reports_in(daemon, parent)[1])


def test_a_child_whose_worker_dies_reaches_the_parent_as_a_failure(daemon):
    parent = daemon.spawn("spawn crash")
    child = only_child(daemon, parent)["id"]
    daemon.wait_state(child, "failed")
    batch = daemon.wait_for(lambda: reports_in(daemon, parent), what="the failure report")[0]
    assert batch["reports"][0]["state"] == "failed" and "exited with code 3" in said(batch)


@pytest.mark.parametrize("side", ["parent", "child"])
def test_reports_can_be_switched_off_with_a_label(daemon, side):
    parent = daemon.spawn("say parent", labels={"roost.reports": "off"} if side == "parent" else None)
    daemon.wait_state(parent, "idle")
    child = daemon.spawn("report done quiet", parent=parent,
                         labels={"roost.reports": "off"} if side == "child" else None)
    daemon.wait_state(child, "done")
    # The parent is up between turns: a report would be its next prompt, before this message's.
    daemon.call("send", job=parent, text="say marker")
    daemon.wait_for(lambda: "marker" in daemon.texts(parent), what="the parent's marker turn")
    assert reports_in(daemon, parent) == []


def test_a_report_to_a_closed_parent_waits_for_its_resume(daemon):
    parent = daemon.spawn("say parent")
    daemon.wait_state(parent, "idle")
    daemon.call("close", job=parent)
    daemon.wait_row(parent, lambda r: r["reaped"])
    child = daemon.spawn("report done while you slept", parent=parent)
    daemon.wait_state(child, "done")
    daemon.call("send", job=parent, text="say back")
    batch = daemon.wait_for(lambda: reports_in(daemon, parent), what="the queued report")[0]
    assert "while you slept" in said(batch)
    since_close = [e["kind"] for e in daemon.timeline(parent)]
    since_close = since_close[since_close.index("closed") + 1:]
    assert since_close[:2] == ["message", "worker"], \
        "wake_reaped_parent is off by default: the worker came back for the message, not the report"


def test_wake_reaped_parent_resumes_it_with_the_report(daemon_factory):
    daemon = daemon_factory("wake_reaped_parent = true\n")
    parent = daemon.spawn("say parent")
    daemon.wait_state(parent, "idle")
    daemon.call("close", job=parent)
    daemon.wait_row(parent, lambda r: r["reaped"])
    daemon.spawn("report done wake up", parent=parent)
    batch = daemon.wait_for(lambda: reports_in(daemon, parent), what="the wake")[0]
    assert "wake up" in said(batch) and daemon.show(parent)["worker_up"]


def test_each_report_is_delivered_exactly_once_across_a_daemon_restart(daemon):
    parent = daemon.spawn("spawn work 0.3; report done survived the crash\nwait-for never")
    child = only_child(daemon, parent)["id"]
    daemon.wait_for(lambda: any(e["kind"] == "reported" for e in daemon.timeline(child)), what="the report")
    assert reports_in(daemon, parent) == [], "held while the parent works"
    daemon.kill()
    daemon.start()
    assert daemon.show(parent)["state"] == "working", "re-adopted: its turn goes on, the report still held"
    daemon.call("send", job=parent, text="say I am back")
    daemon.release("never")
    daemon.wait_for(lambda: reports_in(daemon, parent), what="the held report after the restart")
    daemon.wait_state(parent, "idle", "done")
    daemon.call("send", job=parent, text="say once more")
    daemon.wait_for(lambda: "once more" in daemon.texts(parent), what="the next turn")
    batches = reports_in(daemon, parent)
    assert len(batches) == 1 and said(batches[0]).count("survived the crash") == 1


# -- what clients see --------------------------------------------------------------------------------------
def test_parent_open_follows_clients_and_the_parents_worker(daemon):
    parent = daemon.spawn("spawn wait-for never\nsay parent")
    child = only_child(daemon, parent)["id"]
    daemon.wait_state(parent, "idle")
    assert daemon.show(child)["parent_open"] is True
    daemon.call("close", job=parent)
    daemon.wait_row(child, lambda r: r["parent_open"] is False, what="parent_open to drop")
    with daemon.client() as app:
        app.call("attach", job=parent)
        assert daemon.show(child)["parent_open"] is True
        app.call("release", job=parent)
        assert daemon.show(child)["parent_open"] is False
        app.call("attach", job=parent)
    # a client that disconnects has nothing open any more
    daemon.wait_row(child, lambda r: r["parent_open"] is False, what="the disconnect to count")
    daemon.call("send", job=parent, text="say resumed")
    daemon.wait_row(child, lambda r: r["parent_open"] is True, what="the resumed parent")
    row = daemon.show(parent)
    assert row["descendants"] == 1 and row["running_descendants"] == 1


def test_row_events_are_pushed_to_watchers_when_parent_open_changes(daemon):
    parent = daemon.spawn("spawn wait-for never\nsay parent")
    child = only_child(daemon, parent)["id"]
    daemon.wait_state(parent, "idle")
    with daemon.client() as watcher:
        watcher.call("subscribe", what="agent_view")
        daemon.call("close", job=parent)
        while True:
            frame = watcher.read_frame()
            if frame.get("event") == "row" and frame["row"]["id"] == child and not frame["row"]["parent_open"]:
                break


# -- archive and detach ------------------------------------------------------------------------------------
def test_archive_cascades_except_to_a_child_a_client_has_open(daemon):
    root = daemon.spawn("spawn wait-for never\nspawn wait-for never\nsay root")
    daemon.wait_for(lambda: len(daemon.children(root)) == 2, what="two children")
    first, second = (k["id"] for k in daemon.children(root))
    daemon.wait_state(first, "working")
    with daemon.client() as app:
        app.call("attach", job=second)
        result = daemon.call("archive", job=root)
        assert sorted(result["archived"]) == sorted([root, first]) and result["detached"] == [second]
        listed = {r["id"] for r in daemon.rows()}
        assert listed == {second}
        assert daemon.show(second)["parent"] is None
        assert {r["id"] for r in daemon.rows(archived=True)} == {root, first, second}
        gone = daemon.wait_row(first, lambda r: not r["worker_up"])
        assert gone["archived_at"] is not None
        with pytest.raises(ClientError) as info:
            daemon.call("send", job=first, text="say zombie")
        assert info.value.code == "archived"


def test_detach_makes_a_child_a_root_that_keeps_working(daemon):
    root = daemon.spawn("spawn wait-for free; say free at last\nsay root")
    child = only_child(daemon, root)["id"]
    daemon.wait_state(child, "working")
    row = daemon.call("detach", job=child)
    assert row["parent"] is None and row["depth"] == 0 and row["state"] == "working"
    assert daemon.children(root) == [] and daemon.show(root)["descendants"] == 0
    daemon.release("free")
    assert daemon.wait_state(child, "idle")["last_text"] == "free at last"


def test_spawning_deeper_than_max_depth_is_refused(daemon_factory):
    daemon = daemon_factory("max_depth = 1\n")
    root = daemon.spawn("spawn spawn say too deep")
    child = only_child(daemon, root)["id"]
    daemon.wait_state(child, "failed")
    failure = [e["data"] for e in daemon.timeline(child) if e["kind"] == "turn_end"][0]
    assert "max_depth = 1" in failure["error"]


def test_the_hold_is_bounded_by_report_hold_max(daemon_factory):
    daemon = daemon_factory("report_hold_max = 1\n")
    parent = daemon.spawn("spawn report done quick one\nwait-for never")
    child = only_child(daemon, parent)["id"]
    done_at = daemon.wait_state(child, "done")["state_since"]
    batch = daemon.wait_for(lambda: reports_in(daemon, parent), timeout=5, what="the bounded hold")[0]
    delivered = next(e["ts"] for e in daemon.timeline(parent) if e["kind"] == "reports")
    assert batch.get("steer") and "quick one" in said(batch)
    assert 0.9 <= delivered - done_at < 3, "held about report_hold_max, not until the turn ends"
    assert daemon.show(parent)["state"] == "working"
    daemon.call("stop", job=parent)


def test_opening_a_closed_job_resumes_it_and_delivers_what_waited(daemon):
    parent = daemon.spawn("say parent")
    daemon.wait_state(parent, "idle")
    daemon.call("close", job=parent)
    daemon.wait_row(parent, lambda r: r["reaped"])
    daemon.spawn("ask may I?", parent=parent)
    with daemon.client() as app:
        app.call("attach", job=parent)  # a plain attach only holds it
        assert not daemon.show(parent)["worker_up"]
        app.call("attach", job=parent, resume=True)
        daemon.wait_row(parent, lambda r: r["worker_up"], what="the resume on open")
        batch = daemon.wait_for(lambda: reports_in(daemon, parent), what="the waiting question")[0]
        assert "may I?" in said(batch)
        row = daemon.wait_state(parent, "idle")
        assert row["last_text"] == "parent", "a turn that only took in reports keeps the peek line"
        resumes = [e for e in daemon.timeline(parent) if e["kind"] == "worker" and e["data"].get("resumed")]
        assert len(resumes) == 1, "one resume: the open's, not the plain attach's"


def test_the_reaper_keeps_a_session_child_while_its_owner_runs(daemon_factory):
    daemon = daemon_factory("idle_timeout = 0.5\n")
    owner = daemon.spawn("say owner")
    daemon.wait_state(owner, "idle")
    with daemon.client() as holder:
        holder.call("attach", job=owner)  # keeps the owner itself from the reaper
        kept = daemon.spawn("say companion", parent=owner, lifetime="session")
        task = daemon.spawn("say helper", parent=owner)
        daemon.wait_state(kept, "idle")
        daemon.wait_row(task, lambda r: r["reaped"], timeout=5, what="the task child reaped")
        assert daemon.show(kept)["worker_up"]
        daemon.call("close", job=owner)
        daemon.wait_row(kept, lambda r: r["reaped"], timeout=5, what="the companion reaped after its owner")



def test_a_queued_row_says_it_waits_for_the_cap(daemon_factory):
    """Queued rows never said what they waited for."""
    from roost.models import Row
    from roost.rules.row_text import activity_text

    daemon = daemon_factory("max_running_jobs = 1\n")
    first = daemon.spawn("work 600")
    daemon.wait_state(first, "working")
    second = daemon.spawn("work 600")
    row = daemon.wait_row(second, lambda r: r["reason"], what="the queued row's reason")
    assert row["state"] == "queued" and row["reason"] == "waiting for a run slot (1 of 1 used)"
    assert activity_text(Row.from_wire(row), 60)[0] == "waiting for a run slot (1 of 1 used)"
    daemon.call("stop", job=first)
    started = daemon.wait_row(second, lambda r: r["state"] == "working", what="the queued job to start")
    assert started["reason"] == "", "starting clears what it waited for"


def test_a_queued_row_says_it_waits_for_a_live_worker_place(daemon_factory):
    daemon = daemon_factory("max_live_workers = 1\n")
    first = daemon.spawn("work 600")
    daemon.wait_state(first, "working")  # its worker is live and busy: nothing to close for room
    second = daemon.spawn("say two")
    row = daemon.wait_row(second, lambda r: r["reason"], what="the queued row's reason")
    assert row["state"] == "queued" and row["reason"] == "waiting for a live-worker place (max_live_workers = 1)"
