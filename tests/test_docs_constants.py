"""Where a doc quotes one of the code's constants with its value, the value is the code's.

The docs name limits as `` `MAX_FRAME` = 1 MiB ``, `` `SCHEMA_VERSION = 1` ``, `` `FAN_OUT` (32) ``,
`` | `QUEUE_BYTES` | 4 MiB | `` or ``5 s (`ABORT_TIMEOUT`)``. This test finds every such quote by
those patterns, reads the constant's value from the module that defines it (without importing
anything) and compares: a limit changed in the code and not in the docs fails here, naming both.
"""

from __future__ import annotations

import ast
import operator
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])

_UNITS = {"": 1, "bytes": 1, "byte": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
          "s": 1, "ms": 0.001, "seconds": 1, "second": 1, "minutes": 60, "min": 60}
_NUMBER = r"(?P<num>\d[\d,]*(?:\.\d+)?)\s?(?P<unit>KiB|MiB|GiB|bytes|byte|ms|seconds|second|minutes|min|s|B)?\b"
#: The ways the docs quote a constant with its value.
QUOTES = [
    re.compile(r"`(?P<name>[A-Z][A-Z0-9_]{2,})` = " + _NUMBER),      # `MAX_FRAME` = 1 MiB
    re.compile(r"`(?P<name>[A-Z][A-Z0-9_]{2,}) = " + _NUMBER + "`"),  # `SCHEMA_VERSION = 1`
    re.compile(r"`(?P<name>[A-Z][A-Z0-9_]{2,})` \(" + _NUMBER + r"\)"),  # `FAN_OUT` (32)
    re.compile(r"\| `(?P<name>[A-Z][A-Z0-9_]{2,})` \| " + _NUMBER + r"[^|]*\|"),  # | `QUEUE_BYTES` | 4 MiB |
    re.compile(_NUMBER + r" \(`(?P<name>[A-Z][A-Z0-9_]{2,})`\)"),    # 5 s (`ABORT_TIMEOUT`)
]
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.LShift: operator.lshift, ast.Pow: operator.pow}


def _value(node: ast.expr, known: dict[str, float]) -> float | None:
    """A module-level constant's number: literals, arithmetic, and constants defined before."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, known), _value(node.right, known)
        return None if left is None or right is None else _OPS[type(node.op)](left, right)
    return None


def code_constants() -> dict[str, dict[str, float]]:
    """Every numeric UPPER_CASE module-level constant of roost: name -> {module: value}."""
    found: dict[str, dict[str, float]] = {}
    for path in sorted((REPO / "roost").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        known: dict[str, float] = {}
        for stmt in ast.parse(path.read_text()).body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target, value = stmt.targets[0], stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                target, value = stmt.target, stmt.value
            else:
                continue
            if isinstance(target, ast.Name) and target.id.isupper():
                number = _value(value, {**{n: v for n, by in found.items() for v in by.values()}, **known})
                if number is not None:
                    known[target.id] = number
                    found.setdefault(target.id, {})[module] = number
    return found


def doc_quotes() -> list[tuple[str, int, str, float, str]]:
    """(doc, line, constant, value in base units, the quote) for every quote in the docs."""
    out = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), start=1):
            for pattern in QUOTES:
                for match in pattern.finditer(line):
                    value = float(match["num"].replace(",", "")) * _UNITS[match["unit"] or ""]
                    out.append((doc.relative_to(REPO).as_posix(), number, match["name"], value, match[0]))
    return out


CONSTANTS = code_constants()
QUOTED = [q for q in doc_quotes() if q[2] in CONSTANTS]


def test_the_patterns_find_the_quotes_the_docs_make():
    """The patterns are not so narrow that they find nothing: the limits the protocol docs quote."""
    names = {name for _, _, name, _, _ in QUOTED}
    assert {"MAX_FRAME", "QUEUE_BYTES", "PROTOCOL_VERSION", "SCHEMA_VERSION", "FAN_OUT", "ABORT_TIMEOUT"} <= names


@pytest.mark.parametrize("doc, line, name, value, quote", QUOTED, ids=[f"{q[0]}:{q[1]}:{q[2]}" for q in QUOTED])
def test_a_quoted_constant_has_the_codes_value(doc, line, name, value, quote):
    defined = CONSTANTS[name]
    assert len(set(defined.values())) == 1, f"{name} has different values in {defined}: say which in {doc}"
    actual = next(iter(defined.values()))
    assert value == pytest.approx(actual), (f"{doc}:{line} quotes {quote!r}, but {name} is {actual:g} "
                                            f"in {', '.join(defined)}")


def test_a_quote_of_a_name_that_is_not_a_constant_is_not_taken_for_one():
    """A value next to a name the code does not define (an environment variable, a key) is no quote."""
    unknown = [q for q in doc_quotes() if q[2] not in CONSTANTS]
    assert all(not name.startswith(("MAX_", "PAGE_", "QUEUE_")) for _, _, name, _, _ in unknown), unknown
