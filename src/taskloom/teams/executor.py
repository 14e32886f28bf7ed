"""Where teammates run: the executor seam, its in-process implementation, and the router.

The messaging layer spawns, messages, asks to shut down and kills teammates through a
:class:`TeammateExecutor`, whatever runs them. :class:`InProcessExecutor` runs each one in this
process as an ``in_process_teammate`` task of the session's runtime, driven by a
:class:`~taskloom.teams.teammate.TeammateRun`; the tmux backend
(:class:`~taskloom.teams.pane_executor.PaneExecutor`) runs each in a process of its own.
:class:`Executors` sends each call to the backend that runs the teammate named, and a new one
to the backend ``teammateMode`` chose.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from taskloom._dataclass import dataclass
from taskloom.agents.builder import DEFAULT_TYPE
from taskloom.errors import UsageError
from taskloom.tasks.teammate import TeammateTaskState, working
from taskloom.tasks.types import TaskStatus, TaskType
from taskloom.teams.protocol import (
    IN_PROCESS,
    LEAD_NAME,
    message_type,
    request_id,
    shutdown_request,
    wrap,
)
from taskloom.teams.protocol import agent_id as member_id
from taskloom.teams.teammate import TeammateRun

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from taskloom.engine import EngineConfig
    from taskloom.messages import Message
    from taskloom.tasks.mailbox import Mailbox
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.base import Tool


@dataclass
class TeammateSpec:
    """What a teammate is spawned with.

    Attributes:
        name: Its name in the team.
        team: Its team's name.
        color: The colour its messages are shown in, if any.
        prompt: Its task, from the lead.
        config: How its engine runs (built by the composition root).
        model: The model it runs on, if not the session's (shown in its task state).
        plan_mode_required: Whether it must have its plan approved before it acts.
        on_end: Called once it has ended, however (its member is then inactive).
        mode: Its permission mode, if set for it (None: the lead's).
        agent_type: The agent type it is built from.
    """

    name: str
    team: str
    color: str | None
    prompt: str
    config: EngineConfig
    model: str | None = None
    plan_mode_required: bool = False
    on_end: Callable[[], None] | None = None
    mode: str | None = None
    agent_type: str = DEFAULT_TYPE


class ConfigMaker(Protocol):
    """Builds a teammate's engine configuration (see :mod:`taskloom.teams.compose`)."""

    def __call__(
        self,
        name: str,
        team: str,
        model: str | None,
        mode: str | None,
        *,
        agent_type: str = DEFAULT_TYPE,
        where: Path | None = None,
        confined: bool = False,
        extra_tools: Sequence[Tool[Any]] = (),
    ) -> EngineConfig:
        """The configuration of teammate ``name`` of ``team``, built from ``agent_type``.

        ``where`` is its directory (default: the lead's), ``confined`` keeps its file tools
        in it (its worktree), ``extra_tools`` are its own MCP servers'.

        Raises:
            ToolError: No such agent type.
        """
        ...


def post_message(
    mailbox: Mailbox,
    recipient: str,
    body: str,
    *,
    sender: str,
    summary: str | None,
    payload: str = "",
) -> str:
    """Post a member's message (``next``, committed: the sender is told it is sent); its id.

    Args:
        mailbox: The team's mailbox.
        recipient: Its address.
        body: What the recipient's model is shown (wrapped by its sender).
        sender: The sender's agent id.
        summary: A short preview.
        payload: A structured message the sender's code made (a builder's of
            :mod:`taskloom.teams.protocol`): the row is then of kind ``protocol``, which its
            recipient's code acts on. '' for text, which nothing but a model reads.

    Raises:
        StoreError: The row could not be written (it will not arrive).
    """
    return mailbox.post(
        recipient=recipient,
        sender=sender,
        kind="protocol" if payload else "message",
        topic=message_type(payload) if payload else "",
        body=body,
        priority="next",
        summary=summary or "",
        commit=True,
        payload=payload,
    ).id


def request_shutdown(
    executor: TeammateExecutor,
    runtime: TaskRuntime,
    task_id: str,
    name: str,
    team: str,
    reason: str | None,
) -> str:
    """Post the lead's ``shutdown_request`` to teammate ``name`` and note it on its task.

    Returns:
        The request's id, ``shutdown-<epoch ms>@<name>``.

    Raises:
        UsageError: No such teammate runs.
    """
    now = runtime.clock.time()
    request = request_id("shutdown", name, now)
    payload = shutdown_request(request, reason=reason, at=now)
    lead = member_id(LEAD_NAME, team)
    body = wrap(payload, sender=LEAD_NAME)
    executor.deliver(member_id(name, team), body, sender=lead, payload=payload)
    runtime.update(task_id, lambda s: s if s.terminal else s.replace(shutdown_requested=True))
    return request


class TeammateExecutor(Protocol):
    """Runs a team's teammates; each is named by its agent id, ``<name>@<team>``.

    Attributes:
        backend: What its teammates run in (``in-process``, ``tmux``): the members' field.
    """

    backend: str

    async def spawn(self, spec: TeammateSpec) -> str:
        """Start a teammate; returns its agent id."""
        ...

    async def resume(self, spec: TeammateSpec, task_id: str, messages: list[Message]) -> str:
        """Bring back a teammate an earlier process ran, under its task id; its agent id."""
        ...

    def deliver(
        self,
        agent_id: str,
        body: str,
        *,
        sender: str,
        summary: str | None = None,
        payload: str = "",
    ) -> str:
        """Post ``body`` (wrapped by its sender) to a teammate, counted at work; the row's id.

        A ``payload`` makes it a protocol message (see :func:`post_message`).
        """
        ...

    async def terminate(self, agent_id: str, reason: str | None) -> str:
        """Ask a teammate to shut down (it may refuse); returns the request's id."""
        ...

    async def kill(self, agent_id: str) -> None:
        """Stop a teammate now, with whatever it started."""
        ...

    def is_active(self, agent_id: str) -> bool:
        """Whether the teammate runs (idle or working)."""
        ...

    def task_id(self, agent_id: str) -> str | None:
        """The teammate's task id (None: it was not started by this backend)."""
        ...

    def local_run(self, agent_id: str) -> TeammateRun | None:
        """The teammate's run, when it runs in this process."""
        ...

    async def close(self) -> None:
        """Let go of what the backend holds (its teammates are killed first)."""
        ...


class PaneBackend(TeammateExecutor, Protocol):
    """A backend whose teammates run in processes (and panes a crashed session may leave).

    Attributes:
        plans: Plans its teammates sent the lead for approval: request id -> agent id.
    """

    plans: dict[str, str]

    async def sweep(self) -> list[str]:
        """Close the panes of sessions that are gone; the panes closed."""
        ...


class InProcessExecutor:
    """Teammates as tasks of this process's runtime (see the module docstring)."""

    backend = IN_PROCESS

    def __init__(
        self, runtime: TaskRuntime, mailbox: Mailbox | None = None, lead: str | None = None
    ) -> None:
        """Run teammates in ``runtime``.

        Args:
            runtime: Where their tasks are.
            mailbox: The team's mailbox (default: the runtime's: the lead runs here).
            lead: The lead's address (default: the runtime's session).
        """
        self.runtime = runtime
        self.mailbox = mailbox if mailbox is not None else runtime.mailbox
        self.lead = lead if lead is not None else runtime.session_id
        self._tasks: dict[str, str] = {}  # agent id -> task id
        self._runs: dict[str, TeammateRun] = {}

    async def resume(self, spec: TeammateSpec, task_id: str, messages: list[Message]) -> str:
        """Bring back a teammate of an earlier process under its task id, with its history.

        It waits for mail at once (what was sent to it and never delivered is pending).
        """
        return self._start(spec, task_id, messages)

    def adopt(
        self,
        spec: TeammateSpec,
        task_id: str,
        messages: list[Message] | None = None,
        **run: str,
    ) -> TeammateRun:
        """Run the teammate its lead registered as ``task_id`` (in a process of its own).

        Args:
            spec: What it was spawned with.
            task_id: Its task id, given by its lead.
            messages: Its conversation so far, when it goes on from an earlier process.
            run: ``backend`` and ``pane_id``, as its run says them, ``transcript`` and
                ``output_file``.
        """
        self._start(spec, task_id, messages, **run)
        return self._runs[member_id(spec.name, spec.team)]

    async def spawn(self, spec: TeammateSpec) -> str:
        """Register its task (owned by the session), attach its run and start it.

        Raises:
            UsageError: A teammate of that name runs in that team already.
        """
        return self._start(spec, self.runtime.new_id(TaskType.IN_PROCESS_TEAMMATE), None)

    def _start(
        self, spec: TeammateSpec, task_id: str, messages: list[Message] | None, **where: str
    ) -> str:
        member = member_id(spec.name, spec.team)
        if self.is_active(member):
            raise UsageError(f"teammate {member} is running already")
        runtime = self.runtime
        runtime.register(
            TeammateTaskState(
                id=task_id,
                status=TaskStatus.RUNNING,
                description=member,
                owner=runtime.session_id,
                output_file=where.get("output_file") or str(runtime.output_path(task_id)),
                backend=where.get("backend", IN_PROCESS),
                pane_id=where.get("pane_id", ""),
                agent_id=member,
                agent_name=spec.name,
                team_name=spec.team,
                color=spec.color,
                prompt=spec.prompt,
                model=spec.model,
                plan_mode_required=spec.plan_mode_required,
            )
        )
        run = TeammateRun(
            runtime,
            task_id,
            agent_id=member,
            name=spec.name,
            team=spec.team,
            color=spec.color,
            config=spec.config,
            prompt=spec.prompt,
            lead=self.lead,
            on_end=spec.on_end,
            messages=messages,
            mailbox=self.mailbox,
            **where,
        )
        runtime.attach_handle(task_id, run)
        self._tasks[member] = task_id
        self._runs[member] = run
        run.start()
        return member

    async def send(
        self, agent_id: str, body: str, *, sender: str, summary: str | None = None
    ) -> str:
        """Post a ``message`` row for the teammate's address, committed; returns its id.

        Raises:
            UsageError: No such teammate runs.
            StoreError: The row could not be written (it will not arrive).
        """
        return self.deliver(agent_id, body, sender=sender, summary=summary)

    def deliver(
        self,
        agent_id: str,
        body: str,
        *,
        sender: str,
        summary: str | None = None,
        payload: str = "",
    ) -> str:
        """:meth:`send`, from synchronous code: post, and count the teammate at work now.

        It is marked working in the same step as the row is posted, before its loop wakes:
        a headless lead checking "is everyone idle?" in between must not end the run.

        Raises:
            UsageError: No such teammate runs.
            StoreError: The row could not be written (it will not arrive).
        """
        task_id = self._active_task(agent_id)
        letter_id = post_message(
            self.mailbox, agent_id, body, sender=sender, summary=summary, payload=payload
        )
        self.runtime.update(task_id, working)
        return letter_id

    async def terminate(self, agent_id: str, reason: str | None) -> str:
        """Send the lead's ``shutdown_request`` (id ``shutdown-<epoch ms>@<name>``).

        Raises:
            UsageError: No such teammate runs.
        """
        task_id = self._active_task(agent_id)
        run = self._runs[agent_id]
        return request_shutdown(self, self.runtime, task_id, run.name, run.team, reason)

    async def kill(self, agent_id: str) -> None:
        """Kill the teammate's task (its run stops it and what it started).

        Raises:
            UsageError: No such teammate was spawned here.
        """
        task_id = self._tasks.get(agent_id)
        if task_id is None:
            raise UsageError(f"no teammate {agent_id}")
        await self.runtime.kill(task_id)

    def is_active(self, agent_id: str) -> bool:
        """Whether its task has not ended."""
        task_id = self._tasks.get(agent_id)
        state = self.runtime.get(task_id) if task_id is not None else None
        return state is not None and not state.terminal

    def local_run(self, agent_id: str) -> TeammateRun | None:
        """The teammate's run (None: no such teammate was started here)."""
        return self._runs.get(agent_id)

    def members(self) -> list[str]:
        """The agent ids of the teammates started here, ended ones included."""
        return list(self._tasks)

    def run(self, agent_id: str) -> TeammateRun:
        """The teammate's run.

        Raises:
            UsageError: No such teammate was started here.
        """
        run = self._runs.get(agent_id)
        if run is None:
            raise UsageError(f"no teammate {agent_id}")
        return run

    async def close(self) -> None:
        """Nothing to let go of: its teammates are tasks of the runtime."""

    def task_id(self, agent_id: str) -> str | None:
        """The task id of the teammate ``agent_id`` (None: none was spawned here)."""
        return self._tasks.get(agent_id)

    def _active_task(self, agent_id: str) -> str:
        task_id = self._tasks.get(agent_id)
        if task_id is None or not self.is_active(agent_id):
            raise UsageError(f"no teammate {agent_id} is running")
        return task_id


class Executors:
    """The team's backends: each call goes to the one running the teammate named.

    A new teammate starts in ``spawn_in`` (``teammateMode``'s choice); one brought back by a
    resume runs in this process. A message for a member no backend here runs (a teammate in
    another process, seen from a teammate's own process) is posted to the team's mailbox, whose
    process for that address is woken.
    """

    def __init__(
        self,
        local: InProcessExecutor,
        panes: PaneBackend | None = None,
        *,
        spawn_in: TeammateExecutor | None = None,
        relay: bool = False,
    ) -> None:
        """Route between ``local`` and ``panes``.

        Args:
            local: The in-process backend.
            panes: The tmux backend, when this session may use it.
            spawn_in: Where a new teammate starts (default: ``local``).
            relay: Post a message for a member no backend here runs, rather than refuse it
                (a teammate's own process: the others run elsewhere).
        """
        self.local = local
        self.panes = panes
        self.spawn_in: TeammateExecutor = spawn_in or local
        self.relay = relay

    @property
    def spawn_backend(self) -> str:
        """What a new teammate runs in (``in-process``, ``tmux``)."""
        return self.spawn_in.backend

    def _backends(self) -> list[TeammateExecutor]:
        return [self.local] if self.panes is None else [self.local, self.panes]

    def _of(self, agent_id: str) -> TeammateExecutor | None:
        """The backend running it, else one that ran it.

        A namesake may have run in one backend, ended, and been spawned again in the other.
        """
        known = [b for b in self._backends() if b.task_id(agent_id) is not None]
        active = [b for b in known if b.is_active(agent_id)]
        found = active or known
        return found[-1] if found else None

    def _known(self, agent_id: str) -> TeammateExecutor:
        backend = self._of(agent_id)
        if backend is None:
            raise UsageError(f"no teammate {agent_id} is running")
        return backend

    async def spawn(self, spec: TeammateSpec) -> str:
        """Start a teammate where ``teammateMode`` says.

        Raises:
            UsageError: A teammate of that name runs in that team already.
            PaneError: Its pane could not be made.
        """
        member = member_id(spec.name, spec.team)
        if self.is_active(member):
            raise UsageError(f"teammate {member} is running already")
        return await self.spawn_in.spawn(spec)

    async def resume(self, spec: TeammateSpec, task_id: str, messages: list[Message]) -> str:
        """Bring back a teammate an earlier process ran, where new ones start (see there)."""
        return await self.spawn_in.resume(spec, task_id, messages)

    def deliver(
        self,
        agent_id: str,
        body: str,
        *,
        sender: str,
        summary: str | None = None,
        payload: str = "",
    ) -> str:
        """Post to a teammate (see :meth:`TeammateExecutor.deliver`).

        Raises:
            UsageError: No such teammate runs (and this process does not relay).
            StoreError: The row could not be written (it will not arrive).
        """
        backend = self._of(agent_id)
        if backend is None and self.relay:
            mailbox = self.local.mailbox
            return post_message(
                mailbox, agent_id, body, sender=sender, summary=summary, payload=payload
            )
        if backend is None:
            raise UsageError(f"no teammate {agent_id} is running")
        return backend.deliver(agent_id, body, sender=sender, summary=summary, payload=payload)

    async def terminate(self, agent_id: str, reason: str | None) -> str:
        """Ask a teammate to shut down; the request's id."""
        return await self._known(agent_id).terminate(agent_id, reason)

    async def kill(self, agent_id: str) -> None:
        """Stop a teammate now."""
        await self._known(agent_id).kill(agent_id)

    def is_active(self, agent_id: str) -> bool:
        """Whether a backend here runs it."""
        backend = self._of(agent_id)
        return backend is not None and backend.is_active(agent_id)

    def task_id(self, agent_id: str) -> str | None:
        """Its task id, if a backend here started it."""
        backend = self._of(agent_id)
        return backend.task_id(agent_id) if backend is not None else None

    def local_run(self, agent_id: str) -> TeammateRun | None:
        """Its run, when it runs in this process."""
        return self.local.local_run(agent_id)

    def run(self, agent_id: str) -> TeammateRun:
        """Its run in this process.

        Raises:
            UsageError: It does not run in this process.
        """
        run = self.local_run(agent_id)
        if run is None:
            raise UsageError(f"teammate {agent_id} does not run in this process")
        return run

    async def close(self) -> None:
        """Let go of every backend (their teammates are killed first)."""
        for backend in self._backends():
            await backend.close()


__all__ = [
    "ConfigMaker",
    "Executors",
    "InProcessExecutor",
    "PaneBackend",
    "TeammateExecutor",
    "TeammateSpec",
    "post_message",
]
