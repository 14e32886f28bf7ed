"""One teammate in a process of its own (``taskloom teammate``): its side of the team.

The process runs a :class:`taskloom.Harness` of its own (its own session, runtime, tools, MCP
servers and hooks, from the same settings as its lead) and, in it, the teammate's
:class:`~taskloom.teams.teammate.TeammateRun` under the task id its lead gave it. What makes it
a member of the lead's team:

- the team's mailbox is the lead's session's, in the store: this process serves only the
  teammate's address (``<name>@<team>``) and is woken on its wake-up socket when a row for it
  is committed; rows it posts for another address wake that address's process (the lead's,
  when no process listens for the address: the lead serves the rest of the team);
- a call that needs approval is asked of the lead (:class:`LeadPrompter`), when the lead has
  someone to ask;
- its lead is watched with a pidfd: when the lead's process ends, the teammate stops (its
  run is killed, and what it started with it) within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TextIO

from taskloom.engine import AssistantTurn, UserTurn
from taskloom.permissions import PromptAnswer, PromptError
from taskloom.process.watch import wait_exit
from taskloom.tasks.mailbox import Mailbox
from taskloom.tasks.output import output_path
from taskloom.tasks.types import TaskStatus, TaskType
from taskloom.tasks.wakeup import WakeupListener, ping, wakeup_path
from taskloom.teams import protocol
from taskloom.teams.protocol import TMUX
from taskloom.teams.teammate import sidechain_path

if TYPE_CHECKING:
    from pathlib import Path

    from taskloom.hooks import HookResult
    from taskloom.models.base import ModelRequest, StreamEvent
    from taskloom.permissions import Decision, PermissionRequest
    from taskloom.store import Store
    from taskloom.teams.executor import TeammateSpec
    from taskloom.teams.join import JoinSpec
    from taskloom.teams.service import TeamService
    from taskloom.teams.teammate import TeammateRun

log = logging.getLogger(__name__)

#: One wait for the lead's answer lasts at most this long before looking again (a bound, not a
#: poll: the answer's row wakes it at once). The lead's end stops the teammate anyway.
_ANSWER_WAIT_S = 3600.0


def team_mailbox(store: Store, join: JoinSpec, home: Path) -> Mailbox:
    """The team's mailbox as the teammate's process holds it (see the module docstring)."""
    me = join.agent_id

    def wake(recipient: str) -> None:
        if not ping(wakeup_path(home, join.session, recipient)):
            ping(wakeup_path(home, join.session, join.session))  # the lead serves the rest

    return Mailbox(store, join.session, serves=lambda r: r == me, elsewhere=wake)


class LeadPrompter:
    """Asks the lead whether a call may run: ``permission_request`` out, the answer back.

    Both are rows of kind ``control`` in the team's mailbox (only code reads them); several
    calls may wait at once (each answer names its request).
    """

    def __init__(self, mailbox: Mailbox, join: JoinSpec) -> None:
        """Ask the lead of ``join``'s team through ``mailbox``."""
        self.mailbox = mailbox
        self.join = join
        self._waiting: dict[str, asyncio.Future[PromptAnswer]] = {}
        self._count = itertools.count(1)

    async def ask(
        self,
        request: PermissionRequest,
        decision: Decision,
        *,
        tool_use_id: str,
        agent_id: str | None,
    ) -> PromptAnswer:
        """Post the request to the lead and wait for its answer.

        Raises:
            PromptError: The request could not be posted.
        """
        join = self.join
        rid = f"{protocol.request_id('permission', join.name)}-{next(self._count)}"
        body = protocol.permission_request(
            rid,
            name=join.name,
            tool_name=request.tool_name,
            tool_input=request.input,
            tool_use_id=tool_use_id,
            reason=decision.reason,
            kind=str(request.kind),
            target=request.target,
            cwd=str(request.cwd),
        )
        answer: asyncio.Future[PromptAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = answer
        try:
            try:
                self.mailbox.post(
                    recipient=join.session,
                    sender=join.agent_id,
                    kind="control",
                    topic="permission_request",
                    body=body,
                    priority="next",
                    commit=True,
                    payload=body,
                )
            except Exception as exc:
                raise PromptError(f"the lead could not be asked ({exc})") from None
            while not answer.done():
                await self.mailbox.wait(_ANSWER_WAIT_S, join.agent_id, "control")
                self._collect()
            return answer.result()
        finally:
            self._waiting.pop(rid, None)

    def _collect(self) -> None:
        letters = self.mailbox.take(self.join.agent_id, "control")
        for letter in letters:
            data = letter.data or {}
            if letter.topic != "permission_response" or letter.sender != self.join.session:
                continue  # only its lead answers
            waiting = self._waiting.get(str(data.get("requestId") or ""))
            if waiting is not None and not waiting.done():
                updated = data.get("updatedInput")
                waiting.set_result(
                    PromptAnswer(
                        allow=data.get("approve") is True,
                        message=str(data.get("message") or ""),
                        updated_input=updated if isinstance(updated, dict) else None,
                        interrupt=data.get("interrupt") is True,
                    )
                )
        if letters:
            self.mailbox.ack(letter.id for letter in letters)  # a stray answer is not kept


class PaneView:
    """What the teammate's pane shows: its conversation as it goes (an engine observer)."""

    partial_messages = False

    def __init__(self, join: JoinSpec, out: TextIO | None = None) -> None:
        """Write ``join``'s teammate's conversation to ``out`` (default: stdout, the pane)."""
        self.join = join
        self.out = out or sys.stdout

    def say(self, text: str) -> None:
        """One line or block in the pane, at once."""
        with contextlib.suppress(OSError, ValueError):  # the pane is gone: nobody reads it
            self.out.write(text.rstrip("\n") + "\n")
            self.out.flush()

    def model_event(self, agent_id: str | None, event: ModelRequest | StreamEvent) -> None:
        """Not shown: the whole messages are."""

    def agent_message(self, agent_id: str, event: AssistantTurn | UserTurn) -> None:
        """Show what it said and did, and what it was told."""
        message = event.message
        if isinstance(event, AssistantTurn):
            text = message.text().strip()
            if text:
                self.say(f"{self.join.name}: {text}")
            for call in message.tool_uses():
                self.say(f"  → {call.name} {_short(call.input)}")
        elif event.origin in ("prompt", "messages"):
            text = message.text().strip()
            if text:
                self.say(f"← {_clip(text, 400)}")

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        """Not shown."""

    def hook_finished(self, hook_id: str, event: str, name: str, result: HookResult | None) -> None:
        """Not shown."""


class TeammateProcess:
    """Runs the one teammate of this process until it ends (see the module docstring)."""

    def __init__(
        self, service: TeamService, join: JoinSpec, spec: Callable[[], Awaitable[TeammateSpec]]
    ) -> None:
        """Run the teammate ``join`` names, with ``await spec()``, in ``service``'s process."""
        self.service = service
        self.join = join
        self.spec = spec
        self.run: TeammateRun | None = None
        #: Asks the lead about calls that need approval (None: the lead has no one to ask,
        #: so they are decided here, headless).
        self.prompter = LeadPrompter(service.mailbox, join) if join.lead_prompts else None

    async def serve(self) -> int:
        """Run it until it shuts down, is killed, or its lead ends; the exit code.

        0 once it shut down, was killed or its lead ended (a SIGTERM that stops this
        process makes its exit code 143, as for any command); 1 if its run failed.
        """
        join, runtime = self.join, self.service.runtime
        mailbox = self.service.mailbox
        path = wakeup_path(runtime.home, join.session, join.agent_id)

        def woken() -> None:
            mailbox.replay()  # what is new for it; its waits are woken by the rows

        async with WakeupListener(path, woken):
            mailbox.replay()  # what was posted before it listened
            # A task id of its own here: the lead's task row is the lead's to write. Its
            # transcript is where the lead's session keeps it (a resume reads it there).
            local_id = runtime.new_id(TaskType.IN_PROCESS_TEAMMATE)
            # Its own session keeps no transcript; its sidechain is kept as its lead's are.
            runtime.keep_transcripts = join.keep_transcript
            transcript = sidechain_path(runtime, join.task_id, join.session)
            messages = None
            if join.resume:  # its lead was resumed: it goes on from its conversation
                from taskloom.pairing import repair
                from taskloom.transcript import load_messages

                messages, _ = repair(load_messages(transcript))
            run = self.run = self.service.executor.local.adopt(
                await self.spec(),
                local_id,
                messages,
                backend=TMUX,
                pane_id=join.pane_id,
                transcript=str(transcript),
                # Its lead's task's output file: what TaskOutput and the listings read.
                output_file=str(output_path(join.session, join.task_id, runtime.home)),
            )
            run.on_plan_approved = self._plan_approved
            lead = asyncio.get_running_loop().create_task(self._watch_lead(run))
            try:
                await run.wait_ended()
            finally:
                lead.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lead
                if not _ended(run):
                    await run.kill()  # this process is stopping (a signal): so does it
        state = runtime.get(run.task_id)
        return 1 if state is not None and state.status == TaskStatus.FAILED else 0

    def _plan_approved(self) -> None:
        """Its lead approved its plan: it goes on in the mode the lead recorded for it."""
        run, member = self.run, self.service.roster.resolve(self.join.agent_id)
        if run is None or member is None:
            return
        permissions = run.engine.config.permissions
        if permissions is not None and member.mode and member.mode != "plan":
            permissions.switch_mode(member.mode)

    async def _watch_lead(self, run: TeammateRun) -> None:
        if self.join.lead_pid <= 0:
            return
        await wait_exit(self.join.lead_pid, self.join.lead_start or None)
        log.warning("%s: its lead's process ended; stopping", self.join.agent_id)
        # Nobody will read this pane or close it (a later session's sweep might, or not):
        # it closes when this process ends.
        from taskloom.teams.panes import PaneError, locate

        try:
            await locate().close_on_exit(self.join.pane_id)
        except PaneError as exc:
            log.warning("%s: its pane stays open: %s", self.join.agent_id, exc)
        await run.kill()


def _ended(run: TeammateRun) -> bool:  # its task in this process's runtime
    state = run.runtime.get(run.task_id)
    return state is None or state.terminal


def _short(data: Any) -> str:
    import json

    try:
        return _clip(json.dumps(data, ensure_ascii=False), 160)
    except (TypeError, ValueError):
        return ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["LeadPrompter", "PaneView", "TeammateProcess", "team_mailbox"]
