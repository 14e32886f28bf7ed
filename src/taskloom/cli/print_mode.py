"""Headless print mode: ``taskloom -p PROMPT`` with Claude Code's output formats.

``text`` prints the final answer; ``json`` prints the result object; ``stream-json`` prints
one JSON object a line: the ``system/init`` object, every assistant and user message (a
subagent's too, see :mod:`taskloom.cli.stream_output`), task events (see
:mod:`taskloom.cli.task_events`) and last the ``result``.
Exit codes: 0 success, 1 runtime error (including the turn limit), 2 usage error.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from taskloom._dataclass import dataclass
from taskloom.cli.json_lines import MAX_LINE_CHARS
from taskloom.cli.json_lines import fitted as _fitted
from taskloom.cli.print_options import PrintOptions as PrintOptions  # its flags, re-exported
from taskloom.cli.stream_output import OutputTap, TurnAccount
from taskloom.cli.task_events import TaskEvents, notification_event
from taskloom.engine import AssistantTurn, Compacted, Finished, UserTurn
from taskloom.errors import TaskloomError, UsageError, describe
from taskloom.harness import Harness, Options
from taskloom.messages import Message
from taskloom.session import COMPACT_COMMAND
from taskloom.skills.catalog import PromptCommand
from taskloom.tasks.ids import new_uuid
from taskloom.tasks.runtime import Subscription, TaskRuntime
from taskloom.untrusted import clean_text

OUTPUT_FORMATS = ("text", "json", "stream-json")

log = logging.getLogger(__name__)


class Emitter:
    """Writes events in the chosen output format."""

    def __init__(self, fmt: str, session_id: str | None, out: TextIO) -> None:
        self.fmt = fmt
        self.session_id = session_id  # known once the runtime exists
        self.out = out
        self.result_written = False
        self.harness: Harness | None = None  # the session, once it is being built
        self.events = TaskEvents()
        #: What the session's engines tell the output (see :meth:`observe`).
        self.tap: OutputTap | None = None
        #: The running turn's task events, not printed yet.
        self.tasks: Subscription | None = None

    def observe(self, opts: PrintOptions) -> Options:
        """The session's options, with this output watching its engines (stream-json)."""
        if self.fmt != "stream-json":
            tap = OutputTap(lambda obj: None)  # prints nothing: builds the results' cost fields
        else:
            tap = OutputTap(
                self.line,
                before=self.flush_tasks,
                parent_of=self._parent_of,
                partial_messages=opts.include_partial_messages,
                hook_events=opts.include_hook_events,
            )
        self.tap = tap
        return dataclasses.replace(opts.session, observer=tap)

    def _parent_of(self, agent_id: str) -> str | None:
        harness = self.harness
        state = harness.runtime.get(agent_id) if harness is not None else None
        return state.tool_use_id if state is not None else None

    def flush_tasks(self) -> None:
        """Print what has happened to tasks, before a message that may mention it."""
        if self.tasks is not None:
            for event in self.tasks.drain_nowait():
                self.task_event(event.kind, event.state)

    def line(self, obj: dict[str, Any]) -> None:
        """Write one object as a JSON line (stream-json only)."""
        if self.fmt == "stream-json":
            obj.setdefault("session_id", self.session_id)
            obj.setdefault("uuid", new_uuid())
            line, _ = clean_text(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
            # Model output is cleaned already; a prompt or tool output from bytes that were
            # not UTF-8 must not make the line unwritable either.
            if len(line) > MAX_LINE_CHARS:
                line = _fitted(obj)
            self.out.write(line + "\n")
            self.out.flush()

    def raw(self, obj: dict[str, Any]) -> None:
        """Write one protocol object as it is (a ``control_response``: no session fields)."""
        line, _ = clean_text(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
        self.out.write(line + "\n")
        self.out.flush()

    def task_event(self, kind: str, state: Any) -> None:
        """Print a task's start, and each change of its status or progress."""
        for event in self.events.of(kind, state):
            self.line(event)


async def _pump(sub: Subscription, emitter: Emitter) -> None:
    async for event in sub:
        emitter.task_event(event.kind, event.state)


def _read_prompt(prompt: str | None) -> str:
    if prompt is None and not sys.stdin.isatty():
        prompt = sys.stdin.read()
    if not prompt or not prompt.strip():
        raise UsageError(
            "Input must be provided either through stdin or as a prompt argument when using --print"
        )
    return prompt


async def run_print(opts: PrintOptions) -> int:
    """Run one headless prompt; returns the exit code.

    A run that started ends with its ``result`` (in the json formats), also when it fails
    before its first turn (the session in use, the store unusable) or is stopped by a signal.
    A usage error has none: nothing was run.
    """
    started = time.monotonic()
    emitter = Emitter(opts.output_format, known_session_id(opts.session), sys.stdout)
    try:
        return await _run_print(opts, emitter, started)
    except asyncio.CancelledError:
        if emitter.result_written or not stop_requested():
            raise
        _write_result(opts, emitter, early_result(emitter, started, "interrupted"), "interrupted")
        return 1
    except (BrokenPipeError, UsageError):
        raise
    except (TaskloomError, OSError) as exc:
        if not emitter.result_written:
            _write_result(opts, emitter, early_result(emitter, started, describe(exc)), None)
        raise  # main_print says it on stderr and gives the exit code


def stop_requested() -> bool:
    """Whether this task is being cancelled by a stop request (a signal, see run_main).

    If so the request is withdrawn, so that the bounded waits of the cleanup that follows
    time out as they should.
    """
    task = asyncio.current_task()
    if task is None or not task.cancelling():
        return False
    task.uncancel()
    return True


async def _run_print(opts: PrintOptions, emitter: Emitter, started: float) -> int:
    if opts.output_format not in OUTPUT_FORMATS:  # argparse checks too; this is for callers
        raise UsageError(f"--output-format must be one of {', '.join(OUTPUT_FORMATS)}")
    prompt = _read_prompt(opts.prompt)
    harness = emitter.harness = Harness(emitter.observe(opts))
    async with harness:
        emitter.session_id = harness.session_id
        if not gc.isenabled():  # the CLI held collection off for the start-up (see app.py)
            gc.freeze()
            gc.enable()
        emitter.line(init_event(harness))
        try:
            result = await run_turn(
                harness, emitter, prompt, started, budget_usd=opts.max_budget_usd
            )
        finally:
            await harness.end()
        _write_result(opts, emitter, result, error_text(result))
        return 0 if result["subtype"] == "success" else 1


#: The Claude Code version whose ``stream-json`` protocol this one follows, as ``system/init``
#: and the ``initialize`` answer report it (the SDKs read ``claude_code_version`` to decide
#: what they may use).
PROTOCOL_VERSION = "2.1.328"


def init_event(harness: Harness) -> dict[str, Any]:
    """The ``system/init`` event: what the session offers."""
    from taskloom._version import __version__

    listening = harness.listen_path
    return {
        "type": "system",
        "subtype": "init",
        "cwd": str(harness.cwd),
        "session_id": harness.session_id,
        "tools": [t.name for t in harness.tools],
        "mcp_servers": mcp_servers(harness),
        "model": harness.model_name,
        "permissionMode": str(harness.policy.mode),
        "slash_commands": [COMPACT_COMMAND["name"], *(c.name for c in typed_commands(harness))],
        "apiKeySource": api_key_source(),
        "output_style": "default",
        "agents": sorted(harness.agents.catalog.names()),
        "skills": [c.name for c in harness.agents.builder.skills or () if c.kind == "skill"],
        "plugins": [{"name": p.name, "path": str(p.root)} for p in harness.plugins.plugins],
        "claude_code_version": PROTOCOL_VERSION,
        "taskloom_version": __version__,
        # Ours: where other sessions reach this one (``SendMessage`` to ``uds:<path>``).
        **({"peer_socket": str(listening)} if listening is not None else {}),
        # And on the Ray cluster (``SendMessage`` to ``bridge:<session id>``).
        **({"peer_bridge": harness.bridge_address} if harness.bridge_address else {}),
    }


def typed_commands(harness: Harness) -> list[PromptCommand]:
    """The custom commands and skills a prompt ``/name args`` runs, by name."""
    catalog = harness.agents.builder.skills
    return catalog.typed() if catalog is not None else []


def mcp_servers(harness: Harness) -> list[dict[str, str]]:
    """The session's MCP servers and their status, as ``system/init`` lists them."""
    from taskloom.mcp.startup import server_status

    mcp = harness.started.mcp
    return [server_status(n, s) for n, s in (mcp.status() if mcp is not None else {}).items()]


async def run_turn(
    harness: Harness,
    emitter: Emitter,
    prompt: str | Message,
    started: float,
    *,
    budget_usd: float | None = None,
) -> dict[str, Any]:
    """Run one prompt on the main thread, writing its events; returns its ``result`` object.

    The run's own errors (the model's, a tool's, a stop request) end up in the result, not
    raised; the result is not written. Once the session's cost reaches ``budget_usd`` the run
    stops after the model's answer (``error_max_budget_usd``).
    """
    account = TurnAccount(emitter.tap, harness.session.engine)
    run = await _run_events(harness, emitter, prompt, budget_usd)
    subtype = _outcome(harness, emitter, run, budget_usd)
    return _result(harness, emitter, run, subtype, account, started)


@dataclass
class _Run:
    """What one run of the main thread came to, as its events went by."""

    finished: Finished | None = None
    error: str | None = None
    stop_reason: str | None = None
    #: Stopped after an answer that took the session's cost to --max-budget-usd.
    over_budget: bool = False
    #: The session's cost after the latest answer.
    spent: float = 0.0


async def _run_events(
    harness: Harness, emitter: Emitter, prompt: str | Message, budget_usd: float | None
) -> _Run:
    """Run ``prompt``, writing its events and its tasks' as they come; what the run came to.

    The tasks' events come from the emitter's subscription when it has one for the whole
    session (a stream-json session, whose tasks go on between turns), else from the run's own.
    """
    sub, pump = emitter.tasks, None
    if sub is None:
        sub = emitter.tasks = harness.runtime.subscribe()
        pump = asyncio.get_running_loop().create_task(_pump(sub, emitter))
    run = _Run()
    events = harness.run(prompt)
    try:
        async for event in events:
            emitter.flush_tasks()
            if not _emit_event(emitter, harness.runtime, event, run, budget_usd):
                break
    except BrokenPipeError:
        raise  # the reader went away: nothing more can be reported to it
    except asyncio.CancelledError:
        if not stop_requested():
            raise
        # SIGINT/SIGTERM (see run_main), or an interrupt: clean up, and report the run as
        # interrupted (run_main then gives a signal's exit code).
        run.error = "interrupted"
    except Exception as exc:  # report, as a result, rather than die with a traceback
        if not isinstance(exc, TaskloomError | OSError):
            log.debug("the run failed", exc_info=True)
        run.error = describe(exc)
    finally:
        await events.aclose()
        await _end_watch(harness, emitter, sub, pump)
    return run


def _emit_event(
    emitter: Emitter, runtime: TaskRuntime, event: Any, run: _Run, budget_usd: float | None
) -> bool:
    """Write one event of the run; False when the run must stop (over its cost budget)."""
    if isinstance(event, AssistantTurn):
        run.stop_reason = event.message.stop_reason
        emitter.line(
            {"type": "assistant", "message": event.message.full(), "parent_tool_use_id": None}
        )
        run.spent = runtime.usage.cost()
        if budget_usd is not None and run.spent >= budget_usd:
            run.over_budget = True  # its tool calls do not run: they would cost more
            return False
    elif isinstance(event, UserTurn):
        for note in event.notifications:
            _emit_notification(emitter, runtime, note)
        if event.origin != "prompt":
            emitter.line(
                {"type": "user", "message": event.message.wire(), "parent_tool_use_id": None}
            )
    elif isinstance(event, Compacted):
        emitter.line(compact_boundary(event))
    elif isinstance(event, Finished):
        run.finished = event
    return True


def compact_boundary(event: Compacted) -> dict[str, Any]:
    """The ``system/compact_boundary`` line of a compaction, as the Agent SDKs read it."""
    metadata = {"trigger": event.trigger, "pre_tokens": event.pre_tokens}
    return {"type": "system", "subtype": "compact_boundary", "compact_metadata": metadata}


async def _end_watch(
    harness: Harness, emitter: Emitter, sub: Subscription, pump: asyncio.Task[None] | None
) -> None:
    """Once the run is over: its tasks' last events written, its own subscription closed."""
    budgets = harness.agents.spawner.budgets
    if budgets.spent(harness.runtime.session_id) is not None:
        # The session's budget ran out: the stopped tasks' ends are streamed, and the
        # result says what they had spent.
        await budgets.settled()
    emitter.flush_tasks()
    if pump is None:
        return  # the session's subscription: it goes on
    emitter.tasks = None
    sub.close()
    pump.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pump


def _outcome(harness: Harness, emitter: Emitter, run: _Run, budget_usd: float | None) -> str:
    """The result's subtype; a run stopped by a budget or a schema gets its ``error`` here."""
    budgets = harness.agents.spawner.budgets
    session_id = harness.runtime.session_id
    if run.error is not None:
        return "error_during_execution"
    if run.finished is not None and run.finished.reason == "max_turns":
        run.error = f"Reached maximum number of turns ({harness.options.max_turns})"
        return "error_max_turns"
    if (spent_on := budgets.spent(session_id)) is not None:
        kind = budgets.spent_kind(session_id) or "token"
        if kind == "cost":  # --max-budget-usd (or sessionBudget.usd)
            subtype = "error_max_budget_usd"
            run.error = budget_error(budget_usd) if budget_usd is not None else f"Error: {spent_on}"
        else:  # token, tool_call, wall_time
            subtype = f"error_max_budget_{kind.replace('-', '_')}"
            run.error = f"Error: {spent_on}"
        harness.session.recorder.repair()
        return subtype
    if run.over_budget:
        run.error = budget_error(budget_usd)
        harness.session.recorder.repair()  # the calls it stopped before are answered
        return "error_max_budget_usd"
    if harness.wants_structured_output and harness.structured_output is None:
        run.error = "Failed to provide valid structured output after maximum retries"
        return "error_max_structured_output_retries"
    return "success"


def budget_error(budget_usd: float | None) -> str:
    """What an ``error_max_budget_usd`` result says, in Claude Code's words."""
    return f"Reached maximum budget (${budget_usd:g})"


def ended(result: dict[str, Any], text: str) -> dict[str, Any]:
    """``result`` with what it came to: ``result`` text on success, else ``errors``.

    As Claude Code's: an error result has no ``result`` field and ``errors`` lists what went
    wrong (the TypeScript SDK reads ``errors`` of every error result).
    """
    subtype = result["subtype"]
    if subtype == "success":
        result["result"] = text
    else:
        result["errors"] = [text or subtype]
    reason = _TERMINAL_REASONS.get(subtype)
    if subtype == "error_during_execution":
        reason = "aborted_streaming" if text == "interrupted" else None
        reason = "api_error" if text.startswith("API Error") else reason
    if reason is not None:
        result["terminal_reason"] = reason
    return result


#: Why a turn ended, in the SDKs' words (``terminal_reason``), by result subtype.
_TERMINAL_REASONS = {
    "success": "completed",
    "error_max_turns": "max_turns",
    "error_max_structured_output_retries": "structured_output_retry_exhausted",
    "error_max_budget_usd": "budget_exhausted",
    "error_max_budget_token": "budget_exhausted",
    "error_max_budget_tool_call": "budget_exhausted",
    "error_max_budget_wall_time": "budget_exhausted",
}


def error_text(result: dict[str, Any]) -> str:
    """The first error of an error result (its ``result`` text for a success)."""
    errors = result.get("errors")
    return str(errors[0]) if errors else str(result.get("result", ""))


def _result(
    harness: Harness,
    emitter: Emitter,
    run: _Run,
    subtype: str,
    account: TurnAccount,
    started: float,
) -> dict[str, Any]:
    """The ``result`` object of a run that has ended as ``subtype``."""
    engine = harness.session.engine
    runtime = harness.runtime
    result = {
        "type": "result",
        "subtype": subtype,
        "is_error": subtype != "success",
        "duration_ms": int((time.monotonic() - started) * 1000),
        "stop_reason": run.stop_reason,
        "session_id": runtime.session_id,
        **account.fields(engine),
        "permission_denials": engine.denials,
    }
    ended(result, run.error or (run.finished.result if run.finished else ""))
    if emitter.tap is not None:
        from taskloom.cli.agent_usage import agent_usage

        result["agentUsage"] = agent_usage(runtime.usage, runtime.list(include_evicted=True))
    if harness.structured_output is not None:
        result["structured_output"] = harness.structured_output
    return result


def known_session_id(options: Options) -> str | None:
    """The id of a session that exists before the run starts: the one it resumes.

    None for a new session (a fork too): its id names a session only once it is claimed.
    """
    return None if options.fork_session else options.resume


def early_result(emitter: Emitter, started: float, text: str) -> dict[str, Any]:
    """The result of a run that ended before its first turn finished."""
    if emitter.harness is not None and emitter.harness.claimed:
        emitter.session_id = emitter.harness.session_id  # claimed: a session that exists
    from taskloom.messages import Usage

    return {
        "type": "result",
        "subtype": "error_during_execution",
        "is_error": True,
        "duration_ms": int((time.monotonic() - started) * 1000),
        "duration_api_ms": 0,
        "num_turns": 0,
        "errors": [text],
        "session_id": emitter.session_id,
        "stop_reason": None,
        "total_cost_usd": 0,
        "usage": Usage().dump(),
        "modelUsage": {},
        "permission_denials": [],
    }


def _write_result(
    opts: PrintOptions, emitter: Emitter, result: dict[str, Any], error_line: str | None
) -> None:
    """Print the result in the chosen format.

    In text mode an error goes to stderr as ``error_line`` (None: the caller reports it).
    """
    emitter.result_written = True
    if emitter.tap is not None:
        emitter.tap.closed = True  # the result is the last line
    out = emitter.out
    if opts.output_format == "stream-json":
        emitter.line(result)
    elif opts.output_format == "json":
        result["uuid"] = new_uuid()
        out.write(json.dumps(result, ensure_ascii=False, separators=(",", ":")) + "\n")
    elif result["subtype"] == "success":
        text = result["result"]
        out.write(text + ("\n" if not text.endswith("\n") else ""))
    elif result["subtype"] == "error_max_turns":
        sys.stderr.write(f"Error: Reached max turns ({opts.session.max_turns})\n")
    elif error_line is not None:
        sys.stderr.write(f"{error_line}\n")
    out.flush()


def _emit_notification(emitter: Emitter, runtime: TaskRuntime, note: Any) -> None:
    event = notification_event(runtime.get(note.task_id), note)
    if event is not None:
        emitter.line(event)


def api_key_source() -> str:
    """The first credential variable set (``apiKeySource``), else ``none``."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
        if os.environ.get(name):
            return name
    return "none"


def main_print(
    opts: PrintOptions, runner: Callable[[PrintOptions], Awaitable[int]] = run_print
) -> int:
    """Run print mode (or another ``runner``) with signal handling; map errors to exit codes.

    Errors a user can cause or meet are one line on stderr (with a traceback only under
    ``--debug``): usage errors exit 2, the rest 1.
    """
    from taskloom.cli._run import configure_logging, run_main

    configure_logging(opts.debug)
    try:
        return run_main(lambda: runner(opts))
    except UsageError as exc:
        return _fail(opts, describe(exc), 2)
    except BrokenPipeError:
        # stdout was closed by its reader (e.g. piped into head): exit quietly.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silences the final flush
        return 1
    except (TaskloomError, OSError) as exc:
        return _fail(opts, describe(exc), 1)


def _fail(opts: PrintOptions, message: str, code: int) -> int:
    if opts.debug:
        import traceback

        traceback.print_exc()
    sys.stderr.write(message + "\n")
    return code
