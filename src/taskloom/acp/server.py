"""``taskloom acp``: an Agent Client Protocol agent on stdio, on the official library.

:class:`TaskloomAgent` is the library's ``Agent``: ``initialize`` says what taskloom offers,
``session/new`` and ``session/load`` build an :class:`~taskloom.acp.sessions.AcpSession` (one
harness each, from the command line's :class:`Options` with the session's cwd and MCP
servers), ``session/prompt`` runs a turn and answers its stop reason, ``session/cancel`` ends
it, ``session/set_mode`` switches the permission mode. The slash commands are advertised after
``session/new`` and ``session/load``.

The wire is :class:`LineTransport`: one JSON-RPC message a line, as the library's, except that
a line that is not JSON (or not a request or response) is answered with a JSON-RPC error
(``-32700``, ``-32600``) instead of being dropped, and a line of any length is read (in
bounded pieces: see :mod:`taskloom.acp.lines`); the agent keeps serving. An unknown method gets the
library's ``-32601``; a request naming an unknown session ``-32602``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import acp
from acp.schema import (
    AgentCapabilities,
    AvailableCommand,
    AvailableCommandInput,
    HttpMcpServer,
    Implementation,
    McpCapabilities,
    McpServerStdio,
    PromptCapabilities,
    SessionMode,
    SessionModeState,
    SseMcpServer,
    UnstructuredCommandInput,
)

from taskloom.acp.client_fs import backends
from taskloom.acp.content import BadPrompt, prompt_of, replay
from taskloom.acp.lines import MAX_LINE_BYTES, BoundedLines, Overlong
from taskloom.acp.permission import AcpPrompter
from taskloom.acp.sessions import AcpSession
from taskloom.acp.tasks_view import TaskView, connection_sender, subagents_offered
from taskloom.acp.updates import AcpObserver, UpdateSink
from taskloom.errors import TaskloomError, UsageError, describe
from taskloom.harness import Harness, Options
from taskloom.session import COMPACT_COMMAND
from taskloom.tasks.ids import new_uuid

if TYPE_CHECKING:
    from taskloom.permissions import PermissionPrompter

log = logging.getLogger(__name__)

#: The permission modes, as the editor offers them: (id, name, description).
MODES = (
    ("default", "Default", "Ask before a call the rules do not allow"),
    ("acceptEdits", "Accept edits", "Allow file edits in the working directories"),
    ("plan", "Plan", "Read and plan; change nothing"),
    ("dontAsk", "Don't ask", "Deny what would ask"),
    ("bypassPermissions", "Bypass permissions", "Allow every call"),
)
#: Claude Code's other names for modes, as ``--permission-mode`` takes them.
MODE_ALIASES = {"manual": "default", "auto": "default"}


class LineTransport:
    """JSON-RPC messages, one a line, over a stream pair; bad lines are answered, not dropped."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        limit: int = MAX_LINE_BYTES,
    ) -> None:
        self._lines = BoundedLines(reader, limit)
        self._limit = limit
        self._writer = writer
        self._lock = asyncio.Lock()
        #: The client's capabilities as sent in ``initialize`` (the library's model drops
        #: those it does not know, such as ``subagents``).
        self.client_capabilities: dict[str, Any] | None = None

    async def send(self, message: dict[str, Any]) -> None:
        """Write one message (whole: one writer at a time)."""
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        async with self._lock:
            self._writer.write(data)
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        """The next message; None at the end of the input."""
        while True:
            line = await self._lines.next()
            if line is None:
                return None
            if isinstance(line, Overlong):
                answer = await self._overlong(line)
                if answer is not None:
                    return answer
                continue
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError as exc:
                await self._error(None, -32700, "Parse error", f"not JSON: {exc}")
                continue
            problem = _shape_problem(message)
            if problem is not None:
                request_id = message.get("id") if isinstance(message, dict) else None
                await self._error(request_id, -32600, "Invalid Request", problem)
                continue
            if message.get("method") == "initialize" and isinstance(message.get("params"), dict):
                self.client_capabilities = message["params"].get("clientCapabilities")
            return cast("dict[str, Any]", message)

    async def _overlong(self, line: Overlong) -> dict[str, Any] | None:
        """Answer a line too long to hold.

        For the client's answer to a request of ours, what is returned is the error that
        request ends with, so the call waiting on it fails instead of hanging.
        """
        details = f"a line of {line.size:,} bytes, over the limit of {self._limit:,}"
        log.warning("ACP: %s (id %r) was read past", details, line.request_id)
        if line.is_request or line.request_id is None:
            await self._error(line.request_id, -32600, "Invalid Request", details)
            return None
        error = {"code": -32600, "message": "Invalid Request", "data": {"details": details}}
        return {"jsonrpc": "2.0", "id": line.request_id, "error": error}

    async def _error(self, request_id: Any, code: int, text: str, details: str) -> None:
        error = {"code": code, "message": text, "data": {"details": details}}
        await self.send({"jsonrpc": "2.0", "id": request_id, "error": error})

    async def close(self) -> None:
        """Close the output."""
        with contextlib.suppress(Exception):
            self._writer.close()


