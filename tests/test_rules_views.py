"""The view rules: agent view, subagent panel, footer hint, tree stop, and row text."""

from __future__ import annotations

import math

import pytest

from roost.models import ACTIVE_STATES, PEEK_MAX, Job, Row, State, question_line
from roost.rules.row_text import (activity_text, age_seconds, asked, format_age, peek_line, readable_text,
                                  usage_text)
from roost.rules.view_model import header_counts
from roost.rules.views import (AGENT_VIEW_MODES, PANEL_MODES, SUBAGENT_HINT, AgentViewRow, PanelRow, agent_view_rows,
                               filter_rows, listed_in_agent_view, newly_notable, panel_rows,
                               subagent_hint_visible, tree_running_ids)

NOW = 1_000_000.0
LIFE = 30.0
FRESH = 5.0  # seconds since state_since: well within the lifetime
EXPIRED = 1000.0  # long past it


def mk(
    id: str,
    state: State = State.WORKING,
    parent: str | None = None,
    *,
    created: float = 0.0,
    age: float = FRESH,
    pid: int | None = None,
    reaped: bool = False,
    archived: bool = False,
    parent_open: bool = True,
    last_text: str = "",
    usage: dict | None = None,
    descendants: int = 0,
    running: int = 0,
) -> Row:
    """A row whose state began ``age`` seconds before NOW; created_at is NOW - 10_000 + created."""
    job = Job(
        id=id,
        title=id.upper(),
        driver="builtin",
        cwd="/tmp",
        state=state,
        state_since=NOW - age,
        created_at=NOW - 10_000 + created,
        parent=parent,
        pid=pid,
        reaped=reaped,
        archived_at=NOW - 1 if archived else None,
        last_text=last_text,
        usage=usage or {},
    )
    return Row(job, parent_open=parent_open, descendants=descendants, running_descendants=running)


def ids(rows) -> list[str]:
    return [r.row.id for r in rows]


def panel_ids(rows, **kw) -> list[str]:
    return ids(panel_rows(rows, "root", NOW, **kw))


ROOT = mk("root", State.WORKING, pid=1)


# ============================================================================ subagent panel

# (shown fresh, shown expired) per mode, for a row with no worker.
ALWAYS = {"normal": (True, True), "recent": (True, True), "all": (True, True)}
FINISHED = {"normal": (False, False), "recent": (True, False), "all": (True, True)}
LINGERING = {"normal": (True, False), "recent": (True, False), "all": (True, True)}
PANEL_EXPECTED = {
    State.QUEUED: ALWAYS,
    State.STARTING: ALWAYS,
    State.WORKING: ALWAYS,
    State.WAITING: ALWAYS,
    State.BLOCKED: ALWAYS,
    State.RATE_LIMITED: ALWAYS,  # live work waiting for its reset: never out of sight
    State.IDLE: FINISHED,  # no worker: finished; with a worker: see below
    State.DONE: FINISHED,
    State.FAILED: LINGERING,
    State.STOPPED: LINGERING,
}


def test_panel_table_covers_every_state():
    assert set(PANEL_EXPECTED) == set(State)
    assert PANEL_MODES == ("normal", "recent", "all")


@pytest.mark.parametrize("mode", PANEL_MODES)
@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("worker", ["none", "up", "reaped"])
@pytest.mark.parametrize("expired", [False, True])
def test_panel_visibility_per_state_and_mode(state, mode, worker, expired):
    pid = None if worker == "none" else 42
    child = mk("c", state, "root", age=EXPIRED if expired else FRESH, pid=pid, reaped=worker == "reaped")
    if state is State.IDLE and worker == "up":
        expected = True  # an idle child whose worker is up shows in every mode, however long
    else:
        expected = PANEL_EXPECTED[state][mode][expired]
    assert panel_ids([ROOT, child], mode=mode) == (["c"] if expected else [])


