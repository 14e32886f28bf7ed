"""Teammates in tmux panes, as their lead runs them: one ``taskloom teammate`` process each.

A pane teammate is a task of the lead's session like an in-process one (kind
``in_process_teammate``, prefix ``t``, owned by the session), but its loop runs in a process of
its own, in a pane the user can watch. The lead:

- starts it (:meth:`PaneExecutor.spawn`): registers its task, makes its pane, writes its
  :class:`~taskloom.teams.join.JoinSpec`, starts ``taskloom teammate`` there, and records the
  process for the orphan sweep;
- talks to it through the team's mailbox, the store: a row for it is committed, then its
  wake-up socket is pinged; its rows for the lead ping the lead's socket, and the lead reads
  what is new. Idle notifications and shutdown approvals seen among them keep its task state
  (idle, working, done) as the in-process run would (:mod:`taskloom.teams._pane_state`);
- answers its permission requests (``permission_request`` rows, kind ``protocol``) with the
  lead's own prompter — the REPL asks the user, naming the teammate;
- watches its process with a pidfd (:func:`~taskloom.process.watch.wait_exit`): the moment it
  ends the lead knows how. After an approved shutdown or a kill its pane is closed; after a
  crash its task fails (a notification to the lead), its member is inactive, and its pane
  stays with its last words unless ``teammateCrashedPane`` is ``close``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from taskloom.errors import StoreError, UsageError, reason
from taskloom.process.identity import boot_id, is_same_process, process_start_time
from taskloom.process.kill import kill_tree
from taskloom.process.watch import describe_status, wait_exit
from taskloom.store import ProcessRow, TeamTables
from taskloom.tasks.teammate import TeammateTaskState, ended, working
from taskloom.tasks.types import TaskStatus, TaskType
from taskloom.tasks.wakeup import WakeupListener, ping, wakeup_path
from taskloom.teams import protocol
from taskloom.teams._pane_state import PaneMember, its_tasks, review, using
from taskloom.teams.executor import post_message, request_shutdown
from taskloom.teams.pane_env import NOT_INHERITED, pane_environment
from taskloom.teams.pane_usage import PaneSpending, recorded_usage
from taskloom.teams.panes import PaneError
from taskloom.teams.permission_relay import PermissionRelay
from taskloom.teams.protocol import TMUX

if TYPE_CHECKING:
    from taskloom.events import Meter
    from taskloom.messages import Message
    from taskloom.permissions import PermissionPrompter
    from taskloom.tasks.mailbox import Letter, Mailbox
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.teams.executor import TeammateSpec
    from taskloom.teams.join import JoinSpec
    from taskloom.teams.panes import Pane, PaneServer
    from taskloom.teams.teammate import TeammateRun

log = logging.getLogger(__name__)

#: Longest wait for a teammate's process to end once asked to (SIGTERM), before SIGKILL.
KILL_WAIT_S = 5.0
#: What a teammate's process is started as: this Python, this taskloom (``-P``: a
#: ``taskloom`` directory in the project does not shadow the installed package).
_COMMAND = (sys.executable, "-P", "-m", "taskloom", "teammate", "--join")
#: Makes the spec a teammate's process starts from: (its spawn spec, its task id, its pane).
Launcher = Callable[["TeammateSpec", str, str], "JoinSpec"]


class _PaneHandle:
    """A pane teammate's task handle: TaskStop and its owner's end stop its process."""

    def __init__(self, executor: PaneExecutor, agent_id: str) -> None:
        self.executor = executor
        self.agent_id = agent_id

    async def kill(self) -> None:
        await self.executor.kill(self.agent_id)

    async def detach(self) -> None:
        await self.executor.kill(self.agent_id)  # a teammate does not outlive its lead


class PaneExecutor:
    """Teammates as processes in tmux panes (see the module docstring)."""

    backend = TMUX

    def __init__(
        self,
        runtime: TaskRuntime,
        panes: PaneServer,
        launch: Launcher,
        *,
        prompter: PermissionPrompter | None = None,
        keep_crashed: bool = True,
        meter_for: Callable[[str], Meter] | None = None,
    ) -> None:
        """Run teammates in ``panes`` for the lead session of ``runtime``.

        Args:
            runtime: The lead's runtime (its mailbox is the team's).
            panes: The tmux server and window, or the iTerm2 window, they go in.
            launch: Makes a teammate's :class:`~taskloom.teams.join.JoinSpec`.
            prompter: Who answers their permission requests (None: they decide headless).
            keep_crashed: Keep the pane of a teammate that crashed, for the user to read.
            meter_for: The lead's meter for a teammate (by agent id): what its process
                spends counts against the lead's budgets.
        """
        self.runtime = runtime
        self.panes = panes
        self.backend = panes.backend  # what their task states say they run in
        self.launch = launch
        self.prompter = prompter
        self.keep_crashed = keep_crashed
        self.spending = PaneSpending(runtime.usage, meter_for)
        self._members: dict[str, PaneMember] = {}
        self._listener: WakeupListener | None = None
        self._relay: PermissionRelay | None = None
        #: Plans its teammates sent for approval: request id -> agent id (the lead's answer
        #: is checked against them, as for an in-process teammate's).
        self.plans: dict[str, str] = {}

    @property
    def mailbox(self) -> Mailbox:
        """The team's mailbox: the lead's session's."""
        return self.runtime.mailbox

    # -- starting -----------------------------------------------------------------------------

    async def _start(self) -> None:
        """On the first spawn: serve all but the panes' addresses, listen for their pings."""
        if self._listener is not None:
            return
        runtime = self.runtime
        mailbox = runtime.mailbox
        members = self._members
        mailbox.serves = lambda recipient: recipient not in members
        mailbox.elsewhere = self._wake
        listener = WakeupListener(
            wakeup_path(runtime.home, runtime.session_id, runtime.session_id), self._woken
        )
        await listener.__aenter__()
        self._listener = listener
        self._relay = PermissionRelay(
            self.mailbox, runtime.session_id, self.prompter, self._asking, runtime.cwd
        )
        self._relay.start()

    def _wake(self, recipient: str) -> None:
        ping(wakeup_path(self.runtime.home, self.runtime.session_id, recipient))

    def _woken(self) -> None:
        """A teammate posted: read what is new, and keep its task state as its words say."""
        letters = self.mailbox.replay()
        for letter in letters:
            self._observe(letter)
        if letters:
            review(self.runtime, self._members.values(), self.spending)

    def _observe(self, letter: Letter) -> None:
        """Keep a teammate's state as its protocol messages say (its text says nothing)."""
        member = self._members.get(letter.sender)
        data = letter.data if letter.kind in ("protocol", "held") else None
        if member is None or data is None:
            return
        if letter.topic == "idle_notification":
            member.idle_at = letter.created_at
            member.idle_summary = str(data.get("result") or data.get("failureReason") or "")
        elif letter.topic == "shutdown_approved":
            member.approved = True
        elif letter.topic == "plan_approval_request":
            self.plans[str(data.get("requestId") or "")] = member.agent_id

    async def sweep(self) -> list[str]:
        """Close the panes of sessions whose process is gone; the panes closed.

        A pane belongs to the session its ``@taskloom-session`` names. It is closed when that
        session ended, or its process died (a crash); or when it is this session's own but
        none of its teammates' (a resumed session's, from before its crash). A pane of a live
        session, or of a session this store does not know (another ``TASKLOOM_HOME``'s), is
        left alone. Its process, if it still runs, is the orphan sweep's: closing the pane
        hangs it up.
        """
        from taskloom.settings import session_dir
        from taskloom.tasks.claim import owner_gone

        try:
            found = await self.panes.panes()
        except PaneError:
            return []  # no server to sweep (or none we can reach)
        closed = []
        store = self.runtime.store
        ours = {m.pane.id for m in self._members.values() if m.pane is not None}
        gone: set[str] = set()
        for pane_id, _pid, owner, _dead in found:
            if not owner or pane_id in ours:
                continue
            if owner != self.runtime.session_id:
                try:
                    session = store.get_session(owner)
                except StoreError:
                    continue
                if session is None:
                    continue  # not a session of this store: not ours to judge
                if session.ended_at is None and not owner_gone(session):
                    continue  # a live session's
            if await self.panes.kill(pane_id):
                closed.append(pane_id)
            gone.add(owner)
        mine = {f"{m.task_id}.json" for m in self._members.values()}
        for owner in gone:  # the specs written for those panes (the lead's environment)
            folder = session_dir(owner, self.runtime.home) / "teammates"
            for spec in folder.glob("*.json"):
                if spec.name not in mine:
                    with contextlib.suppress(OSError):
                        spec.unlink()
        return closed

    # -- the executor -------------------------------------------------------------------------

    async def spawn(self, spec: TeammateSpec) -> str:
        """Start the teammate in a pane of its own (see the module docstring).

        Raises:
            UsageError: A teammate of that name runs in that team already.
            PaneError: tmux failed (no pane is left).
        """
        return await self._launch(spec, self.runtime.new_id(TaskType.IN_PROCESS_TEAMMATE))

    async def resume(self, spec: TeammateSpec, task_id: str, messages: list[Message]) -> str:
        """Bring back, in a new pane, a teammate an earlier lead process ran, under its task id.

        Its process reads its conversation back from its transcript (``messages`` is what
        the lead read of it: the process's own reading is the one that counts) and waits for
        mail: what was sent to it and never delivered is handed to it.

        Raises:
            UsageError: A teammate of that name runs in that team already.
            PaneError: tmux failed (no pane is left).
        """
        return await self._launch(spec, task_id, resume=True)

    async def _launch(self, spec: TeammateSpec, task_id: str, *, resume: bool = False) -> str:
        agent_id = protocol.agent_id(spec.name, spec.team)
        if self.is_active(agent_id):
            raise UsageError(f"teammate {agent_id} is running already")
        await self._start()
        runtime = self.runtime
        self.spending.started(agent_id)
        runtime.register(
            TeammateTaskState(
                id=task_id,
                status=TaskStatus.RUNNING,
                description=agent_id,
                owner=runtime.session_id,
                output_file=str(runtime.output_path(task_id)),
                agent_id=agent_id,
                agent_name=spec.name,
                team_name=spec.team,
                color=spec.color,
                prompt=spec.prompt,
                model=spec.model,
                plan_mode_required=spec.plan_mode_required,
                backend=self.backend,
                is_idle=resume,  # it goes on waiting for mail
            )
        )
        member = self._members[agent_id] = PaneMember(spec, agent_id, task_id)
        # What was posted for its name before it joined (an assignment) is its process's now.
        self.mailbox.hand_over(agent_id)
        if resume:  # idle as of now, unless mail for it waits (see _pane_state.review)
            member.idle_at = time.time()
        runtime.attach_handle(task_id, _PaneHandle(self, agent_id))
        full_env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        # The tag the sweep finds it (and what it starts without a tag of its own) by.
        full_env["TASKLOOM_TASK_ID"] = task_id
        full_env["TASKLOOM_HOME"] = str(runtime.home)

        async def hand_over(pane: Pane) -> None:
            member.pane = pane
            member.start = process_start_time(pane.pid) or 0.0
            # Recorded before its command can start: a lead killed from here on leaves a
            # process the next session's sweep knows (the pane's shell waits for a line).
            self._record(member, pane)
            join = self.launch(spec, task_id, pane.id)
            join = dataclasses.replace(join, env=full_env, resume=resume)
            member.process_session = join.process_session
            join.write(runtime.home)

        try:
            pane = await self.panes.create(
                team=spec.team,
                session_id=runtime.session_id,
                title=agent_id,
                argv=[*_COMMAND, _join_path(runtime.home, runtime.session_id, task_id)],
                cwd=str(spec.config.cwd),
                env=pane_environment(full_env),
                colour=spec.color,
                before_start=hand_over,
            )
        except BaseException as exc:
            # Its pane is gone (killed by create): so goes what was made for it.
            with contextlib.suppress(OSError):
                Path(_join_path(runtime.home, runtime.session_id, task_id)).unlink(missing_ok=True)
            if member.pane is not None:
                with contextlib.suppress(StoreError):
                    runtime.store.remove_process(member.pane.pid, member.start)
            error = reason(exc)
            # The spawn's caller is told why (a tool error): no notification besides.
            runtime.update(
                task_id,
                lambda s: ended(s, status=TaskStatus.FAILED, error=error).replace(notified=True),
            )
            del self._members[agent_id]
            raise
        self._attach(member, pane)
        if resume:
            review(self.runtime, self._members.values(), self.spending)
        return agent_id

    def _attach(self, member: PaneMember, pane: Pane) -> None:
        """Its process runs: watched, its pane on its task and member."""
        runtime = self.runtime
        member.pane = pane
        runtime.update(
            member.task_id,
            lambda s: s.replace(pane_id=pane.id, pid=pane.pid, pid_start=member.start),
        )
        with contextlib.suppress(StoreError):
            TeamTables(runtime.store).set_member(
                member.spec.team, member.spec.name, tmux_pane_id=pane.id
            )
        member.watcher = asyncio.get_running_loop().create_task(
            self._watch(member), name=f"teammate process {member.agent_id}"
        )

    def _record(self, member: PaneMember, pane: Pane) -> None:
        """Record its process for the orphan sweep (its pane's pid, which its command keeps)."""
        runtime = self.runtime
        me = os.getpid()
        with contextlib.suppress(StoreError, OSError):
            runtime.store.add_process(
                ProcessRow(
                    pid=pane.pid,
                    pid_start=member.start,
                    pgid=os.getpgid(pane.pid),
                    session_id=runtime.session_id,
                    task_id=member.task_id,
                    owner_pid=me,
                    owner_start=process_start_time(me) or 0.0,
                    boot_id=boot_id(),
                )
            )
            runtime.store.flush()  # durable before the command starts

    def deliver(
        self,
        agent_id: str,
        body: str,
        *,
        sender: str,
        summary: str | None = None,
        payload: str = "",
    ) -> str:
        """Post to the teammate (committed, then its process is woken); it is at work now.

        A ``payload`` makes it a protocol message (see :func:`post_message`).

        Raises:
            UsageError: No such teammate runs.
            StoreError: The row could not be written (it will not arrive).
        """
        member = self._active(agent_id)
        letter_id = post_message(
            self.mailbox, agent_id, body, sender=sender, summary=summary, payload=payload
        )
        member.idle_at = None  # at work until it says it is idle again
        self.runtime.update(member.task_id, working)
        return letter_id

    async def terminate(self, agent_id: str, reason: str | None) -> str:
        """Send the lead's ``shutdown_request``; the request's id.

        Raises:
            UsageError: No such teammate runs.
        """
        member = self._active(agent_id)
        spec = member.spec
        return request_shutdown(self, self.runtime, member.task_id, spec.name, spec.team, reason)

    async def kill(self, agent_id: str) -> None:
        """Stop its process (SIGTERM, then SIGKILL of its tree after a bound) and its pane.

        Raises:
            UsageError: No such teammate was started here.
        """
        member = self._members.get(agent_id)
        if member is None:
            raise UsageError(f"no teammate {agent_id}")
        if member.ended.is_set():
            return
        member.killing = True
        pane = member.pane
        if pane is not None and is_same_process(pane.pid, member.start, boot_id()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pane.pid, signal.SIGTERM)  # it stops its run and what that started
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(member.ended.wait(), KILL_WAIT_S)
        if not member.ended.is_set() and pane is not None:
            pgid = None
            if is_same_process(pane.pid, member.start, boot_id()):
                with contextlib.suppress(ProcessLookupError):
                    pgid = os.getpgid(pane.pid)
            await kill_tree(
                pgid,
                leader=pane.pid,
                leader_start=member.start,
                tag=member.task_id,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(member.ended.wait(), KILL_WAIT_S)

    def is_active(self, agent_id: str) -> bool:
        """Whether its task has not ended."""
        member = self._members.get(agent_id)
        state = self.runtime.get(member.task_id) if member is not None else None
        return state is not None and not state.terminal

    def task_id(self, agent_id: str) -> str | None:
        """Its task id (None: not started here)."""
        member = self._members.get(agent_id)
        return member.task_id if member is not None else None

    def local_run(self, agent_id: str) -> TeammateRun | None:
        """None: its run is in its own process."""
        return None

    async def close(self) -> None:
        """Kill every teammate still running, stop listening and answering."""
        live = [a for a, m in self._members.items() if m.pane is not None and not m.ended.is_set()]
        await asyncio.gather(*(self.kill(agent_id) for agent_id in live))
        watchers = [m.watcher for m in self._members.values() if m.watcher is not None]
        if self._relay is not None:
            await self._relay.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*watchers, return_exceptions=True), KILL_WAIT_S)
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.__aexit__(None, None, None)

    def _asking(self, sender: str) -> str | None:
        """The agent id of the running teammate ``sender`` is (None: not one of ours)."""
        member = self._members.get(sender)
        return member.agent_id if member is not None and self.is_active(sender) else None

    def _active(self, agent_id: str) -> PaneMember:
        member = self._members.get(agent_id)
        if member is None or not self.is_active(agent_id):
            raise UsageError(f"no teammate {agent_id} is running")
        return member

    # -- its end ------------------------------------------------------------------------------

    async def _watch(self, member: PaneMember) -> None:
        """Wait for its process to end (a pidfd: at once), then settle its task and pane.

        However settling goes (tmux or the store failing), its task ends and ``ended`` is
        set: a kill waiting for it, or a headless lead, never waits forever.
        """
        pane = member.pane
        assert pane is not None
        how = ""
        try:
            # Its status, read while it is a zombie; else tmux reaped it, and has it.
            how = describe_status(await wait_exit(pane.pid, member.start))
            self._woken()  # what it posted last (its ping may still be on its way)
            if not how:
                how = await self.panes.exit_status(pane.id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("teammate %s: watching its process failed", member.agent_id)
        finally:
            await self._settle(member, pane, how)

    async def _settle(self, member: PaneMember, pane: Pane, how: str) -> None:
        runtime = self.runtime
        try:
            on_end = member.spec.on_end
            if on_end is not None:
                try:
                    on_end()  # inactive first: nothing new is posted to it from now on
                except Exception:
                    log.exception("teammate %s: recording its end failed", member.agent_id)
            with contextlib.suppress(StoreError):
                runtime.store.remove_process(pane.pid, member.start)
                # What waits for it would wait forever, and reach a namesake spawned later.
                rows = runtime.store.undelivered_mail(runtime.session_id)
                mine = [row.id for row in rows if row.recipient == member.agent_id]
                if mine:
                    runtime.mailbox.withdraw(mine)
            with contextlib.suppress(OSError):  # its process read it, or never will
                Path(_join_path(runtime.home, runtime.session_id, member.task_id)).unlink()
            totals = recorded_usage(its_tasks(runtime.store, member, ended=True) or [])
            if totals:  # what it used, as its process last recorded it
                runtime.update(member.task_id, using(totals))
                self.spending.count(member.agent_id, totals)
            crashed = not member.approved and not member.killing
            if not crashed or not self.keep_crashed:
                try:
                    await self.panes.kill(pane.id)
                except (OSError, PaneError) as exc:
                    # A slow or gone tmux must not skip the sweep below of what it left.
                    log.warning("teammate %s: closing its pane failed: %s", member.agent_id, exc)
        finally:
            if member.approved:
                runtime.update(member.task_id, lambda s: ended(s))
            elif member.killing:
                runtime.update(member.task_id, lambda s: ended(s, status=TaskStatus.KILLED))
            else:
                kept = f"; its pane {pane.id} shows its last output" if self.keep_crashed else ""
                error = f"its process {pane.pid} ended ({how or 'how is unknown'}){kept}"
                runtime.update(
                    member.task_id, lambda s: ended(s, status=TaskStatus.FAILED, error=error)
                )
            member.ended.set()
        if not member.approved:
            # Killed or crashed, it may have had no time to stop what it started (its shells
            # and MCP servers, each in a group and with a tag of its own): swept now, once
            # its end is told, not at the next session's start.
            from taskloom.process.sweep import sweep_orphans

            try:
                await sweep_orphans(runtime.store, owner_pid=pane.pid)
            except (StoreError, OSError):
                log.exception("teammate %s: sweeping what it left failed", member.agent_id)


def _join_path(home: Path, session: str, task_id: str) -> str:
    from taskloom.settings import session_dir

    return str(session_dir(session, home) / "teammates" / f"{task_id}.json")


__all__ = ["KILL_WAIT_S", "PaneExecutor"]
