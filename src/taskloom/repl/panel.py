"""The REPL's live task panel: one row per shell, agent and teammate of the session.

The panel is fed the runtime's task events and keeps the latest state of each task. A running
background task has a row at once; a foreground one (a call the model waits on) only once it
has run :data:`FOREGROUND_AFTER_S`, which is when the user wants to know it is still going
and that Ctrl+B would send it to the background. An ended task keeps its row for the grace
period (the setting ``panelGraceMs``, 30 s by default) so that its outcome can be read, then
the row goes. Below the rows, the main thread's todo list (TodoWrite) shows as it stands
(:func:`todo_lines`). Nothing here draws: :meth:`TaskPanel.lines` gives the text, and
:meth:`TaskPanel.next_change` when it would change without an event (a second of elapsed time,
a grace period over), so that the screen is redrawn on events and on those times only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prompt_toolkit.utils import get_cwidth

from taskloom._dataclass import dataclass
from taskloom.clock import span
from taskloom.tasks.kinds import Progress, kind_of
from taskloom.tasks.types import TaskState, TaskStatus
from taskloom.tools.todo import Todo

#: A foreground task shows its progress once it has run this long.
FOREGROUND_AFTER_S = 2.0
#: How long an ended task's row stays, unless the setting ``panelGraceMs`` says otherwise.
DEFAULT_GRACE_S = 30.0
#: Cells of the description column.
_LABEL_CELLS = 28
#: How long a row's progress is shown before its kind is asked again (with no event).
_PROGRESS_TTL_S = 1.0

_ENDINGS = {
    TaskStatus.COMPLETED: "done",
    TaskStatus.FAILED: "failed",
    TaskStatus.KILLED: "stopped",
}


def grace_from(settings: Mapping[str, Any]) -> float:
    """The panel's grace period in seconds: the setting ``panelGraceMs``, else 30 s."""
    raw = settings.get("panelGraceMs")
    if isinstance(raw, int | float) and not isinstance(raw, bool) and raw >= 0:
        return float(raw) / 1000.0
    return DEFAULT_GRACE_S


@dataclass(slots=True)
class _Row:
    state: TaskState
    #: When the panel saw it end (monotonic), None while it runs.
    ended: float | None = None
    #: When the panel first saw it (monotonic): a foreground task's 2 s count from here.
    seen: float = 0.0
    #: Its progress as last asked of its kind, and when (a shell's is read from its file:
    #: asked again on a change of state or after a second, not on every redraw).
    progress: Progress | None = None
    progress_at: float = 0.0


