"""The client's terminals as Bash's runner of foreground commands (ACP ``terminal/*``).

When the client offers ``terminal``, a foreground Bash call of the main thread runs in one of
its terminals: ``terminal/create`` (``bash -c`` with the script, the cwd, the environment
variables that differ from ours, an output byte limit), embedded in the call's ``tool_call``
as ``{"type": "terminal", "terminalId"}`` so the user watches it live, then
``terminal/wait_for_exit`` within the timeout, ``terminal/output``, and
``terminal/release``. At the timeout, and when the turn is cancelled, ``terminal/kill``
stops it first. The Bash tool makes the result what a local command's is
(:mod:`taskloom.tools.bash`). Background commands stay local tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

import acp
from acp.schema import EnvVariable

from taskloom.tools.backends import CommandEnd, CommandRequest

log = logging.getLogger(__name__)

#: How long a killed command may take to be reported ended.
KILL_WAIT_S = 10.0
#: How long releasing a terminal may take (a client that does not answer is left).
RELEASE_WAIT_S = 5.0
#: The exit code of a command killed at its timeout when the client does not say (SIGTERM).
KILLED_EXIT_CODE = 128 + signal.SIGTERM


class ClientTerminal:
    """Runs foreground commands in the client's terminals.

    Args:
        conn: The agent side of the connection (its ``*_terminal`` methods).
        session_id: The ACP session they run for.
        updates: Sends one ``session/update`` after those queued before it; None: sent
            through ``conn`` at once.
    """

    def __init__(
        self, conn: Any, session_id: str, updates: Callable[[Any], None] | None = None
    ) -> None:
        self._conn = conn
        self._session_id = session_id
        self._updates = updates

    async def run(self, request: CommandRequest) -> CommandEnd:
        """Run ``request`` in a new terminal to its end, or kill it at its timeout.

        Raises:
            OSError: The client could not start it, or failed while it ran.
        """
        creating = asyncio.ensure_future(self._create(request))
        try:
            terminal_id = await asyncio.shield(creating)
        except asyncio.CancelledError:
            await self._stop_created(creating)
            raise
        try:
            if request.tool_use_id:
                await self._embed(request.tool_use_id, terminal_id)
            return await self._finish(terminal_id, request.timeout)
        except (acp.RequestError, ConnectionError) as exc:
            await _shielded(self._kill(terminal_id))
            raise OSError(f"the editor's terminal failed: {exc}") from exc
        except asyncio.CancelledError:
            # The turn was cancelled: the command must not go on in the editor.
            await _shielded(self._kill(terminal_id))
            raise
        finally:
            await _shielded(self._release(terminal_id))

    async def _stop_created(self, creating: asyncio.Future[str]) -> None:
        """Cancelled while the client was starting it: stop it once the client says which."""
        try:
            terminal_id = await asyncio.wait_for(creating, KILL_WAIT_S)
        except (TimeoutError, OSError):
            return  # not started, or the client never said: nothing of ours to stop
        await _shielded(self._kill(terminal_id))
        await _shielded(self._release(terminal_id))

    async def _create(self, request: CommandRequest) -> str:
        ours = os.environ
        env = [
            EnvVariable(name=name, value=value)
            for name, value in request.env.items()
            if ours.get(name) != value
        ]
        try:
            created = await self._conn.create_terminal(
                session_id=self._session_id,
                command="bash",
                args=["-c", request.script],
                cwd=str(request.cwd),
                env=env,
                output_byte_limit=request.output_limit,
            )
        except (acp.RequestError, ConnectionError) as exc:
            raise OSError(f"the editor could not start a terminal: {exc}") from exc
        terminal_id: str = created.terminal_id
        return terminal_id

    async def _embed(self, tool_use_id: str, terminal_id: str) -> None:
        update = acp.update_tool_call(
            tool_use_id, status="in_progress", content=[acp.tool_terminal_ref(terminal_id)]
        )
        if self._updates is not None:
            self._updates(update)
        else:
            await self._conn.session_update(session_id=self._session_id, update=update)

    async def _finish(self, terminal_id: str, timeout: float) -> CommandEnd:
        """Wait for the command's exit (killing it at ``timeout``), then take its output."""
        timed_out = False
        try:
            status = await asyncio.wait_for(self._wait(terminal_id), timeout)
        except TimeoutError:
            timed_out = True
            status = await self._kill(terminal_id)
        out = await self._conn.terminal_output(session_id=self._session_id, terminal_id=terminal_id)
        code = _exit_code(status)
        if code is None:
            code = _exit_code(out.exit_status)
        if code is None:
            code = KILLED_EXIT_CODE if timed_out else 1
        return CommandEnd(
            out.output, code, timed_out=timed_out, cut=bool(out.truncated), terminal_id=terminal_id
        )

    async def _wait(self, terminal_id: str) -> Any:
        return await self._conn.wait_for_terminal_exit(
            session_id=self._session_id, terminal_id=terminal_id
        )

    async def _kill(self, terminal_id: str) -> Any:
        """Kill the command; its exit status once reported (None: not within the bound)."""
        await self._conn.kill_terminal(session_id=self._session_id, terminal_id=terminal_id)
        try:
            return await asyncio.wait_for(self._wait(terminal_id), KILL_WAIT_S)
        except TimeoutError:
            log.warning("terminal %s: no exit %gs after its kill", terminal_id, KILL_WAIT_S)
            return None

    async def _release(self, terminal_id: str) -> None:
        await asyncio.wait_for(
            self._conn.release_terminal(session_id=self._session_id, terminal_id=terminal_id),
            RELEASE_WAIT_S,
        )


def _exit_code(status: Any) -> int | None:
    """A shell's exit code from a terminal's exit status: 128 + N for a death by signal N."""
    if status is None:
        return None
    if status.exit_code is not None:
        code: int = status.exit_code
        return code
    name = status.signal
    if not name:
        return None
    with contextlib.suppress(KeyError, ValueError):
        return 128 + int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
    with contextlib.suppress(ValueError):
        return 128 + int(name)
    return None


async def _shielded(cleanup: Any) -> None:
    """Run ``cleanup`` to its end even if the caller is cancelled; its errors are logged."""
    task = asyncio.ensure_future(cleanup)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        # Cancelled again while cleaning up: the cleanup goes on; the cancel is the caller's.
        raise
    except Exception as exc:  # a client that fails its cleanup must not hide the result
        log.warning("terminal cleanup failed: %s", exc)


__all__ = ["ClientTerminal"]
