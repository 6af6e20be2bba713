"""A fake OpenAI Responses API (``POST /v1/responses``, server-sent events) on 127.0.0.1, for Codex.

The script is tests/fakellm.py's; this file only reads Responses requests (``input`` items) and writes
Responses streams, as Codex 0.169 was measured to read them (``response.created``,
``response.output_text.delta``, ``response.output_item.done`` with the whole item, and
``response.completed`` with the usage: without it Codex calls the stream broken and retries).
"""

from __future__ import annotations

import json
import textwrap
import time
from typing import Any

from fakellm import INPUT_TOKENS, OUTPUT_TOKENS, FakeLLM, ScriptedHandler

#: Openings of the user messages Codex writes itself (its environment, the project's instructions).
CONTEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<permissions")


def input_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


def prompts(body: dict[str, Any]) -> list[str]:
    """The user messages of a request that a person (or roost) wrote, oldest first."""
    return [t for item in body.get("input", []) if item.get("type") == "message" and item.get("role") == "user"
            for t in [input_text(item)] if t and not t.lstrip().startswith(CONTEXT)]


def _output(item: dict[str, Any]) -> str:
    output = item.get("output")
    return output if isinstance(output, str) else json.dumps(output)


class ResponsesHandler(ScriptedHandler):
    """The Responses API, streamed."""

    def open_response(self) -> str:
        self.start_stream()
        rid = f"resp_fake_{len(self.fake.requests)}"
        self.event({"type": "response.created", "response": {"id": rid}}, "response.created")
        return rid

    def close_response(self, rid: str) -> None:
        usage = {"input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}
        self.fake.charge()
        self.event({"type": "response.completed", "response": {"id": rid, "usage": usage}}, "response.completed")

    def item_done(self, item: dict[str, Any]) -> None:
        self.event({"type": "response.output_item.done", "item": item}, "response.output_item.done")

    def stream_text(self, body: dict[str, Any], text: str, pause: float = 0.0) -> None:
        rid = self.open_response()
        item = {"type": "message", "role": "assistant", "id": f"msg_{rid}", "content": []}
        self.event({"type": "response.output_item.added", "item": item}, "response.output_item.added")
        delta = {"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0, "content_index": 0}
        if self.trickle(text, pause, lambda piece: self.event({**delta, "delta": piece}, delta["type"])):
            self.item_done({**item, "content": [{"type": "output_text", "text": text}]})
            self.close_response(rid)

    def stream_failure(self, body: dict[str, Any], message: str) -> None:
        rid = self.open_response()
        self.event({"type": "response.failed", "response": {"id": rid, "status": "failed", "error": {
            "code": "server_error", "message": message}}}, "response.failed")

    def stream_tool_call(self, body: dict[str, Any], name: str, args: str) -> None:
        rid = self.open_response()
        namespace, _, tool = name.rpartition("__")  # an MCP tool is ``mcp__<server>__<tool>``: a namespace's
        call = {"type": "function_call", "id": f"fc_{rid}", "call_id": f"call_{rid}", "name": tool, "arguments": args}
        self.item_done({**call, "namespace": namespace} if namespace else call)
        self.close_response(rid)


    def limit_body(self, seconds: float, usage: bool) -> dict[str, Any]:
        if not usage:
            return super().limit_body(seconds, usage)
        return {"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached",
                          "plan_type": "plus", "resets_at": int(time.time() + seconds),
                          "resets_in_seconds": int(seconds)}}


class FakeOpenAI(FakeLLM):
    """Codex's model: :meth:`config_toml` is the provider config that points Codex here."""

    handler = ResponsesHandler

    def turn_of(self, body: dict[str, Any]) -> tuple[str, list[str]]:
        """The last prompt, and the tool results that came after it."""
        items = body.get("input", [])
        for i in range(len(items) - 1, -1, -1):
            item = items[i]
            if item.get("type") == "message" and item.get("role") == "user" and prompts({"input": [item]}):
                return input_text(item), [_output(x) for x in items[i:] if x.get("type") == "function_call_output"]
        return "", []

    def config_toml(self) -> str:
        """A CODEX_HOME config.toml whose model is this server (the key comes from ``FAKE_OPENAI_KEY``)."""
        return textwrap.dedent(f"""\
            model = "fake-model"
            model_provider = "fake"
            [model_providers.fake]
            name = "fake"
            base_url = "{self.url}"
            wire_api = "responses"
            env_key = "FAKE_OPENAI_KEY"
            """)


if __name__ == "__main__":  # a probe: `python tests/fake_openai.py` prints a config.toml and serves
    fake = FakeOpenAI().start()
    print(fake.config_toml(), flush=True)
    fake.thread.join()
