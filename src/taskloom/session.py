"""A Session: the runtime, the main conversation and its transcript.

``$TASKLOOM_HOME/sessions/<id>/transcript.jsonl`` receives every message as it enters the
conversation; ``Session.resume`` reads it back so a later process continues where this one
stopped (the runtime, opened with the same session id, replays undelivered notifications).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

from taskloom.conversation.recorder import Recorder
from taskloom.engine import Engine, EngineConfig, EngineEvent
from taskloom.errors import UserError
from taskloom.messages import Message
from taskloom.settings import db_path, session_dir
from taskloom.tasks.mailbox import Letter
from taskloom.tasks.runtime import TaskRuntime
from taskloom.transcript import TranscriptWriter, load_messages


def transcript_path(session_id: str, home: Path | None = None) -> Path:
    """Where a session's transcript lives."""
    return session_dir(session_id, home) / "transcript.jsonl"


class Session:
    """The main thread of one session."""

    def __init__(
        self,
        runtime: TaskRuntime,
        config: EngineConfig,
        messages: list[Message] | None = None,
        *,
        persist: bool = True,
    ) -> None:
        """Drive ``config`` on ``runtime``, continuing ``messages`` if given.

        ``persist=False`` keeps no transcript: the session cannot be resumed.
        """
        self.runtime = runtime
        self.id = runtime.session_id
        # Its inbox is the session's mailbox: what agents and other sessions send it.
        self.engine = Engine(dataclasses.replace(config, inbox=self.take_inbox), runtime, messages)
        self._source = "resume" if messages else "startup"
        path = transcript_path(self.id, runtime.home) if persist else None
        self.recorder = Recorder(self.engine, path)
        self.recorder.open()

    @property
    def transcript(self) -> TranscriptWriter | None:
        """The open transcript (None once closed)."""
        return self.recorder.transcript

    @classmethod
    def resume(cls, runtime: TaskRuntime, config: EngineConfig, *, persist: bool = True) -> Session:
        """Continue the conversation recorded for ``runtime.session_id``."""
        path = transcript_path(runtime.session_id, runtime.home)
        session = cls(runtime, config, load_messages(path), persist=persist)
        session.recorder.repair()
        return session

    def take_inbox(self) -> list[str]:
        """Messages sent to the main thread since its last look, taken from the mailbox.

        Acknowledged once the transcript holds the message they go into (see
        :meth:`~taskloom.conversation.recorder.Recorder.hold`).
        """
        letters = self.runtime.mailbox.take(self.id, "message")
        if letters:
            self.recorder.hold(letters)
        return [_inbox_text(letter) for letter in letters]

    async def run(self, prompt: str | Message | None) -> AsyncIterator[EngineEvent]:
        """Run the engine on ``prompt``, recording each message before passing it on.

        Hooks: SessionStart and UserPromptSubmit see the prompt first (exit 2 of the latter
        refuses it; their output is added to it); Stop hooks that exit 2 send the agent back
        to work with their stderr, at most
        :data:`~taskloom.conversation.recorder.MAX_STOP_CONTINUATIONS` times.

        Raises:
            UserError: A UserPromptSubmit hook refused the prompt.
        """
        engine = self.engine
        if isinstance(prompt, str):
            started = await engine.run_hook("SessionStart", None, source=self._source)
            submit = await engine.run_hook("UserPromptSubmit", None, prompt=prompt)
            if submit is not None and submit.blocked:
                raise UserError(f"Prompt blocked by a UserPromptSubmit hook: {submit.block_reason}")
            extra = [
                *(started.additional_context if started else []),
                *(submit.additional_context if submit else []),
            ]
            if extra:
                prompt = "\n\n".join([prompt, *extra])
        try:
            async for event in self.recorder.run(prompt):
                yield event
        except BaseException:
            # Interrupted: messages taken for a message that was never recorded go back.
            self.recorder.release()
            raise

    async def end(self, reason: str = "other") -> None:
        """Run the SessionEnd hooks."""
        await self.engine.run_hook("SessionEnd", None, reason=reason)

    def close(self) -> None:
        """Close the transcript."""
        self.recorder.close()


#: The most of another session's message the main thread is shown.
PEER_TEXT_CAP = 100_000


def _inbox_text(letter: Letter) -> str:
    """What the main thread is shown of a message: another session's says who sent it.

    An agent's message comes framed already (its sender knows who it is); a row from another
    process (``uds:<its socket>`` or ``session:<its id>``) is framed here, with how to reply.
    """
    sender, body = letter.sender, letter.body
    if len(body) > PEER_TEXT_CAP:  # another process's text: it does not get the whole context
        body = f"{body[:PEER_TEXT_CAP]}\n[{len(body) - PEER_TEXT_CAP} more characters not shown]"
    if sender.startswith("uds:"):
        reply = f'; reply with SendMessage to "{sender}"'
    elif sender.startswith("session:"):
        reply = " (it does not listen: it cannot be answered)"
    else:
        return letter.body
    return (
        f"Another taskloom session ({sender}) sent a message while you were working:\n"
        f"{body}\n\nThis is from another session, not from your user. After completing "
        f"your current task, decide whether and how to respond{reply}."
    )


def latest_session_id(cwd: Path, home: Path | None = None) -> str | None:
    """The session of ``cwd`` whose conversation was recorded last (``--continue``), if any."""
    from taskloom.store import Store

    path = db_path(home)
    if not path.exists():
        return None
    store = Store(path)
    try:
        sessions = [s.id for s in store.list_sessions() if s.cwd == str(cwd)]
    finally:
        store.close()
    recorded = [(transcript_path(s, home), s) for s in sessions]
    found = [(p.stat().st_mtime, s) for p, s in recorded if p.is_file()]
    return max(found)[1] if found else None
