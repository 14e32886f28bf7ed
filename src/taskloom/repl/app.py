"""The interactive REPL: ``taskloom`` (or ``taskloom "prompt"``) in a terminal.

A client of the :class:`~taskloom.harness.Harness`, like print mode. The conversation is
printed into the terminal's own scrollback (inline, not full screen: scrolling and copying
work as usual); below it a live area holds, top to bottom, the line of the answer being
streamed, the task panel (:mod:`taskloom.repl.panel`), a permission question when a call
waits for one (:mod:`taskloom.repl.asks`), the input, and a status line.

Turns run one at a time (:mod:`taskloom.repl._turns`). A prompt typed while a turn runs waits
for it. While the session is idle, a notification (a background task ended) or a message
starts a turn by itself. The screen is redrawn on events — model deltas, task events, keys —
and otherwise only when the panel's figures change (a second of elapsed time, a grace period
over).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import logging
import time
from pathlib import Path
from typing import Any

from prompt_toolkit.application import Application, run_in_terminal
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory
from prompt_toolkit.shortcuts import print_formatted_text

from taskloom.errors import TaskloomError, describe, reason
from taskloom.harness import Harness
from taskloom.messages import ImageBlock, TextBlock, ToolUseBlock
from taskloom.models.base import TextDelta
from taskloom.options import Options
from taskloom.permissions import PromptAnswer, parse_rule
from taskloom.repl._turns import Turns
from taskloom.repl.asks import ARM_S, Ask, PermissionAsks, save_allow_rule
from taskloom.repl.commands import complete, custom_names, run_command
from taskloom.repl.keys import key_bindings
from taskloom.repl.panel import TaskPanel, count, grace_from
from taskloom.repl.questions import PLAN_TOOL, QUESTION_TOOL, QuestionForm
from taskloom.repl.screen import build_application, write_lines
from taskloom.repl.transcript import Line, TranscriptView, call_line, landed
from taskloom.settings import (
    ensure_private_dir,
    find_project_root,
    refuse_symlinks,
    taskloom_home,
)
from taskloom.tasks.kinds import kind_of
from taskloom.tools.todo import Todo
from taskloom.transcript import transcript_path

log = logging.getLogger(__name__)

#: How long a second Ctrl+C exits, from when the first one's hint was drawn.
_EXIT_WINDOW_S = 2.0
#: How long a Ctrl+C whose hint was never drawn (nothing showed the status line) still arms
#: the next one.
_UNSEEN_HINT_S = 10.0
#: The panel is looked at (its next change, a redraw) at most this often: a fan-out's
#: thousands of task events must not each cost a pass over its thousands of rows.
_PANEL_TICK_S = 0.05


def history_path(cwd: Path) -> Path:
    """Where the input history of the project holding ``cwd`` is kept."""
    root = str(find_project_root(cwd)).strip("/").replace("/", "-") or "root"
    return taskloom_home() / "projects" / root / "history"


class _Observer:
    """Hears the model's stream: the main thread's text deltas (usage is the ledger's)."""

    partial_messages = True

    def __init__(self, repl: Repl) -> None:
        self._repl = repl

    def model_event(self, agent_id: str | None, event: Any) -> None:
        if agent_id is None and isinstance(event, TextDelta):
            self._repl.view.delta(event.text)
            self._repl.redraw()

    def agent_message(self, agent_id: str, event: Any) -> None:
        pass  # an agent's messages show as its panel row's progress

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        pass

    def hook_finished(self, hook_id: str, event: str, name: str, result: Any) -> None:
        pass


class Repl:
    """One interactive session (see the module docstring).

    Args:
        options: What the session is built from (the command line's flags).
        prompt: A first prompt to send once the session is up.
    """

    def __init__(self, options: Options, prompt: str | None = None) -> None:
        self.options = options
        self.first_prompt = prompt
        self.view = TranscriptView(self._print)
        self.asks = PermissionAsks(self._asks_changed, self._who)
        self.panel = TaskPanel("")
        self.turns = Turns(self.view, self.redraw)
        self._harness: Harness | None = None
        self._app: Application[int] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._out: list[Line] = []
        self._printer: asyncio.Task[None] | None = None
        self._reason_for: Ask | None = None  # the call whose denial the user explains
        self._commands: set[asyncio.Task[None]] = set()
        self._ctrl_c = 0.0
        #: When the "Ctrl+C again to exit" hint of the last Ctrl+C was first drawn (None: not yet).
        self._hint_seen: float | None = None
        self._told: set[str] = set()  # tasks whose end was shown
        self._panel_changed = asyncio.Event()
        self._model = ""
        self._code = 0
        self.buffer = Buffer(
            multiline=True,
            history=FileHistory(str(_ready(history_path(Path(options.cwd))))),
        )

    # -- the session ----------------------------------------------------------------------

    @property
    def harness(self) -> Harness:
        """The session now (another after ``/resume`` or ``/clear``)."""
        assert self._harness is not None
        return self._harness

    @property
    def busy(self) -> bool:
        """Whether a turn is running."""
        return self.turns.busy

    async def _open(self, options: Options) -> None:
        harness = Harness(
            dataclasses.replace(
                options,
                headless=False,
                wait_for_tasks=False,
                prompter=self.asks,
                observer=_Observer(self),
            )
        )
        await harness.start()
        self._harness = harness
        self.panel = TaskPanel(harness.session_id, grace_s=grace_from(harness.settings))
        self._told.clear()
        for state in harness.tasks():
            self.panel.update(state)
            if state.terminal:
                self._told.add(state.id)
        self._model = harness.model_name
        self._pump = asyncio.get_running_loop().create_task(self._pump_tasks(harness))
        if self._app is not None and self._app.is_running:
            self._started()  # a session switched to while the REPL runs

    def _started(self) -> None:
        """The screen is up (the terminal in raw mode): turns may start, lines be printed.

        Not before: what the user types in answer to output printed earlier would reach the
        terminal's line discipline, not the REPL (an Enter turned into a newline).
        """
        loop = asyncio.get_running_loop()
        self._worker = loop.create_task(self.turns.serve(self.harness))
        if self._out and (self._printer is None or self._printer.done()):
            self._printer = loop.create_task(self._drain())

    async def _close(self) -> None:
        for task in (self._worker, self._pump):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._worker = self._pump = None
        harness, self._harness = self._harness, None
        if harness is not None:
            await harness.end("prompt_input_exit")
            await harness.aclose()

    async def switch(self, resume: str | None) -> None:
        """Close this session and open ``resume``'s, or a new one.

        A conversation that cannot be resumed is refused before anything is closed.
        """
        old = self.harness
        if resume is not None:
            if resume == old.session_id:
                self.say(f"Session {resume} is the one open here.", "error")
                return
            if not transcript_path(
                resume, old.runtime.home, old.runtime.cwd, search=True
            ).is_file():
                self.say(f"No conversation found with session ID: {resume}", "error")
                return
        options = dataclasses.replace(
            self.options, resume=resume, continue_session=False, session_id=None
        )
        await self._close()
        try:
            await self._open(options)
        except (TaskloomError, OSError) as exc:
            self.say(f"Cannot open session {resume}: {reason(exc)}", "error")
            await self._open(dataclasses.replace(options, resume=old.session_id))
            return
        if resume is None:
            self.say(f"New conversation: session {self.harness.session_id}")
            return
        self._replay()
        self.say(f"Resumed session {self.harness.session_id}")

    def _replay(self) -> None:
        """Show the last exchanges of a resumed conversation."""
        lines: list[Line] = []
        for message in self.harness.session.engine.messages[-12:]:
            for block in message.content:
                if isinstance(block, TextBlock) and block.text.strip():
                    style = "prompt" if message.role == "user" else "assistant"
                    first = block.text.strip().splitlines()[0]
                    lines.append((style, ("> " if message.role == "user" else "") + first[:200]))
                elif isinstance(block, ImageBlock) and message.role == "user":
                    lines.append(("prompt", "> [image]"))
                elif isinstance(block, ToolUseBlock):
                    lines.append(("tool", f"→ {call_line(block.name, block.input)}"))
        if lines:
            self._print([("note", "── earlier in this conversation ──"), *lines])

    def exit(self, code: int = 0) -> None:
        """Leave once the session is closed."""
        self._code = code
        if self._app is not None and self._app.is_running:
            self._app.exit(result=code)

    def queue(self, prompt: str) -> None:
        """Send ``prompt`` as a turn of its own, once the turns before it have run."""
        self.turns.queue(prompt)

    def model_changed(self) -> None:
        """Show the model now in use."""
        self._model = self.harness.model_name
        self.redraw()

    def _asks_changed(self) -> None:
        self.redraw()
        # Drawn again once the question takes its keys, to show them.
        with contextlib.suppress(RuntimeError):  # no loop: nothing to draw
            asyncio.get_running_loop().call_later(ARM_S + 0.02, self.redraw)

    def _who(self, agent_id: str | None) -> str:
        if agent_id is None or self._harness is None:
            return ""
        if "@" in agent_id:
            return f"teammate {agent_id}"
        state = self.harness.runtime.get(agent_id)
        return f"agent {agent_id}" + (f" ({state.description})" if state is not None else "")

    # -- running ------------------------------------------------------------------------------

    async def run(self) -> int:
        """Run until ``/exit`` or a second Ctrl+C; the exit code."""
        try:
            await self._open(self.options)
        except (TaskloomError, OSError) as exc:
            print_formatted_text(FormattedText([("class:error", describe(exc))]))
            return 1
        if not gc.isenabled():  # the CLI held collection off for the start-up (see cli/app.py)
            gc.freeze()
            gc.enable()
        harness = self.harness
        self._print(
            [
                ("prompt", f"taskloom · {self._model} · session {harness.session_id}"),
                ("note", "/help for commands · Esc interrupts · Ctrl+B backgrounds · /exit"),
            ]
        )
        if self.options.resume or self.options.continue_session:
            self._replay()
        self._flush_now()
        if self.first_prompt:
            self.turns.queue(self.first_prompt)
        self._app = build_application(self, self.buffer, key_bindings(self))
        ticker = asyncio.get_running_loop().create_task(self._tick())
        try:
            await self._app.run_async(pre_run=self._started)
        finally:
            ticker.cancel()
            self.asks.close("the session ended before the call was answered")
            for command in list(self._commands):  # a /resume half done: its steps undo
                command.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await command
            await self.turns.stop()
            await self._close()
            self._flush_now()
        return self._code

    def interrupt(self) -> bool:
        """Stop the running turn (Esc); whether there was one."""
        self._reason_for = None
        return self.turns.interrupt()

    def background(self) -> int:
        """Send the main thread's running foreground tasks to the background (Ctrl+B)."""
        harness = self.harness
        moved = 0
        for state in harness.tasks():
            mine = state.owner == harness.session_id
            foreground = mine and not state.terminal and not state.is_backgrounded
            if foreground and harness.runtime.background(state.id):
                moved += 1
                self.say(f"{state.id} runs on in the background: {state.description}")
        return moved

    async def _pump_tasks(self, harness: Harness) -> None:
        sub = harness.runtime.subscribe()
        try:
            while (event := await sub.get()) is not None:
                state = event.state
                self.panel.update(state)
                if (
                    state.terminal
                    and state.id not in self._told
                    and state.owner == harness.session_id
                    and state.is_backgrounded
                    and kind_of(state).notifies(state)
                ):
                    self._told.add(state.id)
                    self.view.note(landed(state))
                self._panel_changed.set()
                self.redraw()
        finally:
            sub.close()

    async def _tick(self) -> None:
        """Redraw when the panel's figures change without an event (see the module docstring)."""
        while True:
            wait = self.panel.next_change()
            if self.busy:
                wait = 1.0 if wait is None else min(wait, 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._panel_changed.wait(), wait)
            self._panel_changed.clear()
            self.redraw()
            # The events that come meanwhile are taken in the next look, together.
            await asyncio.sleep(_PANEL_TICK_S)

    # -- input --------------------------------------------------------------------------------

    def submit(self) -> None:
        """Enter: send the input (a prompt, a command, or the reason of a denial)."""
        text = self.buffer.text
        if self.reasoning:
            self.deny(text.strip())
            self.buffer.reset()
            return
        form = self.asks.current.form if self.asks.current is not None else None
        if form is not None:
            self._answer(form, text)
            return
        if self.asks.current is not None:
            return  # answer the question first: 1, 2 or 3
        if not text.strip():
            return
        self.buffer.reset(append_to_history=True)
        if text.strip().startswith("/"):
            task = asyncio.get_running_loop().create_task(self._command(text.strip()))
            self._commands.add(task)
            task.add_done_callback(self._commands.discard)
            return
        if self.busy:
            self.say("(queued: it is sent when this turn ends)", "note")
        self.turns.queue(text)

    def _answer(self, form: QuestionForm, text: str) -> None:
        """Answer the model's current question; all answered, the call goes on with them."""
        self.buffer.reset()
        wrong = form.take(text)
        if wrong is not None:
            self.say(wrong, "error")
        elif form.done:
            self.say("Answered: " + "; ".join(f"{q} {a}" for q, a in form.answers.items()))
            self.asks.answer(PromptAnswer(allow=True, updated_input=form.updated_input()))
        self.redraw()

    def complete(self) -> None:
        """Tab: complete the command name typed; when several fit, name them."""
        text = self.buffer.text
        done, names = complete(text, custom_names(self.harness))
        if done != text:
            self.buffer.text = done
            self.buffer.cursor_position = len(done)
        elif len(names) > 1:
            self.say("  ".join(f"/{n}" for n in names), "note")

    async def _command(self, line: str) -> None:
        self.view.prompt(line)
        try:
            await run_command(self, line)
        except Exception as exc:  # a command's failure is shown, the session goes on
            log.debug("command failed", exc_info=True)
            self.say(f"{line.split()[0]}: {reason(exc)}", "error")
        self.redraw()

    def allow(self, always: bool) -> None:
        """Allow the call asked about, once or always (a rule saved and applied)."""
        ask = self.asks.current
        if ask is None:
            return
        if ask.request.tool_name == PLAN_TOOL:  # 2: the plan, and edits accepted from now on
            self.asks.answer(PromptAnswer(allow=True, mode="acceptEdits" if always else None))
            return
        if always:
            try:
                path = save_allow_rule(find_project_root(self.harness.cwd), ask.rule)
                self.harness.policy.add_rule(parse_rule(ask.rule, "allow", str(path)))
                self.say(f"Allowed from now on: {ask.rule} (saved in {path})")
            except (TaskloomError, OSError) as exc:
                self.say(f"The rule was not saved: {reason(exc)}; allowed once", "error")
        self.asks.answer(PromptAnswer(allow=True))

    def deny(self, reason: str, *, interrupt: bool = False) -> None:
        """Deny the call asked about, telling the model ``reason`` if there is one."""
        ask = self.asks.current
        if ask is None:
            return
        self._reason_for = None
        name = ask.request.tool_name
        message = f"The user denied this {name} call."
        if reason:
            message += f" Their reason: {reason}"
        if name in (PLAN_TOOL, QUESTION_TOOL):
            message = reason  # the tool says the rest (keep planning; declined)
        self.say(f"Denied: {ask.title}" + (f" ({reason})" if reason else ""), "warn")
        self.asks.answer(PromptAnswer(allow=False, message=message, interrupt=interrupt))

    @property
    def asking(self) -> bool:
        """Whether a permission question takes 1, 2 or 3 now.

        Only on an empty input, and once the question has been up a moment: keys typed for
        a prompt must not answer a question that appeared under them.
        """
        ask = self.asks.current  # the model's questions take typed answers, not keys
        takes_keys = ask is not None and ask.form is None
        return takes_keys and self.asks.settled and not self.reasoning and not self.buffer.text

    def escape(self) -> None:
        """Esc: deny the call asked about and stop the turn, or interrupt the turn."""
        if self.asks.current is not None:
            self.deny("", interrupt=True)
        else:
            self.interrupt()

    def to_background(self) -> None:
        """Ctrl+B (see :meth:`background`)."""
        if not self.background():
            self.say("Nothing runs in the foreground.", "note")

    def ctrl_c(self) -> None:
        """Ctrl+C on an empty input: interrupt; a second one soon after exits."""
        if self._exit_armed():
            self.exit(0)
            return
        self._ctrl_c, self._hint_seen = time.monotonic(), None
        self.interrupt()
        self.redraw()

    def _exit_armed(self) -> bool:
        """Whether a Ctrl+C now exits: the last one's hint is up, or not drawn yet.

        Its window runs from when the hint was first drawn, not from the key: a loop busy with
        the interrupt's cleanup may draw it late, and the user answers what they see.
        """
        if self._hint_seen is None:
            return 0 < time.monotonic() - self._ctrl_c < _UNSEEN_HINT_S
        return time.monotonic() - self._hint_seen < _EXIT_WINDOW_S

    def ask_reason(self) -> None:
        """Deny the call asked about once the user has typed why."""
        self._reason_for = self.asks.current
        self.buffer.reset()
        self.redraw()

    # -- drawing ------------------------------------------------------------------------------

    def redraw(self) -> None:
        """Ask for the live area to be drawn again (coalesced by prompt_toolkit)."""
        if self._app is not None:
            self._app.invalidate()

    def say(self, text: str, style: str = "info") -> None:
        """Print ``text`` into the scrollback."""
        self.view.note(text, style)

    def _print(self, lines: list[Line]) -> None:
        self._out.extend(lines)
        if self._app is None or not self._app.is_running:
            return  # printed when the app starts, or by _flush_now
        if self._printer is None or self._printer.done():
            self._printer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._out:
            batch, self._out = self._out, []
            try:
                await run_in_terminal(functools.partial(write_lines, batch), in_executor=False)
            except Exception:  # the app is ending: what is left is printed after it
                self._out[:0] = batch
                return

    def _flush_now(self) -> None:
        batch, self._out = self._out, []
        if batch:
            write_lines(batch)

    @property
    def reasoning(self) -> bool:
        """Whether the user is typing why the call asked about is denied."""
        return self._reason_for is not None and self._reason_for is self.asks.current

    @property
    def todos(self) -> list[Todo]:
        """The main thread's todo list (TodoWrite), shown below the task panel."""
        return self._harness.session.engine.todos.items if self._harness is not None else []

    @property
    def turn_seconds(self) -> int:
        """How long the running turn has run."""
        return self.turns.seconds

    def status_text(self, width: int) -> str:
        """The status line in ``width`` cells: model, permission mode, cwd, the usage.

        The cwd gives way first (its start cut), so that the rest always shows.
        """
        harness = self._harness
        if harness is None:
            return ""
        spent = harness.runtime.usage.total()  # the session's, every agent's included
        tokens = spent.input_tokens + spent.output_tokens
        hint = "Ctrl+C again to exit · " if self._exit_armed() else ""
        if hint and self._hint_seen is None:
            self._hint_seen = time.monotonic()
            # Drawn again when its window closes: a hint left on screen after it would lie.
            with contextlib.suppress(RuntimeError):  # no loop: nothing to draw
                asyncio.get_running_loop().call_later(_EXIT_WINDOW_S + 0.05, self.redraw)
        head = f" {hint}{self._model} · {harness.policy.mode} · "
        tail = f" · {count(tokens)} tokens · ${spent.cost_usd:.2f}"
        cwd = str(harness.cwd)
        home = str(Path.home())
        if cwd == home or cwd.startswith(home + "/"):
            cwd = "~" + cwd[len(home) :]
        room = width - len(head) - len(tail)
        if len(cwd) > room:
            cwd = "…" + cwd[-max(0, room - 1) :] if room > 1 else ""
        return head + cwd + tail


def _ready(path: Path) -> Path:
    ensure_private_dir(path.parent)
    refuse_symlinks(path.parent, (path.name,))  # prompt_toolkit's history follows links
    return path


async def run_repl(options: Options, prompt: str | None = None) -> int:
    """Run the REPL on ``options``, sending ``prompt`` first if given; the exit code."""
    return await Repl(options, prompt).run()


__all__ = ["Repl", "history_path", "run_repl"]
