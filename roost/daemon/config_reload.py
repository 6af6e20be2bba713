"""The daemon's config in force, read again when asked — never on a timer.

A reload comes from SIGHUP, from ``roost daemon reload`` (the ``reload`` operation) or, when the
optional ``inotify_simple`` package is installed (``pip install 'roost[watch]'``), from the kernel
telling the daemon that the file was written, moved or removed. So an idle daemon sleeps: nothing
here wakes it unless the file's directory changes. A broken file keeps the settings in force and
the reload says why; docs/config.md#reloading is this in words.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from roost.config import Config, ConfigError, load_config

log = logging.getLogger("roost.daemon")

#: Most changed keys a reload names one by one; past it, the rest are counted.
CHANGES_SHOWN = 50


@dataclass(frozen=True)
class Reloaded:
    """What one reload did: the keys whose values changed, or why the file was not taken."""

    changed: tuple[str, ...]
    error: str | None
    config: str | None

    def to_dict(self) -> dict[str, Any]:
        shown = list(self.changed[:CHANGES_SHOWN])
        if len(self.changed) > CHANGES_SHOWN:
            shown.append(f"… and {len(self.changed) - CHANGES_SHOWN} more")
        return {"reloaded": self.error is None, "changed": shown, "error": self.error, "config": self.config}


def changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The dotted keys (``drivers.pi.model``) whose values differ between two ``to_dict`` trees."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                out.append(name)
            else:
                out.extend(changed_keys(old[key], new[key], name))
        return out
    return [] if old == new else [prefix]


class ConfigFile:
    """The config in force and the file it came from.

    The constructor loads the file and raises ConfigError when it is broken (a daemon refuses to
    start on a broken file). :meth:`reload` reads it again: a broken file leaves the config in
    force, and ``last_error`` says why until a good version is read. A removed file means the
    defaults again."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path is not None else None
        self.config: Config = load_config(self.path)
        self.last_error: ConfigError | None = None

    def reload(self) -> Reloaded:
        source = str(self.path) if self.path is not None else None
        try:
            config = load_config(self.path)
        except ConfigError as exc:
            self.last_error = exc
            return Reloaded((), str(exc), source)
        old, new = self.config.to_dict(), config.to_dict()
        old.pop("source"), new.pop("source")
        self.config, self.last_error = config, None
        return Reloaded(tuple(changed_keys(old, new)), None, source)


class FileNotice:
    """The kernel's word that the config file changed (inotify on its directory, through
    ``inotify_simple``), handed to ``changed``; nothing runs between two notices. The directory is
    watched, not the file, since editors replace a file by renaming another over it."""

    #: What is noticed: a file written and closed, moved in or out, or removed.
    MASK_NAMES = ("CLOSE_WRITE", "MOVED_TO", "MOVED_FROM", "DELETE", "DELETE_SELF", "MOVE_SELF")

    def __init__(self, path: Path, changed: Callable[[], None]) -> None:
        self.path = path
        self.changed = changed
        self._inotify: Any = None

    def start(self) -> str | None:
        """Watch the file; None when watching, else why not (no library, no directory)."""
        try:
            import inotify_simple  # optional: roost[watch]
        except ImportError:
            return "inotify_simple is not installed (pip install 'roost[watch]')"
        mask = 0
        for name in self.MASK_NAMES:
            mask |= getattr(inotify_simple.flags, name)
        notify = inotify_simple.INotify(nonblocking=True)
        try:
            notify.add_watch(self.path.parent, mask)
        except OSError as exc:
            notify.close()
            return f"cannot watch {self.path.parent}: {exc.strerror or exc}"
        self._inotify = notify
        asyncio.get_running_loop().add_reader(notify.fileno(), self._ready)
        return None

    def _ready(self) -> None:
        try:
            events = list(self._inotify.read(timeout=0))
        except BlockingIOError:
            return
        if any(event.name in (self.path.name, "") for event in events):  # "": the directory itself
            self.changed()
        if not os.path.isdir(self.path.parent):
            log.warning("config: %s is gone, so changes to %s are no longer noticed; "
                        "reload with SIGHUP or `roost daemon reload`", self.path.parent, self.path)
            self.stop()

    def stop(self) -> None:
        if self._inotify is not None:
            asyncio.get_running_loop().remove_reader(self._inotify.fileno())
            self._inotify.close()
            self._inotify = None
