"""Command hooks that go on in the background, and what they say when they end.

A hook runs in the background when its entry says ``"async": true`` or ``"asyncRewake": true``
(from its start: nothing waits for it), or when its first line of stdout is a JSON object with
``"async": true`` (its caller stops waiting there; ``asyncTimeout``, in milliseconds, is then
its time, else its own timeout). Either way it is the same program
:func:`~taskloom.process.run.run_program` runs: recorded for the orphan sweep before it starts,
killed (and the kill verified) at its timeout, and here held by its session's
:class:`BackgroundHooks`, which kills those still running when the session ends (as Claude
Code's ``-p`` does at teardown). A hook cannot decide anything from the background: the action
it was about has gone on. When it ends, as in Claude Code:

- an ``asyncRewake`` hook that exits 2 wakes its agent, idle or not: its stderr (its stdout
  when stderr is empty) after its ``rewakeMessage`` is a ``next`` notification in the
  session's mailbox, for the agent whose hook it was; its ``rewakeSummary`` (or a
  ``rewakeSummary`` in its stdout's JSON, which wins, cut at 300 characters) is the row's
  one-line summary for the user;
- otherwise, on exit 0, the ``systemMessage`` and ``additionalContext`` of its JSON answer (the
  first JSON line of its stdout that is not the ``{"async": true}`` line) go to the model with
  its next turn, as a ``later`` notification; a field of the wrong type is dropped;
- a timeout, another exit code or bad JSON is logged on ``taskloom.hooks``, and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import weakref
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from taskloom._dataclass import dataclass
from taskloom.quoting import quote

if TYPE_CHECKING:
    from taskloom.hooks.config import CommandHook, HookEvent
    from taskloom.tasks.runtime import TaskRuntime

_log = logging.getLogger("taskloom.hooks")

#: Longest ``rewakeSummary`` a hook's output may set (Claude Code cuts it there).
REWAKE_SUMMARY_CAP = 300


class HookResult(Protocol):
    """What a hook's program did (a :class:`taskloom.hooks.runner.HookResult`)."""

    @property
    def exit_code(self) -> int | None:
        """Its exit status; None if it did not run to an exit."""
        ...

    @property
    def stdout(self) -> str:
        """Its standard output."""
        ...

    @property
    def stderr(self) -> str:
        """Its standard error, or why it did not run."""
        ...

    @property
    def timed_out(self) -> bool:
        """Whether it was killed at its timeout."""
        ...

    @property
    def duration(self) -> float:
        """Seconds it ran."""
        ...


@dataclass(frozen=True, slots=True)
class Background:
    """Where the hooks of one agent go when they run in the background.

    Attributes:
        hooks: The session's background hooks.
        owner: The agent whose hooks they are (the session id on the main thread): what they
            say when they end is for it.
    """

    hooks: BackgroundHooks
    owner: str


