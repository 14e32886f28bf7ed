"""An editor on the client side of ACP, for the file system and terminal tests.

:class:`BufferEditor` keeps a buffer map (path → text) that wins over the disk, as an editor's
unsaved buffers do, answers ``fs/*`` from it, and runs ``terminal/*`` commands as real
subprocesses (each in its own process group) whose output it collects as they run.
:func:`connected` joins it to an agent side over the library's in-memory transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acp
from acp._transport import memory_transport_pair
from acp.schema import TerminalExitStatus

from helpers import wait_until


@dataclass
class Terminal:
    """One command the editor runs: its process, its output so far, what was asked of it."""

    process: asyncio.subprocess.Process
    limit: int | None
    command: list[str]
    cwd: str | None
    env: dict[str, str]
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    reader: asyncio.Task[None] | None = None
    killed: bool = False
    released: bool = False

    async def pump(self) -> None:
        """Collect the output as it comes, keeping its last ``limit`` bytes."""
        assert self.process.stdout is not None
        while chunk := await self.process.stdout.read(4096):
            self.output += chunk
            if self.limit is not None and len(self.output) > self.limit:
                del self.output[: len(self.output) - self.limit]
                while self.output and (self.output[0] & 0xC0) == 0x80:  # a character's middle
                    del self.output[0]
                self.truncated = True

    def status(self) -> TerminalExitStatus | None:
        """Its exit status once it has ended."""
        code = self.process.returncode
        if code is None:
            return None
        if code < 0:
            return TerminalExitStatus(signal=signal.Signals(-code).name)
        return TerminalExitStatus(exit_code=code)

    def kill(self) -> None:
        """SIGTERM to its whole process group, as an editor's stop button does."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)


class BufferEditor:
    """The client: buffers over the disk, terminals as subprocesses, updates recorded."""

    def __init__(self, buffers: dict[str, str] | None = None) -> None:
        self.buffers: dict[str, str] = dict(buffers or {})
        self.fs_calls: list[tuple[str, str]] = []
        self.updates: list[Any] = []
        self.terminals: dict[str, Terminal] = {}

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no permission is asked in these tests")

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None,
        **kwargs: Any,
    ) -> acp.ReadTextFileResponse:  # fmt: skip
        self.fs_calls.append(("read", path))
        if path in self.buffers:
            return acp.ReadTextFileResponse(content=self.buffers[path])
        if os.path.isfile(path):
            return acp.ReadTextFileResponse(content=Path(path).read_bytes().decode())
        raise acp.RequestError.resource_not_found(path)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> acp.WriteTextFileResponse:
        self.fs_calls.append(("write", path))
        self.buffers[path] = content  # saving is the user's: the disk is left alone
        return acp.WriteTextFileResponse()

    async def create_terminal(
        self, session_id: str, command: str, args: list[str] | None = None,
        env: list[Any] | None = None, cwd: str | None = None,
        output_byte_limit: int | None = None, **kwargs: Any,
    ) -> acp.CreateTerminalResponse:  # fmt: skip
        extra = {v.name: v.value for v in env or []}
        process = await asyncio.create_subprocess_exec(
            command, *(args or []), cwd=cwd, env={**os.environ, **extra},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        term = Terminal(process, output_byte_limit, [command, *(args or [])], cwd, extra)
        term.reader = asyncio.get_running_loop().create_task(term.pump())
        terminal_id = f"term-{len(self.terminals) + 1}"
        self.terminals[terminal_id] = term
        return acp.CreateTerminalResponse(terminal_id=terminal_id)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> acp.TerminalOutputResponse:
        term = self.terminals[terminal_id]
        return acp.TerminalOutputResponse(
            output=term.output.decode("utf-8", "replace"),
            truncated=term.truncated,
            exit_status=term.status(),
        )

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> acp.WaitForTerminalExitResponse:
        term = self.terminals[terminal_id]
        await term.process.wait()
        assert term.reader is not None
        await term.reader
        status = term.status()
        assert status is not None
        return acp.WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> acp.KillTerminalResponse:
        term = self.terminals[terminal_id]
        term.killed = True
        term.kill()
        return acp.KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> acp.ReleaseTerminalResponse:
        term = self.terminals[terminal_id]
        term.released = True
        if term.process.returncode is None:  # release kills a command still running
            term.kill()
            await term.process.wait()
        return acp.ReleaseTerminalResponse()

    async def close(self) -> None:
        """Stop whatever still runs (a failed test's), and reap it."""
        for term in self.terminals.values():
            if term.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(term.process.pid, signal.SIGKILL)
                await term.process.wait()
            if term.reader is not None:
                await term.reader


class _Agent:
    """The agent side's handler of client requests: these tests send none."""

    def __init__(self) -> None:
        self.conn: Any = None

    def on_connect(self, conn: Any) -> None:
        self.conn = conn


@contextlib.asynccontextmanager
async def connected(editor: BufferEditor) -> AsyncIterator[Any]:
    """The agent side of a connection to ``editor`` (what a session's backends call)."""
    agent_end, client_end = memory_transport_pair()
    agent = _Agent()
    serving = asyncio.get_running_loop().create_task(acp.run_agent(agent, agent_end))
    client = acp.connect_to_agent(editor, client_end)
    try:
        await wait_until(lambda: agent.conn is not None, what="the agent side's connection")
        yield agent.conn
    finally:
        await client.close()
        await asyncio.wait_for(serving, 10)
        await editor.close()


@contextlib.asynccontextmanager
async def agent_connected(options: Any, editor: BufferEditor) -> AsyncIterator[Any]:
    """A client connection from ``editor`` to a TaskloomAgent built from ``options``."""
    from acp.agent.connection import AgentSideConnection
    from acp.client.connection import ClientSideConnection

    from taskloom.acp.server import TaskloomAgent

    agent = TaskloomAgent(options)
    agent_end, client_end = memory_transport_pair()
    agent_side = AgentSideConnection(agent, agent_end)  # type: ignore[arg-type]
    client = ClientSideConnection(editor, client_end)  # type: ignore[arg-type]
    try:
        yield client
    finally:
        await agent.aclose()
        await client.close()
        await agent_side.close()
        await editor.close()
