"""Dreaming: a low-priority agent that tidies the session's agent memory (``dream`` tasks).

A :class:`Dreamer` (one per session, made when first needed) starts a :class:`DreamRun` when
the session has been idle for ``dreamIdleSeconds`` with ``autoDream`` on and no agent of it is
at work (one that is puts the dream off by another wait), or when asked (the
REPL's ``/dream``, a stream-json ``dream`` control request). A dream works on the memories in
use (:func:`memory_targets`: each agent type of the session's catalog whose definition names a
``memory`` scope, where that directory holds files): it merges duplicate notes, drops stale
ones, keeps each ``MEMORY.md`` within its caps and records every change in its output.

It is one agent at a time, built here rather than through the spawner: its only tools are
the memory-scoped ones of :mod:`taskloom.agents.dream_tools`, which confine it to those
directories and replace files atomically, so that a dream killed at any point leaves each
file whole. It is budgeted: ``dreamMaxTurns`` model requests and ``dreamMaxTokens`` tokens
(counted by the session's budgets, under the session's own: a session budget that runs out
stops it too). Killing its task (TaskStop, ``stop_task``, the session's end) cancels its loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._aio import finish_despite_cancel
from taskloom._dataclass import dataclass
from taskloom.agents.budget import Budget
from taskloom.agents.dream_tools import (
    INDEX,
    Change,
    MemoryScope,
    index_problem,
    memory_tools,
    sweep_leftovers,
)
from taskloom.agents.memory import MAX_CHARS, MAX_LINES, memory_dir
from taskloom.engine import Engine, EngineConfig, Finished, ToolDone, UserTurn
from taskloom.errors import UsageError, reason
from taskloom.events import AssistantTurn
from taskloom.tasks.dream import DreamTaskState
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.types import TaskStatus, TaskType

if TYPE_CHECKING:
    from taskloom.agents.budget import Budgets
    from taskloom.agents.builder import AgentBuilder
    from taskloom.tasks.output import DiskTaskOutput
    from taskloom.tasks.runtime import TaskRuntime

#: Each setting: its default, and whether it is a whole number (else any positive number).
DEFAULTS: dict[str, tuple[float, bool]] = {
    "dreamIdleSeconds": (600.0, False),
    "dreamMaxTurns": (30, True),
    "dreamMaxTokens": (200_000, True),
}

PROMPT = f"""You are dreaming: while the session is idle, you tidy the persistent memory its \
agents keep between runs. Each memory directory below has an index, MEMORY.md, that an agent \
is shown at its start, and notes (other files) it reads when it needs them.

Do this, directory by directory:
1. Read the index and every note (MemoryList, MemoryRead).
2. Merge duplicates: the same fact in two notes, or twice in the index, becomes one (write \
the merged note, update the index, then remove the note merged away).
3. Drop what is stale: a note contradicted by a newer one, or one that says it is temporary \
and past. Take it out of the index before you remove it (MemoryDelete), and say why.
4. Keep each index within {MAX_LINES} lines and {MAX_CHARS} characters: one short line per \
note, details in the notes.
Never remove what you cannot justify: when in doubt, keep it. Change nothing outside these \
directories (your tools cannot). End with a short summary of what you changed and why."""


@dataclass(frozen=True)
class DreamSettings:
    """How the session dreams (its settings, checked).

    Attributes:
        auto: ``autoDream``: dream when idle (the REPL and stream-json sessions).
        idle_seconds: ``dreamIdleSeconds``: how long idle before a dream starts.
        max_turns: ``dreamMaxTurns``: most model requests of one dream.
        max_tokens: ``dreamMaxTokens``: most tokens one dream may use.
    """

    auto: bool
    idle_seconds: float
    max_turns: int
    max_tokens: int

    @classmethod
    def read(cls, settings: Mapping[str, Any]) -> DreamSettings:
        """The settings' values, or their defaults.

        Raises:
            UsageError: A value of the wrong type or out of its range, named.
        """
        auto = settings.get("autoDream", False)
        if not isinstance(auto, bool):
            raise UsageError(f"The setting autoDream must be true or false, got {auto!r}")
        values = {key: _number(settings, key) for key in DEFAULTS}
        return cls(
            auto,
            float(values["dreamIdleSeconds"]),
            int(values["dreamMaxTurns"]),
            int(values["dreamMaxTokens"]),
        )


def _number(settings: Mapping[str, Any], key: str) -> float:
    default, whole = DEFAULTS[key]
    raw = settings.get(key)
    if raw is None:
        return default
    ok = isinstance(raw, int) if whole else isinstance(raw, int | float)
    if isinstance(raw, bool) or not ok or raw <= 0:
        what = "a whole number" if whole else "a number"
        raise UsageError(f"The setting {key} must be {what} above 0, got {raw!r}")
    return float(raw)


def memory_targets(builder: AgentBuilder, project_root: Path) -> list[Path]:
    """The memory directories in use: those of the catalog's agent types that hold files."""
    found: list[Path] = []
    for name in sorted(builder.catalog.names()):
        definition = builder.catalog.get(name)
        scope = definition.memory if definition is not None else None
        if scope not in ("user", "project", "local"):
            continue
        directory = memory_dir(scope, name, project_root)
        if directory.is_dir() and directory not in found and any(directory.iterdir()):
            found.append(directory)
    return found


