"""``taskloom demo --team``: a lead and two teammates split a task list.

The model is scripted (see :mod:`taskloom.cli.demo_team_scenario`); everything else is real:
a temporary git repository holding a project with two independent bugs, agent teams
(in-process teammates, their mailboxes, the shared task list, the shutdown protocol) and the
teammates' tools (Read, Edit, Bash). The lead's turns are printed as ``taskloom demo``
prints them, each teammate's steps under its name in its colour, and every message that
reaches the lead as it arrives.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.color import Color, ColorParseError
from rich.console import Console
from rich.markup import escape

from taskloom.cli._run import run_main
from taskloom.cli.demo import _make_repo
from taskloom.cli.demo_coordinator import _git_diff, call_line
from taskloom.cli.demo_team_scenario import (
    FINAL_PREFIX,
    FIXES,
    PROJECT_FILES,
    PROMPT,
    Letter,
    letters_in,
    scenario_model,
)
from taskloom.engine import AssistantTurn, Finished, ToolDone, UserTurn
from taskloom.messages import Message, TextBlock, ToolResultBlock
from taskloom.tasks.narrow import as_teammate

if TYPE_CHECKING:
    from taskloom.harness import Harness
    from taskloom.hooks import HookResult
    from taskloom.models.base import ModelRequest, StreamEvent

#: Results shown whole (up to this many lines); the others, their first line.
_SHOWN_WHOLE = {"Edit": 8, "Bash": 8, "TaskList": 8, "Agent": 2}


def _colour(name: str | None) -> str:
    """A colour rich knows for a member's colour (the palette's names are not all rich's)."""
    try:
        return Color.parse(name or "").name
    except ColorParseError:
        return {"orange": "dark_orange", "pink": "hot_pink"}.get(name or "", "magenta")


def describe(letter: Letter) -> str:
    """A teammate message in one line: a protocol message by its type, else its text."""
    data = letter.data
    if data is None:
        first = letter.body.strip().splitlines()[0] if letter.body.strip() else ""
        first = _cut(first, 90)
        about = f" [{letter.summary}]" if letter.summary else ""
        return f"{first}{about}"
    kind = str(data.get("type"))
    if kind == "task_assignment":
        return f"task_assignment: #{data.get('taskId')} {data.get('subject')}"
    if kind == "idle_notification":
        return f"idle_notification: {str(data.get('result', ''))[:60]!r}"
    if kind in ("shutdown_request", "shutdown_approved", "shutdown_rejected"):
        return f"{kind} {data.get('requestId')}"
    return kind


def _letters(message: Message) -> list[Letter]:
    return [
        letter for b in message.content if isinstance(b, TextBlock) for letter in letters_in(b.text)
    ]


def _cut(line: str, limit: int = 110) -> str:
    return line if len(line) <= limit else line[: limit - 4] + " ..."


def _results(console: Console, label: str, tools: dict[str, str], message: Message) -> None:
    """A teammate's tool results: Edit's and Bash's whole (a few lines), others' first line."""
    for block in message.content:
        if not isinstance(block, ToolResultBlock):
            continue
        lines = block.text().strip().splitlines() or [""]
        shown = lines[: _SHOWN_WHOLE.get(tools.get(block.tool_use_id, ""), 1)]
        mark = "[red]✗[/red]" if block.is_error else "[dim]←[/dim]"
        console.print(f"{label} {mark} [dim]{escape(_cut(shown[0]))}[/dim]", soft_wrap=True)
        for line in shown[1:]:
            console.print(f"          [dim]{escape(_cut(line))}[/dim]", soft_wrap=True)


