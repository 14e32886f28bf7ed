"""A Session: the runtime, the main conversation and its transcript.

``$TASKLOOM_HOME/sessions/<id>/transcript.jsonl`` receives every message as it enters the
conversation; ``Session.resume`` reads it back so a later process continues where this one
stopped (the runtime, opened with the same session id, replays undelivered notifications).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from taskloom.conversation.recorder import Recorder
from taskloom.engine import Engine, EngineConfig, EngineEvent
from taskloom.errors import UserError
from taskloom.messages import Message
from taskloom.settings import session_dir
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
    ) -> None:
        """Drive ``config`` on ``runtime``, continuing ``messages`` if given."""
        self.runtime = runtime
        self.id = runtime.session_id
        self.engine = Engine(config, runtime, messages)
        self._source = "resume" if messages else "startup"
        self.recorder = Recorder(self.engine, transcript_path(self.id, runtime.home))
        self.recorder.open()

    @property
    def transcript(self) -> TranscriptWriter | None:
        """The open transcript (None once closed)."""
        return self.recorder.transcript

    @classmethod
    def resume(cls, runtime: TaskRuntime, config: EngineConfig) -> Session:
        """Continue the conversation recorded for ``runtime.session_id``."""
        path = transcript_path(runtime.session_id, runtime.home)
        session = cls(runtime, config, load_messages(path))
        session.recorder.repair()
        return session

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
        async for event in self.recorder.run(prompt):
            yield event

    async def end(self, reason: str = "other") -> None:
        """Run the SessionEnd hooks."""
        await self.engine.run_hook("SessionEnd", None, reason=reason)

    def close(self) -> None:
        """Close the transcript."""
        self.recorder.close()
