"""The Ray actor a remote agent runs in, on a worker of the cluster.

One actor per agent. :meth:`RemoteAgentActor.start` sets its work going: it clones the
parent's snapshot (a git bundle) into a directory of its own, starts ``taskloom remote worker``
there — the same engine and tools as a local agent, in a process (and process group) of its
own, its shells in theirs — and keeps, in order, what that process prints (one JSON object a
line: progress, then the result or an error). Once it is done, what the agent changed is
committed on top of the snapshot and kept as a bundle, with its diffstat.

:meth:`RemoteAgentActor.follow` is a streaming generator of those events from a given one on:
the parent follows it while it runs. The work does not depend on the stream: a parent that lets
go (its exit policy ``detach``: the actor is then named and detached) or dies leaves the agent
working, and a later session follows on from the last event it had. An actor whose events
nobody can follow again (not detached) keeps only those not yet sent.

:meth:`RemoteAgentActor.stop` (TaskStop) ends the worker process (SIGTERM: it stops its shells;
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
from taskloom.remote.snapshot import SnapshotError, git

#: How long the worker has to stop once asked (SIGTERM), before SIGKILL (its owner's TaskStop
#: waits for all of it, and is told within a few seconds).
STOP_WAIT_S = 2.0
#: How much of the worker's error output is kept, to say why it failed.
_STDERR_LINES = 40
#: Longest line the worker may print (a progress event with long text in it).
_LINE_LIMIT = 8 * 1024 * 1024


class _RemoteAgent:
    """Runs one remote agent (see the module docstring)."""

    def __init__(self, keep_events: bool = False) -> None:
        """Nothing runs until :meth:`start`.

        ``keep_events``: keep every event (a detached actor: a later session follows it again
        from where its parent stopped), not only those not sent yet.
        """
        self._keep = keep_events
        self._proc: asyncio.subprocess.Process | None = None
        self._home: Path | None = None
        self._stopping = False
        self._work: asyncio.Task[None] | None = None
        #: The events so far; ``_first`` is the index of ``_events[0]`` (older ones sent).
        self._events: list[dict[str, Any]] = []
        self._first = 0
        self._done = False
        self._grown: asyncio.Event | None = None

    async def start(
        self, spec: dict[str, Any], bundle: bytes, env: dict[str, str] | None = None
    ) -> bool:
        """Set the agent ``spec`` describes going on the snapshot ``bundle``; False if it was.

        ``env``: the model's endpoint and credentials, for the agent's process only (never
        written to a file here).
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

    @ray.method(concurrency_group="control")
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

    async def _run(self, spec: dict[str, Any], bundle: bytes, env: dict[str, str] | None) -> None:
        try:
            await self._work_on(spec, bundle, env)
        except Exception as exc:  # its copy could not be made, its process not started
            self._emit({"type": "error", "error": f"on {socket.gethostname()}: {exc}"})
        finally:
            self._done = True
            self._emit({"type": "end"})

    async def _work_on(
        self, spec: dict[str, Any], bundle: bytes, env: dict[str, str] | None
    ) -> None:
        if spec.get("scratch"):  # chosen, and recorded, by its parent (a local Ray)
            scratch = Path(str(spec["scratch"]))
            scratch.mkdir(mode=0o700)
        else:
            scratch = Path(tempfile.mkdtemp(prefix="taskloom-remote-"))
        home = self._home = scratch / NESTED_HOME
        try:
            work, branch = await _checkout(scratch, bundle, spec)
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
            proc = self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-P", "-m", "taskloom", "remote", "worker",
                "--spec", str(spec_file),
                cwd=work, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True, limit=_LINE_LIMIT,
            )  # fmt: skip
            if self._stopping:  # stopped while it was being started: it stops at once
                await self._end(proc)
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
            changes = await _changes(work, branch)
            if changes is not None:
                self._emit({"type": "changes", "branch": branch, **changes})
        finally:
            await _sweep(home)
            shutil.rmtree(scratch, ignore_errors=True)

    @ray.method(concurrency_group="control")
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

    async def _end(self, proc: asyncio.subprocess.Process) -> None:
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


async def _checkout(scratch: Path, bundle: bytes, spec: dict[str, Any]) -> tuple[Path, str]:
    """The snapshot checked out on the agent's branch, in ``scratch/work``."""
    work = scratch / "work"
    work.mkdir()
    path = scratch / "snapshot.bundle"
    path.write_bytes(bundle)
    branch = str(spec["branch"])
    await git(work, "init", "-q")
    await git(work, "fetch", "-q", str(path), f"{spec['snapshot_ref']}:refs/heads/{branch}")
    await git(work, "checkout", "-q", branch)
    await git(work, "tag", "taskloom-base")
    path.unlink()
    return work, branch


async def _changes(work: Path, branch: str) -> dict[str, Any] | None:
    """Commit what the agent changed; its bundle and diffstat, None if it changed nothing."""
    try:
        if (await git(work, "status", "--porcelain")).strip():
            await git(work, "add", "-A")
            await git(work, "commit", "-q", "--no-verify", "-m", "taskloom remote agent")
        stat = (await git(work, "diff", "--stat", "taskloom-base", "HEAD")).strip()
        if not stat:
            return None
        out = work.parent / "changes.bundle"
        await git(work, "bundle", "create", "-q", str(out), branch, "^taskloom-base")
        return {"bundle": out.read_bytes(), "diffstat": stat}
    except SnapshotError as exc:
        return {"error": f"its changes could not be bundled: {exc}"}


async def _collect(stream: asyncio.StreamReader, into: deque[str]) -> None:
    async for raw in stream:
        into.append(raw.decode(errors="replace").rstrip())


async def _sweep(home: Path) -> None:
    """Kill what the worker recorded and left running (it was killed before it could)."""
    from taskloom.process.sweep import sweep_store
    from taskloom.settings import db_path

    if db_path(home).exists():
        await sweep_store(db_path(home), grace=0.5)


#: The actor class (no CPU of its own: its worker process runs the agent; ``stop`` and
#: ``follow`` are served while it works, ``stop`` and ``ack`` apart from any number of
#: ``follow`` calls a crashed parent may have left).
RemoteAgentActor: Any = ray.remote(
    num_cpus=0, max_concurrency=8, concurrency_groups={"control": 2}
)(_RemoteAgent)  # type: ignore[call-overload]

__all__ = ["STOP_WAIT_S", "RemoteAgentActor"]
