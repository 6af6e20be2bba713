"""One small function per operation of the client protocol, found through one table.

``handle_line`` parses a frame, checks who may call what (roost/daemon/server/authority.py), runs the operation's handler and
queues the reply on the connection. Handlers only translate arguments into calls of the
Supervisor's API (and the Publisher's for subscriptions); a handler may return a value or an
awaitable, so the sync reads and the async commands look the same here.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from roost import __version__
from roost.daemon.processes.shim_process import SHIMS
from roost.daemon.server import authority
from roost.daemon.server.peers import shim_owner
from roost.daemon.engine import forks, spend
from roost.daemon.git import review, worktrees
from roost.daemon.storage import usage_report
from roost.daemon.storage.search import SEARCH_LIMIT
from roost.models import State
from roost.proctree import read_proc
from roost.protocol import (LIST_LIMIT, LOGS_LIMIT, PROTOCOL_VERSION, ErrorCode, ProtocolError, decode,
                            parse_request)

if TYPE_CHECKING:
    from roost.daemon.server.connection import Connection
    from roost.daemon.supervisor import Supervisor

log = logging.getLogger("roost.daemon")

_STATES = frozenset(s.value for s in State)


@dataclass
class Context:
    """What handlers need besides the request: the supervisor, the daemon's own facts for
    ``status``, a way to stop the daemon (soon: the reply goes out first) and to read its config
    file again."""

    supervisor: Supervisor
    facts: Callable[[], dict[str, Any]]
    stop: Callable[[bool], None]
    reload: Callable[[], dict[str, Any]]
    #: How many open connections said hello as a job (``max_connections_per_job`` bounds them).
    job_connections: Callable[[str], int]


@dataclass
class Request:
    conn: Connection
    id: Any
    op: str
    args: dict[str, Any]

    @property
    def caller(self) -> str | None:
        """The job this connection speaks for, or None for a person."""
        return self.conn.job


Handler = Callable[[Context, Request], Any]
HANDLERS: dict[str, Handler] = {}


def handles(*ops: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for op in ops:
            HANDLERS[op] = fn
        return fn
    return register


async def handle_line(ctx: Context, conn: Connection, line: bytes) -> None:
    """Run one request frame and queue its reply (or error) on the connection."""
    req_id: Any = None
    op = "?"
    try:
        frame = decode(line)
        req_id = frame.get("id")
        req_id, op, args = parse_request(frame)
        if op != "hello" and not conn.hello:
            raise ProtocolError(ErrorCode.NO_HELLO,
                                f"send hello first: {{\"op\": \"hello\", \"args\": {{\"version\": {PROTOCOL_VERSION}}}}}")
        authority.check(op, args, conn.job, ctx.supervisor.index)  # who may call what: the one place
        result = HANDLERS[op](ctx, Request(conn, req_id, op, args))
        if inspect.isawaitable(result):
            result = await result
        conn.reply(req_id, result)
    except ProtocolError as exc:
        conn.fail(req_id if req_id is not None else exc.req_id, exc)
    except Exception as exc:  # a bug must not take the daemon down; say what happened
        log.exception("operation %s failed", op)
        conn.fail(req_id, ProtocolError(ErrorCode.INTERNAL, f"internal error: {exc}"))


# -- who is calling -----------------------------------------------------------------------------------
@handles("hello")
def hello(ctx: Context, req: Request) -> dict[str, Any]:
    args = req.args
    if args["version"] != PROTOCOL_VERSION:
        raise ProtocolError(ErrorCode.VERSION, f"protocol version {args['version']} is not supported "
                                               f"(this daemon speaks {PROTOCOL_VERSION})")
    job = args.get("job") or None
    conn = req.conn
    owner = shim_owner(conn.peer_pid, SHIMS)
    if owner is not None:  # below a worker's shim: that job, whatever it says (docs/protocols.md#authority)
        if owner not in ctx.supervisor.index.jobs:
            raise ProtocolError(ErrorCode.AUTH, f"process {conn.peer_pid} belongs to a spare worker that no job "
                                                f"took yet: it speaks for nobody")
        if job is not None and job != owner:
            raise ProtocolError(ErrorCode.AUTH, f"process {conn.peer_pid} is job {owner}'s (it runs below that job's "
                                                f"worker): it cannot speak as job {job}, whatever token it shows")
        job = owner
    elif job is None and conn.host is not None:
        raise ProtocolError(ErrorCode.AUTH, f"host {conn.host}'s socket takes jobs only: say hello with the job's id and "
                                            f"token (ROOST_JOB_ID, ROOST_TOKEN)")
    if job is None and conn.not_person:
        raise ProtocolError(ErrorCode.AUTH, f"not a person: {conn.not_person}, so this connection must prove a job "
                                            f"with its id and token (ROOST_JOB_ID, ROOST_TOKEN)")
    if owner is None and job is not None and not ctx.supervisor.token_valid(job, args.get("token")):
        raise ProtocolError(ErrorCode.AUTH, f"no valid token for job {job}")
    if owner is None and job is not None and read_proc(conn.peer_pid) is None:
        raise ProtocolError(ErrorCode.AUTH, f"process {conn.peer_pid}, which connected, is gone: a token proves "
                                            f"a job only from a process that can be seen not to be another job's")
    if job is not None and conn.host is not None and ctx.supervisor.index.require(job).host != conn.host:
        raise ProtocolError(ErrorCode.AUTH, f"job {job} is not placed on host {conn.host}: its token is no good on "
                                            f"that host's socket")
    cap = ctx.supervisor.config.max_connections_per_job
    if job is not None and ctx.job_connections(job) >= cap:
        raise ProtocolError(ErrorCode.BUSY, f"job {job} already holds {cap} connections to the daemon, "
                                            f"all one job may (max_connections_per_job); close one first")
    req.conn.job = job
    req.conn.client = str(args.get("client", "?"))
    req.conn.hello = True
    reply: dict[str, Any] = {"version": PROTOCOL_VERSION, "daemon": __version__, "job": job}
    if job is None:  # a person: what they must hear about comes with the greeting, no extra round trip
        reply["store_notice"] = ctx.supervisor.store.notice()
    return reply


# -- commands -----------------------------------------------------------------------------------------
@handles("spawn")
def spawn(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.spawn(req.args, req.caller)


@handles("send")
def send(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.send(req.args["job"], req.args["text"], req.caller)


@handles("stop")
def stop(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.stop(req.args["job"], bool(req.args.get("tree")), req.caller)


@handles("close")
def close(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.close(req.args["job"])


@handles("pin", "unpin")
def pin(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.set_pinned(req.args["job"], req.op == "pin")


@handles("label")
def label(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.set_label(req.args["job"], req.args["key"], req.args["value"])


@handles("report")
def report(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.report(req.caller, req.args["status"], req.args.get("text", ""))


@handles("answer_approval")
def answer_approval(ctx: Context, req: Request) -> Any:
    args = req.args
    return ctx.supervisor.answer_approval(args["approval"], args["decision"], args.get("reason", ""),
                                          args.get("rule"))


@handles("approval_text")
def approval_text(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.approval_text(req.args["approval"], req.args.get("offset", 0))


@handles("archive")
def archive(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.archive(req.args["job"])


@handles("detach")
def detach(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.detach(req.args["job"], req.caller)


@handles("rename")
def rename(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.rename(req.args["job"], req.args["title"])


@handles("unarchive")
def unarchive(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.unarchive(req.args["job"])


@handles("seen")
def seen(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.mark_seen(req.args["job"])


@handles("attach")
def attach(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.attach(req.args["job"], req.conn.conn_id, bool(req.args.get("resume")))


@handles("release")
def release(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.release(req.args["job"], req.conn.conn_id)


# -- reads ----------------------------------------------------------------------------------------------
@handles("show")
def show(ctx: Context, req: Request) -> Any:
    row = ctx.supervisor.show(req.args["job"])  # with what its whole tree spent, and its budget
    return {**row, **spend.show_fields(ctx.supervisor.engine, req.args["job"])}


@handles("list")
def list_page(ctx: Context, req: Request) -> Any:
    unknown = sorted(set(req.args.get("states", ())) - _STATES)
    if unknown:
        raise ProtocolError(ErrorCode.BAD_ARGS, f"list: unknown state {unknown[0]!r} "
                                                f"(known: {', '.join(sorted(_STATES))})")
    return ctx.supervisor.list_page(**{"limit": LIST_LIMIT, **req.args})


@handles("children")
def children(ctx: Context, req: Request) -> Any:
    target = req.args.get("job") or req.caller
    if target is None:
        raise ProtocolError(ErrorCode.BAD_ARGS, "children: give a job id (no calling job to default to)")
    return ctx.supervisor.children_of(target, req.args.get("limit", LIST_LIMIT), req.args.get("cursor"))


@handles("logs")
def logs(ctx: Context, req: Request) -> Any:
    before, after = req.args.get("before"), req.args.get("after")
    if before is not None and after is not None:
        raise ProtocolError(ErrorCode.BAD_ARGS, "logs: give before or after, not both")
    return ctx.supervisor.logs(req.args["job"], req.args.get("limit", LOGS_LIMIT), before, after)


# -- subscriptions --------------------------------------------------------------------------------------
@handles("subscribe")
def subscribe(ctx: Context, req: Request) -> Any:
    args = req.args
    return ctx.supervisor.publisher.subscribe(req.conn, req.id, args["what"], job=args.get("job"),
                                              after=args.get("after") or 0, limit=args.get("limit", 200),
                                              inline=bool(args.get("inline")))


@handles("unsubscribe")
def unsubscribe(ctx: Context, req: Request) -> None:
    ctx.supervisor.publisher.unsubscribe(req.conn, req.args["sub"])


# -- the daemon ------------------------------------------------------------------------------------------
@handles("status")
def status(ctx: Context, req: Request) -> dict[str, Any]:
    return {**ctx.facts(), **ctx.supervisor.status()}


@handles("acknowledge")
def acknowledge(ctx: Context, req: Request) -> None:
    """A person read the store's notice (``roost daemon status --acknowledge``)."""
    ctx.supervisor.store.acknowledge()
    ctx.supervisor.publisher.store_notice(None)


