"""One in-process teammate: its engine, sidechain transcript, turns, idleness and end.

A teammate lives longer than a turn. Its loop, driven by an asyncio task of its own (so the
lead's turn ending or being interrupted does not touch it), runs a turn on its prompt, then
becomes idle: its task state says so and the lead receives an idle notification. A message for
its address (``<name>@<team>``) wakes it at once — the wait is on the mailbox's event, not a
poll — and the messages become its next turn's prompt; while it works, they reach it at its
tool boundaries through its engine's inbox. A turn that fails leaves it alive and idle.

It ends by a shutdown (approved by itself: its task completes) or a kill. Either way its loop
is cancelled, with a bounded wait, and every process it started is killed: its shells and
agents are owned by its task id, which its end closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._aio import finish_despite_cancel
from taskloom.agents.bookkeeping import RunBooks, sidechain_path
from taskloom.conversation.next_input import NextInput, Pending, Taken
from taskloom.conversation.recorder import Recorder, StopHook
from taskloom.engine import AssistantTurn, Engine, EngineConfig, EngineEvent, UserTurn
from taskloom.errors import reason
from taskloom.messages import Message
from taskloom.tasks.mailbox import MESSAGES
from taskloom.tasks.teammate import ended, idle, progressed, working
from taskloom.tasks.types import TaskStatus
from taskloom.tasks.usage import report_fields
from taskloom.teams.protocol import (
    IN_PROCESS,
    LEAD_NAME,
    idle_notification,
    message_type,
    peer_messages,
    shutdown_approved,
    wrap,
)
from taskloom.teams.protocol import agent_id as member_id

if TYPE_CHECKING:
    from taskloom.tasks.mailbox import Letter, Mailbox
    from taskloom.tasks.runtime import TaskRuntime

log = logging.getLogger(__name__)

#: Most times in a row TeammateIdle hooks may keep it working instead of going idle.
MAX_IDLE_CONTINUATIONS = 5
#: Longest wait for its loop to finish once cancelled (a hung model does not hold it up).
KILL_WAIT_S = 5.0
#: One wait for mail lasts at most this long before the loop looks again. A bound, not a
#: poll: a row posted for it wakes it at once.
MAIL_WAIT_S = 3600.0
#: How many of its latest messages are kept in memory, for display.
RECENT_LIMIT = 50
#: The setting that says how idle notices and shutdown approvals reach the lead: ``held``
#: (the default: with its next turn) or ``each`` (each one starts a lead turn of its own).
IDLE_NOTICES_SETTING = "teammateIdleNotices"


class TeammateRun:
    """An in-process teammate and the loop that drives it (see the module docstring)."""

    def __init__(
        self,
        runtime: TaskRuntime,
        task_id: str,
        *,
        agent_id: str,
        name: str,
        team: str,
        color: str | None,
        config: EngineConfig,
        prompt: str,
        lead: str,
        on_end: Callable[[], None] | None = None,
        messages: list[Message] | None = None,
        mailbox: Mailbox | None = None,
        backend: str = IN_PROCESS,
        pane_id: str = IN_PROCESS,
        transcript: str | None = None,
        output_file: str | None = None,
    ) -> None:
        """Prepare the teammate of task ``task_id`` (registered by the caller).

        Args:
            runtime: The session's runtime.
            task_id: Its task id.
            agent_id: Its agent id and mailbox address, ``<name>@<team>``.
            name: Its name in the team.
            team: Its team's name.
            color: The colour its messages are shown in, if any.
            config: How its engine runs; ``inbox`` is set to this run's, and ``owner`` to its
                task id (what it starts is then closed by its end).
            prompt: Its task, from the lead.
            lead: The lead's mailbox address (the lead's session id).
            on_end: Called once it has ended, however (e.g. to mark its member inactive).
            messages: Its conversation so far, when it goes on from an earlier process (it
                then waits for mail at once instead of starting on ``prompt``).
            mailbox: The team's mailbox, where its messages arrive and its words to others
                go (default: the runtime's own; a teammate in a pane of its own has its
                lead's, shared through the store).
            backend: What it runs in, as its ``shutdown_approved`` says (``backendType``).
            pane_id: Its pane, as its ``shutdown_approved`` says (``paneId``).
            transcript: Where its transcript goes (default: by its task id, in its lead's
                session: see :func:`sidechain_path`).
            output_file: Where its output goes (default: its task's, in this runtime's
                session; a teammate in a pane writes its lead's task's, which TaskOutput reads).
        """
        self.on_end = on_end
        self.runtime = runtime
        self.task_id = task_id
        self.agent_id = agent_id
        self.name = name
        self.team = team
        self.color = color
        self.prompt = prompt
        self.lead = lead
        self.mailbox = mailbox if mailbox is not None else runtime.mailbox
        self.backend = backend
        self.pane_id = pane_id
        config = dataclasses.replace(
            config,
            owner=task_id,
            agent_id=config.agent_id or task_id,
            inbox=self.take_inbox,  # messages reach it at its tool boundaries
        )
        self.engine = Engine(config, runtime, messages)
        self._resumed = messages is not None
        path = (
            Path(transcript)
            if transcript is not None
            else sidechain_path(runtime, task_id, self.mailbox.session_id)
        )
        #: Records its sidechain transcript (open while it runs) and runs SubagentStop hooks.
        self.recorder = Recorder(
            self.engine,
            path if runtime.keep_transcripts else None,  # --no-session-persistence: none
            stop=StopHook(
                "SubagentStop",
                None,
                {"agent_id": agent_id, "agent_transcript_path": str(path)},
            ),
            mailbox=self.mailbox,
        )
        #: Its transcript and output files, totals and progress.
        self.books = RunBooks(self.recorder, task_id, Path(output_file) if output_file else None)
        self.driver: asyncio.Task[None] | None = None
        self._recent: deque[Message] = deque(maxlen=RECENT_LIMIT)
        self._idle = False
        # The shutdown request being carried out: its end is then a completion, not a kill.
        self._ending: str | None = None
        self._approved: str | None = None  # a shutdown its own call approved (see above)
        self._kept_busy = 0  # TeammateIdle continuations in a row
        # How much of its conversation its last idle notice covered (its peer messages).
        self._noticed = len(self.engine.messages)
        # An end asked for from inside its own loop runs as this task (see _end_apart).
        self._ender: asyncio.Task[None] | None = None
        #: Called when a message approving its plan is taken (see :meth:`_hold`).
        self.on_plan_approved: Callable[[], None] | None = None
        #: What starts its next turn: its messages and the lead's protocol rows (taken as its
        #: prompt), then its own tasks' notifications (which the engine takes in the turn).
        self._inputs: NextInput[str | Message] = NextInput(
            Taken(self.mailbox, agent_id, MESSAGES, self._hold),
            Pending(runtime.mailbox, task_id, "notification"),
            idle_wait_s=MAIL_WAIT_S,
        )

    @property
    def is_idle(self) -> bool:
        """Whether its last turn is over and it waits for mail."""
        return self._idle

    @property
    def recent(self) -> list[Message]:
        """Its latest messages (at most :data:`RECENT_LIMIT`), oldest first."""
        return list(self._recent)

    # -- the task handle ----------------------------------------------------------------------

    async def kill(self) -> None:
        """Stop it (bounded, even if its model hangs), kill what it started; recorded."""
        if self._inside():
            self._end_apart(self.kill())
            return
        if self._approved is not None and self._ending == self._approved:
            # Shutting down already (approved): its own end is under way; wait for it.
            driver = self.driver
            if driver is not None and not driver.done():
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(driver), KILL_WAIT_S)
            if driver is not None and driver.done():
                return
        await self._stop()
        self.runtime.update(self.task_id, lambda s: ended(s, status=TaskStatus.KILLED))
        self._report_end()

    async def detach(self) -> None:
        """A teammate cannot outlive its session: detaching stops it."""
        await self.kill()

    async def wait_ended(self) -> None:
        """Wait until its loop, and an end it asked for from inside it, have finished."""
        while True:
            pending = [t for t in (self.driver, self._ender) if t is not None and not t.done()]
            if not pending:
                return
            await asyncio.wait(pending)  # its end, however it came; a cancel of ours goes up

    def approve_shutdown(self, request_id: str) -> None:
        """Its own tool call approved a shutdown: finish this turn, then end (completed).

        The turn stops after that call's result is recorded (no further model request), so
        its transcript ends with the approval answered; then the lead is told.
        """
        if self._approved is None and self._ending is None:
            self._approved = request_id
            self.engine.stop_reason = "shutdown approved"

    async def shutdown(self, approved_request_id: str) -> None:
        """It agreed to shut down: end it (completed), kill what it started, tell the lead.

        Called from inside its own loop (the tool call that approved), the end runs as a task
        of its own and this returns at once: the loop cannot wait for its own cancellation.
        """
        if self._ending is not None:
            return
        self._ending = approved_request_id
        if self._inside():
            self._end_apart(self._shut_down(approved_request_id))
            return
        await self._shut_down(approved_request_id)

    async def _shut_down(self, request_id: str) -> None:
        await self._stop()
        self.runtime.update(self.task_id, lambda s: ended(s))
        self._tell_lead(self._approval(request_id))
        self._report_end()

    def _inside(self) -> bool:
        return self.driver is not None and asyncio.current_task() is self.driver

    def _end_apart(self, end: Coroutine[Any, Any, None]) -> None:
        if self._ender is not None and not self._ender.done():
            end.close()  # an end is under way already
            return
        self._ender = asyncio.get_running_loop().create_task(end)

    async def _stop(self) -> None:
        """Cancel the loop (and its tool calls), wait for it (bounded), close its processes."""
        driver = self.driver
        if driver is not None and not driver.done():
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(driver), KILL_WAIT_S)
        # Its loop's own cleanup does this too, unless the bound ran out before it could.
        await self._close_processes()

    async def _close_processes(self) -> None:
        await self.runtime.close_owner(self.task_id, wait_limit=KILL_WAIT_S)
        # Verified: a task it started while the first pass ran is killed as well.
        if self.runtime.has_live_tasks(self.task_id):
            await self.runtime.kill_owned(self.task_id)

    # -- running ------------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        """Start its loop in a task of its own (nothing cancels it but its own end).

        Raises:
            RuntimeError: It was started already.
        """
        if self.driver is not None:
            raise RuntimeError(f"teammate {self.agent_id} was started already")
        self.driver = asyncio.get_running_loop().create_task(
            self._drive(), name=f"teammate {self.agent_id}"
        )
        return self.driver

    def take_inbox(self) -> list[str]:
        """Messages for it since its last look, taken from its mailbox (wrapped by senders).

        They are acknowledged once its transcript holds the message they go into (see
        :meth:`~taskloom.conversation.recorder.Recorder.hold`).
        """
        letters = self.mailbox.take(self.agent_id, MESSAGES)
        self._hold(letters)
        return [letter.body for letter in letters]

    def _hold(self, letters: list[Letter]) -> None:
        """Taken for its next message: acknowledged once its transcript holds them.

        The lead's protocol messages among them (rows of kind ``protocol``: text that looks
        like one is not) are acted on here. A shutdown request is noted on its task, whichever
        process the lead sent it through: its answer is checked against it. An approved plan
        is told to :attr:`on_plan_approved` (a teammate in a process of its own changes its
        mode so).
        """
        self.recorder.hold(letters)
        lead = member_id(LEAD_NAME, self.team)
        for letter in letters:
            data = letter.data if letter.kind == "protocol" else None
            if data is None or letter.sender != lead:
                continue
            if letter.topic == "shutdown_request":
                self.runtime.update(
                    self.task_id,
                    lambda s: s if s.terminal else s.replace(shutdown_requested=True),
                )
            elif (
                letter.topic == "plan_approval_response"
                and self.on_plan_approved is not None
                and data.get("approve") is True
            ):
                self.on_plan_approved()

    async def _drive(self) -> None:
        try:
            self.books.open()
            turn: str | Message
            if self._resumed:
                # Going on from an earlier process: calls it left unanswered get "interrupted"
                # results, and it waits for what was (or will be) sent to it.
                self.recorder.repair()
                self._idle = True
                self.runtime.update(self.task_id, lambda s: idle(s, self._totals()))
                turn = await self._next_input()
            else:
                turn = wrap(self.prompt, sender=LEAD_NAME)
            while True:
                await self._turn(turn)
                if self._approved is not None:
                    # Its own SendMessage approved a shutdown, and that call's result is now
                    # recorded: it ends here; the cleanup below finishes (see there).
                    self._ending = self._approved
                    return
                turn = await self._next_input()
        except asyncio.CancelledError:
            if self._ending is None:  # killed (a shutdown records its own end)
                self.runtime.update(self.task_id, lambda s: ended(s, status=TaskStatus.KILLED))
            raise
        except Exception as exc:  # its loop itself broke (not a turn): it cannot go on
            error = reason(exc)
            self.runtime.update(
                self.task_id, lambda s: ended(s, status=TaskStatus.FAILED, error=error)
            )
        finally:
            await finish_despite_cancel(self._cleanup())

    async def _turn(self, prompt: str | Message) -> None:
        self._idle = False
        self.runtime.update(self.task_id, working)
        try:
            async for event in self.recorder.run(prompt):
                self._progress(event)
        except Exception as exc:  # a failed turn does not end it: it waits for mail again
            # Rows taken for a message that never reached the transcript are handed out again.
            self.recorder.release()
            self._become_idle(error=reason(exc))
            return
        if self._approved is None:  # an approved shutdown ends it instead of idling
            follow_up = await self._idle_hook()
            if follow_up is not None:
                await self._turn(follow_up)
                return
            self._become_idle(result=self.engine.last_text())

    async def _idle_hook(self) -> str | None:
        """Run the TeammateIdle hooks: exit 2 keeps it working, on the hook's words.

        At most :data:`MAX_IDLE_CONTINUATIONS` times in a row, so a hook cannot keep it busy
        forever.
        """
        if self._kept_busy >= MAX_IDLE_CONTINUATIONS:
            self._kept_busy = 0
            return None
        outcome = await self.engine.run_hook(
            "TeammateIdle", None, teammate_name=self.name, team_name=self.team
        )
        if outcome is None or not outcome.blocked or not outcome.block_reason.strip():
            self._kept_busy = 0
            return None
        self._kept_busy += 1
        return outcome.block_reason

    def _become_idle(self, *, result: str | None = None, error: str | None = None) -> None:
        totals = self._totals()
        self.runtime.update(self.task_id, lambda s: idle(s, totals, result=result, error=error))
        self._idle = True
        messages = self.engine.messages
        peers = peer_messages(messages[self._noticed :], self.team)
        self._noticed = len(messages)
        notice = idle_notification(
            self.name, result or "", peers=peers, failure=error, at=self.runtime.clock.time()
        )
        self._tell_lead(notice)

    def _tell_lead(self, payload: str) -> None:
        """Post a protocol message of its own (idle, shutdown approved) to the lead.

        Held for the lead's next turn (it wakes nobody: see taskloom.conversation.held),
        unless the settings want each one to start a lead turn of its own.
        """
        each = self.engine.config.settings.get(IDLE_NOTICES_SETTING) == "each"
        self.mailbox.post(
            recipient=self.lead,
            sender=self.agent_id,
            kind="protocol" if each else "held",
            topic=message_type(payload),
            body=wrap(payload, sender=self.name, color=self.color),
            payload=payload,
        )

    async def _next_input(self) -> str | Message:
        """Wait, idle, for what starts its next turn: messages, or news of its own tasks."""
        turn = await self._inputs()
        assert turn is not None  # it has no input that ends: only its end stops the wait
        return turn

    async def _cleanup(self) -> None:
        try:
            self.recorder.release()
            # Whatever it started is killed (exit policy cancel), so nothing outlives it.
            await self._close_processes()
            # It is gone for good (an in-process teammate is never resumed): what is still
            # addressed to it would wait forever, and be replayed to a namesake.
            self.mailbox.discard(self.agent_id)
        finally:
            self.books.close()
            self._report_end()
            if self._approved is not None and self._ending == self._approved:
                # In this order: what it started is gone, it is inactive, its task has ended
                # (completed), and only then is the lead told.
                totals = self._totals()
                self.runtime.update(self.task_id, lambda s: ended(s).replace(**totals))
                self._tell_lead(self._approval(self._approved))

    def _approval(self, request_id: str) -> str:
        at = self.runtime.clock.time()
        return shutdown_approved(
            request_id, name=self.name, at=at, pane_id=self.pane_id, backend=self.backend
        )

    def _report_end(self) -> None:
        """Call ``on_end``, once.

        From its loop's cleanup, or from a kill that came before the loop ever ran (a task
        cancelled before its first step runs none of its body).
        """
        on_end, self.on_end = self.on_end, None
        if on_end is not None:
            try:
                on_end()
            except Exception:  # a bookkeeping failure must not hide how it ended
                log.exception("teammate %s: recording its end failed", self.agent_id)

    def _totals(self) -> dict[str, object]:
        """Its usage so far: an agent's totals, with what a pane teammate's lead reads."""
        engine, pane, ledger = self.engine, self.backend != IN_PROCESS, self.runtime.usage
        return {
            **self.books.totals(),
            "spent_tokens": ledger.own(engine.ledger_key).tokens,
            # Its tokens per model, from this process's ledger: a pane teammate's process
            # runs it and its agents only, and its lead counts them all (as a remote
            # worker's session); an in-process teammate's lead counts them itself.
            **report_fields(ledger.report_of(None if pane else engine.ledger_key)),
        }

    def _progress(self, event: EngineEvent) -> None:
        """Report a recorded message: kept for display, into its output file and task state."""
        if not isinstance(event, AssistantTurn | UserTurn):
            return
        self._recent.append(event.message)
        self.books.progress(event)
        totals = self._totals()
        self.runtime.update(self.task_id, lambda s: progressed(s, totals))


__all__ = [
    "IDLE_NOTICES_SETTING",
    "KILL_WAIT_S",
    "MAIL_WAIT_S",
    "RECENT_LIMIT",
    "TeammateRun",
    "sidechain_path",
]
