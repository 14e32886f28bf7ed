"""MCP client sessions, one per server, started on demand and offered as taskloom tools.

The SDK's transports are anyio context managers that must be entered and exited by the same
task. So each server gets one long-lived runner task: it holds the ``async with`` blocks (in an
``AsyncExitStack``) inside a cancel scope, serves calls that arrive through a queue, and leaves
when that scope is cancelled (by :meth:`McpManager.aclose`, or when a call finds the server
gone). Leaving unwinds the stack, which ends the session and stops a stdio server: stdin closed,
then TERM and KILL to its process group, each step bounded.

Every stdio server carries a tag in ``TASKLOOM_TASK_ID``, like our shells and hooks, so after
shutdown the manager can prove that no process of any server survived (and kill one that did).

The ``mcp`` SDK (~0.7 s at import) is imported only once a server starts, by the helpers in
:mod:`taskloom.mcp._sdk`, which also bridge the SDK's 1.x and 2.x APIs; on a worker thread,
after a stdio server's process is spawned, so that the servers boot (in parallel) meanwhile.
Servers of type ``sdk`` run in the program driving the session and are reached through it
(:mod:`taskloom.mcp.program`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import secrets
import time
import warnings
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import field
from inspect import signature
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio

from taskloom._aio import finish_despite_cancel
from taskloom._dataclass import dataclass
from taskloom._version import __version__
from taskloom.mcp._sdk import (
    describe,
    field_of,
    is_disconnect,
    list_tools,
    load_sdk,
    open_transport,
    to_result,
)
from taskloom.mcp._stderr import StderrTail
from taskloom.mcp.config import McpServerConfig
from taskloom.mcp.program import McpMessageCaller, open_program_transport
from taskloom.mcp.stdio import spawn_stdio
from taskloom.mcp.tool import McpTool, McpToolInfo
from taskloom.mcp.watch import LogLevels, McpWatcher, Subscriptions, event_of
from taskloom.process.kill import find_tree, kill_tree
from taskloom.process.spawn import TASK_ENV
from taskloom.tools.base import Tool, ToolResult, tool_error

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["McpManager", "McpTool", "McpToolInfo"]

log = logging.getLogger("taskloom.mcp")

_State = Literal["pending", "connecting", "connected", "failed"]


@dataclass(slots=True)
class _Call:
    tool: str  # what the call is named in its errors (a tool, or a request such as a subscribe)
    arguments: dict[str, Any]
    future: asyncio.Future[ToolResult]
    run: Callable[[ClientSession], Awaitable[ToolResult]] | None = None  # None: call the tool


@dataclass(slots=True)
class _Server:
    config: McpServerConfig
    tag: str
    state: _State = "pending"
    error: str = ""
    tools: list[McpTool] = field(default_factory=list)
    queue: asyncio.Queue[_Call] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None
    scope: anyio.CancelScope | None = None
    stop_reason: str = "closed"
    stderr: StderrTail | None = None
    watchers: list[McpWatcher] = field(default_factory=list)
    subscribable: bool = False  # it serves resources/subscribe (its capabilities say)
    process: Any = None  # a stdio server's process


class McpManager:
    """Connects to configured MCP servers on demand and keeps one session per server.

    Args:
        servers: The servers that may be started, by name (see
            :func:`~taskloom.mcp.config.load_mcp_config`).
        cwd: The working directory of stdio servers (inherited when None).
        connect_timeout: Seconds a server gets to initialize and list its tools.
        call_timeout: Seconds one tool call may take before it is abandoned.
        close_timeout: Seconds :meth:`aclose` waits for the servers to shut down gracefully.
        program: Reaches the servers of type ``sdk``, hosted by the program driving the
            session; without it they fail to start (their status says why).

    Attributes:
        log_levels: The log levels its servers' watchers asked for (a monitor's ``level``).
    """

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        cwd: Path | None = None,
        connect_timeout: float = 30.0,
        call_timeout: float = 600.0,
        close_timeout: float = 10.0,
        program: McpMessageCaller | None = None,
    ) -> None:
        self._servers = {
            name: _Server(cfg, "mcp-" + secrets.token_hex(6)) for name, cfg in servers.items()
        }
        self._cwd = cwd
        self._program = program
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.close_timeout = close_timeout
        self._changed = asyncio.Event()
        self._closed = False
        self._subs = Subscriptions()
        self.log_levels = LogLevels()

    async def __aenter__(self) -> McpManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self, names: Iterable[str] | None = None, *, wait: bool = True) -> None:
        """Start the named servers (all when None) that are not started yet.

        A server that cannot start is recorded as failed (see :meth:`status`); nothing raises.

        Args:
            names: Server names; unknown names are skipped with a warning.
            wait: Wait (at most ``connect_timeout`` and a little) until each is connected or
                failed; otherwise return at once and let :meth:`wait_for` do the waiting.
        """
        targets = []
        for name in self._servers if names is None else names:
            srv = self._servers.get(name)
            if srv is None:
                log.warning("MCP server %r is not configured", name)
                continue
            targets.append(srv)
            if srv.task is None and srv.state == "pending" and not self._closed:
                srv.state = "connecting"
                srv.task = asyncio.create_task(self._run(srv), name=f"mcp:{name}")
        if wait:
            # The runner bounds initialization itself; the margin covers spawning and teardown.
            deadline = time.monotonic() + self.connect_timeout + 5.0
            while any(s.state == "connecting" for s in targets):
                if not await self._wait_change(deadline):
                    break

    @property
    def tags(self) -> list[str]:
        """The ``TASKLOOM_TASK_ID`` tags its server processes carry (for the orphan sweep)."""
        return [srv.tag for srv in self._servers.values()]

    def tools(self) -> list[Tool[Any]]:
        """The tools of every connected server, named ``mcp__<server>__<tool>``."""
        return [t for srv in self._servers.values() if srv.state == "connected" for t in srv.tools]

    def status(self) -> dict[str, str]:
        """Each server's state: ``connected``, ``failed: <why>`` or ``pending``."""
        out = {}
        for name, srv in self._servers.items():
            if srv.state in ("connected", "failed"):
                out[name] = "connected" if srv.state == "connected" else f"failed: {srv.error}"
            else:
                out[name] = "pending"
        return out

    async def wait_for(self, patterns: list[str], timeout: float = 30.0) -> list[str]:
        """Wait until a server matching each pattern is connected, starting them if needed.

        Args:
            patterns: ``fnmatch``-style patterns on server names.
            timeout: The longest wait in seconds.

        Returns:
            The patterns still without a connected server. A pattern whose servers all failed
            (or that matches none) stops the wait early: it cannot be met any more.
        """
        matching = {p: [n for n in self._servers if fnmatch.fnmatchcase(n, p)] for p in patterns}
        await self.start({n for names in matching.values() for n in names}, wait=False)
        deadline = time.monotonic() + timeout
        while True:
            missing = [
                p
                for p in patterns
                if not any(self._servers[n].state == "connected" for n in matching[p])
            ]
            hopeful = [
                p
                for p in missing
                if any(self._servers[n].state in ("pending", "connecting") for n in matching[p])
            ]
            if not hopeful or not await self._wait_change(deadline):
                return missing

    async def call(self, server: str, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Call ``tool`` on ``server``; every failure is a tool error naming the server.

        A server not started yet is started first.
        """
        return await self._submit(server, _Call(tool, dict(arguments), self._future()))

    async def subscribe(self, server: str, uri: str) -> ToolResult:
        """Ask ``server`` to tell of changes to ``uri`` (``notifications/resources/updated``).

        Callers of one resource share its subscription: only the first asks the server, and
        only the last :meth:`unsubscribe` ends it. A server whose capabilities do not offer
        subscriptions is refused without asking it.
        """
        srv = self._servers.get(server)
        if srv is not None and srv.state in ("pending", "connecting"):
            await self.start([server])
        if srv is not None and srv.state == "connected" and not srv.subscribable:
            return tool_error(f"MCP server {server!r} does not offer resource subscriptions")
        result = ToolResult(f"subscribed to {uri}")

        async def run(session: ClientSession) -> ToolResult:
            with _sdk_deprecation_quiet():
                await session.subscribe_resource(uri)
            return result

        async def ask() -> bool:
            nonlocal result
            call = _Call("resources/subscribe", {}, self._future(), run)
            result = await self._submit(server, call)
            return not result.is_error

        await self._subs.acquire(server, uri, ask)
        return result

    async def unsubscribe(self, server: str, uri: str, timeout: float = 5.0) -> ToolResult:
        """Let go of ``uri``; the last holder ends it, waiting at most ``timeout`` s for that."""
        result = ToolResult(f"unsubscribed from {uri}")

        async def run(session: ClientSession) -> ToolResult:
            with _sdk_deprecation_quiet():
                await session.unsubscribe_resource(uri)
            return result

        async def ask() -> None:
            nonlocal result
            call = _Call("resources/unsubscribe", {}, self._future(), run)
            result = await self._submit(server, call, timeout=timeout, start=False)

        await self._subs.release(server, uri, ask)
        return result

    async def read_resource(self, server: str, uri: str) -> ToolResult:
        """The contents of ``uri`` on ``server``: its text parts, joined (others are named)."""

        async def run(session: ClientSession) -> ToolResult:
            result = await session.read_resource(cast(Any, uri))
            parts = []
            for item in result.contents:
                text = getattr(item, "text", None)
                mime = field_of(item, "mime_type", "mimeType") or "binary"
                parts.append(text if isinstance(text, str) else f"[{mime} content]")
            return ToolResult("\n".join(parts))

        return await self._submit(server, _Call("resources/read", {}, self._future(), run))

    async def set_log_level(self, server: str, level: str) -> ToolResult:
        """Ask ``server`` to send its log messages of ``level`` and above (``logging/setLevel``)."""

        async def run(session: ClientSession) -> ToolResult:
            with _sdk_deprecation_quiet():
                await session.set_logging_level(cast(Any, level))
            return ToolResult(f"log level {level}")

        return await self._submit(server, _Call("logging/setLevel", {}, self._future(), run))

    def watch(self, server: str, watcher: McpWatcher) -> Callable[[], None]:
        """Hand ``server``'s notifications to ``watcher`` until the returned function is called.

        Raises:
            KeyError: No such server is configured.
        """
        watchers = self._servers[server].watchers
        watchers.append(watcher)

        def unwatch() -> None:
            with contextlib.suppress(ValueError):
                watchers.remove(watcher)

        return unwatch

    def connected(self, server: str) -> bool:
        """Whether ``server`` is connected now."""
        srv = self._servers.get(server)
        return srv is not None and srv.state == "connected"

    def _future(self) -> asyncio.Future[ToolResult]:
        return asyncio.get_running_loop().create_future()

    async def _submit(
        self, server: str, call: _Call, *, timeout: float | None = None, start: bool = True
    ) -> ToolResult:
        srv = self._servers.get(server)
        if srv is None:
            return tool_error(f"MCP server {server!r} is not configured")
        if start and srv.state in ("pending", "connecting"):
            await self.start([server])
        if srv.state != "connected":
            why = srv.error or "not started"
            return tool_error(f"MCP server {server!r} is not connected ({why})")
        # No await between the state check and the put: the runner drains the queue in the same
        # step that leaves "connected", so a queued call is always answered.
        srv.queue.put_nowait(call)
        limit = self.call_timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(call.future, limit)
        except TimeoutError:
            return tool_error(
                f"MCP server {server!r}: {call.tool} did not answer within {limit:g} s"
            )

    async def aclose(self) -> None:
        """Close every session and stop every server process, then verify none is left.

        Its watchers let go first, while their servers still answer (a monitor unsubscribes).
        """
        self._closed = True
        await finish_despite_cancel(self._release_watchers())
        await finish_despite_cancel(self._shutdown())

    async def _release_watchers(self) -> None:
        watchers = [w for srv in self._servers.values() for w in srv.watchers]
        if not watchers:
            return
        jobs = [asyncio.ensure_future(w.closing()) for w in watchers]
        _, late = await asyncio.wait(jobs, timeout=self.close_timeout)
        for job in late:
            job.cancel()
        for job in jobs:
            if job.done() and not job.cancelled() and job.exception() is not None:
                log.warning("an MCP watcher failed to let go: %s", job.exception())

    # --- the runner task of one server -----------------------------------------------------

    async def _run(self, srv: _Server) -> None:
        failure = ""
        try:
            with anyio.CancelScope() as srv.scope:
                async with contextlib.AsyncExitStack() as stack:
                    session = await self._connect(srv, stack)
                    self._set(srv, "connected")
                    await self._serve_loop(srv, session)
        except Exception as exc:  # an ExceptionGroup from a transport too
            if srv.state == "failed":  # already reported; this is teardown noise
                log.debug("MCP server %r: error while closing: %s", srv.config.name, exc)
            else:
                failure = self._reason(srv, describe(exc))
        finally:
            try:
                # Reap before reporting: whoever waits for this server's start or failure
                # finds no process of it left over (a crashed server's children included).
                if srv.config.type == "stdio":
                    await _reap([srv.tag])
            finally:
                if srv.stderr is not None:
                    srv.stderr.close()
                if srv.state != "failed":
                    self._set(srv, "failed", failure or srv.stop_reason)
                self._drain(srv)

    async def _connect(self, srv: _Server, stack: contextlib.AsyncExitStack) -> ClientSession:
        process = None
        if srv.config.type == "stdio":
            srv.stderr = StderrTail()
            # Spawned first: the server boots while the SDK loads, on a thread (the loop goes
            # on: the other servers spawn, and the session is driven meanwhile).
            process = srv.process = await spawn_stdio(
                srv.config, extra_env={TASK_ENV: srv.tag}, cwd=self._cwd, errlog=srv.stderr.writer
            )
        await anyio.to_thread.run_sync(load_sdk)
        from mcp import ClientSession
        from mcp.types import Implementation

        if srv.config.type == "sdk":
            if self._program is None:
                raise RuntimeError(
                    "an sdk server needs a program driving the session "
                    "(--input-format stream-json, as claude-agent-sdk runs taskloom)"
                )
            read, write = await open_program_transport(srv.config.name, self._program, stack)
        else:
            read, write = await open_transport(
                srv.config,
                stack,
                extra_env={TASK_ENV: srv.tag},
                cwd=self._cwd,
                errlog=srv.stderr.writer if srv.stderr else None,
                process=process,
                on_end=lambda: self._output_ended(srv),
            )
        if srv.stderr is not None:
            srv.stderr.release_writer()  # the child holds its copy; EOF must follow its exit
        info = Implementation(name="taskloom", version=__version__)
        session = await stack.enter_async_context(
            ClientSession(
                read, write, client_info=info, message_handler=cast(Any, self._handler(srv))
            )
        )
        try:
            with anyio.fail_after(self.connect_timeout):
                initialized = await session.initialize()
                resources = getattr(initialized.capabilities, "resources", None)
                srv.subscribable = bool(getattr(resources, "subscribe", False))
                tools = await list_tools(session)
        except TimeoutError:
            raise TimeoutError(f"no answer within {self.connect_timeout:g} s") from None
        srv.tools = [McpTool.create(self, srv.config.name, t) for t in tools]
        return session

    async def _serve_loop(self, srv: _Server, session: ClientSession) -> None:
        async with anyio.create_task_group() as tg:
            try:
                while True:
                    call = await srv.queue.get()
                    tg.start_soon(self._serve, srv, session, call)
            finally:
                # Before anything awaits: from here on no call can be queued or left waiting.
                if srv.state == "connected":
                    self._set(srv, "failed", srv.stop_reason)
                self._drain(srv)
                tg.cancel_scope.cancel()

    async def _serve(self, srv: _Server, session: ClientSession, call: _Call) -> None:
        name, future = srv.config.name, call.future
        if future.done():  # the caller gave up while the call was queued
            return
        try:
            with anyio.CancelScope() as scope:
                # A caller that times out or is cancelled cancels its request too.
                def abandon(_: object) -> None:
                    scope.cancel()

                future.add_done_callback(abandon)
                try:
                    if call.run is not None:
                        answer = await call.run(session)
                    else:
                        # Watched: the call asks for progress, which its watchers are told.
                        wants = {"progress_callback": _no_progress} if srv.watchers else {}
                        if "progress_callback" not in signature(session.call_tool).parameters:
                            wants = {}  # an early mcp 1.x
                        result = await cast(Any, session).call_tool(
                            call.tool, call.arguments, **wants
                        )
                        answer = to_result(call.tool, result)
                except Exception as exc:
                    answer = self._call_failed(srv, call.tool, exc)
                future.remove_done_callback(abandon)
                if not future.done():
                    future.set_result(answer)
        finally:
            if not future.done():  # the session is closing under this call
                future.set_result(
                    tool_error(f"MCP server {name!r} closed before {call.tool} answered")
                )

    def _call_failed(self, srv: _Server, tool: str, exc: Exception) -> ToolResult:
        name, desc = srv.config.name, describe(exc)
        if not is_disconnect(exc):
            return tool_error(f"MCP server {name!r}: {tool} failed: {desc}")
        if srv.state == "connected":
            srv.stop_reason = self._reason(srv, f"disconnected: {desc}")
            self._set(srv, "failed", srv.stop_reason)
            if srv.scope is not None:  # let the runner unwind and reap the process
                srv.scope.cancel()
        return tool_error(f"MCP server {name!r} disconnected while running {tool}: {desc}")

    def _handler(self, srv: _Server) -> Callable[[Any], Awaitable[None]]:
        """The session's ``message_handler``: a server's events, to the watchers of it."""

        async def handle(message: Any) -> None:
            event = event_of(message)
            if event is not None:
                for watcher in list(srv.watchers):
                    watcher.event(event)

        return handle

    async def _output_ended(self, srv: _Server) -> None:
        """A stdio server's output ended by itself: it is gone, say how, and unwind it."""
        if srv.state != "connected":
            return  # closing already
        with anyio.move_on_after(1.0):  # its exit follows the end of its output closely
            while srv.process is not None and srv.process.returncode is None:
                await anyio.sleep(0.01)
        code = srv.process.returncode if srv.process is not None else None
        if code is None:
            how = "closed its output"
        elif code < 0:
            how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        if srv.state == "connected":
            srv.stop_reason = self._reason(srv, f"the server {how}")
            self._set(srv, "failed", srv.stop_reason)
            if srv.scope is not None:  # let the runner unwind and reap what is left
                srv.scope.cancel()

    def _reason(self, srv: _Server, desc: str) -> str:
        tail = srv.stderr.text(400) if srv.stderr is not None else ""
        return f"{desc} (stderr: {tail})" if tail else desc

    def _set(self, srv: _Server, state: _State, error: str = "") -> None:
        was = srv.state
        srv.state, srv.error = state, error
        if state == "failed" and error != "closed":
            log.warning("MCP server %r failed: %s", srv.config.name, error)
        if state == "failed" and was == "connected":
            self._subs.forget(srv.config.name)  # its subscriptions ended with it
            self.log_levels.forget(srv.config.name)
            for watcher in list(srv.watchers):
                watcher.ended(error)
        # Wake every waiter; each one re-reads the states it cares about.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _drain(self, srv: _Server) -> None:
        while not srv.queue.empty():
            call = srv.queue.get_nowait()
            if not call.future.done():
                message = f"MCP server {srv.config.name!r} is not connected ({srv.error})"
                call.future.set_result(tool_error(message))

    async def _wait_change(self, deadline: float) -> bool:
        """Wait for any state change until ``deadline``; False when the time is up."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), remaining)
        return time.monotonic() < deadline

    async def _shutdown(self) -> None:
        running = [s for s in self._servers.values() if s.task is not None and not s.task.done()]
        for srv in running:
            srv.stop_reason = "closed"
            if srv.scope is not None:
                srv.scope.cancel()  # anyio cancellation: the SDK's shielded cleanup still runs
            else:
                cast(asyncio.Task[None], srv.task).cancel()  # not entered anything yet
        tasks = [cast(asyncio.Task[None], s.task) for s in running]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.close_timeout)
            for task in late:  # last resort; the process check below still holds
                log.warning("MCP server task %s did not stop in time; cancelling it", task)
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=5.0)
        for srv in self._servers.values():
            if srv.state != "failed":
                self._set(srv, "failed", "closed")
        # The runners reap their own servers; this catches those whose runner was cut short.
        ran = [s for s in self._servers.values() if s.task is not None]
        await _reap([s.tag for s in ran if s.config.type == "stdio"])


@contextlib.contextmanager
def _sdk_deprecation_quiet() -> Iterator[None]:
    """Quiet mcp 2.x's notes that the newest protocol drops these requests (ours serve them)."""
    with warnings.catch_warnings():
        # MCPDeprecationWarning is a UserWarning: matched by what it says.
        warnings.filterwarnings("ignore", message=r".* (is removed|is deprecated) as of ")
        yield


async def _no_progress(progress: float, total: float | None, message: str | None) -> None:
    """A call's progress callback: the notifications reach the watchers through the handler."""


async def _reap(tags: list[str]) -> None:
    """Verify that no process carrying one of ``tags`` is alive; kill any that is."""
    if not tags or not find_tree(None, tag=tags)[0]:
        return
    report = await kill_tree(None, tag=tags, grace=1.0)
    log.warning("MCP server processes outlived their session; killed %s", sorted(report.signalled))
    if report.survivors:
        log.error("MCP server processes survived a kill: %s", report.survivors)
