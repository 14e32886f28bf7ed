"""Spawning limits: how many agents run at once, how deep they nest, how many one turn asks for.

Three settings bound what models may start (each a whole number of at least 1; anything else
makes the Agent call a tool error naming the setting):

- ``maxConcurrentAgents`` (default 20): the session's live agents. Counted are every agent
  task of the session that has not ended — subagents at any depth, foreground or background,
  forks, remote agents and teammates (working or idle) — plus the spawns and resumes under
  way; the main thread is not one of them. A spawn beyond it is refused, and so is a resume
  (SendMessage to an ended agent), which would make one more live agent just as a spawn does.
  The count is this process's: a pane teammate (tmux) runs a process of its own, with a
  count of its own for the agents it starts.
- ``maxAgentDepth`` (default 3): how deep agents nest. The main thread is depth 0, the agents
  it starts (teammates too) depth 1, theirs 2; an agent at the deepest level may start none.
- ``maxAgentsPerTurn`` (default 10): the fan-out guard, per caller (the main thread, or each
  agent in its own conversation). The Agent calls it made since its latest prompt — in this
  answer and the earlier answers of the turn, less those that were refused or failed — are
  counted; the calls beyond the first 10 are refused, unless the prompt asked for that many:
  it names a count of agents or work items (a number in digits or English words followed by
  a plural noun such as agents, files or URLs, two words may stand between: ``12 test
  files``) at least as large as the turn's count. A number naming anything else (``line
  404``, ``30 seconds``) does not.

The refusals are tool errors naming the limit, the figure and the setting that raises it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from taskloom.errors import ToolError
from taskloom.messages import Message, TextBlock, ToolResultBlock
from taskloom.tasks.kinds import kind_for, kind_of

if TYPE_CHECKING:
    from taskloom.tasks.runtime import TaskRuntime

MAX_CONCURRENT = "maxConcurrentAgents"
MAX_DEPTH = "maxAgentDepth"
MAX_PER_TURN = "maxAgentsPerTurn"
DEFAULTS = {MAX_CONCURRENT: 20, MAX_DEPTH: 3, MAX_PER_TURN: 10}

T = TypeVar("T")

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
#: Plural nouns after a number that count no work to share out (``2 passes``, ``30 seconds``):
#: any other plural noun may count agents or work items (``12 agents``, ``20 URLs``).
_NOT_WORK = (
    "lines|ports|versions|seconds|secs|minutes|mins|hours|hrs|days|weeks|months|years|times|"
    "percent|bytes|kb|mb|gb|ms|pixels|px|tokens|characters|chars|words|degrees|dollars|cents|"
    "points|passes|rounds|retries|attempts|columns|rows|requests|calls|iterations|levels"
)
#: A count of things: a number in digits or words (``twelve``, ``twenty-four``, ``thirty
#: one``), at most two words (``12 test files``, ``50 of the files``), then a plural noun that
#: is not one of :data:`_NOT_WORK`. ``line 404`` or ``port 8080 service`` count nothing.
_COUNT = (
    rf"\b(?:(\d{{1,6}})|({_TEN_WORDS})(?:[\s-]+({_UNIT_WORDS}))?|({_UNIT_WORDS}))"
    rf"(?:\s+[a-z][\w'-]*){{0,2}}?\s+(?!(?:{_NOT_WORK})\b)[a-z][\w'-]*s\b"
)


@functools.cache
def _count_pattern() -> re.Pattern[str]:
    # Compiled on first use: it takes about 5 ms, which every start-up would pay before its
    # first request, and only a turn that spawns agents reads it.
    return re.compile(_COUNT, re.IGNORECASE)


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
    """Admits spawns and resumes under ``maxConcurrentAgents`` and ``maxAgentDepth``.

    One per process: a pane teammate's process has its own (see the module docstring).
    """

    def __init__(self, runtime: TaskRuntime, settings: Callable[[], Mapping[str, Any]]) -> None:
        """Count the agents of ``runtime``'s session, as the effective ``settings()`` bound."""
        self.runtime = runtime
        self._settings = settings
        #: Spawns and resumes admitted whose agent is not registered yet: a turn's parallel
        #: Agent calls are admitted before any of them registers, and must count one another.
        self.pending = 0

    def live(self) -> int:
        """The session's agents that have not ended, and the spawns and resumes under way."""
        # Counted by type, not by reading every state: each spawn of a fan-out asks.
        counts = self.runtime.live_counts()
        return self.pending + sum(n for t, n in counts.items() if kind_for(t).is_agent)

    def depth(self, owner: str) -> int:
        """How deep ``owner`` (a caller's task id, or the session's for the main thread) is.

        A workflow counts as the agent (or main thread) that started it.
        """
        depth, seen = 0, set()
        current: str | None = owner
        while current is not None and current not in seen:
            seen.add(current)
            state = self.runtime.get(current)
            if state is None:
                break
            kind = kind_of(state)
            if kind.is_agent:
                depth += 1
            elif not kind.owns_tasks:
                break
            # A task that owns tasks without being an agent (a workflow) adds no level: its
            # agents are as deep as its caller's would be.
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

    The calls counted are the caller's since its latest prompt (see :func:`asked_for`): this
    answer's, and those of the turn's earlier answers that were not refused or failed.

    Raises:
        ToolError: ``maxAgentsPerTurn`` is not a whole number.
    """
    most = limit(settings, MAX_PER_TURN)
    counted = _turn_spawns(messages, tool_use_id) if tool_use_id is not None else None
    if counted is None:
        return None
    spawns, place = counted
    if spawns <= most or place < most:
        return None
    asked = asked_for(messages)
    if asked >= spawns:
        return None
    told = f"the request asked for {asked}" if asked else "the request named no count of agents"
    return (
        f"Not started: this turn asks for {spawns} agents, more than the {most} one turn may "
        f"start unless the request asked for that many ({told}); the calls beyond the first "
        f"{most} are refused, and go on being refused until the next prompt. Do the rest with "
        f"the agents you have, or ask the user to name how many agents to start, or raise the "
        f"setting {MAX_PER_TURN} (default {DEFAULTS[MAX_PER_TURN]})."
    )


def _turn_spawns(messages: list[Message], tool_use_id: str) -> tuple[int, int] | None:
    """The turn's count of Agent calls, and the place of ``tool_use_id`` among them.

    None: the call is not in an answer since the latest prompt. An earlier answer's call whose
    result is an error started nothing and is not counted; the answer holding ``tool_use_id``
    has no results yet, and all its calls count.
    """
    prompt = _prompt(messages)
    after = messages[prompt[0] + 1 :] if prompt is not None else messages
    failed = {b.tool_use_id for m in after if m.role == "user" for b in _errors(m)}
    spawns = 0
    for message in after:
        if message.role != "assistant":
            continue
        calls = _agent_calls(message)
        place = calls.get(tool_use_id)
        if place is not None:
            return spawns + len(calls), spawns + place
        spawns += sum(1 for c in calls if c not in failed)
    return None


#: The Agent calls of recent answers, by the answer's id(): an answer of N calls is asked
#: about once per call, and must not be read N times (see :func:`_memo`).
_CALLS: dict[int, tuple[Message, dict[str, int]]] = {}
#: The failed results of recent tool-result messages, likewise.
_ERRORS: dict[int, tuple[Message, list[ToolResultBlock]]] = {}
#: How many messages each memo keeps (the newest: a turn's answers and results).
_MEMO_SIZE = 64


def _agent_calls(message: Message) -> dict[str, int]:
    """The ids of an answer's Agent calls, each with its place among them."""

    def read() -> dict[str, int]:
        calls = [c.id for c in message.tool_uses() if c.name in AGENT_TOOLS]
        return {call: place for place, call in enumerate(calls)}

    return _memo(_CALLS, message, read)


