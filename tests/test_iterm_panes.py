"""The iTerm2 pane backend, against a stand-in ``it2`` that records its calls (no macOS here).

The stand-in answers as it2 does (``Created new pane: ID``) and plays the pane's shell: the
command typed into a pane runs with that pane's input, a line sent to it is read there, and
closing the pane hangs its process up.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import psutil
import pytest

from helpers import wait_until
from taskloom.errors import UsageError
from taskloom.teams.iterm_panes import ItermPanes, locate_iterm
from taskloom.teams.mode import pane_server, teammate_mode
from taskloom.teams.panes import Pane

STAND_IN = """\
#!{python}
import json, os, signal, subprocess, sys
state = os.environ["IT2_STATE"]
args = sys.argv[1:]
with open(os.path.join(state, "calls.jsonl"), "a") as f:
    f.write(json.dumps(args) + "\\n")
pane = args[args.index("-s") + 1] if "-s" in args else None
if args[:2] == ["session", "split"]:
    made = len([n for n in os.listdir(state) if n.endswith(".in")]) + 1
    os.mkfifo(os.path.join(state, f"PANE-{{made}}.in"))
    print(f"Created new pane: PANE-{{made}}")
elif args[:2] == ["session", "run"] and args[2] == "":
    fd = os.open(os.path.join(state, pane + ".in"), os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, b"\\n")
    os.close(fd)
elif args[:2] == ["session", "run"] and not args[2].startswith("printf"):
    env = {{k: v for k, v in os.environ.items() if k != "TASKLOOM_TASK_ID"}}
    tty = os.open(os.path.join(state, pane + ".in"), os.O_RDWR)
    shell = subprocess.Popen(
        ["/bin/sh", "-c", args[2]], stdin=tty, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )
    with open(os.path.join(state, pane + ".pid"), "w") as f:
        f.write(str(shell.pid))
elif args[:2] == ["session", "close"]:
    with open(os.path.join(state, pane + ".pid")) as f:
        os.killpg(int(f.read()), signal.SIGHUP)
elif args[:2] not in (["session", "set-name"], ["session", "run"]):
    sys.exit("it2: unknown command")
"""


@pytest.fixture
def it2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding the stand-in ``it2``; its state (calls, panes) beside it."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    program = bin_dir / "it2"
    program.write_text(STAND_IN.format(python=sys.executable))
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("IT2_STATE", str(state))
    return bin_dir


def calls(it2: Path) -> list[list[str]]:
    lines = (it2.parent / "state" / "calls.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


async def test_create_colour_layout_and_kill_make_the_expected_it2_calls(
    it2: Path, tmp_path: Path
) -> None:
    env = {"PATH": f"{it2}:{os.environ['PATH']}", "ITERM_SESSION_ID": "w0t0p0:LEAD-UUID"}
    panes = locate_iterm(env)
    assert isinstance(panes, ItermPanes) and panes.lead_session == "LEAD-UUID"
    seen: list[tuple[Pane, list[str]]] = []

    async def before_start(pane: Pane) -> None:
        # Recorded before the command runs: its process is still the launch script.
        seen.append((pane, psutil.Process(pane.pid).cmdline()))

    made = []
    for name, colour in (("alice@crew", "red"), ("bob@crew", "blue")):
        made.append(
            await panes.create(
                team="crew",
                session_id="s1",
                title=name,
                argv=SLEEPER,
                cwd=str(tmp_path),
                env={"PATH": os.environ["PATH"]},
                colour=colour,
                before_start=before_start,
            )
        )
    alice, bob = made
    assert [p.id for p in made] == ["PANE-1", "PANE-2"]
    assert [p for p, _ in seen] == made and all("-c" not in cmd for _, cmd in seen)
    for pane in made:  # now each is the command itself, under the same pid
        await wait_until(lambda p=pane: psutil.Process(p.pid).cmdline()[1:] == SLEEPER[1:])
        assert psutil.Process(pane.pid).cwd() == str(tmp_path)
    launch = calls(it2)
    red = r"printf '\033]6;1;bg;red;brightness;220\a\033]6;1;bg;green;brightness;0\a"
    assert launch[0] == ["session", "split", "-v", "-s", "LEAD-UUID"]  # beside the lead
    assert launch[1] == ["session", "set-name", "alice@crew", "-s", "PANE-1"]
    assert launch[2][:2] == ["session", "run"] and launch[2][2].startswith(red)
    assert launch[2][3:] == ["-s", "PANE-1"]
    assert launch[3][2].startswith("exec /bin/sh ") and launch[3][3:] == ["-s", "PANE-1"]
    assert launch[4] == ["session", "run", "", "-s", "PANE-1"]  # the line it waits for
    assert launch[5] == ["session", "split", "-s", "PANE-1"]  # stacked under the last one
    assert launch[6] == ["session", "set-name", "bob@crew", "-s", "PANE-2"]
    assert "bg;blue;brightness;255" in launch[7][2]

    assert await panes.kill(bob.id)
    assert calls(it2)[-1] == ["session", "close", "-f", "-s", "PANE-2"]
    await wait_until(lambda: not psutil.pid_exists(bob.pid) or _gone(bob.pid))
    # The next one splits the last pane still open.
    carol = await panes.create(
        team="crew", session_id="s1", title="carol@crew", argv=SLEEPER, cwd=str(tmp_path), env={}
    )
    assert calls(it2)[len(launch) + 1] == ["session", "split", "-s", "PANE-1"]
    for pane in (alice, carol):
        assert await panes.kill(pane.id)
        await wait_until(lambda p=pane: not psutil.pid_exists(p.pid) or _gone(p.pid))
    assert await panes.exit_status(alice.id) == "" and await panes.panes() == []


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_iterm2_is_chosen_by_the_mode_or_inside_iterm_and_a_missing_it2_is_an_error(
    it2: Path,
) -> None:
    assert teammate_mode("iterm2", {}) == "iterm2"
    assert teammate_mode(None, {"teammateMode": "iterm2"}, env={}) == "iterm2"
    found = f"{it2}:/usr/bin:/bin"
    assert isinstance(pane_server("iterm2", {"PATH": found}), ItermPanes)
    inside = pane_server("auto", {"PATH": found, "TERM_PROGRAM": "iTerm.app"})
    assert isinstance(inside, ItermPanes) and inside.lead_session is None
    # auto outside iTerm2 (and tmux), or inside without it2: teammates run in this process.
    assert pane_server("auto", {"PATH": found}) is None
    assert pane_server("auto", {"PATH": "/nonexistent", "ITERM_SESSION_ID": "w0:X"}) is None
    # Asked for by name where it2 is missing: an error naming it, never in-process.
    with pytest.raises(UsageError, match=r"teammateMode iterm2: the it2 program"):
        pane_server("iterm2", {"PATH": "/nonexistent", "ITERM_SESSION_ID": "w0:X"})