@handles("reload")
def reload(ctx: Context, req: Request) -> dict[str, Any]:
    return ctx.reload()


@handles("shutdown")
def shutdown(ctx: Context, req: Request) -> dict[str, Any]:
    """Stop the daemon; with ``all``, close every worker too (else they run on: docs/reliability.md)."""
    ctx.stop(bool(req.args.get("all")))
    return {"stopping": True}


# -- worktrees and review (docs/worktrees.md) ---------------------------------------------------------------
@handles("worktrees")
def worktrees_list(ctx: Context, req: Request) -> Any:
    return worktrees.listing(ctx.supervisor.engine)


@handles("worktrees_prune")
def worktrees_prune(ctx: Context, req: Request) -> Any:
    return worktrees.prune(ctx.supervisor.engine)


@handles("diff")
def diff(ctx: Context, req: Request) -> Any:
    return review.diff(ctx.supervisor, req.args["job"], req.args.get("offset", 0), req.args.get("snapshot"))


@handles("merge")
def merge(ctx: Context, req: Request) -> Any:
    return review.merge(ctx.supervisor, req.args["job"])


@handles("search")
def search(ctx: Context, req: Request) -> Any:
    args = req.args
    return ctx.supervisor.search(args["text"], args.get("under"), bool(args.get("archived")),
                                 args.get("limit", SEARCH_LIMIT), args.get("before"))


@handles("fork")
def fork(ctx: Context, req: Request) -> Any:
    args = req.args
    return forks.fork(ctx.supervisor, args["job"], req.caller, bool(args.get("worktree")), args.get("title"),
                      args.get("prompt"))


# -- usage and budgets (docs/agents.md#usage, docs/config.md#budgets) ----------------------------------------
@handles("usage")
def usage(ctx: Context, req: Request) -> Any:
    sup = ctx.supervisor
    return usage_report.report(sup.store.usage, sup.index, sup.clock(), req.args.get("days", 7),
                               req.args.get("job"), sup.config.budget_daily_usd)


@handles("budget")
def budget(ctx: Context, req: Request) -> Any:
    return ctx.supervisor.set_budget(req.args["job"], req.args.get("usd"), req.args.get("tokens"))