def _errors(message: Message) -> list[ToolResultBlock]:
    """A user message's tool results that are errors."""

    def read() -> list[ToolResultBlock]:
        return [b for b in message.content if isinstance(b, ToolResultBlock) and b.is_error]

    return _memo(_ERRORS, message, read)


def _memo(memo: dict[int, tuple[Message, T]], message: Message, read: Callable[[], T]) -> T:
    """``read()`` for ``message``, kept for the next look at the same message.

    Keyed by identity (the message is kept with it, so its id cannot be reused meanwhile):
    a conversation's messages are not changed once added.
    """
    found = memo.get(id(message))
    if found is not None and found[0] is message:
        return found[1]
    value = read()
    if len(memo) >= _MEMO_SIZE:
        del memo[next(iter(memo))]
    memo[id(message)] = (message, value)
    return value


def _prompt(messages: list[Message]) -> tuple[int, str] | None:
    """The latest prompt of ``messages``: its index, and the asker's own words in it.

    The prompt is the latest user message that carries no tool results and has words of the
    asker's once what the harness wraps around them (notifications, reminders) is taken out.
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "user" or any(isinstance(b, ToolResultBlock) for b in message.content):
            continue
        text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
        text = _NOT_ASKED.sub(" ", text)
        if text.strip():
            return index, text
    return None


def asked_for(messages: list[Message]) -> int:
    """The largest count of agents or work items the latest prompt of ``messages`` names.

    0: none. A count is a number followed by a noun that can mean agents or pieces of work
    (``3 files``, ``twelve agents``, ``12 test files``); see :func:`_prompt` for the prompt.
    """
    prompt = _prompt(messages)
    if prompt is None:
        return 0
    return max((_value(m) for m in _count_pattern().finditer(prompt[1])), default=0)


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
