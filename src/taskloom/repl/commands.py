"""The REPL's slash commands: ``/help``, ``/tasks``, ``/stop``, ``/resume``, ``/dream`` and more.

Each command is an async function of the :class:`CommandHost` (the REPL) and the text after
the command's name. A command answers by printing through the host; what it cannot do (an
unknown task id, a turn still running) it says in one line and changes nothing. ``/compact``
is the exception: it changes the conversation, so it runs as a turn of its own, in order
with the prompts (the turns print what happened). So is a custom command or skill of the
project or the user (``/review file.py``): the session expands it. Tab completes a command's
name, built-in or custom (:func:`complete`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from taskloom._dataclass import dataclass
from taskloom.errors import TaskloomError
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.narrow import as_teammate
from taskloom.tasks.types import TaskState

if TYPE_CHECKING:
    from taskloom.harness import Harness

#: How much of a task's output ``/tasks ID`` shows (its end).
_TAIL_BYTES = 4000


class CommandHost(Protocol):
    """What a command may use of the REPL."""

    @property
    def harness(self) -> Harness:
        """The session now."""
        ...

    @property
    def busy(self) -> bool:
        """Whether a turn is running."""
        ...

    def say(self, text: str, style: str = "info") -> None:
        """Print ``text`` into the scrollback."""
        ...

    def exit(self, code: int = 0) -> None:
        """Leave the REPL with ``code`` once the session is closed."""
        ...

    async def switch(self, resume: str | None) -> None:
        """Close the session and open another: ``resume``'s, or a new one (None)."""
        ...

    def model_changed(self) -> None:
        """The main thread's model was changed (the status line shows it)."""
        ...

    def queue(self, prompt: str) -> None:
        """Send ``prompt`` as a turn of its own, once the turns before it have run."""
        ...


