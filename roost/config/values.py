"""The checks of config values, each naming what it expected and what it got, with a suggestion
for a typo. Private to roost.config, whose settings.py holds the schema that uses them; apart so
that each file holds one idea (the values here, the keys and tables there)."""

from __future__ import annotations

import difflib
import math
import re
from datetime import date, datetime, time
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from roost.placeholders import PLACEHOLDERS

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


# --- describing values and refusing them -------------------------------------------------


class _Bad(Exception):
    """A value refused; ``suffix`` extends the dotted key (``[2]``, ``.NAME``)."""

    def __init__(self, message: str, suffix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.suffix = suffix


def _describe(value: Any) -> str:
    """How an error names a value: its TOML type and (for scalars) the value."""
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value!r}"
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        return f"string {text!r}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime):
        return f"datetime {value.isoformat()}"
    if isinstance(value, date):
        return f"date {value.isoformat()}"
    if isinstance(value, time):
        return f"time {value.isoformat()}"
    return type(value).__name__  # pragma: no cover - tomllib makes nothing else


def _quote_all(values: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _suggest(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


def _unknown_name(what: str, name: str, known: Iterable[str], listed_as: str) -> str:
    names = sorted(known)
    hint = _suggest(name, names)
    return f"unknown {what} '{name}' ({hint + ' ' if hint else ''}{listed_as}: {', '.join(names)})"


# --- value checkers: each returns the value to keep or raises _Bad ------------------------

Check = Callable[[Any], Any]


def _seconds(*, positive: bool = False) -> Check:
    bound = "> 0" if positive else ">= 0"

    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Bad(f"expected a number of seconds, got {_describe(value)}")
        if not math.isfinite(value):
            raise _Bad(f"expected a finite number of seconds, got {_describe(value)}")
        if value < 0 or (positive and value == 0):
            raise _Bad(f"expected a number of seconds {bound}, got {_describe(value)}")
        return float(value)

    return check


def _integer(minimum: int, maximum: int | None = None) -> Check:
    bound = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(f"expected an integer {bound}, got {_describe(value)}")
        if value < minimum or (maximum is not None and value > maximum):
            raise _Bad(f"expected an integer {bound}, got {_describe(value)}")
        return value

    return check


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"expected true or false, got {_describe(value)}")
    return value


def _choice(values: tuple[str, ...]) -> Check:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in values:
            hint = _suggest(value, values) if isinstance(value, str) else ""
            raise _Bad(f"expected one of {_quote_all(values)}, got {_describe(value)}" + (f" ({hint})" if hint else ""))
        return value

    return check


def _choices(values: tuple[str, ...], hints: Mapping[str, str]) -> Check:
    """An array of distinct choices; ``hints`` says what a lone string of the old form means now."""
    one = _choice(values)

    def check(value: Any) -> tuple[str, ...]:
        if not isinstance(value, list):
            hint = ""
            if isinstance(value, str):
                hint = hints.get(value) or (f'did you mean ["{value}"]?' if value in values else "")
            raise _Bad(f"expected an array of {_quote_all(values)}, got {_describe(value)}" + (f" ({hint})" if hint else ""))
        for i, item in enumerate(value):
            try:
                one(item)
            except _Bad as bad:
                raise _Bad(bad.message, f"[{i}]") from None
            if item in value[:i]:
                raise _Bad(f"'{item}' is listed twice", f"[{i}]")
        return tuple(value)

    return check


def _string(*, nonempty: bool = False) -> Check:
    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise _Bad(f"expected a string, got {_describe(value)}")
        if nonempty and not value:
            raise _Bad("expected a non-empty string, got string ''")
        return value

    return check


def _placeholders_ok(value: str) -> None:
    for match in _PLACEHOLDER.finditer(value):
        if match.group(1) not in PLACEHOLDERS:
            close = difflib.get_close_matches(match.group(1), PLACEHOLDERS, n=1, cutoff=0.6)
            hint = f" (did you mean '{{{close[0]}}}'?)" if close else ""
            names = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            raise _Bad(f"unknown placeholder '{match.group(0)}'{hint}; the placeholders are {names}")


def _string_list(*, nonempty: bool = False, placeholders: bool = False) -> Check:
    def check(value: Any) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise _Bad(f"expected an array of strings, got {_describe(value)}")
        if nonempty and not value:
            raise _Bad("expected a non-empty array of strings, got an empty array")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise _Bad(f"expected a string, got {_describe(item)}", f"[{i}]")
            if nonempty and i == 0 and not item:
                raise _Bad("expected the program to run, got string ''", "[0]")
            if placeholders:
                try:
                    _placeholders_ok(item)
                except _Bad as bad:
                    raise _Bad(bad.message, f"[{i}]") from None
        return tuple(value)

    return check


def _env_table(value: Any) -> Mapping[str, str]:
    if not isinstance(value, dict):
        raise _Bad(f"expected a table of environment variables (NAME = \"value\"), got {_describe(value)}")
    for name, item in value.items():
        if not name or "=" in name or "\0" in name:
            raise _Bad("expected an environment variable name (not empty, without '=')", f".{name}")
        if not isinstance(item, str):
            raise _Bad(f"expected a string, got {_describe(item)}", f".{name}")
        if "\0" in item:
            raise _Bad("expected a string without NUL characters", f".{name}")
    return MappingProxyType(dict(value))


def _amount(value: Any) -> float:
    """A finite number >= 0 (a Ray resource: CPUs, or a custom one's share)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _Bad(f"expected a number >= 0, got {_describe(value)}")
    return float(value)


def _resources(value: Any) -> Mapping[str, float]:
    """A table of Ray resources a worker needs (``gpu_box = 0.01``): names to amounts >= 0."""
    if not isinstance(value, dict):
        raise _Bad(f"expected a table of resources (NAME = amount), got {_describe(value)}")
    out = {}
    for name, item in value.items():
        if not name or "\0" in name:
            raise _Bad("expected a resource name (not empty)", f".{name}")
        try:
            out[name] = _amount(item)
        except _Bad as exc:
            raise _Bad(exc.message, f".{name}") from None
    return MappingProxyType(out)


def _theme(value: Any) -> str:
    # Only the type here: the names come from Textual, which the headless core must not import.
    # The app checks the name against its themes with Config.check_theme.
    if not isinstance(value, str) or not value:
        raise _Bad(f"expected a Textual theme name, got {_describe(value)}")
    return value


def _dollars(value: Any) -> float:
    """A budget or a price in dollars: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _Bad(f"expected a number of dollars >= 0, got {_describe(value)}")
    return float(value)


#: What a ``[prices.MODEL]`` table may say: dollars per million tokens of each kind.
PRICE_KEYS = ("input", "output", "cache_read", "cache_write")


def _prices(value: Any) -> Any:
    """``[prices.MODEL]`` tables: each model's dollars per million input, output, cache read and
    cache write tokens (a kind left out costs nothing), for agents that report no cost of their own."""
    if not isinstance(value, dict):
        raise _Bad(f"expected a table of [prices.MODEL] tables, got {_describe(value)}")
    out = {}
    for model, table in value.items():
        if not isinstance(table, dict):
            raise _Bad(f"expected a table ([prices.{model}]), got {_describe(table)}", f".{model}")
        for key, price in table.items():
            if key not in PRICE_KEYS:
                raise _Bad(f"unknown key (known keys: {', '.join(PRICE_KEYS)})", f".{model}.{key}")
            try:
                _dollars(price)
            except _Bad as bad:
                raise _Bad(bad.message.replace("dollars", "dollars per million tokens"), f".{model}.{key}") from None
        out[model] = MappingProxyType({k: float(v) for k, v in table.items()})
    return MappingProxyType(out)
