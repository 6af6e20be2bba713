"""The client protocol's operations, one module each (pueue's shape).

A module here holds one operation whole and is named for it (``explain.py`` is the ``explain``
operation): its arguments, who may call it, what it does — the message it posts to a job's mailbox
with that message's transition, or the call into the engine — and the shape of its answer, in
``OPERATION`` (an ``Operation`` of the module's name). The server dispatches from ``operations()`` beside the older table in
roost/daemon/server/handlers.py, which keeps the operations not moved here yet. Adding an operation
is one file here and its test (docs/architecture.md#operations).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from roost.daemon.ops.operation import Operation

#: Modules of this package that hold no operation.
_NOT_OPERATIONS = frozenset({"operation"})


@functools.cache
def operations() -> dict[str, Operation]:
    """Every operation module's operations by name, each found by its module's name."""
    found: dict[str, Operation] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in _NOT_OPERATIONS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        op: Operation = module.OPERATION
        if op.name != info.name:
            raise RuntimeError(f"{module.__name__} holds operation {op.name!r}: an operation lives in the "
                               f"module named for it")
        found[op.name] = op
    return found
