"""``taskloom demo --coordinator``: a coordinator session on a shipped scripted scenario.

The model is scripted (see :mod:`taskloom.cli.demo_coordinator_scenario`); everything else
is real: a temporary git repository holding a project with a bug, coordinator mode, the
background workers with their tools (Grep, Read, Edit, Bash), a stop that kills a running
command, a finished worker resumed by SendMessage, notifications. The coordinator's turns
are printed as ``taskloom demo`` prints them, and each worker's steps under its id.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape

from taskloom.cli._run import run_main
from taskloom.cli.demo import _make_repo, _task_lines
from taskloom.cli.demo_coordinator_scenario import (
    FIXED_LINE,
    PROJECT_FILES,
    PROMPT,
    scenario_model,
)
from taskloom.engine import AssistantTurn, Finished, ToolDone, UserTurn
from taskloom.messages import Message, ToolResultBlock
from taskloom.process.git import GitError, git
from taskloom.tasks.kinds import kind_of

if TYPE_CHECKING:
    from taskloom.harness import Harness
    from taskloom.hooks import HookResult
    from taskloom.models.base import ModelRequest, StreamEvent

_PHASE = re.compile(r"Phase \d — \w+")
#: Results worth showing whole (up to this many lines): what an edit or a command did.
_SHOWN_WHOLE = {"Edit": 8, "Bash": 8}


def _short(value: Any, limit: int = 70) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def call_line(name: str, args: dict[str, Any]) -> str:
    """A tool call as one line, long arguments shortened (the spec is printed as text)."""
    return f"{name}({', '.join(f'{k}={_short(v)}' for k, v in args.items())})"


def _dim(console: Console, text: str) -> None:
    console.print(f"[dim]{escape(text)}[/dim]", soft_wrap=True, highlight=False)


class WorkerPrinter:
    """An :class:`~taskloom.events.EngineObserver` printing each worker's steps under its id."""

    partial_messages = False

    def __init__(self, console: Console) -> None:
        """Print to ``console``; the harness, set once built, names the workers."""
        self.console = console
        self.harness: Harness | None = None
        self._tools: dict[str, str] = {}
        self._started: set[str] = set()

    def _label(self, agent_id: str) -> str:
        state = self.harness.runtime.get(agent_id) if self.harness is not None else None
        description = (state.description if state is not None else "") or "worker"
        return f"    [magenta]{agent_id}[/magenta] [dim]({escape(description)})[/dim]"

    def agent_message(self, agent_id: str, event: AssistantTurn | UserTurn) -> None:
        """Print a worker's text, its tool calls and what they returned."""
        label = self._label(agent_id)
        if isinstance(event, AssistantTurn):
            first, *rest = event.message.text().strip().splitlines() or [""]
            if first:
                self.console.print(f"{label} {escape(first)}", soft_wrap=True, highlight=False)
            for line in rest:
                self.console.print(f"        {escape(line)}", soft_wrap=True, highlight=False)
            for call in event.message.tool_uses():
                self._tools[call.id] = call.name
                self.console.print(
                    f"{label} [dim]→ {escape(call_line(call.name, call.input))}[/dim]",
                    soft_wrap=True,
                    highlight=False,
                )
        elif event.origin == "prompt" and agent_id in self._started:
            # A later prompt of the same worker: SendMessage resumed it after it had finished.
            self.console.print(f"{label} [yellow]✉ resumed with the coordinator's message[/yellow]")
        elif event.origin == "prompt":
            self._started.add(agent_id)
        elif event.origin == "messages":
            self.console.print(f"{label} [yellow]✉ a message from the coordinator[/yellow]")
        elif event.origin == "tool_results":
            self._results(label, event.message)

    def _results(self, label: str, message: Message) -> None:
        for block in message.content:
            if not isinstance(block, ToolResultBlock):
                continue
            lines = block.text().strip().splitlines() or [""]
            shown = lines[: _SHOWN_WHOLE.get(self._tools.get(block.tool_use_id, ""), 1)]
            mark = "[red]✗[/red]" if block.is_error else "[dim]←[/dim]"
            self.console.print(f"{label} {mark} [dim]{escape(shown[0])}[/dim]", soft_wrap=True)
            for line in shown[1:]:
                _dim(self.console, f"        {line}")

    def model_event(self, agent_id: str | None, event: ModelRequest | StreamEvent) -> None:
        """Nothing to print: whole messages arrive through :meth:`agent_message`."""

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        """The demo configures no hooks."""

    def hook_finished(self, hook_id: str, event: str, name: str, result: HookResult | None) -> None:
        """The demo configures no hooks."""


