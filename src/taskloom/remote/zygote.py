"""A warm start for remote agents' processes: a fork server, one per pooled actor.

Starting ``taskloom remote worker`` costs about 0.6 s of CPU, most of it importing taskloom
and building what its first session needs; on a local Ray of 2 CPUs, 20 agents starting at
once queued for seconds behind each other's imports. A pooled actor (see
:mod:`taskloom.remote.actor`) starts, once, ``taskloom remote zygote``: a process that imports
what a worker uses (:data:`PRELOAD`), then waits on a Unix socket (``SOCK_SEQPACKET``, one
message a request) for requests, each with the three descriptors of a worker's standard
streams and a fourth, the child's end of a socket pair of its own with the actor (its
*control*). For each it forks: the child starts a session of its own (a process group of its
own, as an exec'd worker is), takes those streams, says on its control that it is held there,
and waits for the actor's go; then it moves into the agent's checkout, takes the agent's
environment and runs the worker's code; it never returns into the server's loop. At its end
it says its exit code on its control. The server answers with the child's pid, reaps it when
it ends (a pidfd tells it) and says its exit code, by the request's number (a pid may be used
again; a number is not). The server runs nothing of any agent itself, and holds no thread (a
fork copies only the forking thread): each child starts from the same state, with nothing of
an earlier agent in it.

Why the go: a launch the actor gives up (the server died before it said the pid, the launch
was cancelled) closes its control, and a child forked for it ends without running anything;
the actor can then start that agent's worker cold without ever running it twice. Why held in
its own session first: when the launch returns, a stop (a signal to its group) reaches it.
Why the child says its code: if the server dies, nobody else can (its children are not the
actor's).

The server ends when its actor does (its socket's other end closes); its children watch the
actor, not the server (see ``taskloom remote worker``), and stop their commands if it dies.

:class:`Zygote` is the actor's side. Nothing here imports Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import pkgutil
import selectors
import shutil
import socket
import sys
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from taskloom._dataclass import realize_all

#: The subpackages of taskloom a worker uses: every module of them is imported before any fork
#: (about 0.45 s once; a forked worker then takes about 0.15 s of CPU to its answer, where an
#: exec'd one takes 0.6 s). Not the REPL, ACP or the CLI's other commands, nor Ray.
PRELOAD = (
    "agents", "context", "conversation", "hooks", "mcp", "models", "permissions", "process",
    "skills", "store", "tasks", "teams", "tools",
)  # fmt: skip
#: What a worker imports only once it runs (its session, its model's HTTP client).
PRELOAD_MODULES = (
    "httpx", "httpcore", "h11", "anyio", "anyio._backends._asyncio", "anyio.streams.tls",
    "httpx_sse", "certifi", "importlib.metadata", "importlib.resources", "csv", "queue",
    "psutil", "resource", "taskloom.harness", "taskloom.main_thread", "taskloom.plugins",
    "taskloom.telemetry",
)  # fmt: skip
#: The variable naming the directory of its actor's snapshot bases (see
#: :mod:`taskloom.remote.checkout`): removed by the server once its actor is gone (an actor
#: killed has no last word).
BASES_ENV = "TASKLOOM_REMOTE_BASES"
#: Longest wait for the server to be ready (imports on a busy machine).
READY_WAIT_S = 60.0
#: Longest request or answer (a worker's environment).
_MESSAGE = 1 << 20
#: How much of the server's error output is kept, to say why it failed.
_STDERR_LINES = 20
#: Descriptors a request carries: the worker's stdin, stdout, stderr, and its control.
_FDS = 4
#: What a forked worker says on its control: held (in its own session), then its exit code.
_HELD = b"held"
_CODE = b"code "
#: What the actor says to a held worker it takes (anything else, or nothing: it ends).
_GO = b"go"


class ZygoteError(RuntimeError):
    """The fork server could not be started, or could not start a worker."""


# -- the server (its own process) ------------------------------------------------------------


def preload() -> None:
    """Import what a worker uses (each module on its own: one that fails is skipped)."""
    root = Path(__file__).resolve().parents[1]  # the taskloom package
    for package in PRELOAD:
        for info in pkgutil.walk_packages([str(root / package)], f"taskloom.{package}."):
            if not info.name.endswith("__main__"):
                with contextlib.suppress(Exception):
                    importlib.import_module(info.name)
    for name in PRELOAD_MODULES:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    _complete_models()
    realize_all()  # the dataclasses' methods too, once, not in every worker


def _complete_models() -> None:
    """Build the validators of taskloom's pydantic models now.

    Pydantic defers it to a model's first use, which every worker would then pay for (about
    30 ms of CPU).
    """
    try:
        from pydantic import BaseModel
    except ImportError:
        return
    _load_input_models()
    pending: list[type[BaseModel]] = [BaseModel]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("taskloom.") and not cls.__pydantic_complete__:
            with contextlib.suppress(Exception):
                cls.model_rebuild()


def _load_input_models() -> None:
    """Import every tool's input model, so that :func:`_complete_models` builds it too.

    Built-in tools name their models and import them only on first use (see
    :mod:`taskloom.tools.base`): importing the tools' modules defines none.
    """
    from taskloom.tools.base import Tool

    pending: list[type[Tool[Any]]] = [*Tool.__subclasses__()]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.input_model is not None:
            with contextlib.suppress(Exception):
                _ = cls.Input  # imports the model's module


def serve(fd: int, run: Callable[[Path], int]) -> int:
    """Serve requests on the socket ``fd`` until its other end closes; the exit code.

    ``run``: a worker's code (``taskloom remote worker``'s), given its spec file, in a child.
    """
    preload()
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    children: dict[int, tuple[int, int]] = {}  # pidfd -> its pid, its request's number
    _send(sock, {"ready": os.getpid()})
    while True:
        for key, _ in selector.select():
            if key.fileobj is sock:
                try:
                    data, fds, _, _ = socket.recv_fds(sock, _MESSAGE, _FDS)
                except OSError:
                    data, fds = b"", []
                if not data:  # its actor is gone; the children watch the actor themselves
                    if os.environ.get(BASES_ENV):
                        shutil.rmtree(os.environ[BASES_ENV], ignore_errors=True)
                    return 0
                _fork(sock, selector, children, json.loads(data), fds, run)
            else:
                pidfd = int(key.fd)
                selector.unregister(pidfd)
                os.close(pidfd)
                pid, number = children.pop(pidfd)
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
                _send(sock, {"exit": pid, "id": number, "code": code})


def _fork(
    sock: socket.socket,
    selector: selectors.BaseSelector,
    children: dict[int, tuple[int, int]],
    request: dict[str, Any],
    fds: list[int],
    run: Callable[[Path], int],
) -> None:
    try:
        if len(fds) != _FDS:
            raise OSError(f"{len(fds)} descriptors came with the request, not {_FDS}")
        pid = os.fork()
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        _send(sock, {"id": request["id"], "error": str(exc)})
        return
    if pid == 0:
        selector.close()
        _child(sock, request, fds, run)  # never returns
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    children[pidfd] = (pid, int(request["id"]))
    selector.register(pidfd, selectors.EVENT_READ)
    _send(sock, {"id": request["id"], "pid": pid})


def _child(
    sock: socket.socket, request: dict[str, Any], fds: list[int], run: Callable[[Path], int]
) -> None:
    """The forked worker: its own session, streams, directory and environment; then its run.

    Held, in its own session, until its actor says go (see the module docstring).
    """
    code = 1
    control: socket.socket | None = None
    try:
        sock.close()
        os.setsid()
        *streams, held = fds
        for target, fd in enumerate(streams):
            os.dup2(fd, target)
        for name in os.listdir("/proc/self/fd"):  # its siblings' pidfds, the received ones
            if int(name) > 2 and int(name) != held:
                with contextlib.suppress(OSError):
                    os.close(int(name))
        control = socket.socket(fileno=held)
        control.set_inheritable(False)  # its commands must not hold it: its end is ours
        control.setblocking(True)
        control.send(_HELD)
        if control.recv(len(_GO)) != _GO:  # given up: it ends, having run nothing
            os._exit(0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = run(Path(request["spec"]))
    except SystemExit as exc:
        # As the interpreter exits: no code is 0; a message (printed) is 1.
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        if control is not None:
            with contextlib.suppress(OSError):  # said for its actor if the server is gone
                control.send(b"%s%d" % (_CODE, code))
        os._exit(code)


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # its actor is gone: the next receive ends the loop
        sock.send(json.dumps(message).encode())


# -- the actor's side ------------------------------------------------------------------------


class Forked:
    """A worker the server forked: what the actor needs of it (as of an exec'd process)."""

    def __init__(
        self,
        pid: int,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        control: socket.socket,
    ):
        """The worker ``pid``, its output streams, the actor's end of its control."""
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.control = control
        self.returncode: int | None = None
        self._ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def ended(self, code: int) -> None:
        """Its exit code, as the server reaped it (or as it said it)."""
        if not self._ended.done():
            self.returncode = code
            self._ended.set_result(code)
            self.control.close()

    async def wait(self) -> int:
        """Its exit code, once it has ended."""
        return await asyncio.shield(self._ended)


class Zygote:
    """The actor's fork server (see the module docstring)."""

    def __init__(self) -> None:
        """Nothing runs until :meth:`start`."""
        self._sock: socket.socket | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._ready: asyncio.Future[None] | None = None
        #: By request number: the launches waiting for a pid; the workers launched.
        self._asked: dict[int, asyncio.Future[int]] = {}
        self._running: dict[int, Forked] = {}
        #: The launches under way, and exit codes of their workers that ended before they
        #: were registered (by request number: a pid may be used again by then).
        self._launching: set[int] = set()
        self._exited: dict[int, int] = {}
        self._next = 0
        #: Set while requests wait for room on the socket (its queue is short: 10 messages).
        self._room: asyncio.Future[None] | None = None
        self._errors: deque[str] = deque(maxlen=_STDERR_LINES)
        #: Its background tasks (kept: the loop holds only weak references to them).
        self._tasks: set[asyncio.Future[None]] = set()

    async def start(self, env: Mapping[str, str]) -> None:
        """Start the server (once) and wait until it is ready.

        Raises:
            ZygoteError: It did not start, or not in time.
        """
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            self._keep(self._start(dict(env)))
        await asyncio.shield(self._ready)

    def _keep(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start(self, env: dict[str, str]) -> None:
        assert self._ready is not None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-P", "-m", "taskloom", "remote", "zygote",
                "--fd", str(theirs.fileno()),
                cwd="/", env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                pass_fds=(theirs.fileno(),), start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            ours.close()
            self._ready.set_exception(ZygoteError(f"the fork server did not start: {exc}"))
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        assert self._proc.stderr is not None
        self._keep(self._collect(self._proc.stderr))
        asyncio.get_running_loop().add_reader(ours.fileno(), self._readable)
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), READY_WAIT_S)
        except TimeoutError:
            self._lost(f"it was not ready within {READY_WAIT_S:.0f} s")

    async def _collect(self, stream: asyncio.StreamReader) -> None:
        async for raw in stream:
            self._errors.append(raw.decode(errors="replace").rstrip())

    def _readable(self) -> None:
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(_MESSAGE)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost("it ended")
                return
            self._on(json.loads(data))

    def _on(self, message: dict[str, Any]) -> None:
        if "ready" in message:
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif "exit" in message:
            number, code = int(message["id"]), int(message["code"])
            forked = self._running.pop(number, None)
            if forked is not None:
                forked.ended(code)
            elif number in self._launching:  # it ended before its launch registered it
                self._exited[number] = code
        else:
            asked = self._asked.pop(int(message["id"]), None)
            if asked is not None and not asked.done():
                if "pid" in message:
                    asked.set_result(int(message["pid"]))
                else:
                    asked.set_exception(ZygoteError(str(message.get("error"))))

    def _lost(self, why: str) -> None:
        """The server is gone: nothing more is started; its children are watched directly."""
        self._let_go()
        tail = "\n".join(self._errors).strip()
        said = f": {tail[-2000:]}" if tail else ""
        error = ZygoteError(f"the fork server failed: {why}{said}")
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)
        for asked in self._asked.values():
            if not asked.done():
                asked.set_exception(error)
        self._asked.clear()

    def _let_go(self) -> None:
        """Its socket is closed; the workers it forked say their own ends from now on."""
        sock, self._sock = self._sock, None
        if sock is not None:
            loop = asyncio.get_running_loop()
            loop.remove_reader(sock.fileno())
            loop.remove_writer(sock.fileno())
            sock.close()
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)  # its waiters see the server gone
        for asked in self._asked.values():  # a launch under way would wait for ever
            if not asked.done():
                asked.set_exception(ZygoteError("the fork server was let go"))
        self._asked.clear()
        for forked in self._running.values():
            self._keep(_reaped_elsewhere(forked))
        self._running.clear()

    @property
    def alive(self) -> bool:
        """Whether it is ready and still there (else a worker is started, not forked)."""
        ready = self._ready
        return self._sock is not None and ready is not None and ready.done()

    async def launch(self, spec_file: Path, cwd: Path, env: Mapping[str, str]) -> Forked:
        """Fork a worker running the agent ``spec_file`` describes, in ``cwd`` with ``env``.

        When it returns, the worker is in a session of its own (a signal to its group reaches
        it) and watched to its end. When it raises, no worker of it ever runs (one forked is
        held, and ends): the agent can be started cold instead.

        Raises:
            ZygoteError: The server is gone, or could not fork.
        """
        if self._sock is None:
            raise ZygoteError("the fork server is gone")
        loop = asyncio.get_running_loop()
        self._next += 1
        number = self._next
        request = {"id": number, "spec": str(spec_file), "cwd": str(cwd), "env": dict(env)}
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        control.setblocking(False)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        # Files (closed twice, nothing happens): a reader's transport closes its own.
        files = [os.fdopen(out_r, "rb", 0), os.fdopen(err_r, "rb", 0)]
        pipes: list[asyncio.BaseTransport] = []
        self._launching.add(number)
        taken = False
        try:
            stdout = await _reader(files[0], pipes)
            stderr = await _reader(files[1], pipes)
            asked = self._asked[number] = loop.create_future()
            await self._request(json.dumps(request).encode(), [null, out_w, err_w, theirs.fileno()])
            pid = await asked
            if await loop.sock_recv(control, len(_HELD)) != _HELD:
                raise ZygoteError("the forked worker ended before it was taken")
            if self._sock is None:  # the server died meanwhile: its worker is not taken
                raise ZygoteError("the fork server is gone")
            forked = Forked(pid, stdout, stderr, control)
            code = self._exited.pop(number, None)
            if code is not None:
                forked.ended(code)
            else:
                self._running[number] = forked
            with contextlib.suppress(OSError):  # it died held: its end came, or comes
                control.send(_GO)
            taken = True
            return forked
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
            theirs.close()
            self._launching.discard(number)
            self._asked.pop(number, None)
            self._exited.pop(number, None)
            if not taken:
                control.close()  # a worker forked for it ends, held
                for pipe in pipes:
                    pipe.close()
                for file in files:
                    file.close()

    async def _request(self, data: bytes, fds: list[int]) -> None:
        """Send a request, once there is room for it on the socket.

        Raises:
            ZygoteError: The server is gone.
        """
        while True:
            sock = self._sock
            if sock is None:
                raise ZygoteError("the fork server is gone")
            try:
                socket.send_fds(sock, [data], fds)
                return
            except BlockingIOError:  # its queue is full: the server is busy forking
                await asyncio.shield(self._room_on(sock))
            except OSError as exc:
                raise ZygoteError(f"the fork server is gone: {exc}") from None

    def _room_on(self, sock: socket.socket) -> asyncio.Future[None]:
        """Done once ``sock`` can take a message again (or the server is gone)."""
        if self._room is None:
            loop = asyncio.get_running_loop()
            room = self._room = loop.create_future()

            def writable() -> None:
                loop.remove_writer(sock.fileno())
                if self._room is room:
                    self._room = None
                if not room.done():
                    room.set_result(None)

            loop.add_writer(sock.fileno(), writable)
        return self._room

    async def close(self) -> None:
        """Stop the server (its children are their agents' to stop)."""
        self._let_go()  # it ends on that
        proc = self._proc
        if proc is not None and proc.returncode is None:
            try:
                await asyncio.wait_for(proc.wait(), 2.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


async def _reader(file: Any, pipes: list[asyncio.BaseTransport]) -> asyncio.StreamReader:
    """An asyncio stream over ``file``, a pipe's read end (lines up to 8 MiB).

    Its transport is added to ``pipes``.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=8 * 1024 * 1024, loop=loop)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), file
    )
    pipes.append(transport)
    return reader


async def _reaped_elsewhere(forked: Forked) -> None:
    """A worker whose server is gone: it says its exit code on its control as it ends.

    -1 if it said none (killed by a signal: which one is lost with the server).
    """
    data = b""
    with contextlib.suppress(OSError):
        data = await asyncio.get_running_loop().sock_recv(forked.control, 64)
    code = -1
    if data.startswith(_CODE):
        with contextlib.suppress(ValueError):
            code = int(data[len(_CODE) :])
    forked.ended(code)


__all__ = ["BASES_ENV", "PRELOAD", "Forked", "Zygote", "ZygoteError", "serve"]
