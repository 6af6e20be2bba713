"""Who may call what (roost/daemon/server/authority.py), row by row against a real daemon and real built-in
workers: every operation of the protocol has a rule, docs/protocols.md says it, and each rule holds
for a person, for a job inside its reach and for a job outside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roost.protocol import PROTOCOL_VERSION
from roost.daemon.server.authority import RULES, Reach, table_keys
from roost.socket_connect import ClientError

DOCS = Path(__file__).resolve().parent.parent / "docs" / "protocols.md"

#: One request per row of the table: ``{t}`` is the target job (the test picks one in or out of
#: the caller's reach). A row added to the table without a sample here fails the test.
SAMPLES: dict[str, dict[str, Any]] = {
    "hello": {"version": PROTOCOL_VERSION},
    "spawn": {"prompt": "say spawned by the table"},
    "send": {"job": "{t}", "text": "say hi from the table"},
    "stop": {"job": "{t}"},
    "close": {"job": "{t}"},
    "pin": {"job": "{t}"},
    "unpin": {"job": "{t}"},
    "label": {"job": "{t}", "key": "k", "value": "v"},
    "archive": {"job": "{t}"},
    "detach": {"job": "{t}"},
    "rename": {"job": "{t}", "title": "renamed by the table"},
    "unarchive": {"job": "{t}"},
    "merge": {"job": "{t}"},
    "report": {"status": "idle", "text": "a note"},
    "answer_approval": {"approval": "ap-zzzzzz", "decision": "deny"},
    "approval_text": {"approval": "ap-zzzzzz"},
    "show": {"job": "{t}"},
    "children": {"job": "{t}"},
    "list": {"under": "{t}"},
    "logs": {"job": "{t}"},
    "diff": {"job": "{t}"},
    "search": {"text": "table", "under": "{t}"},
    "fork": {"job": "{t}"},
    "subscribe agent_view": {"what": "agent_view"},
    "subscribe subtree": {"what": "subtree", "job": "{t}"},
    "subscribe timeline": {"what": "timeline", "job": "{t}"},
    "unsubscribe": {"sub": 999},
    "attach": {"job": "{t}"},
    "release": {"job": "{t}"},
    "seen": {"job": "{t}"},
    "status": {},
    "acknowledge": {},
    "usage": {"job": "{t}"},
    "budget": {"job": "{t}", "usd": 5},
    "reload": {},
    "shutdown": {},
    "worktrees": {},
    "worktrees_prune": {},
}


def test_every_operation_has_a_rule_a_sample_and_a_row_in_the_docs():
    assert set(RULES) == table_keys(), "an operation without a rule (or a rule for no operation)"
    assert set(SAMPLES) == table_keys(), "a rule this test does not try"
    docs = DOCS.read_text()
    for key, rule in RULES.items():
        assert f"| `{key}` | {rule.callers()} |" in docs, f"docs/protocols.md's authority table lacks {key}"


def token_of(pid: int) -> str:
    env = dict(i.split("=", 1) for i in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in i)
    return env["ROOST_TOKEN"]


def outcome(client_of: Any, key: str, target: str | None) -> str:
    """``ok``, or the error code the daemon answered ``key``'s sample with."""
    op = key.split()[0]
    args = {k: (target if v == "{t}" else v) for k, v in SAMPLES[key].items()}
    try:
        with client_of() as client:
            client.call(op, **args)
    except ClientError as exc:
        return exc.code
    return "ok"


def test_each_row_holds_for_a_person_and_for_a_job_in_and_out_of_its_reach(daemon_factory):
    daemon = daemon_factory("subagent_auto_close = false\n")
    top = daemon.spawn("spawn spawn say leaf")  # top -> middle -> leaf; the caller is middle
    middle = daemon.wait_for(lambda: daemon.children(top), what="the middle job")[0]["id"]
    leaf = daemon.wait_for(lambda: daemon.children(middle), what="the leaf")[0]["id"]
    stranger = daemon.spawn("say a job of nobody's")
    for job in (top, middle, leaf, stranger):
        daemon.wait_state(job, "idle")
    token = token_of(daemon.show(middle)["pid"])

    def as_middle() -> Any:
        return daemon.client(job=middle, token=token)

    refused, allowed = [], []
    for key, rule in RULES.items():
        if key == "hello":
            continue  # every connection says it: the other tests of this file say it every time
        if rule.jobs is Reach.NONE:
            refused.append((key, outcome(as_middle, key, leaf)))
        elif rule.target is None or rule.jobs is Reach.ANY:
            allowed.append((key, outcome(as_middle, key, leaf)))
        else:
            refused.append((key, outcome(as_middle, key, stranger)))
            if rule.jobs is Reach.FAMILY:
                allowed.append((key, outcome(as_middle, key, top)))
            else:
                refused.append((key, outcome(as_middle, key, top)))
    assert [k for k, code in refused if code != "auth"] == [], "a job reached what its rule refuses"
    assert [(k, c) for k, c in allowed if c == "auth"] == [], "a job was refused what its rule allows"
    # Inside its reach (the leaf, its own), a job's call gets past the check: whatever it answers, not
    # auth. Detaching takes the leaf out of the subtree, so it goes last.
    reaching = sorted((k for k, r in RULES.items() if r.target and r.jobs in (Reach.SUBTREE, Reach.FAMILY, Reach.BELOW)),
                      key=lambda k: k == "detach")
    inside = [(k, outcome(as_middle, k, leaf)) for k in reaching]
    assert [(k, c) for k, c in inside if c == "auth"] == []

    person = {key: outcome(daemon.client, key, stranger) for key in RULES if key not in ("hello", "shutdown")}
    assert {k for k, c in person.items() if c == "auth"} == {k for k, r in RULES.items() if not r.person}
    assert outcome(daemon.client, "shutdown", None) == "ok"
    daemon.wait_for(lambda: daemon.proc.poll() is not None, what="the daemon to stop for a person")


def test_a_jobs_list_and_children_default_to_its_own_subtree(daemon_factory):
    daemon = daemon_factory("subagent_auto_close = false\n")
    top = daemon.spawn("spawn say kid")
    kid = daemon.wait_for(lambda: daemon.children(top), what="the kid")[0]["id"]
    other = daemon.spawn("say other")
    for job in (top, kid, other):
        daemon.wait_state(job, "idle")
    with daemon.client(job=top, token=token_of(daemon.show(top)["pid"])) as as_top:
        assert [r["id"] for r in as_top.call("list")["rows"]] == [kid], "a job lists its subtree, not every job"
        assert [r["id"] for r in as_top.call("children")["rows"]] == [kid]
        with pytest.raises(ClientError) as info:
            as_top.call("logs", job=other)
    assert info.value.code == "auth" and f"job {top} may not logs job {other}" in info.value.message
    assert {r["id"] for r in daemon.rows()} == {top, kid, other}, "a person lists everything"

