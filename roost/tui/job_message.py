"""The base of the app's messages that name one job (open it, write to it, stop it, …)."""

from __future__ import annotations

from textual.message import Message


class JobMessage(Message):
    """A request about the job ``job_id``; subclasses say which request by their name."""

    def __init__(self, job_id: str) -> None:
        super().__init__()
        self.job_id = job_id
