"""What every command shares: how it speaks to a person (``say``, ``fail``), how a refusal of the
daemon becomes an exit code, and the context that connects to the daemon (``Ctx``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click

from roost.client import Client, ClientError, connect, notice_line
from roost.text import safe_text


def say(text: str, err: bool = False) -> None:
    """Print a line for a person. Every human line goes through here: titles, texts, reasons and
    the daemon's messages carry what jobs wrote, escape sequences included (JSON output is
    escaped by json itself and printed as it is)."""
    click.echo(safe_text(text), err=err)


def fail(message: str, code: int = 1) -> NoReturn:
    """Say ``roost: message`` on stderr and exit with ``code``."""
    say(f"roost: {message}", err=True)
    sys.exit(code)


#: Refusals that mean "that job cannot take this" (exit 2) rather than "something broke" (exit 1).
JOB_REFUSALS = ("unknown_job", "stopped", "archived")


def refused(exc: ClientError) -> NoReturn:
    """The daemon's refusal on stderr: exit 2 when the job cannot take it, 1 otherwise."""
    fail(exc.message, 2 if exc.code in JOB_REFUSALS else 1)


@contextmanager
def errors() -> Iterator[None]:
    """The daemon's refusal on stderr with an exit code; Ctrl-C and a closed pipe end quietly."""
    try:
        yield
    except ClientError as exc:
        refused(exc)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `roost ls --json | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class Ctx:
    """What the ``roost`` group hands every command: the ``--config`` it was given."""

    def __init__(self, config: str | None) -> None:
        self.config = config

    def client(self) -> Client:
        """A connection to the daemon (started when none runs); a store repair it has not heard
        acknowledged yet is said on stderr first, whatever the command."""
        try:
            client = connect(config=self.config)
        except ClientError as exc:
            fail(exc.message)
        notice = client.greeting.get("store_notice")
        if notice:
            say(f"roost: {notice_line(notice)}", err=True)
        return client

    def call(self, op: str, **args: Any) -> Any:
        """One request on a connection of its own; a refusal exits (``refused``)."""
        with self.client() as client:
            try:
                return client.call(op, **args)
            except ClientError as exc:
                refused(exc)


pass_ctx = click.make_pass_decorator(Ctx)
