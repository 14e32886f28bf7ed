"""A driver for end-to-end tests of terminal programs inside a real, private tmux server.

Each :class:`TmuxServer` runs on its own socket (``tmux -S PATH -f /dev/null``), never the
user's default server, and :meth:`TmuxServer.close` checks that the server and the programs it
ran are gone. A program started by :meth:`TmuxServer.spawn` runs in a pane of its own, with
exactly the environment given; the :class:`Pane` types keys into it and reads its screen.

tmux has no event for "the screen now shows X", so the ``wait_*`` methods poll, every
:data:`POLL_INTERVAL` seconds and never longer than their timeout.

Quirks of tmux (3.3a here) that the driver hides:

- A command-line argument that ends in ``;`` ends a tmux command, even inside ``send-keys -l``
  or a program's argv; every argument is escaped (a ``\\`` before the final ``;``).
- ``kill-server`` leaves the socket file behind; :meth:`TmuxServer.close` removes it.
- tmux takes a client without a UTF-8 locale for a non-UTF-8 terminal; every call passes
  ``-u`` so that nothing depends on the caller's locale (capture-pane on 3.3a was seen to be
  unaffected, but the programs' input and other tmux versions need not be).
- Debian's tmux (libutempter) can miss the SIGCHLD of a program that exits, so that its pane
  reads dead with no exit status for good; the driver sends the server another SIGCHLD.
- ``#{pane_dead}`` turns 1 at the pty's EOF, possibly before tmux has the exit status; a pane
  counts as dead here only once it has.
- Unix socket paths are limited to 107 bytes; a directory too deep for that gets a short
  private directory in the temporary directory instead.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import psutil

from helpers import TIME_FACTOR

#: The tmux binary, or None where tmux is not installed (tests then skip).
TMUX: str | None = shutil.which("tmux")

#: The socket's file name inside the directory handed to :class:`TmuxServer`.
SOCKET_NAME = "tmux.sock"

#: How often the ``wait_*`` methods look at the screen.
POLL_INTERVAL = 0.025
#: How long a dead pane's screen may still change (its last output being drawn), times the
#: factor. Only a wait that fails pays it; 1 s was seen too short with the suite's four workers
#: and its node programs on two cores (the tmux server drew the last line later).
DEAD_SETTLE_S = 3.0

#: Bound on one tmux client call; the server answers in milliseconds when it is healthy.
COMMAND_TIMEOUT = 10.0

#: How long ``dead``/``exit_status`` wait for tmux to reap a program whose pty has closed.
_REAP_GRACE = 2.0

#: sun_path holds 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107

#: tmux refuses messages over 16 KiB from its client; typed text goes in chunks well below.
_TYPE_CHUNK = 1024

#: A pane's exit as tmux tells it. pane_dead turns 1 at the pty's EOF, which may come before
#: tmux has reaped the program; pane_dead_time (tmux >= 3.3, as pane_dead_signal) is set once
#: it has, and so is pane_dead_status if the program exited rather than was killed.
_STATUS_FORMAT = "#{pane_dead} #{pane_dead_time} #{pane_dead_status} #{pane_dead_signal}"

Pattern = str | re.Pattern[str]


class TmuxError(RuntimeError):
    """A tmux command failed; the message holds the command and tmux's stderr."""


def escape_arg(arg: str) -> str:
    """Escape one argument so that tmux passes it on verbatim.

    tmux's command parser takes an argument that ends in ``;`` for the end of a command (the
    ``\\;`` of shell scripts) and turns a final ``\\;`` into a literal ``;``, so a backslash
    before the final ``;`` makes every such argument literal again.

    Args:
        arg: The argument as the receiving side must see it.

    Returns:
        The argument to hand to tmux.
    """
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


def _client_env() -> dict[str, str]:
    # A tmux client run from inside another tmux would otherwise take its pane or session for
    # the default target; we always name targets, but let nothing of the outer server leak in.
    env = dict(os.environ)
    env.pop("TMUX", None)
    env.pop("TMUX_PANE", None)
    return env


