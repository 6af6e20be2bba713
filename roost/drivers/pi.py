"""The pi driver: the pi coding agent (``@mariozechner/pi-coding-agent``) in its RPC mode, one process per job.

pi speaks JSON lines too, but not the worker protocol: :class:`PiAdapter` translates. The facts it
relies on (measured and read in pi's source) are in docs/agents.md and the pi reference notes:

- pi prints nothing at start; its answer to ``get_state`` is the readiness check.
- ``agent_end`` is not always final: after a retryable error pi emits ``auto_retry_start`` (or
  ``auto_retry_end`` when out of attempts, or compaction events for a context overflow) right after
  it, in the same tick. So an ``agent_end`` whose last answer is an error ends the turn only when
  nothing follows it within :data:`SETTLE_SECONDS`, or when pi says the retries are over.
- pi's ``steer`` cuts into a running turn; roost never uses it, so reports wait for the turn's end.
- pi's lines can be far over the frame limit (``agent_end`` carries every message of the turn, tool
  results included). The daemon skips such a line; :meth:`PiAdapter.oversize` reads the type from its
  first bytes and what an ``agent_end`` or ``tool_execution_end`` must still tell from its last ones,
  so the turn still ends and the timeline says what was left out.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from roost.drivers import limits
from roost.drivers.usage import pi_call
from roost.drivers.base import (SNAPSHOT_VALUE, Adapter, Driver, Launch, LaunchContext, base_urls, existing_cwd,
                                find_agent_program, inherited_env, kept, line_field, newest, text_of)
from roost.models import Job
from roost.protocol import encode, loads
from roost.worker_protocol import Oversize, note, response, text_events, turn_end

EXTENSION = Path(__file__).parent / "pi_extension" / "roost-tools.ts"
INSTALL_HINT = "npm install -g @mariozechner/pi-coding-agent"
#: The oldest Node.js pi runs on (its package.json's engines).
PI_NODE = "20.6"
#: How long after an ``agent_end`` with an error pi has to say it retries (it says so within ms).
SETTLE_SECONDS = 1.0
#: Ids of the commands the adapter sends pi on its own; their answers never reach the daemon.
OWN_ID = "roost-"
#: Extension UI requests that block pi until someone answers; nobody is there to, so roost cancels them.
DIALOGS = ("select", "confirm", "input", "editor")


def find_program(command: str, env: Mapping[str, str]) -> str:
    """The pi program's full path; DriverError saying how to install pi when there is none."""
    return find_agent_program("pi", command, env, INSTALL_HINT, PI_NODE)


#: The APIs of pi's built-in providers a job reaches by default (a models.json ``baseUrl`` wins).
PROVIDER_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com",
                 "google": "https://generativelanguage.googleapis.com", "groq": "https://api.groq.com",
                 "openrouter": "https://openrouter.ai", "mistral": "https://api.mistral.ai",
                 "xai": "https://api.x.ai", "cerebras": "https://api.cerebras.ai"}