@pytest.mark.parametrize(
    "state, mode",
    [
        (State.FAILED, "normal"),
        (State.STOPPED, "normal"),
        (State.FAILED, "recent"),
        (State.STOPPED, "recent"),
        (State.DONE, "recent"),
        (State.IDLE, "recent"),
    ],
)
@pytest.mark.parametrize("lifetime", [LIFE, 10.0])
def test_panel_lifetime_boundaries(state, mode, lifetime):
    def shown(age: float) -> bool:
        child = mk("c", state, "root", age=age)
        return panel_ids([ROOT, child], mode=mode, lifetime=lifetime) == ["c"]

    assert shown(lifetime - 0.001)
    assert not shown(lifetime)
    assert not shown(lifetime + 0.001)
    assert shown(-1.0)  # a state_since ahead of the clock (skew) counts as fresh


@pytest.mark.parametrize("state", [State.WORKING, State.WAITING, State.BLOCKED, State.FAILED, State.IDLE])
@pytest.mark.parametrize("mode, expected", [("normal", []), ("recent", []), ("all", ["c"])])
def test_panel_hidden_rows_leave_except_in_all(state, mode, expected):
    child = mk("c", state, "root", pid=7)
    assert panel_ids([ROOT, child], mode=mode) == ["c"]
    assert panel_ids([ROOT, child], mode=mode, hidden=frozenset({"c"})) == expected
    assert panel_ids([ROOT, child], mode=mode, hidden=frozenset({"other"})) == ["c"]


@pytest.mark.parametrize("mode", PANEL_MODES)
def test_panel_never_shows_archived_rows(mode):
    rows = [ROOT, mk("c", State.WORKING, "root", archived=True), mk("d", State.WORKING, "root")]
    assert panel_ids(rows, mode=mode) == ["d"]


@pytest.mark.parametrize("mode", PANEL_MODES)
def test_panel_excludes_open_job_and_other_trees(mode):
    rows = [ROOT, mk("c", State.WORKING, "root"), mk("other", State.WORKING), mk("oc", State.WORKING, "other")]
    assert panel_ids(rows, mode=mode) == ["c"]
    # The open job's own row need not be among the rows.
    assert ids(panel_rows(rows[1:], "root", NOW, mode=mode)) == ["c"]


@pytest.mark.parametrize(
    "parent_state, age, hide",
    [
        (State.DONE, FRESH, False),
        (State.FAILED, EXPIRED, False),
        (State.IDLE, FRESH, False),  # no worker
        (State.WORKING, FRESH, True),  # hidden with x
    ],
)
def test_panel_keeps_ancestor_of_shown_row(parent_state, age, hide):
    rows = [
        ROOT,
        mk("p", parent_state, "root", age=age),
        mk("mid", State.DONE, "p", created=1),
        mk("leaf", State.WAITING, "mid", created=2),
    ]
    hidden = frozenset({"p"}) if hide else frozenset()
    out = panel_rows(rows, "root", NOW, hidden=hidden)
    assert [(r.row.id, r.depth, r.plus) for r in out] == [("p", 1, 2), ("mid", 2, 1), ("leaf", 3, 0)]
    # Once nothing below is shown, the kept rows go too.
    rows[-1] = mk("leaf", State.DONE, "mid", created=2)
    assert panel_rows(rows, "root", NOW, hidden=hidden) == []


def three_level_tree() -> list[Row]:
    """root
    ├ b  failed 1      (fresh)
    ├ c  done 2        (kept for c1)
    │ └ c1 working 7
    └ a  working 3
      ├ a1 done 4      (recent only)
      └ a2 working 5
        └ a2x waiting 6
    """
    return [
        ROOT,
        mk("b", State.FAILED, "root", created=1),
        mk("c", State.DONE, "root", created=2),
        mk("c1", State.WORKING, "c", created=7),
        mk("a", State.WORKING, "root", created=3),
        mk("a1", State.DONE, "a", created=4),
        mk("a2", State.WORKING, "a", created=5),
        mk("a2x", State.WAITING, "a2", created=6),
        mk("unrelated", State.WORKING, created=0),
    ]


