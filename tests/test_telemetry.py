"""OpenTelemetry: the spans of a run with one background agent reach a local OTLP receiver."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from coordinator_scenario import texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import clean_env

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver on loopback: it keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                receiver.paths.append(self.path)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        receiver.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


AGENTS = json.dumps(
    {"scribe": {"description": "Writes.", "prompt": "You write.", "memory": "project"}}
)


def lead_and_agent(body: dict[str, Any]) -> Turn:
    first = " ".join(texts(body["messages"][0]["content"]))
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if "scribe job" in first:
        if turns == 0:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "echo hi"}),))
        return Turn(text="written")
    seen = " ".join(t for m in body["messages"] if m["role"] == "user" for t in texts(m["content"]))
    if turns == 0:
        return Turn(tool_calls=(ToolCall("TeamCreate", {"team_name": "crew"}),))
    if turns == 1:
        spawn = {"description": "scribe", "prompt": "scribe job", "subagent_type": "scribe",
                 "run_in_background": True}  # fmt: skip
        return Turn(tool_calls=(ToolCall("Agent", spawn),))
    done = seen.count("<task-notification>")
    if done == 0:
        return Turn(text="Waiting.")
    if '"name": "SendMessage"' not in json.dumps(body["messages"]):  # a second run: a span
        agent_id = re.findall(r"<task-id>(a[0-9a-z]+)</task-id>", seen)[0]
        again = {"to": agent_id, "message": "once more", "summary": "again"}
        return Turn(tool_calls=(ToolCall("SendMessage", again),))
    if done < 2:
        return Turn(text="Waiting again.")
    if "TeamDelete" not in json.dumps(body["messages"]):
        return Turn(tool_calls=(ToolCall("TeamDelete", {}),))
    return Turn(text="All done.")


@pytest.mark.e2e
def test_a_run_s_spans_arrive_with_the_agent_tree_and_its_events(
    tmp_path: Path, receiver: Receiver
) -> None:
    with FakeAnthropicServer(responder=lead_and_agent) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-test")
        env.update(TASKLOOM_HOME=str(tmp_path / "home"), OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url)
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", "-p", "Go.", "--output-format", "stream-json",
             "--verbose", "--model", "claude-sonnet-4-5", "--dangerously-skip-permissions",
             "--teams", "--agents", AGENTS],
            capture_output=True, text=True, timeout=90, cwd=tmp_path, env=env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1])["result"] == "All done."
    assert set(receiver.paths) == {"/v1/traces"}
    spans = receiver.spans
    by_name: dict[str, list[Any]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (session,) = by_name["taskloom.session"]
    agent, again = sorted(by_name["taskloom.agent"], key=lambda s: s.start_time_unix_nano)
    assert session.parent_span_id == b"" and agent.parent_span_id == session.span_id
    assert again.parent_span_id == session.span_id  # resumed: a run (and span) of its own
    assert len({s.trace_id for s in spans}) == 1  # one tree
    requests = by_name["taskloom.model_request"]
    mine = [r for r in requests if r.parent_span_id == agent.span_id]
    resumed = [r for r in requests if r.parent_span_id == again.span_id]
    lead = [r for r in requests if r.parent_span_id == session.span_id]
    assert len(mine) == 2 and len(resumed) == 1
    assert len(lead) == len(requests) - 3 >= 4
    again_events = {e.name for e in again.events}
    assert {"agent_tool_selected", "agent_tool_terminated"} <= again_events
    by_parent = {(t.parent_span_id, _attr(t, "tool")) for t in by_name["taskloom.tool"]}
    assert (agent.span_id, "Bash") in by_parent
    assert {(session.span_id, n) for n in ("TeamCreate", "Agent", "TeamDelete")} <= by_parent
    # The named events (agent_tool_selected and the rest), with their fields, on their span.
    events = {e.name: e for e in agent.events}
    assert {"agent_tool_selected", "agent_memory_loaded", "agent_tool_terminated"} <= set(events)
    selected = {a.key: a.value for a in events["agent_tool_selected"].attributes}
    assert selected["agent_type"].string_value == "scribe"
    assert selected["is_async"].bool_value is True and selected["is_fork"].bool_value is False
    assert {"model", "source"} <= set(selected)
    loaded = {a.key: a.value for a in events["agent_memory_loaded"].attributes}
    assert loaded["scope"].string_value == "project"
    ended = {a.key: a.value for a in events["agent_tool_terminated"].attributes}
    assert ended["reason"].string_value == "completed" and ended["duration_ms"].int_value >= 0
    session_events = {e.name: e for e in session.events}
    created = {a.key: a.value for a in session_events["team_created"].attributes}
    assert created["team_name"].string_value == "crew" and "teammate_count" in created
    assert "team_deleted" in session_events


def _attr(span: Any, key: str) -> str:
    return next(a.value.string_value for a in span.attributes if a.key == key)


def test_without_an_endpoint_no_opentelemetry_module_is_imported(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import asyncio, sys
        import taskloom
        from taskloom.testing import FunctionModel, ToolCall, Turn

        def respond(request):
            first = str(request.messages[0].content)
            turns = sum(1 for m in request.messages if m.role == "assistant")
            if "sub job" in first:  # a background agent that runs a command
                if turns == 0:
                    return Turn(tool_calls=(ToolCall("Bash", {{"command": "echo hi"}}),))
                return "sub done"
            if turns == 0:
                spawn = {{"description": "sub", "prompt": "sub job", "run_in_background": True}}
                return Turn(tool_calls=(ToolCall("Agent", spawn),))
            return "done"

        async def main():
            async with taskloom.Harness(model=FunctionModel(respond), cwd={str(tmp_path)!r},
                                        skip_permissions=True) as h:
                async for _ in h.run("go"):
                    pass
                ran = {{(s.type.value, s.status.value) for s in h.tasks()}}
                assert ran == {{("local_agent", "completed"), ("local_bash", "completed")}}, ran
        asyncio.run(main())
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    env = clean_env(TASKLOOM_HOME=str(tmp_path / "home"))
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        env.pop(name, None)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
