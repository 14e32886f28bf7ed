"""The watchdog for agents: no model output and no tool progress → tell its owner → stop it.

The shells' watchdog (:mod:`taskloom.tasks.watchdog`) serves agents too: an agent's progress
probe is its engine's count of model stream events and tool calls started and ended. With the
setting ``watchdog.agents`` (``{"notifyAfterMs", "stopAfterMs", "checkEveryMs"}``), an agent
with no progress for ``notifyAfterMs`` gets its owner one ``stall`` notification (priority
``next``); still none ``stopAfterMs`` after its last progress, it is stopped, saying why. Off
unless set. The output its live commands write counts as progress too; a long tool call that
shows nothing does not.

An agent that calls tools but goes nowhere is watched too, always (:func:`watch_stuck`): the
same call repeated, a ``sleep N`` polling loop, waits on a task that does not exist
(:mod:`taskloom.agents.stuck`) get its owner a ``stuck`` notification (priority ``next``)
naming the agent and what it repeats; with ``watchdog.agents.onStuck`` ``"stop"`` it is stopped
instead, saying why, and with ``"off"`` nothing is watched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from taskloom.agents.stuck import Stuck, StuckPatterns
from taskloom.engine import Engine
from taskloom.messages import ToolUseBlock
from taskloom.tasks.narrow import as_agent
from taskloom.tasks.notifications import render_notification
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import TaskState
from taskloom.tasks.watchdog import Watch
from taskloom.tools.base import ToolResult

#: Seconds between checks unless ``checkEveryMs`` says.
CHECK_EVERY_S = 5.0


def agent_watch_settings(settings: Mapping[str, Any]) -> tuple[float, float | None, float] | None:
    """``(notify_after, stop_after, check_every)`` in seconds, or None when it is off."""
    raw = (settings.get("watchdog") or {}) if isinstance(settings, Mapping) else {}
    agents = raw.get("agents") if isinstance(raw, Mapping) else None
    if not isinstance(agents, Mapping):
        return None

    def seconds(key: str) -> float | None:
        value = agents.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            return None
        return float(value) / 1000

    notify = seconds("notifyAfterMs")
    stop = seconds("stopAfterMs")
    if notify is None and stop is None:
        return None
    first = notify if notify is not None else stop
    assert first is not None
    if stop is not None and stop < first:
        stop = first
    return first, stop, seconds("checkEveryMs") or CHECK_EVERY_S


def watch_agent(
    runtime: TaskRuntime,
    agent_id: str,
    engine: Engine,
    settings: Mapping[str, Any],
    stop: Callable[[str, str], Coroutine[Any, Any, object]],
    below: Callable[[], int] = lambda: 0,
) -> Callable[[], None] | None:
    """Watch ``agent_id`` as ``settings`` say; the function that stops watching (None: off).

    ``stop(agent_id, why)`` stops it; ``below()`` is the progress of the agents it started
    (one waiting on a working child is not stalled).
    """
    chosen = agent_watch_settings(settings)
    if chosen is None:
        return None
    notify_after, stop_after, check_every = chosen

    def tell() -> None:
        state = runtime.get(agent_id)
        if state is None or state.terminal:
            return
        then = f"; it is stopped after {stop_after:g} s without any" if stop_after else ""
        text = render_notification(
            task_id=agent_id,
            tool_use_id=state.tool_use_id,
            output_file=state.output_file,
            status=state.status.value,
            summary=f'Agent "{state.description}" has made no progress for {notify_after:g} s',
            result=(
                f"No model output and no tool progress for {notify_after:g} s{then}. Stop it "
                "with TaskStop, or send it a message (SendMessage) if it waits for something."
            ),
        )
        runtime.notify(agent_id, text, kind="stall", priority="next")

    stopping: set[asyncio.Task[object]] = set()

    def halt() -> None:
        # A task of its own: the stop may take seconds, and the watchdog's loop serves every
        # shell's watch too.
        why = f"it made no progress (no model output, no tool) for {stop_after:g} s"
        task: asyncio.Task[object] = asyncio.get_running_loop().create_task(stop(agent_id, why))
        stopping.add(task)
        task.add_done_callback(stopping.discard)

    watch = Watch(
        task_id=agent_id,
        probe=lambda: engine.progress + below(),
        stall_after=notify_after,
        check_every=check_every,
        on_stall=tell if stop_after != notify_after else None,
        kill_after_stall=(stop_after - notify_after) if stop_after is not None else None,
        kill=halt if stop_after is not None else None,
    )
    return runtime.watchdog.watch(watch)


#: What ``watchdog.agents.onStuck`` may say; the first is the default.
ON_STUCK = ("notify", "stop", "off")


def on_stuck(settings: Mapping[str, Any]) -> str:
    """``watchdog.agents.onStuck``: ``notify`` (the default), ``stop`` or ``off``.

    A value it does not know is taken as the default: the watch stays on.
    """
    raw = (settings.get("watchdog") or {}) if isinstance(settings, Mapping) else {}
    agents = raw.get("agents") if isinstance(raw, Mapping) else None
    chosen = agents.get("onStuck") if isinstance(agents, Mapping) else None
    return chosen if chosen in ON_STUCK else ON_STUCK[0]


def watch_stuck(
    runtime: TaskRuntime,
    agent_id: str,
    settings: Mapping[str, Any],
    stop: Callable[[str, str], Coroutine[Any, Any, object]],
) -> Callable[[ToolUseBlock, ToolResult], None] | None:
    """What to tell of each call ``agent_id`` made, to find it stuck (None: not watched)."""
    action = on_stuck(settings)
    if action == "off":
        return None
    patterns = StuckPatterns(lambda task_id: runtime.get(task_id) is not None)
    stopping: set[asyncio.Task[object]] = set()

    def saw(call: ToolUseBlock, result: ToolResult) -> None:
        found = patterns.saw(call.name, call.input, result.is_error)
        state = runtime.get(agent_id)
        if found is None or state is None or state.terminal:
            return
        if action == "stop":
            why = f"it looked stuck, repeating {found.what}"
            task = asyncio.get_running_loop().create_task(stop(agent_id, why))
            stopping.add(task)
            task.add_done_callback(stopping.discard)
            return
        runtime.notify(agent_id, _stuck_text(state, found), kind="stuck", priority="next")

    return saw


def _stuck_text(state: TaskState, found: Stuck) -> str:
    agent = as_agent(state)
    name = agent.name if agent is not None else None
    who = f'Agent "{state.description}"' + (f" ({name})" if name else "")
    address = name or state.id
    return render_notification(
        task_id=state.id,
        tool_use_id=state.tool_use_id,
        output_file=state.output_file,
        status=state.status.value,
        summary=f"{who} looks stuck: {found.doing}",
        result=(
            f"{who} looks stuck; it keeps making {found.what}. Tell it what to do instead "
            f"(SendMessage to '{address}'), or stop it with TaskStop."
        ),
    )


__all__ = [
    "CHECK_EVERY_S",
    "ON_STUCK",
    "agent_watch_settings",
    "on_stuck",
    "watch_agent",
    "watch_stuck",
]