def test_panel_three_level_tree_normal():
    out = panel_rows(three_level_tree(), "root", NOW)
    assert all(isinstance(r, PanelRow) for r in out)
    assert [(r.row.id, r.depth, r.prefix, r.plus, r.label) for r in out] == [
        ("a", 1, "", 2, "A (+2)"),
        ("a2", 2, "└ ", 1, "└ A2 (+1)"),
        ("a2x", 3, "  └ ", 0, "  └ A2X"),
        ("b", 1, "", 0, "B"),
        ("c", 1, "", 1, "C (+1)"),
        ("c1", 2, "└ ", 0, "└ C1"),
    ]


def test_panel_three_level_tree_recent_puts_finished_below_running():
    out = panel_rows(three_level_tree(), "root", NOW, mode="recent")
    assert [(r.row.id, r.depth, r.plus) for r in out] == [
        ("a", 1, 3),
        ("a2", 2, 1),
        ("a2x", 3, 0),
        ("a1", 2, 0),  # done a moment ago: below its running sibling, though older
        ("b", 1, 0),
        ("c", 1, 1),
        ("c1", 2, 0),
    ]


def test_panel_sibling_order_groups_then_created_then_id():
    rows = [
        ROOT,
        mk("z-failed", State.FAILED, "root", created=0),
        mk("y-blocked", State.BLOCKED, "root", created=9),
        mk("x-idle", State.IDLE, "root", created=1, pid=3),
        mk("b-work", State.WORKING, "root", created=5),
        mk("a-wait", State.WAITING, "root", created=5),
        mk("s-start", State.STARTING, "root", created=2),
    ]
    assert panel_ids(rows) == ["s-start", "a-wait", "b-work", "y-blocked", "z-failed", "x-idle"]


@pytest.mark.parametrize("depth, prefix", [(1, ""), (2, "└ "), (3, "  └ "), (4, "    └ "), (5, "      └ ")])
def test_panel_prefix_per_depth_and_plus_counts_whole_subtree(depth, prefix):
    chain = [ROOT] + [mk(f"n{d}", State.WORKING, "root" if d == 1 else f"n{d - 1}", created=d) for d in range(1, 6)]
    row = panel_rows(chain, "root", NOW)[depth - 1]
    assert (row.row.id, row.depth, row.prefix, row.plus) == (f"n{depth}", depth, prefix, 5 - depth)
    assert row.label == prefix + f"N{depth}" + (f" (+{5 - depth})" if depth < 5 else "")


@pytest.mark.parametrize("mode", ["", "Normal", "tree", "hide"])
def test_panel_unknown_mode_raises(mode):
    with pytest.raises(ValueError, match=repr(mode)):
        panel_rows([ROOT], "root", NOW, mode=mode)


# ============================================================================ footer hint


def test_hint_text():
    assert SUBAGENT_HINT == "/subagents to see subagents"


@pytest.mark.parametrize(
    "age, lifetime, visible",
    [
        (-1.0, LIFE, False),  # before: done in the future (clock skew)
        (0.0, LIFE, True),  # the moment it finished
        (15.0, LIFE, True),
        (LIFE - 0.001, LIFE, True),
        (LIFE, LIFE, False),  # boundary: gone
        (100.0, LIFE, False),
        (9.999, 10.0, True),
        (10.0, 10.0, False),
    ],
)
def test_hint_timing(age, lifetime, visible):
    rows = [ROOT, mk("c", State.DONE, "root", age=age)]
    assert subagent_hint_visible(rows, "root", NOW, lifetime=lifetime) is visible


@pytest.mark.parametrize("state", [s for s in State if s is not State.DONE])
def test_hint_only_for_done(state):
    assert not subagent_hint_visible([ROOT, mk("c", state, "root", age=1.0)], "root", NOW)


