"""Messages to subagents: addressed by id or name, delivered by mailbox, resuming if stopped.

A :class:`Messenger` resolves a recipient through the runtime's directory of names, commits
the message to the runtime's mailbox, and resumes a stopped agent on it: the run this process
started, or one rebuilt from its transcript (an agent of an earlier process).

Besides one agent, a message may go to every running agent the sender may address (``*``),
to the main session (its session id, from an agent), or to another taskloom session: on this
machine (``uds:<socket path>``) or on the Ray cluster (``bridge:<session id>``), see
:mod:`taskloom.agents.cross_session`. A message is text, or a
structured object (see :mod:`taskloom.agents.structured_messages`), checked before anything
is posted: a structured one is a ``protocol`` row (with the object as its payload), text a
``message`` row, even text that is JSON. A running recipient sees it framed with who sent it,
the text quoted inside an ``<agent-message>`` element (see :mod:`taskloom.quoting`: it cannot
end it, nor pose as another sender); a stopped agent resumed on it gets it as it was written
(it is its new prompt, from its owner, the one sender that may message it).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.agents.budget import Budget, Budgets
from taskloom.errors import TaskError, ToolError
from taskloom.quoting import quote
from taskloom.signals import emit
from taskloom.tasks.agent import resumed
from taskloom.tasks.narrow import as_agent
from taskloom.tasks.types import AgentTaskState, TaskType

if TYPE_CHECKING:
    from taskloom.agents.builder import AgentBuilder
    from taskloom.agents.cross_session import OwnAddresses
    from taskloom.agents.definition import AgentDefinition
    from taskloom.agents.environment import Environments
    from taskloom.agents.limits import Slot, SpawnLimits
    from taskloom.agents.run import AgentRun
    from taskloom.agents.team_port import TeamPort
    from taskloom.remote.cluster import Cluster
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.base import ToolContext

#: The address of every running agent the sender may message.
BROADCAST = "*"
#: The prefixes of another session's address: on this machine, and on the Ray cluster (what
#: they mean, and the sending, in taskloom.agents.cross_session, loaded only to send).
PEER_PREFIX = "uds:"
BRIDGE_PREFIX = "bridge:"
_ELSEWHERE = (PEER_PREFIX, BRIDGE_PREFIX)


@dataclass(frozen=True, slots=True)
class Delivery:
    """What the sender of a message is told.

    Attributes:
        text: The tool result the model sees.
        data: Structured detail for programmatic consumers.
    """

    text: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Letter:
    """A message checked and ready to post: its text, and its type when structured."""

    body: str
    summary: str
    type: str | None = None
    request_id: str | None = None


class Messenger:
    """Delivers SendMessage text to the session's agents."""

    def __init__(
        self,
        runtime: TaskRuntime,
        builder: AgentBuilder,
        environments: Environments,
        runs: dict[str, AgentRun],
        *,
        cwd: Path,
        coordinator: bool = False,
        listen_path: Path | None = None,
        teams: TeamPort | None = None,
        budgets: Budgets | None = None,
        on_resumed: Callable[[AgentRun, asyncio.Task[None]], None] | None = None,
        limits: Callable[[], SpawnLimits] | None = None,
        bridge_address: str | None = None,
        bridge_cluster: Callable[[], Cluster] | None = None,
    ) -> None:
        """Deliver on ``runtime`` to the agents of ``runs`` (shared with the spawner).

        Args:
            runtime: The session's runtime (its directory and mailbox).
            builder: Rebuilds an agent of an earlier process from its definition.
            environments: Makes a fresh worktree for an isolated agent whose last one is gone.
            runs: The runs started in this process, by agent id (a resume may replace one).
            cwd: The session's working directory (where a rebuilt agent works).
            coordinator: The main thread coordinates its agents: its messages are signed
                ``coordinator`` rather than ``main session``.
            listen_path: The socket this session listens on (``--listen``), given to other
                sessions as the address to reply to; None when it does not listen.
            teams: The session's team: messages between its members go through it.
            budgets: The session's budgets: a resumed agent is counted as a spawned one is.
            on_resumed: Told of each resumed run and its driver (the spawner watches it as
                it watches a spawned one).
            limits: Gives the session's spawning limits: a resume is admitted under
                ``maxConcurrentAgents`` as a spawn is (None: unbounded).
            bridge_address: This session's ``bridge:`` address, if it listens on the cluster.
            bridge_cluster: The session's Ray cluster, for ``bridge:`` messages.
        """
        self.runtime = runtime
        self.builder = builder
        self.environments = environments
        self.runs = runs
        self.cwd = cwd
        self.coordinator = coordinator
        self.listen_path = listen_path
        self.teams = teams
        self._resume_locks: dict[str, asyncio.Lock] = {}
        self.budgets = budgets
        self.on_resumed = on_resumed
        self.limits = limits
        self.bridge_address = bridge_address
        self.bridge_cluster = bridge_cluster

    # -- addresses ----------------------------------------------------------------------------

    def resolve(self, to: str, sender: str | None = None) -> str:
        """The agent id ``to`` names (an id or a spawn name).

        Raises:
            ToolError: No such agent; the message lists whom ``sender`` may address.
        """
        names = self.runtime.directory.entries()
        if to in names:
            return names[to]
        if as_agent(self.runtime.get(to)) is not None:
            return to
        names_ok, ids = self.addressable(sender)
        choices = [*names_ok, *ids]
        if sender is not None and sender != self.runtime.session_id:
            choices.append(f"{self.runtime.session_id} (the main session)")
        choices.append(f'"{BROADCAST}" (every running agent)')
        listed = ", ".join(choices)
        raise ToolError(
            f"No agent named or with id {to!r}. You can address: {listed}, or "
            f'"{PEER_PREFIX}<socket path>" (another taskloom session on this machine), or '
            f'"{BRIDGE_PREFIX}<session id>" (one on the Ray cluster).'
        )

    def addressable(self, sender: str | None) -> tuple[list[str], list[str]]:
        """The names, and the ids, of the agents ``sender`` may message (None: any)."""
        agents = [
            state.id
            for state in self.runtime.list(types=[TaskType.LOCAL_AGENT], include_evicted=True)
            if state.id != sender and self._may(state.id, sender)
        ]
        allowed = set(agents)
        names = [
            name for name, address in self.runtime.directory.entries().items() if address in allowed
        ]
        return names, agents

    def _may(self, agent_id: str, sender: str | None) -> bool:
        try:
            self.runtime.authorize(agent_id, sender)
        except TaskError:  # TaskNotFound, TaskAccessDenied
            return False
        return True

    def _who(self, sender: str) -> str:
        """How a running recipient is told who sent a message."""
        if sender == self.runtime.session_id:
            return "coordinator" if self.coordinator else "main session"
        names = [n for n, address in self.runtime.directory.entries().items() if address == sender]
        if not names:
            agent = as_agent(self.runtime.get(sender))
            if agent is not None and agent.name:
                names = [agent.name]
        return f"agent {names[-1]} ({sender})" if names else f"agent {sender}"

    def _framed(self, letter: _Letter, sender: str) -> str:
        """``letter`` as a recipient at work sees it: who sent it, and that it must be heard."""
        what = f"a {letter.type} message" if letter.type else "a message"
        return (
            f"The {quote(self._who(sender))} sent {what} while you were working:\n"
            f"<agent-message>\n{quote(letter.body)}\n</agent-message>\n\n"
            "Address this before completing your current task."
        )

    # -- sending ------------------------------------------------------------------------------

    async def deliver(
        self,
        to: str,
        message: str | dict[str, Any],
        ctx: ToolContext,
        *,
        summary: str | None = None,
        notify_when_idle: bool = False,
    ) -> Delivery:
        """Deliver ``message`` to ``to``: an agent, ``*``, the main session or a ``uds:`` peer.

        ``notify_when_idle``: the team lead asks its recipients' next idle notices to wake it
        (teammates only).

        Raises:
            ToolError: A structured message that is not valid, an unknown recipient, nobody
                to broadcast to, a peer that cannot be reached, an agent that cannot resume.
            TaskError: ``ctx.owner`` may not message that agent.
        """
        letter = _checked(message, summary)
        teams = self.teams
        if teams is not None and not to.startswith(_ELSEWHERE) and teams.handles(to, ctx):
            # Validated above; the team gets the message as written (its protocol reads it).
            text, data = await teams.send(
                to, message, ctx, summary, notify_when_idle=notify_when_idle
            )
            return Delivery(text, data)
        if notify_when_idle:
            raise ToolError(
                f"SendMessage: notify_when_idle is for messages to teammates; {to!r} is not one."
            )
        if to.startswith(_ELSEWHERE):
            return await self._to_peer(to, letter, ctx)
        if to == BROADCAST:
            delivery = await self._broadcast(letter, ctx)
        elif to == self.runtime.session_id:
            delivery = self._to_session(letter, ctx)
        else:
            agent_id = self.resolve(to, ctx.owner)
            text, status = await self._send(agent_id, letter, ctx)
            delivery = Delivery(
                text, {"to": to, "agent_id": agent_id, "agentId": agent_id, "status": status}
            )
        if letter.request_id is not None:
            delivery = Delivery(
                f"{delivery.text} Its request_id is {letter.request_id}.",
                {**delivery.data, "request_id": letter.request_id},
            )
        return delivery

    async def send(
        self, to: str, message: str, ctx: ToolContext, *, summary: str | None = None
    ) -> str:
        """Deliver ``message`` through the agent's mailbox; a stopped agent is resumed with it.

        Committed first; a running agent takes it at its next tool boundary, a stopped one
        (even one that died with an earlier process) is resumed on it and older unseen ones.
        """
        return (await self.deliver(to, message, ctx, summary=summary)).text

    async def _send(self, agent_id: str, letter: _Letter, ctx: ToolContext) -> tuple[str, str]:
        """Deliver to one agent; the sender's text, and ``queued`` or ``resumed``."""
        self.runtime.authorize(agent_id, ctx.owner)
        run = self.runs.get(agent_id)
        if run is not None and run.finishing and run.driver is not None:
            # It has taken its last input and is wrapping up: resume it once it has ended.
            await asyncio.wait([run.driver], timeout=60)
        # One sender at a time decides whether to resume: a second one, arriving while the
        # first resumes, must find the agent running (and queue), not resume it again.
        async with self._lock(agent_id):
            return await self._deliver(agent_id, ctx, letter)

    def _lock(self, agent_id: str) -> asyncio.Lock:
        return self._resume_locks.setdefault(agent_id, asyncio.Lock())

    def _post(self, recipient: str, sender: str, body: str, letter: _Letter) -> str:
        """Post ``body`` (``letter`` as ``recipient`` is shown it); the row's id.

        A structured letter is a ``protocol`` row carrying its object; text a ``message`` row.
        """
        return self.runtime.mailbox.post(
            recipient=recipient,
            sender=sender,
            kind="protocol" if letter.type else "message",
            topic=letter.type or "",
            body=body,
            priority="next",
            summary=letter.summary,
            commit=True,
            payload=letter.body if letter.type else "",
        ).id

    async def _deliver(self, agent_id: str, ctx: ToolContext, letter: _Letter) -> tuple[str, str]:
        state = as_agent(self.runtime.authorize(agent_id, ctx.owner))
        assert state is not None  # resolved to an agent
        if not state.terminal:
            self._post(agent_id, ctx.owner, self._framed(letter, ctx.owner), letter)
            return (
                f"Message queued for agent {agent_id}; it will see it at its next tool "
                "boundary, before its next model request.",
                "queued",
            )
        if letter.type is not None:
            # A protocol message is for an agent at work; waking a finished one for it (a
            # shutdown_request to an agent that is done) would only start it again.
            raise ToolError(
                f"SendMessage: to: agent {agent_id} is not running (status: "
                f"{state.status.value}); a {letter.type} goes only to a running agent."
            )
        # Admitted before anything is posted or made for it, and counted until registered.
        slot = self._admit(agent_id)
        try:
            # Resumed on it: the message is its new prompt, as it was written.
            posted = self._post(agent_id, ctx.owner, letter.body, letter)
            try:
                await self._resume(agent_id, state)
            except BaseException:
                # The sender is told it failed: the message must not turn up at a later resume.
                self.runtime.mailbox.withdraw([posted])
                raise
        finally:
            if slot is not None:
                slot.release()
        # A stopped agent comes back on it: ``resumed``, as Claude Code reports it.
        return (
            f"Agent {agent_id} had {state.status.value}; it was resumed in the background with "
            "your message. You will be notified when it finishes.",
            "resumed",
        )

    def _admit(self, agent_id: str) -> Slot | None:
        """A slot for ``agent_id``'s resume under ``maxConcurrentAgents``.

        Raises:
            ToolError: No room: the limit's words, and that the message was not delivered.
        """
        if self.limits is None:
            return None
        try:
            return self.limits().admit_resume(agent_id)
        except ToolError as exc:
            # Dropped rather than kept for later: a message turning up at some later resume,
            # after the sender has moved on, would be worse than one it knows to send again.
            raise ToolError(
                f"{exc} Your message was not delivered (nothing was kept for it); send it "
                "again once there is room."
            ) from None

    async def _broadcast(self, letter: _Letter, ctx: ToolContext) -> Delivery:
        """Post ``letter`` to every running agent ``ctx.owner`` may message (not itself)."""
        reached: list[str] = []
        framed = self._framed(letter, ctx.owner)
        for state in self.runtime.list(types=[TaskType.LOCAL_AGENT]):
            if state.terminal or state.id == ctx.owner:
                continue
            if not self._may(state.id, ctx.owner):
                continue
            run = self.runs.get(state.id)
            if run is not None and run.finishing:
                continue  # it has taken its last input: a broadcast does not resume it
            async with self._lock(state.id):  # not while a resume decides about it
                current = self.runtime.get(state.id)
                if current is None or current.terminal:
                    continue
                self._post(state.id, ctx.owner, framed, letter)
            reached.append(state.id)
        if not reached:
            raise ToolError("No running agent to broadcast to.")
        return Delivery(
            f"Message broadcast to {len(reached)} agents: {', '.join(reached)}",
            {"type": "broadcast", "delivered": len(reached), "recipients": reached},
        )

    def _to_session(self, letter: _Letter, ctx: ToolContext) -> Delivery:
        """Post ``letter`` from an agent to the main thread (the session id)."""
        session = self.runtime.session_id
        if ctx.owner == session:
            raise ToolError(
                f"SendMessage: to: {session} is your own session; address an agent instead."
            )
        posted = self._post(session, ctx.owner, self._framed(letter, ctx.owner), letter)
        return Delivery(
            f"Message queued for the main session ({session}).", {"to": session, "id": posted}
        )

    async def _to_peer(self, to: str, letter: _Letter, ctx: ToolContext) -> Delivery:
        """Hand ``letter`` to the session ``to`` names (``uds:`` or ``bridge:``)."""
        from taskloom.agents.cross_session import send_to_session

        text, row = await send_to_session(
            to, letter.body, letter.summary, letter.type, ctx.owner, self.own_addresses()
        )
        return Delivery(text, {"to": to, "id": row})

    def own_addresses(self) -> OwnAddresses:
        """Where this session is reached, and its cluster, for a message to another one."""
        from taskloom.agents.cross_session import OwnAddresses

        return OwnAddresses(
            self.runtime.session_id, self.listen_path, self.bridge_address, self.bridge_cluster
        )

    def _definition(self, agent_type: str) -> AgentDefinition:
        """The definition to rebuild an agent of an earlier process with.

        Raises:
            ToolError: The type is gone (an agent file removed since).
        """
        if agent_type not in self.builder.catalog:
            found = _known_elsewhere(agent_type)
            if found is not None:
                return found
        return self.builder.definition(agent_type)

    async def _resume(self, agent_id: str, state: AgentTaskState) -> None:
        # What resuming takes is loaded at the first resume: off the start-up path.
        from taskloom.agents.bookkeeping import recorded
        from taskloom.agents.run import AgentRun, sidechain_path
        from taskloom.pairing import repair
        from taskloom.transcript import load_messages

        run = self.runs.get(agent_id)
        if run is None and self.budgets is not None:  # of an earlier process: as it was then
            definition = self._definition(state.agent_type)
            before = (state.subtree_tokens, state.subtree_tool_uses)
            self.budgets.reopen(
                agent_id, state.owner, Budget(tokens=definition.tokens), before,
                state.subtree_cost_usd,
            )  # fmt: skip
        spent = self.budgets.exhausted(agent_id) if self.budgets is not None else None
        if spent is not None:  # before anything is made for it (a fresh worktree)
            if self.budgets is not None:
                self.budgets.close(agent_id)
            raise ToolError(
                f"Agent {agent_id} cannot go on: {spent}. Start a new agent (with a budget of "
                "its own) for what is left."
            )
        if run is not None and run.driver is not None and not run.driver.done():
            # Still cleaning up after its last run (killing its shells): let that finish first,
            # or it would close the files and the owner of the new run.
            await asyncio.wait([run.driver], timeout=60)
        if run is not None and run.worktree is not None:
            # An isolated agent goes on isolated: in its kept worktree (each run finishes it
            # again), or in a fresh one if the last was removed as clean.
            if not Path(run.worktree.path).exists():
                worktree = await self.environments.create_worktree(
                    agent_id, Path(run.worktree.repo_root)
                )
                run = self.runs[agent_id] = run.moved(
                    worktree.path,
                    worktree=worktree,
                    finalize=self.environments.worktree_finisher(worktree),
                )
        elif run is None and state.worktree_path:
            raise ToolError(
                f"Agent {agent_id} worked in the worktree {state.worktree_path} in an earlier "
                "process; start a new agent there instead of resuming it."
            )
        if run is not None:
            # A run killed mid-call left tool calls unanswered: the API would refuse it.
            run.recorder.repair()
        if run is None:  # not started by this process: rebuild it from its transcript
            definition = self._definition(state.agent_type)
            messages, _ = repair(load_messages(sidechain_path(self.runtime, agent_id)))
            config = self.builder.config(
                agent_id, definition, description=state.description, cwd=self.cwd, is_async=True
            )
            if self.budgets is not None:
                config = dataclasses.replace(config, meter=self.budgets.reopen(agent_id, ""))
            # Its figures go on from where they were: this process's ledger starts at zero.
            run = AgentRun(
                self.runtime, agent_id, config, messages=messages, earlier=recorded(state)
            )
            self.runs[agent_id] = run
        elif self.budgets is not None:
            self.budgets.reopen(agent_id, state.owner)
        self.runtime.reopen_owner(agent_id)
        # Back to running under the same id (the runtime merges what must survive).
        self.runtime.register(resumed(state))
        self.runtime.attach_handle(agent_id, run)
        emit(
            "agent_tool_selected",
            session_id=self.runtime.session_id,
            agent_id=agent_id,
            parent_id=state.owner,
            agent_type=state.agent_type,
            model=run.engine.config.model_name or "",
            source="resume",
            is_fork=False,
            is_async=True,
        )
        driver = run.resume()
        if self.on_resumed is not None:
            self.on_resumed(run, driver)


def _checked(message: str | dict[str, Any], summary: str | None) -> _Letter:
    """``message`` ready to post: text as it is, a structured one validated and encoded.

    Raises:
        ToolError: A structured message that is not valid (naming the field).
    """
    if isinstance(message, str):
        return _Letter(message, summary or "")
    from taskloom.agents import structured_messages  # loaded at the first structured message

    checked = structured_messages.validate(message)
    kind = checked["type"]
    request_id = checked.get("request_id") if kind == "shutdown_request" else None
    return _Letter(structured_messages.encode(checked), summary or "", kind, request_id)


def _known_elsewhere(agent_type: str) -> AgentDefinition | None:
    """A built-in type this session's catalog leaves out, which an agent may still have.

    A ``worker`` outside coordinator mode, ``general-purpose`` in it.
    """
    from taskloom.agents.builtins import builtin
    from taskloom.agents.coordinator import WORKER

    if agent_type == WORKER.agent_type:
        return WORKER
    try:
        return builtin(agent_type)
    except KeyError:
        return None