class PiDriver(Driver):
    #: pi reaches many providers, each its own key (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY, ...).
    env_prefixes = ("PI_", "ANTHROPIC_", "OPENAI_", "GEMINI_", "GOOGLE_", "GROQ_", "MISTRAL_", "XAI_",
                    "OPENROUTER_", "CEREBRAS_", "NODE_")
    kind = "pi"
    ready_timeout = 60.0

    def __init__(self) -> None:
        self._options: Mapping[str, Any] = {}

    def check(self, options: Mapping[str, Any]) -> None:
        find_program(str(options.get("command", "pi")), options.get("env") or {})

    def launch(self, job: Job, ctx: LaunchContext) -> Launch:
        """pi's command line and environment. On a host (``ctx.remote``) the program, the cwd and a
        configured ``agent_dir`` are the host's, so nothing is looked for or made here: the paths under
        roost's state dir and the extension are moved there by roost/hosts/placement.py."""
        options = ctx.options
        self._options = options
        extra_env: Mapping[str, str] = options.get("env") or {}
        command = str(options.get("command", "pi"))
        program = command if ctx.remote else find_program(command, extra_env)
        if not ctx.remote:
            existing_cwd(job, "pi")
        configured = str(options.get("agent_dir") or "")
        if configured:  # on a host, that host's path (``~`` its home: roost/hosts/remote.py expands it there)
            agent_dir = configured if ctx.remote else str(Path(configured).expanduser())
        else:
            agent_dir = str(ctx.state_dir / "pi-agent")
        tmp_dir = ctx.state_dir / "pi-tmp"
        sessions = ctx.sessions_dir / "pi"
        if not ctx.remote:  # on a host pi makes them (its agent dir, its sessions dir, its TMPDIR cache)
            for directory in (Path(agent_dir), tmp_dir, sessions):
                directory.mkdir(parents=True, exist_ok=True)
        argv = [program, "--mode", "rpc", "--session-dir", str(sessions), "-e", str(EXTENSION)]
        if not options.get("load_project_extensions"):
            argv.append("--no-extensions")  # roost's own extension (-e) still loads
        if options.get("provider"):
            argv += ["--provider", str(options["provider"])]
        if options.get("model"):
            argv += ["--model", str(options["model"])]
        argv += [str(a) for a in options.get("args") or ()]
        if job.session:
            argv += ["--session", job.session]
        # The user's environment stays (provider API keys, and HOME for the agent's own shell: git,
        # ssh, the roost CLI; on a host only what is added here travels, docs/hosts.md). pi's state
        # is roost's: its agent dir, its transpile cache under TMPDIR.
        env = inherited_env({"PI_CODING_AGENT_DIR": str(agent_dir), "PI_OFFLINE": "1", "TMPDIR": str(tmp_dir),
                             **extra_env, **ctx.roost_env(job)})
        return Launch(argv=argv, env=env, cwd=job.cwd, session=job.session, record=ctx.record(job),
                      writable=(str(agent_dir), str(tmp_dir), str(sessions)))

    def provider_urls(self, options: Mapping[str, Any]) -> list[str]:
        """The ``baseUrl`` of the profile's provider in pi's models.json (its agent dir), else that
        provider's own API (PROVIDER_URLS); and any ``*_BASE_URL`` of the profile's env."""
        provider = str(options.get("provider") or "")
        url = PROVIDER_URLS.get(provider, "")
        agent_dir = Path(str(options.get("agent_dir") or "")).expanduser() if options.get("agent_dir") else None
        try:
            models = json.loads((agent_dir / "models.json").read_text()) if agent_dir else {}
            url = str(models["providers"][provider].get("baseUrl") or url)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        return base_urls(options, {"_PROVIDER_BASE_URL": url} if url else {})

    def adapter(self, job: Job) -> Adapter:
        """The adapter for the worker :meth:`launch` just described (it checks the same options)."""
        options = self._options
        return PiAdapter(provider=str(options.get("provider") or ""), model=str(options.get("model") or ""),
                         retry=bool(options.get("retry", True)))