@pytest.mark.parametrize(
    "rows, visible",
    [
        ([ROOT, mk("c", State.WORKING, "root"), mk("g", State.DONE, "c", age=1.0)], True),  # nested
        ([ROOT, mk("o", State.WORKING), mk("og", State.DONE, "o", age=1.0)], False),  # other tree
        ([mk("root", State.DONE, age=1.0)], False),  # the open job itself
        ([ROOT, mk("c", State.DONE, "root", age=1.0, archived=True)], False),
    ],
)
def test_hint_looks_at_descendants_only(rows, visible):
    assert subagent_hint_visible(rows, "root", NOW) is visible


# ============================================================================ tree stop


def test_tree_running_ids_nested():
    rows = [
        mk("root", State.WORKING),
        mk("a", State.WORKING, "root", created=1),
        mk("a1", State.WAITING, "a", created=2),
        mk("a1x", State.BLOCKED, "a1", created=3),
        mk("b", State.DONE, "root", created=4),
        mk("b1", State.STARTING, "b", created=5),
        mk("b2", State.IDLE, "b", created=6, pid=9),
        mk("c", State.FAILED, "root", created=7),
        mk("d", State.STOPPED, "root", created=8),
        mk("e", State.WORKING, "root", created=9, archived=True),
        mk("other", State.WORKING, created=0),
        mk("other1", State.WORKING, "other", created=0),
    ]
    assert tree_running_ids(rows, "root") == ["a", "a1", "a1x", "b1"]
    # Depth-first, siblings oldest first, whatever order the rows arrive in.
    assert tree_running_ids(rows[::-1], "root") == ["a", "a1", "a1x", "b1"]
    assert tree_running_ids(rows, "b") == ["b1"]
    assert tree_running_ids(rows, "a1x") == []
    assert tree_running_ids(rows, "missing") == []


# ============================================================================ agent view


def test_agent_view_modes():
    assert AGENT_VIEW_MODES == ("hide", "inline")


def test_agent_view_hide_leaves_out_held_children_newest_first():
    rows = [
        mk("old", State.IDLE, created=1, descendants=2, running=1),
        mk("new", State.DONE, created=5),
        mk("tie-b", State.WORKING, created=3),
        mk("tie-a", State.WORKING, created=3),
        mk("kid", State.WORKING, "old", created=9),
        mk("kid2", State.DONE, "old", created=8),
    ]
    out = agent_view_rows(rows)
    assert all(isinstance(r, AgentViewRow) for r in out)
    assert [(r.row.id, r.prefix, r.depth) for r in out] == [
        ("new", "", 0),
        ("tie-a", "", 0),
        ("tie-b", "", 0),
        ("old", "", 0),
    ]
    assert out[-1].summary == "2 subagents (1 running)"


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize(
    "why",
    ["parent not open", "parent missing", "parent archived", "grandparent chain, parent not open"],
)
def test_agent_view_orphan_listed_only_while_active(state, why):
    rows = [mk("p", State.DONE, created=1, descendants=1)]
    if why == "parent not open":
        rows.append(mk("o", state, "p", created=5, parent_open=False))
    elif why == "parent missing":
        rows = [mk("o", state, "gone", created=5, parent_open=True)]
    elif why == "parent archived":
        rows[0] = mk("p", State.DONE, created=1, archived=True)
        rows.append(mk("o", state, "p", created=5, parent_open=True))
    else:
        rows += [mk("mid", State.DONE, "p", created=2), mk("o", state, "mid", created=5, parent_open=False)]
    listed = "o" in ids(agent_view_rows(rows))
    assert listed is (state in ACTIVE_STATES)


@pytest.mark.parametrize("state", list(State))
def test_agent_view_held_child_never_listed_in_hide(state):
    rows = [mk("p", State.WORKING), mk("c", state, "p", parent_open=True)]
    assert ids(agent_view_rows(rows, "hide")) == ["p"]


def test_agent_view_listed_orphan_sorts_among_roots():
    rows = [
        mk("r1", State.IDLE, created=1),
        mk("r3", State.IDLE, created=3),
        mk("orph", State.WAITING, "r1", created=2, parent_open=False),
    ]
    assert [(r.row.id, r.depth, r.prefix) for r in agent_view_rows(rows)] == [
        ("r3", 0, ""),
        ("orph", 0, ""),
        ("r1", 0, ""),
    ]


