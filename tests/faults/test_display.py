"""Input is text, never terminal control (issue 9, item 9): titles, prompts, texts and reasons
that carry escape sequences are shown with them made visible, through the real daemon and CLI;
the raw ESC byte (or BEL, or an 8-bit CSI) never reaches the terminal."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from roost.text import safe_text

#: What a hostile title or text holds: retitle the window (OSC … BEL), clear the screen and go
#: home (CSI), colour, the 8-bit CSI (U+009B), a carriage return that overwrites the line, DEL.
OSC = "\x1b]0;pwned\x07"
HOSTILE = f"{OSC}\x1b[2J\x1b[H\x1b[31mred\u009b2J\rover\x7f"
#: Bytes that must never be printed: ESC, BEL, CR, DEL and U+009B as UTF-8.
RAW = (b"\x1b", b"\x07", b"\r", b"\x7f", "\u009b".encode())


@pytest.mark.parametrize("text, shown", [
    ("\x1b]0;title\x07", "^[]0;title^G"),
    ("\x1b[2J\x1b[H", "^[[2J^[[H"),
    ("over\rwrite", "over^Mwrite"),
    ("\u009b31m", "\\x9b31m"),
    ("nul\x00 del\x7f", "nul^@ del^?"),
    ("lone \ud800", "lone \\ud800"),
    ("lines\n\tand tabs stay", "lines\n\tand tabs stay"),
    ("plain, accents é and emoji 🐦", "plain, accents é and emoji 🐦"),
])
def test_control_characters_are_made_visible(text, shown):
    assert safe_text(text) == shown
    assert safe_text(shown) == shown, "what is shown is safe already"


def test_printable_text_comes_back_as_it_is():
    title = "an ordinary title"
    assert safe_text(title) is title


def _no_raw(output: bytes, where: str) -> None:
    for byte in RAW:
        assert byte not in output, f"{byte!r} reached the terminal in {where}: {output[:300]!r}"


@pytest.fixture
def cli(daemon):
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        proc = subprocess.run([sys.executable, "-m", "roost.cli", *args], env=daemon.env, capture_output=True,
                              timeout=60, cwd=str(daemon.home))
        if check and proc.returncode != 0:
            raise AssertionError(f"roost {args[0]} exited {proc.returncode}: {proc.stderr!r}")
        _no_raw(proc.stdout, f"roost {args[0]}'s stdout")
        _no_raw(proc.stderr, f"roost {args[0]}'s stderr")
        return proc

    return run


def test_hostile_titles_texts_prompts_and_reasons_never_reach_the_terminal_raw(daemon, cli):
    prompt = f"say {HOSTILE}\nspawn say child \x1b[2J\nfail {OSC}reason"  # `;` would split a child's task
    job = cli("spawn", "--title", f"title {HOSTILE}", prompt).stdout.decode().strip()
    daemon.wait_state(job, "failed")
    child = daemon.wait_for(lambda: daemon.children(job), what="the child")[0]["id"]
    daemon.wait_state(child, "idle")

    listed = cli("ls").stdout.decode()
    assert "title ^[]0;pwned^G^[[2J" in listed
    assert all(line.count("\n") == 0 for line in listed.splitlines())
    logs = cli("logs", job).stdout.decode()
    assert "^[]0;pwned^G^[[2J^[[H^[[31mred\\x9b2J" in logs, "the text, escapes shown"
    assert "failed (^[]0;pwned^Greason)" in logs, "the reason"
    assert "prompt" in logs and "spawn say child ^[[2J" in logs, "the prompt"
    assert "child ^[[2J" in cli("logs", child).stdout.decode()
    shown = cli("show", job).stdout.decode()
    assert "title ^[]0;pwned^G" in shown
    assert f"title {HOSTILE}".encode() not in shown.encode()
    assert "say child ^[[2J" in cli("children", job).stdout.decode()


def test_json_output_is_exact_and_escaped(daemon, cli):
    """json leaves DEL and U+009B raw unless told to write ASCII; the CLI's JSON is ASCII."""
    job = daemon.spawn("say fine", title=f"json {HOSTILE}")
    daemon.wait_state(job, "idle")
    listed = json.loads(cli("ls", "--json").stdout)
    assert [row["title"] for row in listed] == [f"json {HOSTILE}"], "exact JSON: the title as it was given"
    assert json.loads(cli("show", job, "--json").stdout)["title"] == f"json {HOSTILE}"
    assert json.loads(cli("children", job, "--json").stdout) == []


def test_errors_that_echo_job_text_are_shown_safely(daemon, cli):
    job = daemon.spawn("say fine")
    daemon.wait_state(job, "idle")
    refused = cli("spawn", "--cwd", f"/no/such{OSC}", "say x", check=False)  # the daemon quotes it as given
    assert refused.returncode != 0 and b"working directory /no/such^[]0;pwned^G does not exist" in refused.stderr
    said = cli("label", job, f"key{OSC}", "value").stdout.decode()
    assert "key^[]0;pwned^G=value" in said
