"""Which job each pending approval is of, and how recent ones were settled: an answer names only the
approval, so the daemon must find its job (roost/daemon/engine/approvals.py applies them)."""

from __future__ import annotations

import collections
import secrets

from roost.protocol import ErrorCode, ProtocolError

#: How many settled approvals the daemon remembers, to say how one was settled when it is answered again.
SETTLED_KEPT = 1000
_ID_LETTERS = "abcdefghjkmnpqrstuvwxyz23456789"


class Book:
    """Which job each pending approval belongs to (an answer names only the approval), and how the
    last SETTLED_KEPT were settled; memory only: a restart settles every pending one as gone."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}
        self.settled: collections.OrderedDict[str, str] = collections.OrderedDict()

    def new_id(self) -> str:
        while True:
            aid = "ap-" + "".join(secrets.choice(_ID_LETTERS) for _ in range(6))
            if aid not in self.jobs and aid not in self.settled:
                return aid

    def done(self, aid: str, how: str) -> None:
        self.jobs.pop(aid, None)
        self.settled[aid] = how
        while len(self.settled) > SETTLED_KEPT:
            self.settled.popitem(last=False)

    def refusal(self, aid: str) -> ProtocolError:
        """Why an answer to ``aid`` cannot be taken: it was settled (and how), or there is no such one."""
        how = self.settled.get(aid)
        if how is not None:
            return ProtocolError(ErrorCode.REFUSED, f"approval {aid} was already settled: {how}")
        return ProtocolError(ErrorCode.BAD_ARGS, f"no pending approval {aid!r} (roost approvals lists them; one "
                                                 "settled before the daemon restarted is not remembered)")
