"""Claude Code's stream-json, both ways: the adapter between it and the worker protocol (the driver,
which starts ``claude -p``, is ``drivers/claude.py``; a permission request's shapes are in
``drivers/approvals.py``, its usage in ``drivers/usage.py``, its limits' words in ``drivers/limits.py``).
One file for one protocol, about 400 lines: a handler per frame Claude Code sends and per command
the daemon does, all reading and writing the one turn in flight.

What it relies on, measured with Claude Code 2.1.328 against a fake Messages API (docs/agents.md):

- A user message is one line on stdin; each turn prints ``system/init``, ``assistant`` and ``user``
  frames (a subagent's carry the ``parent_tool_use_id`` of the ``Task`` call that started it) and
  ends with one ``result``. The process stays for the next message.
- Control requests on the same stdin are answered on stdout: ``initialize`` (the readiness check),
  ``interrupt`` (answered at once; the turn then ends with a ``result`` whose ``terminal_reason`` is
  ``aborted_streaming``; a permission request it waits on is cancelled first, with a
  ``control_cancel_request``). ``stop_task`` with a task id stops that subagent, background or not
  (answered at once, for an unknown id too; its permission request pending is cancelled and its
  ``task_notification`` says ``stopped``).
- With ``--permission-prompt-tool stdio`` Claude Code asks ``can_use_tool`` the same way (the tool,
  its input, the model's ``description``, and a subagent's ``agent_id``: its task id) and waits in the
  turn for the answer: roost makes that an ``approval`` event and answers with the person's decision
  (``approval_answer``): allow with the input as given, or deny with the reason the model hears. A
  background subagent asks so after its parent's turn ended too.
- A turn nobody prompted: when a ``Task`` subagent in the background finishes after its parent's turn
  ended, Claude Code starts a turn of its own to take in the result (a ``system/init`` with no user
  message before it, then ``assistant`` frames and a ``result``). roost calls it a turn of the
  agent's own (``turn_start`` with ``own``), and its ``result`` ends it like any other.
- A failing model call is retried by Claude Code itself (``CLAUDE_CODE_MAX_RETRIES`` times, 10 by
  default, with backoff), each announced by a ``system/api_retry`` frame (a ``retrying`` event, or
  ``limited`` for a 429: roost/drivers/limits.py); then the ``result`` has ``is_error`` and Claude
  Code's words (``API Error: 500 …``).
- The session id can be chosen up front (``--session-id``), so it is on the record before the first
  turn; ``--resume ID`` in the same directory continues it.

One idea at about 420 lines: Claude Code's stream-json, frame by frame, into roost's events; its
launch is claude.py, its approvals approvals.py, its limits limits.py.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from roost.drivers import limits
from roost.drivers.approvals import claude_what, words
from roost.drivers.base import SNAPSHOT_ENTRIES, Adapter, kept, line_field, newest, text_of
from roost.drivers.mcp import MCP_NAME
from roost.drivers.subagents import SubagentTracker
from roost.drivers.usage import ClaudeSpend
from roost.protocol import encode
from roost.text import failure_line
from roost.worker_protocol import Oversize, approval, approval_withdrawn, note, response, text_events, turn_end

#: Ids of the control requests the adapter sends on its own.
OWN_ID = "roost-"
#: The run of a turn Claude Code began by itself (no prompt of roost's carried a run token for it).
OWN = object()
#: How many permission requests pending a snapshot keeps (the daemon lets a job have 8 pending:
#: roost/rules/approvals.py PENDING_MAX), each input whole up to SNAPSHOT_VALUE: 16 KB at most.
PENDING_KEPT = 8
#: What Claude Code hears of a permission request still pending when its turn is stopped.
STOPPED = "the turn was stopped: nothing it asked runs"


class ClaudeAdapter(Adapter):
    """Worker protocol in, stream-json out; Claude Code's frames in, worker-protocol events out.

    It keeps the turn in flight (the run token of the prompt, or OWN for a turn Claude Code began
    itself) and ends it once, at the ``result`` frame. A permission request does not end it: it is an
    ``approval`` event, answered by the ``approval_answer`` that names it. What it knows survives a
    restart of the daemon (``snapshot``), the permission requests pending too (each input kept whole
    up to SNAPSHOT_VALUE; a job with a bigger one pending is not re-adopted).
    """

    def __init__(self, session: str | None, cwd: str = "", config_dir: str = "",
                 spend: ClaudeSpend | None = None) -> None:
        self.cwd = cwd
        #: The CLAUDE_CONFIG_DIR roost gave Claude Code: where a login it asks for has to be made.
        self.config_dir = config_dir
        self.session = session
        self.run: Any = None
        self.aborting = False
        self.ready = False
        #: The ``can_use_tool`` requests Claude Code waits on, by request id (the approval's id): the tool's input.
        self.pending: dict[str, Any] = {}
        #: The task id of each subagent that runs, by the id of the call that started it (for ``stop_task``).
        self.tasks: dict[str, str] = {}
        self.asked: dict[str, Any] = {}
        #: Interrupts Claude Code took while the turn still runs: answered after its ``turn_end``.
        self.abort_answers: list[Any] = []
        #: How many times Claude Code said it retries a model call in this turn.
        self.retries = 0
        #: The run of a prompt that came during a turn of Claude Code's own: Claude Code queues the
        #: message and answers it in a turn after that one (measured), which this run is then.
        self.after_own: Any = None
        #: Since the last ``result``: Claude Code said something of its own in the turn, and it told of
        #: a subagent's end (a resumed session's lost subagent: :meth:`_took_in_notice`).
        self.said, self.notified = False, False
        self.tools: dict[str, tuple[str, Any]] = {}
        self.subagents = SubagentTracker()
        #: The session's running totals, turned into calls (roost/drivers/usage.py).
        self.spend = spend or ClaudeSpend({} if session is None else None)
        self.context: dict[str, int] = {}
        self._emit: Callable[[dict[str, Any]], None] = lambda event: None
        self._write: Callable[[bytes], None] = lambda data: None

    def bind(self, emit: Callable[[dict[str, Any]], None], write: Callable[[bytes], None]) -> None:
        self._emit, self._write = emit, write

    # -- across a restart of the daemon ---------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The turn in flight, its tool calls and subagents, the running totals spent and the
        permission requests pending (their inputs, to allow them as asked); not the daemon's own
        requests in flight (their askers went with it)."""
        return {"session": self.session, "run": "own" if self.run is OWN else self.run,
                "after_own": self.after_own, "aborting": self.aborting, "retries": self.retries,
                "said": self.said, "notified": self.notified, "tasks": newest(self.tasks), "context": self.context,
                "tools": {k: [name, kept(args)] for k, (name, args) in list(self.tools.items())[-SNAPSHOT_ENTRIES:]},
                "subagents": self.subagents.snapshot(), "spend": self.spend.snapshot(),
                "pending": {k: kept(v) for k, v in list(self.pending.items())[-PENDING_KEPT:]}}

    def restore(self, state: dict[str, Any], run: Any = None) -> None:
        """As ``snapshot`` wrote it; ready (only a worker that answered is re-adopted)."""
        self.ready, self.session = True, state.get("session") or self.session
        saved = state.get("run")  # None, with the record's turn in flight: its prompt went after the last line
        self.run = OWN if saved == "own" else run if saved is None else saved
        self.after_own, self.aborting = state.get("after_own"), bool(state.get("aborting"))
        self.retries = int(state.get("retries") or 0)
        self.said, self.notified = bool(state.get("said")), bool(state.get("notified"))
        self.tasks = {str(k): str(v) for k, v in (state.get("tasks") or {}).items()}
        self.context = {str(k): int(v) for k, v in (state.get("context") or {}).items()}
        self.tools = {str(k): (str(v[0]), v[1]) for k, v in (state.get("tools") or {}).items() if len(v) == 2}
        self.subagents.restore(state.get("subagents") or {})
        #: A permission request kept whole is answered as before; one too big to keep is not restored
        #: (the daemon does not re-adopt a job with one pending: rules/approvals.py ``carried``).
        self.pending = {str(k): v for k, v in (state.get("pending") or {}).items() if isinstance(v, dict)}
        if "spend" in state:
            self.spend.restore(state["spend"])

    def _control(self, request_id: str, request: dict[str, Any]) -> bytes:
        return encode({"type": "control_request", "request_id": request_id, "request": request})

    def _state(self) -> dict[str, Any]:
        return {"session": self.session, "busy": self.run is not None}

    # -- commands from the daemon ---------------------------------------------------------------
    def encode(self, command: dict[str, Any]) -> bytes:
        kind, req_id = str(command.get("type")), command.get("id")
        if kind == "get_state":
            if self.ready:
                self._emit(response(req_id, kind, True, self._state()))
                return b""
            self.asked[OWN_ID + "init"] = (req_id, kind)
            return self._control(OWN_ID + "init", {"subtype": "initialize"})
        if kind == "prompt":
            return self._prompt(req_id, command.get("run"), str(command.get("message", "")))
        if kind == "approval_answer":
            return self._answer(req_id, command)
        if kind == "abort":
            return self._abort(req_id)
        # A steer would queue behind the running turn anyway: the daemon then delivers at the turn's end.
        self._emit(response(req_id, kind, False, error=f"Claude Code takes {kind} messages between turns only"))
        return b""

    def _prompt(self, req_id: Any, run: Any, message: str) -> bytes:
        if self.run is OWN:  # the daemon had not heard of the own turn yet when it sent this
            self.after_own = run
        else:
            self.run, self.aborting, self.retries = run, False, 0
        self._emit(response(req_id, "prompt", True))
        self._emit({"type": "turn_start", "run": run})
        return encode({"type": "user", "message": {"role": "user", "content": message}})

    def _answer(self, req_id: Any, command: dict[str, Any]) -> bytes:
        """A decision on one pending permission request, as Claude Code's control response."""
        wid = str(command.get("approval"))
        if wid not in self.pending:
            self._emit(response(req_id, "approval_answer", False,
                                error=f"Claude Code waits on no permission request {wid!r}"))
            return b""
        allow = command.get("decision") == "allow"
        self._emit(response(req_id, "approval_answer", True))
        return self._verdict(wid, allow, str(command.get("reason") or "denied by a person"))

    def _verdict(self, wid: str, allow: bool, reason: str) -> bytes:
        tool_input = self.pending.pop(wid)
        verdict = {"behavior": "allow", "updatedInput": tool_input} if allow else {"behavior": "deny",
                                                                                    "message": reason}
        return encode({"type": "control_response",
                       "response": {"subtype": "success", "request_id": wid, "response": verdict}})

    def _abort(self, req_id: Any) -> bytes:
        """Stop what the agent does: deny what it still waits on (the daemon denies first; this is so
        none is ever left pending), stop its subagents and the commands it runs in the background,
        and interrupt the turn in flight. With no turn, answered at once."""
        denied = list(self.pending)
        out = b"".join(self._verdict(wid, False, STOPPED) for wid in denied)
        for wid in denied:
            self._emit(approval_withdrawn(wid))
        out += b"".join(self._control(OWN_ID + f"stop-{req_id}-{n}", {"subtype": "stop_task", "task_id": task})
                        for n, task in enumerate(self.tasks.values()))
        if self.run is None:
            self._emit(response(req_id, "abort", True))
            return out
        self.aborting = True
        self.asked[OWN_ID + f"abort-{req_id}"] = (req_id, "abort")
        return out + self._control(OWN_ID + f"abort-{req_id}", {"subtype": "interrupt"})

    # -- Claude Code's stdout -------------------------------------------------------------------
    def decode(self, line: bytes) -> list[dict[str, Any]]:
        events = super().decode(line)
        if not events or events[0].get("type") == "malformed":
            return events
        frame = events[0]
        handler = {"control_response": self._on_control_response, "control_request": self._on_control_request,
                   "control_cancel_request": self._on_cancel, "assistant": self._on_assistant, "user": self._on_user,
                   "result": self._on_result, "system": self._on_system,
                   "rate_limit_event": self._on_rate_limit}.get(frame["type"])
        return handler(frame) if handler else []

    def oversize(self, line: Oversize) -> list[dict[str, Any]]:
        """A line over the frame limit, skipped unread. The two a turn hangs on are rebuilt from its
        ends: a ``result`` (its text comes late, ``"type":"result"`` after it: measured) still ends
        the turn; a permission request is denied with why, since nobody could be shown it whole."""
        said = note(f"skipped {line.describe()} from Claude Code")
        if line_field(line.head, "type") == "control_request":
            request_id = line_field(line.head, "request_id")
            tool = line_field(line.head, "tool_name") or "a tool"
            if request_id is None:
                return [said]
            if line_field(line.head, "subtype") != "can_use_tool":
                self._write(encode({"type": "control_response", "response": {
                    "subtype": "error", "request_id": request_id, "error": "roost does not answer this request"}}))
                return [said]
            why = (f"roost could not read this permission request ({line.describe()}), so nobody could be "
                   f"asked; the tool was not allowed: too big to show")
            self._write(encode({"type": "control_response", "response": {
                "subtype": "success", "request_id": request_id, "response": {"behavior": "deny", "message": why}}}))
            return [note(f"Claude Code asked to use {tool} in a request of {line.size} bytes, over the frame "
                         f"limit: roost denied it, saying why")]
        if b'"type":"result"' in line.tail:
            def value(name: str) -> Any:
                found = line_field(line.head, name)
                return found if found is not None else line_field(line.tail, name, last=True)

            frame = {"type": "result", "subtype": value("subtype"), "is_error": value("is_error"),
                     "terminal_reason": value("terminal_reason") or "", "session_id": value("session_id"),
                     "result": f"(Claude Code's result was {line.size} bytes, too big to show)"}
            return [note(f"skipped Claude Code's result, {line.describe()}: the turn ends on what is known of it"),
                    *self._on_result(frame)]
        return [said]

    def _on_system(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        subtype = frame.get("subtype")
        if subtype == "init":
            if frame.get("session_id"):
                self.session = str(frame["session_id"])
            if self.run is None:  # no prompt of ours: Claude Code's own turn
                self.run, self.aborting, self.retries = OWN, False, 0
                return [{"type": "turn_start", "own": True}]
        elif subtype == "api_retry":
            self.retries += 1
            status = f"{frame.get('error_status')} " if frame.get("error_status") else ""
            return [note(f"Claude Code: the model call failed ({status}{frame.get('error') or 'error'}); "
                         f"retry {frame.get('attempt')} of {frame.get('max_retries')} "
                         f"in {int(frame.get('retry_delay_ms') or 0) / 1000:.1f} s"),
                    limits.claude_retry(frame, time.time())]
        elif subtype == "task_started" and frame.get("tool_use_id") and frame.get("task_type") == "local_bash":
            ident = str(frame["tool_use_id"])  # a command in the background of this job, not a subagent
            if frame.get("task_id"):  # what a stop asks Claude Code to end (stop_task)
                self.tasks[ident] = str(frame["task_id"])
            call = self.tools.get(ident, ("", None))[1]
            command = call.get("command") if isinstance(call, dict) else None
            return self.subagents.start_command(ident, str(command or frame.get("description") or "a command"))
        elif subtype == "task_started" and frame.get("tool_use_id"):
            if frame.get("task_id"):
                self.tasks[str(frame["tool_use_id"])] = str(frame["task_id"])
            return self.subagents.start(str(frame["tool_use_id"]), frame, background=bool(frame.get("is_backgrounded")))
        elif subtype == "task_notification":
            self.notified = True
            if not frame.get("tool_use_id"):  # a subagent of an earlier process (a resumed session's)
                return []
            self.tasks.pop(str(frame["tool_use_id"]), None)
            status = frame.get("status")
            if str(frame["tool_use_id"]) in self.subagents.commands:
                return self.subagents.end_command(str(frame["tool_use_id"]), str(status or ""),
                                                  str(frame.get("summary") or ""))
            return self.subagents.finish(str(frame["tool_use_id"]), str(frame.get("summary") or ""),
                                         error=status != "completed", stopped=status == "stopped")
        return []

    def _on_control_response(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        answer = frame.get("response") or {}
        asked = self.asked.pop(str(answer.get("request_id")), None)
        if asked is None:
            return []
        req_id, kind = asked
        ok = answer.get("subtype") == "success"
        if kind == "get_state":
            self.ready = ok
            return [response(req_id, kind, ok, self._state() if ok else None, answer.get("error"))]
        if ok and self.run is not None:  # answered once the turn's result is in, as pi answers an abort
            self.abort_answers.append(req_id)
            return []
        return [response(req_id, kind, ok, error=answer.get("error"))]

    def _on_control_request(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        """A permission request is an approval, in a turn or not (a background subagent's); roost's own
        tools are allowed at once. Claude Code waits in the turn until the answer."""
        request = frame.get("request") or {}
        request_id = str(frame.get("request_id"))
        if request.get("subtype") != "can_use_tool":
            self._write(encode({"type": "control_response", "response": {
                "subtype": "error", "request_id": request_id, "error": "roost does not answer this request"}}))
            return []
        tool, args = str(request.get("tool_name") or "?"), request.get("input")
        args = args if isinstance(args, dict) else {}
        self.pending[request_id] = args
        if tool.startswith(f"mcp__{MCP_NAME}__"):
            self._write(self._verdict(request_id, True, ""))
            return []
        agent = request.get("agent_id")
        subagent = next((call for call, task in self.tasks.items() if task == agent), agent) if agent else None
        return [approval(request_id, tool, claude_what(tool, args, self.cwd),
                         description=words(request.get("description")), subagent=str(subagent) if subagent else None)]

    def _on_cancel(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        """Claude Code no longer waits on a request (its turn or its subagent was stopped)."""
        wid = str(frame.get("request_id"))
        return [approval_withdrawn(wid)] if self.pending.pop(wid, None) is not None else []

    def _on_assistant(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        message = frame.get("message") or {}
        parent = frame.get("parent_tool_use_id")
        content = message.get("content")
        if parent:
            return self.subagents.progress(str(parent), text_of(content))
        self.said = True
        if isinstance(message.get("usage"), dict):
            usage = message["usage"]
            self.context["context_tokens"] = sum(int(usage.get(k) or 0) for k in (
                "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens"))
        out: list[dict[str, Any]] = []
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text", "").strip():
                out += text_events(block["text"].strip())
            elif block.get("type") == "tool_use":
                self.tools[str(block.get("id"))] = (str(block.get("name")), block.get("input"))
        return out

    def _on_user(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        content = (frame.get("message") or {}).get("content")
        if frame.get("parent_tool_use_id") or not isinstance(content, list):
            return []
        out: list[dict[str, Any]] = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            tool_id = str(block.get("tool_use_id"))
            name, args = self.tools.pop(tool_id, ("?", None))
            result, error = text_of(block.get("content")), bool(block.get("is_error"))
            out += self.subagents.returned(tool_id, result, error)
            out.append({"type": "tool", "name": name, "args": args, "result": result, "error": error})
        return out

    def _on_result(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        if frame.get("session_id"):
            self.session = str(frame["session_id"])
        events = self._usage(frame)
        if self.run is None:
            return events
        answers = [response(req_id, "abort", True) for req_id in self.abort_answers]
        self.abort_answers.clear()
        if self.aborting or str(frame.get("terminal_reason", "")).startswith("aborted"):
            return events + [self._end("aborted")] + answers
        if frame.get("is_error") or frame.get("subtype") != "success":
            return events + self._failed(frame)
        if self._took_in_notice(frame):
            return events
        return events + [self._end("ok")]

    def _took_in_notice(self, frame: dict[str, Any]) -> bool:
        """Whether this ``result`` ended only Claude Code's taking in a subagent's end, and the prompt's
        answer comes in the turn after. Measured with 2.1.328: the first message to a resumed session
        whose background subagent was lost with its process gets a ``task_notification`` (stopped), an
        ``init`` and an empty ``result`` with no ``terminal_reason``; then an ``init``, the answer and its
        ``result``. That second result, not the empty one, ends the prompt's turn."""
        notice_only = (self.notified and not self.said and not frame.get("result")
                       and not frame.get("terminal_reason") and self.run is not OWN)
        self.said, self.notified = False, False
        return notice_only

    def _failed(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        """The end of a failed turn, in Claude Code's words made plain: the limit that bounced it, if
        one did, and where a login it asks for goes (the config directory roost gave it)."""
        said = failure_line(str(frame.get("result") or frame.get("subtype") or "no reason given")) or "no reason given"
        if "/login" in said and self.config_dir:
            said += (f" (roost gives Claude Code the config directory {self.config_dir}: log in there with "
                     f"`CLAUDE_CONFIG_DIR={self.config_dir} claude`, or give the profile an ANTHROPIC_API_KEY "
                     f"in `env`, or set its `config_dir`)")
        limit = limits.claude_result(frame, time.time())
        return [*([limit] if limit else []),
                self._end("failed", error=f"Claude Code's turn failed{limits.after_retries(self.retries)}: {said}")]

    def _on_rate_limit(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        limit = limits.claude_rate_limit_event(frame)
        return [limit] if limit else []

    def _end(self, outcome: str, **fields: Any) -> dict[str, Any]:
        """The turn_end of the turn in flight, which is then over."""
        run, self.run = self.run, None
        if run is OWN and self.after_own is not None:  # the queued prompt's turn comes next
            self.run, self.after_own, self.aborting, self.retries = self.after_own, None, False, 0
        if run is OWN:
            return turn_end(None, outcome, own=True, **fields)
        return turn_end(run, outcome, **fields)

    def _usage(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        """The context's size, and the model calls since the last result (their spend)."""
        windows = [m.get("contextWindow") for m in (frame.get("modelUsage") or {}).values() if isinstance(m, dict)]
        window = next((w for w in windows if isinstance(w, int) and w > 0), None)
        out: dict[str, Any] = {**self.context, **({"context_window": window} if window else {})}
        return [{"type": "usage", "usage": out}, *self.spend.calls(frame, self.session)]