def test_agent_view_inline_lists_children_depth_first():
    rows = [
        mk("r1", State.IDLE, created=1, descendants=3, running=1),
        mk("r2", State.WORKING, created=9),
        mk("c2", State.DONE, "r1", created=4),
        mk("c1", State.DONE, "r1", created=2, descendants=1, running=1),
        mk("g1", State.WORKING, "c1", created=3, parent_open=False),
        mk("stray", State.DONE, "gone", created=5),
    ]
    out = agent_view_rows(rows, "inline")
    assert [(r.row.id, r.depth, r.prefix, r.summary) for r in out] == [
        ("r2", 0, "", ""),
        ("stray", 0, "", ""),  # parent absent: a root in inline mode, whatever its state
        ("r1", 0, "", "3 subagents (1 running)"),
        ("c1", 1, "↳ ", "1 subagent (1 running)"),
        ("g1", 2, "  ↳ ", ""),
        ("c2", 1, "↳ ", ""),
    ]


@pytest.mark.parametrize("mode", AGENT_VIEW_MODES)
def test_agent_view_never_lists_archived(mode):
    rows = [
        mk("r", State.WORKING, archived=True),
        mk("c", State.WORKING, "r", archived=True, parent_open=False),
        mk("k", State.IDLE, created=1),
        mk("kc", State.WORKING, "k", archived=True, parent_open=False),
    ]
    assert ids(agent_view_rows(rows, mode)) == ["k"]


@pytest.mark.parametrize(
    "n, k, text",
    [(0, 0, ""), (1, 0, "1 subagent (0 running)"), (1, 1, "1 subagent (1 running)"), (3, 2, "3 subagents (2 running)")],
)
@pytest.mark.parametrize("mode", AGENT_VIEW_MODES)
def test_agent_view_summary(n, k, text, mode):
    (row,) = agent_view_rows([mk("r", State.IDLE, descendants=n, running=k)], mode)
    assert row.summary == text


@pytest.mark.parametrize("mode", ["", "Hide", "tree", "all"])
def test_agent_view_unknown_mode_raises(mode):
    with pytest.raises(ValueError, match=repr(mode)):
        agent_view_rows([], mode)


# ============================================================================ row text


@pytest.mark.parametrize("state", list(State))
def test_age_freezes_when_finished(state):
    row = mk("j", state, created=0, age=600)  # created NOW-10_000, state since NOW-600: ran 9_400 s
    finished = state in (State.DONE, State.FAILED, State.STOPPED)
    assert age_seconds(row, NOW) == (9_400 if finished else 10_000)
    assert age_seconds(row, NOW + 500) == (9_400 if finished else 10_500)


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0s"),
        (-5, "0s"),
        (math.nan, "0s"),
        (5, "5s"),
        (59.99, "59s"),
        (60, "1m"),
        (179, "2m"),
        (3599, "59m"),
        (3600, "1h"),
        (2 * 3600 + 3599, "2h"),
        (86399, "23h"),
        (86400, "1d"),
        (4 * 86400 + 86399, "4d"),
    ],
)
def test_format_age(seconds, text):
    assert format_age(seconds) == text


@pytest.mark.parametrize(
    "text, width, peek",
    [
        ("", 60, ""),
        ("\n  \n\t\n", 60, ""),
        ("first\nsecond\n\n   \n", 60, "second"),
        ("  lots   of\t spaces  ", 60, "lots of spaces"),
        ("abcdefghij", 10, "abcdefghij"),  # exactly the width: not cut
        ("abcdefghijk", 10, "abcdefghi…"),
        ("a  b  c  d  e  f", 5, "a b …"),  # collapsed before cutting
        ("abc", 1, "…"),
        ("abc", 0, ""),
        ("x" * 100, 60, "x" * 59 + "…"),
    ],
)
def test_peek_line(text, width, peek):
    out = peek_line(mk("j", last_text=text), width)
    assert out == peek
    assert len(out) <= max(width, 0)


