"""``taskloom demo``: a real session on a shipped scripted scenario.

The model is scripted (see :mod:`taskloom.cli.demo_scenario`); everything else is real: a
temporary git repository, the engine, the tools, background shell tasks, a stop, output
collection and notifications. With a terminal, a live line per running task shows its
elapsed time.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from taskloom.cli._run import run_main
from taskloom.cli.demo_scenario import PROJECT_FILES, scenario_model
from taskloom.engine import AssistantTurn, Finished, ToolDone, UserTurn
from taskloom.process.git import GitError, git
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.types import TaskState

PROMPT = "Check that this project's tests pass, and tell me what you find."


async def _make_repo(
    root: Path, files: dict[str, str] = PROJECT_FILES, message: str = "calc"
) -> None:
    for name, text in files.items():
        (root / name).write_text(text)
    who = ["-c", "user.name=taskloom demo", "-c", "user.email=demo@localhost"]
    try:
        await git(root, *who, "init", "-q")
        await git(root, *who, "add", ".")
        await git(root, *who, "commit", "-qm", message)
    except GitError:
        pass  # a plain directory will do


def _task_lines(states: list[TaskState]) -> Group:
    now = time.time()
    lines = []
    for s in states:
        if s.terminal:
            continue
        elapsed = now - s.start_time
        lines.append(Text(f"  ⏵ {s.id}  {s.description}  {elapsed:4.1f}s", style="cyan"))
    return Group(*lines)


def _call_line(call: Any) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in call.input.items())
    return f"{call.name}({args})"


async def _demo(console: Console) -> int:
    from taskloom.harness import Harness, Options

    with tempfile.TemporaryDirectory(prefix="taskloom-demo-") as tmp:
        repo = Path(tmp)
        await _make_repo(repo)
        console.print(f"[bold]taskloom demo[/bold] — a scripted model works in {repo}")
        console.print(f"[bold]> {PROMPT}[/bold]\n")
        options = Options(model=scenario_model(), cwd=repo, skip_permissions=True)
        async with Harness(options) as harness:
            rt = harness.runtime
            finished: Finished | None = None
            live = Live(console=console, transient=True, auto_refresh=console.is_terminal)
            if console.is_terminal:
                live.start()
            try:
                async for event in harness.run(PROMPT):
                    if isinstance(event, AssistantTurn):
                        if event.message.text():
                            console.print(f"[green]assistant:[/green] {event.message.text()}")
                        for call in event.message.tool_uses():
                            console.print(f"  [dim]→ {_call_line(call)}[/dim]", soft_wrap=True)
                    elif isinstance(event, ToolDone):
                        first = event.result.content.strip().splitlines()[:1]
                        mark = "[red]✗[/red]" if event.result.is_error else "[dim]←[/dim]"
                        console.print(
                            f"  {mark} [dim]{first[0] if first else ''}[/dim]", soft_wrap=True
                        )
                    elif isinstance(event, UserTurn) and event.notifications:
                        for note in event.notifications:
                            console.print("[yellow]notification:[/yellow]")
                            console.print(note.text, markup=False, highlight=False, soft_wrap=True)
                    elif isinstance(event, Finished):
                        finished = event
                    if console.is_terminal:
                        live.update(_task_lines(rt.list()))
            finally:
                if console.is_terminal:
                    live.stop()
                await harness.end()
            states = harness.tasks(include_evicted=True)
            engine = harness.session.engine
        console.print()
        for s in states:
            ended = kind_of(s).status_note(s)  # its exit code, once it has one
            console.print(f"task {s.id}  {s.status.value:<9}{ended}  {s.description}")
        console.print(
            f"\nsession {harness.session_id}: {engine.num_turns} model turns. "
            "List its tasks with: taskloom tasks"
        )
        ok = finished is not None and "tests pass" in " ".join(
            m.text() for m in engine.messages if m.role == "assistant"
        )
        return 0 if ok else 1


def run_demo() -> int:
    """Run the demo and return its exit code.

    ``taskloom demo --coordinator`` runs :func:`taskloom.cli.demo_coordinator.run_demo`.
    """
    console = Console()
    return run_main(lambda: _demo(console))
