"""Teammate panes on tmux: create one running a command, colour its border, kill it, lay out.

The tmux command line, not libtmux: libtmux runs the same ``tmux`` client for every call (so
no call is faster through it) and costs an import besides (see ``bench/panes.py``).

Where the panes go (:func:`locate`):

- inside the user's tmux session (``$TMUX`` set), in the lead's own window, beside the lead's
  pane: the lead keeps 30 % of the width on the left, its teammates share the 70 % on the
  right (tmux's ``main-vertical`` layout with the lead's pane as the main one);
- otherwise in a detached tmux session of the team's own (``taskloom-<team>``) on the default
  server, which the user can attach to; there the teammates are tiled.

Every pane runs its command directly (no shell in between, so the pane's pid is the command's)
with ``remain-on-exit`` on: a teammate that crashed leaves its last output for the user. Each
pane is tagged with the user option ``@taskloom-session`` so that a later session's sweep can
tell the panes of a dead session from those of a live one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from taskloom._dataclass import dataclass
from taskloom.errors import TaskloomError, clipped
from taskloom.process.run import ProgramError, run_program

#: tmux's names for the roster's colours (tmux knows no purple, orange or pink).
TMUX_COLOURS = {
    "blue": "blue",
    "green": "green",
    "yellow": "yellow",
    "purple": "magenta",
    "orange": "colour208",
    "pink": "colour205",
    "cyan": "cyan",
    "red": "red",
}
#: The user option naming the session a pane belongs to.
SESSION_OPTION = "@taskloom-session"
#: The user option holding a pane's border colour.
COLOUR_OPTION = "@taskloom-colour"
#: The window's border style: each pane's own colour, if it has one.
_BORDER = f"#{{?#{{{COLOUR_OPTION}}},fg=#{{{COLOUR_OPTION}}},default}}"
#: Longest any one tmux call may take.
_CALL_TIMEOUT_S = 10.0


class PaneError(TaskloomError):
    """tmux cannot be used, or a tmux command failed; the message says why."""


@dataclass(frozen=True, slots=True)
class Pane:
    """A pane and the process it runs.

    Attributes:
        id: tmux's pane id (``%12``).
        pid: The pid of the command it runs.
    """

    id: str
    pid: int


class PaneServer(Protocol):
    """Where pane teammates go: tmux (:class:`TmuxPanes`) or iTerm2 (``ItermPanes``).

    Attributes:
        backend: The teammates' backend name (``tmux``, ``iterm2``).
    """

    backend: str

    async def create(
        self,
        *,
        team: str,
        session_id: str,
        title: str,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        colour: str | None = None,
        before_start: Callable[[Pane], Awaitable[None]] | None = None,
    ) -> Pane:
        """Start ``argv`` in a new pane (see :meth:`TmuxPanes.create`)."""
        ...

    async def kill(self, pane_id: str) -> bool:
        """Close the pane; whether it was there."""
        ...

    async def exit_status(self, pane_id: str, wait: float = 0.5) -> str:
        """How the pane's command ended, if the terminal knows; '' if not."""
        ...

    async def panes(self) -> list[tuple[str, int, str, bool]]:
        """The panes a sweep may judge: id, pid, the session it belongs to, dead."""
        ...


def locate(env: Mapping[str, str] | None = None) -> TmuxPanes:
    """The panes a team of this process uses (see the module docstring).

    Raises:
        PaneError: tmux is not installed.
    """
    env = os.environ if env is None else env
    tmux = shutil.which("tmux", path=env.get("PATH"))
    if tmux is None:
        raise PaneError("teammateMode tmux: tmux is not installed (no tmux on PATH)")
    inside = env.get("TMUX", "")
    if inside:
        # $TMUX is "socket,server pid,session index": the server the user's terminal is on.
        return TmuxPanes(tmux, socket=inside.split(",")[0], lead_pane=env.get("TMUX_PANE"))
    return TmuxPanes(tmux)


async def run_client(
    argv: Sequence[str], what: str, *, tagged: bool = True, timeout: float | None = None
) -> str:
    """Run one command of a pane backend's client (tmux, it2); its output.

    The client is a short-lived program (:func:`~taskloom.process.run.run_program`):
    recorded for the orphan sweep, in a group of its own, killed past ``timeout`` or when the
    caller is cancelled.

    Args:
        argv: The client and its arguments.
        what: Names the command in errors (``tmux new-window``).
        tagged: Whether the client carries the session's tag (see :meth:`TmuxPanes.run`).
        timeout: Seconds it may take (default :data:`_CALL_TIMEOUT_S`).

    Raises:
        PaneError: It failed (its error output, else its output, says why) or took too long.
    """
    prefix = Path(argv[0]).name
    timeout = _CALL_TIMEOUT_S if timeout is None else timeout
    try:
        ran = await run_program(argv, timeout=timeout, tagged=tagged, prefix=prefix)
    except ProgramError as exc:
        if exc.timed_out:
            raise PaneError(f"{what} took over {timeout:g} s") from None
        raise PaneError(f"{what}: {exc.reason}") from exc
    if ran.exit_code != 0:
        why = ran.err_text().strip() or ran.out_text().strip() or f"exit code {ran.exit_code}"
        raise PaneError(f"{what}: {clipped(why)}")
    return ran.out_text()


