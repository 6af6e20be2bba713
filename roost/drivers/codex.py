"""The Codex driver: one long-lived ``codex app-server`` per job, speaking its JSON-RPC on stdio.

What it relies on, measured with Codex 0.169.0 against a fake Responses API (docs/agents.md):

- ``initialize`` (then the ``initialized`` notification), then ``thread/start`` (or ``thread/resume``
  with the thread id, in a new process too) answers with the thread: its id is the job's session.
- ``turn/start`` answers at once with the turn's id and streams notifications: ``item/completed``
  (an ``agentMessage``'s whole text, an ``mcpToolCall``, a ``commandExecution``…),
  ``thread/tokenUsage/updated`` (``last`` is one model call) and ``turn/completed`` whose status is
  ``completed``, ``interrupted`` or ``failed``. ``turn/interrupt`` ends the turn within a second.
- Approvals are requests from Codex that wait in the turn for an answer: a tool of roost's own MCP
  server is allowed at once; anything else is an ``approval`` event — a command with its ``command``
  and ``cwd``, a file change with the path and diff its item carried at ``item/started`` — answered
  by the person's decision (``accept`` / ``decline``; the reason of a deny goes to the turn as a
  ``turn/steer``). ``serverRequest/resolved`` says Codex no longer waits on one (an interrupted
  turn). Closing stdin ends the process.
- A failing model call is retried by Codex itself (``request_max_retries`` quietly, then
  ``stream_max_retries`` times with an ``error`` notification whose ``willRetry`` is true); the turn
  then completes ``failed`` with the last error, whose ``codexErrorInfo`` says what kind it was. Each
  retry is also a ``retrying`` event, a 429 or a usage limit a ``limited`` one (roost/drivers/limits.py).

One idea at about 410 lines: Codex's app-server protocol, message by message, into roost's events.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from roost.drivers import limits
from roost.drivers.usage import codex_call
from roost.drivers.approvals import codex_file_what, words
from roost.drivers.base import (Adapter, Driver, Launch, LaunchContext, base_urls, existing_cwd, find_agent_program,
                                inherited_env, line_field)
from roost.drivers.mcp import MCP_NAME, mcp_config
from roost.models import Job
from roost.protocol import encode, loads
from roost.worker_protocol import Oversize, approval, approval_withdrawn, note, response, text_events, turn_end

INSTALL_HINT = "npm install -g @openai/codex"
#: What roost sets on Codex's command line, before the profile's ``args`` (which may set it back):
#: Codex's feature that retries a refused connection for ever ("Reconnecting... waiting for network"
#: every 5 s doubling to 60 s, whatever the provider's retry settings: measured with 0.169.0) is off,
#: so a provider nobody can reach fails the turn after ``stream_max_retries`` (docs/agents.md).
NETWORK_ARGS = ("-c", "features.unbounded_connection_retries=false")
#: What Codex prints on stderr at every start under a CODEX_HOME in the temporary directory: never why it ended.
STARTUP_NOISE = ("WARNING: proceeding, even though we could not create PATH aliases",)
#: Codex's requests that approve one action, and how an answer is written for each.
APPROVALS: dict[str, Callable[[bool], dict[str, Any]]] = {
    "item/commandExecution/requestApproval": lambda yes: {"decision": "accept" if yes else "decline"},
    "item/fileChange/requestApproval": lambda yes: {"decision": "accept" if yes else "decline"},
    "mcpServer/elicitation/request": lambda yes: {"action": "accept" if yes else "decline", "content": {}},
}


def thread_params(job: Job, ctx: LaunchContext) -> dict[str, Any]:
    """What ``thread/start`` and ``thread/resume`` carry (on Codex's stdin): the job's cwd, roost's tools
    as an MCP server (the one Claude Code gets, with the job's variables), and the configured model,
    sandbox and approval policy."""
    server = {k: v for k, v in mcp_config()["mcpServers"][MCP_NAME].items() if k != "type"}
    server["env"] = ctx.roost_env(job)  # Codex passes few variables on; these go over its stdin, never argv
    params: dict[str, Any] = {"cwd": job.cwd, "config": {"mcp_servers": {MCP_NAME: server}},
                              "sandbox": ctx.options.get("sandbox", "workspace-write"),
                              "approvalPolicy": ctx.options.get("approval_policy", "on-request")}
    if ctx.options.get("model"):
        params["model"] = str(ctx.options["model"])
    return params


class CodexDriver(Driver):
    env_prefixes = ("OPENAI_", "CODEX_", "NODE_")
    kind = "codex"
    ready_timeout = 60.0

    def __init__(self) -> None:
        self._params: dict[str, Any] = {}

    def check(self, options: Mapping[str, Any]) -> None:
        find_agent_program("Codex", str(options.get("command", "codex")), options.get("env") or {}, INSTALL_HINT, "18")

    def launch(self, job: Job, ctx: LaunchContext) -> Launch:
        options = ctx.options
        extra_env: Mapping[str, str] = options.get("env") or {}
        program = find_agent_program("Codex", str(options.get("command", "codex")), extra_env, INSTALL_HINT, "18")
        cwd = existing_cwd(job, "Codex")
        home = os.path.expanduser(str(options.get("codex_home") or ""))
        if not home:
            own = ctx.state_dir / "codex-home"
            own.mkdir(parents=True, exist_ok=True)
            home = str(own)
        argv = [program, "app-server", *NETWORK_ARGS, *map(str, options.get("args") or ())]
        env = inherited_env({"CODEX_HOME": home, **extra_env, **ctx.roost_env(job)})
        self._params = thread_params(job, ctx)
        return Launch(argv=argv, env=env, cwd=cwd, session=job.session, record=ctx.record(job), writable=(home,))

    def provider_urls(self, options: Mapping[str, Any]) -> list[str]:
        """OpenAI's API, OPENAI_BASE_URL, and each ``base_url`` a ``-c model_providers...`` argument sets."""
        given = [m for a in options.get("args") or () for m in re.findall(r'base_url\s*=\s*"([^"]+)"', str(a))]
        return base_urls({"env": {**(options.get("env") or {}), **{f"_{i}_BASE_URL": u for i, u in enumerate(given)}}},
                         {"OPENAI_BASE_URL": "https://api.openai.com"})

    def fork(self, source: Job, sessions_dir: Path, new_id: str) -> tuple[str | None, str | None]:
        """Codex's app-server forks a thread itself (``thread/fork``) at the fork's first start."""
        return None, source.session

    def adapter(self, job: Job) -> Adapter:
        return CodexAdapter(thread=job.session, params=self._params, fork_of=job.fork_of)


class CodexAdapter(Adapter):
    """Worker protocol in, app-server JSON-RPC out; Codex's notifications in, worker-protocol events out.

    It keeps the turn in flight (the run token of the prompt, and Codex's turn id once ``turn/start``
    answers) and ends it once, at ``turn/completed``. An approval request does not end it: it is an
    ``approval`` event, answered by the ``approval_answer`` that names it.
    """

    #: Not re-adopted after a restart of the daemon: the turn hangs on JSON-RPC requests in flight
    #: (``calls``: a callback each, the ``turn/start`` whose answer names Codex's turn among them) that
    #: cannot be written down, and Codex answers each only once (docs/reliability.md).
    survives_restart = False

    stderr_noise = STARTUP_NOISE

    def __init__(self, thread: str | None, params: dict[str, Any], fork_of: str | None = None) -> None:
        self.thread = thread
        #: The thread a fork's first start forks (``thread/fork``) instead of starting a new one.
        self.fork_of = fork_of
        self.params = params
        self.ready = False
        self.run: Any = None
        self.turn: str | None = None
        #: Our JSON-RPC requests waiting for an answer: id -> what to do with it.
        self.calls: dict[int, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {}
        self.ids = itertools.count(1)
        #: The approvals Codex waits on, by the worker-protocol id (its request id as text): the request's
        #: own id and method.
        self.pending: dict[str, tuple[Any, str]] = {}
        #: The file changes of items in flight, by item id (an approval of one names only the item).
        self.changes: dict[str, Any] = {}
        #: Abort commands taken while the turn still runs: answered after its ``turn_end``.
        self.aborts: list[Any] = []
        #: How many times Codex said it retries the model call in this turn.
        self.retries = 0
        self._emit: Callable[[dict[str, Any]], None] = lambda event: None
        self._write: Callable[[bytes], None] = lambda data: None

    def bind(self, emit: Callable[[dict[str, Any]], None], write: Callable[[bytes], None]) -> None:
        self._emit, self._write = emit, write

    def _call(self, method: str, params: dict[str, Any],
              then: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> bytes:
        call_id = next(self.ids)
        self.calls[call_id] = then
        return encode({"jsonrpc": "2.0", "id": call_id, "method": method, "params": params})

    def _state(self) -> dict[str, Any]:
        return {"session": self.thread, "busy": self.run is not None}

    # -- commands from the daemon ---------------------------------------------------------------
    def encode(self, command: dict[str, Any]) -> bytes:
        kind, req_id = str(command.get("type")), command.get("id")
        if kind == "get_state":
            if self.ready:
                self._emit(response(req_id, kind, True, self._state()))
                return b""
            return self._call("initialize", {"clientInfo": {"name": "roost", "version": "1"}},
                              lambda answer: self._initialized(req_id, answer))
        if kind == "prompt":
            return self._prompt(req_id, command.get("run"), str(command.get("message", "")))
        if kind == "approval_answer":
            return self._answer(req_id, command)
        if kind == "abort":
            denied = list(self.pending)  # the daemon denies first; this is so none is ever left pending
            out = b"".join(self._decision(wid, False) for wid in denied)
            for wid in denied:
                self._emit(approval_withdrawn(wid))
            if self.run is None:
                self._emit(response(req_id, kind, True))
                return out
            self.aborts.append(req_id)
            return out + (self._interrupt() if self.turn else b"")
        # A steer would queue behind the running turn anyway: the daemon then delivers at the turn's end.
        self._emit(response(req_id, kind, False, error=f"Codex takes {kind} messages between turns only"))
        return b""

    def _initialized(self, req_id: Any, answer: dict[str, Any]) -> list[dict[str, Any]]:
        if "error" in answer:
            return [response(req_id, "get_state", False, error=_error(answer))]
        self._write(encode({"jsonrpc": "2.0", "method": "initialized"}))
        if self.thread:
            method, params = "thread/resume", {**self.params, "threadId": self.thread, "excludeTurns": True}
        elif self.fork_of:
            method, params = "thread/fork", {**self.params, "threadId": self.fork_of, "excludeTurns": True}
        else:
            method, params = "thread/start", self.params
        self._write(self._call(method, params, lambda reply: self._thread_open(req_id, reply)))
        return []

    def _thread_open(self, req_id: Any, answer: dict[str, Any]) -> list[dict[str, Any]]:
        if "error" in answer:
            return [response(req_id, "get_state", False, error=f"Codex could not open the thread: {_error(answer)}")]
        self.thread = str(answer["result"]["thread"]["id"])
        self.ready = True
        return [response(req_id, "get_state", True, self._state())]

    def _prompt(self, req_id: Any, run: Any, message: str) -> bytes:
        self.run = run
        self._emit(response(req_id, "prompt", True))
        self._emit({"type": "turn_start", "run": run})
        self.turn, self.retries = None, 0
        return self._call("turn/start", {"threadId": self.thread, "input": [{"type": "text", "text": message}]},
                          self._turn_started)

    def _answer(self, req_id: Any, command: dict[str, Any]) -> bytes:
        """A decision on one pending approval: Codex's ``accept`` or ``decline``; a decline's reason
        reaches the model as a steer of the turn it waits in (a decision carries no words)."""
        wid = str(command.get("approval"))
        if wid not in self.pending:
            self._emit(response(req_id, "approval_answer", False, error=f"Codex waits on no approval {wid!r}"))
            return b""
        allow = command.get("decision") == "allow"
        self._emit(response(req_id, "approval_answer", True))
        out = self._decision(wid, allow)
        if not allow and self.turn and command.get("reason"):
            text = f"(roost) the person denied that: {words(str(command['reason']))}"
            out += self._call("turn/steer", {"threadId": self.thread, "expectedTurnId": self.turn,
                                             "input": [{"type": "text", "text": text}]}, lambda answer: [])
        return out

    def _decision(self, wid: str, allow: bool) -> bytes:
        request_id, method = self.pending.pop(wid)
        return encode({"jsonrpc": "2.0", "id": request_id, "result": APPROVALS[method](allow)})

    def _turn_started(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        if "error" in answer:
            run, self.run = self.run, None
            return [turn_end(run, "failed", error=_error(answer))]
        self.turn = str(answer["result"]["turn"]["id"])
        if self.aborts:
            self._write(self._interrupt())
        return []

    def _interrupt(self) -> bytes:
        return self._call("turn/interrupt", {"threadId": self.thread, "turnId": self.turn}, lambda answer: [])

    # -- Codex's stdout -------------------------------------------------------------------------
    def decode(self, line: bytes) -> list[dict[str, Any]]:
        try:
            message = loads(line)
        except ValueError:  # not JSON, or JSON roost does not take (roost.protocol.loads)
            message = None
        if not isinstance(message, dict):
            return [{"type": "malformed", "line": line[:200].decode(errors="replace")}]
        method = message.get("method")
        if method is None:
            then = self.calls.pop(message.get("id"), None)  # type: ignore[arg-type]
            return then(message) if then else []
        params = message.get("params") or {}
        if "id" in message:
            return self._on_request(message["id"], str(method), params)
        handler = {"item/started": self._on_item_started, "item/completed": self._on_item,
                   "serverRequest/resolved": self._on_resolved, "thread/tokenUsage/updated": self._on_usage,
                   "turn/completed": self._on_turn_completed, "error": self._on_error}.get(str(method))
        return handler(params) if handler else []

    def oversize(self, line: Oversize) -> list[dict[str, Any]]:
        """A line over the frame limit, skipped unread. What Codex would wait on forever is answered
        from the line's first bytes: an approval is declined with why (nobody could be shown it
        whole), an answer to roost's own call fails that call; a turn's end still ends the turn."""
        said = note(f"skipped {line.describe()} from Codex")
        method, ident = line_field(line.head, "method"), line_field(line.head, "id")
        if method in APPROVALS and ident is not None:
            self._write(encode({"jsonrpc": "2.0", "id": ident, "result": APPROVALS[method](False)}))
            return [note(f"Codex asked for {method} in a request of {line.size} bytes, over the frame limit: "
                         "roost declined it, since nobody could be shown it whole")]
        if ident is not None and method is not None:
            self._write(encode({"jsonrpc": "2.0", "id": ident,
                                "error": {"code": -32600, "message": f"roost could not read {line.describe()}"}}))
        elif ident in self.calls:  # the answer to a call of roost's: the call failed
            return [said, *self.calls.pop(ident)({"error": {"message": f"Codex answered with {line.describe()}"}})]
        elif method == "turn/completed":
            status = line_field(line.tail, "status", last=True)
            return [said, *self._on_turn_completed({"turn": {"status": status, "error": {
                "message": f"its end was {line.describe()}"}}})]
        return [said]

    def _on_request(self, request_id: Any, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """An approval Codex waits on: roost's own tools are allowed at once, the rest is an approval."""
        if method == "mcpServer/elicitation/request" and params.get("serverName") == MCP_NAME:
            self._write(encode({"jsonrpc": "2.0", "id": request_id, "result": APPROVALS[method](True)}))
            return []
        if method not in APPROVALS:
            self._write(encode({"jsonrpc": "2.0", "id": request_id,
                                "error": {"code": -32601, "message": f"roost does not answer {method}"}}))
            return []
        wid = str(request_id)
        self.pending[wid] = (request_id, method)
        if method == "item/commandExecution/requestApproval":
            tool, what = "exec_command", {"command": str(params.get("command") or ""),
                                          "cwd": str(params.get("cwd") or self.params.get("cwd") or "")}
        elif method == "item/fileChange/requestApproval":
            tool, what = "apply_patch", codex_file_what(self.changes.get(str(params.get("itemId"))))
        else:
            server = str(params.get("serverName") or "?")
            tool, what = f"mcp__{server}", {"input": {"server": server, "message": params.get("message")}}
        return [approval(wid, tool, what, description=words(params.get("reason")))]

    def _on_item_started(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        item = params.get("item") or {}
        if item.get("type") == "fileChange" and item.get("id"):
            self.changes[str(item["id"])] = item.get("changes")
        return []

    def _on_resolved(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Codex no longer waits on a request (its turn was interrupted, say)."""
        wid = str(params.get("requestId"))
        return [approval_withdrawn(wid)] if self.pending.pop(wid, None) is not None else []

    def _on_item(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        item = params.get("item") or {}
        kind = item.get("type")
        self.changes.pop(str(item.get("id")), None)
        if kind == "agentMessage" and str(item.get("text", "")).strip():
            return text_events(str(item["text"]).strip())
        if kind == "mcpToolCall":
            result, error = item.get("result") or {}, item.get("error")
            text = (error or {}).get("message") or "".join(
                c.get("text", "") for c in result.get("content") or () if isinstance(c, dict))
            failed = bool(error) or item.get("status") == "failed" or bool(result.get("isError"))
            return [{"type": "tool", "name": f"mcp__{item.get('server')}__{item.get('tool')}",
                     "args": item.get("arguments"), "result": text, "error": failed}]
        if kind == "commandExecution":
            return [{"type": "tool", "name": "exec_command", "args": {"command": item.get("command")},
                     "result": str(item.get("aggregatedOutput") or ""),
                     "error": item.get("status") != "completed" or item.get("exitCode") not in (0, None)}]
        if kind == "fileChange":
            return [{"type": "tool", "name": "apply_patch", "args": {"changes": item.get("changes")},
                     "result": str(item.get("status")), "error": item.get("status") != "completed"}]
        return []

    def _on_usage(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The context's size, and the model call it reports (counted once however often it comes)."""
        usage = params.get("tokenUsage") or {}
        last = usage.get("last") or {}
        out: dict[str, Any] = {"context_tokens": int(last.get("totalTokens") or 0)}
        if usage.get("modelContextWindow"):
            out["context_window"] = int(usage["modelContextWindow"])
        return [{"type": "usage", "usage": out}, *codex_call(params, self.thread, str(self.params.get("model") or ""))]

    def _on_error(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """A limit or a retry is its event (roost/drivers/limits.py), and a retry also a note; the last
        error is the failed turn's reason (turn/completed carries it)."""
        said = limits.codex_error(params, time.time())
        return self._error_note(params) + ([said] if said else [])

    def _error_note(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        error = params.get("error") or {}
        if params.get("willRetry"):
            self.retries += 1
            details = error.get("additionalDetails")
            return [note(f"Codex: {error.get('message') or 'retrying'} (retrying"
                         f"{': ' + str(details) if details else ''})")]
        if self.run is not None:
            return []
        return [note(f"Codex: {_error_text(error)}")]

    def _on_turn_completed(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The turn's end; a request of it still pending is moot (Codex asks within a turn only)."""
        gone = [approval_withdrawn(wid) for wid in self.pending]
        self.pending.clear()
        return gone + self._turn_end(params.get("turn") or {})

    def _turn_end(self, turn: dict[str, Any]) -> list[dict[str, Any]]:
        self.turn = None
        if self.run is None:
            return []
        run, self.run = self.run, None
        answers = [response(req_id, "abort", True) for req_id in self.aborts]
        self.aborts.clear()
        status = turn.get("status")
        if status == "interrupted" or answers:
            return [turn_end(run, "aborted"), *answers]
        if status == "failed":
            error = _error_text(turn.get("error") or {})
            return [turn_end(run, "failed", error=f"Codex's turn failed{limits.after_retries(self.retries)}: {error}")]
        return [turn_end(run, "ok")]


def _error_text(error: dict[str, Any]) -> str:
    """Codex's words for an error, and what kind it was (``codexErrorInfo``: ``internalServerError``,
    ``contextWindowExceeded``…). A provider's JSON error body is given as its message."""
    message = str(error.get("message") or "the turn failed")
    try:
        body = loads(message)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("message"):
        message = str(body["error"]["message"])
    info = error.get("codexErrorInfo")
    kind = info if isinstance(info, str) else next(iter(info), None) if isinstance(info, dict) else None
    return f"{message} ({kind})" if kind and kind != "other" else message


def _error(answer: dict[str, Any]) -> str:
    return str((answer.get("error") or {}).get("message") or answer.get("error"))
