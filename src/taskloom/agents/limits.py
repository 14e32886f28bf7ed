"""Spawning limits: how many agents run at once, how deep they nest, how many one turn asks for.

Three settings bound what models may start (each a whole number of at least 1; anything else
makes the Agent call a tool error naming the setting):

- ``maxConcurrentAgents`` (default 20): the session's live agents. Counted are every agent
  task of the session that has not ended — subagents at any depth, foreground or background,
  forks, remote agents and teammates (working or idle) — plus the spawns and resumes under
  way; the main thread is not one of them. A spawn beyond it is refused, and so is a resume
  (SendMessage to an ended agent), which would make one more live agent just as a spawn does.
- ``maxAgentDepth`` (default 3): how deep agents nest. The main thread is depth 0, the agents
  it starts (teammates too) depth 1, theirs 2; an agent at the deepest level may start none.
- ``maxAgentsPerTurn`` (default 10): the fan-out guard. One model answer holding more Agent
  calls than this has the calls beyond it refused, unless its prompt asked for that many:
  the latest prompt the caller was given (the user's, or its parent's task for an agent)
  holds a number (digits, or an English number word) at least as large as the answer's
  count of Agent calls.

The refusals are tool errors naming the limit, the figure and the setting that raises it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from taskloom.errors import ToolError
from taskloom.messages import Message, TextBlock, ToolResultBlock
from taskloom.tasks.kinds import kind_of

if TYPE_CHECKING:
    from taskloom.tasks.runtime import TaskRuntime

MAX_CONCURRENT = "maxConcurrentAgents"
MAX_DEPTH = "maxAgentDepth"
MAX_PER_TURN = "maxAgentsPerTurn"
DEFAULTS = {MAX_CONCURRENT: 20, MAX_DEPTH: 3, MAX_PER_TURN: 10}

#: The Agent tool's names: a call by its older name spawns too.
AGENT_TOOLS = frozenset({"Agent", "Task"})

_UNITS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90, "hundred": 100,
}  # fmt: skip
_TEN_WORDS, _UNIT_WORDS = "|".join(_TENS), "|".join(_UNITS)
#: A number in digits, or in words (``twelve``, ``twenty-four``, ``thirty one``).
_NUMBER = re.compile(
    rf"\b(?:(\d{{1,6}})|({_TEN_WORDS})(?:[\s-]+({_UNIT_WORDS}))?|({_UNIT_WORDS}))\b",
    re.IGNORECASE,
)
#: What the harness wraps around a prompt that is not the asker's own words.
_NOT_ASKED = re.compile(r"<(task-notification|system-reminder)>.*?</\1>", re.DOTALL | re.IGNORECASE)


def limit(settings: Mapping[str, Any], key: str) -> int:
    """The setting ``key`` (one of :data:`DEFAULTS`), or its default.

    Raises:
        ToolError: The value is not a whole number of at least 1.
    """
    raw = settings.get(key)
    if raw is None:
        return DEFAULTS[key]
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise ToolError(
            f"Not started: the setting {key} must be a whole number of agents (at least 1), "
            f"got {raw!r}; fix it in the settings file."
        )
    return raw


class Slot:
    """A spawn under way, counted until its agent is registered (or the spawn ends)."""

    def __init__(self, limits: SpawnLimits) -> None:
        """Hold a place in ``limits``' count."""
        self._limits: SpawnLimits | None = limits
        limits.pending += 1

    def release(self) -> None:
        """The agent is registered (counted as live now), or will not be: once."""
        if self._limits is not None:
            self._limits.pending -= 1
            self._limits = None


