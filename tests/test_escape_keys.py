"""Esc is Esc (roost/tui/escape_keys.py): ESC and a plain character in one read are Esc then the
key, escape sequences and pastes are read as Textual reads them, and an Alt key that reaches the
app anyway (ESC and the key in two reads) is Esc then the key there too."""

from __future__ import annotations

from textual import events

from roost.tui.agent_view import AgentViewScreen
from roost.tui.escape_keys import EscapeFirstParser, split_meta

from tui_helpers import SIZE, make_app, open_job, until


def parsed(*reads: str) -> list[tuple[str, str | None]]:
    """What the parser makes of what the terminal sent, read by read, then the end of input."""
    parser = EscapeFirstParser()
    out = [event for data in reads for event in parser.feed(data)] + list(parser.feed(""))
    return [(event.key, event.character) if isinstance(event, events.Key) else (type(event).__name__, None)
            for event in out]


def test_esc_then_a_key_in_one_read_is_esc_then_the_key():
    assert parsed("\x1bg") == [("escape", "\x1b"), ("g", "g")]
    # Textual alone made this ('^', 'g', down, enter): the ^g a shell job was sent
    assert parsed("\x1bg\x1b[B\r") == [("escape", "\x1b"), ("g", "g"), ("down", None), ("enter", "\r")]
    assert parsed("\x1bG") == [("escape", "\x1b"), ("G", "G")]
    assert parsed("\x1b/") == [("escape", "\x1b"), ("slash", "/")]


def test_escape_sequences_and_a_lone_esc_are_read_as_before():
    assert parsed("\x1b[B", "\x1bOA") == [("down", None), ("up", None)]
    assert parsed("\x1b\x1b") == [("escape", "\x1b"), ("escape", "\x1b")]
    assert parsed("\x1b[5~") == [("pageup", None)]


def test_esc_inside_a_paste_is_the_pasted_texts():
    assert ("escape", "\x1b") not in parsed("\x1b[200~a\x1bgb\x1b[201~")
    assert parsed("\x1b[200~a\x1b[201~\x1bq")[-2:] == [("escape", "\x1b"), ("q", "q")]


def test_an_alt_key_is_esc_then_the_key():
    assert [(k.key, k.character) for k in split_meta(events.Key("alt+g", "g")) or ()] == [
        ("escape", "\x1b"), ("g", "g")]
    assert [k.key for k in split_meta(events.Key("alt+shift+g", "G")) or ()] == ["escape", "G"]
    assert [k.key for k in split_meta(events.Key("alt+slash", "/")) or ()] == ["escape", "slash"]
    assert split_meta(events.Key("g", "g")) is None and split_meta(events.Key("alt+up", None)) is None


async def test_an_alt_key_on_a_job_screen_goes_back_and_is_no_text(daemon):
    job = daemon.spawn("say ready", title="alt target")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        app.post_message(events.Key("alt+g", "g"))  # ESC and g in two reads, within Textual's delay
        await until(pilot, lambda: isinstance(app.screen, AgentViewScreen), "back on the agent view")
        assert screen.composer.value == ""
    assert [e["kind"] for e in daemon.timeline(job)].count("prompt") == 1, "nothing was sent"
