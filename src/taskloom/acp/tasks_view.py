"""Tasks as the editor sees them: background work of a session, as ACP updates.

A :class:`TaskView` follows one session's task runtime (its change stream, as the REPL's task
panel and stream-json's task events do) and shows each task to the ACP client:

- A task that is not an agent (a background command, a monitor) is a ``tool_call`` of its own
  (``task-<id>``) that stays ``in_progress`` while the model's turns go on. Its output is
  streamed as ``tool_call_update`` content, read from its output file every :data:`BATCH_S`
  (one update per batch, never per line) and bounded to its last :data:`TAIL_BYTES`; it ends
  ``completed`` or ``failed`` with its kind's summary (the exit code) and its status.
- An agent-like task (a subagent, a teammate, a remote agent, a workflow: a kind that is an
  agent or starts tasks of its own) is a child session when the client offered
  ``subagents`` (ACP's unstable subagent sessions): a ``subagent_update`` on its parent's
  session announces it (a fresh session id, its title and description, ``cancel`` allowed,
  ``running``), its agent's messages and tool calls are updates of the child session, and
  its end sets it ``idle`` with a stop reason. The client's ``session/cancel`` on the child is
  the session's verified kill of the task (:meth:`TaskView.cancel`): the model hears of the
  stop as it hears of any. Without ``subagents``, such a task degrades to a tool call (kind
  ``think``, or ``other`` for one that is no agent) showing its progress and its end.

Tasks started by an agent shown as a child session appear in that child session. What a task
is, is asked of its kind; no task type is tested. Updates leave in the order they are made,
through one writer: a child is announced before any update of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.acp._child_updates import capped, message_updates, text_content
from taskloom.errors import TaskloomError
from taskloom.tasks.ids import random_hex
from taskloom.tasks.kinds import TaskKind, kind_of
from taskloom.tasks.narrow import as_agent
from taskloom.tasks.output import read_delta
from taskloom.tasks.types import TaskState, TaskStatus

if TYPE_CHECKING:
    from taskloom.events import AssistantTurn, UserTurn
    from taskloom.harness import Harness
    from taskloom.hooks import HookResult
    from taskloom.models.base import ModelRequest, StreamEvent

log = logging.getLogger(__name__)

#: Sends one ``session/update``: the ACP session id and the update, in the wire form.
Send = Callable[[str, dict[str, Any]], Awaitable[None]]

#: How often a running command's output file is read: what it printed meanwhile is one update.
BATCH_S = 0.25
#: Most bytes of a command's output one update shows (its last ones; the file has them all).
TAIL_BYTES = 8 * 1024
#: Bound on sending what is queued when the view closes.
CLOSE_TIMEOUT_S = 5.0

#: A task's end as a child session's stop reason.
_STOP_REASONS = {
    TaskStatus.COMPLETED: "end_turn",
    TaskStatus.KILLED: "cancelled",
    TaskStatus.FAILED: "error",
}


def subagents_offered(client_capabilities: Mapping[str, Any] | None) -> bool:
    """Whether an ``initialize``'s ``clientCapabilities`` (as sent) offer subagent sessions.

    ``subagents: {}`` (any object) offers them; omitted or null does not.
    """
    if not isinstance(client_capabilities, Mapping):
        return False
    return isinstance(client_capabilities.get("subagents"), Mapping)


def connection_sender(conn: Any) -> Send:
    """A :data:`Send` over the library's agent-side connection.

    The library's typed ``session_update`` accepts only the update types it knows, and
    ``agent-client-protocol`` 0.12 does not know ``subagent_update``: updates are sent as
    they are, as a ``session/update`` notification of its JSON-RPC connection.
    """
    raw = conn._conn  # the library's JSON-RPC connection; it has no public accessor

    async def send(session_id: str, update: dict[str, Any]) -> None:
        await raw.send_notification("session/update", {"sessionId": session_id, "update": update})

    return send


def is_child_like(kind: TaskKind) -> bool:
    """Whether a kind's tasks are shown as sessions (agents, and what starts tasks of its own)."""
    return kind.is_agent or kind.owns_tasks