class SpawnLimits:
    """Admits spawns and resumes under ``maxConcurrentAgents`` and ``maxAgentDepth``."""

    def __init__(self, runtime: TaskRuntime, settings: Callable[[], Mapping[str, Any]]) -> None:
        """Count the agents of ``runtime``'s session, as the effective ``settings()`` bound."""
        self.runtime = runtime
        self._settings = settings
        #: Spawns and resumes admitted whose agent is not registered yet: a turn's parallel
        #: Agent calls are admitted before any of them registers, and must count one another.
        self.pending = 0

    def live(self) -> int:
        """The session's agents that have not ended, and the spawns and resumes under way."""
        states = self.runtime.list()
        return self.pending + sum(1 for s in states if kind_of(s).is_agent and not s.terminal)

    def depth(self, owner: str) -> int:
        """How deep ``owner`` (a caller's task id, or the session's for the main thread) is."""
        depth, seen = 0, set()
        current: str | None = owner
        while current is not None and current not in seen:
            seen.add(current)
            state = self.runtime.get(current)
            if state is None or not kind_of(state).is_agent:
                break
            depth += 1
            current = state.owner
        return depth

    def admit(self, owner: str) -> Slot:
        """A slot for an agent ``owner`` starts; release it once the agent is registered.

        Synchronous: the check and the slot are one step, so parallel spawns count each other.

        Raises:
            ToolError: A limit is reached, or a limit's setting is not a whole number.
        """
        settings = self._settings()
        deepest = limit(settings, MAX_DEPTH)
        depth = self.depth(owner)
        if depth >= deepest:
            raise ToolError(
                f"Not started: agents may nest at most {deepest} deep (setting {MAX_DEPTH}, "
                f"default {DEFAULTS[MAX_DEPTH]}) and this agent is at depth {depth} (the main "
                f"thread is 0). Do this work yourself, or raise {MAX_DEPTH} in the settings."
            )
        self._check_room("Not started", settings)
        return Slot(self)

    def admit_resume(self, agent_id: str) -> Slot:
        """A slot for the ended agent ``agent_id`` to run again; release it once registered.

        A resume makes one more live agent, as a spawn does, so ``maxConcurrentAgents``
        bounds it; its depth was admitted when it was spawned. Synchronous, as :meth:`admit`.

        Raises:
            ToolError: ``maxConcurrentAgents`` is reached (the same words as a refused spawn,
                saying it was not resumed), or its setting is not a whole number.
        """
        self._check_room(f"Agent {agent_id} was not resumed", self._settings())
        return Slot(self)

    def _check_room(self, refused: str, settings: Mapping[str, Any]) -> None:
        most = limit(settings, MAX_CONCURRENT)
        running = self.live()
        if running >= most:
            raise ToolError(
                f"{refused}: {running} agents are running in this session, the most allowed "
                f"(setting {MAX_CONCURRENT}, default {DEFAULTS[MAX_CONCURRENT]}). Wait for one "
                f"to end (or stop one with TaskStop), or raise {MAX_CONCURRENT} in the settings."
            )


def fan_out_refusal(
    messages: list[Message], tool_use_id: str | None, settings: Mapping[str, Any]
) -> str | None:
    """Why the Agent call ``tool_use_id`` of the latest answer is refused, or None.

    Raises:
        ToolError: ``maxAgentsPerTurn`` is not a whole number.
    """
    most = limit(settings, MAX_PER_TURN)
    answer = _answer_with(messages, tool_use_id) if tool_use_id is not None else None
    if answer is None or tool_use_id is None:
        return None
    spawns = [c.id for c in answer.tool_uses() if c.name in AGENT_TOOLS]
    if len(spawns) <= most or spawns.index(tool_use_id) < most:
        return None
    asked = asked_for(messages)
    if asked >= len(spawns):
        return None
    told = f"the request asked for {asked}" if asked else "the request named no number"
    return (
        f"Not started: this answer asks for {len(spawns)} agents, more than the {most} one "
        f"turn may start unless the request asked for that many ({told}); the calls beyond "
        f"the first {most} are refused. Start the others once those report, if they are "
        f"still needed, or raise the setting {MAX_PER_TURN} (default {DEFAULTS[MAX_PER_TURN]})."
    )


def _answer_with(messages: list[Message], tool_use_id: str) -> Message | None:
    """The assistant message holding the call ``tool_use_id`` (the latest one, from the end)."""
    for message in reversed(messages):
        if message.role == "assistant" and any(c.id == tool_use_id for c in message.tool_uses()):
            return message
    return None


def asked_for(messages: list[Message]) -> int:
    """The largest number in the latest prompt of ``messages`` (0: none).

    The prompt is the latest user message that carries no tool results, less what the
    harness wraps around it (notifications, reminders): the asker's own words.
    """
    for message in reversed(messages):
        if message.role != "user" or any(isinstance(b, ToolResultBlock) for b in message.content):
            continue
        text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
        text = _NOT_ASKED.sub(" ", text)
        if text.strip():
            return max((_value(m) for m in _NUMBER.finditer(text)), default=0)
    return 0


def _value(match: re.Match[str]) -> int:
    digits, tens, unit, alone = match.groups()
    if digits:
        return int(digits)
    if tens:
        return _TENS[tens.lower()] + (_UNITS[unit.lower()] if unit else 0)
    return _UNITS[alone.lower()]


__all__ = [
    "AGENT_TOOLS",
    "DEFAULTS",
    "MAX_CONCURRENT",
    "MAX_DEPTH",
    "MAX_PER_TURN",
    "Slot",
    "SpawnLimits",
    "asked_for",
    "fan_out_refusal",
    "limit",
]
