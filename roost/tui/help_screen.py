"""``?``: the keys that work where you are, read from the bindings themselves (so it cannot go
stale), over the screen they belong to."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Label, Static

from roost.tui.filter_box import FILTER_HELP


def _ours(node: object) -> set[tuple[str, str]]:
    """(action, description) of the bindings roost's own classes declare on ``node``'s class."""
    return {(b.action, b.description) for cls in type(node).__mro__ if cls.__module__.startswith("roost.")
            for b in cls.__dict__.get("BINDINGS", []) if isinstance(b, Binding)}


def _tokens(label: str) -> set[str]:
    """The keys a footer label names: ``PgUp/PgDn`` is pgup and pgdn, ``↑↓`` is ↑ and ↓."""
    parts = {part.lower() for part in label.replace("/", " ").split()}
    return {piece for part in parts for piece in (part if all(c in "↑↓←→" for c in part) else [part])}


def key_lines(screen: Screen[object]) -> list[tuple[str, str]]:
    """(keys, what they do) for every binding active where ``screen``'s focus is, in the order
    the footer lists them: those the footer shows, and roost's own that it leaves out (``j``,
    ``g``…), not the text boxes' and tables' editing keys. Keys of one action go together, and a
    key already named by a shown one (``↑`` beside ``↑↓ move``, ``pgdn`` beside ``PgUp/PgDn``)
    is not listed again."""
    found: list[tuple[tuple[str, str], str, bool]] = []
    for key, active in screen.active_bindings.items():
        binding = active.binding
        if not active.enabled or not binding.description:
            continue
        if not binding.show and (binding.action, binding.description) not in _ours(active.node):
            continue
        found.append(((binding.action, binding.description), binding.key_display or screen.app.get_key_display(binding),
                      binding.show))
    named = set().union(*(_tokens(label) for _, label, show in found if show))
    seen: dict[tuple[str, str], list[str]] = {}
    for what, label, show in found:
        if not show and _tokens(label) <= named:
            continue
        seen.setdefault(what, [])
        if label not in seen[what]:
            seen[what].append(label)
    return [(" ".join(keys), description) for (_, description), keys in seen.items()]


class HelpScreen(ModalScreen[None]):
    """The keys of the screen below, as bound now; Esc, ``?`` or ``q`` closes it."""

    BINDINGS = [Binding("escape,question_mark,q,f1", "dismiss", "close")]

    def __init__(self, below: Screen[object], notes: tuple[str, ...] = ()) -> None:
        super().__init__()
        self._lines = key_lines(below)
        self._notes = notes

    def compose(self) -> ComposeResult:
        table = Text()
        width = max((len(keys) for keys, _ in self._lines), default=4)
        for keys, description in self._lines:
            table.append(f"{keys:>{width}}", style="bold")
            table.append(f"  {description}\n")
        with VerticalScroll(classes="dialog", id="help"):
            yield Label("Keys here", classes="dialog-title")
            yield Static(table)
            filters = any(description == "filter" for _, description in self._lines)
            for note in (*self._notes, *([FILTER_HELP] if filters else [])):  # only where / filters
                yield Label(note, classes="dialog-help", markup=False)
            yield Label("esc / ? : close · docs/keys.md lists every key", classes="dialog-help")
