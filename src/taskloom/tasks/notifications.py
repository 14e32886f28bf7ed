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

The queue is the session's mailbox seen through its rows of kind ``notification`` (sent by the
task to its owner): each is written to the store before it can be handed out, handed out once
(``drain``), and forgotten only when the consumer acknowledges delivery (``ack``). After a
crash, whatever was not acknowledged is replayed when the session is resumed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.clock import SYSTEM_CLOCK, Clock
from taskloom.quoting import escape
from taskloom.store import Store
from taskloom.tasks._makers import positional_maker
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.mailbox import Kind, Letter, Mailbox
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
        kind: ``terminal`` for the end of a task, ``stall`` for a command waiting on input,
            ``monitor`` for new lines of a monitor.
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


def _tag(name: str, value: object) -> str:
    text = value if type(value) is str else str(value)  # a notification per task end
    return f"<{name}>{escape(text)}</{name}>"


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
        # str() of a StrEnum is its value, without enum's property (Python code) in between.
        status=str(state.status),
        summary=kind.summary(state),
        result=kind.result(state),
        usage=kind.usage(state),
    )


def render_batch(notifications: Iterable[Notification]) -> str:
    """Join notifications into the text of one user message."""
    return "\n".join(n.text for n in notifications)


class NotificationQueue:
    """A session's notifications: the mailbox rows of kind ``notification``, per owner."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        clock: Clock = SYSTEM_CLOCK,
        *,
        mailbox: Mailbox | None = None,
    ) -> None:
        """Bind the queue to a session's mailbox (a new one over ``store`` if not given)."""
        self.mailbox = mailbox or Mailbox(store, session_id, clock)
        #: Told the ids of the tasks whose notifications were acknowledged (or discarded).
        self.on_ack: Callable[[list[str]], None] | None = None

    def replay(self) -> list[Notification]:
        """Load every unacknowledged row of the session; return the notifications among them."""
        return [_note(letter) for letter in self.mailbox.replay() if letter.kind == _KIND]

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
        return _note(
            self.post(owner=owner, task_id=task_id, text=text, kind=kind, priority=priority)
        )

    def post(
        self,
        *,
        owner: str,
        task_id: str,
        text: str,
        kind: str = "terminal",
        priority: Priority = "later",
    ) -> Letter:
        """:meth:`enqueue`, giving the mailbox's row (for the runtime, which needs no more)."""
        return self.mailbox.post(
            recipient=owner, sender=task_id, kind=_KIND, topic=kind, priority=priority, body=text
        )

    def pending(self, owner: str | None = None) -> list[Notification]:
        """Notifications not yet handed out, ``next`` before ``later``, then in queue order."""
        return [_note(letter) for letter in self.mailbox.pending(owner, _KIND)]

    def has_pending(self, owner: str | None = None) -> bool:
        """Whether anything waits to be handed out (to ``owner``, or to anyone)."""
        return self.mailbox.has_pending(owner, _KIND)

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
        return [_note(letter) for letter in self.mailbox.take(owner, _KIND, priority)]

    def ack(self, notifications: Iterable[Notification]) -> None:
        """Record that ``notifications`` reached their owner; they will never be replayed."""
        done = self.mailbox.ack(n.id for n in notifications)
        if done and self.on_ack is not None:
            self.on_ack([letter.sender for letter in done])

    def requeue(self, notifications: Iterable[Notification]) -> None:
        """Put back notifications that were drained but could not be delivered."""
        self.mailbox.requeue(n.id for n in notifications)

    def discard_owner(self, owner: str) -> list[Notification]:
        """Drop (acknowledge) what is pending for an owner that no longer exists."""
        gone = self.mailbox.discard(owner, _KIND)
        if gone and self.on_ack is not None:
            self.on_ack([letter.sender for letter in gone])
        return [_note(letter) for letter in gone]

    async def wait_pending(self, timeout: float, owner: str | None = None) -> bool:
        """Wait until something is pending (for ``owner``); False on timeout."""
        return await self.mailbox.wait(timeout, owner, _KIND)


_KIND: Kind = "notification"


def _first_note(*values: Any) -> Notification:
    global _make_note
    _make_note = positional_maker(Notification)  # on first use, as Notification's own methods
    return _make_note(*values)


# Notification(**fields) at less than half the cost: one is handed out per task end.
_make_note: Callable[..., Notification] = _first_note


def _note(letter: Letter) -> Notification:
    return _make_note(
        letter.id,
        letter.seq,
        letter.recipient,
        letter.sender,
        letter.topic,
        letter.priority,
        letter.body,
        letter.created_at,
    )