class TeamPrinter:
    """An :class:`~taskloom.events.EngineObserver` printing each teammate's steps."""

    partial_messages = False

    def __init__(self, console: Console) -> None:
        """Print to ``console``; the harness, set once built, names the teammates."""
        self.console = console
        self.harness: Harness | None = None
        self.tools: dict[str, str] = {}

    def label(self, task_id: str) -> str:
        """The teammate of task ``task_id``, by name in its colour."""
        state = self.harness.runtime.get(task_id) if self.harness is not None else None
        mate = as_teammate(state)
        if mate is None:
            return f"    [magenta]{task_id}[/magenta]"
        colour = _colour(mate.color)
        return f"    [bold {colour}]{escape(mate.agent_name)}[/bold {colour}]"

    def agent_message(self, agent_id: str, event: AssistantTurn | UserTurn) -> None:
        """Print a teammate's text, tool calls, results and the messages it receives."""
        label, out = self.label(agent_id), self.console
        if isinstance(event, AssistantTurn):
            text = event.message.text().strip()
            if text:
                out.print(f"{label} {escape(text)}", soft_wrap=True, highlight=False)
            for call in event.message.tool_uses():
                self.tools[call.id] = call.name
                line = escape(call_line(call.name, call.input))
                out.print(f"{label} [dim]→ {line}[/dim]", soft_wrap=True, highlight=False)
            return
        for letter in _letters(event.message):
            text = escape(f"✉ from {letter.sender}: {describe(letter)}")
            out.print(f"{label} [yellow]{text}[/yellow]", soft_wrap=True, highlight=False)
        _results(out, label, self.tools, event.message)

    def model_event(self, agent_id: str | None, event: ModelRequest | StreamEvent) -> None:
        """Nothing to print: whole messages arrive through :meth:`agent_message`."""

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        """The demo configures no hooks."""

    def hook_finished(self, hook_id: str, event: str, name: str, result: HookResult | None) -> None:
        """The demo configures no hooks."""


def _print_event(console: Console, event: Any, tools: dict[str, str]) -> None:
    """One event of the lead: its text and calls, their results, messages arriving."""
    if isinstance(event, AssistantTurn):
        text = event.message.text().strip()
        if text:
            console.print(f"[green]lead:[/green] {escape(text)}", soft_wrap=True)
        for call in event.message.tool_uses():
            tools[call.id] = call.name
            line = escape(call_line(call.name, call.input))
            console.print(f"  [dim]→ {line}[/dim]", soft_wrap=True, highlight=False)
    elif isinstance(event, ToolDone):
        mark = "[red]✗[/red]" if event.result.is_error else "[dim]←[/dim]"
        lines = event.result.content.strip().splitlines() or [""]
        for i, line in enumerate(lines[: _SHOWN_WHOLE.get(event.call.name, 1)]):
            shown = escape(_cut(line))
            console.print(f"  {mark if i == 0 else ' '} [dim]{shown}[/dim]", soft_wrap=True)
    elif isinstance(event, UserTurn):
        for letter in _letters(event.message):
            text = escape(f"✉ {letter.sender} → lead: {describe(letter)}")
            console.print(f"[yellow]{text}[/yellow]", soft_wrap=True, highlight=False)


async def demo_team(console: Console) -> int:
    """Run the team demo; 0 when both fixes are in their files and the lead summed up."""
    from taskloom.harness import Harness, Options

    with tempfile.TemporaryDirectory(prefix="taskloom-demo-") as tmp:
        repo = Path(tmp)
        await _make_repo(repo, PROJECT_FILES, "helpers")
        console.print(
            f"[bold]taskloom demo --team[/bold] — a scripted model in {repo}", soft_wrap=True
        )
        console.print(f"[bold]> {escape(PROMPT)}[/bold]\n", soft_wrap=True)
        printer = TeamPrinter(console)
        options = Options(
            model=scenario_model(), cwd=repo, skip_permissions=True, teams=True, observer=printer
        )
        finished: Finished | None = None
        async with Harness(options) as harness:
            printer.harness = harness
            try:
                async for event in harness.run(PROMPT):
                    _print_event(console, event, printer.tools)
                    if isinstance(event, Finished):
                        finished = event
            finally:
                await harness.end()
            mates = map(as_teammate, harness.tasks(include_evicted=True))
            states = [mate for mate in mates if mate is not None]
            turns = harness.session.engine.num_turns
        fixed = [f.fixed in (repo / f.file).read_text() for f in FIXES]
        diff = await _git_diff(repo)
    console.print()
    for s in states:
        console.print(
            f"teammate {s.agent_id}  {s.status.value:<9} {s.tool_uses} tool calls", highlight=False
        )
    if diff:
        console.print("\n[bold]git diff[/bold] (the teammates' changes, in the demo's repository):")
        console.print(diff.rstrip(), markup=False, highlight=False, soft_wrap=True)
    console.print(
        f"\nsession {harness.session_id}: {turns} lead turns, {len(states)} teammates; its team "
        "is removed with it (taskloom teams lists none).",
        soft_wrap=True,
    )
    ok = finished is not None and finished.result.startswith(FINAL_PREFIX) and all(fixed)
    if not all(fixed):
        missing = [f.file for f, done in zip(FIXES, fixed, strict=True) if not done]
        console.print(f"[red]not fixed:[/red] {', '.join(missing)}")
    return 0 if ok else 1


def run_demo() -> int:
    """Run the team demo and return its exit code."""
    console = Console()
    return run_main(lambda: demo_team(console))
