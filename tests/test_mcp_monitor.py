"""MonitorMcp: an MCP server's resource changes, log and progress become ``next`` notifications.

A real server written with the SDK (``mcp_watch_server.py``) runs over stdio; the model is a
FunctionModel. Each test checks what the model was told, how the ``monitor_mcp`` task ended,
and what the server saw (its record file: subscribe, unsubscribe); the conftest fixture checks
that no server process is left.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers import TIME_FACTOR, harness, main_context, wait_until
from taskloom.events import UserTurn
from taskloom.mcp.config import McpServerConfig
from taskloom.mcp.manager import McpManager
from taskloom.mcp.monitor import MonitorMcpTool
from taskloom.messages import TextBlock, ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import TaskStatus, TaskType
from taskloom.testing import FunctionModel, ToolCall, Turn

SERVER = str(Path(__file__).with_name("mcp_watch_server.py"))
ECHO = str(Path(__file__).with_name("mcp_echo_server.py"))
URI = "watch://counter"
STARTED = re.compile(r"Monitor started with ID: (m[0-9a-z]{8})")


def _project(tmp_path: Path) -> Path:
    """A project whose ``.mcp.json`` names the watch server, recording to ``record``."""
    record = tmp_path / "record"
    servers = {"watch": {"command": sys.executable, "args": [SERVER, "--record", str(record)]}}
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
    return record


def _last_user_text(request: ModelRequest) -> str:
    parts: list[str] = []
    for block in request.messages[-1].content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolResultBlock):
            parts.append(block.text())
    return "\n".join(parts)


def _told(request: ModelRequest) -> int:
    """How many events the monitor notifications of the last user message tell."""
    found = re.findall(r"received (\d+) new events?", _last_user_text(request))
    return sum(int(n) for n in found)


async def _run(h: Any, prompt: str) -> list[Any]:
    return [e async for e in h.run(prompt)]


def _monitor_script(
    first: ToolCall, act: ToolCall, events: int, seen: list[str]
) -> Callable[[ModelRequest], Turn | str]:
    """Start the monitor, act on the server, wait until ``events`` are told, then stop it."""
    told = 0
    monitor = ""
    stopped = False

    def respond(request: ModelRequest) -> Turn | str:
        nonlocal told, monitor, stopped
        text = _last_user_text(request)
        seen.append(text)
        if len(seen) == 1:
            return Turn(tool_calls=(first,))
        if len(seen) == 2:
            (monitor,) = STARTED.findall(text)
            return Turn(tool_calls=(act,))
        told += _told(request)
        if told >= events and not stopped:
            stopped = True
            return Turn(tool_calls=(ToolCall("TaskStop", {"task_id": monitor}),))
        return "waiting" if told < events else "done"

    return respond


async def test_three_updates_of_a_resource_are_told_and_task_stop_unsubscribes(
    tmp_path: Path,
) -> None:
    record = _project(tmp_path)
    seen: list[str] = []
    watch = {"server": "watch", "resource": URI, "description": "counter"}
    respond = _monitor_script(
        ToolCall("MonitorMcp", watch), ToolCall("mcp__watch__bump", {"times": 3}), 3, seen
    )
    async with harness(tmp_path, FunctionModel(respond)) as h:
        events = await asyncio.wait_for(_run(h, "watch the counter"), 60 * TIME_FACTOR)
        notes = [n for e in events if isinstance(e, UserTurn) for n in e.notifications]
        (state,) = h.runtime.list(types=[TaskType.MONITOR_MCP], include_evicted=True)
    told = [n for n in notes if n.kind == "monitor"]
    # Three changes in one to three notifications of priority next, naming the monitor.
    assert 1 <= len(told) <= 3, [n.text for n in told]
    assert {n.priority for n in told} == {"next"}
    text = "\n".join(n.text for n in told)
    assert text.count(f"updated: {URI}") == 3
    assert 'Monitor "counter" received' in text
    assert "counter = 3" in text  # told with the resource's contents
    # TaskStop ended it, and the server was asked to unsubscribe; no terminal notice beside.
    assert state.status == TaskStatus.KILLED
    assert kind_of(state).status_note(state) == " events=3"
    assert [n for n in notes if n.kind == "terminal"] == []
    lines = record.read_text().splitlines()
    assert f"subscribe {URI}" in lines and lines[-1] == f"unsubscribe {URI}"


async def test_the_death_of_its_server_ends_the_monitor_failed(tmp_path: Path) -> None:
    record = _project(tmp_path)
    seen: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        seen.append(_last_user_text(request))
        if len(seen) == 1:
            watch = {"server": "watch", "resource": URI, "description": "counter"}
            return Turn(tool_calls=(ToolCall("MonitorMcp", watch),))
        if len(seen) == 2:  # the server dies under it, killed from outside
            (pid,) = [int(line[4:]) for line in record.read_text().splitlines() if "pid" in line]
            os.kill(pid, signal.SIGKILL)
            return "waiting"
        return "done"

    async with harness(tmp_path, FunctionModel(respond)) as h:
        events = await asyncio.wait_for(_run(h, "watch the counter"), 60 * TIME_FACTOR)
        notes = [n for e in events if isinstance(e, UserTurn) for n in e.notifications]
        (state,) = h.runtime.list(types=[TaskType.MONITOR_MCP], include_evicted=True)
        assert h.started.mcp is not None
        status = h.started.mcp.status()["watch"]
    assert state.status == TaskStatus.FAILED
    (end,) = [n for n in notes if n.kind == "terminal"]
    assert "<status>failed</status>" in end.text
    assert re.search(r"Monitor .counter. failed: the server was killed by signal 9", end.text)
    assert "killed by signal 9" in seen[-1]  # the model was told why
    assert status.startswith("failed: the server was killed by signal 9")


async def test_a_server_s_log_and_progress_are_told(tmp_path: Path) -> None:
    _project(tmp_path)
    seen: list[str] = []
    respond = _monitor_script(
        ToolCall("MonitorMcp", {"server": "watch", "description": "watch log"}),
        ToolCall("mcp__watch__work", {"steps": 2}),
        2,
        seen,
    )
    async with harness(tmp_path, FunctionModel(respond)) as h:
        events = await asyncio.wait_for(_run(h, "watch the log"), 60 * TIME_FACTOR)
        notes = [n for e in events if isinstance(e, UserTurn) for n in e.notifications]
    text = "\n".join(n.text for n in notes if n.kind == "monitor")
    assert "progress 1/2: step 1" in text and "progress 2/2: step 2" in text


async def test_log_messages_and_refusals_through_the_tool(tmp_path: Path) -> None:
    record = tmp_path / "record"
    servers = {
        "watch": McpServerConfig(
            "watch", command=sys.executable, args=(SERVER, "--record", str(record))
        ),
        "echo": McpServerConfig("echo", command=sys.executable, args=(ECHO,)),
    }
    async with TaskRuntime(home=tmp_path / "home") as rt:
        manager = McpManager(servers)
        try:
            await manager.start()
            tool = MonitorMcpTool(manager)
            ctx = main_context(_Holder(rt, tmp_path), tmp_path)

            async def call(**params: Any) -> Any:
                checked = tool.validate(params)
                assert not hasattr(checked, "is_error"), checked
                return await tool.call(checked, ctx)  # type: ignore[arg-type]

            # Refused, naming what is wrong; no task is left behind.
            missing = await call(server="nope")
            assert missing.is_error and "'nope'" in missing.content and "echo" in missing.content
            plain = await call(server="echo", resource="file:///x")
            assert plain.is_error and "does not offer resource subscriptions" in plain.content
            both = await call(server="watch", resource=URI, level="info")
            assert both.is_error and "level" in both.content
            assert rt.list(types=[TaskType.MONITOR_MCP]) == []

            started = await call(server="watch")
            (task_id,) = STARTED.findall(started.content)
            await manager.call("watch", "log", {"message": "hello", "count": 2})
            out = Path(rt.output_path(task_id))
            await wait_until(lambda: "hello 2" in out.read_text(), what="the log in its file")
            await wait_until(lambda: bool(rt.drain()), what="a monitor notification")
        finally:
            await manager.aclose()
        state = rt.get(task_id)
        assert state is not None
        # The session closing its servers stops the monitor first, saying why.
        assert state.status == TaskStatus.KILLED
        assert state.stopped_reason == "its MCP server was shut down with the session"
        assert "[info] app: hello 1" in Path(state.output_file).read_text()


async def test_the_session_s_end_unsubscribes_a_live_monitor(tmp_path: Path) -> None:
    record = tmp_path / "record"
    cfg = McpServerConfig("watch", command=sys.executable, args=(SERVER, "--record", str(record)))
    async with TaskRuntime(home=tmp_path / "home") as rt:
        manager = McpManager({"watch": cfg})
        try:
            tool = MonitorMcpTool(manager)
            ctx = main_context(_Holder(rt, tmp_path), tmp_path)
            params = tool.validate({"server": "watch", "resource": URI})
            result = await tool.call(params, ctx)  # type: ignore[arg-type]
            assert not result.is_error, result.content
        finally:
            await manager.aclose()
        (state,) = rt.list(types=[TaskType.MONITOR_MCP], include_evicted=True)
    assert state.status == TaskStatus.KILLED
    assert record.read_text().splitlines()[-1] == f"unsubscribe {URI}"


async def _start_monitors(
    tmp_path: Path, rt: TaskRuntime, manager: McpManager, *calls: dict[str, Any]
) -> list[str]:
    """Start a MonitorMcp for each of ``calls``; their task ids."""
    tool = MonitorMcpTool(manager)
    ctx = main_context(_Holder(rt, tmp_path), tmp_path)
    ids = []
    for params in calls:
        checked = tool.validate(params)
        result = await tool.call(checked, ctx)  # type: ignore[arg-type]
        assert not result.is_error, result.content
        ids.extend(STARTED.findall(result.content))
    return ids


def _watch_manager(record: Path) -> McpManager:
    args = (SERVER, "--record", str(record))
    return McpManager({"watch": McpServerConfig("watch", command=sys.executable, args=args)})


async def test_two_monitors_of_one_resource_share_its_subscription(tmp_path: Path) -> None:
    record = tmp_path / "record"
    watch = {"server": "watch", "resource": URI}
    async with TaskRuntime(home=tmp_path / "home") as rt:
        manager = _watch_manager(record)
        try:
            first, second = await _start_monitors(tmp_path, rt, manager, watch, watch)
            await rt.kill(first)  # the other still holds the subscription
            await manager.call("watch", "bump", {"times": 3})
            out = Path(rt.output_path(second))
            await wait_until(
                lambda: out.read_text().count(f"updated: {URI}") == 3, what="three updates"
            )
            assert record.read_text().splitlines().count(f"unsubscribe {URI}") == 0
            await rt.kill(second)  # the last holder ends it
            lines = record.read_text().splitlines()
        finally:
            await manager.aclose()
    assert lines.count(f"subscribe {URI}") == 1
    assert lines.count(f"unsubscribe {URI}") == 1 and lines[-1] == f"unsubscribe {URI}"


async def test_each_log_monitor_is_told_its_own_levels(tmp_path: Path) -> None:
    record = tmp_path / "record"
    levels = "debug,info,warning,error"
    async with TaskRuntime(home=tmp_path / "home") as rt:
        manager = _watch_manager(record)
        try:
            high, low = await _start_monitors(
                tmp_path,
                rt,
                manager,
                {"server": "watch", "level": "warning"},
                {"server": "watch", "level": "debug"},
            )
            # The server is set to the lowest level asked for; each monitor filters its own.
            await manager.call("watch", "log", {"message": "m", "levels": levels})
            out_high, out_low = Path(rt.output_path(high)), Path(rt.output_path(low))
            await wait_until(lambda: "m error" in out_low.read_text(), what="the low log")
            await wait_until(lambda: "m error" in out_high.read_text(), what="the high log")
            assert [line.split("]")[0] for line in out_high.read_text().splitlines()] == [
                "[warning",
                "[error",
            ]
            assert out_low.read_text().count("[") == 4
            # The debug monitor gone, the server's level rises to what is left.
            await rt.kill(low)
            lines = record.read_text().splitlines()
        finally:
            await manager.aclose()
    assert [line for line in lines if line.startswith("level")] == [
        "level warning",
        "level debug",
        "level warning",
    ]


async def test_a_monitor_of_a_dead_server_stops_watching_it(tmp_path: Path) -> None:
    record = tmp_path / "record"
    async with TaskRuntime(home=tmp_path / "home") as rt:
        manager = _watch_manager(record)
        try:
            (task_id,) = await _start_monitors(tmp_path, rt, manager, {"server": "watch"})
            assert len(manager._servers["watch"].watchers) == 1
            await manager.call("watch", "crash", {})

            def failed() -> bool:
                state = rt.get(task_id)
                return state is not None and state.status == TaskStatus.FAILED

            await wait_until(failed, what="the monitor failed")
            # Its watcher is let go with it: nothing keeps a dead monitor listening.
            assert manager._servers["watch"].watchers == []
        finally:
            await manager.aclose()


class _Holder:
    """What ``main_context`` reads of a harness: its runtime, session and directory."""

    def __init__(self, runtime: TaskRuntime, cwd: Path) -> None:
        self.runtime, self.session_id, self.cwd = runtime, runtime.session_id, cwd


async def test_a_monitor_without_a_level_is_told_the_server_s_log_at_whatever_level_it_is(
    tmp_path: Path,
) -> None:
    record = tmp_path / "record"
    args = (SERVER, "--record", str(record), "--level", "warning")  # the server's own default
    manager = McpManager({"watch": McpServerConfig("watch", command=sys.executable, args=args)})
    async with TaskRuntime(home=tmp_path / "home") as rt:
        try:
            (plain,) = await _start_monitors(tmp_path, rt, manager, {"server": "watch"})
            out = Path(rt.output_path(plain))
            # It sets no level: the server sends what its own level lets through.
            await manager.call("watch", "log", {"message": "a", "levels": "debug,info,warning"})
            await wait_until(lambda: "a warning" in out.read_text(), what="the first log")
            assert "a debug" not in out.read_text() and "a info" not in out.read_text()
            # Another watcher sets the server to debug: the plain monitor filters nothing.
            await _start_monitors(tmp_path, rt, manager, {"server": "watch", "level": "debug"})
            await manager.call("watch", "log", {"message": "b", "levels": "debug,error"})
            await wait_until(lambda: "b error" in out.read_text(), what="the second log")
            assert "[debug] app: b debug" in out.read_text()
            lines = record.read_text().splitlines()
        finally:
            await manager.aclose()
    assert [line for line in lines if line.startswith("level")] == ["level debug"]
