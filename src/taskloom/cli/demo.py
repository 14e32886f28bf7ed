"""``taskloom demo``: the task runtime at work on a few real shell commands.

Until the engine exists there is no model in the loop: the demo plays the part a model would —
it starts background commands, lets one overrun its foreground timeout, stops one, and prints
the ``<task-notification>`` blocks the model would be shown.
"""

from __future__ import annotations

import asyncio
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

from taskloom.cli._run import run_main
from taskloom.tasks.output import read_tail
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell
from taskloom.tasks.types import TaskState


def _live_table(states: list[TaskState], now: float) -> Table:
    table = Table(show_header=True, header_style="bold", box=None)
    for name in ("task", "status", "elapsed", "description"):
        table.add_column(name)
    for s in states:
        elapsed = (s.end_time or now) - s.start_time
        table.add_row(s.id, s.status.value, f"{elapsed:5.1f}s", s.description)
    return table


async def _demo(console: Console, fast: bool) -> int:
    unit = 0.2 if fast else 1.0
    async with TaskRuntime() as rt:
        console.print(f"[bold]taskloom demo[/bold] — session {rt.session_id}")
        build = await run_shell(
            rt,
            f"echo compiling; sleep {2 * unit}; echo 'build ok'",
            description="build",
            run_in_background=True,
        )
        tests = await run_shell(
            rt,
            f'for i in 1 2 3; do echo "test $i passed"; sleep {unit}; done; '
            "echo 'test 4 FAILED' >&2; exit 1",
            description="tests",
            run_in_background=True,
        )
        server = await run_shell(
            rt,
            "echo 'serving on :8080'; sleep 300",
            description="dev server",
            run_in_background=True,
        )
        console.print("started build, tests and dev server in the background")
        slow = await run_shell(
            rt,
            f"sleep {3 * unit}; echo 'report written'",
            description="report",
            timeout=unit,
        )
        console.print(
            f"'report' passed its {unit:.1f}s foreground timeout: moved to the background "
            f"as {slow.task_id}",
            soft_wrap=True,
        )
        ids = [build.task_id, tests.task_id, slow.task_id]
        live = Live(console=console, auto_refresh=False, transient=True)
        with live if console.is_terminal else _Null():
            deadline = time.monotonic() + 60
            while not all(rt.get(i).terminal for i in ids):  # type: ignore[union-attr]
                states = [rt.get(i) for i in [*ids, server.task_id]]
                if console.is_terminal:
                    live.update(_live_table([s for s in states if s], time.time()), refresh=True)
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
        stopped = await rt.kill(server.task_id)
        console.print(f"stopped the dev server ({stopped.id}): {stopped.status.value}")
        batch = rt.drain()
        console.print(f"\n[bold]{len(batch)} notifications, delivered as one message:[/bold]")
        for note in batch:
            console.print(note.text, markup=False, highlight=False, soft_wrap=True)
        rt.ack(batch)
        failed = rt.get(tests.task_id)
        if failed is not None:
            tail = read_tail(failed.output_file, 200).decode(errors="replace").strip()
            console.print(
                f"\nlast output of the failed tests ({failed.output_file}):", soft_wrap=True
            )
            console.print(tail, markup=False, highlight=False, soft_wrap=True)
        console.print("\nList them any time with: taskloom tasks")
        return 0 if len(batch) == 4 else 1


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def run_demo(fast: bool = False) -> int:
    """Run the demo; returns the exit code."""
    console = Console()
    return run_main(lambda: _demo(console, fast))
