"""The tmux test driver itself, against real tmux servers and real programs."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers import TIME_FACTOR
from tmux_driver import (
    TMUX,
    TmuxServer,
    escape_arg,
    leftover_servers,
    leftover_sockets,
    running,
)

pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")

PY = sys.executable


def child_env(**extra: str) -> dict[str, str]:
    # LC_ALL keeps Python from coercing the C locale, which would add LC_CTYPE to its environ.
    return {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8", **extra}


ECHO_UPPER = """
import sys
line = input("name? ")
print(line.upper())
sys.exit(3)
"""


@pytest.mark.e2e
def test_typed_line_is_echoed_uppercased_and_exit_status_is_read(
    tmux: TmuxServer, tmp_path: Path
) -> None:
    pane = tmux.spawn([PY, "-c", ECHO_UPPER], cwd=tmp_path, env=child_env())
    pane.wait_for("name?")
    assert not pane.dead
    assert pane.exit_status is None
    # A trailing ";" would end the tmux command if not escaped; non-ASCII needs tmux -u.
    pane.type("hello wörld;")
    pane.send_keys("Enter")
    screen = pane.wait_for("HELLO WÖRLD;")
    assert "name? hello wörld;" in screen
    assert pane.wait_exit(timeout=5) == 3
    assert pane.dead
    assert pane.exit_status == 3
    # remain-on-exit keeps the last screen, without tmux's "Pane is dead" row.
    assert "HELLO WÖRLD;" in pane.capture()
    assert "Pane is dead" not in pane.capture()


ENV_DUMP = """
import json, os, sys
print("probe=" + os.environ.get("TL_PROBE", "<unset>"))
print("parent=" + os.environ.get("TL_PARENT_ONLY", "<unset>"))
with open(sys.argv[1], "w") as f:
    json.dump({"env": dict(os.environ), "cwd": os.getcwd()}, f)
