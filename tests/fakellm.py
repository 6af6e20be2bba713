"""A fake OpenAI-compatible chat-completions server on 127.0.0.1, scripted by the last user message.

The pi tests point a real pi at it, so a whole agent runs with no model and no network. What it
answers depends on the last user message (the prompt roost delivered):

- ``CALL <tool> <json args>``: a call of that tool; once the tool's result is in, a text answer
  quoting it (``tool said: ...``).
- ``SLOW``: a text stream that trickles for up to 30 s (something to abort).
- ``FLAKY <tag>``: HTTP 503 the first time a tag is seen, a normal answer after that.
- ``BAD400``: HTTP 400, an error no retry can fix.
- anything else: ``echo: <its first line>``.

It records every request body, so a test can assert what history reached the model.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SLOW_LIMIT = 30.0


def message_text(message: dict[str, Any]) -> str:
    """The text of a chat message whose content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


class FakeLLM:
    """The server; ``url`` is the base URL to give pi (``.../v1``)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.flaky_seen: set[str] = set()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
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

    def bodies_with(self, needle: str) -> list[dict[str, Any]]:
        """The requests whose last user message contains ``needle``."""
        with self.lock:
            return [b for b in self.requests if needle in message_text(last_user(b["messages"]) or {})]

    def first_flaky(self, tag: str) -> bool:
        """True only the first time ``tag`` is asked for."""
        with self.lock:
            first = tag not in self.flaky_seen
            self.flaky_seen.add(tag)
            return first


def last_user(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((m for m in reversed(messages) if m.get("role") == "user"), None)


def _chunk(model: str, delta: dict[str, Any] | None = None, finish: str | None = None,
           usage: dict[str, int] | None = None) -> dict[str, Any]:
    choices = [] if usage else [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    out: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
                           "model": model, "choices": choices}
    if usage:
        out["usage"] = usage
    return out


def _handler_for(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            fake.record(body)
            messages = body.get("messages", [])
            model = body.get("model", "fake-model")
            user = last_user(messages)
            prompt = message_text(user) if user else ""
            after_user = messages[messages.index(user) + 1:] if user else []
            tool_results = [message_text(m) for m in after_user if m.get("role") == "tool"]
            word, _, rest = prompt.strip().partition(" ")
            if tool_results:
                self.stream_text(model, "tool said: " + tool_results[-1])
            elif word == "CALL":
                name, _, args = rest.partition(" ")
                self.stream_tool_call(model, name, args or "{}")
            elif word == "SLOW":
                self.stream_text(model, "tick " * 10_000, pause=0.05)
            elif word == "FLAKY" and fake.first_flaky(rest):
                self.error(503, "fake overloaded, try again")
            elif word == "BAD400":
                self.error(400, "fake bad request")
            else:
                first = prompt.strip().splitlines()[0] if prompt.strip() else ""
                self.stream_text(model, "echo: " + first)

        def error(self, status: int, message: str) -> None:
            data = json.dumps({"error": {"message": message, "type": "fake_error"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def start_stream(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

        def event(self, data: dict[str, Any] | str) -> None:
            payload = data if isinstance(data, str) else json.dumps(data)
            self.wfile.write(f"data: {payload}\n\n".encode())
            self.wfile.flush()

        def finish_stream(self, model: str, finish: str) -> None:
            self.event(_chunk(model, finish=finish))
            self.event(_chunk(model, usage={"prompt_tokens": 120, "completion_tokens": 8, "total_tokens": 128}))
            self.event("[DONE]")

        def stream_text(self, model: str, text: str, pause: float = 0.0) -> None:
            self.start_stream()
            self.event(_chunk(model, {"role": "assistant", "content": ""}))
            words = text.split(" ")
            deadline = time.monotonic() + SLOW_LIMIT
            try:
                for i, word in enumerate(words):
                    self.event(_chunk(model, {"content": word if i == 0 else " " + word}))
                    if pause:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(pause)
                self.finish_stream(model, "stop")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client aborted: that is what a slow stream is for

        def stream_tool_call(self, model: str, name: str, args: str) -> None:
            self.start_stream()
            self.event(_chunk(model, {"role": "assistant", "content": None, "tool_calls": [
                {"index": 0, "id": "call_fake_1", "type": "function", "function": {"name": name, "arguments": ""}}]}))
            self.event(_chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": args}}]}))
            self.finish_stream(model, "tool_calls")

    return Handler


def models_json(url: str) -> dict[str, Any]:
    """pi's models.json for this server: provider ``fake``, model ``fake-model`` (a test writes it
    into pi's agent directory)."""
    return {"providers": {"fake": {
        "baseUrl": url, "api": "openai-completions", "apiKey": "dummy-key",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "fake-model", "contextWindow": 32000, "maxTokens": 4096}]}}}
