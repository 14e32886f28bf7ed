"""Remote agents die with their session, on a real local Ray, however the session ends.

``taskloom -p`` with a scripted model (``--model scripted:FILE``: the file is in the project,
so the remote agents' workers find it in their copies) spawns remote agents whose command is a
``sleep`` of a value of the test's own, found with psutil. The session is then killed: with
SIGKILL nothing of it may outlive it (commands, workers, Ray's processes, Ray's directory, the
scratch checkouts), and its tasks are said to be killed only by the next session's start; with
SIGTERM, nothing of Ray reaches taskloom's stderr.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import TIME_FACTOR, clean_env, needs, run_processes, scripted_argv
from taskloom.settings import db_path
from taskloom.store import Store
from test_remote import _repo

# One Ray start and its bounded waits can outlast the default 120 s cap on a loaded machine.
pytestmark = [
    needs("ray"),
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.timeout(300 * TIME_FACTOR),
]

#: What Ray printed on taskloom's stderr: its start notices, its C++ stack dump on SIGTERM.
RAY_NOISE = ("SIGTERM handler is not set", "Token authentication", "SIGTERM received", "PC: @")


def _script(repo: Path, agents: int, seconds: int) -> Path:
    """The lead spawns ``agents`` remote agents; each runs ``sleep SECONDS``."""
    spawn = [
        {"name": "Agent", "input": {"description": f"remote {i}", "prompt": f"job {i}",
                                    "subagent_type": "general-purpose", "isolation": "remote",
                                    "run_in_background": True}}
        for i in range(agents)
    ]  # fmt: skip
    script = {
        "turns": [{"tool_calls": spawn}, *["Waiting."] * 4],
        "subagents": {
            "general-purpose": [
                {"tool_calls": [{"name": "Bash", "input": {"command": f"sleep {seconds}"}}]},
                "done",
            ]
        },
    }
    path = repo / "turns.yaml"  # in the project: it travels to the workers with the snapshot
    path.write_text(yaml.safe_dump(script))
    return path


def _start(tmp_path: Path, agents: int) -> tuple[subprocess.Popen[bytes], int, Path, Path]:
    """The session, started; its ``sleep`` value, its home and its stderr file."""
    repo = _repo(tmp_path)
    seconds = random.randint(100_000, 999_999)
    script = _script(repo, agents, seconds)
    home = tmp_path / "home"
    env = clean_env(TASKLOOM_HOME=str(home))
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_AUTH_MODE", None)
    settings = json.dumps({"remote": {"localCpus": agents}})
    err = tmp_path / "stderr.txt"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(
            scripted_argv(script, "--dangerously-skip-permissions", "--settings", settings),
            cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
    return proc, seconds, home, err


def _sleeps(seconds: int) -> list[Any]:
    return run_processes(lambda p: (p.info.get("cmdline") or [])[:2] == ["sleep", str(seconds)])


def _is_worker(proc: Any) -> bool:
    """A remote agent's worker: forked by its actor's zygote (``taskloom remote zygote``,
    its command line), it works in its agent's scratch checkout (the zygote does not)."""
    if "remote" not in (proc.info.get("cmdline") or [])[3:6]:
        return False
    try:
        cwd = proc.cwd()
    except Exception:  # gone meanwhile
        return False
    return Path(cwd).is_relative_to(tempfile.gettempdir()) and "taskloom-remote-" in cwd


def _wait_for(what: str, cond: Any, timeout: float) -> None:
    """Poll ``cond`` (bounded): another process's state has no event to wait on."""
    deadline = time.monotonic() + timeout * TIME_FACTOR
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _ours_on_disk() -> list[str]:
    """Ray's directory and the scratch checkouts a session left in the temporary directory."""
    tmp = Path(tempfile.gettempdir())
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(("ray", "taskloom-remote")))


def _statuses(home: Path) -> dict[str, str]:
    store = Store(db_path(home), reserve_bytes=0)
    try:
        return {t["id"]: t["status"] for t in store.list_tasks() if t["type"] == "remote_agent"}
    finally:
        store.close()


def test_a_sigkilled_session_leaves_no_remote_command_worker_ray_process_or_file(
    tmp_path: Path,
) -> None:
    proc, seconds, home, err = _start(tmp_path, agents=3)
    try:
        _wait_for("three remote commands", lambda: len(_sleeps(seconds)) == 3, 120)
        workers = run_processes(_is_worker)
        rays = run_processes(lambda p: "ray" in " ".join(p.info.get("cmdline") or []))
        assert len(workers) == 3 and rays, (workers, rays)
        on_disk = _ours_on_disk()
        assert sum(n.startswith("taskloom-remote-") for n in on_disk) == 3, on_disk
        assert any(n.startswith("ray") for n in on_disk), on_disk
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    killed = time.monotonic()
    # Nothing of it outlives it: not a command, a worker, a Ray process, a file.
    _wait_for("nothing of the session left", lambda: not run_processes(), 10)
    _wait_for("its files removed", lambda: not _ours_on_disk(), 2)
    gone_in = time.monotonic() - killed
    # Nobody has said they were killed yet: the next start does, nothing being left then.
    assert set(_statuses(home).values()) == {"running"}, _statuses(home)
    turns = tmp_path / "next.yaml"
    turns.write_text(yaml.safe_dump({"turns": ["Nothing to do."]}))
    after = subprocess.run(
        scripted_argv(turns), cwd=tmp_path / "repo", capture_output=True, timeout=60,
        env=clean_env(TASKLOOM_HOME=str(home)),
    )  # fmt: skip
    assert after.returncode == 0, after.stderr[-2000:]
    statuses = _statuses(home)
    assert len(statuses) == 3 and set(statuses.values()) == {"killed"}, statuses
    text = err.read_text(errors="replace")
    assert not [n for n in RAY_NOISE if n in text], text[-3000:]
    print(f"everything gone {gone_in:.1f} s after the SIGKILL")


def test_a_sigterm_leaves_nothing_and_ray_says_nothing_on_stderr(tmp_path: Path) -> None:
    proc, seconds, home, err = _start(tmp_path, agents=1)
    try:
        _wait_for("the remote command", lambda: len(_sleeps(seconds)) == 1, 120)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 128 + signal.SIGTERM
    assert not run_processes() and not _ours_on_disk()
    text = err.read_text(errors="replace")
    assert not [n for n in RAY_NOISE if n in text], text[-3000:]
    # What Ray said is in the session's log instead.
    (log,) = home.glob("sessions/*/ray.log")
    assert "SIGTERM handler is not set" in log.read_text(), log.read_text()[-2000:]