class Dreamer:
    """The session's dreams: one at a time, started when idle or when asked."""

    def __init__(
        self, runtime: TaskRuntime, builder: AgentBuilder, budgets: Budgets, project_root: Path
    ) -> None:
        """Dream for ``runtime``'s session, with ``builder``'s model and catalog.

        Args:
            runtime: The session's runtime (the dream's task is its session's).
            builder: The session's model, settings and agent catalog.
            budgets: The session's budgets (a dream's tokens count under the session's).
            project_root: The project whose memories are tidied.
        """
        self.runtime = runtime
        self.builder = builder
        self.budgets = budgets
        self.project_root = project_root
        self._timer: asyncio.TimerHandle | None = None
        #: An idle dream ran since the last turn: the next waits for another turn.
        self._dreamt = False

    @property
    def settings(self) -> DreamSettings:
        """The session's dream settings, checked."""
        return DreamSettings.read(self.builder.settings)

    def running(self) -> str | None:
        """The id of the session's dream at work, if one is."""
        live = self.runtime.list(types=[TaskType.DREAM])
        return next((s.id for s in live if not s.terminal), None)

    def start(self, trigger: str = "manual") -> str:
        """Start a dream now; its task id.

        Raises:
            UsageError: One is already at work, there is no memory to tidy, or a dream
                setting is invalid.
        """
        settings = self.settings
        live = self.running()
        if live is not None:
            raise UsageError(f"A dream is already at work ({live}); stop it or let it end")
        targets = memory_targets(self.builder, self.project_root)
        if not targets:
            raise UsageError(
                "No agent memory to tidy: no agent type of this session keeps a memory"
                " directory with files in it"
            )
        return DreamRun(self, targets, trigger, settings).start()

    def idle(self) -> None:
        """The session went idle: with ``autoDream`` on, dream once it has stayed so."""
        self.active()
        settings = self.settings
        if settings.auto and not self._dreamt:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(settings.idle_seconds, self._idle_enough)

    def active(self, turn: bool = False) -> None:
        """The session is at work again (``turn``: a turn ran): no idle dream now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if turn:
            self._dreamt = False

    def close(self) -> None:
        """The session ends: nothing more starts (its dream is killed with its tasks)."""
        self.active()

    def _idle_enough(self) -> None:
        self._timer = None
        if any(kind_of(s).is_agent and not s.terminal for s in self.runtime.list()):
            self.idle()  # low priority: while an agent works, look again after another wait
            return
        self._dreamt = True  # tried once this idle spell, whatever came of it
        with contextlib.suppress(UsageError):  # a setting went bad, nothing to tidy: not now
            self.start("idle")


class DreamRun:
    """One dream as it runs: its task's live handle (see the module docstring)."""

    def __init__(
        self, dreamer: Dreamer, directories: list[Path], trigger: str, settings: DreamSettings
    ) -> None:
        """Tidy ``directories``, started by ``trigger`` (``idle`` or ``manual``)."""
        self.runtime = dreamer.runtime
        self.dreamer = dreamer
        self.settings = settings
        self.trigger = trigger
        self.task_id = self.runtime.new_id(TaskType.DREAM)
        self.changes: list[Change] = []
        #: Model requests it made so far.
        self.turns = 0
        self.scope = MemoryScope(directories, self._changed)
        self.driver: asyncio.Task[None] | None = None
        self._output: DiskTaskOutput | None = None

    def start(self) -> str:
        """Register the dream's task and start it; returns its id."""
        runtime, builder = self.runtime, self.dreamer.builder
        sweep_leftovers(self.scope.directories)  # a killed process's temporary files
        self._output = runtime.create_output(self.task_id)
        runtime.register(
            DreamTaskState(
                id=self.task_id,
                status=TaskStatus.RUNNING,
                description="Consolidate agent memory",
                owner=runtime.session_id,
                output_file=str(runtime.output_path(self.task_id)),
                trigger=self.trigger,
                directories=tuple(str(d) for d in self.scope.directories),
            ),
            handle=self,
        )
        meter = self.dreamer.budgets.open(
            self.task_id, runtime.session_id, Budget(tokens=self.settings.max_tokens)
        )
        config = EngineConfig(
            model=builder.model,
            model_name=builder.model_name,
            system_prompt=PROMPT,
            tools=memory_tools(self.scope),
            owner=self.task_id,
            agent_id=self.task_id,
            cwd=self.dreamer.project_root,
            max_turns=self.settings.max_turns,
            max_tokens=builder.max_tokens,
            headless=True,
            wait_for_tasks=False,
            settings=builder.settings,
            metadata={"agent_type": "dream", "description": "Consolidate agent memory"},
            session_id=runtime.session_id,
            meter=meter,
        )
        self.driver = asyncio.get_running_loop().create_task(self._drive(Engine(config, runtime)))
        return self.task_id

    # -- the live handle ----------------------------------------------------------------------

    async def kill(self) -> None:
        """Cancel its loop; its tools' writes are atomic, so every file is whole."""
        driver = self.driver
        if driver is not None and not driver.done():
            driver.cancel()
            await asyncio.wait([driver])

    async def detach(self) -> None:
        """A dream never outlives its session's process: it runs on until that ends."""

    # -- the driver ---------------------------------------------------------------------------

    async def _drive(self, engine: Engine) -> None:
        self._say(f"Dreaming over: {', '.join(str(d) for d in self.scope.directories)}\n")
        try:
            at_limit = False
            async for event in engine.run(self._first_prompt()):
                if isinstance(event, AssistantTurn):
                    self.turns += 1
                if isinstance(event, ToolDone | UserTurn | AssistantTurn):
                    self._progress()
                elif isinstance(event, Finished):
                    at_limit = event.reason == "max_turns"
            note = f"[stopped at its turn limit ({self.settings.max_turns})]\n" if at_limit else ""
            self._end(TaskStatus.COMPLETED, self._report(note + engine.last_text()))
        except asyncio.CancelledError:
            self._end(TaskStatus.KILLED, self._report("[stopped before it finished]"))
            raise
        except Exception as exc:  # a model or store failure ends the dream, not the session
            self._end(TaskStatus.FAILED, self._report(""), error=reason(exc))
        finally:
            await finish_despite_cancel(self._closed())

    def _first_prompt(self) -> str:
        return (
            "The memory directories to tidy, and their files:\n\n"
            f"{self.scope.listing()}\n\nTidy them now."
        )

    def _progress(self) -> None:
        tokens, calls = self.dreamer.budgets.used(self.task_id)
        changes, turns = len(self.changes), self.turns
        self.runtime.update(
            self.task_id,
            lambda s: s.replace(changes=changes, total_tokens=tokens, tool_uses=calls, turns=turns),
        )

    def _changed(self, change: Change) -> None:
        """A tool changed a file: the change list in the output grows at once."""
        self.changes.append(change)
        self._say(change.line() + "\n")
        if change.removed_text:
            kept = "".join(f"    {line}\n" for line in change.removed_text.splitlines())
            self._say(f"  its text was:\n{kept}")

    def _report(self, summary: str) -> str:
        """The change list, indexes still over their caps, then the dream's own summary."""
        lines = [f"Changes ({len(self.changes)}):"] if self.changes else ["No changes."]
        lines += [change.line() for change in self.changes]
        for directory in self.scope.directories:
            try:
                problem = index_problem((directory / INDEX).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                continue  # none, or unreadable: nothing to say of its caps
            if problem is not None:
                lines.append(f"Still over its caps: {directory / INDEX}: {problem}")
        if summary.strip():
            lines += ["", summary.strip()]
        return "\n".join(lines)

    def _end(self, status: TaskStatus, result: str, error: str | None = None) -> None:
        """Record its end (once: a kill that already ended it wins) and write its report."""
        self._progress()
        state = self.runtime.get(self.task_id)
        if state is None or state.terminal:
            return
        self.runtime.update(
            self.task_id,
            lambda s: s if s.terminal else s.replace(status=status, result=result, error=error),
        )
        self._say(f"\n{result}\n" + (f"Failed: {error}\n" if error else ""))

    async def _closed(self) -> None:
        self.dreamer.budgets.close(self.task_id)
        if self._output is not None:
            self._output.close()
            self._output = None

    def _say(self, text: str) -> None:
        if self._output is not None:
            self._output.append(text)


__all__ = ["DEFAULTS", "PROMPT", "DreamRun", "DreamSettings", "Dreamer", "memory_targets"]
