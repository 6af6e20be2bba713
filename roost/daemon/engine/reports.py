"""What children report to their parents, defined once: the structured form the timeline keeps
(and the app shows), and the prompt text an agent receives (format in docs/protocols.md)."""

from __future__ import annotations

from typing import Any

from roost.daemon.storage.index import JobIndex
from roost.daemon.engine.messages import Reports
from roost.daemon.engine.ports import EngineApi
from roost.models import Job, State
from roost.protocol import MAX_FRAME
from roost.rules.lifecycle import reports_opted_out


#: The most text of reports one prompt carries (half a worker-protocol frame).
PROMPT_BYTES = MAX_FRAME // 2


def structured(pending: list[dict[str, Any]], index: JobIndex) -> list[dict[str, Any]]:
    """Outbox rows as the timeline keeps them: one dict per report, nothing to parse."""
    out = []
    for rep in pending:
        child = index.get(rep["child"])
        out.append({"child": rep["child"], "title": child.title if child else rep["child"],
                    "state": rep["state"], "kind": "question" if rep["question"] else "report",
                    "text": rep["text"]})
    return out


def batch(pending: list[dict[str, Any]], index: JobIndex) -> tuple[list[dict[str, Any]], list[int]]:
    """The reports one prompt carries, oldest first, and their outbox ids: as many as fit in
    PROMPT_BYTES (the rest go in the next prompt), and one alone is cut to fit, so a prompt is
    never over the worker protocol's frame."""
    out: list[dict[str, Any]] = []
    ids: list[int] = []
    size = 0
    for rep in structured(pending, index):
        cost = len(rep["text"].encode()) + len(rep["title"].encode()) + 128
        if out and size + cost > PROMPT_BYTES:
            break
        if cost > PROMPT_BYTES:
            rep["text"] = rep["text"].encode()[: PROMPT_BYTES - 1024].decode(errors="ignore") + "…"
        out.append(rep)
        ids.append(pending[len(ids)]["id"])
        size += cost
    return out, ids


def prompt_text(reports: list[dict[str, Any]]) -> str:
    """The prompt that carries children's reports to their parent's agent. Every ``<`` a child
    wrote (its text, its title) is escaped, so no report can close its block or open another:
    the only tags in the prompt are the daemon's."""
    blocks = []
    for rep in reports:
        blocks.append(f'<roost-report child="{rep["child"]}" title="{_attr(rep["title"])}" state="{rep["state"]}" '
                      f'kind="{rep["kind"]}">\n{escape_body(rep["text"])}\n</roost-report>')
    return "\n".join(blocks)


def escape_body(text: str) -> str:
    """A report's text as its block carries it: ``&`` and ``<`` escaped (``html.unescape`` reads it back)."""
    return text.replace("&", "&amp;").replace("<", "&lt;")


def _attr(text: str) -> str:
    return escape_body(text).replace('"', "&quot;").replace("\n", " ")


def route(eng: EngineApi, child: Job, state: State, text: str) -> None:
    """Put a child's finished turn or question in its parent's outbox; the parent's mailbox
    decides what to do with it."""
    if child.parent is None or child.archived_at is not None:
        return
    parent = eng.index.get(child.parent)
    if parent is None or reports_opted_out(parent.labels) or reports_opted_out(child.labels):
        return
    question = state in (State.WAITING, State.BLOCKED)
    limit = eng.config.report_text_max
    body = text if not limit or len(text) <= limit else text[: limit - 1] + "…"
    eng.store.add_report(parent.id, child.id, state.value, body, question, eng.clock())
    eng.timeline(child, "reported", to=parent.id, state=state.value)
    slot = eng.slots.get(child.id)
    if slot is not None:
        slot.last_report_at = eng.monotonic()
    eng.post(parent.id, Reports())
