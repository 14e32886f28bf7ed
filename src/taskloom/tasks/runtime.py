"""The TaskRuntime: the task registry of a session as it runs, from its start to its end.

Starting claims the session, sweeps the orphans of crashed sessions, settles their tasks and
replays undelivered notifications. Ending it applies every task's exit policy, as does an owner
that closes: ``cancel`` kills, ``wait`` waits, ``detach`` lets go; notifications for a closed
owner are dropped then, there is no one left to receive them. Tasks are stopped through their
kinds' handles. What it keeps of each task — registration, the atomic update and the one
notification of each end, queries, waits, eviction — is its
:class:`~taskloom.tasks._registry.TaskRegistry`'s.

Call the synchronous methods from the event loop's thread (or with no loop running).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._aio import finish_despite_cancel
from taskloom.clock import SYSTEM_CLOCK, Clock
from taskloom.errors import TaskloomError
from taskloom.process.registry import ProcessRecorder, bind_recorder, current_recorder
from taskloom.process.sweep import sweep_orphans
from taskloom.settings import DEFAULT_OUTPUT_CAP_BYTES, db_path, taskloom_home
from taskloom.store import Store
from taskloom.tasks._recovery import kill_lingering, settle_dead_sessions
from taskloom.tasks._registry import States, TaskRegistry
from taskloom.tasks._subscription import Subscription, TaskEvent
from taskloom.tasks.claim import claim_session
from taskloom.tasks.directory import Directory
from taskloom.tasks.ids import new_uuid
from taskloom.tasks.kinds import TaskHandle, kind_of, outlives_session
from taskloom.tasks.types import TaskState, readable_state
from taskloom.tasks.usage import UsageLedger

if TYPE_CHECKING:
    from taskloom.tasks.scratch import ScratchDirs
    from taskloom.tasks.watchdog import Watchdog

#: How often the safety-net eviction sweep runs.
DEFAULT_SWEEP_INTERVAL_S = 60.0
#: Bound on how long ``close`` spends cancelling tasks.
DEFAULT_CLOSE_TIMEOUT_S = 10.0
#: Bound on how long ``close`` spends handing over the tasks it lets go of (exit policy
#: ``detach`` of a kind that outlives its session); each handle bounds its own handover
#: within it (a remote agent's actor may need seconds to get its work on a busy cluster).
HANDOVER_TIMEOUT_S = 60.0

log = logging.getLogger(__name__)


class TaskRuntime(TaskRegistry):
    """The task runtime of one session (see the module docstring)."""

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
        usage: UsageLedger | None = None,
        keep_transcripts: bool = True,
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
            usage: The session's usage ledger (default: one that prices nothing itself).
            keep_transcripts: Its agents' conversations are recorded (False: the session
                keeps no transcript, ``--no-session-persistence``: nor do they).
        """
        home = home or taskloom_home()
        super().__init__(
            session_id=session_id or new_uuid(),
            home=home,
            store=store or Store(db_path(home)),
            clock=clock,
            output_cap=output_cap,
        )
        self._owns_store = store is None
        self.sweep_interval = sweep_interval
        self.kill_grace = kill_grace
        self.cwd = cwd
        #: The names given to its agents at spawn.
        self.directory = Directory(self.store, self.session_id, clock)
        #: What its agents spent, per agent and per model: every engine charges it.
        self.usage = usage or UsageLedger()
        #: Whether its agents' transcripts are written (see ``keep_transcripts``).
        self.keep_transcripts = keep_transcripts
        # Made at first use (a command, an agent, a bounded wait): see the properties.
        self._watchdog: Watchdog | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._stop_waiting = asyncio.Event()
        self._started = False
        self._recorder: ProcessRecorder | None = None
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self._scratch: ScratchDirs | None = None

    @property
    def watchdog(self) -> Watchdog:
        """What watches the session's commands and agents for stalls and deadlines."""
        if self._watchdog is None:
            from taskloom.tasks.watchdog import Watchdog

            self._watchdog = Watchdog(self.clock)
        return self._watchdog

    @property
    def scratch(self) -> ScratchDirs:
        """Where read-only agents' sandboxed commands may write (``TMPDIR``), per owner."""
        if self._scratch is None:
            from taskloom.tasks.scratch import ScratchDirs

            self._scratch = ScratchDirs()
        return self._scratch

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
            # Before the sweep (which may wait seconds) and before any delivery: see claim.py.
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
                    self._tasks.put(state)
            elif state.terminal and not state.notified:
                with self._lock:
                    self._tasks.put(state)
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
        await self._hand_over()
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
                tagged = {
                    s.id for s in self.list() if kind_of(s).is_process and s.exit_policy != "detach"
                }
                await kill_lingering(self.store, self.session_id, tagged, self.kill_grace)
        if self._watchdog is not None:
            await self._watchdog.close()
        if self._scratch is not None:
            self._scratch.remove_all()
        for sub in list(self._subscribers):
            sub.close()
        self.store.end_session(self.session_id, self.clock.time())
        try:
            self.store.flush()
        finally:
            # Even when the disk is full: the error says so, the connection must not leak.
            if self._owns_store:
                self.store.close()

    async def _hand_over(self) -> None:
        """Let go of the tasks that go on without the session, before anything is stopped.

        Letting go is what their exit policy asks for: losing one because the stopping of the
        others took the time would lose its work. Each handle bounds its own handover.
        """
        handles = [
            handle
            for s in self.list()
            if not s.terminal
            and outlives_session(s)
            and (handle := self._handles.get(s.id)) is not None
        ]
        if handles:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HANDOVER_TIMEOUT_S):
                    await asyncio.gather(*(h.detach() for h in handles), return_exceptions=True)

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

    # -- control ------------------------------------------------------------------------------

    async def kill(
        self, task_id: str, caller: str | None = None, *, told: bool = False
    ) -> TaskState:
        """Stop a task through its kind's handle; a task already ended is left as it is.

        Args:
            task_id: The task.
            caller: Who asks (checked as :meth:`authorize` does); None for the session.
            told: The caller is told of the stop by the result of its own call (TaskStop):
                when it stops a task it started, a kind whose stop needs no more (a shell)
                sends no notification. Stopped by anyone else, the owner is notified.

        Raises:
            TaskNotFound: No such task.
            TaskAccessDenied: ``caller`` may not stop it.
        """
        state = self.authorize(task_id, caller)
        if state.terminal:
            return state
        kind = kind_of(state)
        if told and caller is not None and kind.started_by(state, caller):
            self.update(task_id, kind.told_by_stop)  # its own stop: the result is its notice
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
        live = [s.id for s in self.live(owner)]
        return list(await asyncio.gather(*(self.kill(t) for t in live)))

    async def kill_shells_for_agent(self, agent_id: str) -> States:
        """Kill every live command an agent started (when that agent ends).

        That is every live task of a kind that is a process (``TaskKind.is_process``).
        """
        live = [
            s.id
            for s in self.list()
            if not s.terminal and kind_of(s).is_process and kind_of(s).started_by(s, agent_id)
        ]
        return list(await asyncio.gather(*(self.kill(t) for t in live)))

    async def close_owner(self, owner: str, wait_limit: float = 3600.0) -> None:
        """An owner is going away: apply its tasks' exit policies, set its mail aside.

        ``cancel`` tasks are killed, ``wait`` tasks are awaited (up to ``wait_limit``, then
        killed), ``detach`` tasks are let go.
        """
        waiting = [s.id for s in self.live(owner) if s.exit_policy == "wait"]
        if waiting:
            await self._wait_all(waiting, wait_limit)
        await self._close_owner(owner)

    async def _close_owner(self, owner: str) -> None:
        jobs: list[Awaitable[object]] = []
        for state in self.live(owner):
            handle = self._handles.get(state.id)
            if state.exit_policy == "detach" and handle is not None:
                jobs.append(handle.detach())
            elif outlives_session(state):
                continue  # not taken up by this process: it goes on as it was
            else:
                jobs.append(self.kill(state.id))
        await asyncio.gather(*jobs, return_exceptions=True)
        if self._scratch is not None:
            self._scratch.remove(owner)
        if owner != self.session_id:
            # Nothing new is queued for it; what its tasks said before it closed stays in its
            # mailbox (durable, set aside), and reaches it if it is resumed.
            self._closed_owners.add(owner)
            self.mailbox.park(owner)

    def reopen_owner(self, owner: str) -> None:
        """An owner that was closed is back (a resumed agent): notify it again."""
        self._closed_owners.discard(owner)
        self.mailbox.unpark(owner)

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


__all__ = [
    "Subscription",
    "TaskEvent",
    "TaskHandle",
    "TaskRuntime",
]
