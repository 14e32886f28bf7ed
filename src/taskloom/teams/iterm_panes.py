"""Teammate panes on iTerm2, through its ``it2`` program (experimental).

The same seam as the tmux panes (:class:`~taskloom.teams.panes.PaneServer`), driven by the
``it2`` command line (``pip install it2``, iTerm2's Python API enabled), with the calls Claude
Code's iTerm2 backend makes:

- **layout**: the first teammate splits the lead's session vertically
  (``it2 session split -v -s LEAD``, the lead's id from ``$ITERM_SESSION_ID``), each later one
  splits the last teammate's (``it2 session split -s LAST``): the lead on the left, the
  teammates stacked on the right; iTerm2 sizes the panes itself. The split says
  ``Created new pane: ID``;
- **title and colour**: ``it2 session set-name TITLE -s ID``, then the pane's shell prints
  iTerm2's tab-colour escape (``it2 session run "printf …" -s ID``);
- **create**: the pane's shell runs a small launch script (``it2 session run "exec /bin/sh
  SCRIPT" -s ID``) that reports its pid through a FIFO and waits for a line before it becomes
  the command (``exec``: the same pid), so the lead records the process before it can run,
  as with tmux; the line is sent with ``it2 session run "" -s ID``;
- **kill**: ``it2 session close -f -s ID`` (``-f``: iTerm2 would otherwise ask first).

iTerm2 says nothing of how a session's command ended, nor lets a pane carry the session it
belongs to: a crashed teammate's end is known from its process alone, and a crashed lead's
panes are left for the user to close (their processes are the orphan sweep's).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from taskloom.errors import clipped
from taskloom.teams.panes import Pane, PaneError, run_client

#: The program driving iTerm2.
IT2 = "it2"
#: Longest any one it2 call may take (each starts a Python process and talks to iTerm2).
_CALL_TIMEOUT_S = 15.0
#: Longest wait for a new pane's shell to start the launch script and report its pid.
_READY_TIMEOUT_S = 30.0
#: The roster's colours as RGB, for iTerm2's tab colour.
RGB = {
    "blue": (0, 120, 255),
    "green": (0, 180, 0),
    "yellow": (230, 200, 0),
    "purple": (150, 60, 200),
    "orange": (255, 135, 0),
    "pink": (255, 95, 175),
    "cyan": (0, 190, 210),
    "red": (220, 0, 0),
}
_CREATED = re.compile(r"Created new pane:\s*(\S+)")


def inside_iterm(env: Mapping[str, str]) -> bool:
    """Whether this process runs in an iTerm2 session."""
    return bool(env.get("ITERM_SESSION_ID")) or env.get("TERM_PROGRAM") == "iTerm.app"


def locate_iterm(env: Mapping[str, str] | None = None) -> ItermPanes:
    """The iTerm2 panes a team of this process uses.

    Raises:
        PaneError: There is no ``it2`` program on PATH.
    """
    env = os.environ if env is None else env
    it2 = shutil.which(IT2, path=env.get("PATH"))
    if it2 is None:
        raise PaneError(
            "teammateMode iterm2: the it2 program is not installed (no it2 on PATH; install it "
            "with `pip install it2` and enable iTerm2's Python API)"
        )
    # $ITERM_SESSION_ID is "w0t1p2:UUID": it2 names sessions by the UUID.
    lead = env.get("ITERM_SESSION_ID", "").partition(":")[2] or None
    return ItermPanes(it2, lead_session=lead)


class ItermPanes:
    """Teammate panes in the lead's iTerm2 window (see the module docstring).

    Args:
        it2: The it2 program.
        lead_session: The lead's iTerm2 session id (None: it2 splits the active session).
    """

    backend = "iterm2"

    def __init__(self, it2: str, *, lead_session: str | None = None) -> None:
        self.it2 = it2
        self.lead_session = lead_session
        #: The teammates' panes, in the order made: a new one splits the last.
        self.made: list[str] = []
        self._creating = asyncio.Lock()

    async def run(self, *args: str) -> str:
        """Run one it2 command (recorded, bounded, see ``run_program``); its output.

        Raises:
            PaneError: It failed (its error output says why) or took too long.
        """
        what = f"it2 {' '.join(args[:2])}"
        return await run_client([self.it2, *args], what, timeout=_CALL_TIMEOUT_S)

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
        """Start ``argv`` in a new pane beside the lead's; the pane and its pid.

        The arguments are :meth:`TmuxPanes.create <taskloom.teams.panes.TmuxPanes.create>`'s
        (``team`` and ``session_id`` aside: iTerm2 panes carry neither).

        Raises:
            PaneError: it2 failed, or the pane's shell did not start the command in time.
        """
        async with self._creating:
            pane_id = await self._split()
            try:
                await self.run("session", "set-name", title, "-s", pane_id)
                if colour is not None:
                    await self.set_border_colour(pane_id, colour)
                pane = await self._launch(pane_id, argv, cwd, env, before_start)
            except BaseException:
                await asyncio.shield(self.kill(pane_id))
                raise
            return pane

    async def _split(self) -> str:
        """A new pane: the lead's session split vertically, else the last teammate's split."""
        if self.made:
            args = ["session", "split", "-s", self.made[-1]]
        else:
            args = ["session", "split", "-v"]
            if self.lead_session is not None:
                args += ["-s", self.lead_session]
        out = await self.run(*args)
        found = _CREATED.search(out)
        if found is None:
            raise PaneError(f"it2 session split: no new pane in its answer {clipped(out)!r}")
        self.made.append(found.group(1))
        return found.group(1)

    async def _launch(
        self,
        pane_id: str,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        before_start: Callable[[Pane], Awaitable[None]] | None,
    ) -> Pane:
        """Start the command in the pane's shell (see the module docstring)."""
        place = Path(tempfile.mkdtemp(prefix="taskloom-it2-"))  # 0700
        try:
            ready, script = place / "ready", place / "launch.sh"
            os.mkfifo(ready, 0o600)
            command = [shutil.which("env") or "/usr/bin/env", "-i"]
            command += [f"{k}={v}" for k, v in env.items()] + list(argv)
            script.write_text(
                f"cd {shlex.quote(cwd)} || exit 1\n"
                f'printf "%s" "$$" > {shlex.quote(str(ready))}\n'
                "read -r _ || exit 1\n"
                f"exec {shlex.join(command)}\n"
            )
            # Typed into the user's shell (bash, zsh, fish): one word each, nothing to expand.
            await self.run(
                "session", "run", f"exec /bin/sh {shlex.quote(str(script))}", "-s", pane_id
            )
            pid = await _read_pid(ready)
        finally:
            shutil.rmtree(place, ignore_errors=True)  # the shell has the script open
        pane = Pane(pane_id, pid)
        if before_start is not None:
            await before_start(pane)
        await self.run("session", "run", "", "-s", pane_id)  # the line it waits for
        return pane

    async def set_border_colour(self, pane_id: str, colour: str) -> None:
        """Colour the pane's tab in ``colour`` (a roster colour): iTerm2's escape, printed."""
        r, g, b = RGB.get(colour, RGB["blue"])
        escape = "".join(
            f"\\033]6;1;bg;{name};brightness;{value}\\a"
            for name, value in (("red", r), ("green", g), ("blue", b))
        )
        await self.run("session", "run", f"printf '{escape}'", "-s", pane_id)

    async def close_on_exit(self, pane_id: str) -> None:
        """Nothing to do: an iTerm2 session whose command ended closes as its profile says."""

    async def kill(self, pane_id: str) -> bool:
        """Close the pane (its command gets SIGHUP); whether it was there."""
        with contextlib.suppress(ValueError):
            self.made.remove(pane_id)  # a later split must not target a closed pane
        try:
            await self.run("session", "close", "-f", "-s", pane_id)
        except PaneError:
            return False
        return True

    async def exit_status(self, pane_id: str, wait: float = 0.5) -> str:
        """'': iTerm2 does not say how a session's command ended."""
        return ""

    async def panes(self) -> list[tuple[str, int, str, bool]]:
        """None known: iTerm2 panes carry no session tag for a sweep to judge them by."""
        return []


async def _read_pid(fifo: Path) -> int:
    """The pid the launch script writes into ``fifo``, within :data:`_READY_TIMEOUT_S`.

    Raises:
        PaneError: Nothing came in time, or not a pid.
    """
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    # A writer of our own: the FIFO never reads as ended before the script writes to it.
    keep = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(reader, ready)
    try:
        await asyncio.wait_for(readable, _READY_TIMEOUT_S)
        text = os.read(reader, 64).decode(errors="replace").strip()
    except TimeoutError:
        raise PaneError(
            f"the new iTerm2 pane's shell did not start its command within {_READY_TIMEOUT_S:g} s"
        ) from None
    finally:
        loop.remove_reader(reader)
        os.close(reader)
        os.close(keep)
    if not text.isdigit():
        raise PaneError(f"the new iTerm2 pane reported no pid ({text!r})")
    return int(text)


__all__ = ["IT2", "RGB", "ItermPanes", "inside_iterm", "locate_iterm"]
