"""One subagent run: its engine, sidechain transcript, output file, progress and life cycle.

The run's loop is driven by its own asyncio task from the start, whether the caller waits in
the foreground or not: moving to the background is then only a matter of the caller no longer
waiting — the loop, its iterator and every message carry on untouched. The task's state in the
runtime follows it: progress (tool uses, tokens, the last activities) on every turn, the result
or the error at the end. When the run ends, whatever it started is handled by its exit policy
(shells are killed by default); a kill cancels the loop, which cancels its tool calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from taskloom._aio import finish_despite_cancel
from taskloom.agents.activity import describe_activity
from taskloom.agents.bookkeeping import RunBooks, sidechain_path, sidechain_record
from taskloom.conversation.recorder import Recorder, StopHook
from taskloom.engine import Engine, EngineConfig, EngineEvent, Finished, ToolDone, UserTurn
from taskloom.errors import reason
from taskloom.messages import Message
from taskloom.tasks.agent import ended, killed, progressed
from taskloom.tasks.handoff import Handoff
from taskloom.tasks.mailbox import MESSAGES
from taskloom.tasks.narrow import as_agent
from taskloom.tasks.output import DiskTaskOutput

if TYPE_CHECKING:
    from pathlib import Path

    from taskloom.messages import ToolUseBlock
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tasks.usage import Figures
    from taskloom.tools.base import FileState, ToolResult


#: Finishes what a run leaves (its worktree) at its end: fields for the task state, a note.
Finisher = Callable[[], Awaitable[tuple[dict[str, Any], str]]]


class AgentRun:
    """A subagent and the loop that drives it (see the module docstring)."""

    def __init__(
        self,
        runtime: TaskRuntime,
        agent_id: str,
        config: EngineConfig,
        *,
        messages: list[Message] | None = None,
        files: FileState | None = None,
        on_end: Callable[[AgentRun], Any] | None = None,
        worktree: Any = None,
        finalize: Finisher | None = None,
        continues: Engine | None = None,
        earlier: Figures | None = None,
    ) -> None:
        """Prepare a run of task ``agent_id`` (registered by the caller) on ``config``.

        The run builds its engine itself: the engine's inbox is this run's mailbox, so the
        configuration is complete when the engine is made, never patched afterwards.

        Args:
            runtime: The session's runtime.
            agent_id: The agent's task id.
            config: How its engine runs (``inbox`` is set to this run's).
            messages: The conversation so far (a fork's prefix, a transcript read back).
            files: What its file tools know of the files (already its own copy).
            on_end: Called when each run ends, after its shells (e.g. to stop its servers).
            worktree: Its git worktree, when isolated.
            finalize: Called once at the end of each run (e.g. to finish its worktree);
                returns fields for the task state and a note for the result.
            continues: An engine whose conversation, files and counts this run carries on
                (``messages`` and ``files`` are then taken from it).
            earlier: What it had spent in an earlier process (its totals go on from there).
        """
        self.runtime = runtime
        self.agent_id = agent_id
        # SendMessage reaches it through its inbox; its usage is charged under its id.
        config = dataclasses.replace(
            config, inbox=self.take_inbox, agent_id=config.agent_id or agent_id
        )
        if continues is not None:
            self.engine = continues.continued(config)
        else:
            self.engine = Engine(config, runtime, messages, files)
        self.on_end = on_end
        self.handoff = Handoff()
        self.driver: asyncio.Task[None] | None = None
        self.started = time.monotonic()
        kind = config.metadata.get("agent_type")
        #: Records its sidechain transcript (open while it runs) and runs SubagentStop hooks.
        self.recorder = Recorder(
            self.engine,
            sidechain_record(runtime, agent_id),
            stop=StopHook(
                "SubagentStop",
                kind,
                {
                    "agent_type": kind,
                    "agent_transcript_path": str(sidechain_path(runtime, agent_id)),
                },
            ),
        )
        #: Its transcript and output files, totals and progress.
        self.books = RunBooks(self.recorder, agent_id, activity=_described, earlier=earlier)
        self._finisher = finalize
        #: Called once before the run ends (e.g. to finish its worktree); returns fields for
        #: the task state and a note for the result. Armed again by each start.
        self.finalize = finalize
        #: Its git worktree, when isolated.
        self.worktree: Any = worktree
        #: Set once its last input has been taken: a message arriving from now on must wait
        #: for the end and resume it, not be queued for a loop that will not look again.
        self.finishing = False
        #: Told of each tool call it made once its result is in (the stuck watch).
        self.on_tool: Callable[[ToolUseBlock, ToolResult], None] | None = None

    def moved(
        self,
        cwd: Path,
        *,
        worktree: Any,
        finalize: Finisher | None,
    ) -> AgentRun:
        """This agent carried on in another directory (a fresh worktree): a new run.

        Its engine is rebuilt with the new ``cwd`` (file tools confined to it), keeping the
        conversation, the files and the counts; rows this run took but never recorded go back
        to the mailbox first, so the new run receives them.
        """
        self.recorder.release()
        config = dataclasses.replace(self.engine.config, cwd=cwd, confine_to=cwd)
        return AgentRun(
            self.runtime,
            self.agent_id,
            config,
            on_end=self.on_end,
            worktree=worktree,
            finalize=finalize,
            continues=self.engine,
        )

    # -- the task handle ----------------------------------------------------------------------

    async def kill(self) -> None:
        """Cancel the loop (and so its tool calls); wait, bounded, for its cleanup."""
        driver = self.driver
        if driver is None or driver.done():
            return
        driver.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(driver), 30.0)

    async def detach(self) -> None:
        """Agents cannot outlive their session: detaching stops them (recorded)."""
        await self.kill()

    def on_background(self) -> None:
        """The caller stopped waiting in the foreground."""
        self.handoff.release()

    # -- running ------------------------------------------------------------------------------

    def start(self, prompt: str | Message | None) -> asyncio.Task[None]:
        """Run the engine on ``prompt`` (None: its history is ready) in a task of its own."""
        self.started = time.monotonic()
        self.finishing = False
        # A new run asks again (a budget that ran out refuses the resume before it comes here).
        self.engine.unhalt()
        self.finalize = self._finisher  # each run ends by finishing its worktree, once
        self.handoff = Handoff()
        self.driver = asyncio.get_running_loop().create_task(self._drive(prompt))
        return self.driver

    def resume(self) -> asyncio.Task[None]:
        """Run again on the messages its mailbox holds (those that resumed it, and older ones).

        Rows taken by an earlier run that was killed before its transcript held them are
        handed back first, so they are delivered now, once, in the order they were sent.
        """
        self.recorder.release()
        sent = self.take_inbox()
        return self.start("\n\n".join(sent) if sent else None)

    def take_inbox(self) -> list[str]:
        """Messages sent to the agent since its last tool boundary, taken from its mailbox.

        They are acknowledged once the transcript holds the message they go into (see
        :meth:`~taskloom.conversation.recorder.Recorder.hold`); until then a crash or a kill
        hands them out again.
        """
        letters = self.runtime.mailbox.take(self.agent_id, MESSAGES)
        self.recorder.hold(letters)
        return [letter.body for letter in letters]

    async def _drive(self, prompt: str | Message | None) -> None:
        engine = self.engine
        kind = engine.config.metadata.get("agent_type")
        try:
            self.books.open()
            start = await engine.run_hook("SubagentStart", kind, agent_type=kind)
            if start is not None and start.additional_context and isinstance(prompt, str):
                prompt = "\n\n".join([prompt, *start.additional_context])
            next_input: str | Message | None = prompt
            first, at_limit = True, False
            while first or next_input is not None:
                first = False
                async for event in self.recorder.run(next_input):  # SubagentStop hooks too
                    self._progress(event)
                    if isinstance(event, Finished):
                        at_limit = event.reason == "max_turns"
                # A message sent while the hooks ran must not be lost: no await between
                # this last look at the inbox and the terminal update below.
                sent = self.take_inbox()
                next_input = "\n\n".join(sent) if sent else None
            self.finishing = True
            fields, note = await self._finalize()
            result = (self._partial() if at_limit else engine.last_text()) + note
            totals = self.books.totals()
            self.runtime.update(
                self.agent_id,
                lambda s: ended(s, totals, result=result).replace(partial=at_limit, **fields),
            )
        except asyncio.CancelledError:
            # Killed (or its parent cancelled): record it here, so every end goes through here,
            # with where its work is kept.
            fields, note = await finish_despite_cancel(self._finalize())
            self.runtime.update(
                self.agent_id,
                lambda s: killed(s).replace(error=note.strip() or None, **fields),
            )
            raise
        except Exception as exc:  # a failed agent must not take its parent down
            error = reason(exc)
            fields, note = await finish_despite_cancel(self._finalize())
            self.runtime.update(
                self.agent_id,
                lambda s: ended(s, self.books.totals(), error=error + note).replace(**fields),
            )
        finally:
            await finish_despite_cancel(self._cleanup())

    async def _finalize(self) -> tuple[dict[str, Any], str]:
        finalize, self.finalize = self.finalize, None  # once, whichever way the run ends
        if finalize is None:
            return {}, ""
        # Its shells go first: nothing may write into a worktree that is being inspected.
        await self.runtime.close_owner(self.agent_id, wait_limit=600.0)
        try:
            return await finalize()
        except Exception as exc:  # never lose the end of the run to a cleanup failure
            return {}, f"\n\n[cleanup failed: {exc}]"

    async def _cleanup(self) -> None:
        try:
            if self.finalize is not None:  # it failed or was killed: still keep its work
                fields, _ = await self._finalize()
                if fields:
                    self.runtime.update(self.agent_id, lambda s: s.replace(**fields))
            # Shells it started are killed (exit policy cancel) unless they said otherwise.
            await self.runtime.close_owner(self.agent_id, wait_limit=600.0)
            if self.on_end is not None:
                outcome = self.on_end(self)
                if asyncio.iscoroutine(outcome):
                    await outcome
        finally:
            self.books.close()

    def _partial(self) -> str:
        """Its answer when it stopped at its turn limit: its last text, marked partial.

        The last text it wrote (its last answer may be only tool calls), then what it is and
        how to go on: the conversation is kept, a message resumes it where it stopped.
        """
        texts = (m.text() for m in reversed(self.engine.messages) if m.role == "assistant")
        last = next((t for t in texts if t.strip()), "")
        state = as_agent(self.runtime.get(self.agent_id))
        address = (state.name if state is not None else None) or self.agent_id
        limit = self.engine.config.max_turns
        return (
            f"{last}\n\n[partial: this agent stopped at its turn limit (maxTurns {limit}) "
            "before it finished, so the text above is not its final answer. To let it go on "
            f"where it stopped, send it a message: SendMessage with to: '{address}'.]"
        ).lstrip()

    def _progress(self, event: EngineEvent) -> None:
        """Report a recorded turn: its output file and task state follow the conversation."""
        if isinstance(event, ToolDone) and self.on_tool is not None:
            self.on_tool(event.call, event.result)
        activities = self.books.progress(event)
        if activities is not None:
            self.runtime.update(
                self.agent_id, lambda s: progressed(s, activities, self.books.totals())
            )
        elif isinstance(event, UserTurn):
            self.runtime.update(self.agent_id, lambda s: s.replace(**self.books.totals()))

    @property
    def output(self) -> DiskTaskOutput | None:
        """Its output file, while it runs."""
        return self.books.output


def _described(call: ToolUseBlock) -> str:
    """A tool call as a subagent's output and activities show it (``Running: pytest -q``)."""
    return describe_activity(call.name, call.input)


__all__ = ["AgentRun", "Finisher", "sidechain_path"]