def _shape_problem(message: Any) -> str | None:
    """Why a parsed line is no JSON-RPC message (None: it is one)."""
    if not isinstance(message, dict):
        return f"a {type(message).__name__}, not an object"
    if "method" in message:
        return None if isinstance(message["method"], str) else "its method is not a string"
    if "id" in message and ("result" in message or "error" in message):
        return None
    return "neither a request (a method) nor a response (an id and a result or error)"


def mcp_config(servers: list[Any] | None) -> list[str]:
    """The ``--mcp-config`` entries the client's MCP servers are, one JSON string.

    Raises:
        acp.RequestError: A server of a kind taskloom does not run (an ACP-hosted one).
    """
    config: dict[str, Any] = {}
    for server in servers or ():
        if isinstance(server, McpServerStdio):
            env = {v.name: v.value for v in server.env or ()}
            config[server.name] = {"command": server.command, "args": list(server.args), "env": env}
        elif isinstance(server, HttpMcpServer | SseMcpServer):
            headers = {h.name: h.value for h in server.headers or ()}
            kind = "http" if isinstance(server, HttpMcpServer) else "sse"
            config[server.name] = {"type": kind, "url": server.url, "headers": headers}
        else:
            kind = type(server).__name__
            raise acp.RequestError.invalid_params({"mcpServers": f"{kind}: unsupported transport"})
    return [json.dumps({"mcpServers": config})] if config else []


def _no_session(session_id: str) -> acp.RequestError:
    return acp.RequestError.invalid_params({"sessionId": session_id, "details": "unknown session"})