Handler = Callable[[CommandHost, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Command:
    """One slash command.

    Attributes:
        name: Its name, without the slash.
        usage: How it is called (``/tasks [ID]``).
        help: What it does, in one line.
        run: What it does.
    """

    name: str
    usage: str
    help: str
    run: Handler


async def run_command(host: CommandHost, line: str) -> None:
    """Run the command ``line`` holds (``/tasks b1234``); an unknown one says so."""
    name, _, rest = line.strip()[1:].partition(" ")
    command = COMMANDS.get(name.lower())
    if command is None and name in custom_names(host.harness):
        # A custom command or skill: a turn of its own, which the session expands.
        if host.busy:
            host.say("(queued: it is sent when this turn ends)", "note")
        host.queue(line.strip())
        return
    if command is None:
        known = ", ".join(f"/{n}" for n in [*COMMANDS, *custom_names(host.harness)])
        host.say(f"Unknown command /{name}. Commands: {known}", "error")
        return
    try:
        await command.run(host, rest.strip())
    except TaskloomError as exc:
        host.say(f"/{command.name}: {exc}", "error")


async def _help(host: CommandHost, rest: str) -> None:
    lines = ["Commands:"]
    lines += [f"  {c.usage:<18} {c.help}" for c in COMMANDS.values()]
    catalog = host.harness.agents.builder.skills
    for custom in catalog.typed() if catalog is not None else []:
        usage = f"/{custom.name} {custom.argument_hint or ''}".rstrip()
        lines.append(f"  {usage:<18} {custom.description} ({custom.scope})")
    lines += [
        "Keys: Enter sends · Ctrl+J (or \\ then Enter) a new line · Esc interrupts the turn ·",
        "      Ctrl+B sends a running foreground command or agent to the background ·",
        "      Ctrl+C clears the input (twice: exit) · Up/Down: history ·",
        "      Tab completes a command's name",
    ]
    host.say("\n".join(lines))


def _task_line(state: TaskState, now: float) -> str:
    end = state.end_time or now
    seconds = max(0, int(end - state.start_time))
    where = "background" if state.is_backgrounded else "foreground"
    note = kind_of(state).status_note(state)
    return (
        f"  {state.id:<10} {state.type.value:<20} {state.status.value:<9}{note} "
        f"{seconds}s {where} · {state.description}"
    )


async def _tasks(host: CommandHost, rest: str) -> None:
    harness = host.harness
    if rest:
        state = harness.runtime.get(rest)
        if state is None:
            host.say(f"No task {rest}. /tasks lists them.", "error")
            return
        lines = [_task_line(state, time.time()).strip()]
        summary = kind_of(state).summary(state) if state.terminal else ""
        if summary:
            lines.append(summary)
        output = kind_of(state).final_output(state, _TAIL_BYTES)
        if output.strip():
            lines += ["Output (its end):", *output.rstrip().splitlines()]
        elif state.output_file:
            lines.append("No output yet.")
        if state.output_file:
            lines.append(f"Output file: {state.output_file}")
        if not state.terminal:
            lines.append(f"Stop it with /stop {state.id}")
        host.say("\n".join(lines))
        return
    states = harness.tasks(include_evicted=True)
    if not states:
        host.say("No tasks.")
        return
    now = time.time()
    host.say("\n".join(["Tasks:", *(_task_line(s, now) for s in states)]))


async def _stop(host: CommandHost, rest: str) -> None:
    if not rest:
        host.say("Usage: /stop ID (/tasks lists them)", "error")
        return
    harness = host.harness
    if harness.runtime.get(rest) is None:
        host.say(f"No task {rest}. /tasks lists them.", "error")
        return
    state = await harness.stop_task(rest)
    host.say(f"{state.id}: {state.status.value}")


async def _agents(host: CommandHost, rest: str) -> None:
    harness = host.harness
    catalog = harness.agents.catalog
    lines = ["Agent types:"]
    for name in sorted(catalog.names()):
        definition = catalog.get(name)
        about = " ".join((definition.when_to_use if definition else "").split())
        lines.append(f"  {name:<18} {about[:90]}")
    # Every agent this session runs (its own subagents and remote ones), as the kinds say.
    running = [s for s in harness.tasks() if kind_of(s).agent_facts(s) is not None]
    running = [s for s in running if not s.terminal]
    if running:
        lines.append("Running:")
        lines += [f"  {s.id:<10} {s.description}" for s in running]
    host.say("\n".join(lines))


async def _team(host: CommandHost, rest: str) -> None:
    teams = host.harness.team
    if teams is None:
        host.say("Teams are off: start taskloom with --teams (or the setting agentTeams).")
        return
    team = teams.roster.team()
    if team is None:
        host.say("No team yet: the model starts one with TeamCreate.")
        return
    lines = [f"Team {team.name}: {team.description}".rstrip(": ")]
    teammates = (as_teammate(s) for s in host.harness.tasks())
    states = {t.agent_id: t for t in teammates if t is not None}
    for member in team.members:
        state = states.get(member.agent_id)
        if member.name == "team-lead":
            status = "lead (you)"
        elif not member.is_active:
            status = "inactive"
        elif state is not None and state.is_idle:
            status = "idle"
        else:
            status = "working"
        lines.append(f"  {member.name:<16} {member.agent_type:<16} {status}")
    host.say("\n".join(lines))


async def _resume(host: CommandHost, rest: str) -> None:
    if host.busy:
        host.say("A turn is running: wait for it, or press Esc, then /resume.", "error")
        return
    harness = host.harness
    if not rest:
        from taskloom.transcript import transcript_path

        cwd = str(harness.cwd.resolve())  # as sessions are recorded
        mine = [
            s
            for s in harness.runtime.store.list_sessions()
            if s.cwd == cwd and s.id != harness.session_id
        ]
        home = harness.runtime.home  # search: one resumed here from elsewhere is kept there
        kept = [s for s in mine if transcript_path(s.id, home, cwd, search=True).is_file()][:10]
        if not kept:
            host.say("No earlier conversation in this directory.")
            return
        lines = ["Earlier conversations here (newest first): /resume ID"]
        for s in kept:
            started = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.started_at))
            lines.append(f"  {s.id}  {started}")
        host.say("\n".join(lines))
        return
    await host.switch(rest)


async def _model(host: CommandHost, rest: str) -> None:
    harness = host.harness
    if not rest:
        host.say(f"Model: {harness.model_name}  (/model NAME to change, /model default)")
        return
    chosen = harness.set_model(None if rest == "default" else rest)
    host.model_changed()
    host.say(f"Model: {chosen}")


async def _clear(host: CommandHost, rest: str) -> None:
    if host.busy:
        host.say("A turn is running: wait for it, or press Esc, then /clear.", "error")
        return
    await host.switch(None)


async def _compact(host: CommandHost, rest: str) -> None:
    # A turn of its own: a prompt typed meanwhile, or a notification, must not start a turn
    # on the conversation being replaced. The session's ``/compact`` prompt does the work.
    if host.busy:
        host.say("(queued: the conversation is compacted when this turn ends)", "note")
    host.queue(f"/compact {rest}".rstrip())


