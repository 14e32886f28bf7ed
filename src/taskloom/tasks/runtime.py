"""The TaskRuntime: registers, tracks, persists, notifies, evicts and kills every task.

Every state change goes through :meth:`TaskRuntime.update`, which is atomic: the terminal
transition, the ``notified`` flag and the enqueueing of the notification happen in one step, so
however completion, kill and cleanup race, a task that ends yields exactly one notification.

Owner scoping: a task belongs to the agent (or session) that started it. Only that
owner, or the session itself, may read or stop it, and only that owner is notified of it. When an
owner closes, its tasks are handled by their exit policy (``cancel`` kills, ``wait`` waits,
``detach`` lets go) and notifications for it are dropped: there is no one left to receive them.

Call the synchronous methods from the event loop's thread (or with no loop running).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from taskloom._aio import finish_despite_cancel
from taskloom.clock import SYSTEM_CLOCK, Clock
from taskloom.errors import TaskAccessDenied, TaskloomError, TaskNotFound
from taskloom.process.registry import ProcessRecorder, bind_recorder, current_recorder
from taskloom.process.sweep import sweep_orphans
from taskloom.settings import DEFAULT_OUTPUT_CAP_BYTES, db_path, taskloom_home
from taskloom.store import Store
from taskloom.tasks._claim import claim_session
from taskloom.tasks._recovery import kill_lingering, settle_dead_sessions
from taskloom.tasks._subscription import EventKind, Subscription, TaskEvent
from taskloom.tasks._waiters import EndWaiters
from taskloom.tasks.directory import Directory
from taskloom.tasks.ids import new_task_id
from taskloom.tasks.kinds import TaskHandle, kind_of, outlives_session
from taskloom.tasks.mailbox import MESSAGES, Kinds, Mailbox
from taskloom.tasks.notifications import (
    Notification,
    NotificationQueue,
    render_terminal,
)
from taskloom.tasks.output import DiskTaskOutput, output_path
from taskloom.tasks.types import (
    Priority,
    TaskState,
    TaskStatus,
    TaskType,
    check_transition,
    readable_state,
)
from taskloom.tasks.watchdog import Watchdog

#: How often the safety-net eviction sweep runs.
DEFAULT_SWEEP_INTERVAL_S = 60.0
#: Bound on how long ``close`` spends cancelling tasks.
DEFAULT_CLOSE_TIMEOUT_S = 10.0

S = TypeVar("S", bound=TaskState)
# The runtime has a ``list`` method; these keep annotations in the class unambiguous.
States = list[TaskState]
Notifications = list[Notification]

log = logging.getLogger(__name__)


class TaskRuntime:
    """The task registry of one session (see the module docstring)."""

    def __init__(
        self,
        *,
        session_id: str | None = None,
        home: Path | None = None,
        store: Store | None = None,
        clock: Clock = SYSTEM_CLOCK,
        output_cap: int = DEFAULT_OUTPUT_CAP_BYTES,
        sweep_interval: float = DEFAULT_SWEEP_INTERVAL_S,
        kill_grace: float = 2.0,
        cwd: str | None = None,
    ) -> None:
        """Create a runtime; call :meth:`start` (or use ``async with``) before use.

        Args:
            session_id: Resume this session (its undelivered notifications are replayed);
                None starts a new one.
            home: State directory (default ``$TASKLOOM_HOME``).
            store: An open store to share (default: the home's ``taskloom.db``).
            clock: Time source; tests pass a :class:`~taskloom.testing.FakeClock`.
            output_cap: Size cap of each task's output file.
            sweep_interval: Seconds between safety-net eviction sweeps.
            kill_grace: Seconds between SIGTERM and SIGKILL when killing processes.
            cwd: The session's working directory, as recorded (default: the process's).
        """
        self.home = home or taskloom_home()
        self.session_id = session_id or str(uuid.uuid4())
        self._owns_store = store is None
        self.store = store or Store(db_path(self.home))
        self.clock = clock
        self.output_cap = output_cap
        self.sweep_interval = sweep_interval
        self.kill_grace = kill_grace
        self.cwd = cwd
        #: Every message to an address of this session (notifications are rows of it).
        self.mailbox = Mailbox(self.store, self.session_id, clock)
        self.notifications = NotificationQueue(
            self.store, self.session_id, clock, mailbox=self.mailbox
        )
        #: The names given to its agents at spawn.
        self.directory = Directory(self.store, self.session_id, clock)
        self.notifications.on_ack = self._on_ack
        self._tasks: dict[str, TaskState] = {}
        # Every id this session has (in memory or evicted): the store is asked only for these.
        self._known_ids: set[str] = set()
        self._handles: dict[str, TaskHandle] = {}
        self._subscribers: set[Subscription] = set()
        self._closed_owners: set[str] = set()
        self.watchdog = Watchdog(clock)
        self._lock = threading.RLock()
        self._end_waiters = EndWaiters(self._lock)
        self._sweeper: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._stop_waiting = asyncio.Event()
        self._started = False
        self._recorder: ProcessRecorder | None = None
        self._closers: list[Callable[[], Awaitable[None]]] = []

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> TaskRuntime:
        """Claim the session, sweep orphans, settle crashed sessions, replay notifications.

        Raises:
            UserError: The session is being run by another live process.
            StoreError: The store could not be written.
        """
        if self._started:
            return self
        self._started = True
        try:
            # Before the sweep (which may wait seconds) and before any delivery: see _claim.py.
            own = claim_session(self.store, self.session_id, self.clock.time(), self.cwd)
        except TaskloomError:
            if self._owns_store:
                self.store.close()
            raise
        self._recorder = ProcessRecorder(self.store, self.session_id)
        bind_recorder(self._recorder)
        try:
            records = self.store.list_processes()
            await sweep_orphans(self.store, grace=self.kill_grace)
            settle_dead_sessions(self.store, records, self.clock.time(), taken=own)
            self.notifications.replay()
            if own is not None:
                self._load_session_tasks()
        except BaseException:
            # Claimed but not started (a signal during the sweep, a store error): give the
            # session back and close the store, as a finished run would.
            await self.close()
            raise
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())
        return self

    @property
    def recorder(self) -> ProcessRecorder | None:
        """Where this session records what it starts, for the orphan sweep (once started)."""
        return self._recorder

    def on_close(self, closer: Callable[[], Awaitable[None]]) -> None:
        """Run ``closer`` at the session's end once its tasks are stopped (or let go of).

        Before what they left running is killed and the store is closed: a closer may still
        stop what it owns (the local Ray of remote agents) and update its records.
        """
        self._closers.append(closer)

    @property
    def closing(self) -> bool:
        """Whether the session is ending (:meth:`close` was called)."""
        return self._close_task is not None

    async def __aenter__(self) -> TaskRuntime:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _load_session_tasks(self) -> None:
        """On resume, notify tasks that ended while no process of the session was alive.

        Detached tasks that outlive their session (see ``TaskKind.outlives_session``) are held
        again, still running: whoever takes them up attaches their handles.
        """
        for data in self.store.list_tasks(self.session_id):
            state = readable_state(data)
            if state is None:
                continue
            self._known_ids.add(state.id)
            if not state.terminal and outlives_session(state):
                with self._lock:
                    self._tasks[state.id] = state
            elif state.terminal and not state.notified:
                with self._lock:
                    self._tasks[state.id] = state
                self.update(state.id, lambda s: s.replace(notified=True), _notify=True)

    async def _sweep_loop(self) -> None:
        while True:
            await self.clock.sleep(self.sweep_interval)
            self.sweep()

    async def close(
        self, timeout: float = DEFAULT_CLOSE_TIMEOUT_S, wait_limit: float = 3600.0
    ) -> None:
        """End the session: apply every task's exit policy, then release the store.

        Tasks with policy ``wait`` are awaited up to ``wait_limit`` seconds; cancelling the
        caller ends that wait early. Then the remaining tasks are stopped within ``timeout``
        seconds; that part runs to its end even if the caller is cancelled again (the
        cancellation is re-raised afterwards). Calling ``close`` twice waits for the first.
        """
        if self._close_task is None:
            self._close_task = asyncio.get_running_loop().create_task(
                self._close(timeout, wait_limit)
            )
        if current_recorder() is self._recorder:
            bind_recorder(None)  # its store is about to close
        await finish_despite_cancel(self._close_task, on_cancel=self._stop_waiting.set)

    async def _close(self, timeout: float, wait_limit: float) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        waiting = [s.id for s in self.list() if not s.terminal and s.exit_policy == "wait"]
        if waiting:
            await self._wait_all(waiting, wait_limit)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                owners = {s.owner for s in self.list() if not s.terminal}
                await asyncio.gather(*(self._close_owner(o) for o in owners))
        for closer in self._closers:
            try:
                await closer()
            except Exception:  # one that fails must not keep the session from ending
                log.warning("closing the session: %s failed", closer, exc_info=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                shells = {
                    s.id
                    for s in self.list(types=[TaskType.LOCAL_BASH])
                    if s.exit_policy != "detach"
                }
                await kill_lingering(self.store, self.session_id, shells, self.kill_grace)
        await self.watchdog.close()
        for sub in list(self._subscribers):
            sub.close()
        self.store.end_session(self.session_id, self.clock.time())
        try:
            self.store.flush()
        finally:
            # Even when the disk is full: the error says so, the connection must not leak.
            if self._owns_store:
                self.store.close()

    async def _wait_all(self, task_ids: Iterable[str], limit: float) -> None:
        """Wait for tasks to end, up to ``limit`` or until ``_stop_waiting`` is set."""
        waits: asyncio.Future[Any] = asyncio.gather(
            *(self.wait(t, timeout=limit) for t in task_ids)
        )
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stop_waiting.wait())
        try:
            await asyncio.wait([waits, stop], timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            waits.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waits

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
            self._tasks[state.id] = merged
            if handle is not None:
                self._handles[state.id] = handle
            self.store.upsert_task_lazy(merged.id, merged.to_dict)
        self._publish("registered", merged)
        return merged  # type: ignore[return-value]

    def attach_handle(self, task_id: str, handle: TaskHandle) -> None:
        """Give a registered task its live handle (used for kill, detach, background)."""
        self._handles[task_id] = handle

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
                self._tasks[task_id] = old
            new: TaskState = fn(old)  # type: ignore[arg-type]
            if new is old or new == old:
                return old  # type: ignore[return-value]
            check_transition(task_id, old.status, new.status)
            deliver = _notify
            if new.terminal and not old.terminal:
                now = self.clock.time()
                kind = kind_of(new)
                changes: dict[str, object] = dict(kind.end_changes(new, now))
                if new.end_time is None:
                    changes["end_time"] = now
                if not new.notified:
                    changes["notified"] = True
                    # A foreground caller receives the result itself: no notification.
                    deliver = new.is_backgrounded
                new = new.replace(**changes)
            self._tasks[task_id] = new
            self.store.upsert_task_lazy(task_id, new.to_dict)
            if deliver and new.owner not in self._closed_owners and kind_of(new).notifies(new):
                self.notifications.enqueue(
                    owner=new.owner,
                    task_id=task_id,
                    text=render_terminal(new),
                    priority=kind_of(new).priority(new),
                )
            waiters = self._end_waiters.take(task_id) if new.terminal else []
            if new.terminal and not old.terminal:
                self._end_waiters.signal()
        for fut in waiters:
            if not fut.done():
                fut.set_result(new)
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
        states = dict(self._tasks)
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
        return any(
            not s.terminal and (owner is None or s.owner == owner) for s in self._tasks.values()
        )

    async def wait_for_change(
        self, timeout: float, owner: str | None = None, *, messages: bool = False
    ) -> None:
        """Wait until a notification is pending (for ``owner``) or any task ends, or timeout.

        With ``messages``, a message for ``owner`` (SendMessage text) wakes it too.
        """
        kind: Kinds = ("notification", *MESSAGES) if messages else "notification"
        await self._end_waiters.change(timeout, self.mailbox, owner, kind)

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

    # -- control ------------------------------------------------------------------------------

    async def kill(self, task_id: str, caller: str | None = None) -> TaskState:
        """Stop a task through its kind's handle; a task already ended is left as it is.

        Raises:
            TaskNotFound: No such task.
            TaskAccessDenied: ``caller`` may not stop it.
        """
        state = self.authorize(task_id, caller)
        if state.terminal:
            return state
        handle = self._handles.get(task_id)
        try:
            if handle is not None:
                await handle.kill()
        finally:
            # Whatever the handle did (or raised), the task is ended now.
            self.update(task_id, lambda s: kind_of(s).killed(s))
        return self.authorize(task_id, None)

    async def kill_owned(self, owner: str) -> States:
        """Kill every live task started by ``owner``, concurrently."""
        live = [s.id for s in self.list(owner=owner) if not s.terminal]
        return list(await asyncio.gather(*(self.kill(t) for t in live)))

    async def kill_shells_for_agent(self, agent_id: str) -> States:
        """Kill every live shell an agent started (when that agent ends)."""
        live = [
            s.id
            for s in self.list(types=[TaskType.LOCAL_BASH])
            if not s.terminal and kind_of(s).started_by(s, agent_id)
        ]
        return list(await asyncio.gather(*(self.kill(t) for t in live)))

    async def close_owner(self, owner: str, wait_limit: float = 3600.0) -> None:
        """An owner is going away: apply its tasks' exit policies, set its mail aside.

        ``cancel`` tasks are killed, ``wait`` tasks are awaited (up to ``wait_limit``, then
        killed), ``detach`` tasks are let go.
        """
        waiting = [
            s.id for s in self.list(owner=owner) if not s.terminal and s.exit_policy == "wait"
        ]
        if waiting:
            await self._wait_all(waiting, wait_limit)
        await self._close_owner(owner)

    async def _close_owner(self, owner: str) -> None:
        jobs: list[Awaitable[object]] = []
        for state in self.list(owner=owner):
            if state.terminal:
                continue
            handle = self._handles.get(state.id)
            if state.exit_policy == "detach" and handle is not None:
                jobs.append(handle.detach())
            elif outlives_session(state):
                continue  # not taken up by this process: it goes on as it was
            else:
                jobs.append(self.kill(state.id))
        await asyncio.gather(*jobs, return_exceptions=True)
        if owner != self.session_id:
            # Nothing new is queued for it; what its tasks said before it closed stays in its
            # mailbox (durable, set aside), and reaches it if it is resumed.
            self._closed_owners.add(owner)
            self.mailbox.park(owner)

    def reopen_owner(self, owner: str) -> None:
        """An owner that was closed is back (a resumed agent): notify it again."""
        self._closed_owners.discard(owner)
        self.mailbox.unpark(owner)

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

    def background(self, task_id: str) -> bool:
        """Move a running foreground task to the background; False if it is not one.

        Its output is not touched (it is already on disk); its end will be notified.
        """
        state = self.get(task_id)
        if state is None or state.terminal or state.is_backgrounded:
            return False
        moved = self.update(task_id, lambda s: s.replace(is_backgrounded=True)) or state
        kind_of(moved).hand_off(moved, self._handles.get(task_id))
        return True

    def release_handle(self, task_id: str) -> None:
        """Forget a task's live handle (its resources are gone)."""
        self._handles.pop(task_id, None)

    # -- notifications ------------------------------------------------------------------------

    def drain(self, owner: str | None = None, priority: Priority | None = None) -> Notifications:
        """Hand out every pending notification (for ``owner``) as one batch; see :meth:`ack`."""
        return self.notifications.drain(owner, priority)

    def ack(self, notifications: Iterable[Notification]) -> None:
        """Record delivery of drained notifications; their ended tasks become evictable."""
        self.notifications.ack(notifications)

    def _on_ack(self, notes: Notifications) -> None:
        for note in notes:
            self.evict(note.task_id)

    # -- eviction -----------------------------------------------------------------------------

    def evict(self, task_id: str) -> bool:
        """Drop an ended, notified task from memory (its record stays in the store).

        A kind may keep its tasks a while after they end, for a UI that shows them.
        """
        with self._lock:
            state = self._tasks.get(task_id)
            if state is None or not state.terminal or not state.notified:
                return False
            if not kind_of(state).evictable(state, self.clock.time()):
                return False
            del self._tasks[task_id]
            self._handles.pop(task_id, None)
        self._publish("evicted", state)
        return True

    def sweep(self) -> int:
        """Evict every task that may be evicted; returns how many were."""
        return sum(self.evict(task_id) for task_id in list(self._tasks))


__all__ = [
    "Subscription",
    "TaskEvent",
    "TaskHandle",
    "TaskRuntime",
]
