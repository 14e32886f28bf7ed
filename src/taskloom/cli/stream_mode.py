"""``--input-format stream-json``: a session driven over stdin, as ``claude-agent-sdk`` does.

stdin carries one JSON object a line for the life of the process:

- ``{"type": "user", "message": {"role": "user", "content": ...}}`` starts a turn (or queues
  it behind the running one); each turn writes its events and ends with its own ``result``;
- ``{"type": "control_request", "request_id": ID, "request": {"subtype": ...}}`` is answered
  with ``{"type": "control_response", "response": {"subtype": "success" | "error",
  "request_id": ID, ...}}``: ``initialize`` (what it brings builds the session, see
  :mod:`taskloom.cli.stream_init`), ``interrupt``, ``set_permission_mode``, ``set_model``,
  ``mcp_status``, ``stop_task``, ``compact`` and ``dream`` (tidy the agents' memory now: the
  answer is the dream's ``task_id``); any other subtype is an error response;
- ``control_response`` lines answer requests this side sent (see :mod:`taskloom.cli.control`):
  ``can_use_tool`` when ``--permission-prompt-tool stdio`` is given, ``hook_callback``, and
  ``mcp_message`` for the program's own MCP servers (``"type": "sdk"`` in ``--mcp-config``).

The session is built once the first line has come (``--await-initialize``: once the
``initialize`` request has).

A turn ends with its result when the model ends it, even while background tasks it started
still run. What arrives for the session while no turn runs (a task's notification, a message
from an agent or another session) starts a turn of its own, with its own result; task events
are printed as they happen, between turns too.

With ``CLAUDE_CODE_SDK_READS_SESSION_STATE`` set (both SDKs set it) the session says when it
works and when no further turn is owed: ``system/session_state_changed`` with ``state``
``running`` before a turn that follows an idle spell, ``idle`` after a result that nothing more
follows for now (marked ``sdk_host_only``: for the SDK, not the program; shown to the program
with ``CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS``). A background agent still at work owes a turn
(its end starts one), a background command does not until the input has ended.

End of stdin ends the session once the turns already received are done and the session's own
work has settled: while a task the main thread started still works (or its notification waits)
the session waits for it, each notification starting a turn, as the CLI it follows does. A
task with no end of its own is waited for at most ``taskWaitSeconds``. The exit code is that of
the last turn (0 when it succeeded, or when there was none), 2 for usage errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, BinaryIO, TextIO

from taskloom.cli.control import ControlChannel, SdkMcpCaller, StdioPrompter
from taskloom.cli.flags import MODE_ALIASES
from taskloom.cli.print_mode import (
    Emitter,
    PrintOptions,
    compact_boundary,
    early_result,
    init_event,
    known_session_id,
    run_turn,
    stop_requested,
)
from taskloom.cli.stream_init import ProgramSetup, initialize_answer, mcp_status, program_options
from taskloom.cli.stream_input import (
    BadLine,
    InputLine,
    LineReader,
    parse_line,
    request_id_in,
    user_prompt,
)
from taskloom.cli.stream_output import replayed
from taskloom.cli.task_events import notified_status
from taskloom.conversation.next_input import Held, NextInput, OwnWork, Pending, Prompts
from taskloom.conversation.turn_driver import TurnDriver, TurnEnd
from taskloom.errors import TaskloomError, UsageError, describe, reason
from taskloom.harness import Harness
from taskloom.messages import Message
from taskloom.pairing import orphan_error, orphan_results
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.mailbox import MESSAGES
from taskloom.tasks.runtime import Subscription
from taskloom.tasks.types import TaskState

log = logging.getLogger(__name__)

#: The kinds of mailbox rows that start a turn while the session is idle.
_WAKES = ("notification", *MESSAGES)


class StreamSession:
    """One process's conversation over stdin and stdout."""

    def __init__(
        self,
        opts: PrintOptions,
        harness: Harness,
        emitter: Emitter,
        channel: ControlChannel,
        setup: ProgramSetup | None = None,
    ) -> None:
        """Serve ``harness``'s session, writing through ``emitter``, asking over ``channel``.

        ``setup`` is what the program's ``initialize`` made of the session (None: it sent
        none before the session started).
        """
        self.opts = opts
        self.setup = setup
        self.harness = harness
        self.emitter = emitter
        self.channel = channel
        #: The prompts to run, with the number of the stdin line each came on; closed at the
        #: end of the input.
        self.prompts: Prompts[tuple[int | None, str | Message]] = Prompts()
        #: What starts a turn: the program's prompts; while idle, what arrived for the main
        #: thread (its tasks' notifications, a message from an agent or another session,
        #: ``uds:``), which the engine takes inside the turn, with no hooks run on it, so that
        #: an interrupt before it records them hands them back (never acknowledged unseen).
        #: Not before the program's first prompt: it starts the session. Once the input has
        #: ended, the session's own work still under way is waited for.
        me, runtime = harness.session_id, harness.runtime
        self.work = OwnWork(runtime, me, harness.settings, when=self._ran)
        self.inputs: NextInput[tuple[int | None, str | Message] | Message] = NextInput(
            self.prompts,
            Pending(runtime.mailbox, me, _WAKES, when=self._ran),
            Held(runtime, me, when=self._ran),  # idle notices, once every teammate is idle
            until=self.work,
        )
        #: Runs the turns, one at a time; an ``interrupt`` request cuts the running one short.
        self.driver: TurnDriver[dict[str, Any]] = TurnDriver()
        self.last: dict[str, Any] | None = None
        #: A signal came: the running turn ends with its result and no other starts.
        self.stopping = False
        #: The fields of a ``session_state_changed`` line, or None when none are printed.
        self._state_fields = state_reporting(os.environ)
        self._state: str | None = None

    # -- the input ----------------------------------------------------------------------------

    async def serve(self, reader: LineReader, read: list[InputLine | None] | None = None) -> int:
        """Read stdin to its end, answering requests and running turns; the exit code.

        ``read`` holds lines read already (before the session was built; None for the end).
        """
        pending = list(read or [])
        loop = asyncio.get_running_loop()
        # One subscription to the session's tasks for its whole life: their events are printed
        # as they happen, in a turn or between turns (a background task that ends while idle).
        tasks = self.emitter.tasks = self.harness.runtime.subscribe()
        printer = loop.create_task(self._print_tasks(tasks))
        worker = loop.create_task(self._run_turns())
        try:
            line = pending.pop(0) if pending else await reader.lines.get()
            while line is not None:
                await self._take(line)
                line = pending.pop(0) if pending else await reader.lines.get()
            # Nothing can answer a request of ours any more: those waiting fail now.
            self.channel.close("the program closed its input; nobody can answer")
            self.prompts.close()  # no more turns: the worker ends after the queued
            await asyncio.shield(worker)
        except asyncio.CancelledError:
            # A signal: a running turn stops and reports it in its result; an idle session
            # just ends. The signal's exit code follows.
            self.stopping = True
            if self.driver.busy:
                self.driver.interrupt()
            else:
                worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
            raise
        finally:
            worker.cancel()
            printer.cancel()
            self.emitter.flush_tasks()
            self.emitter.tasks = None
            tasks.close()
        return 0 if self.last is None or not self.last["is_error"] else 1

    async def _take(self, line: InputLine) -> None:
        """Act on one line; one that cannot be taken is reported, and the session goes on.

        A control request is answered with an error, when its id can be told; any other line
        gets one line on stderr.
        """
        message: dict[str, Any] | None = None
        try:
            if line.text is None:
                raise BadLine(line.error or "could not be read")
            if line.text.strip():
                message = parse_line(line.text)
                await self._dispatch(message, line.number)
        except BadLine as exc:
            # Only a line that did not parse is searched: a parsed one says what it is.
            request_id = request_id_in(line) if message is None else None
            if request_id is not None:
                self._respond(request_id, error=f"stdin line {line.number}{_said(exc)}")
            else:
                report(line.number, str(exc))

    async def _dispatch(self, message: dict[str, Any], number: int) -> None:
        kind = message.get("type")
        if kind == "user":
            prompt = user_prompt(message)
            if self.opts.replay_user_messages:
                self.emitter.line(replayed(message))
            self.prompts.put((number, prompt))
        elif kind == "control_request":
            await self._answer(message, number)
        elif kind == "control_response":
            self.channel.resolve(message)  # a late answer (timed out, cancelled) is dropped
        elif kind in ("control_cancel_request", "keep_alive"):
            pass  # we answer every request at once: there is nothing in flight to cancel
        else:
            raise BadLine(f"unknown message type {kind!r}")

    # -- turns --------------------------------------------------------------------------------

    def _ran(self) -> bool:
        """Whether a turn has run (the program's first prompt started the session)."""
        return self.last is not None

    async def _print_tasks(self, tasks: Subscription) -> None:
        """Print the session's task events as they come (a turn flushes them before a message)."""
        async for event in tasks:
            self.emitter.task_event(event.kind, event.state)

    async def _next_prompt(self) -> tuple[int | None, str | Message] | None:
        """The next prompt and the stdin line it came on (None for mail); None at the end."""
        item = await self.inputs()
        return (None, item) if isinstance(item, Message) else item

    async def _run_turns(self) -> None:
        while not self.stopping and (item := await self._next_prompt()) is not None:
            number, prompt = item
            if not self._may_start(number, prompt):
                continue
            started = time.monotonic()
            self.harness.session_idle(False)
            self._say_state("running")
            self.emitter.line(init_event(self.harness))
            turn = run_turn(
                self.harness, self.emitter, prompt, started, budget_usd=self.opts.max_budget_usd
            )
            # Interrupted, or this worker stopped by a signal: either way the turn gets its
            # result (run_turn reports a stop as "interrupted"); a stopped worker then goes.
            await self.driver.run(turn, functools.partial(self._ended, started))

    def _may_start(self, number: int | None, prompt: str | Message) -> bool:
        """Whether ``prompt`` may start a turn now; one that may not is reported and dropped.

        Its tool results must answer calls the conversation is waiting for, as it stands
        when the turn starts: anything else would make the API refuse this turn and every
        later one.
        """
        if isinstance(prompt, Message):
            orphans = orphan_results(self.harness.session.engine.messages, prompt)
            if orphans:
                report(number, orphan_error(orphans))
                return False
        return True

    def _ended(self, started: float, end: TurnEnd[dict[str, Any]]) -> None:
        if end.error is not None:
            raise end.error  # not a turn's error (those are in its result): the session's
        result = end.result
        if result is None:  # cancelled before it began, or again while it cleaned up
            result = early_result(self.emitter, started, "interrupted")
        self._finish_turn(result)

    def _finish_turn(self, result: dict[str, Any]) -> None:
        if result["subtype"] != "success":
            # A turn cut short left tool calls unanswered: the next one must start valid.
            self.harness.session.recorder.repair()
        self.last = result
        self.emitter.line(result)
        if not self._owed():
            self._say_state("idle")
            self.harness.session_idle(True)  # with autoDream on, a dream starts if it stays so

    def _owed(self) -> bool:
        """Whether a turn is owed now.

        One is when a prompt waits, something arrived for the main thread, a background agent
        works (its end starts a turn) or, once the input has ended, any of the session's own
        work goes on.
        """
        runtime, me = self.harness.runtime, self.harness.session_id
        if len(self.prompts) or runtime.mailbox.has_pending(me, _WAKES):
            return True
        if self.prompts.closed:
            return not self.work.settled()
        return any(_agent_at_work(state) for state in runtime.list(owner=me))

    def _say_state(self, state: str) -> None:
        """Tell the program the session's state, when it asked to hear it and it changed."""
        if self._state_fields is None or state == self._state:
            return
        self._state = state
        self.emitter.line(
            {"type": "system", "subtype": "session_state_changed", "state": state}
            | self._state_fields
        )

    # -- control requests ---------------------------------------------------------------------

    async def _answer(self, message: dict[str, Any], number: int) -> None:
        request_id = message.get("request_id")
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            raise BadLine("a control_request needs a request_id (a string or a number)")
        request = message.get("request")
        subtype = request.get("subtype") if isinstance(request, dict) else None
        handler = _HANDLERS.get(str(subtype))
        try:
            if not isinstance(request, dict):
                raise UsageError("a control_request needs a request object")
            if handler is None:
                raise UsageError(f"Unsupported control request subtype: {subtype}")
            body = await handler(self, request)
        except Exception as exc:  # an answer for every request: the program waits for one
            if not isinstance(exc, TaskloomError | ValueError | KeyError | TypeError):
                log.debug("control request %s failed", subtype, exc_info=True)
            self._respond(request_id, error=reason(exc))
            return
        self._respond(request_id, body=body)

    def _respond(
        self, request_id: Any, *, body: dict[str, Any] | None = None, error: str | None = None
    ) -> None:
        response: dict[str, Any] = {"request_id": request_id}
        if error is None:
            response.update(subtype="success", response=body or {})
        else:
            response.update(subtype="error", error=error)
        self.emitter.raw({"type": "control_response", "response": response})

    async def _initialize(self, request: dict[str, Any]) -> dict[str, Any]:
        problems = self.setup.problems if self.setup is not None else []
        if problems:  # the session runs without them: the program must hear why
            raise UsageError(f"initialize: {'; '.join(problems)}")
        return initialize_answer(self.harness, self.setup)

    async def _interrupt(self, request: dict[str, Any]) -> dict[str, Any]:
        self.driver.interrupt()  # its result says "interrupted"; the session goes on
        return {}

    async def _set_permission_mode(self, request: dict[str, Any]) -> dict[str, Any]:
        asked = _string(request, "mode")
        # Claude Code's newer names, as --permission-mode takes them; the answer says the mode
        # now in effect, so a program asking for ``auto`` hears it got ``default``.
        self.harness.set_permission_mode(MODE_ALIASES.get(asked, asked))
        mode = str(self.harness.policy.mode)
        # As Claude Code: the stream says it too, for whoever shows the mode.
        self.emitter.line(
            {"type": "system", "subtype": "status", "status": None, "permissionMode": mode}
        )
        return {"mode": mode}

    async def _set_model(self, request: dict[str, Any]) -> dict[str, Any]:
        model = _optional_string(request, "model")
        chosen = self.harness.set_model(None if model in (None, "", "default") else model)
        return {"model": chosen}

    async def _mcp_status(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"mcpServers": mcp_status(self.harness)}

    async def _compact(self, request: dict[str, Any]) -> dict[str, Any]:
        if not self._ran():
            raise UsageError("compact: no conversation yet (the first prompt starts it)")
        if self.driver.busy:
            raise UsageError("compact: a turn is running; send it again when it has ended")
        event = await self.harness.compact(_optional_string(request, "instructions"))
        self.emitter.line(compact_boundary(event))
        return {"pre_tokens": event.pre_tokens}

    async def _dream(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"task_id": self.harness.dream()}

    async def _stop_task(self, request: dict[str, Any]) -> dict[str, Any]:
        state = await self.harness.stop_task(_string(request, "task_id"))
        return {"task_id": state.id, "status": notified_status(state.status.value)}


