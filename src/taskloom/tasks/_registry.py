"""The registry of one session's tasks: registers, tracks, persists, notifies and evicts them.

Every state change goes through :meth:`TaskRegistry.update`, which is atomic: the terminal
transition, the ``notified`` flag and the enqueueing of the notification happen in one step, so
however completion, kill and cleanup race, a task that ends yields exactly one notification.

Owner scoping: a task belongs to the agent (or session) that started it. Only that owner, or
the session itself, may read or stop it, and only that owner is notified of it; an owner that
closed is notified of nothing more (see :meth:`taskloom.tasks.runtime.TaskRuntime.close_owner`).

The registry starts and stops nothing: :class:`~taskloom.tasks.runtime.TaskRuntime` is it as a
session runs it. Call the synchronous methods from the event loop's thread (or with no loop
running).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from taskloom.clock import Clock
from taskloom.errors import TaskAccessDenied, TaskNotFound
from taskloom.store import Store
from taskloom.tasks._subscription import EventKind, Subscription, TaskEvent
from taskloom.tasks._table import TaskTable
from taskloom.tasks._waiters import EndWaiters
from taskloom.tasks.ids import new_task_id
from taskloom.tasks.kinds import TaskHandle, kind_of
from taskloom.tasks.mailbox import MESSAGES, Kinds, Mailbox
from taskloom.tasks.notifications import (
    Notification,
    NotificationQueue,
    render_terminal,
)
from taskloom.tasks.output import DiskTaskOutput, output_path
from taskloom.tasks.types import (
    TERMINAL,
    Priority,
    TaskState,
    TaskStatus,
    TaskType,
    check_transition,
    readable_state,
)

S = TypeVar("S", bound=TaskState)
# The registry has a ``list`` method; these keep annotations in the class unambiguous.
States = list[TaskState]
Notifications = list[Notification]


class TaskRegistry:
    """The task states of one session (see the module docstring)."""

    def __init__(
        self, *, session_id: str, home: Path, store: Store, clock: Clock, output_cap: int
    ) -> None:
        """Hold the tasks of session ``session_id``, recorded in ``store``.

        Args:
            session_id: The session's id.
            home: State directory (the tasks' output files are under it).
            store: The open store its tasks and its mail are recorded in.
            clock: Time source.
            output_cap: Size cap of each task's output file.
        """
        self.home = home
        self.session_id = session_id
        self.store = store
        self.clock = clock
        self.output_cap = output_cap
        #: Every message to an address of this session (notifications are rows of it).
        self.mailbox = Mailbox(self.store, self.session_id, clock)
        self.notifications = NotificationQueue(
            self.store, self.session_id, clock, mailbox=self.mailbox
        )
        self.notifications.on_ack = self._on_ack
        self._tasks = TaskTable()
        # Every id this session has (in memory or evicted): the store is asked only for these.
        self._known_ids: set[str] = set()
        self._handles: dict[str, TaskHandle] = {}
        self._subscribers: set[Subscription] = set()
        # Owners that closed: nothing new is queued for them.
        self._closed_owners: set[str] = set()
        self._lock = threading.RLock()
        self._end_waiters = EndWaiters(self._lock)

    # -- registration and updates -------------------------------------------------------------

    def new_id(self, task_type: TaskType) -> str:
        """Return an id for a new task, unused in this runtime."""
        while True:
            task_id = new_task_id(task_type)
            if task_id not in self._known_ids:
                return task_id

    def output_path(self, task_id: str) -> Path:
        """Where ``task_id``'s output file lives."""
        return output_path(self.session_id, task_id, self.home)

    def create_output(self, task_id: str) -> DiskTaskOutput:
        """Create ``task_id``'s output file (exclusively, refusing symlinks)."""
        return DiskTaskOutput(self.output_path(task_id), self.output_cap)

    def register(self, state: S, handle: TaskHandle | None = None) -> S:
        """Add a task, or resume one with the same id.

        On resume (the id is known and ended) the task goes back to ``running`` under the same
        id; its start time survives (and whatever its kind keeps), and it will be notified
        again when it next ends.

        Raises:
            InvalidTransition: The id is known and the status change is not allowed.
        """
        with self._lock:
            existing = self._tasks.get(state.id) or self._load(state.id)
            self._known_ids.add(state.id)
            merged: TaskState = state.replace(
                session_id=state.session_id or self.session_id,
                start_time=state.start_time or self.clock.time(),
            )
            if existing is not None:
                check_transition(state.id, existing.status, merged.status, resume=True)
                keep = kind_of(merged).resume_changes(existing, merged)
                keep["start_time"] = existing.start_time
                if existing.terminal:
                    keep.update(notified=False, end_time=None)
                merged = merged.replace(**keep)
            self._tasks.put(merged)
            if handle is not None:
                self._handles[state.id] = handle
            self.store.upsert_task_lazy(merged.id, merged.to_dict)
        if self._subscribers:
            self._publish("registered", merged)
        return merged  # type: ignore[return-value]

    def attach_handle(self, task_id: str, handle: TaskHandle) -> None:
        """Give a registered task its live handle (used for kill, detach, background)."""
        self._handles[task_id] = handle

    def release_handle(self, task_id: str) -> None:
        """Forget a task's live handle (its resources are gone)."""
        self._handles.pop(task_id, None)

    def update(self, task_id: str, fn: Callable[[S], S], *, _notify: bool = False) -> S | None:
        """Apply ``fn`` to a task's state atomically; returns the new state (None if unknown).

        A no-op update (``fn`` returns its argument or an equal state) changes and publishes
        nothing. On the terminal transition the end time is stamped and, unless already done,
        the notification is queued in the same step.

        Raises:
            InvalidTransition: ``fn`` changed the status in a way the state machine forbids.
        """
        with self._lock:
            old = self._tasks.get(task_id)
            if old is None:
                # An evicted task is still the session's: bring it back to change it.
                old = self._load(task_id)
                if old is None:
                    return None
                self._tasks.put(old)
            new: TaskState = fn(old)  # type: ignore[arg-type]
            # The status first: a transition differs there, and comparing every field of two
            # states is the dearer test (a churn of tasks makes it twice per task).
            if new is old or (new.status == old.status and new == old):
                return old  # type: ignore[return-value]
            if new.status != old.status:
                check_transition(task_id, old.status, new.status)
            deliver = _notify
            kind = kind_of(new)
            # The statuses tested directly, not through ``terminal``: this is the runtime's
            # hottest path, a churn of tasks takes it twice per task.
            ends = new.status in TERMINAL and old.status not in TERMINAL
            if ends:
                now = self.clock.time()
                changes: dict[str, object] = dict(kind.end_changes(new, now))
                if new.end_time is None:
                    changes["end_time"] = now
                if not new.notified:
                    changes["notified"] = True
                    # A foreground caller receives the result itself: no notification.
                    deliver = new.is_backgrounded
                new = new.replace(**changes)
            self._tasks.put(new)
            self.store.upsert_task_lazy(task_id, new.to_dict)
            if deliver and new.owner not in self._closed_owners and kind.notifies(new):
                self.notifications.post(
                    owner=new.owner,
                    task_id=task_id,
                    text=render_terminal(new),
                    priority=kind.priority(new),
                )
            terminal = new.status in TERMINAL
            waiters = self._end_waiters.take(task_id) if terminal else []
            if (terminal and old.status not in TERMINAL) or _went_idle(old, new):
                self._end_waiters.signal()
        for fut in waiters:
            if not fut.done():
                fut.set_result(new)
        if self._subscribers:
            self._publish("updated", new)
        return new  # type: ignore[return-value]

    def notify(
        self, task_id: str, text: str, *, kind: str = "stall", priority: Priority = "next"
    ) -> Notification | None:
        """Queue a notification about a task that has not ended (e.g. a stalled command)."""
        state = self.get(task_id)
        if state is None or state.owner in self._closed_owners:
            return None
        return self.notifications.enqueue(
            owner=state.owner, task_id=task_id, text=text, kind=kind, priority=priority
        )

    # -- queries ------------------------------------------------------------------------------

    def _load(self, task_id: str) -> TaskState | None:
        if task_id not in self._known_ids:
            return None
        data = self.store.get_task(task_id)
        if data is None or data.get("session_id") != self.session_id:
            return None
        return readable_state(data)

    def get(self, task_id: str, caller: str | None = None) -> TaskState | None:
        """Return a task's state (evicted tasks are read back from the store).

        Raises:
            TaskAccessDenied: ``caller`` is given and is neither the owner nor the session.
        """
        state = self._tasks.get(task_id) or self._load(task_id)
        if state is not None and caller is not None:
            self._check_access(state, caller)
        return state

    def authorize(self, task_id: str, caller: str | None) -> TaskState:
        """Return the task if ``caller`` may read or stop it.

        Raises:
            TaskNotFound: No such task in this session.
            TaskAccessDenied: ``caller`` is neither the owner nor the session.
        """
        state = self.get(task_id)
        if state is None:
            raise TaskNotFound(task_id)
        if caller is not None:
            self._check_access(state, caller)
        return state

    def _check_access(self, state: TaskState, caller: str) -> None:
        if caller not in (state.owner, self.session_id):
            raise TaskAccessDenied(state.id, caller, state.owner)

    def list(
        self,
        *,
        owner: str | None = None,
        statuses: Iterable[TaskStatus] | None = None,
        types: Iterable[TaskType] | None = None,
        include_evicted: bool = False,
    ) -> States:
        """Return tasks matching every given filter, oldest first."""
        wanted_status = set(statuses) if statuses is not None else None
        wanted_type = set(types) if types is not None else None
        # An owner's tasks come from its index: an agent asks about its own on every turn.
        held = self._tasks.owned(owner) if owner is not None else self._tasks.values()
        states = {s.id: s for s in held}
        if include_evicted:
            for data in self.store.list_tasks(self.session_id):
                if data["id"] not in states and (state := readable_state(data)) is not None:
                    states[data["id"]] = state
        return sorted(
            (
                s
                for s in states.values()
                if (owner is None or s.owner == owner)
                and (wanted_status is None or s.status in wanted_status)
                and (wanted_type is None or s.type in wanted_type)
            ),
            key=lambda s: s.start_time,
        )

    def has_live_tasks(self, owner: str | None = None) -> bool:
        """Whether any task (of ``owner``) is pending or running."""
        return self._tasks.has_live(owner)

    def live(self, owner: str) -> States:
        """``owner``'s tasks that are pending or running, oldest first.

        What ``list(owner=owner)`` less the ended ones would be, at the cost of the live ones:
        an owner that started thousands asks on each end.
        """
        return sorted(self._tasks.live_owned(owner), key=lambda s: s.start_time)

    def live_counts(self) -> dict[TaskType, int]:
        """How many tasks of each type are pending or running (in memory: live ones are)."""
        return self._tasks.live_counts()

    def subtree(self, agent_id: str) -> States:
        """The tasks started by ``agent_id`` and, recursively, by the agents it started."""
        found: list[TaskState] = []
        frontier = [agent_id]
        states = self.list(include_evicted=True)
        while frontier:
            owner = frontier.pop()
            for state in states:
                if state.owner == owner:
                    found.append(state)
                    if kind_of(state).owns_tasks:
                        frontier.append(state.id)
        return found

    async def wait_for_change(
        self,
        timeout: float,
        owner: str | None = None,
        *,
        messages: bool = False,
        since: int | None = None,
    ) -> None:
        """Wait until a notification is pending (for ``owner``), any task ends, or timeout.

        A task going idle (a teammate between turns) counts as an end. With ``messages``, a
        message for ``owner`` (SendMessage text) wakes it too. ``since``: :meth:`changes`
        when the caller last looked; an end after it returns at once.
        """
        kind: Kinds = ("notification", *MESSAGES) if messages else "notification"
        await self._end_waiters.change(timeout, self.mailbox, owner, kind, since)

    def changes(self) -> int:
        """How many tasks have ended or gone idle so far (see :meth:`wait_for_change`)."""
        return self._end_waiters.changes()

    async def wait_for_task_end(self, timeout: float) -> bool:
        """Wait until some task ends; False if none did within ``timeout``."""
        return await self._end_waiters.any_end(timeout)

    def subscribe(self, maxlen: int = 1024) -> Subscription:
        """Return a stream of changes (registrations, updates, evictions)."""
        sub = Subscription(maxlen, self._subscribers.discard)
        self._subscribers.add(sub)
        return sub

    def _publish(self, kind: EventKind, state: TaskState) -> None:
        if self._subscribers:
            event = TaskEvent(kind, state)
            for sub in list(self._subscribers):
                sub.push(event)

    async def wait(self, task_id: str, timeout: float) -> TaskState:
        """Wait until the task ends or ``timeout`` passes; return its state then.

        The wait is woken by the terminal transition itself.

        Raises:
            TaskNotFound: No such task.
        """
        state = self.authorize(task_id, None)
        if state.terminal:
            return state
        ended = await self._end_waiters.wait(task_id, timeout)
        return ended if ended is not None else self.authorize(task_id, None)

    # -- notifications ------------------------------------------------------------------------

    def drain(self, owner: str | None = None, priority: Priority | None = None) -> Notifications:
        """Hand out every pending notification (for ``owner``) as one batch; see :meth:`ack`."""
        return self.notifications.drain(owner, priority)

    def ack(self, notifications: Iterable[Notification]) -> None:
        """Record delivery of drained notifications; their ended tasks become evictable."""
        self.notifications.ack(notifications)

    def _on_ack(self, task_ids: Iterable[str]) -> None:
        # One lock and one reading of the clock for the batch: a churn acknowledges
        # notifications ten at a time.
        with self._lock:
            now = self.clock.time()
            evicted = (self._evict_locked(task_id, now) for task_id in task_ids)
            gone = [state for state in evicted if state is not None]
        if self._subscribers:
            for state in gone:
                self._publish("evicted", state)

    # -- eviction -----------------------------------------------------------------------------

    def evict(self, task_id: str) -> bool:
        """Drop an ended, notified task from memory (its record stays in the store).

        A kind may keep its tasks a while after they end, for a UI that shows them.
        """
        with self._lock:
            state = self._evict_locked(task_id, self.clock.time())
        if state is None:
            return False
        if self._subscribers:
            self._publish("evicted", state)
        return True

    def _evict_locked(self, task_id: str, now: float) -> TaskState | None:
        """:meth:`evict` at ``now``, the lock held; the state dropped, if it was."""
        state = self._tasks.get(task_id)
        if state is None or state.status not in TERMINAL or not state.notified:
            return None
        if not kind_of(state).evictable(state, now):
            return None
        self._tasks.remove(task_id)
        self._handles.pop(task_id, None)
        return state

    def sweep(self) -> int:
        """Evict every task that may be evicted; returns how many were."""
        return sum(self.evict(task_id) for task_id in list(self._tasks))


def _went_idle(old: TaskState, new: TaskState) -> bool:
    """Whether a live task stopped working (a teammate between turns): its owner looks again."""
    return not new.terminal and kind_of(old).busy(old) and not kind_of(new).busy(new)


__all__ = ["TaskRegistry"]
