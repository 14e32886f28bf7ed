"""The session's team, as the lead's and the teammates' tools see it.

One ``TeamService`` per session with teams on; :class:`taskloom.Harness` builds it. It joins
the :class:`~taskloom.teams.roster.Roster` (the team's durable state), the executor (where
teammates run) and the mailbox:

- ``Agent`` with a ``name``, called by the lead, spawns a teammate into the lead's team (made
  on first use: ``team_name``, else ``session-<8 characters of the session id>``; a lead has
  one team, so a ``team_name`` naming another joins it all the same), built from its agent
  type, in its own worktree if isolated (:mod:`taskloom.teams.placement`);
- ``SendMessage`` between members goes here: text is wrapped as a ``<teammate-message>`` from
  its sender and posted to the recipient's address (the session id for the lead, ``name@team``
  for a teammate); ``*`` reaches every other member; ``shutdown_request`` /
  ``shutdown_response`` and ``plan_approval_response`` are the team's protocol. Text is a
  ``message`` row whatever it says; only the protocol made here (from a structured message
  the tool validated, or by the team itself) is a ``protocol`` row, which code acts on;
- the task list tools find their board here (which team, which member); a task given to a
  name nobody runs under yet waits in the mailbox for the teammate who joins under it;
- at the end of the session the teammates are stopped and the team is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._aio import finish_despite_cancel
from taskloom.errors import TaskloomError, ToolError
from taskloom.tasks.narrow import as_teammate
from taskloom.teams import comeback, protocol
from taskloom.teams.executor import ConfigMaker, Executors, TeammateSpec, post_message
from taskloom.teams.model import LEAD_NAME, Member, TeamError
from taskloom.teams.placement import Placements
from taskloom.teams.roster import check_name
from taskloom.teams.task_tools import Board

if TYPE_CHECKING:
    from taskloom.tasks.mailbox import Mailbox
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.teams.placement import Placement, Placer
    from taskloom.teams.roster import Roster
    from taskloom.tools.base import ToolContext

log = logging.getLogger(__name__)


class TeamService:
    """The lead session's team (see the module docstring)."""

    def __init__(
        self,
        runtime: TaskRuntime,
        roster: Roster,
        executor: Executors,
        make_config: ConfigMaker,
        lead_mode: Callable[[], str] = lambda: "default",
        *,
        mailbox: Mailbox | None = None,
        leads: bool = True,
        placer: Placer | None = None,
    ) -> None:
        """Serve the team the session of ``runtime`` leads (or, ``leads`` False, is a member of).

        Args:
            runtime: This process's runtime (the tasks of the teammates it runs).
            roster: The teams of the lead's session, in the store.
            executor: Where teammates run.
            make_config: Builds a teammate's engine configuration.
            lead_mode: The lead's permission mode now (a teammate whose plan is approved
                goes on under it).
            mailbox: The team's mailbox, the lead's session's (default: the runtime's own).
            leads: This process runs the lead. False: it runs one teammate, in a pane of its
                own; its end does not end the team.
            placer: Sets up where a new teammate works (its worktree, its MCP servers);
                None: in the lead's directory, with nothing of its own.
        """
        self.mailbox = mailbox if mailbox is not None else runtime.mailbox
        #: The lead's mailbox address: its session id.
        self.lead = self.mailbox.session_id
        self.leads = leads
        self.runtime = runtime
        self.roster = roster
        self.executor = executor
        self.make_config = make_config
        self.lead_mode = lead_mode
        #: Its teammates' environments (worktrees, MCP servers), until they end.
        self.places = Placements(placer)
        self._plans: dict[str, str] = {}  # plan request id -> the teammate that sent it

    # -- who is calling -----------------------------------------------------------------------

    def is_lead(self, ctx: ToolContext) -> bool:
        """Whether the caller is the session's main thread (the lead, or the lead to be)."""
        return ctx.owner == self.lead

    def member_of(self, ctx: ToolContext) -> Member | None:
        """The caller as a member of the session's team (None: not in it)."""
        team = self.roster.team()
        if team is None:
            return None
        if self.is_lead(ctx):
            return self.roster.resolve(protocol.agent_id(LEAD_NAME, team.name))
        mate = as_teammate(self.runtime.get(ctx.owner))
        if mate is not None and mate.team_name == team.name:
            return self.roster.resolve(mate.agent_id)
        return None

    def board(self, ctx: ToolContext) -> Board | None:
        """The caller's view of its team's task list (for the task list tools).

        The lead's first use makes its team (as a first teammate would): a task list may be
        written before anyone is spawned to work on it.
        """
        if self.is_lead(ctx) and self.roster.team() is None:
            try:
                self.roster.create(None, "", cwd=str(ctx.cwd))
            except TeamError:
                return None
        me = self.member_of(ctx)
        if me is None:
            return None
        return Board(me.team, me.name, self.roster.tables, self._assign, self.runtime.clock)

    # -- spawning -----------------------------------------------------------------------------

    async def spawn(
        self,
        *,
        name: str,
        prompt: str,
        team_name: str | None,
        model: str | None,
        mode: str | None,
        agent_type: str,
        cwd: str,
        isolation: str | None = None,
    ) -> str:
        """Spawn teammate ``name`` into the lead's team (made now if there is none).

        A lead has one team: a ``team_name`` naming another joins it to the lead's all the
        same (models told to "create a team" name one after a task list made the session's),
        and the result says which team it joined. It is built from ``agent_type`` as a
        subagent of that type is, in its own worktree if ``isolation`` (or its type) says so.

        Returns:
            The spawn result the lead is shown.

        Raises:
            ToolError: A bad or taken name; an unknown agent type; an isolation that failed.
        """
        try:
            check_name("Teammate name", name)
            team = self.roster.team()
            if team is None:
                team = self.roster.create(team_name or None, "", cwd=cwd)
        except TeamError as exc:
            raise ToolError(str(exc)) from None
        placement = await self.places.make(
            agent_type,
            cwd=Path(cwd),
            isolation=isolation,
            # A teammate in a process of its own starts its servers there.
            servers=self.executor.spawn_backend == protocol.IN_PROCESS,
        )
        joined = False
        try:
            worktree = placement.worktree
            config = self.make_config(
                name, team.name, model, mode, agent_type=agent_type, where=placement.cwd,
                confined=worktree is not None, extra_tools=placement.tools(),
            )  # fmt: skip
            member = self.roster.join(
                team.name, name, agent_type=agent_type, model=model, prompt=prompt,
                plan_mode_required=mode == "plan", cwd=str(placement.cwd), mode=mode,
                backend_type=self.executor.spawn_backend,
                worktree_path=str(worktree) if worktree is not None else None,
            )  # fmt: skip
            joined = True
            self.places.keep(member.agent_id, placement)
            spec = TeammateSpec(
                name=name,
                team=team.name,
                color=member.color,
                prompt=prompt,
                config=config,
                model=model,
                plan_mode_required=mode == "plan",
                on_end=functools.partial(self._ended, team.name, name),
                mode=mode,
                agent_type=agent_type,
            )
            agent_id = await self.executor.spawn(spec)
        except TaskloomError as exc:  # e.g. its pane could not be made: the lead is told why
            await self._unplace(team.name, name, placement, joined=joined)
            if isinstance(exc, ToolError | TeamError):
                raise ToolError(str(exc)) from None
            raise ToolError(f"Could not spawn {name}: {exc}") from None
        except BaseException:
            await finish_despite_cancel(self._unplace(team.name, name, placement, joined=joined))
            raise
        text = (
            f"Spawned successfully.\nagent_id: {agent_id}\nname: {name}\n"
            "The agent is now running and will receive instructions via mailbox."
        )
        if team_name and team_name != team.name:
            text += (
                f"\nteam_name: {team.name} ({name} joined your team: a lead has one team, so "
                f'"{team_name}" was not made. Address {name} by name.)'
            )
        if worktree is not None:
            text += f"\nworktree: {worktree}"
        return text

    async def _unplace(self, team: str, name: str, placement: Placement, *, joined: bool) -> None:
        """It did not start: its member inactive (if it joined), its environment undone."""
        if joined:
            self._inactive(team, name)
        await self.places.undo(protocol.agent_id(name, team), placement)

    def _ended(self, team: str, name: str) -> None:
        """A teammate spawned here ended: inactive, and its environment undone."""
        self._inactive(team, name)
        self.places.ended(protocol.agent_id(name, team))

    def hold(self, placement: Placement) -> None:
        """Keep a teammate's environment until this process's team closes (its own process)."""
        self.places.keep(f"held-{secrets.token_hex(4)}", placement)

    # -- messages -----------------------------------------------------------------------------

    def handles(self, to: str, ctx: ToolContext) -> bool:
        """Whether a message to ``to`` from the caller is the team's to deliver."""
        if self.roster.team() is None:
            return False
        if self.member_of(ctx) is not None and not self.is_lead(ctx):
            return True  # everything a teammate sends goes through its team
        return to == "*" or to == LEAD_NAME or self.roster.resolve(to) is not None

    async def send(
        self,
        to: str,
        message: str | dict[str, Any],
        ctx: ToolContext,
        summary: str | None,
        *,
        notify_when_idle: bool = False,
    ) -> tuple[str, dict[str, Any]]:
        """Deliver a member's message; returns the tool's text and data.

        ``notify_when_idle`` (the lead's): each recipient's next idle notice wakes the lead
        instead of waiting for its next turn.

        Raises:
            ToolError: Not a member, no such member, a protocol message out of place.
        """
        me = self.member_of(ctx)
        if me is None:
            raise ToolError("SendMessage: you are not a member of this session's team.")
        if notify_when_idle and me.name != LEAD_NAME:
            raise ToolError("SendMessage: only the team lead may ask for notify_when_idle.")
        if isinstance(message, dict):
            answer = await self._protocol(me, to, message)
            if notify_when_idle:
                self._notify_when_idle(self._targets(me, to))
            return answer
        targets = self._targets(me, to)
        ids = [self._post(me, target, message, summary) for target in targets]
        if notify_when_idle:
            self._notify_when_idle(targets)
        if to == "*":
            names = [t.name for t in targets]
            data = {"success": True, "recipients": names, "msg_ids": ids}
            data["message"] = f"Message broadcast to {len(names)} teammate(s): {', '.join(names)}"
        else:
            data = {
                "success": True,
                "message": f"Message sent to {targets[0].name}'s inbox",
                "msg_id": ids[0],
                "routing": {
                    "sender": me.name,
                    "senderColor": me.color,
                    "target": f"@{targets[0].name}",
                    "targetColor": targets[0].color,
                    "summary": summary,
                    "content": message,
                },
            }
        return json.dumps(data), data

    def _notify_when_idle(self, targets: list[Member]) -> None:
        """The next idle notice of each of ``targets`` wakes the lead (see Mailbox.promote)."""
        for target in targets:
            if target.name != LEAD_NAME:
                self.mailbox.promote(self.lead, target.agent_id)

    def _targets(self, me: Member, to: str) -> list[Member]:
        team = self.roster.team()
        assert team is not None
        if to == "*":
            found = [m for m in team.members if m.name != me.name and m.is_active]
            if not found:
                raise ToolError("No active teammate to broadcast to.")
            return found
        target = self.roster.resolve(to)
        if target is None or target.team != team.name:
            names = [m.name for m in team.members if m.name != me.name]
            raise ToolError(
                f"No member named {to!r} in team {team.name!r}. Members: "
                f'{", ".join(names) or "(none)"}; or "*" for the whole team.'
            )
        if target.name == me.name:
            raise ToolError("SendMessage: to: that is you; address another member.")
        return [target]

    def _post(self, me: Member, target: Member, body: str, summary: str | None) -> str:
        """Post ``me``'s text to ``target``: a ``message`` row, whatever the text says."""
        wrapped = protocol.wrap(body, sender=me.name, color=me.color, summary=summary)
        return self._deliver(target, wrapped, sender=me.agent_id, summary=summary)

    def _post_protocol(self, me: Member, target: Member, payload: str) -> str:
        """Post a protocol message built here (``payload``) from ``me`` to ``target``."""
        wrapped = protocol.wrap(payload, sender=me.name, color=me.color)
        return self._deliver(target, wrapped, sender=me.agent_id, summary=None, payload=payload)

    def _deliver(
        self, target: Member, body: str, *, sender: str, summary: str | None, payload: str = ""
    ) -> str:
        """Post to a member: the lead's row is the session's; a teammate is woken by its."""
        if target.name != LEAD_NAME:
            if not target.is_active:
                # Ended (shut down, killed, crashed): a row for it would wait forever, and
                # reach a namesake spawned later.
                raise ToolError(f"SendMessage: {target.name} is not running (it has ended).")
            try:
                return self.executor.deliver(
                    target.agent_id, body, sender=sender, summary=summary, payload=payload
                )
            except TaskloomError as exc:
                raise ToolError(f"SendMessage: {target.name} is not running ({exc}).") from None
        return post_message(
            self.mailbox, self.lead, body, sender=sender, summary=summary, payload=payload
        )

    async def _protocol(
        self, me: Member, to: str, message: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        kind = message.get("type")
        if kind == "shutdown_request":
            if me.name != LEAD_NAME:
                raise ToolError("SendMessage: only the team lead may ask a teammate to shut down.")
            (target,) = self._targets(me, to) if to != "*" else (None,)
            if target is None:
                raise ToolError("SendMessage: a shutdown_request goes to one teammate, by name.")
            try:
                request = await self.executor.terminate(target.agent_id, message.get("reason"))
            except TaskloomError as exc:
                raise ToolError(f"SendMessage: {target.name} is not running ({exc}).") from None
            data = {
                "success": True,
                "message": f"Shutdown request sent to {target.name}. Request ID: {request}",
                "request_id": request,
                "target": target.name,
            }
            return json.dumps(data), data
        if kind == "shutdown_response":
            return self._shutdown_response(me, message)
        if kind == "plan_approval_request":
            return self._plan_request(me, to, str(message.get("plan", "")))
        if kind == "plan_approval_response":
            if me.name != LEAD_NAME:
                raise ToolError("SendMessage: only the team lead answers a plan approval request.")
            if to == "*":
                raise ToolError("SendMessage: a plan_approval_response goes to one teammate.")
            (target,) = self._targets(me, to)
            request = str(message.get("request_id", ""))
            panes = self.executor.panes
            plans = {**(panes.plans if panes is not None else {}), **self._plans}
            if plans.get(request) != target.agent_id:
                raise ToolError(
                    f"SendMessage: message.request_id: {request!r} is not a plan {target.name} "
                    "sent for approval."
                )
            approve = bool(message.get("approve"))
            if approve:
                # Approved: it leaves plan mode for the lead's mode, and may act now (and its
                # member says so, so that a resume brings it back in that mode).
                if not self.executor.is_active(target.agent_id):
                    raise ToolError(f"SendMessage: {target.name} is not running.")
                mode = self.lead_mode()
                run = self.executor.local_run(target.agent_id)
                if run is not None and run.engine.config.permissions is not None:
                    run.engine.config.permissions.switch_mode(mode)
                self.roster.tables.set_member(target.team, target.name, mode=mode)
                self._plans.pop(request, None)
                if panes is not None:
                    panes.plans.pop(request, None)
            body = protocol.plan_approval_response(
                request, approve=approve, feedback=message.get("feedback")
            )
            msg_id = self._post_protocol(me, target, body)
            verdict = "approved: it may go ahead" if approve else "sent back with your feedback"
            data = {
                "success": True,
                "message": f"Plan of {target.name} {verdict}",
                "msg_id": msg_id,
            }
            return json.dumps(data), data
        raise ToolError(
            f"SendMessage: message.type: {kind!r} is not a team message; expected "
            "shutdown_request, shutdown_response or plan_approval_response"
        )

    def _plan_request(self, me: Member, to: str, plan: str) -> tuple[str, dict[str, Any]]:
        """A plan-mode teammate's plan goes to the lead, whose answer lets it act or not."""
        if me.name == LEAD_NAME or to not in (LEAD_NAME, protocol.agent_id(LEAD_NAME, me.team)):
            raise ToolError(
                "SendMessage: a plan_approval_request goes from a teammate to team-lead."
            )
        permissions = self.executor.run(me.agent_id).engine.config.permissions
        if permissions is None or str(permissions.mode) != "plan":
            raise ToolError("SendMessage: only a teammate in plan mode asks for plan approval.")
        now = self.runtime.clock.time()
        request = protocol.request_id("plan", me.name, now)
        self._plans[request] = me.agent_id
        lead = self.roster.resolve(protocol.agent_id(LEAD_NAME, me.team))
        assert lead is not None
        body = protocol.plan_approval_request(request, name=me.name, plan=plan, at=now)
        self._post_protocol(me, lead, body)
        data = {
            "success": True,
            "message": f"Plan sent to team-lead for approval. Request ID: {request}",
            "request_id": request,
        }
        return json.dumps(data), data

    def _shutdown_response(self, me: Member, message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if me.name == LEAD_NAME:
            raise ToolError("SendMessage: the lead does not answer shutdown requests.")
        request = message.get("request_id")
        if not isinstance(request, str) or not request:
            raise ToolError("SendMessage: message.request_id: required for shutdown_response")
        run = self.executor.run(me.agent_id)
        mate = as_teammate(self.runtime.get(run.task_id))
        asked = mate is not None and mate.shutdown_requested
        if not asked or not request.endswith(f"@{me.name}"):
            raise ToolError(
                f"SendMessage: message.request_id: {request!r} is not a shutdown request sent "
                "to you; answer the shutdown_request you received, with its requestId."
            )
        if message.get("approve") is True:
            # Its own call approves: it ends once this call's result is recorded.
            run.approve_shutdown(request)
            data = {"success": True, "message": "Shutdown approved. You are stopping now."}
            return json.dumps(data), data
        reason = str(message.get("reason") or "")
        body = protocol.shutdown_rejected(
            request, name=me.name, reason=reason, at=self.runtime.clock.time()
        )
        lead = self.roster.resolve(protocol.agent_id(LEAD_NAME, me.team))
        assert lead is not None
        self._post_protocol(me, lead, body)
        data = {"success": True, "message": "Shutdown rejected; the lead is told why."}
        return json.dumps(data), data

    def _assign(self, team: str, owner: str, payload: dict[str, Any]) -> None:
        """A task was given to ``owner``: a ``task_assignment`` in its mailbox.

        An owner not running (not joined yet, or ended) gets it all the same: the row waits in
        the mailbox for the member who joins under that name, whose first request holds it.
        """
        address = protocol.agent_id(owner, team)
        target = self.roster.resolve(address)
        sender = str(payload.get("assignedBy") or LEAD_NAME)
        me = self.roster.resolve(protocol.agent_id(sender, team))
        data = json.dumps(payload)
        body = protocol.wrap(data, sender=sender, color=me.color if me else None)
        sent_by = protocol.agent_id(sender, team)
        if target is None or not (target.is_lead or self.executor.is_active(address)):
            post_message(self.mailbox, address, body, sender=sent_by, summary=None, payload=data)
            return
        self._deliver(target, body, sender=sent_by, summary=None, payload=data)

    # -- the end ------------------------------------------------------------------------------

    async def open(self) -> None:
        """At start, for a lead: sweep the panes crashed sessions left, resume its teammates."""
        if not self.leads:
            return
        panes = self.executor.panes
        if panes is not None:
            await panes.sweep()
        await self.resume_members()

    async def resume_members(self) -> list[str]:
        """At start: bring back the teammates an earlier process of this session ran.

        See :func:`taskloom.teams.comeback.resume_members`. Returns the names brought back.
        """
        return await comeback.resume_members(
            self.runtime, self.roster, self.executor, self.make_config, self._inactive
        )

    def _inactive(self, team: str, name: str) -> None:
        """A teammate ended: its member is inactive (unless the team is gone already)."""
        with contextlib.suppress(TeamError):
            self.roster.set_active(team, name, False)

    async def close(self) -> None:
        """The session ends: stop every teammate (verified), then remove the team.

        A teammate's own process stops only the teammate it runs.
        """
        if not self.leads:
            try:
                for member in self.executor.local.members():
                    if self.executor.is_active(member):
                        await self.executor.kill(member)
                await self.executor.close()
            finally:
                await self.places.close()
            return
        try:
            await self._close_team()
        finally:
            try:
                await self.executor.close()
            finally:
                # Once they have stopped: their worktrees are finished as a subagent's are.
                await self.places.close()

    async def _close_team(self) -> None:
        team = self.roster.team()
        if team is None:
            return
        mates = [m for m in team.members if m.name != LEAD_NAME]
        # All at once: a teammate's process may take its kill bound to stop.
        await asyncio.gather(
            *(self.executor.kill(m.agent_id) for m in mates if self.executor.is_active(m.agent_id))
        )
        for member in mates:
            if member.is_active:
                self.roster.set_active(team.name, member.name, False)
        self.roster.delete(team.name)
