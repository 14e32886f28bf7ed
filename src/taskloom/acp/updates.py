"""What a session's engine tells, as ACP ``session/update`` notifications.

The main thread's model stream becomes ``agent_message_chunk`` and ``agent_thought_chunk``
updates as its deltas arrive (:class:`AcpObserver`); its engine events become tool calls:
``tool_call`` as the model asks for one (with its ``kind``, the file ``locations`` it touches and,
for Write and Edit, a ``diff``), ``tool_call_update`` once it ran (``completed`` or ``failed``,
with its result), and the ``plan`` from a TodoWrite call (:class:`Translator`). Everything goes
out in order through one :class:`UpdateSink`, which a prompt's answer waits on: the client has
every update of a turn before it hears how the turn ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import acp
from acp.schema import ToolCallLocation, ToolKind

from taskloom.events import AssistantTurn, ToolDone, UserTurn
from taskloom.messages import TextBlock, ThinkingBlock, ToolUseBlock
from taskloom.models.base import ModelRequest, TextDelta, ThinkingDelta

if TYPE_CHECKING:
    from taskloom.hooks import HookResult
    from taskloom.models.base import StreamEvent
    from taskloom.tools.base import ToolResult

log = logging.getLogger(__name__)

#: Each core tool's ACP ``kind`` (what the editor shows it as); any other tool is ``other``.
TOOL_KINDS: dict[str, ToolKind] = {
    "Read": "read",
    "TaskOutput": "read",
    "TaskGet": "read",
    "TaskList": "read",
    "MemoryRead": "read",
    "MemoryList": "read",
    "job_output": "read",
    "job_list": "read",
    "Write": "edit",
    "Edit": "edit",
    "NotebookEdit": "edit",
    "MemoryWrite": "edit",
    "MemoryDelete": "delete",
    "Glob": "search",
    "Grep": "search",
    "WebSearch": "search",
    "ToolSearch": "search",
    "Bash": "execute",
    "Monitor": "execute",
    "job_kill": "execute",
    "TaskStop": "execute",
    "WebFetch": "fetch",
    "TodoWrite": "think",
    "Agent": "think",
    "SendMessage": "think",
    "Workflow": "think",
    "EnterPlanMode": "switch_mode",
    "ExitPlanMode": "switch_mode",
}

#: The longest part of a call's input shown in its title.
TITLE_CHARS = 80

Send = Callable[[Any], Awaitable[None]]


def tool_kind(name: str) -> ToolKind:
    """The ACP kind of tool ``name``."""
    return TOOL_KINDS.get(name, "other")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"


def tool_title(name: str, params: dict[str, Any]) -> str:
    """What the editor shows a call as: the tool and what it works on."""
    for key in ("command", "file_path", "notebook_path", "pattern", "url", "query"):
        value = params.get(key)
        if isinstance(value, str) and value:
            shown = f"`{_short(value)}`" if key == "command" else _short(value)
            return f"{name} {shown}"
    description = params.get("description")
    if isinstance(description, str) and description:
        return f"{name}: {_short(description)}"
    return name


def tool_locations(name: str, params: dict[str, Any], cwd: Path) -> list[ToolCallLocation]:
    """The files a call reads or changes (the editor can follow them), with a line if known."""
    path = params.get("file_path") or params.get("notebook_path")
    if name in ("Grep", "Glob") and isinstance(params.get("path"), str):
        path = params["path"]
    if not isinstance(path, str) or not path:
        return []
    line = params.get("offset") if name == "Read" else None
    absolute = str(cwd / path) if not Path(path).is_absolute() else path
    return [ToolCallLocation(path=absolute, line=line if isinstance(line, int) else None)]


def tool_content(name: str, params: dict[str, Any], cwd: Path, *, live: bool = True) -> list[Any]:
    """What a call shows before it runs: a ``diff`` for Write and Edit.

    ``live``: the call is about to run, so a Write's old text is the file as it is now (a
    replayed call's is not known: its diff is the new text alone).
    """
    path = params.get("file_path")
    if not isinstance(path, str) or not path:
        return []
    absolute = cwd / path
    if name == "Edit":
        old, new = params.get("old_string"), params.get("new_string")
        if isinstance(old, str) and isinstance(new, str):
            return [acp.tool_diff_content(str(absolute), new, old)]
    if name == "Write" and isinstance(params.get("content"), str):
        before: str | None = None
        if live:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                before = absolute.read_text(encoding="utf-8")
        return [acp.tool_diff_content(str(absolute), params["content"], before)]
    return []


def plan_of(params: dict[str, Any]) -> Any | None:
    """The ``plan`` update a TodoWrite call's input makes (None if it holds no list)."""
    todos = params.get("todos")
    if not isinstance(todos, list):
        return None
    entries = [
        acp.plan_entry(str(t["content"]), status=t["status"])
        for t in todos
        if isinstance(t, dict)
        and isinstance(t.get("content"), str)
        and t.get("status") in ("pending", "in_progress", "completed")
    ]
    return acp.update_plan(entries)


def start_call(call: ToolUseBlock, cwd: Path, *, live: bool = True) -> Any:
    """The ``tool_call`` update announcing ``call`` (``live``: see :func:`tool_content`)."""
    return acp.start_tool_call(
        call.id,
        tool_title(call.name, call.input),
        kind=tool_kind(call.name),
        status="pending",
        content=tool_content(call.name, call.input, cwd, live=live) or None,
        locations=tool_locations(call.name, call.input, cwd) or None,
        raw_input=call.input,
    )


