"""Task notifications: the XML the model sees, and the durable exactly-once queue.

Rendering::

    <task-notification>
    <task-id>…</task-id>
    <tool-use-id>…</tool-use-id>
    <output-file>…</output-file>
    <status>completed</status>
    <summary>Background command "npm test" completed (exit code 0)</summary>
    <result>…</result>
    <usage><total_tokens>…</total_tokens><tool_uses>…</tool_uses><duration_ms>…</duration_ms></usage>
    </task-notification>

The queue writes each notification to the store before it can be handed out, hands it out once
(``drain``), and forgets it only when the consumer acknowledges delivery (``ack``). After a
crash, whatever was not acknowledged is replayed when the session is resumed.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from taskloom.clock import SYSTEM_CLOCK, Clock
from taskloom.store import NotificationRow, Store
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.types import Priority, TaskState

PRIORITIES: tuple[Priority, ...] = ("next", "later")

#: Longest agent result put inline in a notification; the rest is in the output file.
RESULT_CAP_CHARS = 8_000


@dataclass(frozen=True, slots=True)
class Notification:
    """One notification for one owner.

    Attributes:
        id: Queue id (used to acknowledge).
        seq: Order of enqueueing within the session.
        owner: Who receives it (the task's owner).
        task_id: The task it is about.
        kind: ``terminal`` for the end of a task, ``stall`` for a command waiting on input.
        priority: ``next`` (after the current turn) or ``later``.
        text: The rendered ``<task-notification>`` block.
        created_at: Wall-clock time it was enqueued.
    """

    id: str
    seq: int
    owner: str
    task_id: str
    kind: str
    priority: Priority
    text: str
    created_at: float


def escape(text: str) -> str:
    """XML-escape ``&``, ``<`` and ``>`` (xml.sax.saxutils would pull in urllib at start-up)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _tag(name: str, value: object) -> str:
    return f"<{name}>{escape(str(value))}</{name}>"


def render_notification(
    *,
    task_id: str,
    status: str,
    summary: str,
    tool_use_id: str | None = None,
    output_file: str | None = None,
    result: str | None = None,
    usage: dict[str, int] | None = None,
) -> str:
    """Render one ``<task-notification>`` block with every value XML-escaped."""
    lines = ["<task-notification>", _tag("task-id", task_id)]
    if tool_use_id:
        lines.append(_tag("tool-use-id", tool_use_id))
    if output_file:
        lines.append(_tag("output-file", output_file))
    lines.append(_tag("status", status))
    lines.append(_tag("summary", summary))
    if result is not None:
        lines.append(_tag("result", cap_result(result, output_file)))
    if usage:
        inner = "".join(_tag(k, v) for k, v in usage.items())
        lines.append(f"<usage>{inner}</usage>")
    lines.append("</task-notification>")
    return "\n".join(lines)


def cap_result(text: str, output_file: str | None, cap: int = RESULT_CAP_CHARS) -> str:
    """Cut a result to ``cap`` characters, pointing at the full output."""
    if len(text) <= cap:
        return text
    where = f" in {output_file}" if output_file else ""
    return f"{text[:cap]}\n[result truncated: {len(text) - cap} more characters{where}]"


def summarize(state: TaskState) -> str:
    """The one-line summary of a task's end, in its kind's words."""
    return kind_of(state).summary(state)


def render_terminal(state: TaskState) -> str:
    """Render the notification for a task that has ended."""
    kind = kind_of(state)
    return render_notification(
        task_id=state.id,
        tool_use_id=state.tool_use_id,
        output_file=state.output_file or None,
        status=state.status.value,
        summary=kind.summary(state),
        result=kind.result(state),
        usage=kind.usage(state),
    )


def render_batch(notifications: Iterable[Notification]) -> str:
    """Join notifications into the text of one user message."""
    return "\n".join(n.text for n in notifications)


class NotificationQueue:
    """The durable queue of one session, with per-owner delivery."""

    def __init__(self, store: Store, session_id: str, clock: Clock = SYSTEM_CLOCK) -> None:
        """Bind the queue to a session's rows in ``store``."""
        self._store = store
        self._session_id = session_id
        self._clock = clock
        self._pending: dict[str, Notification] = {}
        self._in_flight: dict[str, Notification] = {}
        self._seq = 0
        self._changed: asyncio.Event | None = None
        self.on_ack: Callable[[list[Notification]], None] | None = None

    def replay(self) -> list[Notification]:
        """Load every unacknowledged notification of the session from the store."""
        rows = self._store.undelivered_notifications(self._session_id)
        loaded = []
        for row in rows:
            if row.id in self._pending or row.id in self._in_flight:
                continue
            note = Notification(
                id=row.id,
                seq=row.seq,
                owner=row.owner,
                task_id=row.task_id,
                kind=row.kind,
                priority="next" if row.priority == "next" else "later",
                text=row.body,
                created_at=row.created_at,
            )
            self._pending[note.id] = note
            self._seq = max(self._seq, row.seq + 1)
            loaded.append(note)
        if loaded:
            self._signal()
        return loaded

    def enqueue(
        self,
        *,
        owner: str,
        task_id: str,
        text: str,
        kind: str = "terminal",
        priority: Priority = "later",
    ) -> Notification:
        """Queue a notification durably (committed before it can be drained)."""
        note = Notification(
            id=secrets.token_hex(8),
            seq=self._seq,
            owner=owner,
            task_id=task_id,
            kind=kind,
            priority=priority,
            text=text,
            created_at=self._clock.time(),
        )
        self._seq += 1
        self._store.add_notification(
            NotificationRow(
                id=note.id,
                seq=note.seq,
                session_id=self._session_id,
                owner=owner,
                task_id=task_id,
                kind=kind,
                priority=priority,
                body=text,
                created_at=note.created_at,
            )
        )
        self._pending[note.id] = note
        self._signal()
        return note

    def pending(self, owner: str | None = None) -> list[Notification]:
        """Notifications not yet handed out, ``next`` before ``later``, then in queue order."""
        notes = [n for n in self._pending.values() if owner is None or n.owner == owner]
        return sorted(notes, key=lambda n: (n.priority != "next", n.seq))

    def has_pending(self, owner: str | None = None) -> bool:
        """Whether anything waits to be handed out (to ``owner``, or to anyone)."""
        if owner is None:
            return bool(self._pending)
        return any(n.owner == owner for n in self._pending.values())

    def drain(
        self, owner: str | None = None, priority: Priority | None = None
    ) -> list[Notification]:
        """Hand out every pending notification (for ``owner``) as one batch.

        Each is handed out once. It stays in the store until :meth:`ack`; if the process dies
        before that, a resumed session receives it again.

        Args:
            owner: Only this owner's notifications (None: all).
            priority: Only ``next`` ones, for a delivery point between tool calls.
        """
        batch = [n for n in self.pending(owner) if priority is None or n.priority == priority]
        if not batch:
            return []
        self._store.flush()  # nothing leaves the queue before it is durable
        for note in batch:
            del self._pending[note.id]
            self._in_flight[note.id] = note
        return batch

    def ack(self, notifications: Iterable[Notification]) -> None:
        """Record that ``notifications`` reached their owner; they will never be replayed."""
        done = [n for n in notifications if self._in_flight.pop(n.id, None) is not None]
        if not done:
            return
        self._store.ack_notifications((n.id for n in done), self._clock.time())
        self._store.flush()  # acknowledged durably: a crash now must not deliver it twice
        if self.on_ack is not None:
            self.on_ack(done)

    def requeue(self, notifications: Iterable[Notification]) -> None:
        """Put back notifications that were drained but could not be delivered."""
        for note in notifications:
            if self._in_flight.pop(note.id, None) is not None:
                self._pending[note.id] = note
        self._signal()

    def discard_owner(self, owner: str) -> list[Notification]:
        """Drop (acknowledge) what is pending for an owner that no longer exists."""
        gone = [n for n in self._pending.values() if n.owner == owner]
        for note in gone:
            del self._pending[note.id]
            self._in_flight[note.id] = note
        self.ack(gone)
        return gone

    async def wait_pending(self, timeout: float, owner: str | None = None) -> bool:
        """Wait until something is pending (for ``owner``); False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                while not self.has_pending(owner):
                    self._changed = self._changed or asyncio.Event()
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            return False
        return True

    def _signal(self) -> None:
        if self._changed is not None:
            self._changed.set()