def _matches(pattern: Pattern, text: str) -> bool:
    if isinstance(pattern, re.Pattern):
        return pattern.search(text) is not None
    return pattern in text


def _describe(pattern: Pattern) -> str:
    return f"re {pattern.pattern!r}" if isinstance(pattern, re.Pattern) else repr(pattern)


def _framed(screen: str) -> str:
    # A left margin shows where each row starts, so leading blanks and empty rows are visible;
    # the empty rows at the bottom of a mostly empty screen only hide the ones that matter.
    rows = screen.split("\n")
    shown = len(rows)
    while shown and not rows[shown - 1]:
        shown -= 1
    framed = "\n".join(f"  | {line}" for line in rows[:shown])
    if shown < len(rows):
        framed += f"\n  ({len(rows) - shown} empty rows below)"
    return framed


def _trim(output: str) -> str:
    lines = output.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # tmux ends its output with a newline, which is not a row of the screen
    return "\n".join(line.rstrip() for line in lines)


def _executable(argv0: str, cwd: Path, env: Mapping[str, str]) -> bool:
    if "/" in argv0:
        path = cwd / argv0  # relative to the child's directory, as execvp in the child sees it
        return path.is_file() and os.access(path, os.X_OK)
    return shutil.which(argv0, path=env.get("PATH", os.defpath)) is not None