class BackgroundHooks:
    """A session's hooks running in the background; those left are stopped at its end.

    Args:
        runtime: The session's runtime: its mailbox carries what they say, its end stops them.
    """

    def __init__(self, runtime: TaskRuntime) -> None:
        self._runtime = runtime
        self._running: set[asyncio.Task[None]] = set()
        runtime.on_close(self.close)

    @property
    def running(self) -> int:
        """How many still run."""
        return len(self._running)

    def adopt(
        self,
        run: Awaitable[HookResult],
        hook: CommandHook,
        event: HookEvent,
        owner: str,
    ) -> None:
        """Hold ``run`` (the hook's program, started) until it ends; then deliver its answer."""
        task = asyncio.get_running_loop().create_task(
            self._finish(run, hook, event, owner), name=f"background hook {event}"
        )
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _finish(
        self, run: Awaitable[HookResult], hook: CommandHook, event: HookEvent, owner: str
    ) -> None:
        # Cancelled (the session ends), the await cancels the run: its tree is killed.
        result = await run
        try:
            self._deliver(result, hook, event, owner)
        except Exception:  # a store that cannot be written must not take the loop down
            _log.exception("background hook %r: its answer could not be delivered", hook.command)

    async def close(self) -> None:
        """Stop every hook still running (their trees killed, the kills verified)."""
        running = list(self._running)
        for task in running:
            task.cancel()
        if running:
            _log.info("%d background hook(s) stopped at the session's end", len(running))
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait(running)

    def _deliver(self, r: HookResult, hook: CommandHook, event: HookEvent, owner: str) -> None:
        name = f"background {event} hook {hook.command!r}"
        if r.timed_out:
            _log.warning("%s: timed out after %.1fs; its output is dropped", name, r.duration)
        elif r.exit_code is None:
            _log.warning("%s: %s", name, r.stderr.strip() or "did not run")
        elif r.exit_code == 2 and hook.rewake:
            self._wake(r, hook, event, owner)
        elif r.exit_code != 0:
            _log.warning("%s: exit code %s: %s", name, r.exit_code, r.stderr.strip())
        else:
            self._context(r, hook, event, owner)

    def _wake(self, r: HookResult, hook: CommandHook, event: HookEvent, owner: str) -> None:
        """An ``asyncRewake`` hook exited 2: wake its agent with what it said."""
        answer = _answer(r.stdout)
        said = r.stderr.strip() or _without_async_line(r.stdout).strip()
        if hook.rewake_message:
            text = f"{hook.rewake_message}\n\n{said}"
        else:
            text = f"{event} hook feedback:\n[{hook.command}]: {said}"
        override = answer.get("rewakeSummary")
        summary = override if isinstance(override, str) and override.strip() else ""
        summary = summary[:REWAKE_SUMMARY_CAP] or hook.rewake_summary
        summary = summary or f"{event} hook {hook.command[:80]!r} exited with code 2"
        _log.info("%s", summary)
        self._post(owner, event, _reminder(text), summary, "next")

    def _context(self, r: HookResult, hook: CommandHook, event: HookEvent, owner: str) -> None:
        """A hook ended well: its ``systemMessage`` and ``additionalContext`` for the model."""
        answer = _answer(r.stdout, hook.command)
        texts = []
        message = answer.get("systemMessage")
        specific = answer.get("hookSpecificOutput")
        context = specific.get("additionalContext") if isinstance(specific, dict) else None
        for field, value in (("systemMessage", message), ("additionalContext", context)):
            if value is not None and not isinstance(value, str):
                _log.warning("background hook %r: %s is not a string, dropped", hook.command, field)
            elif value:
                texts.append(value)
        if texts:
            body = "\n\n".join(_reminder(f"{event} hook additional context: {t}") for t in texts)
            self._post(owner, event, body, f"{event} hook {hook.command[:80]!r}", "later")

    def _post(self, owner: str, event: HookEvent, body: str, summary: str, priority: Any) -> None:
        if self._runtime.closing:
            _log.info("background hook ended as the session ends; not delivered: %s", summary)
            return
        self._runtime.mailbox.post(
            recipient=owner,
            sender=f"hook_{secrets.token_hex(4)}",
            kind="notification",
            topic="hook",
            priority=priority,
            body=body,
            summary=summary,
        )


def async_request(line: bytes) -> float | None:
    """The seconds a hook whose first stdout line is ``line`` asks for in the background.

    None when the line is not ``{"async": true, ...}``. ``asyncTimeout`` is in milliseconds;
    0.0 means it named none (its own timeout holds).
    """
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("async") is not True:
        return None
    ms = data.get("asyncTimeout")
    if isinstance(ms, int | float) and not isinstance(ms, bool) and ms > 0:
        return float(ms) / 1000.0
    return 0.0


def _without_async_line(stdout: str) -> str:
    """``stdout`` without its first line when that is the ``{"async": true}`` announcement."""
    first, newline, rest = stdout.partition("\n")
    return rest if newline and async_request(first.encode()) is not None else stdout


def _answer(stdout: str, command: str | None = None) -> dict[str, Any]:
    """The hook's JSON answer: the first line starting with ``{`` past the async line."""
    for line in _without_async_line(stdout).splitlines():
        if not line.lstrip().startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            if command is not None:
                _log.warning("background hook %r: invalid JSON output: %s", command, exc)
            return {}
        return data if isinstance(data, dict) else {}
    return {}


def _reminder(text: str) -> str:
    return f"<system-reminder>\n{quote(text)}\n</system-reminder>"


#: Each session's background hooks (a runtime is one session's).
_BY_RUNTIME: weakref.WeakKeyDictionary[TaskRuntime, BackgroundHooks] = weakref.WeakKeyDictionary()


def background_hooks(runtime: TaskRuntime) -> BackgroundHooks:
    """The background hooks of ``runtime``'s session (made on first use)."""
    found = _BY_RUNTIME.get(runtime)
    if found is None:
        found = _BY_RUNTIME[runtime] = BackgroundHooks(runtime)
    return found


__all__ = [
    "REWAKE_SUMMARY_CAP",
    "Background",
    "BackgroundHooks",
    "async_request",
    "background_hooks",
]
