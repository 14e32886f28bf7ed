"""How long an owner waits for tasks that have no end of their own.

A headless run does not end while a task it owns runs: it waits to tell the model how each
ended. Agents end by themselves (an answer, their turns, their budget); a background command
may not (a dev server, ``tail -f``). So an owner that is done and waits arms a bound on each
such task: once it has waited ``seconds`` for it, the task is stopped, saying why, and its
notification (``… was stopped: the run waited 600 s for it to end …``) starts the model's
next turn like any other. Only the time the owner spends waiting counts, in all: the time the
task ran while the model was at work (or the session idle) is not held against it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from taskloom.tasks.kinds import kind_of
from taskloom.tasks.runtime import TaskRuntime

log = logging.getLogger(__name__)

#: Default seconds an owner waits for a task with no end of its own (setting taskWaitSeconds).
DEFAULT_TASK_WAIT_S = 1800.0

#: The setting that changes it (0 or less: such tasks are stopped as soon as the wait starts).
SETTING = "taskWaitSeconds"


class WaitBound:
    """How long one owner has waited for each of its tasks with no end of their own.

    Only time spent waiting counts: :meth:`arm` when the owner starts to wait, :meth:`pause`
    when it stops (a notification woke it, the run ended or was interrupted). A task is stopped
    once the owner has waited ``seconds`` for it in all.
    """

    def __init__(self, runtime: TaskRuntime, owner: str, seconds: float) -> None:
        """Bound ``owner``'s waits for its tasks to ``seconds`` each, in all."""
        self.runtime = runtime
        self.owner = owner
        self.seconds = max(0.0, seconds)
        #: Seconds waited for each task in earlier waits.
        self._waited: dict[str, float] = {}
        #: The running bounds: how to disarm each, and when its wait started.
        self._armed: dict[str, tuple[Callable[[], None], float]] = {}

    def arm(self) -> None:
        """Bound the owner's live tasks that have no end of their own, from now.

        Each task waited for the first time is stated in the log: what is waited for, and for
        how long at most.
        """
        from taskloom.tasks.watchdog import Watch  # loaded when a wait is bounded

        fresh = [
            s
            for s in self.runtime.live(self.owner)
            if s.exit_policy != "detach"
            and s.id not in self._armed
            and not kind_of(s).ends_by_itself(s)
        ]
        now = self.runtime.watchdog.clock.monotonic()
        for state in fresh:
            left = self.seconds - self._waited.get(state.id, 0.0)
            watch = Watch(
                task_id=f"{state.id}#wait",
                stall_after=None,
                deadline=now + max(0.0, left),
                on_deadline=functools.partial(self._stop, state.id),
            )
            self._armed[state.id] = (self.runtime.watchdog.watch(watch), now)
            if state.id not in self._waited:
                self._waited[state.id] = 0.0
                log.warning(
                    "waiting at most %g s for %s (%s) to end; then it is stopped (setting %s)",
                    self.seconds,
                    kind_of(state).label(state),
                    state.id,
                    SETTING,
                )

    def pause(self) -> None:
        """The owner waits no more for now: what it waited is kept, the bounds disarmed."""
        now = self.runtime.watchdog.clock.monotonic()
        armed, self._armed = self._armed, {}
        for task_id, (disarm, since) in armed.items():
            disarm()
            self._waited[task_id] = self._waited.get(task_id, 0.0) + now - since

    async def _stop(self, task_id: str) -> None:
        disarm, _ = self._armed.pop(task_id, (lambda: None, 0.0))
        disarm()
        state = self.runtime.get(task_id)
        if state is None or state.terminal:
            return
        reason = (
            f"the run waited {self.seconds:g} s for it to end (setting {SETTING}); "
            "start it again if it is still needed"
        )
        self.runtime.update(task_id, lambda s: s.replace(stopped_reason=reason))
        await self.runtime.kill(task_id)


def task_wait_seconds(settings: dict[str, object]) -> float:
    """The ``taskWaitSeconds`` setting, else the default (a value not a number: the default)."""
    value = settings.get(SETTING)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return DEFAULT_TASK_WAIT_S