class TaskPanel:
    """The tasks to show, from the runtime's events.

    Args:
        session_id: The session's id (the main thread's tasks are its own).
        grace_s: How long an ended task's row stays.
        clock: Monotonic time (a parameter for the tests).
        wall: Wall-clock time, in which task start times are kept.
    """

    def __init__(
        self,
        session_id: str,
        *,
        grace_s: float = DEFAULT_GRACE_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.session_id = session_id
        self.grace_s = grace_s
        self._clock = clock
        self._wall = wall
        self._rows: dict[str, _Row] = {}

    def update(self, state: TaskState) -> None:
        """Take a task's latest state (registered, updated, or evicted from the runtime)."""
        now = self._clock()
        row = self._rows.get(state.id)
        if row is None:
            if state.terminal and state.end_time is not None:
                # Seen first after its end (resumed session): its grace counts from its end.
                ended = now - max(0.0, self._wall() - state.end_time)
                if now - ended >= self.grace_s:
                    return
                self._rows[state.id] = _Row(state, ended, now)
                return
            self._rows[state.id] = _Row(state, now if state.terminal else None, now)
            return
        row.state, row.progress = state, None
        if state.terminal and row.ended is None:
            row.ended = now

    def clear(self) -> None:
        """Forget every row (a new session)."""
        self._rows.clear()

    def _visible(self, now: float) -> list[_Row]:
        shown = []
        for task_id, row in list(self._rows.items()):
            if row.ended is not None:
                if now - row.ended >= self.grace_s:
                    del self._rows[task_id]  # its grace is over: gone for good
                    continue
                if not row.state.is_backgrounded and row.ended - row.seen < FOREGROUND_AFTER_S:
                    continue  # a foreground call that ended quickly never had a row
            elif not row.state.is_backgrounded and now - row.seen < FOREGROUND_AFTER_S:
                continue
            shown.append(row)
        return shown

    def shows_rows(self) -> bool:
        """Whether any row is to be drawn now."""
        return bool(self._visible(self._clock()))

    def running(self) -> list[TaskState]:
        """The tasks that have not ended, oldest first."""
        return [r.state for r in self._rows.values() if not r.state.terminal]

    def foreground(self) -> list[TaskState]:
        """The main thread's running foreground tasks (what Ctrl+B sends to the background)."""
        return [
            r.state
            for r in self._rows.values()
            if not r.state.terminal
            and not r.state.is_backgrounded
            and r.state.owner == self.session_id
        ]

    def lines(self, width: int, limit: int | None = None) -> list[tuple[str, str]]:
        """The rows to draw now, each ``(style, text)`` cut to ``width`` columns.

        With more rows than ``limit``, the first ``limit - 1`` are drawn — foreground work
        first, then what runs, then what ended — and a last line says how many more there
        are. Styles: ``running``, ``foreground``, ``done``, ``failed``, ``stopped``, ``note``.
        """
        now = self._clock()
        wall = self._wall()
        out = []
        rows = self._visible(now)
        hidden: list[_Row] = []
        if limit is not None and len(rows) > max(1, limit):
            rows.sort(key=lambda r: (r.state.terminal, r.state.is_backgrounded))
            rows, hidden = rows[: max(1, limit) - 1], rows[max(1, limit) - 1 :]
        for row in rows:
            state = row.state
            kind = kind_of(state)
            if row.progress is None or now - row.progress_at >= _PROGRESS_TTL_S:
                row.progress, row.progress_at = kind.progress(state), now
            progress = row.progress
            if state.terminal:
                status = _ENDINGS.get(state.status, state.status.value)
                style = status
                seconds = (state.end_time or wall) - state.start_time
            else:
                status = "fg · ctrl+b to background" if not state.is_backgrounded else "running"
                style = "running" if state.is_backgrounded else "foreground"
                seconds = wall - state.start_time
            label = _cells(kind.title(state).replace("\n", " "), _LABEL_CELLS)
            parts = [f"{state.id:<10} {kind.short_noun():<8} {label} {span(seconds):>6}"]
            parts.append(status)
            if progress.tool_uses is not None:
                uses = progress.tool_uses
                parts.append(f"{uses} tool use" + ("" if uses == 1 else "s"))
            if progress.tokens is not None:
                parts.append(f"{count(progress.tokens)} tokens")
            below = progress.subtree_tool_uses
            if below is not None and progress.tool_uses is not None and below > progress.tool_uses:
                # Its agents' work too: what its budgets count.
                parts.append(f"with its agents {count(progress.subtree_tokens or 0)} tokens")
            if progress.subtree_cost_usd:  # with its agents': what it has cost so far
                cost = progress.subtree_cost_usd
                parts.append(f"${cost:.2f}" if cost >= 0.01 else f"${cost:.4f}")
            if progress.activity:
                parts.append(progress.activity)
            if state.owner != self.session_id and kind.shows_owner:
                parts.append(f"(for {state.owner})")
            text = " · ".join(parts)
            out.append((style, _fit(text, width)))
        if hidden:
            running = sum(not r.state.terminal for r in hidden)
            more = f"… {len(hidden)} more ({running} running, {len(hidden) - running} ended)"
            out.append(("note", _fit(f"{more} · /tasks lists them", width)))
        return out

    def next_change(self) -> float | None:
        """Seconds until the rows change with no event (elapsed time, a grace over), or None."""
        now = self._clock()
        waits = []
        for row in self._rows.values():
            if row.ended is not None:
                waits.append(self.grace_s - (now - row.ended))
            elif not row.state.is_backgrounded and now - row.seen < FOREGROUND_AFTER_S:
                waits.append(FOREGROUND_AFTER_S - (now - row.seen))
            else:
                waits.append(1.0)  # its elapsed time goes up by a second
        return max(0.0, min(waits)) if waits else None


#: How a todo's status shows in the panel: its mark and its style.
_TODO_MARKS = {"completed": ("☒", "done"), "in_progress": ("◼", "foreground"), "pending": ("☐", "")}


def todo_lines(todos: Sequence[Todo], width: int, limit: int) -> list[tuple[str, str]]:
    """The main thread's todo list as the panel draws it: one ``(style, text)`` line each.

    With more items than ``limit``, the first ``limit - 1`` are drawn and a last line says how
    many more there are.
    """
    shown = list(todos) if len(todos) <= max(1, limit) else list(todos)[: max(1, limit) - 1]
    out = []
    for todo in shown:
        mark, style = _TODO_MARKS[todo.status]
        out.append((style, _fit(f"{mark} {todo.content}", width)))
    if len(shown) < len(todos):
        out.append(("note", _fit(f"… {len(todos) - len(shown)} more todos", width)))
    return out


def count(n: int) -> str:
    """A token count as the panel writes it (``950``, ``12.3k``, ``1.2M``)."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal cells (a wide character takes two), with ``…``."""
    if width <= 1 or get_cwidth(text) <= width:
        return text
    return _take(text, width - 1)[0] + "…"


def _cells(text: str, width: int) -> str:
    """``text`` as a column exactly ``width`` cells wide: cut (no ellipsis), or padded."""
    taken, used = _take(text, width)
    return taken + " " * (width - used)


def _take(text: str, width: int) -> tuple[str, int]:
    """The longest start of ``text`` within ``width`` cells, and the cells it takes."""
    used, out = 0, []
    for char in text:
        cells = get_cwidth(char)
        if used + cells > width:
            break
        out.append(char)
        used += cells
    return "".join(out), used


__all__ = [
    "DEFAULT_GRACE_S",
    "FOREGROUND_AFTER_S",
    "TaskPanel",
    "count",
    "grace_from",
    "todo_lines",
]
