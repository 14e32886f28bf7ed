"""The bookkeeping of one run of an agent: a subagent's and a teammate's alike.

Whatever drives an agent's loop (:class:`~taskloom.agents.run.AgentRun` for a subagent,
``TeammateRun`` for a teammate), its run keeps the same books: its sidechain transcript (where
:func:`sidechain_path` says) and its output file, open while it runs; its totals, read from
its engine and the session's usage ledger (:meth:`RunBooks.totals`: the same fields for every
agent); and its progress, from its engine's events: the session's observer hears each
message, the output file gets each answer's text and an arrow per tool call.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from taskloom.engine import AssistantTurn, EngineEvent, UserTurn
from taskloom.tasks.narrow import as_agent
from taskloom.tasks.output import DiskTaskOutput
from taskloom.tasks.usage import Figures
from taskloom.transcript import sidechain_dir, transcript_path, write_agent_meta

if TYPE_CHECKING:
    from taskloom.conversation.recorder import Recorder
    from taskloom.messages import ToolUseBlock
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tasks.types import AgentTaskState


def sidechain_path(runtime: TaskRuntime, task_id: str, session_id: str | None = None) -> Path:
    """Where an agent's transcript lives: in its session's ``subagents`` directory.

    That is next to the session's transcript (see :func:`taskloom.transcript.sidechain_dir`):
    ``<project>/<session id>/subagents/`` where Claude Code keeps them.

    Args:
        runtime: The runtime it runs in (its home and working directory).
        task_id: Its task id.
        session_id: The session it belongs to (default: the runtime's own; a pane teammate's
            is its lead's).
    """
    session = session_id or runtime.session_id
    # Another session's (a pane teammate's lead's, in a worktree or resumed elsewhere): its
    # transcript need not be under this process's directory, and only a search finds it.
    main = transcript_path(session, runtime.home, runtime.cwd, search=session != runtime.session_id)
    return sidechain_dir(main) / f"agent-{task_id}.jsonl"


def sidechain_record(
    runtime: TaskRuntime, task_id: str, session_id: str | None = None
) -> Path | None:
    """The sidechain an agent's run writes: :func:`sidechain_path`'s, None when none is kept.

    A session without transcripts (``--no-session-persistence``) writes nothing under Claude
    Code's directory, as Claude Code: neither its agents' transcripts nor their metadata.
    """
    return sidechain_path(runtime, task_id, session_id) if runtime.keep_transcripts else None


def recorded(state: AgentTaskState) -> Figures:
    """The figures an agent's task state records: where a run of a later process starts from.

    Its ``input_tokens`` are left out: the state's is its context size then, not usage.
    """
    return Figures(
        output_tokens=state.output_tokens,
        cache_read_input_tokens=state.cache_read_input_tokens,
        cache_creation_input_tokens=state.cache_creation_input_tokens,
        tool_uses=state.tool_uses,
        cost_usd=state.cost_usd,
    )


def tool_name(call: ToolUseBlock) -> str:
    """A tool call as a teammate's output shows it: the tool's name."""
    return call.name


class RunBooks:
    """One agent run's transcript and output files, totals and progress (see the module).

    Args:
        recorder: Records its transcript (its engine is the agent's).
        task_id: Its task id.
        output_file: Its output file (default: its task's, in this runtime's session).
        activity: How its output shows a tool call (default: the tool's name).
        earlier: What it had spent before this process (an agent of an earlier process,
            resumed: see :func:`recorded`); its totals go on from there.
    """

    def __init__(
        self,
        recorder: Recorder,
        task_id: str,
        output_file: Path | None = None,
        activity: Callable[[ToolUseBlock], str] = tool_name,
        earlier: Figures | None = None,
    ) -> None:
        self.recorder = recorder
        self.task_id = task_id
        self.output_file = output_file or recorder.runtime.output_path(task_id)
        self.activity = activity
        #: What it had spent before this process: the ledger counts this process's only.
        self.earlier = earlier or Figures()
        #: Its output file, while the run is on.
        self.output: DiskTaskOutput | None = None

    def open(self) -> None:
        """Open its transcript and its output file (a resumed run goes on in the same file).

        Its transcript's metadata (see :func:`~taskloom.transcript.write_agent_meta`) is
        written from its task's state the first time.
        """
        self.recorder.open()
        self._write_meta()
        path, cap = self.output_file, self.recorder.runtime.output_cap
        opened = DiskTaskOutput.reopen if path.exists() else DiskTaskOutput
        self.output = opened(path, cap)

    def _write_meta(self) -> None:
        path, runtime = self.recorder.path, self.recorder.runtime
        state = runtime.get(self.task_id)
        if path is None or state is None:
            return
        owner, agent = state.owner, as_agent(state)
        write_agent_meta(
            path,
            {
                # A teammate has no agent type of its own: Claude Code's field is left out.
                "agentType": agent.agent_type if agent is not None else None,
                "description": state.description,
                "toolUseId": state.tool_use_id,
                # Started by another agent (not by its session's main thread).
                "parentAgentId": owner if owner and owner != state.session_id else None,
            },
        )

    def close(self) -> None:
        """Close both (a run that never opened them closes nothing)."""
        self.recorder.close()
        if self.output is not None:
            self.output.close()
            self.output = None

    def totals(self) -> dict[str, int | float]:
        """Its usage so far, as its task state records it.

        ``input_tokens`` and ``total_tokens`` count its latest request's input (its context
        now), not the sum of every request's; the others are the session's ledger's figures
        of this agent, on top of what it had spent before this process (``earlier``).
        """
        engine = self.recorder.engine
        own = self.earlier + engine.runtime.usage.own(engine.ledger_key)
        return {
            "input_tokens": engine.context_tokens,
            "output_tokens": own.output_tokens,
            "total_tokens": engine.context_tokens + own.output_tokens,
            "tool_uses": own.tool_uses,
            "cache_read_input_tokens": own.cache_read_input_tokens,
            "cache_creation_input_tokens": own.cache_creation_input_tokens,
            "cost_usd": own.cost_usd,
        }

    def progress(self, event: EngineEvent) -> list[str] | None:
        """Report a recorded message: the observer hears it, its output file gets its lines.

        Returns the activities of an answer's tool calls (``[]`` for one without), None for
        any other event.
        """
        if not isinstance(event, AssistantTurn | UserTurn):
            return None
        observer = self.recorder.engine.config.observer
        if observer is not None:
            observer.agent_message(self.task_id, event)
        if not isinstance(event, AssistantTurn):
            return None
        text = event.message.text().strip()
        activities = [self.activity(call) for call in event.message.tool_uses()]
        lines = ([text] if text else []) + [f"→ {a}" for a in activities]
        if self.output is not None and lines:
            self.output.append("\n".join(lines) + "\n")
        return activities


__all__ = ["RunBooks", "recorded", "sidechain_path", "sidechain_record", "tool_name"]
