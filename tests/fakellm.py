"""Fake model servers on 127.0.0.1, scripted by the last user message: the tests point real agents at
them, so a whole agent runs with no model and no network.

:class:`FakeLLM` speaks OpenAI chat completions (pi); tests/fake_anthropic.py the Anthropic Messages
API (Claude Code) and tests/fake_openai.py the Responses API (Codex) share its script and server and
change only the wire format. What it answers depends on the last user message (the prompt roost
delivered):

- ``CALL <tool> <json args>``: a call of that tool; once the tool's result is in, a text answer
  quoting it (``tool said: ...``). ``<<x*N>>`` in the args is N times ``x`` (a call too big for a
  prompt to spell out).
- ``SLOW``: a text stream that trickles for up to 30 s (something to abort).
- ``FLAKY <tag>``: HTTP 503 the first time a tag is seen, a normal answer after that.
- ``BAD400``: HTTP 400, an error no retry can fix.
- ``DOWN``: HTTP 500 every time (an outage no retry gets past).
- ``FAILED <message>``: a stream that starts, then fails with that message the wire format's way
  (Responses: ``response.failed``; Messages: an ``error`` event); every time.
- ``LIMITED <seconds>``: HTTP 429 every time, ``retry-after: <seconds>``, with the wire format's rate
  limit body and reset headers (:meth:`ScriptedHandler.limit_body`, :meth:`ScriptedHandler.limit_headers`).
- ``LIMITED_ONCE <seconds> <tag>``: that 429 the first time a tag is seen, a normal answer after that.
- ``USAGE_LIMIT <seconds>``: HTTP 429 every time, the way a plan's usage limit is said (Anthropic's
  ``anthropic-ratelimit-unified-*`` headers; the Responses API's ``usage_limit_reached``), resetting
  that many seconds from now.
- ``LATER <seconds> ...``: the echo, sent only after that many seconds (at most SLOW_LIMIT): a
  subagent that answers after its parent's turn ended; ``LATER <seconds> CALL ...``: that call, as
  late (a subagent that asks for a permission after its parent's turn ended).
- ``HOLD <tag> <the rest>``: the rest, as its own prompt, but the answer after a tool's result waits
  until the test calls ``release(tag)`` (``held(tag)`` says it waits): a turn held mid-way for as long
  as the test needs, with no sleep (a restart of the daemon in the middle of it).
- anything else: ``echo: <its first line>``.

It records every request body, so a test can assert what history reached the model.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SLOW_LIMIT = 30.0
SLOW_TEXT = "tick " * 10_000
#: What every fake says a request cost, so tests can find it on the job's usage.
INPUT_TOKENS, OUTPUT_TOKENS = 120, 8
#: The token kinds a fake counts as it charges them (``FakeLLM.charged``).
CHARGED = ("input", "output", "cache_read", "cache_write")


def message_text(message: dict[str, Any]) -> str:
    """The text of a chat message whose content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def last_user(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((m for m in reversed(messages) if m.get("role") == "user"), None)


class ScriptedHandler(BaseHTTPRequestHandler):
    """The script, for any wire format: a subclass says how to read the prompt out of a request and
    how to write a text stream, a tool call and an error."""

    protocol_version = "HTTP/1.1"
    fake: "FakeLLM"

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.fake.record(body)
        prompt, tool_results = self.fake.turn_of(body)
        word, _, rest = prompt.strip().partition(" ")
        if word == "HOLD":
            tag, _, prompt = rest.partition(" ")
            if tool_results:
                self.fake.hold(tag)
            word, _, rest = prompt.strip().partition(" ")
        if word == "LATER" and rest.partition(" ")[2].startswith("CALL ") and not tool_results:
            time.sleep(min(float(rest.split(" ", 1)[0] or 0), SLOW_LIMIT))
            word, _, rest = rest.partition(" ")[2].partition(" ")
        if tool_results:
            self.stream_text(body, "tool said: " + tool_results[-1])
        elif word == "CALL":
            name, _, args = rest.partition(" ")
            args = re.sub(r"<<(.)\*(\d+)>>", lambda m: m[1] * int(m[2]), args)
            self.stream_tool_call(body, name, args or "{}")
        elif word == "SLOW":
            self.stream_text(body, SLOW_TEXT, pause=0.05)
        elif word == "FLAKY" and self.fake.first_flaky(rest):
            self.error(503, "fake overloaded, try again")
        elif word == "BAD400":
            self.error(400, "fake bad request")
        elif word == "DOWN":
            self.error(500, "fake server down")
        elif word == "FAILED":
            self.stream_failure(body, rest)
        elif word in ("LIMITED", "USAGE_LIMIT") or (word == "LIMITED_ONCE" and self.fake.first_flaky(prompt.strip())):
            self.limited(float(rest.split(" ", 1)[0] or 0), usage=word == "USAGE_LIMIT")
        elif word == "LATER":
            time.sleep(min(float(rest.split(" ", 1)[0] or 0), SLOW_LIMIT))
            self.stream_text(body, "echo: " + prompt.strip().splitlines()[0])
        else:
            first = prompt.strip().splitlines()[0] if prompt.strip() else ""
            self.stream_text(body, "echo: " + first)

    def error(self, status: int, message: str) -> None:
        data = json.dumps({"error": {"message": message, "type": "fake_error"}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def limited(self, seconds: float, usage: bool = False) -> None:
        """HTTP 429: a rate limit that resets in ``seconds`` (a plan's usage limit when ``usage``)."""
        self.fake.record_limit(seconds)
        data = json.dumps(self.limit_body(seconds, usage)).encode()
        self.send_response(429)
        headers = {"Content-Type": "application/json", "Content-Length": str(len(data)),
                   "retry-after": str(int(seconds)), **self.limit_headers(seconds, usage)}
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def limit_body(self, seconds: float, usage: bool) -> dict[str, Any]:
        """The OpenAI APIs' body of a 429 (chat completions here; the Responses API's in fake_openai)."""
        return {"error": {"message": f"Rate limit reached for requests. Please try again in {seconds:g}s.",
                          "type": "requests", "param": None, "code": "rate_limit_exceeded"}}

    def limit_headers(self, seconds: float, usage: bool) -> dict[str, str]:
        """The OpenAI APIs' reset headers of a 429."""
        return {"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": f"{seconds:g}s"}

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def event(self, data: dict[str, Any] | str, name: str | None = None) -> None:
        payload = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {name}\n" if name else ""
        self.wfile.write(f"{head}data: {payload}\n\n".encode())
        self.wfile.flush()

    def trickle(self, text: str, pause: float, send: Any) -> bool:
        """``send(piece)`` for each word of ``text``, pausing between them (never past SLOW_LIMIT);
        False when the client hung up (an abort: what a slow stream is for)."""
        deadline = time.monotonic() + SLOW_LIMIT
        try:
            for i, word in enumerate(text.split(" ")):
                send(word if i == 0 else " " + word)
                if pause:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(pause)
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def stream_text(self, body: dict[str, Any], text: str, pause: float = 0.0) -> None:
        raise NotImplementedError

    def stream_tool_call(self, body: dict[str, Any], name: str, args: str) -> None:
        raise NotImplementedError

    def stream_failure(self, body: dict[str, Any], message: str) -> None:
        """A stream that fails after it began; a format with no way to say so answers HTTP 500."""
        self.error(500, message)


class FakeLLM:
    """The server; ``url`` is the base URL to give the agent (``.../v1``)."""

    handler: type[ScriptedHandler]

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.flaky_seen: set[str] = set()
        #: The tokens the server charged, summed over the calls it finished (a stream cut short, an
        #: error, is not charged): what a test compares roost's figures with.
        self.charged = dict.fromkeys(CHARGED, 0)
        #: How many calls it charged.
        self.calls = 0
        #: When each 429 was sent (monotonic) and the reset it named, in seconds.
        self.limits: list[tuple[float, float]] = []
        self.lock = threading.Lock()
        #: ``HOLD`` tags: the gate each waits on, and the tags whose answer waits (or waited).
        self.gates: dict[str, threading.Event] = {}
        self.holding: set[str] = set()
        handler = type("Handler", (self.handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fakellm", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def start(self) -> "FakeLLM":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def record(self, body: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(body)

    def turn_of(self, body: dict[str, Any]) -> tuple[str, list[str]]:
        """The last user message's text, and the tool results that came after it."""
        messages = body.get("messages", [])
        user = last_user(messages)
        after_user = messages[messages.index(user) + 1:] if user else []
        return (message_text(user) if user else "",
                [message_text(m) for m in after_user if m.get("role") == "tool"])

    def record_limit(self, seconds: float) -> None:
        with self.lock:
            self.limits.append((time.monotonic(), seconds))

    def _gate(self, tag: str) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(tag, threading.Event())

    def hold(self, tag: str) -> None:
        """Wait until ``release(tag)`` (at most SLOW_LIMIT * 2: a test that forgot fails, not hangs)."""
        gate = self._gate(tag)
        with self.lock:
            self.holding.add(tag)
        gate.wait(SLOW_LIMIT * 2)

    def held(self, tag: str) -> bool:
        with self.lock:
            return tag in self.holding

    def release(self, tag: str) -> None:
        self._gate(tag).set()

    def bodies_with(self, needle: str) -> list[dict[str, Any]]:
        """The requests whose last user message contains ``needle``."""
        with self.lock:
            return [b for b in self.requests if needle in self.turn_of(b)[0]]

    def charge(self, input: int = INPUT_TOKENS, output: int = OUTPUT_TOKENS, cache_read: int = 0,
               cache_write: int = 0) -> int:
        """Count one finished call's tokens; the call's number, from 1 (for ids unique per call)."""
        with self.lock:
            for kind, n in zip(CHARGED, (input, output, cache_read, cache_write)):
                self.charged[kind] += n
            self.calls += 1
            return self.calls

    def first_flaky(self, tag: str) -> bool:
        """True only the first time ``tag`` is asked for."""
        with self.lock:
            first = tag not in self.flaky_seen
            self.flaky_seen.add(tag)
            return first


def _chunk(model: str, delta: dict[str, Any] | None = None, finish: str | None = None,
           usage: dict[str, int] | None = None) -> dict[str, Any]:
    choices = [] if usage else [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    out: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
                           "model": model, "choices": choices}
    if usage:
        out["usage"] = usage
    return out


class ChatHandler(ScriptedHandler):
    """OpenAI chat completions, streamed."""

    def finish_stream(self, model: str, finish: str) -> None:
        self.fake.charge()
        self.event(_chunk(model, finish=finish))
        self.event(_chunk(model, usage={"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS,
                                        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}))
        self.event("[DONE]")

    def stream_text(self, body: dict[str, Any], text: str, pause: float = 0.0) -> None:
        model = body.get("model", "fake-model")
        self.start_stream()
        self.event(_chunk(model, {"role": "assistant", "content": ""}))
        if self.trickle(text, pause, lambda piece: self.event(_chunk(model, {"content": piece}))):
            self.finish_stream(model, "stop")

    def stream_tool_call(self, body: dict[str, Any], name: str, args: str) -> None:
        model = body.get("model", "fake-model")
        self.start_stream()
        self.event(_chunk(model, {"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": "call_fake_1", "type": "function", "function": {"name": name, "arguments": ""}}]}))
        self.event(_chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": args}}]}))
        self.finish_stream(model, "tool_calls")


FakeLLM.handler = ChatHandler


def models_json(url: str) -> dict[str, Any]:
    """pi's models.json for this server: provider ``fake``, model ``fake-model`` (a test writes it
    into pi's agent directory)."""
    return {"providers": {"fake": {
        "baseUrl": url, "api": "openai-completions", "apiKey": "dummy-key",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "fake-model", "contextWindow": 32000, "maxTokens": 4096}]}}}
