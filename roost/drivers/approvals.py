"""What an agent's permission request says will run, as the ``what`` of a worker-protocol ``approval``
event (docs/protocols.md): the command line and its cwd, the path and the diff of an edit, the URL of
a fetch, else the tool's input. Shared by the Claude Code and Codex adapters; pure functions.

A ``what`` is whole here: it is what the daemon's rules decide on, so nothing of it is cut (its
bound is the agent's line it came in, at most MAX_FRAME; a longer request is denied unread,
claude_stream.py ``oversize``). The daemon cuts only what it stores and shows
(roost/rules/approvals.py ``bound_what``)."""

from __future__ import annotations

import difflib
import json
from typing import Any, Iterable, Mapping

#: The most characters of the model's own words for a request (its description, Codex's reason) an
#: approval event carries, and of a denial's reason a steer gives Codex.
WORDS_MAX = 2000


def cut(text: str, limit: int) -> str:
    """``text``, or its two ends with a note of how many characters between them were cut."""
    if len(text) <= limit:
        return text
    head = limit // 2
    gone = len(text) - 2 * head
    return f"{text[:head]}\n[… {gone} characters cut by roost …]\n{text[len(text) - head:]}"


def words(text: Any) -> str | None:
    """The model's words for a request, cut to WORDS_MAX; None when it gave none."""
    return cut(text, WORDS_MAX) if isinstance(text, str) and text.strip() else None


def edit_diff(path: str, edits: Iterable[tuple[str, str]]) -> str:
    """A unified diff of ``path`` for replacements (old text, new text): what an Edit or a MultiEdit
    changes, shown as only the replaced lines (the file itself is not read: it may be on another host)."""
    out: list[str] = []
    for old, new in edits:
        out += difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                    fromfile=path, tofile=path, lineterm="", n=0)
    return "\n".join(line.rstrip("\n") for line in out)


def claude_what(tool: str, args: Mapping[str, Any], cwd: str) -> dict[str, Any]:
    """What a Claude Code tool call will do, by tool: Bash its command and cwd, Edit / MultiEdit /
    Write the path and the diff (or the content), WebFetch the URL; any other tool its input."""
    def text(key: str) -> str:
        value = args.get(key)
        return value if isinstance(value, str) else ""

    if tool == "Bash" and text("command"):
        return {"command": text("command"), "cwd": cwd}
    if tool == "Edit" and text("file_path"):
        return {"path": text("file_path"),
                "diff": edit_diff(text("file_path"), [(text("old_string"), text("new_string"))])}
    if tool == "MultiEdit" and text("file_path") and isinstance(args.get("edits"), list):
        pairs = [(str(e.get("old_string", "")), str(e.get("new_string", ""))) for e in args["edits"]
                 if isinstance(e, dict)]
        return {"path": text("file_path"), "diff": edit_diff(text("file_path"), pairs)}
    if tool == "Write" and text("file_path"):
        return {"path": text("file_path"), "content": text("content")}
    if tool == "WebFetch" and text("url"):
        return {"url": text("url")}
    return {"input": dict(args)}


def codex_file_what(changes: Any) -> dict[str, Any]:
    """What a Codex file change will do: every path it writes, one a line (a move's destination
    too: a rule must match each), and the diff of each (Codex's own, as ``item/started`` carried it
    for the change's item)."""
    items = [c for c in changes if isinstance(c, dict)] if isinstance(changes, list) else []
    if not items:
        return {"input": "a file change Codex did not describe"}
    paths = [str(c.get("path", "?")) for c in items]
    moves = [str(c["kind"]["move_path"]) for c in items
             if isinstance(c.get("kind"), dict) and c["kind"].get("move_path")]
    diff = "\n".join(f"--- {path} ({_kind(c.get('kind'))})\n{c.get('diff') or ''}".rstrip("\n")
                     for path, c in zip(paths, items))
    return {"path": "\n".join([*paths, *moves]), "diff": diff}


def _kind(kind: Any) -> str:
    if isinstance(kind, dict):
        return str(kind.get("type")) + (f" to {kind['move_path']}" if kind.get("move_path") else "")
    return str(kind or "update")
