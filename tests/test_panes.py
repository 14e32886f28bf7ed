"""Teammate panes on a real tmux server (a private socket per test): create, colour, lay out,
kill, and what a sweep sees."""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import psutil
import pytest

import tmux_driver
from helpers import RUN_MARK, TIME_FACTOR, alive, run_processes, wait_until
from taskloom.process.spawn import TASK_ENV
from taskloom.teams.panes import SESSION_OPTION, PaneError, TmuxPanes, locate

WAIT = "import sys; print('up:', sys.argv[1], flush=True); input()"


def child_env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8", RUN_MARK: os.environ[RUN_MARK]}


def capture(server: tmux_driver.TmuxServer, pane: str) -> str:
    return server.run("capture-pane", "-p", "-t", pane)


def option(server: tmux_driver.TmuxServer, pane: str, name: str) -> str:
    return server.run("show-options", "-p", "-v", "-t", pane, name).strip()


@pytest.mark.e2e
async def test_teammate_panes_beside_the_leads_take_70_percent_with_their_colours(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    lead = tmux.spawn([sys.executable, "-c", WAIT, "lead"], cwd=tmp_path, env=child_env())
    lead.wait_for("up: lead")
    panes = TmuxPanes(
        tmux_driver.TMUX or "tmux", socket=str(tmux.socket_path), lead_pane=lead.pane_id
    )
    alice = await panes.create(
        team="alpha",
        session_id="s-1",
        title="alice@alpha",
        argv=[sys.executable, "-c", WAIT, "alice;"],
        cwd=str(tmp_path),
        env=child_env(),
        colour="purple",
    )
    bob = await panes.create(
        team="alpha",
        session_id="s-1",
        title="bob@alpha",
        argv=[sys.executable, "-c", WAIT, "bob"],
        cwd=str(tmp_path),
        env=child_env(),
        colour="blue",
    )
    # Each runs its command itself: the pane's pid is the command's, and it sees its env.
    for pane, name in ((alice, "alice;"), (bob, "bob")):
        await wait_until(lambda p=pane, n=name: f"up: {n}" in capture(tmux, p.id), timeout=10)
        proc = psutil.Process(pane.pid)
        assert proc.cmdline()[-1] in ("alice;", "bob")
        assert proc.environ()[RUN_MARK] == os.environ[RUN_MARK]
        assert "TMUX" not in proc.environ()
    layout = tmux.run(
        "list-panes",
        "-t",
        lead.pane_id,
        "-F",
        "#{pane_id} #{pane_left} #{pane_width} #{pane_title}",
    ).split("\n")
    rows = {line.split()[0]: line.split() for line in layout if line}
    assert set(rows) == {lead.pane_id, alice.id, bob.id}
    window = int(tmux.run("display-message", "-p", "-t", lead.pane_id, "#{window_width}"))
    # The lead keeps 30 % on the left; its teammates share the rest on the right.
    assert rows[lead.pane_id][1] == "0"
    assert abs(int(rows[lead.pane_id][2]) - window * 0.3) <= 2
    assert int(rows[alice.id][1]) > int(rows[lead.pane_id][2])
    assert rows[alice.id][3] == "alice@alpha" and rows[bob.id][3] == "bob@alpha"
    # Each border is drawn in its teammate's colour (the window's style, expanded per pane).
    shown = "#{E:pane-border-style} #{E:pane-active-border-style}"
    assert tmux.run("display-message", "-p", "-t", alice.id, shown).split() == ["fg=magenta"] * 2
    assert tmux.run("display-message", "-p", "-t", bob.id, shown).split() == ["fg=blue"] * 2
    assert option(tmux, alice.id, SESSION_OPTION) == "s-1"
    seen = {pane_id: (pid, owner, dead) for pane_id, pid, owner, dead in await panes.panes()}
    assert seen[alice.id] == (alice.pid, "s-1", False)
    assert seen[lead.pane_id][1] == ""  # the lead's own pane is not a teammate's
    # Killing a pane ends its command; a pane that is gone is not an error.
    assert await panes.kill(alice.id)
    await wait_until(lambda: not alive(alice.pid), timeout=5)
    assert not await panes.kill(alice.id)
    assert alice.id not in {p[0] for p in await panes.panes()}


@pytest.mark.e2e
async def test_outside_tmux_a_detached_session_of_the_teams_own_holds_the_panes(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    panes = TmuxPanes(tmux_driver.TMUX or "tmux", socket=str(tmux.socket_path))
    made = [
        await panes.create(
            team="beta",
            session_id="s-2",
            title=f"{name}@beta",
            argv=[sys.executable, "-c", WAIT, name],
            cwd=str(tmp_path),
            env=child_env(),
        )
        for name in ("carol", "dave")
    ]
    sessions = tmux.run("list-sessions", "-F", "#{session_name}").split()
    assert "taskloom-beta" in sessions
    listed = tmux.run("list-panes", "-t", "=taskloom-beta:", "-F", "#{pane_id}").split()
    assert sorted(listed) == sorted(p.id for p in made)
    # A teammate that ends, even at once, keeps its pane with its last output for the user;
    # a directory with a "#" in it is taken as it is, not as a tmux format.
    odd = tmp_path / "odd#{pane_id}#W"
    odd.mkdir()
    crashing = await panes.create(
        team="beta",
        session_id="s-2",
        title="erin#{pane_id}@beta",
        argv=[sys.executable, "-c", "import os; print('last words in', os.getcwd())"],
        cwd=str(odd),
        env=child_env(),
    )
    await wait_until(lambda: not alive(crashing.pid), timeout=10)
    assert crashing.id in {p[0] for p in await panes.panes()}
    await wait_until(lambda: "last words" in capture(tmux, crashing.id), timeout=5)
    assert f"last words in {odd}" in capture(tmux, crashing.id).replace("\n", "")
    shown = tmux.run("display-message", "-p", "-t", crashing.id, "#{pane_title}").strip()
    assert shown == "erin#{pane_id}@beta"
    for pane in [*made, crashing]:
        await panes.kill(pane.id)


def test_locate_names_why_tmux_cannot_be_used_and_finds_the_users_server(tmp_path: Path) -> None:
    with pytest.raises(PaneError, match="tmux is not installed"):
        locate({"PATH": str(tmp_path)})
    if tmux_driver.TMUX is None:
        pytest.skip("tmux is not installed")
    path = str(Path(tmux_driver.TMUX).parent)
    inside = locate({"PATH": path, "TMUX": "/tmp/tmux-0/default,4242,0", "TMUX_PANE": "%3"})
    assert (inside.socket, inside.lead_pane) == ("/tmp/tmux-0/default", "%3")
    outside = locate({"PATH": path})
    assert (outside.socket, outside.lead_pane) == (None, None)


@pytest.mark.e2e
async def test_a_failing_tmux_command_is_an_error_naming_it(tmp_path: Path) -> None:
    if tmux_driver.TMUX is None:
        pytest.skip("tmux is not installed")
    panes = TmuxPanes(tmux_driver.TMUX, socket=str(tmp_path / "none.sock"))
    with pytest.raises(PaneError, match="tmux display-message"):
        await panes.run("display-message", "-p", "-t", "%999", "#{pane_id}")
    assert await panes.panes() == []  # no server: no panes


# Run by a stand-in for tmux: the command it was given, the tag it carries and whether that
# tag is recorded in the store.
RECORDED = (
    "import os, sqlite3, sys; "
    "db = os.path.join(os.environ['TASKLOOM_HOME'], 'taskloom.db'); "
    "tag = os.environ.get('TASKLOOM_TASK_ID', 'none'); "
    "n = sqlite3.connect(db).execute('SELECT count(*) FROM tags WHERE tag = ?', (tag,)); "
    "open(sys.argv[1], 'a').write(f'{sys.argv[2]} {tag} {n.fetchone()[0]}' + chr(10))"
)


def stand_in_tmux(tmp_path: Path, report: Path) -> Path:
    """A program in tmux's place that says how it was run and answers as tmux would, but
    hangs on ``list-panes`` (a server that does not answer), with a child out of its group."""
    check = shlex.join([sys.executable, "-c", RECORDED, str(report)])
    script = tmp_path / "tmux"
    script.write_text(
        "#!/bin/sh\n"
        f'{check} "$1"\n'
        'case "$1" in\n'
        "  has-session) exit 1 ;;\n"
        "  new-session) echo '%7 4242' ;;\n"
        "  display-message) echo '@3' ;;\n"
        "  list-panes) setsid sleep 3431 </dev/null >/dev/null 2>&1 & sleep 3431 ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    return script


async def test_tmux_clients_are_recorded_bounded_and_the_one_that_may_start_a_server_untagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.teams import panes as panes_module

    report = tmp_path / "report"
    panes = TmuxPanes(str(stand_in_tmux(tmp_path, report)))
    monkeypatch.setenv(TASK_ENV, "inherited-tag")  # not even this reaches the tmux server
    monkeypatch.setattr(panes_module, "_CALL_TIMEOUT_S", 1.0)
    async with TaskRuntime() as rt:
        pane = await panes.create(
            team="t", session_id="s", title="a@t", argv=["true"], cwd=str(tmp_path), env={}
        )
        assert (pane.id, pane.pid) == ("%7", 4242)
        calls = [line.split() for line in report.read_text().splitlines()]
        assert [c[0] for c in calls][:2] == ["has-session", "new-session"]
        assert calls[1][1:] == ["none", "0"]  # it may start the server: no tag at all
        others = [c for c in calls if c[0] != "new-session"]
        assert len(others) >= 4
        assert all(tag.startswith("tmux-") and n == "1" for _, tag, n in others), others
        started = time.monotonic()
        with pytest.raises(PaneError, match="tmux list-panes took over 1 s"):
            await panes.run("list-panes")
        assert time.monotonic() - started < 1.0 + 3.0 * TIME_FACTOR
        assert run_processes(lambda p: p.info.get("cmdline") == ["sleep", "3431"]) == []
        assert rt.store.list_tags() == []
