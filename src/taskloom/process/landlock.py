"""A Landlock sandbox for the shell commands of read-only agents: read anything, write nothing.

A read-only agent's commands are judged by their text first
(:mod:`taskloom.permissions.read_only`), which gives the model a clear refusal before anything
runs but cannot see what a program does (``awk 'BEGIN{system("rm f")}'``, sed's ``w``). The
kernel can: a command started with :func:`spawn_sandboxed` and everything it starts may read
and execute any file but write none, except the paths its :class:`Sandbox` names (a scratch
directory, given as ``TMPDIR``; the file where the shell records its last directory) and
``/dev/null``. From Landlock ABI 6 it is also scoped: it can signal no process outside it
(the session, a daemon) and reach no abstract Unix socket outside it. Descriptors opened
before (the output file the command writes to) are not affected: Landlock checks opening, not
writing to an open file.

How it is applied. Landlock restricts the calling *thread* and whatever it starts afterwards
(``landlock_restrict_self``, after ``prctl(PR_SET_NO_NEW_PRIVS)``, which is per thread too).
So each sandboxed command is started from a fresh thread of ours that restricts itself, forks
the shell (``subprocess.Popen``: the child inherits the thread's domain) and ends; no other
thread of ours is ever restricted. We chose it over the two usual ways after measuring them
(``bench/landlock_start.py``: start ``bash -c true`` and reap it, medians of 200 against an
unsandboxed start in the same run, 2 loaded cores: 1.6-3.3 ms):

- the fresh thread: +0.3 to +1.0 ms (ruleset included); no code of ours runs in the child
  and ``subprocess`` keeps using ``vfork``;
- ``preexec_fn`` restricting the forked child: +2.5 to +3 ms, since it turns ``vfork`` off
  (every start copies our page tables: more as the session grows), and it runs Python
  between ``fork`` and ``exec`` in a process with threads (asyncio's executor, telemetry),
  which the ``subprocess`` documentation warns may deadlock;
- a launcher (``python -I -S -c`` restricting itself, then ``exec`` of the shell): safe, but
  +12 to +21 ms: an interpreter starts per command.

The ruleset is built in the calling thread (a descriptor, closed after the start); the
restricted thread runs nothing but ``prctl``, ``landlock_restrict_self`` and the fork. As the
Bash tool pays it (``true`` as a shell task, median of 20), the difference from an
unsandboxed command is within the noise of the run (-1.4 to +0.7 ms).

The handled rights are those of the running kernel's ABI (``REFER`` from 2, ``TRUNCATE`` from
3, ``IOCTL_DEV`` from 5), so a newer right is never asked of an older kernel. Where the kernel
has no Landlock (``ENOSYS``, or ``EOPNOTSUPP`` when it is built but off), :func:`abi_version`
is 0: commands run under the text judge alone, and this is logged once per process.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import gc
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from taskloom._dataclass import dataclass

log = logging.getLogger(__name__)

T = TypeVar("T")

# System call numbers: the same on every architecture (added after the tables were unified).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem access rights (linux/landlock.h).
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

#: The rights each ABI version handles (index: version; 4 added network rights only).
_ABI_RIGHTS = (0, (1 << 13) - 1, (1 << 14) - 1, (1 << 15) - 1, (1 << 15) - 1, (1 << 16) - 1)
#: What may be done with any file: read it, list it, run it.
_READ = EXECUTE | READ_FILE | READ_DIR
#: What a sandbox's files may be opened for: read, and written over.
_FILE_RIGHTS = READ_FILE | WRITE_FILE | TRUNCATE
#: What the terminal devices may be used for besides reading (writing, ``stty``).
_DEVICE = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV
#: The devices writable in the sandbox. Not the terminals: a command runs without one, and
#: a pty's ioctls could type into another terminal's shell (TIOCSTI).
DEVICES = ("/dev/null",)
#: What a domain is scoped to from ABI 6: no signal to, and no abstract Unix socket of, a
#: process outside it (a file rule cannot stop ``kill`` of the session or a daemon's socket).
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
_SCOPE_SIGNAL = 1 << 1
_SCOPED_ABI = 6


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _RulesetAttr(ctypes.Structure):
    # Only its first field: every ABI version accepts the struct cut there.
    _fields_ = (("handled_access_fs", ctypes.c_uint64),)


class _ScopedRulesetAttr(ctypes.Structure):
    # From ABI 6: network rights (none handled: tests may use the network) and scopes.
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class SandboxError(OSError):
    """The ruleset could not be built or applied (the command is not started)."""


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _syscall(number: int, *args: object) -> int:
    result = int(_libc().syscall(number, *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


@functools.cache
def abi_version() -> int:
    """The running kernel's Landlock ABI version; 0 when it has no Landlock (or it is off)."""
    try:
        return _syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except OSError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EOPNOTSUPP):
            log.warning("Landlock could not be queried: %s", exc)
        return 0
    except AttributeError:  # no syscall() in this C library
        return 0