def result_text(content: str | list[Any]) -> str:
    """The text of a tool result's content (its text blocks, in order)."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        if text is None and isinstance(block, dict):
            text = block.get("text")
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(parts)


def end_call(tool_use_id: str, text: str, is_error: bool, terminal: str | None = None) -> Any:
    """The ``tool_call_update`` that ends a call: ``completed`` or ``failed``, with its result.

    ``terminal``: the client's terminal the call ran in, which stays its content.
    """
    content = [acp.tool_content(acp.text_block(text))] if text else None
    return acp.update_tool_call(
        tool_use_id,
        status="failed" if is_error else "completed",
        content=[acp.tool_terminal_ref(terminal)] if terminal else content,
        raw_output=text,
    )


class UpdateSink:
    """The session's updates, sent to the client one at a time, in the order made.

    Made from the engine's task (the observer must not block), sent by a task of its own.

    Args:
        send: Sends one update to the client.
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        #: How many updates were sent (the benchmark reads it).
        self.sent = 0

    def put(self, update: Any) -> None:
        """Send ``update`` after those before it."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._pump())
        self._queue.put_nowait(update)

    async def _pump(self) -> None:
        while True:
            update = await self._queue.get()
            try:
                await self._send(update)
                self.sent += 1
            except Exception:  # the client went away, or refused one: the session goes on
                log.debug("a session/update could not be sent", exc_info=True)
            finally:
                self._queue.task_done()

    async def drain(self) -> None:
        """Wait until every update put so far was sent."""
        await self._queue.join()

    async def aclose(self) -> None:
        """Stop sending (what is still queued is dropped)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class AcpObserver:
    """Hears the session's engines: the main thread's deltas go out as message chunks.

    Args:
        sink: Where the updates go.
        agent_message: Told each message of a subagent's conversation (the task view's; None:
            they are not shown).
    """

    partial_messages = True

    def __init__(
        self,
        sink: UpdateSink,
        agent_message: Callable[[str, AssistantTurn | UserTurn], None] | None = None,
    ) -> None:
        self.sink = sink
        self.on_agent_message = agent_message
        #: The main thread's current answer was streamed (its text need not be sent again).
        self.streamed = False

    def model_event(self, agent_id: str | None, event: ModelRequest | StreamEvent) -> None:
        """Stream the main thread's text and thinking as they arrive."""
        if agent_id is not None:
            return
        if isinstance(event, ModelRequest):
            self.streamed = False
        elif isinstance(event, TextDelta) and event.text:
            self.streamed = True
            self.sink.put(acp.update_agent_message_text(event.text))
        elif isinstance(event, ThinkingDelta) and event.thinking:
            self.streamed = True
            self.sink.put(acp.update_agent_thought_text(event.thinking))

    def tool_event(self, agent_id: str | None, call: ToolUseBlock, result: object) -> None:
        """A main-thread call starts (``result`` None): ``in_progress`` (its end is the event's)."""
        if agent_id is None and result is None:
            self.sink.put(acp.update_tool_call(call.id, status="in_progress"))

    def agent_message(self, agent_id: str, event: AssistantTurn | UserTurn) -> None:
        """A subagent's message: for the task view, if there is one."""
        if self.on_agent_message is not None:
            self.on_agent_message(agent_id, event)

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        """Hooks are not shown in the editor."""

    def hook_finished(self, hook_id: str, event: str, name: str, result: HookResult | None) -> None:
        """Hooks are not shown in the editor."""


class Translator:
    """The main thread's engine events as updates (its deltas are the observer's).

    Args:
        sink: Where the updates go.
        observer: Says whether an answer's text was streamed already.
        cwd: Where relative paths of tool calls are based.
    """

    def __init__(self, sink: UpdateSink, observer: AcpObserver, cwd: Path) -> None:
        self.sink = sink
        self.observer = observer
        self.cwd = cwd

    def event(self, event: object) -> None:
        """Send what ``event`` shows the editor."""
        if isinstance(event, AssistantTurn):
            self._answer(event)
        elif isinstance(event, ToolDone):
            self.tool_done(event.call, event.result)

    def _answer(self, event: AssistantTurn) -> None:
        streamed = self.observer.streamed
        self.observer.streamed = False
        for block in event.message.content:
            if isinstance(block, TextBlock) and block.text and not streamed:
                self.sink.put(acp.update_agent_message_text(block.text))
            elif isinstance(block, ThinkingBlock) and block.thinking and not streamed:
                self.sink.put(acp.update_agent_thought_text(block.thinking))
            elif isinstance(block, ToolUseBlock):
                self.sink.put(start_call(block, self.cwd))
                if block.name == "TodoWrite":
                    plan = plan_of(block.input)
                    if plan is not None:
                        self.sink.put(plan)

    def tool_done(self, call: ToolUseBlock, result: ToolResult) -> None:
        """Send the end of ``call``."""
        terminal = (result.data or {}).get("terminal_id")  # a Bash run in the editor's
        terminal = terminal if isinstance(terminal, str) else None
        self.sink.put(end_call(call.id, result.content, result.is_error, terminal))


__all__ = [
    "TOOL_KINDS",
    "AcpObserver",
    "Translator",
    "UpdateSink",
    "end_call",
    "plan_of",
    "result_text",
    "start_call",
    "tool_kind",
    "tool_locations",
    "tool_title",
]
