"""What a stuck agent's tool calls look like: the patterns the agent watchdog reports.

An agent that makes progress by the watchdog's count (it calls tools) may still go nowhere.
:class:`StuckPatterns` is told of each tool call an agent made, with its result, and says when
the calls so far show one of these:

- ``repeat``: the same call (tool and input) :data:`REPEATS` times in a row;
- ``sleep``: a ``sleep N`` polling loop: :data:`SLEEPS` Bash commands that start with a sleep
  among its last :data:`WINDOW` calls;
- ``unknown task``: waiting on a task that does not exist: :data:`UNKNOWN_WAITS` calls of the
  task tools (``TaskOutput``, ``TaskStop``, ``job_output``, ``job_kill`` and their older names)
  among its last :data:`WINDOW`, each for an id no task of the session has.

Once a pattern is reported what was seen is forgotten, so the same loop going on is reported
again only after as many calls again.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from taskloom._dataclass import dataclass

#: The same call this many times in a row is a loop.
REPEATS = 5
#: Sleep commands among the last :data:`WINDOW` calls that make a polling loop.
SLEEPS = 3
#: Calls for tasks that do not exist, among the last :data:`WINDOW`, that make a wait on one.
UNKNOWN_WAITS = 3
#: How many of its latest calls the sleep and unknown-task patterns look at.
WINDOW = 6

#: The tools that wait on or act on a task by its id, and the fields that name it.
TASK_TOOLS = frozenset({"TaskOutput", "TaskStop", "BashOutput", "KillShell", "KillBash"})
TASK_TOOLS |= {"job_output", "job_kill"}
_ID_FIELDS = ("task_id", "shell_id", "bash_id", "job_id")
#: A command that is, or starts with, a sleep (``sleep 5``, ``sleep 10 && cat out.log``).
_SLEEP = re.compile(r"^\s*sleep\s+\d+(?:\.\d+)?[smhd]?\s*(?:$|;|&&|\|\||\n)")
#: The most characters of a call's input a report shows.
SHOWN_INPUT = 200


#: What each pattern says the agent does, for the summary its owner reads.
DOING = {
    "repeat": "it repeats the same call",
    "sleep": "it polls with sleep commands",
    "unknown task": "it waits on a task that does not exist",
}


@dataclass(frozen=True)
class Stuck:
    """A pattern found: which, and what the agent repeats (for its owner to read)."""

    pattern: str
    what: str

    @property
    def doing(self) -> str:
        """What the agent does, in a few words (``it repeats the same call``)."""
        return DOING[self.pattern]


class StuckPatterns:
    """Finds the stuck patterns in one agent's calls (see the module docstring)."""

    def __init__(self, task_exists: Callable[[str], bool]) -> None:
        """``task_exists(id)`` says whether the session has a task of that id (or name)."""
        self._exists = task_exists
        self._last: str | None = None
        self._streak = 0
        self._recent: deque[str] = deque(maxlen=WINDOW)  # "sleep", "unknown" or ""

    def saw(self, name: str, call_input: Mapping[str, Any], is_error: bool) -> Stuck | None:
        """One more call, its result in; the pattern it completes, if any."""
        key = f"{name} {json.dumps(call_input, sort_keys=True, default=str)}"
        self._streak = self._streak + 1 if key == self._last else 1
        self._last = key
        unknown = self._unknown_task(name, call_input, is_error)
        self._recent.append("sleep" if _is_sleep(name, call_input) else unknown)
        found: Stuck | None = None
        if self._streak >= REPEATS:
            found = Stuck("repeat", f"the same call {REPEATS} times in a row: {_shown(key)}")
        elif self._recent.count("sleep") >= SLEEPS:
            found = Stuck(
                "sleep",
                f"a sleep polling loop: {SLEEPS} sleep commands in its last "
                f"{len(self._recent)} calls, the latest {_shown(key)}",
            )
        elif self._recent.count("unknown") >= UNKNOWN_WAITS:
            found = Stuck(
                "unknown task",
                f"waiting on a task that does not exist: {UNKNOWN_WAITS} calls for unknown "
                f"task ids in its last {len(self._recent)} calls, the latest {_shown(key)}",
            )
        if found is not None:
            self._last, self._streak = None, 0
            self._recent.clear()
        return found

    def _unknown_task(self, name: str, call_input: Mapping[str, Any], is_error: bool) -> str:
        if name not in TASK_TOOLS or not is_error:
            return ""
        ids = [v for f in _ID_FIELDS if isinstance(v := call_input.get(f), str) and v]
        return "unknown" if ids and not any(self._exists(i) for i in ids) else ""


def _is_sleep(name: str, call_input: Mapping[str, Any]) -> bool:
    command = call_input.get("command")
    if name != "Bash" or not isinstance(command, str) or call_input.get("run_in_background"):
        return False
    return _SLEEP.match(command) is not None


def _shown(key: str) -> str:
    return key if len(key) <= SHOWN_INPUT else key[:SHOWN_INPUT] + "…"


__all__ = ["REPEATS", "SLEEPS", "TASK_TOOLS", "UNKNOWN_WAITS", "WINDOW", "Stuck", "StuckPatterns"]
