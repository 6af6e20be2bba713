"""The agent view's listing and the panel's tree kept by changed rows (roost/rules/view_model.py,
row_tree.py) against a recount: after any sequence of updates the listing lists what
``agent_view_rows`` lists and counts what ``header_counts`` counts (a row changed in place touches
that row alone), and the panel's rules read from the kept tree what they read from every row."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roost.models import Job, Row, State
from roost.rules.row_tree import RowTree
from roost.rules.view_model import AgentListing, answerable, header_counts
from roost.rules.views import AGENT_VIEW_MODES, PANEL_MODES, agent_view_rows, panel_rows, subagent_hint_visible, tree_running_ids

IDS = [f"j{n}" for n in range(8)]


def make(job_id: str, state: State = State.WORKING, parent: str | None = None, created: float = 0.0,
         archived: bool = False, parent_open: bool = True, text: str = "", approvals: int = 0,
         descendants: int = 0) -> Row:
    job = Job(id=job_id, title=job_id.upper(), driver="builtin", cwd=".", state=state, state_since=100.0,
              created_at=created, parent=parent, archived_at=50.0 if archived else None, last_text=text,
              approvals=[{"id": f"a{n}", "tool": "Bash"} for n in range(approvals)]
              + [{"tool": "no id"}] * (approvals > 1))
    return Row(job, parent_open=parent_open, descendants=descendants, running_descendants=descendants // 2)


rows_strategy = st.builds(
    make,
    st.sampled_from(IDS),
    state=st.sampled_from(list(State)),
    parent=st.none() | st.sampled_from(IDS),
    created=st.sampled_from([0.0, 1.0, 2.0, 3.0]),
    archived=st.booleans(),
    parent_open=st.booleans(),
    text=st.sampled_from(["", "said", "said more"]),
    approvals=st.integers(0, 3),
    descendants=st.integers(0, 3),
)


def content_change(row: Row, text: str, state: State) -> Row:
    """The same row in the same place, saying something else (and, for a root, in another state)."""
    job = dataclasses.replace(row.job, last_text=text, state=state if row.parent is None else row.state)
    return dataclasses.replace(row, job=job)


def assert_recounted(listing: AgentListing, rows: dict[str, Row]) -> None:
    expected = agent_view_rows(rows.values(), listing.mode)
    assert listing.items == expected
    assert listing.counts.as_dict() == header_counts(item.row for item in expected)
    assert listing.approvals == sum(answerable(item.row) for item in expected)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(mode=st.sampled_from(AGENT_VIEW_MODES), start=st.lists(rows_strategy, max_size=8),
       steps=st.lists(st.tuples(st.lists(st.sampled_from(IDS), min_size=1, max_size=3),
                                st.lists(rows_strategy | st.none(), min_size=3, max_size=3),
                                st.sampled_from(["in place", "any"])), max_size=12))
def test_updates_list_and_count_as_a_recount(mode, start, steps) -> None:
    """Random batches of changed rows (a row comes, leaves, moves, or only says something new)."""
    rows = {row.id: row for row in start}
    listing = AgentListing(mode)
    listing.reset(rows)
    assert_recounted(listing, rows)
    for batch, news, kind in steps:
        before = {item.row.id: item for item in listing.items}
        for job_id, new in zip(batch, news):
            if kind == "in place" and job_id in rows:
                rows[job_id] = content_change(rows[job_id], "changed in place", State.FAILED)
            elif new is None:
                rows.pop(job_id, None)
            else:
                rows[job_id] = dataclasses.replace(new, job=dataclasses.replace(new.job, id=job_id))
        changed = listing.update(rows, batch)
        assert_recounted(listing, rows)
        if changed is not None:  # kept in place: only the changed rows' lines are new objects
            assert changed <= set(batch)
            for item in listing.items:
                assert (item is before[item.row.id]) == (item.row.id not in changed)


def test_a_row_that_says_something_new_changes_one_line_of_ten_thousand() -> None:
    rows = {f"r{n:05d}": make(f"r{n:05d}", created=float(n), state=State.IDLE) for n in range(10_000)}
    listing = AgentListing("hide")
    listing.reset(rows)
    before = list(listing.items)
    rows["r00007"] = content_change(rows["r00007"], "new words", State.FAILED)
    assert listing.update(rows, {"r00007"}) == {"r00007"}
    assert sum(a is not b for a, b in zip(before, listing.items)) == 1
    assert listing.counts.as_dict()["failed"] == 1
    assert_recounted(listing, rows)


@pytest.mark.parametrize("change", ["a new row", "a row left", "a row archived", "a child's parent closed"])
def test_a_row_that_came_left_or_moved_lists_every_row_again(change: str) -> None:
    rows = {"p": make("p", created=1.0), "c": make("c", parent="p", created=2.0), "q": make("q", created=3.0)}
    listing = AgentListing("hide")
    listing.reset(rows)
    if change == "a new row":
        rows["n"] = make("n", created=4.0)
        changed = "n"
    elif change == "a row left":
        del rows["q"]
        changed = "q"
    elif change == "a row archived":
        rows["p"] = make("p", created=1.0, archived=True)
        changed = "p"  # its child is an orphan now, working: listed
    else:
        rows["c"] = make("c", parent="p", created=2.0, parent_open=False)
        changed = "c"
    assert listing.update(rows, {changed}) is None
    assert_recounted(listing, rows)


def test_an_unknown_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown agent view mode 'tree'"):
        AgentListing("tree")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(start=st.lists(rows_strategy, max_size=8),
       steps=st.lists(st.tuples(st.sampled_from(IDS), rows_strategy | st.none()), max_size=16),
       mode=st.sampled_from(PANEL_MODES), now=st.sampled_from([100.0, 120.0, 200.0]))
def test_a_kept_tree_answers_as_one_built_from_every_row(start, steps, mode, now) -> None:
    rows = {row.id: row for row in start}
    tree = RowTree(rows.values())
    for job_id, new in steps:
        rows.pop(job_id, None)
        if new is not None:
            rows[job_id] = dataclasses.replace(new, job=dataclasses.replace(new.job, id=job_id))
        tree.put(job_id, rows.get(job_id))
        assert len(tree) == sum(row.job.archived_at is None for row in rows.values())
        for root in IDS:
            assert panel_rows(tree, root, now, mode, frozenset({"j3"})) == \
                panel_rows(list(rows.values()), root, now, mode, frozenset({"j3"}))
            assert subagent_hint_visible(tree, root, now) == subagent_hint_visible(rows.values(), root, now)
            assert tree_running_ids(tree, root) == tree_running_ids(rows.values(), root)
            below = {line.row.id for line in panel_rows(rows.values(), root, now, "all")}
            assert sorted(row.id for row in tree.below(root)) == sorted(below)


def test_a_parent_cycle_ends_the_walk() -> None:
    tree = RowTree([make("a", parent="b"), make("b", parent="a"), make("c", parent="a")])
    assert sorted(row.id for row in tree.below("a")) == ["b", "c"]