class TaskloomAgent:
    """The ACP agent: sessions by id, each a harness (see the module docstring).

    Args:
        options: The command line's options; each session gets a copy with its own cwd.
    """

    def __init__(self, options: Options) -> None:
        self.options = options
        self.sessions: dict[str, AcpSession] = {}
        self.conn: Any = None
        #: What the client said it offers (``initialize``), for the backends that use it.
        self.client_capabilities: Any = None
        #: The wire, which keeps the capabilities as sent (``subagents``).
        self.transport: LineTransport | None = None

    def on_connect(self, conn: Any) -> None:
        """The connection to the client (its methods: updates, permission, fs, terminals)."""
        self.conn = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> acp.InitializeResponse:
        """What taskloom offers; no authentication (the model's own settings apply)."""
        from taskloom._version import __version__

        self.client_capabilities = client_capabilities
        version = min(protocol_version, acp.PROTOCOL_VERSION) or acp.PROTOCOL_VERSION
        return acp.InitializeResponse(
            protocol_version=version,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(image=True, embedded_context=True),
                mcp_capabilities=McpCapabilities(http=True, sse=True),
            ),
            auth_methods=[],
            agent_info=Implementation(name="taskloom", title="taskloom", version=__version__),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        """No method is offered: every request is refused."""
        raise acp.RequestError.invalid_params({"methodId": method_id, "details": "no auth methods"})

    async def new_session(
        self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> acp.NewSessionResponse:
        """Start a session in ``cwd`` with the client's MCP servers."""
        session = await self._open(cwd, mcp_servers, session_id=new_uuid())
        return acp.NewSessionResponse(session_id=session.session_id, modes=self._modes(session))

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> acp.LoadSessionResponse:
        """Continue a recorded taskloom session, replaying its conversation first."""
        if session_id in self.sessions:
            raise acp.RequestError.invalid_params({"sessionId": session_id, "details": "open"})
        session = await self._open(cwd, mcp_servers, resume=session_id)
        for update in replay(session.harness.session.engine.messages, session.harness.cwd):
            session.sink.put(update)
        await session.sink.drain()  # the whole conversation before the answer
        return acp.LoadSessionResponse(modes=self._modes(session))

    async def _open(
        self,
        cwd: str,
        mcp_servers: list[Any] | None,
        *,
        session_id: str | None = None,
        resume: str | None = None,
    ) -> AcpSession:
        acp_id = session_id or resume or ""
        sink = UpdateSink(lambda update: self.conn.session_update(acp_id, update))
        offered = self.transport.client_capabilities if self.transport is not None else None
        tasks = TaskView(acp_id, connection_sender(self.conn), subagents=subagents_offered(offered))
        observer = AcpObserver(sink, agent_message=tasks.agent_message)
        prompter = AcpPrompter(self.conn.request_permission, acp_id)
        options = self.session_options(
            cwd, mcp_servers, observer, prompter, session_id=session_id, resume=resume
        )
        # The client's buffers and terminals, when it offers them, for the main thread's tools.
        options = backends(self.conn, self.client_capabilities, acp_id, sink.put).apply(options)
        harness = Harness(options)
        prompter.harness = harness
        try:
            await harness.start()
        except (TaskloomError, OSError) as exc:
            await sink.aclose()
            if resume is not None and not harness.claimed:
                raise _no_session(resume) from exc
            raise acp.RequestError.invalid_params({"details": describe(exc)}) from exc
        harness.write_turn_records()  # while the editor waits for its session, not its answer
        session = AcpSession(acp_id, harness, sink, observer)
        session.tasks = tasks
        tasks.attach(harness)
        self.sessions[acp_id] = session
        session.start()
        asyncio.get_running_loop().call_soon(sink.put, self._commands(harness))
        return session

    def session_options(
        self,
        cwd: str,
        mcp_servers: list[Any] | None,
        observer: AcpObserver,
        prompter: PermissionPrompter,
        *,
        session_id: str | None,
        resume: str | None,
    ) -> Options:
        """A session's options: the command line's, in ``cwd``, with the client's servers."""
        if not Path(cwd).is_absolute():
            raise acp.RequestError.invalid_params({"cwd": f"{cwd!r} is not an absolute path"})
        if not Path(cwd).is_dir():
            raise acp.RequestError.invalid_params({"cwd": f"{cwd} is not a directory"})
        base = self.options
        return dataclasses.replace(
            base,
            cwd=cwd,
            session_id=session_id,
            resume=resume,
            mcp_config=[*base.mcp_config, *mcp_config(mcp_servers)],
            observer=observer,
            prompter=prompter,
            headless=True,
            wait_for_tasks=False,  # a turn ends when the model ends it; tasks go on
        )

    def _modes(self, session: AcpSession) -> SessionModeState:
        perms = session.harness.settings.get("permissions")
        disabled = (
            isinstance(perms, dict) and perms.get("disableBypassPermissionsMode") == "disable"
        )
        modes = [
            SessionMode(id=mode, name=name, description=text)
            for mode, name, text in MODES
            if not (disabled and mode == "bypassPermissions")
        ]
        return SessionModeState(
            current_mode_id=str(session.harness.policy.mode), available_modes=modes
        )

    def _commands(self, harness: Harness) -> Any:
        """The ``available_commands_update``: ``/compact`` and the commands and skills."""
        catalog = harness.agents.builder.skills
        commands = [
            AvailableCommand(
                name=str(COMPACT_COMMAND["name"]),
                description=str(COMPACT_COMMAND["description"]),
                input=AvailableCommandInput(
                    UnstructuredCommandInput(hint=str(COMPACT_COMMAND["argumentHint"]))
                ),
            )
        ]
        for command in catalog.typed() if catalog is not None else []:
            hint = command.argument_hint
            commands.append(
                AvailableCommand(
                    name=command.name,
                    description=command.description,
                    input=AvailableCommandInput(UnstructuredCommandInput(hint=hint))
                    if hint
                    else None,
                )
            )
        return acp.schema.AvailableCommandsUpdate(
            session_update="available_commands_update", available_commands=commands
        )

    def _session(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise _no_session(session_id)
        return session

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> acp.PromptResponse:
        """Run a turn on ``prompt``; answered once it ended, with its stop reason."""
        session = self._session(session_id)
        try:
            message = prompt_of(prompt)
        except BadPrompt as exc:
            raise acp.RequestError.invalid_params({"prompt": str(exc)}) from exc
        stop = await session.prompt(message)
        return acp.PromptResponse(stop_reason=stop)  # type: ignore[arg-type]

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """End the session's running turn (a notification: nothing is answered)."""
        session = self.sessions.get(session_id)
        if session is not None:
            session.cancel()
            return
        for session in list(self.sessions.values()):  # a child session: its task is stopped
            if session.tasks is not None and await session.tasks.cancel(session_id):
                return

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> None:
        """Go on in the permission mode ``mode_id``."""
        session = self._session(session_id)
        try:
            session.harness.set_permission_mode(MODE_ALIASES.get(mode_id, mode_id))
        except UsageError as exc:
            raise acp.RequestError.invalid_params({"modeId": str(exc)}) from exc
        session.mode_now()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """No extension methods."""
        raise acp.RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        """Extension notifications are ignored."""

    async def aclose(self) -> None:
        """End every session."""
        sessions, self.sessions = list(self.sessions.values()), {}
        for session in sessions:
            with contextlib.suppress(Exception):
                await session.aclose()


async def serve(
    options: Options,
    reader: asyncio.StreamReader | None = None,
    writer: asyncio.StreamWriter | None = None,
) -> int:
    """Serve ACP on ``reader``/``writer`` (default: stdio) until the input ends; exit code."""
    from acp.agent.connection import AgentSideConnection

    if reader is None or writer is None:
        reader, writer = await acp.stdio_streams()
    agent = TaskloomAgent(options)
    transport = agent.transport = LineTransport(reader, writer)
    conn = AgentSideConnection(cast(Any, agent), transport, listening=False)
    try:
        await conn.listen()
    finally:
        await agent.aclose()
        with contextlib.suppress(Exception):
            await conn.close()
    return 0


__all__ = ["MODES", "LineTransport", "TaskloomAgent", "mcp_config", "serve"]
