"""The Ray actor a remote agent runs in, on a worker of the cluster.

An :class:`AgentHost` actor runs agents by task id: one of a session's pool of warm actors
runs many, each apart (a detached agent gets a named actor of its own). Its ``start`` sets an
agent's work going: it checks out the parent's snapshot (a git bundle) into a directory of the
agent's own, starts ``taskloom remote worker`` there (forked from the actor's fork server
when it is warm, :mod:`taskloom.remote.zygote`) — the same engine and tools as a local agent,
in a process (and process group) of its own, its shells in theirs — and keeps, in order, what
that process prints (one JSON object a line: progress, then the result or an error). Once it
is done, what the agent changed is committed on top of the snapshot and kept as a bundle, with
its diffstat.

:meth:`AgentHost.follow` is a streaming generator of those events from a given one on:
the parent follows it while it runs. The work does not depend on the stream: a parent that lets
go (its exit policy ``detach``: the actor is then named and detached) or dies leaves the agent
working, and a later session follows on from the last event it had. An actor whose events
nobody can follow again (not detached) keeps only those not yet sent.

:meth:`AgentHost.stop` (TaskStop) ends the worker process (SIGTERM: it stops its shells;
SIGKILL after a bound) and the event stream then ends normally; whatever is left of the process
groups the worker recorded is swept before the directory is removed. A worker whose actor dies
(killed, its node lost) sees it through a pidfd and stops as well.

Ray is imported here, and this module only on the remote path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import ray

from taskloom.process.spawn import TASK_ENV
from taskloom.process.sweep import NESTED_HOME
from taskloom.remote.checkout import Bases, changes, checkout
from taskloom.remote.zygote import BASES_ENV as _BASES_ENV
from taskloom.remote.zygote import Zygote, ZygoteError

#: How long the worker has to stop once asked (SIGTERM), before SIGKILL (its owner's TaskStop
#: waits for all of it, and is told within a few seconds).
STOP_WAIT_S = 2.0
#: How much of the worker's error output is kept, to say why it failed.
_STDERR_LINES = 40
#: Longest line the worker may print (a progress event with long text in it).
_LINE_LIMIT = 8 * 1024 * 1024


class _RemoteAgent:
    """Runs one remote agent (see the module docstring); a plain object its host holds."""

    def __init__(
        self,
        keep_events: bool = False,
        zygote: Zygote | None = None,
        bases: Bases | None = None,
    ) -> None:
        """Nothing runs until :meth:`start`.

        ``keep_events``: keep every event (a detached actor: a later session follows it again
        from where its parent stopped), not only those not sent yet. ``zygote``: fork its
        worker from there (a pooled actor's) rather than start one. ``bases``: where the
        snapshots are unpacked (its host's, shared with the other agents it runs; None: in
        its own scratch directory, removed with it).
        """
        self._keep = keep_events
        self._zygote = zygote
        self._bases = bases
        self._proc: Any = None  # an asyncio process, or a forked one (same surface)
        self._home: Path | None = None
        self._stopping = False
        self._work: asyncio.Task[None] | None = None
        #: The events so far; ``_first`` is the index of ``_events[0]`` (older ones sent).
        self._events: list[dict[str, Any]] = []
        self._first = 0
        self._done = False
        self._grown: asyncio.Event | None = None

    async def start(
        self, spec: dict[str, Any], bundle: Any, env: dict[str, str] | None = None
    ) -> bool:
        """Set the agent ``spec`` describes going on the snapshot ``bundle``; False if it was.

        ``bundle``: its bytes, or a list holding the Ray object of them (fetched only if this
        actor has not unpacked that snapshot yet). ``env``: the model's endpoint and
        credentials, for the agent's process only (never written to a file here).
        """
        if self._work is not None:
            return False
        self._work = asyncio.ensure_future(self._run(spec, bundle, env))
        return True

    async def follow(self, after: int = 0) -> AsyncIterator[dict[str, Any]]:
        """Its events from number ``after`` on, in order, as they come, until its end.

        The follower has those before ``after``: they are forgotten.
        """
        self._forget(after)
        at = max(after, self._first)
        while True:
            grown = self._grown = self._grown or asyncio.Event()
            while at < self._first + len(self._events):
                yield self._events[at - self._first]
                at += 1
                if not self._keep:  # nobody can ask for it again
                    drop = at - self._first
                    del self._events[:drop]
                    self._first += drop
            if self._done:
                return
            await grown.wait()

    async def ack(self, count: int) -> None:
        """The follower has stored the first ``count`` events: they are not kept."""
        self._forget(count)

    def _forget(self, count: int) -> None:
        drop = min(count - self._first, len(self._events))
        if drop > 0:
            del self._events[:drop]
            self._first += drop

    def _emit(self, event: dict[str, Any]) -> None:
        self._events.append(event)
        grown, self._grown = self._grown, None
        if grown is not None:
            grown.set()

    async def _run(self, spec: dict[str, Any], bundle: Any, env: dict[str, str] | None) -> None:
        try:
            await self._work_on(spec, bundle, env)
        except Exception as exc:  # its copy could not be made, its process not started
            self._emit({"type": "error", "error": f"on {socket.gethostname()}: {exc}"})
        finally:
            self._done = True
            self._emit({"type": "end"})

    async def _work_on(self, spec: dict[str, Any], bundle: Any, env: dict[str, str] | None) -> None:
        if spec.get("scratch"):  # chosen, and recorded, by its parent (a local Ray)
            scratch = Path(str(spec["scratch"]))
            scratch.mkdir(mode=0o700)
        else:
            scratch = Path(tempfile.mkdtemp(prefix="taskloom-remote-"))
        home = self._home = scratch / NESTED_HOME
        ref = str(spec["snapshot_ref"])
        bases = self._bases or Bases(str(scratch / "base"))
        held = False
        try:
            base = await bases.hold(ref, lambda: _bundle_bytes(bundle))
            held = True
            work, branch = await checkout(scratch, base, spec)
            spec_file = scratch / "spec.json"
            # Its scratch is the worker's to remove if this actor dies first (killed).
            spec_file.write_text(
                json.dumps({**spec, "parent_pid": os.getpid(), "scratch": str(scratch)})
            )
            env = {
                **os.environ,
                **(env or {}),
                "TASKLOOM_HOME": str(home),
                "PYTHONUNBUFFERED": "1",
                # The tag its parent recorded (a local Ray's): the orphan sweep finds it by it.
                **({TASK_ENV: str(spec["tag"])} if spec.get("tag") else {}),
            }
            if self._stopping:  # stopped while its copy was made: nothing is started
                self._emit({"type": "killed"})
                return
            await self._follow_worker(await self._launch(spec_file, work, env))
            found = await changes(work, branch)
            if found is not None:
                self._emit({"type": "changes", "branch": branch, **found})
        finally:
            await _sweep(home)
            shutil.rmtree(scratch, ignore_errors=True)
            if held:
                await bases.release(ref)

    async def _launch(self, spec_file: Path, work: Path, env: dict[str, str]) -> Any:
        """Its worker process: forked warm from the zygote, else started."""
        proc: Any = None
        if self._zygote is not None and self._zygote.alive:  # else it died: started cold
            # It may die (or fail to fork) during the launch: no worker of it ever runs
            # then (see Zygote.launch), and this one is started cold.
            with contextlib.suppress(ZygoteError):
                proc = self._proc = await self._zygote.launch(spec_file, work, env)
        if proc is None:
            proc = self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-P", "-m", "taskloom", "remote", "worker",
                "--spec", str(spec_file),
                cwd=work, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True, limit=_LINE_LIMIT,
            )  # fmt: skip
        if self._stopping:  # stopped while it was being started: it stops at once
            await self._end(proc)
        return proc

    async def _follow_worker(self, proc: Any) -> None:
        """Its worker's events, as they come, then how it ended."""
        self._emit({"type": "started", "node": socket.gethostname(), "pid": proc.pid})
        assert proc.stdout is not None and proc.stderr is not None
        errors: deque[str] = deque(maxlen=_STDERR_LINES)
        drain = asyncio.ensure_future(_collect(proc.stderr, errors))
        async for raw in proc.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(raw)
                if isinstance(event, dict):
                    self._emit(event)
        code = await proc.wait()
        await drain
        if self._stopping:
            self._emit({"type": "killed"})
        elif code != 0:
            tail = "\n".join(errors).strip()
            self._emit({
                "type": "error",
                "error": f"its process on {socket.gethostname()} ended with exit code "
                f"{code}" + (f": {tail[-2000:]}" if tail else ""),
            })  # fmt: skip

    async def stop(self) -> bool:
        """End the worker process and all it started; whether one ran.

        SIGTERM first (it stops its shells itself); after a short bound, SIGKILL of its group
        and a sweep of the processes it recorded (each shell in a group of its own): when this
        returns, nothing of the agent runs on this worker.
        """
        self._stopping = True
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return proc is None  # not started yet: it will not be
        await self._end(proc)
        return True

    async def _end(self, proc: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_WAIT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        if self._home is not None:
            await _sweep(self._home)


async def _collect(stream: asyncio.StreamReader, into: deque[str]) -> None:
    async for raw in stream:
        into.append(raw.decode(errors="replace").rstrip())


async def _sweep(home: Path) -> None:
    """Kill what the worker recorded and left running (it was killed before it could)."""
    from taskloom.process.sweep import sweep_store
    from taskloom.settings import db_path

    if db_path(home).exists():
        await sweep_store(db_path(home), grace=0.5)


class _AgentHost:
    """An actor's remote agents, by key (their task ids).

    One for a detached actor; any number for a session's pooled one (see the module docstring).
    """

    def __init__(
        self, warm: bool = False, keep_events: bool = False, base_dir: str | None = None
    ) -> None:
        """``warm``: fork the agents' workers from a zygote (started by :meth:`warm`).

        ``keep_events``: see :class:`_RemoteAgent`. ``base_dir``: where the snapshots are
        unpacked (a local Ray's directory, removed with it; None: a temporary directory).
        """
        self._keep = keep_events
        self._zygote = Zygote() if warm else None
        #: Shared by its agents if warm (a pool's: many agents of one snapshot); else each
        #: agent's own, in its scratch directory (a detached actor is killed, with no last word).
        self._bases = Bases(base_dir) if warm else None
        self._agents: dict[str, _RemoteAgent] = {}
        #: Keys stopped before they started (a start that comes after is refused).
        self._stopped: set[str] = set()

    async def warm(self, tag: str | None = None) -> int:
        """Start its zygote (once), carrying ``tag`` (a local Ray's); this actor's pid."""
        if self._zygote is not None:
            env = {**os.environ, "PYTHONUNBUFFERED": "1", **({TASK_ENV: tag} if tag else {})}
            # The zygote ends with this actor, and takes the snapshots' bases with it.
            if self._bases is not None:
                env[_BASES_ENV] = str(self._bases.root)
            await self._zygote.start(env)
        return os.getpid()

    async def start(
        self, key: str, spec: dict[str, Any], bundle: Any, env: dict[str, str] | None = None
    ) -> bool:
        """Start agent ``key`` (see :meth:`_RemoteAgent.start`); False if it was, or stopped."""
        if key in self._agents or key in self._stopped:
            return False
        agent = self._agents[key] = _RemoteAgent(self._keep, self._zygote, self._bases)
        return await agent.start(spec, bundle, env)

    async def follow(self, key: str, after: int = 0) -> AsyncIterator[dict[str, Any]]:
        """Agent ``key``'s events from number ``after`` on (see :meth:`_RemoteAgent.follow`)."""
        agent = self._agents.get(key)
        if agent is None:
            yield {"type": "error", "error": f"no remote agent {key} on this actor"}
            yield {"type": "end"}
            return
        async for event in agent.follow(after):
            yield event

    async def ack(self, key: str, count: int) -> None:
        """The follower of agent ``key`` has stored its first ``count`` events."""
        agent = self._agents.get(key)
        if agent is not None:
            await agent.ack(count)

    async def stop(self, key: str) -> bool:
        """Stop agent ``key`` and all it started (see :meth:`_RemoteAgent.stop`)."""
        agent = self._agents.get(key)
        if agent is None:
            self._stopped.add(key)
            return True
        return await agent.stop()

    async def forget(self, key: str) -> None:
        """Its follower is done with agent ``key``: nothing of it is kept.

        Its work, if any is left, ends on its own (it was stopped).
        """
        self._agents.pop(key, None)
        self._stopped.discard(key)

    async def close(self) -> None:
        """Before it is killed (its agents have ended): its zygote ends, its bases go."""
        if self._zygote is not None:
            await self._zygote.close()
        if self._bases is not None:
            self._bases.remove_all()

    async def agents(self) -> list[str]:
        """The keys of the agents it holds (for tests and status)."""
        return list(self._agents)


async def _bundle_bytes(bundle: Any) -> bytes:
    """The snapshot's bytes: given, or fetched now from the Ray object in a list.

    (In a list, Ray does not fetch it for every call: only an actor that lacks it does.)
    """
    if isinstance(bundle, bytes):
        return bundle
    return bytes(await bundle[0])


#: The actor class (no CPU of its own: its agents' worker processes run them). One event loop
#: for all its calls: ``stop`` waits on a process its ``start`` made. As many calls at once as
#: a session has agents, and more (a ``follow`` a crashed parent left).
AgentHost: Any = ray.remote(num_cpus=0, max_concurrency=1000)(_AgentHost)  # type: ignore[call-overload]

__all__ = ["STOP_WAIT_S", "AgentHost"]