"""


@pytest.mark.e2e
def test_program_sees_exactly_the_env_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In our environment before the server starts, so tmux's global environment has it too.
    monkeypatch.setenv("TL_PARENT_ONLY", "leaked")
    out = tmp_path / "env.json"
    work = tmp_path / "work"
    work.mkdir()
    env = child_env(TL_PROBE="visible value")
    with TmuxServer(tmp_path) as server:
        pane = server.spawn([PY, "-c", ENV_DUMP, str(out)], cwd=work, env=env)
        assert pane.wait_exit(timeout=5) == 0
        screen = pane.capture()
    assert "probe=visible value" in screen
    assert "parent=<unset>" in screen
    seen = json.loads(out.read_text())
    assert seen["env"] == {**env, "TERM": "xterm-256color"}
    assert seen["cwd"] == str(work)


ARGV_DUMP = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"


@pytest.mark.e2e
def test_argv_reaches_the_program_verbatim(tmux: TmuxServer, tmp_path: Path) -> None:
    out = tmp_path / "argv.json"
    args = ["a;", "b\\;", ";", "\\;", "", "#{pane_id}", "$HOME", "~", "{", "}", "-l", "x y"]
    pane = tmux.spawn([PY, "-c", ARGV_DUMP, str(out), *args], cwd=tmp_path, env=child_env())
    assert pane.wait_exit(timeout=5) == 0
    assert json.loads(out.read_text()) == args


def test_escape_arg() -> None:
    assert escape_arg("plain") == "plain"
    assert escape_arg("a;") == "a\\;"
    assert escape_arg("a\\;") == "a\\\\;"
    assert escape_arg(";x") == ";x"


@pytest.mark.e2e
def test_close_leaves_no_server_nor_program(tmp_path: Path) -> None:
    server = TmuxServer(tmp_path).start()
    assert server.pid is not None
    server_proc = psutil.Process(server.pid)
    pane = server.spawn([PY, "-c", "input('waiting')"], cwd=tmp_path, env=child_env())
    pane.wait_for("waiting")
    pane_proc = psutil.Process(pane.pid)
    assert leftover_servers(tmp_path) == [server_proc]
    assert server.socket_path.is_socket()
    server.close()
    assert not running(server_proc)
    assert not running(pane_proc)  # hung up with its terminal
    assert not server.alive
    assert not server.socket_path.exists()
    assert leftover_servers(tmp_path) == []
    assert leftover_sockets(tmp_path) == []
    server.close()  # idempotent


IGNORE_HUP = """
import signal, time
signal.signal(signal.SIGHUP, signal.SIG_IGN)
print("ignoring", flush=True)
time.sleep(60)
"""


@pytest.mark.e2e
def test_close_kills_and_reports_a_program_that_outlives_the_server(tmp_path: Path) -> None:
    server = TmuxServer(tmp_path).start()
    pane = server.spawn([PY, "-c", IGNORE_HUP], cwd=tmp_path, env=child_env())
    pane.wait_for("ignoring")
    proc = psutil.Process(pane.pid)
    with pytest.raises(AssertionError, match=f"pid {pane.pid} .* outlived the server"):
        server.close(timeout=0.3)
    assert not running(proc)
    assert not server.socket_path.exists()


@pytest.mark.e2e
def test_wait_for_timeout_shows_pattern_and_screen(tmux: TmuxServer, tmp_path: Path) -> None:
    pane = tmux.spawn([PY, "-c", "print('  ready'); input()"], cwd=tmp_path, env=child_env())
    pane.wait_for(re.compile(r"^\s+ready$", re.M))
    start = time.monotonic()
    with pytest.raises(AssertionError) as info:
        pane.wait_for("never shown", timeout=0.2)
    assert time.monotonic() - start < 2 * TIME_FACTOR
    message = str(info.value)
    assert "'never shown'" in message
    assert f"timed out after {0.2 * TIME_FACTOR:g}s" in message  # the bound, as scaled
    assert "  |   ready" in message
    pane.send_keys("Enter")
    assert pane.wait_exit(timeout=5) == 0


@pytest.mark.e2e
def test_wait_for_fails_at_once_when_the_program_exits(tmux: TmuxServer, tmp_path: Path) -> None:
    pane = tmux.spawn([PY, "-c", "print('bye'); exit(4)"], cwd=tmp_path, env=child_env())
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"exited \(status 4\)[\s\S]*\| bye"):
        pane.wait_for("never shown", timeout=30)
    assert time.monotonic() - start < 5 * TIME_FACTOR


CLEAR_ON_ENTER = """
print("busy", flush=True)
input()
print("\\x1b[2J\\x1b[Hdone", flush=True)
input()
"""


@pytest.mark.e2e
def test_wait_gone_and_ctrl_c(tmux: TmuxServer, tmp_path: Path) -> None:
    pane = tmux.spawn([PY, "-c", CLEAR_ON_ENTER], cwd=tmp_path, env=child_env())
    pane.wait_for("busy")
    pane.send_keys("Enter")
    screen = pane.wait_gone("busy")
    pane.wait_for("done")
    assert "busy" not in screen
    pane.send_keys("C-c")
    # An uncaught KeyboardInterrupt makes Python die by SIGINT: reported as -2.
    assert pane.wait_exit(timeout=5) == -2


@pytest.mark.e2e
def test_history_has_what_scrolled_off(tmux: TmuxServer, tmp_path: Path) -> None:
    program = "for i in range(50): print(f'line {i}')\ninput()"
    pane = tmux.spawn([PY, "-c", program], cwd=tmp_path, env=child_env(), width=40, height=10)
    screen = pane.wait_for("line 49")
    assert len(screen.split("\n")) == 10
    assert "line 0\n" not in screen
    history = pane.wait_for("line 0\n", history=True)
    assert history.index("line 0\n") < history.index("line 49")
    pane.send_keys("Enter")
    assert pane.wait_exit(timeout=5) == 0


@pytest.mark.e2e
def test_spawn_rejects_a_missing_program_or_directory(tmux: TmuxServer, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        tmux.spawn(["no-such-program-here"], cwd=tmp_path, env=child_env())
    with pytest.raises(FileNotFoundError, match="not a directory"):
        tmux.spawn([PY], cwd=tmp_path / "missing", env=child_env())


@pytest.mark.e2e
def test_socket_in_a_directory_too_deep_goes_elsewhere_and_is_removed(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    with TmuxServer(deep) as server:
        assert not str(server.socket_path).startswith(str(deep))
        assert server.socket_path.is_socket()
        short_dir = server.socket_path.parent
    assert not short_dir.exists()


#: Prints its terminal's size, then again once a SIGWINCH has brought a new one (tmux resizes
#: the pane's terminal after resize-window returns: Enter could be read before that).
SIZE_ON_RESIZE = """
import os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGWINCH})
first = os.get_terminal_size()
print(first, flush=True)
while os.get_terminal_size() == first:
    signal.sigwait({signal.SIGWINCH})
print(os.get_terminal_size())
"""


@pytest.mark.e2e
def test_size_and_resize(tmux: TmuxServer, tmp_path: Path) -> None:
    pane = tmux.spawn(
        [PY, "-c", SIZE_ON_RESIZE], cwd=tmp_path, env=child_env(), width=70, height=20
    )
    pane.wait_for("columns=70, lines=20")
    pane.resize(50, 12)
    pane.wait_for("columns=50, lines=12")
    assert len(pane.capture().split("\n")) == 12
    assert pane.wait_exit(timeout=5) == 0