@functools.cache
def warn_unavailable() -> None:
    """Say, once per process, that read-only agents' commands run without the sandbox."""
    log.warning(
        "Landlock is not available on this kernel: read-only agents' shell commands are "
        "judged by their text alone, not sandboxed"
    )


def available() -> bool:
    """Whether commands can be sandboxed here (logs once when they cannot)."""
    if abi_version() > 0:
        return True
    warn_unavailable()
    return False


@dataclass(frozen=True)
class Sandbox:
    """Where a sandboxed command may write; it may read and execute everything.

    Attributes:
        directories: Directories writable with everything under them (create, remove,
            rename within).
        files: Existing files the command may open for writing (not create or remove).
    """

    directories: tuple[Path, ...] = ()
    files: tuple[Path, ...] = ()


def _add_rule(ruleset: int, path: str | Path, access: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rule = _PathBeneath(access, fd)
        _syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
    finally:
        os.close(fd)


def build_ruleset(sandbox: Sandbox, abi: int | None = None) -> int:
    """A ruleset descriptor for ``sandbox`` (the caller closes it).

    Raises:
        SandboxError: The kernel has no Landlock, or a rule could not be added.
    """
    abi = abi_version() if abi is None else abi
    if abi <= 0:
        raise SandboxError(errno.EOPNOTSUPP, "Landlock is not available")
    handled = _ABI_RIGHTS[min(abi, len(_ABI_RIGHTS) - 1)]
    attr: ctypes.Structure = _RulesetAttr(handled)
    if abi >= _SCOPED_ABI:
        attr = _ScopedRulesetAttr(handled, 0, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL)
    try:
        ruleset = _syscall(
            _SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0
        )
    except OSError as exc:
        raise SandboxError(exc.errno, f"cannot create a Landlock ruleset: {exc.strerror}") from exc
    try:
        _add_rule(ruleset, "/", _READ & handled)
        for device in DEVICES:
            if os.path.exists(device):
                _add_rule(ruleset, device, _DEVICE & handled)
        for directory in sandbox.directories:
            _add_rule(ruleset, directory, handled)
        for file in sandbox.files:
            _add_rule(ruleset, file, _FILE_RIGHTS & handled)
    except OSError as exc:
        os.close(ruleset)
        raise SandboxError(exc.errno, f"cannot add a Landlock rule: {exc}") from exc
    return ruleset


def restrict_thread(ruleset: int) -> None:
    """Restrict the calling thread (and all it starts from now on) to ``ruleset``.

    Irreversible for the thread: call it only from a thread that ends after its work.

    Raises:
        SandboxError: The restriction could not be applied.
    """
    try:
        if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        _syscall(_SYS_RESTRICT_SELF, ruleset, 0)
    except OSError as exc:
        raise SandboxError(exc.errno, f"cannot apply the Landlock ruleset: {exc}") from exc


def spawn_sandboxed(sandbox: Sandbox, start: Callable[[], T], abi: int | None = None) -> T:
    """Run ``start`` (which starts a process) in a fresh thread restricted to ``sandbox``.

    The process ``start`` starts inherits the restriction; the thread ends with ``start``, so
    no other thread of ours is restricted. ``abi``: handle only the rights of that Landlock
    ABI version (default: the running kernel's).

    Returns:
        What ``start`` returned.

    Raises:
        SandboxError: The sandbox could not be set up (nothing was started).
        BaseException: What ``start`` raised.
    """
    ruleset = build_ruleset(sandbox, abi)
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            restrict_thread(ruleset)
            outcome.append(start())
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    # No collection while the restricted thread runs: it would run finalisers of any of our
    # objects there, sandboxed (a file they meant to write refused).
    collecting = gc.isenabled()
    gc.disable()
    try:
        thread = threading.Thread(target=run, name="taskloom-landlock-spawn", daemon=True)
        thread.start()
        thread.join()
    finally:
        if collecting:
            gc.enable()
        os.close(ruleset)
    if failure:
        raise failure[0]
    return outcome[0]


__all__ = [
    "DEVICES",
    "Sandbox",
    "SandboxError",
    "abi_version",
    "available",
    "build_ruleset",
    "restrict_thread",
    "spawn_sandboxed",
    "warn_unavailable",
]
