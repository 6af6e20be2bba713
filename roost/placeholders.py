"""The placeholders of a command driver's ``command`` / ``resume_args``, and filling them in.

Apart from the config so that the worker side (roost/programs/command_worker.py), which fills
them, imports nothing of the config's parser: the config checks templates against these names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: The placeholders a command-line template may use.
PLACEHOLDERS = ("prompt", "session", "cwd")

_KNOWN = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


def substitute(arg: str, values: Mapping[str, str]) -> str:
    """One element of a command driver's ``command`` / ``resume_args`` with its placeholders filled.

    Only ``{prompt}``, ``{session}`` and ``{cwd}`` are replaced, in a single pass (a prompt that
    itself contains ``{cwd}`` is left as written); a placeholder missing from ``values`` becomes
    the empty string.
    """
    return _KNOWN.sub(lambda m: values.get(m.group(1), ""), arg)