def running(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs; a zombie does not.

    Args:
        proc: The process.

    Returns:
        True unless it exited (reaped or not).
    """
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_processes(procs: Sequence[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait (bounded) until none of ``procs`` runs; zombies count as gone.

    psutil's ``wait`` would not do: the tmux server and the programs of its panes are not our
    children but orphans, and they stay zombies for as long as their new parent (init, or
    whatever runs as pid 1 in a container) takes to reap them, which may be a long time.

    Args:
        procs: The processes.
        timeout: Seconds at most.

    Returns:
        Those still running at the timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        alive = [proc for proc in procs if running(proc)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.01)


def leftover_servers(root: str | os.PathLike[str]) -> list[psutil.Process]:
    """Live tmux processes of this user whose command line names a path under ``root``.

    The server keeps the command line of the client that started it, socket path included,
    so a server started by :class:`TmuxServer` in a directory under ``root`` is found, and
    servers of other users, sessions or test runs (other directories) are not.

    Args:
        root: A directory, e.g. the test run's private temporary directory.

    Returns:
        The processes, possibly empty.
    """
    # Both spellings: the socket path is the one given, which may or may not go via symlinks.
    prefixes = {os.path.join(p, "") for p in (os.path.abspath(root), os.path.realpath(root))}
    uid = os.getuid()
    found = []
    for proc in psutil.process_iter(["name", "uids", "cmdline", "status"]):
        info = proc.info
        # The server renames itself "tmux: server" (its comm); its cmdline stays the client's.
        name = info.get("name") or ""
        if not name.startswith("tmux") or info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        uids = info.get("uids")
        if uids is None or uids.real != uid:
            continue
        if any(p in arg for p in prefixes for arg in info.get("cmdline") or ()):
            found.append(proc)
    return found


def leftover_sockets(root: str | os.PathLike[str]) -> list[Path]:
    """Socket files named :data:`SOCKET_NAME` under ``root`` (a server not closed).

    Args:
        root: A directory, e.g. the test run's private temporary directory.

    Returns:
        Their paths, possibly empty.
    """
    found = []
    for dirpath, _dirs, files in os.walk(root):
        if SOCKET_NAME in files:
            path = Path(dirpath, SOCKET_NAME)
            with contextlib.suppress(OSError):
                if path.is_socket():
                    found.append(path)
    return found


class TmuxServer:
    """A private tmux server on a socket in a directory of the test's own.

    Use as a context manager, or call :meth:`start` and :meth:`close`::

        with TmuxServer(tmp_path) as server:
            pane = server.spawn([sys.executable, "-c", "input()"], cwd=tmp_path, env={})

    Args:
        directory: Where the socket goes (it must exist), normally the test's ``tmp_path``.
        command_timeout: Bound on each tmux client call, in seconds.

    Attributes:
        socket_path: The server's socket.
        pid: The server's process id once started, else None.
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, command_timeout: float = COMMAND_TIMEOUT
    ) -> None:
        if TMUX is None:
            raise TmuxError("tmux is not installed")
        self._tmux = TMUX
        self._timeout = command_timeout
        self._short_dir: Path | None = None
        path = Path(directory).absolute() / SOCKET_NAME
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            # Too deep for a unix socket (long test names, long TMPDIR): a short directory of
            # our own in the (run's) temporary directory instead, removed again by close().
            self._short_dir = Path(tempfile.mkdtemp(prefix="tmux-"))
            path = self._short_dir / SOCKET_NAME
        self.socket_path = path
        self.pid: int | None = None
        self._proc: psutil.Process | None = None
        self._panes: list[Pane] = []
        self._closed = False

    def __enter__(self) -> TmuxServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TmuxServer({str(self.socket_path)!r}, pid={self.pid})"

    @property
    def panes(self) -> list[Pane]:
        """The panes spawned so far, dead ones included."""
        return list(self._panes)

    def run(self, *args: str, check: bool = True) -> str:
        """Run one tmux command on this server, every argument passed on verbatim.

        Args:
            *args: The command line after ``tmux -S PATH``, e.g. ``("list-panes", "-a")``.
            check: Raise :class:`TmuxError` if tmux exits non-zero.

        Returns:
            tmux's standard output.

        Raises:
            TmuxError: The command failed (with ``check``) or did not finish in time.
        """
        return self.run_many(args, check=check)

    def run_many(self, *commands: Sequence[str], check: bool = True) -> str:
        """Run several tmux commands in one client call, in order, as tmux's ``;`` does.

        Args:
            *commands: Each command's arguments, passed on verbatim.
            check: Raise :class:`TmuxError` if tmux exits non-zero.

        Returns:
            tmux's standard output, that of all the commands.

        Raises:
            TmuxError: A command failed (with ``check``) or they did not finish in time.
        """
        argv = [self._tmux, "-u", "-S", str(self.socket_path), "-f", "/dev/null"]
        for i, command in enumerate(commands):
            if i:
                argv.append(";")  # the only unescaped ";": the separator between commands
            argv += [escape_arg(a) for a in command]
        shown = " ; ".join(" ".join(c) for c in commands)
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                env=_client_env(),
                timeout=self._timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise TmuxError(f"tmux {shown!r} took over {self._timeout}s") from e
        if check and done.returncode != 0:
            err = done.stderr.decode(errors="replace").strip()
            raise TmuxError(f"tmux {shown!r} exited {done.returncode}: {err}")
        return done.stdout.decode(errors="replace")

    def start(self) -> TmuxServer:
        """Start the server (idempotent while it runs).

        Returns:
            The server itself.

        Raises:
            TmuxError: tmux could not start, or the server was closed already.
        """
        if self._closed:
            raise TmuxError("this server was closed; make a new TmuxServer")
        if self.pid is not None:
            return self
        # One client call, so that the options are in force before any pane exists:
        # remain-on-exit set later could miss a program that exits at once. exit-empty off
        # keeps the server alive while it has no session (before the first spawn).
        out = self.run_many(
            ["start-server"],
            ["set-option", "-s", "exit-empty", "off"],
            ["set-option", "-g", "history-limit", "10000"],
            ["set-option", "-wg", "remain-on-exit", "on"],
            ["display-message", "-p", "#{pid}"],
        )
        self.pid = int(out.strip())
        self._proc = psutil.Process(self.pid)
        # tmux 3.3 prints "Pane is dead (...)" as an extra row under a dead pane's output,
        # which scrolls the screen a test looks at; older tmux has no such option.
        self.run("set-option", "-wg", "remain-on-exit-format", "", check=False)
        return self

    def _nudge(self) -> None:
        # A spare SIGCHLD for the server (see Pane._parse_status); psutil checks that the pid
        # is still our server's, not a reused one.
        if self._proc is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                self._proc.send_signal(signal.SIGCHLD)

    @property
    def alive(self) -> bool:
        """Whether the server process still runs."""
        return self._proc is not None and running(self._proc)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: Mapping[str, str],
        width: int = 120,
        height: int = 40,
        term: str = "xterm-256color",
    ) -> Pane:
        """Run a program in a new session (one window, one pane) of this server.

        The program is exec'd through ``env -i``, with no shell in between: it sees exactly
        ``env``, plus ``TERM`` unless ``env`` has one, and nothing of tmux's own environment
        (no ``TMUX``, ``TMUX_PANE``, nor the server's inherited variables). Its pane stays
        after it exits (``remain-on-exit``), so the screen and exit status can be read.

        Args:
            argv: The program and its arguments; ``argv[0]`` is looked up in ``env["PATH"]``.
            cwd: The program's working directory.
            env: The program's whole environment.
            width: Columns of the pane.
            height: Rows of the pane.
            term: ``TERM`` for the program if ``env`` has none.

        Returns:
            The program's pane.

        Raises:
            ValueError: Empty ``argv``, ``argv[0]`` with ``=`` (``env`` would take it for a
                variable), or a malformed variable name.
            FileNotFoundError: ``cwd`` is no directory, or ``argv[0]`` is not found.
            TmuxError: tmux failed.
        """
        if self.pid is None:
            self.start()
        if not argv:
            raise ValueError("argv is empty")
        if "=" in argv[0]:
            raise ValueError(f"argv[0] may not contain '=': {argv[0]!r}")
        for key in env:
            if not key or "=" in key or "\0" in key:
                raise ValueError(f"bad environment variable name: {key!r}")
        workdir = Path(cwd)
        if not workdir.is_dir():
            raise FileNotFoundError(f"cwd is not a directory: {workdir}")
        if not _executable(argv[0], workdir, env):
            # Checked here so that the test fails with this message, not a dead pane.
            raise FileNotFoundError(f"{argv[0]!r} not found (PATH={env.get('PATH')!r})")
        child_env = {"TERM": term, **env}
        command = [shutil.which("env") or "/usr/bin/env", "-i"]
        command += [f"{k}={v}" for k, v in child_env.items()]
        command += list(argv)
        name = f"p{len(self._panes)}"
        out = self.run(
            "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height),
            "-c", str(workdir), "-P", "-F", "#{pane_id} #{pane_pid}", "--", *command,
        )  # fmt: skip
        pane_id, pid = out.split()
        pane = Pane(self, pane_id, int(pid), list(argv))
        self._panes.append(pane)
        return pane

    def _pane_processes(self) -> list[psutil.Process]:
        pids = {p.pid for p in self._panes}
        with contextlib.suppress(TmuxError):
            out = self.run("list-panes", "-a", "-F", "#{pane_pid}", check=False)
            pids.update(int(x) for x in out.split() if x.isdigit())
        procs: list[psutil.Process] = []
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                if running(proc):
                    procs.append(proc)
                    procs.extend(proc.children(recursive=True))
            except psutil.NoSuchProcess:
                continue
        return procs

    def close(self, timeout: float = 5.0) -> None:
        """Kill the server, check it and its programs are gone, remove the socket.

        Idempotent. Programs still running get the hang-up tmux gives them (the terminal
        closes); any process of a pane that outlives ``timeout`` after that is killed and
        reported, as is a server that does not exit.

        Args:
            timeout: Seconds to wait for the server and for the panes' processes each.

        Raises:
            AssertionError: The server or a pane's process had to be killed.
        """
        if self._closed:
            return
        self._closed = True
        problems = []
        try:
            if self._proc is not None:
                # Taken before the server goes: afterwards the panes' pids cannot be asked.
                procs = self._pane_processes()
                self.run("kill-server", check=False)
                if wait_processes([self._proc], timeout):
                    problems.append(f"tmux server {self.pid} still ran {timeout}s after kill")
                    with contextlib.suppress(psutil.NoSuchProcess):
                        self._proc.kill()
                    wait_processes([self._proc], timeout)
                alive = wait_processes(procs, timeout)
                for proc in alive:
                    with contextlib.suppress(psutil.Error):
                        problems.append(f"pid {proc.pid} {proc.cmdline()} outlived the server")
                    with contextlib.suppress(psutil.NoSuchProcess):
                        proc.kill()
                wait_processes(alive, timeout)
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
            if self._short_dir is not None:
                shutil.rmtree(self._short_dir, ignore_errors=True)
        if problems:
            raise AssertionError("; ".join(problems))