@pytest.mark.parametrize(
    "usage, text",
    [
        ({}, ""),
        ({"input": 1000, "output": 200, "context_tokens": 6000, "context_window": 200_000}, "1.2k tok · ctx 3%"),
        ({"input": 950}, "950 tok"),
        ({"input": 950, "cost": 0.042}, "950 tok · $0.04"),
        ({"input": 950, "cost": 0.0042, "cost_estimate": True}, "950 tok · ~<$0.01"),
        ({"input": 950, "cost": 123.4, "context_tokens": 0, "context_window": 9}, "950 tok · $123 · ctx 0%"),
        ({"input": 950, "cost": 0}, "950 tok"),
        ({"output": 12_345}, "12k tok"),
        ({"input": 9_960}, "10k tok"),
        ({"input": 999_600}, "1M tok"),
        ({"input": 1_500_000, "output": 0}, "1.5M tok"),
        ({"input": 2_000_000_000}, "2B tok"),
        ({"context_tokens": 100_000, "context_window": 200_000}, "ctx 50%"),
        ({"context_tokens": 100, "context_window": 200_000}, "ctx <1%"),
        ({"context_tokens": 0, "context_window": 200_000}, "ctx 0%"),
        ({"context_tokens": 3_400}, "ctx 3.4k"),
        ({"context_tokens": 3_400, "context_window": 0}, "ctx 3.4k"),
        ({"input": "lots", "output": None, "context_window": 5}, ""),
        ({"input": True, "context_tokens": -3}, ""),
    ],
)
def test_usage_text(usage, text):
    assert usage_text(mk("j", usage=usage)) == text


# --------------------------------------------------------------------------- issue 10: header, notify, filter


def _r(job_id: str, state: State, title: str = "t", reason: str = "") -> Row:
    return Row(Job(id=job_id, title=title, driver="builtin", cwd="/", state=state, reason=reason))


def test_header_counts_needing_and_failed():
    rows = [_r("a", State.WORKING), _r("b", State.QUEUED), _r("c", State.WAITING), _r("d", State.BLOCKED),
            _r("e", State.FAILED), _r("f", State.DONE)]
    assert header_counts(rows) == {"jobs": 6, "needs you": 2, "failed": 1}


def test_newly_notable_says_each_entry_once_and_nothing_on_the_first_look():
    rows = [_r("a", State.WAITING), _r("b", State.FAILED)]
    assert newly_notable(None, rows, ["needs_input", "failed"]) == []
    before = {"a": State.WORKING, "b": State.FAILED}
    assert [(what, row.id) for what, row in newly_notable(before, rows, ["needs_input", "failed"])] == [
        ("needs_input", "a")]
    assert newly_notable({"a": State.BLOCKED}, [_r("a", State.WAITING)], ["needs_input"]) == [], \
        "blocked to waiting still needs you: no second ring"
    assert newly_notable({}, [_r("c", State.DONE)], ["needs_input"]) == [], "done is not asked for"


def test_filter_rows_by_words_ids_and_states():
    rows = [_r("ab12", State.FAILED, "Fix the parser"), _r("cd34", State.WAITING, "write docs"),
            _r("ef56", State.QUEUED, "fix docs")]
    assert [r.id for r in filter_rows(rows, "fix")] == ["ab12", "ef56"]
    assert [r.id for r in filter_rows(rows, "fix docs")] == ["ef56"]
    assert [r.id for r in filter_rows(rows, "CD3")] == ["cd34"]
    assert [r.id for r in filter_rows(rows, "s:failed")] == ["ab12"]
    assert [r.id for r in filter_rows(rows, "s:waiting s:queued")] == ["cd34", "ef56"]
    assert [r.id for r in filter_rows(rows, "s:needs")] == ["cd34"]
    assert [r.id for r in filter_rows(rows, "s:queued fix")] == ["ef56"]
    assert filter_rows(rows, "s:nonsense") == []
    assert len(filter_rows(rows, "")) == 3


