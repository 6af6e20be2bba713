"""What children report to their parents, defined once: the structured form the timeline keeps
(and the app shows), and the prompt text an agent receives (format in docs/protocols.md)."""

from __future__ import annotations

from typing import Any

from roost.daemon.index import JobIndex


def structured(pending: list[dict[str, Any]], index: JobIndex) -> list[dict[str, Any]]:
    """Outbox rows as the timeline keeps them: one dict per report, nothing to parse."""
    out = []
    for rep in pending:
        child = index.get(rep["child"])
        out.append({"child": rep["child"], "title": child.title if child else rep["child"],
                    "state": rep["state"], "kind": "question" if rep["question"] else "report",
                    "text": rep["text"]})
    return out


def prompt_text(reports: list[dict[str, Any]]) -> str:
    """The prompt that carries children's reports to their parent's agent."""
    blocks = []
    for rep in reports:
        body = rep["text"].replace("</roost-report", "&lt;/roost-report")  # the block's end stays unique
        blocks.append(f'<roost-report child="{rep["child"]}" title="{_attr(rep["title"])}" state="{rep["state"]}" '
                      f'kind="{rep["kind"]}">\n{body}\n</roost-report>')
    return "\n".join(blocks)


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace("\n", " ")
