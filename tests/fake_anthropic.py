"""A fake Anthropic Messages API (``POST /v1/messages``, server-sent events) on 127.0.0.1, for Claude Code.

The script is tests/fakellm.py's; this file only reads Anthropic requests and writes Anthropic streams,
as Claude Code 2.1 was measured to read them (``message_start``, ``content_block_*``, ``message_delta``
with the stop reason and usage, ``message_stop``).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from fakellm import INPUT_TOKENS, OUTPUT_TOKENS, FakeLLM, ScriptedHandler

#: Text Claude Code adds to a user message for the model's eyes only; never part of the prompt.
REMINDER = "<system-reminder>"
#: The result in the notice Claude Code adds (inside a reminder) when a background subagent finished.
NOTIFIED = re.compile(r"<task-notification>.*?<result>(.*?)</result>", re.S)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or () if isinstance(b, dict)]


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or () if isinstance(part, dict))


def prompt_blocks(message: dict[str, Any]) -> list[str]:
    """The texts of a user message that a person (or roost) wrote."""
    return [b.get("text", "") for b in _blocks(message)
            if b.get("type") == "text" and not b.get("text", "").lstrip().startswith(REMINDER)]


class MessagesHandler(ScriptedHandler):
    """The Anthropic Messages API, streamed."""

    def open_message(self, body: dict[str, Any]) -> None:
        self.start_stream()
        with self.fake.lock:
            self.message_id = f"msg_fake_{len(self.fake.requests)}"  # one id per call, as the real API's
        self.event({"type": "message_start", "message": {
            "id": self.message_id, "type": "message", "role": "assistant", "model": body.get("model", "fake-model"),
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}}}, "message_start")

    def close_message(self, stop: str) -> None:
        self.fake.charge()
        self.event({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": OUTPUT_TOKENS}}, "message_delta")
        self.event({"type": "message_stop"}, "message_stop")

    def block(self, index: int, start: dict[str, Any]) -> None:
        self.event({"type": "content_block_start", "index": index, "content_block": start}, "content_block_start")

    def delta(self, index: int, delta: dict[str, Any]) -> None:
        self.event({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")

    def end_block(self, index: int) -> None:
        self.event({"type": "content_block_stop", "index": index}, "content_block_stop")

    def stream_text(self, body: dict[str, Any], text: str, pause: float = 0.0) -> None:
        self.open_message(body)
        self.block(0, {"type": "text", "text": ""})
        if self.trickle(text, pause, lambda piece: self.delta(0, {"type": "text_delta", "text": piece})):
            self.end_block(0)
            self.close_message("end_turn")

    def stream_failure(self, body: dict[str, Any], message: str) -> None:
        self.open_message(body)
        self.event({"type": "error", "error": {"type": "api_error", "message": message}}, "error")

    def stream_tool_call(self, body: dict[str, Any], name: str, args: str) -> None:
        self.open_message(body)
        self.block(0, {"type": "tool_use", "id": f"toolu_fake_{len(self.fake.requests)}", "name": name, "input": {}})
        self.delta(0, {"type": "input_json_delta", "partial_json": args})
        self.end_block(0)
        self.close_message("tool_use")


    def limit_body(self, seconds: float, usage: bool) -> dict[str, Any]:
        message = ("Claude AI usage limit reached" if usage else
                   "This request would exceed your organization's rate limit of 50 requests per minute.")
        return {"type": "error", "error": {"type": "rate_limit_error", "message": message}}

    def limit_headers(self, seconds: float, usage: bool) -> dict[str, str]:
        reset = int(time.time() + seconds)
        if usage:  # a plan's limit, as the Messages API says it to a subscription
            return {"anthropic-ratelimit-unified-status": "rejected", "anthropic-ratelimit-unified-reset": str(reset),
                    "anthropic-ratelimit-unified-representative-claim": "five_hour"}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reset))
        return {"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": stamp}


class FakeAnthropic(FakeLLM):
    """Claude Code's model: give it ``ANTHROPIC_BASE_URL`` = :attr:`base_url`."""

    handler = MessagesHandler

    @property
    def base_url(self) -> str:
        return self.url.removesuffix("/v1")

    def turn_of(self, body: dict[str, Any]) -> tuple[str, list[str]]:
        """The last user message with a prompt in it, and the tool results that came after it; when the
        last user message is only the notice of a background subagent's end, ``subagent said: <its
        result>`` (``SLOW subagent said: …`` when the result has SLOW in it: an answer to stop)."""
        messages = [m for m in body.get("messages", []) if m.get("role") == "user"]
        last = messages[-1] if messages else {}
        notice = None if prompt_blocks(last) else NOTIFIED.search("".join(b.get("text", "") for b in _blocks(last)))
        if notice:
            said = f"subagent said: {notice.group(1).strip()}"
            return ("SLOW " + said if "SLOW" in said else said), []
        # Claude Code sends a message after an interrupted turn in one user message with what came before
        # it (a tool result): only the tool results after the prompt are this turn's.
        blocks = [b for m in messages for b in _blocks(m)]
        prompts = [i for i, b in enumerate(blocks) if prompt_blocks({"content": [b]})]
        if not prompts:
            return "", []
        start = prompts[-1]
        return blocks[start]["text"], [_result_text(b) for b in blocks[start:] if b.get("type") == "tool_result"]

    def main_requests(self) -> list[dict[str, Any]]:
        """The requests of the agent's own conversation (Claude Code also asks the model small things
        of its own, such as a title, with no tools)."""
        with self.lock:
            return [b for b in self.requests if b.get("tools")]


if __name__ == "__main__":  # a probe: `python tests/fake_anthropic.py` serves until interrupted
    fake = FakeAnthropic().start()
    print(fake.base_url, flush=True)
    try:
        fake.thread.join()
    finally:
        print(json.dumps(fake.requests)[:0])