class TmuxPanes:
    """The panes of one tmux server.

    Args:
        tmux: The tmux program.
        socket: The server's socket (None: tmux's default server).
        lead_pane: The lead's own pane, when the lead runs inside that server.
    """

    backend = "tmux"

    def __init__(self, tmux: str, *, socket: str | None = None, lead_pane: str | None = None):
        self.tmux = tmux
        self.socket = socket
        self.lead_pane = lead_pane
        # One pane made at a time: two spawns at once would both make the team's session.
        self._creating = asyncio.Lock()

    async def run(self, *args: str, tagged: bool = True) -> str:
        """Run one tmux command; its output.

        The client is a short-lived program (:func:`~taskloom.process.run.run_program`):
        recorded for the orphan sweep, in a group of its own, killed past
        :data:`_CALL_TIMEOUT_S` or when the caller is cancelled. ``tagged=False`` for a
        command that may start the tmux server: the server is forked from the client and
        keeps its environment, so a tag would mark the server (and every shell it starts
        for the user) as the client's, for any sweep to kill.

        Raises:
            PaneError: It failed (its error output says why) or took too long.
        """
        argv = [self.tmux, *(("-S", self.socket) if self.socket else ()), *args]
        return await run_client(argv, f"tmux {args[0]}", tagged=tagged)

    async def create(
        self,
        *,
        team: str,
        session_id: str,
        title: str,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        colour: str | None = None,
        before_start: Callable[[Pane], Awaitable[None]] | None = None,
    ) -> Pane:
        """Start ``argv`` in a new pane of ``team``'s window; the pane and its pid.

        The command sees exactly ``env`` (tmux's own variables are not passed on).

        Args:
            team: The team (its window, or its own tmux session).
            session_id: The session the pane belongs to (its tag, for the sweep).
            title: Shown on the pane's border.
            argv: The command.
            cwd: Where it starts.
            env: Its whole environment.
            colour: Its border's colour (a roster colour).
            before_start: Awaited once the pane exists, before the command starts (to hand
                it what it needs to know about its pane); if it fails, the pane is killed.

        Raises:
            PaneError: tmux failed.
        """
        async with self._creating:
            return await self._create(team, session_id, title, argv, cwd, env, colour, before_start)

    async def _create(
        self,
        team: str,
        session_id: str,
        title: str,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        colour: str | None,
        before_start: Callable[[Pane], Awaitable[None]] | None,
    ) -> Pane:
        command = [shutil.which("env") or "/usr/bin/env", "-i"]
        command += [f"{k}={v}" for k, v in env.items()]
        # The pane's shell waits for one line before it becomes the command (exec: the same
        # pid): the pane is set up first, so that a command that ends at once still leaves
        # its pane (remain-on-exit) and its words for the user.
        command += ["/bin/sh", "-c", 'read -r _ && exec "$@"', "sh", *argv]
        command = [_literal(a) for a in command]
        shown = ["-P", "-F", "#{pane_id} #{pane_pid}", "-c", _unformatted(cwd)]
        if self.lead_pane is not None:
            out = await self.run("split-window", "-d", "-h", "-t", self.lead_pane, *shown, *command)
        else:
            name = f"taskloom-{team}"
            if await self._has_session(name):
                out = await self.run("split-window", "-d", "-t", f"={name}:", *shown, *command)
            else:
                # With no server running this client starts it: untagged (see ``run``).
                out = await self.run(
                    "new-session", "-d", "-s", name, "-x", "200", "-y", "50", *shown, *command,
                    tagged=False,
                )  # fmt: skip
        pane_id, pid = out.split()
        try:
            await self.run(
                *_pane_option(pane_id, "remain-on-exit", "on"),
                ";",
                *_pane_option(pane_id, SESSION_OPTION, session_id),
                ";",
                "select-pane",
                "-t",
                pane_id,
                "-T",
                _literal(_unformatted(title)),
            )
            if colour is not None:
                await self.set_border_colour(pane_id, colour)
            await self.rebalance(pane_id)
            if before_start is not None:
                await before_start(Pane(pane_id, int(pid)))
            await self.run("send-keys", "-t", pane_id, "Enter")  # now the command starts
        except BaseException:
            # Half set up (tmux failed or was stopped): no pane may be left untagged.
            await asyncio.shield(self.kill(pane_id))
            raise
        return Pane(pane_id, int(pid))

    async def _has_session(self, name: str) -> bool:
        try:
            await self.run("has-session", "-t", f"={name}")
        except PaneError:
            return False
        return True

    async def set_border_colour(self, pane_id: str, colour: str) -> None:
        """Draw the pane's border (and its title) in ``colour`` (a roster colour).

        Border styles are window options in tmux: the window's style reads each pane's own
        ``@taskloom-colour`` (styles take formats, expanded per pane).
        """
        await self.run(*_pane_option(pane_id, COLOUR_OPTION, TMUX_COLOURS.get(colour, colour)))

    async def close_on_exit(self, pane_id: str) -> None:
        """Let the pane close once its command ends (it was kept for its last output).

        Raises:
            PaneError: tmux failed.
        """
        await self.run(*_pane_option(pane_id, "remain-on-exit", "off"))

    async def kill(self, pane_id: str) -> bool:
        """Close the pane (its command gets SIGHUP); whether it was there."""
        try:
            await self.run("kill-pane", "-t", pane_id)
        except PaneError:
            return False
        return True

    async def rebalance(self, pane_id: str) -> None:
        """Lay out the window holding ``pane_id``: the lead 30 % left, or the panes tiled."""
        window = (await self.run("display-message", "-p", "-t", pane_id, "#{window_id}")).strip()
        title = f" #[fg=#{{{COLOUR_OPTION}}}]#{{pane_title}}#[default] "
        await self.run(
            *_window_option(window, "pane-border-status", "top"),
            ";",
            *_window_option(window, "pane-border-format", title),
            ";",
            *_window_option(window, "pane-border-style", _BORDER),
            ";",
            *_window_option(window, "pane-active-border-style", _BORDER),
        )
        if self.lead_pane is not None:
            await self.run("set-option", "-w", "-t", window, "main-pane-width", "30%")
            await self.run("select-layout", "-t", window, "main-vertical")
        else:
            await self.run("select-layout", "-t", window, "tiled")

    async def exit_status(self, pane_id: str, wait: float = 0.5) -> str:
        """How the command of a pane ended (``exit code 3``, ``signal 9``); '' if unknown.

        tmux learns it when it reaps the command, a moment after the command ended: asked
        before that, this looks again for at most ``wait`` seconds (tmux has no event to wait
        on here).
        """
        deadline = asyncio.get_running_loop().time() + wait
        fields = "#{pane_dead}:#{pane_dead_status}:#{pane_dead_signal}"
        while True:
            try:
                out = await self.run("display-message", "-p", "-t", pane_id, fields)
            except PaneError:
                return ""
            dead, _, rest = out.strip().partition(":")
            # tmux marks the pane dead a moment before it records how: wait for both.
            known = dead == "1" and rest.strip(":") != ""
            if known or asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(0.02)
        status, _, signal = rest.partition(":")  # one of them is empty
        if signal and signal != "0":
            return f"signal {signal}"
        return f"exit code {status}" if status else ""

    async def panes(self) -> list[tuple[str, int, str, bool]]:
        """Every pane of the server: id, pid, the session it belongs to ('' if none), dead."""
        try:
            fields = f"#{{pane_id}} #{{pane_pid}} #{{pane_dead}} #{{{SESSION_OPTION}}}"
            out = await self.run("list-panes", "-a", "-F", fields)
        except PaneError as exc:
            if "no server running" in str(exc) or "error connecting" in str(exc):
                return []  # no server runs: no panes
            raise
        found = []
        for line in out.splitlines():
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1].isdigit():
                owner = parts[3] if len(parts) == 4 else ""
                found.append((parts[0], int(parts[1]), owner, parts[2] == "1"))
        return found


def _window_option(window: str, name: str, value: str) -> list[str]:
    return ["set-option", "-w", "-t", window, name, _literal(value)]


def _pane_option(pane_id: str, name: str, value: str) -> list[str]:
    return ["set-option", "-p", "-t", pane_id, name, _literal(value)]


def _unformatted(text: str) -> str:
    # tmux expands formats (#{...}, #W, #(...)) in a pane's directory and title: ## is a #.
    return text.replace("#", "##")


def _literal(arg: str) -> str:
    # tmux ends a command at an argument ending in ";" (and reads a final "\;" as a literal
    # ";"): a backslash before it passes any such argument on as it is.
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


__all__ = [
    "COLOUR_OPTION",
    "SESSION_OPTION",
    "TMUX_COLOURS",
    "Pane",
    "PaneError",
    "PaneServer",
    "TmuxPanes",
    "locate",
]
