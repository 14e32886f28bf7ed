"""The session's pool of warm actors (taskloom.remote.pool), on a real local Ray.

A local Ray of one CPU makes a pool of one actor: a second remote agent, spawned once the first
has ended, runs on the same actor (its worker forked by the same zygote) and starts clean: a
checkout of its own, without what the first one left. At the session's end nothing of the pool
is left: no actor, no zygote, no worker.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from coordinator_scenario import texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import TIME_FACTOR, clean_env, needs, run_processes
from team_scenario import events_of
from test_remote import FINAL, _calls, _repo, _user_text

pytestmark = [needs("ray"), pytest.mark.e2e, pytest.mark.slow]

#: Prints the pid of the Ray actor the command runs under (its first ``ray::`` ancestor).
ACTOR = (
    'p=$$; while [ "$p" -gt 1 ]; do'
    " case \"$(tr '\\0' ' ' </proc/$p/cmdline)\" in ray::*) echo ACTOR=$p; break;; esac;"
    " p=$(cut -d' ' -f4 /proc/$p/stat); done"
)
JOBS = {
    "a": f"{ACTOR}; echo left > left-by-a.txt; echo HOME=$TASKLOOM_HOME",
    "b": f"{ACTOR}; ls; echo HOME=$TASKLOOM_HOME",
}


class OneThenAnother:
    """The lead spawns agent a, waits for it, then agent b; each runs its job and answers with
    all its command printed."""

    def __init__(self) -> None:
        self.lead_requests: list[dict[str, Any]] = []
        self.answers: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            first = " ".join(texts(body["messages"][0]["content"]))
            job = next((j for j in JOBS if f"job {j}:" in first), None)
            if job is not None:
                if not _calls(body):
                    return Turn(tool_calls=(ToolCall("Bash", {"command": JOBS[job]}),))
                self.answers[job] = _user_text(body)
                return Turn(text=f"answer {job}")
            self.lead_requests.append(body)
            return self._lead(body)

    def _lead(self, body: dict[str, Any]) -> Turn:
        spawned = [c for c in _calls(body) if c["name"] == "Agent"]
        done = _user_text(body).count("<task-notification>")
        if len(spawned) < 2 and done == len(spawned):
            job = "ab"[len(spawned)]
            spawn = {"description": f"remote {job}", "prompt": f"job {job}: run it",
                     "subagent_type": "general-purpose", "isolation": "remote",
                     "run_in_background": True}  # fmt: skip
            return Turn(tool_calls=(ToolCall("Agent", spawn),))
        if done >= 2:
            return Turn(text=FINAL)
        return Turn(text="Waiting.")


def test_a_second_agent_reuses_the_warm_actor_starts_clean_and_the_pool_ends_with_the_session(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    script = OneThenAnother()
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-pool-test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        env.pop("RAY_ADDRESS", None)
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", "-p", "Two remote agents, one after the other.",
             "--output-format", "stream-json", "--verbose", "--model", "claude-sonnet-4-5",
             "--dangerously-skip-permissions",
             "--settings", json.dumps({"remote": {"localCpus": 1}})],
            capture_output=True, text=True, timeout=180 * TIME_FACTOR, cwd=repo, env=env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert events_of(proc.stdout)[-1]["result"] == FINAL
    a, b = script.answers["a"], script.answers["b"]
    # One actor for both: the pool's only one, warm when b came.
    (actor_a,) = re.findall(r"ACTOR=(\d+)", a)
    (actor_b,) = re.findall(r"ACTOR=(\d+)", b)
    assert actor_a == actor_b, (a, b)
    # b started clean: its own checkout (the project, not what a left there) and session.
    assert "README.md" in b and "dirty.txt" in b and "left-by-a.txt" not in b, b
    (home_a,) = re.findall(r"HOME=(\S+)", a)
    (home_b,) = re.findall(r"HOME=(\S+)", b)
    assert home_a != home_b
    # a's change came back on a's branch only.
    seen = _user_text(script.lead_requests[-1])
    ids = re.findall(r"<task-id>(r[0-9a-z]{8})</task-id>", seen)
    assert len(set(ids)) == 2 and seen.count("<status>completed</status>") == 2, seen
    branches = {
        i: subprocess.run(
            ["git", "ls-tree", "--name-only", f"taskloom/remote-{i[1:9]}"],
            cwd=repo,
            capture_output=True,
            text=True,
        ).stdout.split()
        for i in ids
    }
    assert sorted("left-by-a.txt" in files for files in branches.values()) == [False, True]
    # The pool ended with the session: no actor, zygote or worker of it is left.
    left = run_processes(
        lambda p: any(
            w in " ".join(p.info.get("cmdline") or []) for w in ("_AgentHost", "remote zygote")
        )
    )
    assert left == [], [p.info.get("cmdline") for p in left]
    assert run_processes() == []


async def test_the_zygote_forks_each_worker_apart_reports_its_end_and_ends_with_its_actor(
    tmp_path: Path,
) -> None:
    """The fork server alone (no Ray): it holds no thread when it forks (a fork copies only the
    forking one), each worker it forks is a process of its own running the worker's code, its
    exit code comes back, and closing its socket (its actor's end) ends it."""
    import asyncio

    import psutil

    from helpers import wait_until
    from taskloom.remote.zygote import Zygote

    zygote = Zygote()
    await asyncio.wait_for(zygote.start(clean_env()), 60 * TIME_FACTOR)
    assert zygote.alive and zygote._proc is not None
    server = psutil.Process(zygote._proc.pid)
    assert server.num_threads() == 1
    ran = []
    for n in range(2):
        cwd = tmp_path / f"w{n}"
        cwd.mkdir()
        # No such spec: the worker's code fails at once, saying so, with exit code 1.
        forked = await zygote.launch(cwd / "missing.json", cwd, clean_env(MARK=str(n)))
        errors = (await asyncio.wait_for(forked.stderr.read(), 30 * TIME_FACTOR)).decode()
        assert await asyncio.wait_for(forked.wait(), 30 * TIME_FACTOR) == 1
        assert "missing.json" in errors, errors
        ran.append(forked.pid)
    assert len(set(ran)) == 2 and server.pid not in ran
    assert server.is_running() and server.num_threads() == 1  # it ran no worker's code itself
    await zygote.close()
    await wait_until(lambda: not server.is_running() or server.status() == "zombie", 10)
    assert not zygote.alive


async def test_a_worker_that_ends_at_once_is_never_waited_for_in_vain(tmp_path: Path) -> None:
    """Its pid, and anything after it, can come in one read before launch() goes on (it is
    held until launch() has registered it: its end cannot be missed)."""
    import asyncio
    import time

    from taskloom.remote.zygote import Zygote

    zygote = Zygote()
    await asyncio.wait_for(zygote.start(clean_env()), 60 * TIME_FACTOR)
    try:
        launching = asyncio.ensure_future(
            zygote.launch(tmp_path / "missing.json", tmp_path, clean_env())
        )
        await asyncio.sleep(0)  # launch() has sent its request and awaits its answer
        assert zygote._next == 1
        # Not a wait for an event: the loop is held on purpose while the worker starts,
        # fails and is reaped, so that its pid and its end wait together on the socket (the
        # race a loaded machine runs into by itself).
        time.sleep(1.0)
        forked = await asyncio.wait_for(launching, 30 * TIME_FACTOR)
        code = await asyncio.wait_for(forked.wait(), 30 * TIME_FACTOR)
        await forked.stderr.read()
    finally:
        await zygote.close()
    assert code == 1


async def test_no_agent_gets_an_actor_that_failed_to_warm_and_a_dead_one_is_replaced() -> None:
    """On a real local Ray: an actor killed while it warms is never handed out, even to an
    agent asking the moment its warm-up fails; a pool actor that died is made again."""
    import asyncio
    import time

    import ray
    from ray.exceptions import RayActorError

    from helpers import wait_until
    from taskloom.remote.cluster import Cluster
    from taskloom.remote.pool import ActorPool
    from taskloom.remote.run import actor_options

    cluster = Cluster({"remote": {"localCpus": 2}}, env={})
    connected = await cluster.connect()
    pool = ActorPool(2, options=actor_options(True, {}), tag=connected.tag)
    try:
        first = asyncio.ensure_future(pool.acquire())
        await wait_until(lambda: bool(pool.actors()), 10, "the first actor")
        (doomed,) = pool.actors()
        warming = pool._warm[doomed]
        ray.kill(doomed)  # while its zygote imports
        # Asked at the first turn of the loop after its warm-up failed (an agent whose turn
        # came then): stepping the loop, not waiting on the warm-up, is the point (bounded).
        deadline = time.monotonic() + 60 * TIME_FACTOR
        while not warming.done() and time.monotonic() < deadline:
            await asyncio.sleep(0)
        async with asyncio.timeout(120 * TIME_FACTOR):
            given = await pool.acquire()
        assert given is not doomed and doomed not in pool.actors()
        with pytest.raises(RayActorError):
            await first
        # The rest of the pool, once that one is warm; then one dies under its agents.
        await wait_until(lambda: len(pool.actors()) == 2, 10, "the pool made")
        (other,) = [a for a in pool.actors() if a is not given]
        await asyncio.wait_for(asyncio.shield(pool._warm[other]), 120 * TIME_FACTOR)
        pool.release(given)
        ray.kill(given)
        pool.lost(given)  # as an agent's run does when Ray says its actor died
        assert pool.actors() == [other]
        assert await pool.acquire() is other
        assert len(pool.actors()) == 2  # a new one in the dead one's place
        (new,) = [a for a in pool.actors() if a is not other]
        await asyncio.wait_for(asyncio.shield(pool._warm[new]), 120 * TIME_FACTOR)
        assert await new.agents.remote() == []
    finally:
        await pool.close()
        await cluster.close()


def test_each_actor_keeps_its_bases_apart_from_the_pools_other_actors(tmp_path: Path) -> None:
    """Actors of a pool share a local Ray's directory; one that ends removes its own bases,
    never those another actor's agents still borrow objects from."""
    from taskloom.remote.checkout import Bases

    shared = tmp_path / "bases"
    first, second = Bases(str(shared)), Bases(str(shared))
    assert first.root != second.root
    assert first.root.parent == second.root.parent == shared
    (second.root / "objects").mkdir()
    first.remove_all()
    assert not first.root.exists() and (second.root / "objects").is_dir()