class Pane:
    """One program's pane in a :class:`TmuxServer`; made by :meth:`TmuxServer.spawn`.

    Attributes:
        server: The server the pane is in.
        pane_id: tmux's id of the pane (``%N``), the target of every command.
        pid: The program's process id (``#{pane_pid}``; ``env -i`` exec's the program).
        argv: The program's command line as given to spawn.
    """

    def __init__(self, server: TmuxServer, pane_id: str, pid: int, argv: list[str]) -> None:
        self.server = server
        self.pane_id = pane_id
        self.pid = pid
        self.argv = argv

    def __repr__(self) -> str:
        return f"Pane({self.pane_id}, pid={self.pid}, argv={self.argv!r})"

    def send_keys(self, *keys: str) -> None:
        """Press keys given by tmux's key names, e.g. ``"Enter"``, ``"Escape"``, ``"C-c"``.

        A string that is no key name is typed as text. Note that ``"Escape"`` followed at
        once by another key may be read by the program as Alt+key (its own escape timeout).

        Args:
            *keys: Key names, pressed in order.
        """
        if keys:
            self.server.run("send-keys", "-t", self.pane_id, "--", *keys)

    def type(self, text: str) -> None:
        """Type ``text`` literally (``send-keys -l``); no key names are looked up.

        Press Enter with ``send_keys("Enter")``: a ``"\\n"`` in ``text`` is Ctrl-J.

        Args:
            text: The characters to type.
        """
        for start in range(0, len(text), _TYPE_CHUNK):
            chunk = text[start : start + _TYPE_CHUNK]
            self.server.run("send-keys", "-t", self.pane_id, "-l", "--", chunk)

    def capture(self) -> str:
        """The visible screen: one line per row, trailing blanks of each row removed."""
        return _trim(self.server.run("capture-pane", "-p", "-t", self.pane_id))

    def history(self) -> str:
        """The scrollback and the visible screen below it, rows trimmed as in capture."""
        return _trim(self.server.run("capture-pane", "-p", "-S", "-", "-t", self.pane_id))

    def resize(self, width: int, height: int) -> None:
        """Resize the pane's window (the program gets SIGWINCH).

        Args:
            width: Columns.
            height: Rows.
        """
        self.server.run("resize-window", "-t", self.pane_id, "-x", str(width), "-y", str(height))

    def _status(self) -> tuple[bool, int | None]:
        deadline = time.monotonic() + _REAP_GRACE
        while True:
            out = self.server.run("display-message", "-p", "-t", self.pane_id, _STATUS_FORMAT)
            dead, status, unreaped = self._parse_status(out.split("\n", 1)[0])
            if not unreaped or time.monotonic() >= deadline:
                return dead, status
            time.sleep(POLL_INTERVAL)

    def _parse_status(self, line: str) -> tuple[bool, int | None, bool]:
        # pane_dead_time is a date with blanks in it: the numbers are the last two fields.
        fields = line.split(" ")
        eof, reaped, status, sig = fields[0], " ".join(fields[1:-2]), fields[-2], fields[-1]
        if eof != "1":
            return False, None, False
        if not (reaped or status):
            # The pty is closed but tmux has no exit status: either its SIGCHLD is still on
            # the way, or it was lost. Debian's tmux (3.3a) is built with libutempter, which
            # swaps out tmux's SIGCHLD handler while it runs its helper, as it does when the
            # pty closes, i.e. just as the program exits (tmux issue #311); the program then
            # stays an unreaped zombie and its pane reads dead with no status, for good.
            # Another SIGCHLD makes tmux reap it; for a signal already on the way it is a no-op.
            self.server._nudge()
            return False, None, True
        if status:
            return True, int(status), False
        # Killed by a signal: negative, as subprocess reports it.
        return True, -int(sig) if sig else None, False

    def _look(self, history: bool) -> tuple[bool, int | None, str]:
        # Status first, screen second, in one call: once the status says dead, the screen
        # read after it is final.
        capture = ["capture-pane", "-p", "-t", self.pane_id]
        if history:
            capture[2:2] = ["-S", "-"]
        out = self.server.run_many(
            ["display-message", "-p", "-t", self.pane_id, _STATUS_FORMAT], capture
        )
        first, _, screen = out.partition("\n")
        dead, status, _unreaped = self._parse_status(first)
        return dead, status, _trim(screen)

    @property
    def dead(self) -> bool:
        """Whether the program has exited and tmux has its exit status."""
        return self._status()[0]

    @property
    def exit_status(self) -> int | None:
        """The exit status once the program exited, ``-N`` if signal N killed it, else None."""
        return self._status()[1]

    def _wait(self, want_match: bool, pattern: Pattern, timeout: float, history: bool) -> str:
        timeout *= TIME_FACTOR  # the bound a caller gives is for a machine at rest
        deadline = time.monotonic() + timeout
        dead_since: float | None = None
        while True:
            dead, status, screen = self._look(history)
            if _matches(pattern, screen) == want_match:
                return screen
            if dead:
                # tmux may mark the pane dead before it has drawn the program's last output
                # (seen under load); past a short settling time the screen of a dead pane
                # never changes again: fail then, not at the timeout.
                dead_since = dead_since if dead_since is not None else time.monotonic()
                if time.monotonic() - dead_since >= DEAD_SETTLE_S * TIME_FACTOR:
                    reason = f"the program exited (status {status}) with"
                    break
            if time.monotonic() >= deadline:
                reason = f"timed out after {timeout:g}s with"
                break
            time.sleep(POLL_INTERVAL)
        what = "appear" if want_match else "go away"
        where = "history" if history else "screen"
        hint = ""
        if isinstance(pattern, str) and pattern != pattern.rstrip(" "):
            hint = " (rows are captured without trailing blanks: a pattern ending in one"
            hint += " matches only where more text follows on the row)"
        raise AssertionError(
            f"waiting for {_describe(pattern)} to {what} in {self!r}{hint}: {reason} this"
            f" {where}:\n{_framed(screen)}"
        )

    def wait_for(self, pattern: Pattern, timeout: float = 10.0, *, history: bool = False) -> str:
        """Wait until the screen shows ``pattern``.

        Args:
            pattern: A substring, or a compiled regex searched for (use ``re.M`` for ``^``).
            timeout: Seconds at most.
            history: Look at the scrollback too, not just the visible screen.

        Returns:
            The capture that matched.

        Raises:
            AssertionError: Timed out, or the program exited without showing it; the
                message has the pattern and the whole last capture.
        """
        return self._wait(True, pattern, timeout, history)

    def wait_gone(self, pattern: Pattern, timeout: float = 10.0, *, history: bool = False) -> str:
        """Wait until the screen no longer shows ``pattern``.

        Args:
            pattern: A substring, or a compiled regex.
            timeout: Seconds at most.
            history: Look at the scrollback too.

        Returns:
            The first capture without it.

        Raises:
            AssertionError: Timed out, or the program exited still showing it.
        """
        return self._wait(False, pattern, timeout, history)

    def wait_exit(self, timeout: float = 10.0) -> int:
        """Wait until the program exits.

        Args:
            timeout: Seconds at most.

        Returns:
            Its exit status, or ``-N`` if signal N killed it.

        Raises:
            AssertionError: It still ran at the timeout (the message has the screen).
        """
        timeout *= TIME_FACTOR
        deadline = time.monotonic() + timeout
        while True:
            dead, status, screen = self._look(False)
            if dead:
                if status is None:
                    raise AssertionError(f"{self!r} died with an unknown status")
                return status
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"{self!r} still ran after {timeout}s; screen:\n{_framed(screen)}"
                )
            time.sleep(POLL_INTERVAL)