def test_activity_says_why_a_job_failed_or_stopped():
    failed = _r("a", State.FAILED, reason="its worker died: exit 2")
    assert activity_text(failed, 60) == ("its worker died: exit 2", True)
    assert activity_text(failed, 10) == ("its worke…", True)
    assert activity_text(_r("b", State.STOPPED, reason="stopped by a person"), 60) == ("stopped by a person", False)
    working = _r("c", State.WORKING)
    working.job.last_text = "busy\nstill busy"
    assert activity_text(working, 60) == ("still busy", False)


def asking(state: State, question: str, last_text: str = "what it said last") -> Row:
    """A row as the app gets it: the record through the wire (the question is on it only while waiting)."""
    job = Job(id="q1", title="t", driver="claude", cwd="/", state=state, question=question, last_text=last_text)
    return Row.from_wire(Row(job).to_wire())


def test_a_waiting_row_shows_its_question_not_its_last_text():
    question = "Claude Code asks to use Bash: rm -rf build\nallow it?"
    row = asking(State.WAITING, question)
    assert activity_text(row, 80) == ("Claude Code asks to use Bash: rm -rf build allow it?", False)
    assert activity_text(row, 12) == ("Claude Code…", False)
    assert asked(row) == "Claude Code asks to use Bash: rm -rf build allow it?"
    # out of waiting the question is gone from the row: its last line again
    for state in (State.WORKING, State.IDLE, State.DONE):
        assert activity_text(asking(state, question), 80) == ("what it said last", False)
        assert asked(asking(state, question)) == ""
    # blocked asks with its report (its last text); waiting without a question, its last text
    assert asked(asking(State.BLOCKED, "", "need the staging password")) == "need the staging password"
    assert asked(asking(State.WAITING, "")) == "what it said last"
    assert activity_text(asking(State.WAITING, ""), 80) == ("what it said last", False)


@pytest.mark.parametrize("length", [PEEK_MAX - 1, PEEK_MAX, PEEK_MAX + 1, 100_000])
def test_a_rows_question_is_one_line_of_at_most_the_peek_width_keeping_its_start_and_end(length):
    question = "use Bash: " + "x" * (length - len("use Bash: ") - len(" ok?")) + " ok?"
    line = question_line(question)
    assert len(line) == min(length, PEEK_MAX)
    assert line.startswith("use Bash: ") and line.endswith(" ok?")
    assert ("…" in line) == (length > PEEK_MAX)
    assert question_line("a\n\n  b\tc ") == "a b c"
    full = Row(Job(id="q1", title="t", driver="claude", cwd="/", state=State.WAITING, question=question))
    assert full.to_wire(full=True)["question"] == question and full.to_wire()["question"] == line


def test_readable_text_turns_report_blocks_into_words():
    wire = ('noted while working: <roost-report child="9zqb" title="a &quot;b&quot;" state="waiting" '
            'kind="question">\nwhich one? &lt;/roost-report\n</roost-report>')
    assert readable_text(wire) == 'noted while working: ↩ a "b" [9zqb] waiting (question):\nwhich one? </roost-report\n'
    assert readable_text("plain <b>text</b>") == "plain <b>text</b>"


@pytest.mark.parametrize("state", list(State))
def test_the_agent_view_lists_a_row_by_one_rule(state):
    """``listed_in_agent_view`` is what the app's rows, the daemon's snapshot and its pushes share:
    roots always, children only inline or while orphaned and still working or waiting."""
    assert listed_in_agent_view(True, True, state) and listed_in_agent_view(False, True, state, inline=True)
    assert not listed_in_agent_view(False, True, state)
    assert listed_in_agent_view(False, False, state) is (state in ACTIVE_STATES)
    root = Row(job=Job(id="p", title="p", driver="builtin", cwd="/"), parent_open=True)
    child = Row(job=Job(id="c", title="c", driver="builtin", cwd="/", parent="p", state=state), parent_open=False)
    assert ("c" in [r.row.id for r in agent_view_rows([root, child])]) is listed_in_agent_view(False, False, state)