async def _memory(host: CommandHost, rest: str) -> None:
    from taskloom.instructions import local_name

    harness = host.harness
    told = harness.session.engine.config.instructions
    files = told.files if told is not None else harness.agents.builder.instructions.files
    skipped = told.skipped if told is not None else harness.agents.builder.instructions.skipped
    names = harness.agents.builder.instructions.names
    looked = ", ".join([*names, *map(local_name, names)])
    if not files:
        lines = [f"No instruction files loaded (looked for {looked})."]
    else:
        lines = [f"Instruction files ({len(files)}; looked for {looked}):"]
        for f in files:
            how = f"imported by {f.imported_by}" if f.imported_by else ""
            rule = ("rule, paths: " + ", ".join(f.globs)) if f.globs else "rule" if f.rule else ""
            parts = (how, rule, "nested" if f.nested else "", f.cut or "")
            how = ", ".join(w for w in parts if w)
            where = _shown(f.path, harness.cwd)
            lines.append(f"  {where}  {f.scope}  {_size(f.size)}" + (f"  ({how})" if how else ""))
    held = told.held if told is not None else harness.agents.builder.instructions.held
    if held:
        lines.append("Rules waiting for a file their paths match:")
        lines += [
            f"  {_shown(r.path, harness.cwd)}  {r.scope}  ({', '.join(r.globs)})" for r in held
        ]
    if skipped:
        lines += ["Cut or left out:", *(f"  {line}" for line in skipped)]
    host.say("\n".join(lines))


def _shown(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when under it (short enough for one line), else whole."""
    here = cwd.resolve()
    return str(path.relative_to(here)) if here in path.parents else str(path)


def _size(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KB"


async def _dream(host: CommandHost, rest: str) -> None:
    task_id = host.harness.dream()  # refused (one at work, no memory): said as an error
    host.say(f"Dreaming in the background ({task_id}): /tasks {task_id} shows what it changed")


async def _exit(host: CommandHost, rest: str) -> None:
    host.exit(0)


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command("help", "/help", "this list", _help),
        Command("tasks", "/tasks [ID]", "the session's tasks; with ID its output", _tasks),
        Command("stop", "/stop ID", "stop a task (and what it started)", _stop),
        Command("agents", "/agents", "agent types, and the agents running", _agents),
        Command("team", "/team", "the team and its members", _team),
        Command("resume", "/resume [ID]", "earlier conversations; with ID continue it", _resume),
        Command("model", "/model [NAME]", "show or change the model", _model),
        Command(
            "compact",
            "/compact [TEXT]",
            "summarize the conversation (TEXT: what to keep) and go on from it",
            _compact,
        ),
        Command("clear", "/clear", "start a new conversation", _clear),
        Command("memory", "/memory", "instruction files loaded (CLAUDE.md, rules)", _memory),
        Command("dream", "/dream", "tidy the agents' memory now, in the background", _dream),
        Command("exit", "/exit", "leave (running tasks are stopped)", _exit),
    )
}


def custom_names(harness: Harness) -> list[str]:
    """The names of the session's custom commands and skills a user may type, sorted."""
    catalog = harness.agents.builder.skills
    return [c.name for c in catalog.typed()] if catalog is not None else []


def complete(text: str, custom: Sequence[str] = ()) -> tuple[str, list[str]]:
    """Tab on the input ``text``: the text completed, and the commands it could still be.

    Only a command's name is completed (``/com`` becomes ``/compact ``), a built-in's or one
    of ``custom`` (the custom commands and skills); ``text`` comes back unchanged when it is
    not the start of a command name, or when several commands start with it and have no
    longer common start (then they are the candidates).
    """
    if not text.startswith("/") or any(c.isspace() for c in text):
        return text, []
    typed = text[1:].lower()
    known = [*COMMANDS, *(n for n in custom if n not in COMMANDS)]
    names = [n for n in known if n.lower().startswith(typed)]
    if len(names) == 1:
        return f"/{names[0]} ", names
    common = ""
    for letters in zip(*names, strict=False):  # the names' common start
        if len(set(letters)) > 1:
            break
        common += letters[0]
    return (f"/{common}" if len(common) > len(typed) else text), names


__all__ = ["COMMANDS", "Command", "CommandHost", "complete", "custom_names", "run_command"]
