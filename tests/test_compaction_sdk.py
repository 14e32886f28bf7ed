"""Compaction as programs see it: the Python Agent SDK, and the stream-json protocol raw.

A program compacts with the prompt ``/compact [instructions]`` (the SDK's way: it gets a
``compact_boundary`` system message and a result) or with the ``compact`` control request;
PreCompact hooks (a command in the settings, or the program's own callback) hear the trigger
and the instructions, and may refuse: then nothing is compacted and the program is told why.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer, Turn
from helpers import TIME_FACTOR, LazyModule, clean_env
from test_compaction_e2e import (
    MODEL,
    SUMMARY,
    SUMMARY_ANSWER,
    after_compaction,
    is_summary,
    pre_compact,
    texts,
)

sdk = LazyModule("claude_agent_sdk")

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60 * TIME_FACTOR)]

TASKLOOM = str(Path(sys.executable).with_name("taskloom"))


def respond(body: dict[str, Any]) -> Turn:
    """The model: a summary when asked for one, a short answer otherwise."""
    if is_summary(body):
        return Turn(text=SUMMARY_ANSWER)
    if after_compaction(body):
        return Turn(text="From the summary.", input_tokens=800)
    return Turn(text="Hello back.", input_tokens=4_321)


def summaries(server: FakeAnthropicServer) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if is_summary(r.body)]


def options(server: FakeAnthropicServer, cwd: Path, **extra: Any) -> Any:
    env = {
        **clean_env(),
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "test",
        "TASKLOOM_HOME": str(cwd / "home"),
    }
    return sdk.ClaudeAgentOptions(cli_path=TASKLOOM, cwd=str(cwd), env=env, model=MODEL, **extra)


async def test_an_sdk_program_compacts_with_a_prompt_and_its_hook_hears_it(
    tmp_path: Path,
) -> None:
    heard: list[dict[str, Any]] = []

    async def hook(hook_input: Any, tool_use_id: str | None, context: Any) -> Any:
        heard.append(dict(hook_input))
        return {}

    hooks = {"PreCompact": [sdk.HookMatcher(matcher="manual", hooks=[hook])]}
    with FakeAnthropicServer(responder=respond) as server:
        async with sdk.ClaudeSDKClient(options=options(server, tmp_path, hooks=hooks)) as client:
            await client.query("hello")
            first = [m async for m in client.receive_response()]
            await client.query("/compact keep the greeting")
            compacted = [m async for m in client.receive_response()]
            await client.query("and now?")
            after = [m async for m in client.receive_response()]
        bodies = [r.body for r in server.requests]
    assert isinstance(first[-1], sdk.ResultMessage) and first[-1].result == "Hello back."
    [boundary] = [
        m for m in compacted if isinstance(m, sdk.SystemMessage) and m.subtype == "compact_boundary"
    ]
    metadata = boundary.data["compact_metadata"]
    assert metadata["trigger"] == "manual"
    # The last request's 4,321 tokens, and what was added after it (estimated).
    assert 4_321 < metadata["pre_tokens"] < 4_321 + 200
    result = compacted[-1]
    assert isinstance(result, sdk.ResultMessage) and not result.is_error
    assert result.session_id == first[-1].session_id
    # The callback heard the trigger and the instructions, and they reached the summary.
    [pre] = heard
    assert pre["hook_event_name"] == "PreCompact" and pre["trigger"] == "manual"
    assert pre["custom_instructions"] == "keep the greeting"
    [summary] = summaries(server)
    assert "keep the greeting" in "\n".join(texts(summary["messages"][-1]["content"]))
    assert isinstance(after[-1], sdk.ResultMessage) and after[-1].result == "From the summary."
    assert after_compaction(bodies[-1])
    assert SUMMARY in texts(bodies[-1]["messages"][0]["content"])[0]


async def test_an_sdk_callback_that_blocks_refuses_the_compaction_saying_why(
    tmp_path: Path,
) -> None:
    async def refuse(hook_input: Any, tool_use_id: str | None, context: Any) -> Any:
        return {"decision": "block", "reason": "the auditors need the whole log"}

    hooks = {"PreCompact": [sdk.HookMatcher(hooks=[refuse])]}
    with FakeAnthropicServer(responder=respond) as server:
        async with sdk.ClaudeSDKClient(options=options(server, tmp_path, hooks=hooks)) as client:
            await client.query("hello")
            [m async for m in client.receive_response()]
            await client.query("/compact")
            refused = [m async for m in client.receive_response()]
            await client.query("still there?")
            after = [m async for m in client.receive_response()]
        bodies = [r.body for r in server.requests]
    result = refused[-1]
    assert isinstance(result, sdk.ResultMessage) and result.is_error
    assert "the auditors need the whole log" in json.dumps(result.result or "") + json.dumps(
        getattr(result, "errors", None) or []
    )
    assert not any(
        isinstance(m, sdk.SystemMessage) and m.subtype == "compact_boundary" for m in refused
    )
    assert summaries(server) == []
    # The conversation goes on whole.
    assert isinstance(after[-1], sdk.ResultMessage) and after[-1].result == "Hello back."
    assert not after_compaction(bodies[-1])
    assert "hello" in texts(bodies[-1]["messages"][0]["content"])


class Stream:
    """``taskloom`` over stream-json, fed line by line; what it prints read as it comes."""

    def __init__(self, tmp_path: Path, server: FakeAnthropicServer, *args: str) -> None:
        argv = [sys.executable, "-m", "taskloom", "--input-format", "stream-json"]
        argv += ["--output-format", "stream-json", "--verbose", "--model", MODEL, *args]
        env = clean_env(
            TASKLOOM_HOME=str(tmp_path / "home"),
            ANTHROPIC_BASE_URL=server.url,
            ANTHROPIC_API_KEY="test",
        )
        self.stderr = (tmp_path / "stderr").open("w")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            cwd=tmp_path,
            env=env,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def send(self, line: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(line) + "\n")
        self.proc.stdin.flush()

    def until(self, want: Any) -> dict[str, Any]:
        """The next line ``want`` holds for (bounded); the lines before it are kept."""
        while True:
            line = self.lines.get(timeout=15 * TIME_FACTOR)
            assert line is not None, "taskloom ended first"
            self.seen.append(line)
            if want(line):
                return line

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            code = self.proc.wait(15 * TIME_FACTOR)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.stderr.close()
        return code


def user(text: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": text}}


def control(request_id: str, subtype: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": "control_request",
        "request_id": request_id,
        "request": {"subtype": subtype, **fields},
    }


def answer_to(request_id: str) -> Any:
    def match(line: dict[str, Any]) -> bool:
        return line["type"] == "control_response" and line["response"]["request_id"] == request_id

    return match


def is_result(line: dict[str, Any]) -> bool:
    return bool(line["type"] == "result")


def test_the_compact_control_request_and_a_command_hook_that_blocks_or_not(
    tmp_path: Path,
) -> None:
    record = tmp_path / "pre-compact.jsonl"
    hook = (
        f"payload=$(cat); printf '%s\\n' \"$payload\" >> {record}; "
        "case $payload in *never*) echo 'never, says the policy' >&2; exit 2;; esac"
    )
    (tmp_path / "settings.json").write_text(json.dumps(pre_compact(hook)))
    with FakeAnthropicServer(responder=respond) as server:
        stream = Stream(tmp_path, server, "--settings", str(tmp_path / "settings.json"))
        try:
            # Before any conversation: refused, saying so.
            stream.send(control("c0", "compact"))
            early = stream.until(answer_to("c0"))["response"]
            assert early["subtype"] == "error" and "no conversation yet" in early["error"]
            stream.send(user("hello"))
            stream.until(is_result)
            # A hook that exits 2 refuses it: an error answer with its reason; no summary.
            stream.send(control("c1", "compact", instructions="never mind"))
            refused = stream.until(answer_to("c1"))["response"]
            assert refused["subtype"] == "error"
            assert "never, says the policy" in refused["error"]
            assert summaries(server) == []
            # Otherwise: compacted, the boundary line first, then the answer.
            stream.send(control("c2", "compact", instructions="keep the names"))
            allowed = stream.until(answer_to("c2"))["response"]
            assert allowed["subtype"] == "success"
            pre_tokens = allowed["response"]["pre_tokens"]
            assert 4_321 < pre_tokens < 4_321 + 200  # the last request's, and what came after
            [boundary] = [line for line in stream.seen if line.get("subtype") == "compact_boundary"]
            assert boundary["compact_metadata"] == {"trigger": "manual", "pre_tokens": pre_tokens}
            assert stream.seen.index(boundary) < len(stream.seen) - 1  # before its answer
            stream.send(user("and now?"))
            assert stream.until(is_result)["result"] == "From the summary."
        finally:
            code = stream.close()
        assert code == 0
    heard = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(h["trigger"], h["custom_instructions"]) for h in heard] == [
        ("manual", "never mind"),
        ("manual", "keep the names"),
    ]
    assert all(h["hook_event_name"] == "PreCompact" for h in heard)
    [summary] = summaries(server)
    assert "keep the names" in "\n".join(texts(summary["messages"][-1]["content"]))
