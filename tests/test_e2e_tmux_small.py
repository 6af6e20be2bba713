"""Small things of the app in a real terminal (tmux): where the cursor starts, what the panel's x does."""

from __future__ import annotations

from test_e2e_tmux import ROOST, term  # noqa: F401  (term is a fixture)


def test_roost_demo_starts_on_the_top_row(daemon, term):
    """It started with the cursor on the oldest row, the bottom one."""
    term.tmux("new-session", "-d", "-s", "app", "-x", "100", "-y", "30", "-e", "COLORTERM=truecolor",
              ROOST, "demo")
    screen = term.wait_for(lambda s: "say hello" in s and "? help" in s, "the demo's rows")
    rows = [line for line in screen.splitlines() if "say hello" in line or "refactor the parser" in line]
    assert "say hello" in rows[0], "the newest demo job is the top row"
    term.keys("Enter")
    term.wait_for(lambda s: s.splitlines()[0].lstrip().startswith("say hello"), "the top row's job to open")
