"""The in-memory task states of a session, indexed by owner and by what still runs.

A session that fans out to thousands of agents holds thousands of states, and each agent asks
about its own tasks on every turn (its ``<task-statuses>``, whether it must wait, what to stop
when it ends), as every spawn asks how many agents run: a question about one owner must cost
what that owner's tasks cost, and a count of the live agents must not read every state.
:class:`TaskTable` keeps each state once, by id, with the ids of each owner's tasks and a count
of the live tasks of each type.
"""

from __future__ import annotations

from collections.abc import Iterator, ValuesView
from typing import TypeVar

from taskloom.tasks.types import TERMINAL, TaskState, TaskType

K = TypeVar("K")


class TaskTable:
    """Task states by id, indexed by owner, counting live ones by type (see the module doc)."""

    def __init__(self) -> None:
        """Hold no state."""
        self._states: dict[str, TaskState] = {}
        # Insertion-ordered id sets (dicts), one per owner with a task in memory.
        self._by_owner: dict[str, dict[str, None]] = {}
        # Plain dicts, not Counters: a Counter's __missing__ and __delitem__ are Python code,
        # and every task of a churn adds one and takes it away.
        self._live: dict[TaskType, int] = {}
        # The live ones of each owner too: the main thread of a fan-out asks which of its
        # thousands still run each time one ends.
        self._live_by_owner: dict[str, dict[str, None]] = {}

    def __len__(self) -> int:
        """How many states are held."""
        return len(self._states)

    def __iter__(self) -> Iterator[str]:
        """The ids held (iterate over a copy to change the table meanwhile)."""
        return iter(self._states)

    def __contains__(self, task_id: object) -> bool:
        """Whether the state of ``task_id`` is held."""
        return task_id in self._states

    def get(self, task_id: str) -> TaskState | None:
        """The state of ``task_id``, if held."""
        return self._states.get(task_id)

    def values(self) -> ValuesView[TaskState]:
        """Every state held."""
        return self._states.values()

    def put(self, state: TaskState) -> None:
        """Hold ``state``, replacing the one of the same id."""
        task_id = state.id
        old = self._states.get(task_id)
        self._states[task_id] = state
        live = state.status not in TERMINAL
        if old is not None and old.owner == state.owner and old.type == state.type:
            # An update (every task has several): only its end moves it, out of the live ones.
            was_live = old.status not in TERMINAL
            if was_live and not live:
                _decrement(self._live, state.type)
                _discard(self._live_by_owner, state.owner, task_id)
            elif live and not was_live:  # resumed
                self._live[state.type] = self._live.get(state.type, 0) + 1
                self._live_by_owner.setdefault(state.owner, {})[task_id] = None
            return
        self._unindex(old)
        self._by_owner.setdefault(state.owner, {})[task_id] = None
        if live:
            self._live[state.type] = self._live.get(state.type, 0) + 1
            self._live_by_owner.setdefault(state.owner, {})[task_id] = None

    def remove(self, task_id: str) -> TaskState | None:
        """Stop holding ``task_id``'s state; the state, or None if it was not held."""
        state = self._states.pop(task_id, None)
        self._unindex(state)
        return state

    def _unindex(self, state: TaskState | None) -> None:
        if state is None:
            return
        _discard(self._by_owner, state.owner, state.id)
        if not state.terminal:
            _decrement(self._live, state.type)
            _discard(self._live_by_owner, state.owner, state.id)

    def owned(self, owner: str) -> list[TaskState]:
        """The states of ``owner``'s tasks, in the order they were first held."""
        ids = self._by_owner.get(owner, {})
        return [self._states[task_id] for task_id in ids]

    def live_owned(self, owner: str) -> list[TaskState]:
        """The states of ``owner``'s tasks that have not ended, in the order first held."""
        ids = self._live_by_owner.get(owner, {})
        return [self._states[task_id] for task_id in ids]

    def live_counts(self) -> dict[TaskType, int]:
        """How many held tasks of each type have not ended (types with none left out)."""
        return {task_type: n for task_type, n in self._live.items() if n}

    def has_live(self, owner: str | None = None) -> bool:
        """Whether a held task (of ``owner``) has not ended."""
        if owner is None:
            return any(self._live.values())
        return owner in self._live_by_owner


def _discard(index: dict[str, dict[str, None]], owner: str, task_id: str) -> None:
    ids = index.get(owner)
    if ids is not None:
        ids.pop(task_id, None)
        if not ids:
            del index[owner]


def _decrement(counter: dict[K, int], key: K) -> None:
    left = counter.get(key, 0) - 1
    if left > 0:
        counter[key] = left
    else:
        counter.pop(key, None)


__all__ = ["TaskTable"]