_HANDLERS = {
    "initialize": StreamSession._initialize,
    "interrupt": StreamSession._interrupt,
    "set_permission_mode": StreamSession._set_permission_mode,
    "set_model": StreamSession._set_model,
    "mcp_status": StreamSession._mcp_status,
    "stop_task": StreamSession._stop_task,
    "compact": StreamSession._compact,
    "dream": StreamSession._dream,
}


def _agent_at_work(state: TaskState) -> bool:
    """Whether ``state`` is a live agent at work, whose end will start a turn.

    While the input is open only these owe a turn, as the SDKs count them: a command may run
    for ever, and a teammate waiting for mail is idle.
    """
    kind = kind_of(state)
    return (
        not state.terminal and state.exit_policy != "detach" and kind.is_agent and kind.busy(state)
    )


def state_reporting(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The extra fields of ``session_state_changed`` lines, or None when none are printed.

    ``CLAUDE_CODE_SDK_READS_SESSION_STATE`` (set by both SDKs): lines for the SDK alone,
    ``sdk_host_only: true``; ``CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS``: lines for the program.
    """
    if _set(env.get("CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS")):
        return {}
    if _set(env.get("CLAUDE_CODE_SDK_READS_SESSION_STATE")):
        return {"sdk_host_only": True}
    return None


def _set(value: str | None) -> bool:
    """Whether an environment flag is on (set, and not ``0``, ``false``, ``no`` or ``off``)."""
    return value is not None and value.strip().lower() not in ("", "0", "false", "no", "off")


def report(number: int | None, why: str) -> None:
    """Say on stderr that stdin line ``number`` was skipped, and why."""
    where = "stdin" if number is None else f"stdin line {number}"
    sys.stderr.write(f"Error: {where}{_said(why)}; skipped\n")


def _said(why: object) -> str:
    """``why`` as it follows "stdin line N": "is ..." directly, anything else after a colon."""
    text = str(why)
    return f" {text}" if text.startswith("is ") else f": {text}"


def _string(request: dict[str, Any], name: str) -> str:
    """A string field a control request must have, checked before anything changes.

    Raises:
        UsageError: It is missing or not a string.
    """
    value = _optional_string(request, name, optional=False)
    assert value is not None
    return value


def _optional_string(request: dict[str, Any], name: str, *, optional: bool = True) -> str | None:
    """A string field of a control request, or None where it may be absent or null.

    Raises:
        UsageError: It is not a string (or is missing, unless ``optional``).
    """
    value = request.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        subtype = request.get("subtype")
        got = "missing" if value is None else f"{type(value).__name__} {json.dumps(value)[:60]}"
        need = "a string or null" if optional else "a string"
        raise UsageError(f"{subtype}: {name} must be {need}, not {got}")
    return value


def _initialize_request(line: InputLine | None) -> dict[str, Any] | None:
    """The ``initialize`` control request ``line`` holds, if it is one."""
    if line is None or line.text is None:
        return None
    try:
        message = parse_line(line.text)
    except BadLine:
        return None
    if message.get("type") != "control_request":
        return None
    request = message.get("request")
    if isinstance(request, dict) and request.get("subtype") == "initialize":
        return message
    return None


async def _read_initialize(
    reader: LineReader, wait: bool
) -> tuple[list[InputLine | None], dict[str, Any] | None]:
    """The lines read before the session starts, and the ``initialize`` request among them.

    The first line, or (``wait``: ``--await-initialize``) every line up to the request.
    """
    read: list[InputLine | None] = []
    while True:
        line = await reader.lines.get()
        read.append(line)
        initialize = _initialize_request(line)
        if initialize is not None or not wait or line is None:
            return read, initialize


async def run_stream(
    opts: PrintOptions, stdin: BinaryIO | None = None, stdout: TextIO | None = None
) -> int:
    """Serve a stream-json session on stdin and stdout; returns the exit code.

    Args:
        opts: The session's options.
        stdin: Where the program's lines come from (default: the process's stdin, as bytes).
        stdout: Where the session's lines go (default: the process's stdout).
    """
    started = time.monotonic()
    out = sys.stdout if stdout is None else stdout
    emitter = Emitter("stream-json", known_session_id(opts.session), out)
    channel = ControlChannel(emitter.raw)
    session_options = opts.session
    if opts.permission_prompt_tool == "stdio":
        session_options = dataclasses.replace(session_options, prompter=StdioPrompter(channel))
    elif opts.permission_prompt_tool is not None:
        raise UsageError(
            f"--permission-prompt-tool {opts.permission_prompt_tool!r}: only 'stdio' is "
            "supported (permission prompts as can_use_tool control requests)"
        )
    session_options = dataclasses.replace(session_options, mcp_caller=SdkMcpCaller(channel))
    # A turn ends when the model ends it: what its tasks deliver later starts turns of its own
    # (StreamSession.inputs), not a longer turn.
    session_options = dataclasses.replace(session_options, wait_for_tasks=False)
    reader = LineReader(_private_stdin() if stdin is None else stdin, channel)
    # The program's first word is its initialize request (the SDKs wait for the answer
    # before anything else): what it brings is part of the session to build. The lines read
    # are answered in their turn, as any (None: the input ended).
    read, initialize = await _read_initialize(reader, opts.await_initialize)
    setup = None
    if initialize is not None:
        setup = program_options(session_options, initialize["request"], channel)
        session_options = setup.options
    opts = dataclasses.replace(opts, session=session_options)
    harness = emitter.harness = Harness(emitter.observe(opts))
    try:
        async with harness:
            emitter.session_id = harness.session_id
            if not gc.isenabled():  # the CLI held collection off for the start-up
                gc.freeze()
                gc.enable()
            session = StreamSession(opts, harness, emitter, channel, setup)
            try:
                return await session.serve(reader, read)
            finally:
                if emitter.tap is not None:
                    emitter.tap.closed = True  # what the session's end stops is not shown
                await harness.end()
    except asyncio.CancelledError:
        # Stopped by a signal: a turn that ran wrote its own result; an idle session (or
        # one still starting) has no turn to report, and the program asked for none.
        if not stop_requested():
            raise
        return 1
    except (TaskloomError, OSError) as exc:
        if isinstance(exc, UsageError):
            raise
        emitter.line(early_result(emitter, started, describe(exc)))
        raise


def main_stream(opts: PrintOptions) -> int:
    """Run a stream-json session with print mode's signal handling and exit codes."""
    from taskloom.cli.print_mode import main_print

    return main_print(opts, runner=run_stream)


def _private_stdin() -> BinaryIO:
    """The process's stdin as a reader of its own, for the reading thread to block in.

    Not ``sys.stdin.buffer``: at exit the interpreter flushes and closes the standard streams,
    and one whose lock a daemon thread holds in ``readline`` aborts the process ("could not
    acquire lock for <stdin> at interpreter shutdown": SIGABRT instead of exit code 143 after a
    SIGTERM, seen under load). A reader of a duplicate descriptor is nobody else's to close.
    """
    return open(os.dup(sys.stdin.fileno()), "rb")