class PiAdapter(Adapter):
    """Worker protocol in, pi RPC out; pi's event stream in, worker-protocol events out.

    It keeps the turn in flight (the run token the daemon gave the prompt) and ends it exactly once,
    at pi's final ``agent_end``. What it knows survives a restart of the daemon (``snapshot``): an
    error still waiting to settle is settled again from the restart on.
    """

    def __init__(self, provider: str, model: str, retry: bool, settle: float = SETTLE_SECONDS) -> None:
        self.provider = provider
        self.model = model
        self.retry = retry
        self.settle = settle
        self.run: Any = None
        self.started = False
        self.aborting = False
        #: The error of an ``agent_end`` that may still be retried.
        self.error: str | None = None
        self.timer: asyncio.TimerHandle | None = None
        #: Set when pi runs another model than the config asks for: every prompt then fails with it.
        self.refusal: str | None = None
        self.context_window: int | None = None
        #: A turn restored from the record alone (the daemon went after committing its prompt): whether
        #: pi took the prompt is known only once its answer or its start comes, or its get_state says.
        self.unconfirmed = False
        self.asked: dict[str, str] = {}
        self.tool_args: dict[str, Any] = {}
        self._emit: Callable[[dict[str, Any]], None] = lambda event: None
        self._write: Callable[[bytes], None] = lambda data: None
        self._events: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
            "response": self._on_response, "agent_start": self._on_agent_start, "message_end": self._on_message_end,
            "tool_execution_start": self._on_tool_start, "tool_execution_end": self._on_tool_end,
            "agent_end": self._on_agent_end, "auto_retry_start": self._on_retry_start,
            "auto_retry_end": self._on_retry_end, "compaction_start": self._on_compaction_start,
            "compaction_end": self._on_compaction_end, "extension_ui_request": self._on_ui_request,
        }

    def bind(self, emit: Callable[[dict[str, Any]], None], write: Callable[[bytes], None]) -> None:
        self._emit, self._write = emit, write
        if self.run is not None and self.error is not None and self.timer is None:  # restored mid-settle
            self.timer = asyncio.get_running_loop().call_later(self.settle, self._settled)

    # -- across a restart of the daemon ---------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The turn in flight and what it waits on; not the ids of the daemon's own requests (a new
        daemon asks anew) nor pi's model (its get_state at adoption says it again)."""
        return {"run": self.run, "started": self.started, "aborting": self.aborting,
                "error": None if self.error is None else self.error[:SNAPSHOT_VALUE],
                "context_window": self.context_window, "tool_args": newest(self.tool_args)}

    def restore(self, state: dict[str, Any], run: Any = None) -> None:
        self.run = state.get("run")
        if self.run is None:  # the prompt went to pi after the last line committed, or never did
            self.run, self.unconfirmed = run, run is not None
        self.started, self.aborting = bool(state.get("started")), bool(state.get("aborting"))
        self.error = None if state.get("error") is None else str(state["error"])
        window = state.get("context_window")
        self.context_window = window if isinstance(window, int) else None
        args = state.get("tool_args")
        self.tool_args = {str(k): kept(v) for k, v in args.items()} if isinstance(args, dict) else {}

    # -- commands from the daemon ---------------------------------------------------------------
    def encode(self, command: dict[str, Any]) -> bytes:
        kind, req_id = str(command.get("type")), command.get("id")
        if kind == "steer":  # pi's steer cuts into the turn: the daemon then delivers at the turn's end
            self._emit(response(req_id, kind, False, error="pi takes messages between turns only"))
            return b""
        if kind == "prompt":
            if self.refusal is not None:
                self._fail_at_once(req_id, command.get("run"), self.refusal)
                return b""
            self.run, self.started, self.aborting, self.error = command.get("run"), False, False, None
            self.unconfirmed = False
            frame = {"type": "prompt", "id": req_id, "message": str(command.get("message", ""))}
        elif kind == "abort":
            self.aborting = self.run is not None
            frame = {"type": "abort", "id": req_id}
        elif kind == "get_state":
            frame = {"type": "get_state", "id": req_id}
        else:
            self._emit(response(req_id, kind, False, error=f"unknown command: {kind}"))
            return b""
        self.asked[str(req_id)] = kind
        return encode(frame)

    def _fail_at_once(self, req_id: Any, run: Any, error: str) -> None:
        """Take the prompt and fail its turn now: the reason lands on the job, not in a log."""
        self._emit(response(req_id, "prompt", True))
        self._emit({"type": "turn_start", "run": run})
        self._emit(turn_end(run, "failed", error=error))

    # -- pi's stdout ----------------------------------------------------------------------------
    def decode(self, line: bytes) -> list[dict[str, Any]]:
        try:
            event = loads(line)
        except ValueError:  # not JSON, or JSON roost does not take (roost.protocol.loads)
            return [{"type": "malformed", "line": line[:200].decode(errors="replace")}]
        if not isinstance(event, dict):
            return [{"type": "malformed", "line": line[:200].decode(errors="replace")}]
        handler = self._events.get(str(event.get("type")))
        return handler(event) if handler else []

    def oversize(self, line: Oversize) -> list[dict[str, Any]]:
        """A pi line over the limit: a note when it was an event roost shows, and for the events a turn
        hangs on, the event rebuilt from the line's ends (the type and ids lead, the outcome trails)."""
        kind = line_field(line.head, "type")
        handler = self._events.get(str(kind))
        if handler is None:
            return []  # a line roost ignores anyway (pi's message_update deltas, say)
        said = [note(f"skipped pi's {kind} event, {line.describe()}")]
        if kind == "agent_end":
            last = {"role": "assistant", "stopReason": line_field(line.tail, "stopReason", last=True),
                    "errorMessage": line_field(line.tail, "errorMessage", last=True)}
            return said + handler({"type": kind, "messages": [last]})
        if kind == "tool_execution_end":
            return said + handler({"type": kind, "toolCallId": line_field(line.head, "toolCallId"),
                                   "toolName": line_field(line.head, "toolName"),
                                   "isError": line_field(line.tail, "isError", last=True),
                                   "result": f"(a result too big to show: the event was {line.size} bytes)"})
        return said

    def _on_response(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        req_id = event.get("id")
        success = bool(event.get("success"))
        if req_id is None:  # pi could not read a command at all: say so, nobody waits for it
            return [{"type": "malformed", "line": f"pi answered a command it could not read: {event.get('error')}"}]
        if str(req_id).startswith(OWN_ID):
            if event.get("command") == "get_session_stats" and success:
                return self._usage(event.get("data") or {})
            return []
        kind = self.asked.pop(str(req_id), str(event.get("command")))
        if kind == "prompt":  # pi has it: a restored turn is pi's
            self.unconfirmed = False
        if kind == "get_state" and success:
            return [response(req_id, kind, True, self._state(event.get("data") or {}))]
        if kind == "prompt" and not success:
            run, self.run = self.run, None
            self._fail_at_once(req_id, run, f"pi refused the prompt: {event.get('error')}")
            return []
        return [response(req_id, kind, success, event.get("data"), event.get("error"))]

    def _state(self, data: dict[str, Any]) -> dict[str, Any]:
        model = data.get("model") or {}
        window = model.get("contextWindow")
        self.context_window = window if isinstance(window, int) and window > 0 else None
        self.refusal = self._model_mismatch(str(model.get("provider", "")), str(model.get("id", "")))
        # pi answers in the order it reads: a prompt it took was answered before this, so a restored
        # turn still unconfirmed here never reached it (the daemon sends it again: ``Resynced``).
        busy = bool(data.get("isStreaming")) or (self.run is not None and not self.unconfirmed)
        return {"session": data.get("sessionFile"), "busy": busy,
                "model": f"{model.get('provider')}/{model.get('id')}"}

    def _model_mismatch(self, provider: str, ident: str) -> str | None:
        """Why pi's model is not the configured one, or None. ``model`` may be the id, ``provider/id``,
        and either with pi's ``:thinking`` suffix."""
        wanted_provider = not self.provider or provider == self.provider
        names = (ident, f"{provider}/{ident}")
        wanted_model = not self.model or any(self.model == n or self.model.startswith(n + ":") for n in names)
        if wanted_provider and wanted_model:
            return None
        asked = "/".join(p for p in (self.provider, self.model) if p)
        return (f"pi runs the model {provider}/{ident}, but the config asks for {asked}: set the pi driver's "
                f"provider and model to a model pi knows (`pi --list-models` lists them, by exact id)")

    def _on_agent_start(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        self._cancel_timer()  # pi is retrying: the error before it was not final
        self.error, self.unconfirmed = None, False
        if self.run is None or self.started:
            return []
        self.started = True
        return [{"type": "turn_start", "run": self.run}]

    def _on_message_end(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        message = event.get("message") or {}
        if message.get("role") != "assistant":
            return []
        text = text_of(message.get("content")).strip()
        return (text_events(text) if text else []) + pi_call(message)  # each assistant message is a model call

    def _on_tool_start(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        self.tool_args[str(event.get("toolCallId"))] = event.get("args")
        return []

    def _on_tool_end(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        args = self.tool_args.pop(str(event.get("toolCallId")), None)
        result = event.get("result") or {}
        return [{"type": "tool", "name": event.get("toolName"), "args": args,
                 "result": text_of(result.get("content") if isinstance(result, dict) else result),
                 "error": bool(event.get("isError"))}]

    def _on_agent_end(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        if self.run is None:
            return []
        messages = event.get("messages") or []
        last = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "assistant"), {})
        stop = last.get("stopReason")
        if stop == "aborted":
            return self._finish("aborted")
        if stop == "error":
            self.error = str(last.get("errorMessage") or "the model request failed")
            self._cancel_timer()
            self.timer = asyncio.get_running_loop().call_later(self.settle, self._settled)
            return []
        return self._finish("ok")

    def _on_retry_start(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        self._cancel_timer()
        if not self.retry:  # the config turned retries off: cut pi's short; its auto_retry_end ends the turn
            self._write(encode({"type": "abort_retry", "id": OWN_ID + "no-retry"}))
            return []
        return [limits.pi_retry(event, time.time())] if self.run is not None else []

    def _on_retry_end(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        if event.get("success") or self.run is None:
            return []
        self.error = self.error or str(event.get("finalError") or "the model request failed")
        return self._final_error()

    def _on_compaction_start(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        self._cancel_timer()  # after an overflow error pi compacts, then says whether it retries
        return []

    def _on_compaction_end(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        if self.run is None or self.error is None or event.get("willRetry"):
            return []
        if event.get("errorMessage"):
            self.error = f"{self.error} ({event['errorMessage']})"
        return self._final_error()

    def _on_ui_request(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        if event.get("method") in DIALOGS:
            self._write(encode({"type": "extension_ui_response", "id": event.get("id"), "cancelled": True}))
        return []

    # -- ending the turn --------------------------------------------------------------------------
    def _settled(self) -> None:
        self.timer = None
        for event in self._final_error():
            self._emit(event)

    def _final_error(self) -> list[dict[str, Any]]:
        if self.run is None:
            return []
        if self.aborting:
            return self._finish("aborted")
        error = self.error or "the model request failed"
        limit = limits.pi_gave_up(error, time.time())
        return ([limit] if limit else []) + self._finish("failed", error)

    def _finish(self, outcome: str, error: str | None = None) -> list[dict[str, Any]]:
        run = self.run
        self._cancel_timer()
        self.run, self.started, self.aborting, self.error = None, False, False, None
        self._write(encode({"type": "get_session_stats", "id": OWN_ID + "stats"}))  # usage follows the turn
        return [turn_end(run, outcome, **({"error": error} if error else {}))]

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _usage(self, stats: dict[str, Any]) -> list[dict[str, Any]]:
        """The context's size, from the session's stats after each turn (the spend comes with each
        assistant message: ``pi_call``)."""
        context = stats.get("contextUsage") or {}
        usage: dict[str, Any] = {"context_tokens": context.get("tokens"),
                                 "context_window": context.get("contextWindow") or self.context_window}
        usage = {k: v for k, v in usage.items() if isinstance(v, int)}
        return [{"type": "usage", "usage": usage}] if usage else []