def _print_turn(console: Console, message: Message) -> None:
    """The coordinator's text (each phase it announces as a heading) and its tool calls."""
    text = message.text().strip()
    for part in re.split(r"(?=Phase \d — )", text) if text else []:
        phase = _PHASE.match(part)
        if phase:
            console.rule(f"[bold]{phase.group(0)}[/bold]", align="left")
        if part.strip():
            console.print(f"[green]coordinator:[/green] {escape(part.strip())}", soft_wrap=True)
    for call in message.tool_uses():
        console.print(f"  [dim]→ {escape(call_line(call.name, call.input))}[/dim]", soft_wrap=True)


def _print_event(console: Console, event: Any) -> None:
    if isinstance(event, AssistantTurn):
        _print_turn(console, event.message)
    elif isinstance(event, ToolDone):
        mark = "[red]✗[/red]" if event.result.is_error else "[dim]←[/dim]"
        for i, line in enumerate(event.result.content.strip().splitlines()[:2]):
            console.print(f"  {mark if i == 0 else ' '} [dim]{escape(line)}[/dim]", soft_wrap=True)
    elif isinstance(event, UserTurn) and event.notifications:
        for note in event.notifications:
            console.print("[yellow]notification:[/yellow]")
            console.print(note.text, markup=False, highlight=False, soft_wrap=True)


async def _git_diff(repo: Path) -> str:
    try:
        return await git(repo, "diff", "--no-color")
    except GitError:
        return ""  # no git: the file itself is checked


async def demo_coordinator(console: Console) -> int:
    """Run the coordinator demo; 0 when the fix is in the file and was verified."""
    from taskloom.harness import Harness, Options

    with tempfile.TemporaryDirectory(prefix="taskloom-demo-") as tmp:
        repo = Path(tmp)
        await _make_repo(repo, PROJECT_FILES, "stats")
        console.print(
            f"[bold]taskloom demo --coordinator[/bold] — a scripted model in {repo}",
            soft_wrap=True,
        )
        console.print(f"[bold]> {escape(PROMPT)}[/bold]\n", soft_wrap=True)
        printer = WorkerPrinter(console)
        options = Options(
            model=scenario_model(),
            cwd=repo,
            skip_permissions=True,
            coordinator=True,
            observer=printer,
        )
        finished: Finished | None = None
        async with Harness(options) as harness:
            printer.harness = harness
            live = Live(console=console, transient=True, auto_refresh=console.is_terminal)
            if console.is_terminal:
                live.start()
            try:
                async for event in harness.run(PROMPT):
                    _print_event(console, event)
                    if isinstance(event, Finished):
                        finished = event
                    if console.is_terminal:
                        live.update(_task_lines(harness.runtime.list()))
            finally:
                if console.is_terminal:
                    live.stop()
                await harness.end()
            states = harness.tasks(include_evicted=True)
            turns = harness.session.engine.num_turns
        workers = sum(1 for s in states if kind_of(s).is_agent)
        fixed = FIXED_LINE in (repo / "stats.py").read_text()
        diff = await _git_diff(repo)
    console.print()
    for s in states:
        console.print(f"task {s.id}  {s.status.value:<9} {s.description}", highlight=False)
    if diff:
        console.print("\n[bold]git diff[/bold] (the workers' change, in the demo's repository):")
        console.print(diff.rstrip(), markup=False, highlight=False, soft_wrap=True)
    console.print(
        f"\nsession {harness.session_id}: {turns} coordinator turns, {workers} workers. "
        "List its tasks with: taskloom tasks",
        soft_wrap=True,
    )
    ok = finished is not None and finished.result.startswith("Done.") and fixed
    return 0 if ok else 1


def run_demo() -> int:
    """Run the coordinator demo and return its exit code."""
    console = Console()
    return run_main(lambda: demo_coordinator(console))