@dataclass(slots=True)
class _Shown:
    """One task as the client sees it.

    Attributes:
        task_id: The task.
        parent: The ACP session its announcement (or tool call) is an update of.
        child: Its own ACP session id, when it is a child session.
        ended: Its end was told (a child's ``idle``, a tool call's last status).
        said: What was last told of its progress (told again only when it changed).
        offset: How far its output file was read.
        tail: The last bytes read of it (at most ``TAIL_BYTES``).
        skipped: Bytes of its output not shown (before the tail).
        open_calls: A child's tool calls shown running, whose results have not come yet.
    """

    task_id: str
    parent: str
    child: str | None = None
    ended: bool | None = None  # None: nothing told yet
    said: object = None
    offset: int = 0
    tail: bytes = b""
    skipped: int = 0
    open_calls: set[str] = field(default_factory=set)

    @property
    def tool_call_id(self) -> str:
        return f"task-{self.task_id}"


class TaskView:
    """Shows one session's tasks to an ACP client (see the module docstring).

    It is the session's engine observer too (:attr:`observer`, for ``Options.observer``):
    an agent's messages reach its child session through it. Build the view, put it in the
    session's options, then :meth:`attach` the started harness.

    Args:
        session_id: The ACP session id of the harness's session (the parent of its tasks).
        send: Sends one update to the client.
        subagents: The client offered subagent sessions (see :func:`subagents_offered`).
    """

    #: As an engine observer: whole messages are enough.
    partial_messages = False

    def __init__(self, session_id: str, send: Send, *, subagents: bool) -> None:
        self.session_id = session_id
        self.subagents = subagents
        self._send = send
        self._harness: Harness | None = None
        self._shown: dict[str, _Shown] = {}
        self._children: dict[str, str] = {}  # child session id -> task id
        self._out: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()
        self._jobs: list[asyncio.Task[None]] = []
        #: Set while a command is shown running: its output is read (else nothing polls).
        self._commands = asyncio.Event()

    @property
    def observer(self) -> TaskView:
        """The engine observer to give the session (this view)."""
        return self

    # -- life ---------------------------------------------------------------------------------

    def attach(self, harness: Harness) -> None:
        """Follow ``harness``'s tasks from now on (it is started); live tasks are shown now."""
        self._harness = harness
        sub = harness.runtime.subscribe()
        for state in harness.tasks():
            if not state.terminal:
                self._on_state(state)
        loop = asyncio.get_running_loop()
        self._jobs = [
            loop.create_task(self._write()),
            loop.create_task(self._pump(sub)),
            loop.create_task(self._poll()),
        ]

    async def aclose(self) -> None:
        """Stop following; what is queued is sent first (within :data:`CLOSE_TIMEOUT_S`)."""
        if not self._jobs:
            return
        writer, *others = self._jobs
        self._jobs = []
        for job in others:
            job.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        self._out.put_nowait(None)
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(writer, CLOSE_TIMEOUT_S)

    def child_session(self, task_id: str) -> str | None:
        """The ACP session id of a task shown as a child session, if it is one."""
        shown = self._shown.get(task_id)
        return shown.child if shown is not None else None

    def task_of(self, session_id: str) -> str | None:
        """The task a child session id stands for (None: not a child session of this view)."""
        return self._children.get(session_id)

    async def cancel(self, session_id: str) -> bool:
        """The client cancelled ``session_id``: if it is a child, stop its task.

        The stop is the session's verified kill of the task and of everything it started
        (its commands); its owner is told as of any stop. Returns whether ``session_id`` is a
        child session of this view (False: the caller's to handle).
        """
        task_id = self._children.get(session_id)
        if task_id is None or self._harness is None:
            return False
        try:
            state = await self._harness.stop_task(task_id)
        except TaskloomError as exc:  # gone meanwhile: nothing left to stop
            log.debug("cancelling %s: %s", task_id, exc)
            return True
        self._on_state(state)  # told now, whatever the change stream's pace
        return True

    # -- the runtime's changes ----------------------------------------------------------------

    async def _pump(self, sub: Any) -> None:
        try:
            while (event := await sub.get()) is not None:
                if event.kind != "evicted":
                    self._on_state(event.state)
        finally:
            sub.close()

    def _on_state(self, state: TaskState) -> None:
        """Tell the client what changed of a task (once per change)."""
        kind = kind_of(state)
        shown = self._shown.get(state.id)
        if shown is None:
            if state.terminal or not (is_child_like(kind) or state.is_backgrounded):
                return  # a command waited on in the foreground is its own tool call's
            shown = self._open(state, kind)
        if shown.child is not None:
            self._tell_child(shown, state)
        elif is_child_like(kind):
            self._tell_progress(shown, state, kind)
        else:
            self._tell_command(shown, state, kind)

    def _parent_of(self, state: TaskState) -> str:
        """The session a task is shown in: its owner's child session, else the main one."""
        owner = self._shown.get(state.owner)
        if owner is None and self._harness is not None:
            # An owner known by another name (a teammate's ``name@team``).
            for other in self._shown.values():
                got = self._harness.runtime.get(other.task_id)
                if got is not None and state.owner in kind_of(got).addresses(got):
                    owner = other
                    break
        if owner is not None and owner.child is not None:
            return owner.child
        return owner.parent if owner is not None else self.session_id

    def _open(self, state: TaskState, kind: TaskKind) -> _Shown:
        shown = _Shown(state.id, self._parent_of(state))
        self._shown[state.id] = shown
        if is_child_like(kind) and self.subagents:
            shown.child = f"sub-{random_hex(16)}"
            self._children[shown.child] = state.id
            self._put(shown.parent, self._announcement(shown.child, state, kind))
            shown.ended = False  # announced running
            return shown
        self._put(
            shown.parent,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": shown.tool_call_id,
                "title": kind.label(state),
                "kind": ("think" if kind.is_agent else "other")
                if is_child_like(kind)
                else ("execute" if kind.is_process else "other"),
                "status": "in_progress",
                "rawInput": {"task_id": state.id, "description": state.description},
            },
        )
        shown.ended = False
        if not is_child_like(kind):
            self._commands.set()
        return shown

    def _announcement(self, child: str, state: TaskState, kind: TaskKind) -> dict[str, Any]:
        facts = kind.agent_facts(state)
        noun = f"{kind.noun} ({facts.agent_type})" if facts is not None else kind.noun
        return {
            "sessionUpdate": "subagent_update",
            "sessionId": child,
            "title": kind.title(state) or state.description or state.id,
            "description": f"{noun}: {state.description}" if state.description else noun,
            "capabilities": {"cancel": {}},
            "state": {"state": "running"},
            "_meta": {"taskloom": {"taskId": state.id, "taskType": state.type.value}},
        }

    def _tell_child(self, shown: _Shown, state: TaskState) -> None:
        assert shown.child is not None
        agent = as_agent(state)  # a subagent's worktree, when it has one
        worktree = agent.worktree_path if agent is not None else None
        if worktree and shown.said != worktree:
            shown.said = worktree
            self._put(shown.parent, {**self._patch(shown.child), "cwd": worktree})
        if shown.ended is state.terminal:
            return  # pending to running, or one end after another: nothing to tell
        shown.ended = state.terminal
        if not state.terminal:
            snapshot: dict[str, Any] = {"state": "running"}
        else:
            self._close_calls(shown, state)
            snapshot = {"state": "idle", "stopReason": _STOP_REASONS[state.status]}
            if state.status == TaskStatus.FAILED:
                message = kind_of(state).summary(state)
                snapshot["error"] = {"code": -32603, "message": message}
        self._put(shown.parent, {**self._patch(shown.child), "state": snapshot})

    def _close_calls(self, shown: _Shown, state: TaskState) -> None:
        """End the child's calls shown running: a stopped agent never records their results."""
        why = f"not finished: the agent {state.status.value} first"
        for call in sorted(shown.open_calls):
            update = {"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "failed"}
            self._put(shown.child or shown.parent, {**update, "content": [text_content(why)]})
        shown.open_calls.clear()

    @staticmethod
    def _patch(child: str) -> dict[str, Any]:
        return {"sessionUpdate": "subagent_update", "sessionId": child}

    def _tell_progress(self, shown: _Shown, state: TaskState, kind: TaskKind) -> None:
        """An agent-like task as a tool call: its progress while it runs, then its end."""
        if state.terminal:
            self._end_call(shown, state, kind, kind.result(state) or "")
            return
        progress = kind.progress(state)
        line = _progress_line(progress.tool_uses, progress.tokens, progress.activity)
        if line and line != shown.said:
            shown.said = line
            self._put(shown.parent, self._call_update(shown, [text_content(line)]))

    def _tell_command(self, shown: _Shown, state: TaskState, kind: TaskKind) -> None:
        """A command as a tool call: its output is polled; here, its end."""
        if state.terminal:
            self._read(shown, state)
            self._end_call(shown, state, kind, self._output_text(shown))

    def _end_call(self, shown: _Shown, state: TaskState, kind: TaskKind, body: str) -> None:
        text = f"{capped(body)}\n{kind.summary(state)}" if body else kind.summary(state)
        update = self._call_update(shown, [text_content(text)])
        update["status"] = "completed" if state.status == TaskStatus.COMPLETED else "failed"
        update["rawOutput"] = {"status": state.status.value, **kind.event_fields(state)}
        self._put(shown.parent, update)
        # Told for good: nothing is kept of it (a resumed agent opens its call again).
        del self._shown[shown.task_id]

    def _call_update(self, shown: _Shown, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": shown.tool_call_id,
            "content": content,
        }

    # -- commands' output ---------------------------------------------------------------------

    async def _poll(self) -> None:
        """Every :data:`BATCH_S`, one update per running command that printed meanwhile."""
        while True:
            await self._commands.wait()
            await asyncio.sleep(BATCH_S)
            running = 0
            for shown in list(self._shown.values()):
                state = self._harness.runtime.get(shown.task_id) if self._harness else None
                if shown.child is not None or state is None or is_child_like(kind_of(state)):
                    continue
                running += 1
                if self._read(shown, state):
                    content = [text_content(self._output_text(shown))]
                    self._put(shown.parent, self._call_update(shown, content))
            if not running:
                self._commands.clear()  # until the next command is shown

    def _read(self, shown: _Shown, state: TaskState) -> bool:
        """Read what the task printed since the last read; whether there was anything."""
        if not state.output_file:
            return False
        got = False
        try:
            while True:
                chunk, shown.offset = read_delta(state.output_file, shown.offset, TAIL_BYTES)
                if not chunk:
                    return got
                got = True
                tail = shown.tail + chunk
                shown.skipped += max(0, len(tail) - TAIL_BYTES)
                shown.tail = tail[-TAIL_BYTES:]
        except (OSError, TaskloomError):  # its file is gone or unreadable: shown as it was
            return got

    @staticmethod
    def _output_text(shown: _Shown) -> str:
        text = shown.tail.decode("utf-8", "replace")
        if shown.skipped:
            text = f"[{shown.skipped} earlier bytes not shown]\n" + text
        return text

    # -- the engine observer: agents' messages ------------------------------------------------

    def model_event(self, agent_id: str | None, event: ModelRequest | StreamEvent) -> None:
        """Nothing: an agent's messages are shown whole (:meth:`agent_message`)."""

    def agent_message(self, agent_id: str, event: AssistantTurn | UserTurn) -> None:
        """Show a message of an agent in its child session (announced first, if need be)."""
        shown = self._shown.get(agent_id)
        if shown is None and self._harness is not None:
            state = self._harness.runtime.get(agent_id)
            if state is not None:
                self._on_state(state)  # its registration may not have been seen yet
                shown = self._shown.get(agent_id)
        if shown is None or shown.child is None:
            return
        for update in message_updates(event):
            call = str(update.get("toolCallId", ""))
            if update["sessionUpdate"] == "tool_call":
                shown.open_calls.add(call)
            elif update["sessionUpdate"] == "tool_call_update":
                shown.open_calls.discard(call)
            self._put(shown.child, update)

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        """Nothing: hooks are not shown here."""

    def hook_finished(self, hook_id: str, event: str, name: str, result: HookResult | None) -> None:
        """Nothing: hooks are not shown here."""

    # -- sending ------------------------------------------------------------------------------

    def _put(self, session_id: str, update: dict[str, Any]) -> None:
        self._out.put_nowait((session_id, update))

    async def _write(self) -> None:
        while (item := await self._out.get()) is not None:
            session_id, update = item
            try:
                await self._send(session_id, update)
            except Exception:  # a client gone or a bad update: the next ones are still tried
                log.debug("sending a task update failed", exc_info=True)


def _progress_line(tool_uses: int | None, tokens: int | None, activity: str) -> str:
    """``3 tool uses · 1200 tokens · Running: pytest`` (what is known of it)."""
    parts = []
    if tool_uses is not None:
        parts.append(f"{tool_uses} tool use{'s' if tool_uses != 1 else ''}")
    if tokens is not None:
        parts.append(f"{tokens} tokens")
    if activity:
        parts.append(activity)
    return " · ".join(parts)


__all__ = [
    "BATCH_S",
    "TAIL_BYTES",
    "Send",
    "TaskView",
    "connection_sender",
    "is_child_like",
    "subagents_offered",
]
