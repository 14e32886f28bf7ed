"""The recorder: what the main thread and every subagent put around the engine alike.

A :class:`Recorder` drives one :class:`~taskloom.engine.Engine` and

- writes every message to the conversation's transcript before the event carrying it is
  passed on, so a consumer that stops reading never leaves the transcript behind it;
- acknowledges the notifications a message delivers once the transcript holds it (only then
  are they delivered: a crash before that replays them on resume), and so the mailbox rows
  (SendMessage text) the engine's inbox handed to that message (:meth:`Recorder.hold`);
- runs the Stop (or SubagentStop) hooks when the engine is done: a hook exiting 2 sends the
  agent back to work with its stderr, at most :data:`MAX_STOP_CONTINUATIONS` times;
- ends the turn's permission grants (a skill's ``allowed-tools``) when the run ends;
- repairs a resumed conversation (tool calls left unanswered by an interrupted run) and
  records the messages the repair added.

What only one side does stays with it: the main thread's SessionStart and UserPromptSubmit
hooks (:mod:`taskloom.session`), an agent's progress and life cycle (:mod:`taskloom.agents.run`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.engine import AssistantTurn, Compacted, Engine, EngineEvent, UserTurn
from taskloom.messages import Message, TextBlock
from taskloom.pairing import repair
from taskloom.tasks.mailbox import Letter, Mailbox
from taskloom.transcript import TranscriptWriter

#: Most times Stop or SubagentStop hooks may send an agent back to work (no endless loops).
MAX_STOP_CONTINUATIONS = 5


@dataclass(frozen=True)
class StopHook:
    """Which hooks run when the engine is done, and what they are told.

    Attributes:
        event: ``Stop`` on the main thread, ``SubagentStop`` for a subagent.
        target: What the hooks' matchers are matched against (the agent type), if anything.
        payload: Extra hook input; ``stop_hook_active`` and ``last_assistant_message`` (the
            text of the agent's last answer) are added on each run.
    """

    event: str = "Stop"
    target: str | None = None
    payload: Mapping[str, Any] = field(default_factory=dict)


class Recorder:
    """One engine's conversation, recorded to its transcript (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        path: Path | None,
        *,
        stop: StopHook | None = None,
        mailbox: Mailbox | None = None,
    ) -> None:
        """Record ``engine``'s conversation in the transcript at ``path``.

        The transcript is not opened here: :meth:`open` it before :meth:`run`.

        Args:
            engine: The engine to drive.
            path: The transcript file (appended to); None keeps no transcript (a session
                that is not to be resumed): delivered messages are still acknowledged.
            stop: The hooks to run when the engine is done (default: the Stop hooks).
            mailbox: The mailbox the held rows are taken from (default: the runtime's). A
                teammate in a process of its own takes its rows from the team's mailbox.
        """
        self.engine = engine
        self.runtime = engine.runtime
        self.path = path
        self.stop = stop or StopHook()
        self._writer: TranscriptWriter | None = None
        self._held: list[Letter] = []
        self.mailbox = mailbox if mailbox is not None else self.runtime.mailbox

    @property
    def transcript(self) -> TranscriptWriter | None:
        """The open transcript, None while closed."""
        return self._writer

    def open(self) -> None:
        """Open the transcript for appending (nothing if it is open already)."""
        if self._writer is None and self.path is not None:
            self._writer = TranscriptWriter(
                self.path, self.runtime.session_id, cwd=self.runtime.cwd
            )

    def close(self) -> None:
        """Close the transcript (nothing if it is closed); :meth:`open` may open it again."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def hold(self, letters: Iterable[Letter]) -> None:
        """Mailbox rows taken for the next user message: acknowledged once it is recorded.

        The engine puts what its inbox returns into the very next user message it yields
        (tool results, its next prompt, or a message of their own), so that message holds them.
        """
        self._held.extend(letters)

    def release(self) -> None:
        """Hand back held rows that never reached the transcript (the run was killed first)."""
        held, self._held = self._held, []
        if held:
            self.mailbox.requeue(letter.id for letter in held)

    async def run(self, prompt: str | Message | None) -> AsyncIterator[EngineEvent]:
        """Run the engine on ``prompt``, then its stop hooks; yields every event, recorded.

        Args:
            prompt: The next input (None: the conversation is ready as it is).

        Raises:
            RuntimeError: The transcript is not open.
        """
        engine = self.engine
        try:
            async for event in engine.run(prompt):
                self.record(event)
                yield event
            for again in range(MAX_STOP_CONTINUATIONS):
                stop = await engine.run_hook(
                    self.stop.event,
                    self.stop.target,
                    **self.stop.payload,
                    stop_hook_active=again > 0,
                    last_assistant_message=engine.last_text(),
                )
                if stop is None or not stop.blocked or not stop.block_reason.strip():
                    return
                async for event in engine.run(stop.block_reason):
                    self.record(event)
                    yield event
        finally:
            # The turn is over, however it ended: the tools a skill or command allowed for it
            # are asked about again.
            if engine.config.permissions is not None:
                engine.config.permissions.end_grants()

    def record(self, event: EngineEvent) -> None:
        """Write the message ``event`` carries (if any); then acknowledge its notifications.

        Raises:
            RuntimeError: The transcript is not open.
        """
        if isinstance(event, Compacted):
            self._compacted(event)
            return
        if not isinstance(event, UserTurn | AssistantTurn):
            return
        writer = self._writer
        if writer is None and self.path is not None:
            raise RuntimeError(f"the transcript {self.path} is not open")
        if isinstance(event, AssistantTurn):
            if writer is not None:
                writer.append(event.message)
            return
        if writer is not None:
            writer.append(event.message, origin=event.origin)
        # Recorded: delivered. Acknowledged now, whatever the consumer does with the event
        # (the engine's own acknowledgement comes only once it is asked for the next one).
        if event.notifications:
            self.runtime.ack(event.notifications)
        if self._held:
            held, self._held = self._held, []
            self.mailbox.ack(letter.id for letter in held)

    def _compacted(self, event: Compacted) -> None:
        """Record a compaction: the boundary, then the conversation as it now is."""
        if self.path is None:
            return
        writer = self._writer
        temporary = writer is None  # a manual compaction between runs
        if writer is None:
            writer = TranscriptWriter(self.path, self.runtime.session_id, cwd=self.runtime.cwd)
        try:
            writer.boundary(event.trigger, event.pre_tokens)
            summary, *kept = event.messages
            writer.append(summary, origin="compact", compact_summary=True)
            for message in kept:
                writer.append(message)
        finally:
            if temporary:
                writer.close()

    def repair(self) -> list[Message]:
        """Make the engine's conversation one the API accepts again, recording what is added.

        A run that stopped mid-call (killed, or its process gone) left tool calls unanswered;
        they get "interrupted" results (see :func:`taskloom.pairing.repair`). Recorded, so
        the next resume starts from a valid conversation.

        Returns:
            The messages added at the end of the conversation.
        """
        engine = self.engine
        engine.messages, added = repair(engine.messages)
        self._append(added, "tool_results")
        return added

    def interrupted(self) -> None:
        """The user stopped the run: repair it, and tell the model so in its next request.

        The note (Claude Code's ``[Request interrupted by user]``, ``… for tool use`` when
        calls were cut short) joins the conversation's last user message, or starts one; the
        next prompt joins it in turn, as one user message.
        """
        cut = self.repair()
        text = INTERRUPTED_FOR_TOOL_USE if cut else INTERRUPTED_BY_USER
        note = Message(role="user", content=[TextBlock(text=text)])
        messages = self.engine.messages
        if messages and messages[-1].role == "user":
            messages[-1] = Message(role="user", content=[*messages[-1].content, *note.content])
        else:
            messages.append(note)
        # On load, consecutive user messages are merged again: the transcript can hold it apart.
        self._append([note], "prompt")

    def _append(self, messages: list[Message], origin: str) -> None:
        if not messages or self.path is None:
            return
        writer = self._writer
        # A finished run's transcript is closed: opened for these lines only.
        temporary = writer is None
        if writer is None:
            writer = TranscriptWriter(self.path, self.runtime.session_id, cwd=self.runtime.cwd)
        try:
            for message in messages:
                writer.append(message, origin=origin)
        finally:
            if temporary:
                writer.close()


#: What the model is told after the user interrupted a turn (as Claude Code words it).
INTERRUPTED_BY_USER = "[Request interrupted by user]"
#: The same, when the interrupt cut tool calls short.
INTERRUPTED_FOR_TOOL_USE = "[Request interrupted by user for tool use]"
