"""docs/lifecycle.md prints the table of allowed transitions: it must be the code's table."""

from __future__ import annotations

import re
from pathlib import Path

from roost.models import State
from roost.rules import state_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "lifecycle.md"


def test_the_documented_table_is_the_codes() -> None:
    text = DOC.read_text()
    block = text.split("<!-- state-table -->", 1)[1].split("<!-- /state-table -->", 1)[0]
    rows = {}
    for line in block.strip().splitlines()[2:]:
        kind, froms, tos = (cell.strip() for cell in line.strip("|").split("|"))
        states = lambda cell: frozenset(State(s) for s in re.findall(r"`([a-z_]+)`", cell))  # noqa: E731
        rows[kind.strip("`")] = (states(froms), states(tos))
    assert rows == state_table.ROWS


def test_every_pair_the_table_allows_comes_from_a_row_and_no_row_allows_staying() -> None:
    for (old, new), kinds in state_table.ALLOWED.items():
        assert old != new
        for kind in kinds:
            froms, tos = state_table.ROWS[kind]
            assert old in froms and new in tos
    assert (State.STOPPED, State.WORKING) not in state_table.ALLOWED  # only a restart leaves stopped
    assert state_table.ALLOWED[(State.STOPPED, State.IDLE)] == {"restart"}
