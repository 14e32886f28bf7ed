"""One remote agent's run, driven from the parent: the task's handle.

:class:`RemoteRun` takes the project's snapshot, waits for its turn among the agents starting,
makes the actor and gives it its work, then follows the actor's events into the task's output
file, state and, at its end, the usual notification; what the agent changed comes back as
branch ``taskloom/remote-<id8>`` (:mod:`taskloom.remote.snapshot`). TaskStop and the owner's
end stop it (the actor's work, its processes, then the actor). A lost connection or a dead
node fails the task with the reason.

A detached one (exit policy ``detach``: its actor is named and detached) is let go of at the
session's end once its actor has its work; a run made for a resumed session follows that
actor on from the last event the earlier process stored.

On a local Ray (this machine), before its actor is made, the run records its task id as a tag
owning its scratch checkout (chosen here): its worker process carries the tag, and keeps the
store recording its commands in that checkout. Whatever ends the session, the orphan sweep
finds them by these (see :mod:`taskloom.process.sweep`); at its own end the run kills what is
left of them (verified) and removes the checkout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from taskloom.errors import StoreError, reason
from taskloom.events import Meter
from taskloom.models.pricing import pricer
from taskloom.process.sweep import reap_tags
from taskloom.remote.cluster import Cluster, ClusterError
from taskloom.remote.local import KILL_CHILDREN
from taskloom.remote.pool import ActorPool
from taskloom.remote.snapshot import Snapshot, SnapshotError, Snapshots, bring_back
from taskloom.remote.spec import RemoteSpec, carried_env
from taskloom.store import TagRow
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.narrow import as_remote_agent
from taskloom.tasks.output import DiskTaskOutput
from taskloom.tasks.remote import RemoteAgentTaskState, ended, progressed
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.usage import report_in

log = logging.getLogger(__name__)

#: Longest wait for the actor to stop its work once asked (it takes a few seconds at most:
#: see taskloom.remote.actor), and then for its stream to end, before it is killed.
STOP_WAIT_S = 5.0
#: Longest an agent holds its place among those starting (see RemoteRun) before its
#: process's session is ready.
READY_WAIT_S = 30.0
#: A detached actor is told every this many events that they are stored here (it forgets them).
_ACK_EVERY = 64
#: The Ray namespace of detached remote agents' actors.
NAMESPACE = "taskloom"
#: Seconds between SIGTERM and SIGKILL for what is left of a remote agent at its end.
_REAP_GRACE_S = 2.0


class RemoteRun:
    """One remote agent's run, and its task's handle (see the module docstring)."""

    def __init__(
        self,
        runtime: TaskRuntime,
        task_id: str,
        spec: RemoteSpec,
        cwd: Path,
        local: bool,
        snapshots: Snapshots | None = None,
        starting: asyncio.Semaphore | None = None,
        *,
        actor_name: str | None = None,
        resumed: RemoteAgentTaskState | None = None,
        cluster: Cluster | None = None,
        meter: Meter | None = None,
        prices: Mapping[str, Any] | None = None,
        pool: ActorPool | None = None,
    ) -> None:
        """Drive the remote agent of task ``task_id`` (registered by the caller).

        ``starting``: held from its actor's creation until its process is ready (its session
        started), so that many agents spawned at once start a few at a time, each quickly,
        rather than all slowly (on a local Ray, their processes share this machine's CPUs).
        ``actor_name``: its actor is detached under that name (exit policy ``detach``).
        ``resumed``: the state an earlier process of the session left: its actor is followed
        on from there, on ``cluster``, instead of being started. ``meter``: its budgets' meter
        (opened for it: what it spends reaches them through the session's ledger, priced by
        ``prices``, the setting ``modelPrices``). ``pool``: the session's warm actors, where an
        agent that is not detached runs (None: an actor of its own).
        """
        self.snapshots = snapshots or Snapshots()
        self.starting = starting or asyncio.Semaphore(1)
        self.runtime = runtime
        self.task_id = task_id
        self.spec = spec
        self.cwd = cwd
        self.local = local
        self.actor_name = actor_name
        self.resumed = resumed
        self.cluster = cluster
        self.meter = meter
        self.pool = pool if actor_name is None and resumed is None else None
        #: Prices its worker's reports (they carry tokens) for the session's ledger.
        self._price = pricer(prices if isinstance(prices, Mapping) else None)
        # What it spent before was counted by the process it ran for: only what its worker
        # reports from now on is new.
        before = kind_of(resumed).usage_from_elsewhere(resumed) if resumed is not None else None
        if before is not None:
            runtime.usage.baseline(before.agent_id, before.by_model, before.tool_uses)
        self.branch = f"taskloom/remote-{task_id[1:9]}"
        self.driver: asyncio.Task[None] | None = None
        self._actor: Any = None
        #: Its actor is the pool's (released at its end, not killed); or died under it.
        self._pooled = False
        self._actor_lost = False
        self._stopping = False
        self._ended_cleanly = False
        self._result: str | None = None
        self._error: str | None = None
        self._snapshot: Snapshot | None = None
        self._output: DiskTaskOutput | None = None
        self._seen = 0
        if resumed is not None:
            # What the earlier process had of it: the events it stored, and an answer or an
            # error that came before its end (the rest of its events follow).
            self._seen, self._result, self._error = resumed.seen, resumed.result, resumed.error
            if resumed.repo and resumed.snapshot_commit and resumed.snapshot_ref:
                self._snapshot = Snapshot(
                    Path(resumed.repo), resumed.snapshot_commit, resumed.snapshot_ref, b""
                )
                self.snapshots.adopt(self._snapshot)  # now: agents sharing it hold it at once
        #: Set once its actor has its work (from then on, letting go of it loses nothing).
        self._launched = asyncio.Event()
        self._detaching = asyncio.Event()
        self._detached = False
        #: Its tag record on a local Ray (its worker, its scratch checkout), until reaped.
        self._records: list[TagRow] = []

    def start(self) -> asyncio.Task[None]:
        """Start it in the background; its driver."""
        self.driver = asyncio.get_running_loop().create_task(
            self._drive(), name=f"remote agent {self.task_id}"
        )
        return self.driver

    async def kill(self) -> None:
        """TaskStop: stop the actor's work (its processes end), then the actor."""
        self._stopping = True
        driver = self.driver
        if self.resumed is not None and driver is not None and not driver.done():
            # Taken up again but not reached yet: its actor is out there, and is stopped.
            launched = asyncio.ensure_future(self._launched.wait())
            await asyncio.wait(
                [launched, driver], timeout=STOP_WAIT_S, return_when=asyncio.FIRST_COMPLETED
            )
            launched.cancel()
            if self._actor is None:
                # Its cluster could not be reached: it cannot be said to be stopped.
                error = (
                    f"it could not be stopped: its actor {self.actor_name} may still run on"
                    f" the cluster {self.resumed.cluster} (it was not reached)"
                )
                if driver is not None and not driver.done():
                    driver.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await driver
                self.runtime.update(self.task_id, lambda s: ended(s, error=error))
                return
        actor = self._actor
        if actor is not None:
            with contextlib.suppress(Exception):  # it may be dead already
                await asyncio.wait_for(actor.stop.remote(self.task_id), STOP_WAIT_S)
        if driver is not None and not driver.done():
            if actor is not None:  # its stream ends once its work has stopped
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(driver), STOP_WAIT_S)
            if not driver.done():
                # Not started yet (or not stopping): cancelled where it is; an actor it made
                # meanwhile is killed by its cleanup, and the worker in it sees that.
                driver.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await driver
        self.runtime.update(self.task_id, lambda s: ended(s, killed=True))

    async def detach(self) -> None:
        """Its owner's end, with exit policy ``detach``.

        A detached actor is let go of once it has its work (it goes on; a resumed session
        follows it); any other is stopped.
        """
        if self.actor_name is None or not self.runtime.closing:
            # Only the session's end lets go of it: an owner (a subagent) that ends before
            # leaves nobody here to follow it.
            await self.kill()
            return
        driver = self.driver
        if driver is None or driver.done():
            return
        if self._stopping:  # a TaskStop is under way: it is ended as TaskStop ends it
            await asyncio.wait([driver], timeout=STOP_WAIT_S)
            return
        self._detaching.set()
        launched = asyncio.ensure_future(self._launched.wait())
        try:
            # Its actor gets its work first: as long as a worker may take to get ready (a
            # busy cluster's can take seconds to start), not the session's stopping budget.
            await asyncio.wait(
                [launched, driver], timeout=READY_WAIT_S, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            launched.cancel()
            if not driver.done():
                if self._launched.is_set():
                    self._let_go()
                # Not launched in time: stopped where it is (an actor it made meanwhile is
                # killed by its cleanup).
                driver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await driver

    def _let_go(self) -> None:
        """It goes on without this process: told to the session when it is resumed."""
        self._detached = True
        session = self.runtime.session_id
        actor, seen = self._actor, self._seen
        if actor is not None:
            with contextlib.suppress(Exception):
                actor.ack.remote(self.task_id, seen)  # what is stored here is not kept there
        self.runtime.update(
            self.task_id,
            # Its owner (a subagent, or a caller waiting in the foreground) is gone by then.
            lambda s: s.replace(owner=session, is_backgrounded=True, seen=seen),
        )

    async def _drive(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as launching:
                if self.resumed is None:
                    self._output = self.runtime.create_output(self.task_id)
                    await self._launch(launching)
                    if self._actor is None:
                        return  # stopped before it started
                else:
                    if not await self._reach():
                        return
                    self._output = DiskTaskOutput.reopen(Path(self.resumed.output_file))
                    self._find_actor()
                self._launched.set()
                follow = self._actor.follow.options(num_returns="streaming")
                stream = follow.remote(self.task_id, self._seen)
                async for ref in stream:
                    event = await ref
                    if event.get("type") == "end":
                        break
                    if event.get("type") != "started":
                        await launching.aclose()  # it has started: the next may go
                    self._seen += 1
                    await self._on(event)
                    if self.actor_name is not None and self._seen % _ACK_EVERY == 0:
                        self._actor.ack.remote(self.task_id, self._seen)  # its journal shrinks
                self._ended_cleanly = True
            self._finish()
        except asyncio.CancelledError:
            if not self._detached:
                self.runtime.update(self.task_id, lambda s: ended(s, killed=True))
            raise
        except (SnapshotError, ClusterError) as exc:
            error = str(exc)
            self.runtime.update(self.task_id, lambda s: ended(s, error=error))
        except Exception as exc:  # Ray's: the actor died, its node was lost, the connection
            # Only a dead actor is dropped from the pool: killing a shared one for another
            # error (this agent's own) would end every agent it runs.
            self._actor_lost = _actor_died(exc)
            if self._stopping:
                self.runtime.update(self.task_id, lambda s: ended(s, killed=True))
            else:
                error = f"the remote agent was lost: {_why(exc)}"
                self.runtime.update(self.task_id, lambda s: ended(s, error=error))
        finally:
            await self._cleanup()

    async def _launch(self, launching: contextlib.AsyncExitStack) -> None:
        """Take the snapshot, wait for its turn, make its actor and give it its work."""
        self._snapshot = snapshot = await self.snapshots.take(self.cwd, self.task_id)
        if self.actor_name is not None:  # a later process brings its changes back
            self.runtime.update(
                self.task_id,
                lambda s: s.replace(
                    repo=str(snapshot.root),
                    snapshot_commit=snapshot.commit,
                    snapshot_ref=snapshot.ref,
                ),
            )

        import ray

        carried = carried_env(os.environ)
        spec = {
            **self.spec.__dict__,
            "branch": self.branch,
            "snapshot_ref": snapshot.ref,
            "snapshot_commit": snapshot.commit,
        }
        await self._wait_turn(launching)
        if self._stopping:
            return
        if self.local:
            spec.update(self._record())
        # Put once for all its agents; in a list, so that an actor fetches it only if it has
        # not unpacked it yet (a warm actor runs many agents of one snapshot).
        bundle = [self.snapshots.payload(snapshot, ray.put)]
        if self.pool is not None:
            actor = await self.pool.acquire()
            self._pooled = True
        else:
            from taskloom.remote.actor import AgentHost

            options = actor_options(self.local, carried)
            if self.actor_name is not None:
                options.update(name=self.actor_name, namespace=NAMESPACE, lifetime="detached")
            actor = AgentHost.options(**options).remote(keep_events=self.actor_name is not None)
        started = actor.start.remote(self.task_id, spec, bundle, carried)
        self._actor = actor  # from now on a stop reaches it (after its start: in order)
        await started

    def _let_go_of(self, actor: Any) -> None:
        """Its actor at its end: the pool's is released (or dropped if it died), its own killed."""
        if self._pooled and self.pool is not None:
            with contextlib.suppress(Exception):
                actor.forget.remote(self.task_id)
            self.pool.release(actor)
            if self._actor_lost:
                self.pool.lost(actor)
            return
        import ray

        with contextlib.suppress(Exception):
            ray.kill(actor)

    def _record(self) -> dict[str, str]:
        """Record its tag and scratch checkout (a local Ray) before its actor is made.

        The spec's ``tag`` (its worker process's) and ``scratch`` (its checkout's path).
        """
        scratch = Path(tempfile.gettempdir()) / f"taskloom-remote-{secrets.token_hex(6)}"
        recorder = self.runtime.recorder
        if recorder is not None:
            try:
                self._records = recorder.record_tags([self.task_id], path=str(scratch))
            except StoreError as exc:
                log.warning("remote agent %s runs unrecorded: %s", self.task_id, exc)
        return {"tag": self.task_id, "scratch": str(scratch)}

    async def _reap(self) -> None:
        """Its end: what is left of its worker killed (verified), its checkout removed."""
        rows, self._records = self._records, []
        if rows and not await reap_tags(self.runtime.store, rows, grace=_REAP_GRACE_S):
            log.warning("what remote agent %s left is left for the orphan sweep", self.task_id)

    async def _wait_turn(self, launching: contextlib.AsyncExitStack) -> None:
        """Wait for a place among the agents starting.

        Not when its session is ending and it is to be let go: it must have its work first.
        """
        turn = asyncio.ensure_future(self.starting.acquire())
        hurry = asyncio.ensure_future(self._detaching.wait())
        try:
            await asyncio.wait([turn, hurry], return_when=asyncio.FIRST_COMPLETED)
        finally:
            hurry.cancel()
            if not turn.done():
                turn.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await turn
        if not turn.done() or turn.cancelled():
            return
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.starting.release()

        launching.callback(release)
        # A worker that never gets ready (stuck before its session starts) does not hold
        # up the agents after it for ever.
        asyncio.get_running_loop().call_later(READY_WAIT_S, release)

    async def _reach(self) -> bool:
        """A resumed run: reach the cluster; if it cannot be, let go (warned) and say so."""
        assert self.cluster is not None
        try:
            connected = await self.cluster.connect()
        except ClusterError as exc:
            log.warning(
                "remote agent %s is not followed (resume again once its cluster answers): %s",
                self.task_id,
                exc,
            )
            self._detached = True
            return False
        self.local = connected.started_locally
        return True

    def _find_actor(self) -> None:
        """The detached actor an earlier process of the session let go of."""
        import ray

        resumed = self.resumed
        assert resumed is not None
        try:
            self._actor = ray.get_actor(str(resumed.actor), namespace=NAMESPACE)
        except ValueError:
            raise ClusterError(
                f"its actor {resumed.actor} is no longer on the cluster {resumed.cluster}"
                " (the cluster was restarted, or the actor killed): what it did after this"
                " session let go of it is lost"
            ) from None

    async def _on(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "started":
            self._note([f"running on {event.get('node')}"], {})
        elif kind == "progress":
            lines = [str(line) for line in event.get("lines") or []]
            if lines and self._output is not None:
                self._output.append("\n".join(lines) + "\n")
            totals = {
                k: int(event[k])
                for k in ("total_tokens", "input_tokens", "output_tokens", "tool_uses")
                if isinstance(event.get(k), int)
            }
            activities = [line.removeprefix("→ ") for line in lines if line.startswith("→ ")]
            by_model = report_in(event)
            self._update(lambda s: progressed(s, activities, totals, by_model))
            self._count(by_model, event)
        elif kind == "result":
            self._result = result = str(event.get("content") or "")
            totals = {
                k: int(event[k])
                for k in ("total_tokens", "tool_uses")
                if isinstance(event.get(k), int)
            }
            by_model = report_in(event)
            self._count(by_model, event)
            # Its final usage (progress lags one message), and its answer kept: a session
            # that lets go of it before its end has it on resume.
            self._update(lambda s: progressed(s, [], totals, by_model).replace(result=result))
        elif kind == "error":
            self._error = error = str(event.get("error") or "it failed, saying nothing")
            self._update(lambda s: s.replace(error=error))
        elif kind == "changes" and self._snapshot is not None:
            await self._changes(event)
        else:
            self._update(lambda s: s)

    def _count(self, by_model: dict[str, dict[str, int]] | None, event: dict[str, Any]) -> None:
        """Charge what its worker spent since its last event to the ledger (its budgets too)."""
        if by_model is None:
            return
        calls = event.get("tool_uses")
        self.runtime.usage.report(
            self.task_id, by_model, calls if isinstance(calls, int) else None, self._price
        )

    def _update(self, fn: Callable[[RemoteAgentTaskState], RemoteAgentTaskState]) -> None:
        """Apply ``fn`` to its state; a detached one's also records the events it has."""
        if self.actor_name is None:
            self.runtime.update(self.task_id, fn)
            return
        seen = self._seen
        self.runtime.update(self.task_id, lambda s: fn(s).replace(seen=seen))

    def _note(self, activities: list[str], totals: dict[str, int]) -> None:
        self._update(lambda s: progressed(s, activities, totals))

    async def _changes(self, event: dict[str, Any]) -> None:
        assert self._snapshot is not None
        bundle = event.get("bundle")
        if not isinstance(bundle, bytes):
            self._error = self._error or str(event.get("error") or "its changes were lost")
            return
        try:
            await bring_back(self._snapshot, bundle, self.branch)
        except SnapshotError as exc:
            self._error = self._error or f"its changes could not be brought back: {exc}"
            return
        stat = str(event.get("diffstat") or "")
        branch = self.branch
        self._update(lambda s: s.replace(branch=branch, diffstat=stat))

    def _finish(self) -> None:
        state = as_remote_agent(self.runtime.get(self.task_id))
        branch = state.branch if state is not None else None
        if self._stopping:
            self.runtime.update(self.task_id, lambda s: ended(s, killed=True))
            return
        if self._error is not None or self._result is None:
            error = self._error or "it ended without an answer"
            if branch:
                error += f" (what it changed is on branch {branch})"
            self.runtime.update(self.task_id, lambda s: ended(s, error=error))
            return
        result = self._result
        if branch and state is not None:
            result += (
                f"\n\nIts changes are on branch {branch} (your working tree is untouched; the"
                f" branch starts from a snapshot commit holding your uncommitted changes of"
                f" the time):\n{state.diffstat}"
            )
        self.runtime.update(self.task_id, lambda s: ended(s, result=result))

    async def _cleanup(self) -> None:
        actor, self._actor = self._actor, None
        if self._detached:  # it goes on: a resumed session follows it, and brings it back
            if self._snapshot is not None:
                await self.snapshots.release(self._snapshot, keep_ref=True)
            if self._output is not None:
                self._output.close()
            return
        if actor is not None:
            if not self._ended_cleanly:
                # Its stream broke off (or this run was cancelled): its work is stopped first,
                # or killing the actor would leave its process's commands running.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(actor.stop.remote(self.task_id), STOP_WAIT_S)
            self._let_go_of(actor)
        await self._reap()
        if self._snapshot is not None:
            await self.snapshots.release(self._snapshot)
        if self._output is not None:
            self._output.close()


def actor_options(local: bool, carried: dict[str, str]) -> dict[str, Any]:
    """Ray's options for a remote agents' actor, on a local Ray or a cluster."""
    if local:
        # A local Ray's idle workers are this process's own (same environment, same
        # packages): taken as they are, in a fraction of a second, where a runtime environment
        # of its own starts a new one. Ray does not SIGKILL a worker's children as it exits
        # (the local Ray is told so when it starts): the worker stops its commands itself.
        return {}
    # A cluster's workers: the credentials in the actor's runtime environment (this taskloom
    # is the session's: see Cluster), and Ray told not to SIGKILL a worker's children.
    return {"runtime_env": {"env_vars": {**carried, f"RAY_{KILL_CHILDREN}": "0"}}}


def _actor_died(exc: BaseException) -> bool:
    """Whether ``exc`` says the actor is gone (dead, unreachable, its node lost)."""
    import ray.exceptions

    return isinstance(exc, ray.exceptions.RayActorError | ray.exceptions.RaySystemError)


def _why(exc: BaseException) -> str:
    # Ray's errors carry the actor's traceback on the lines after the first.
    lines = reason(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


__all__ = ["NAMESPACE", "READY_WAIT_S", "STOP_WAIT_S", "RemoteRun", "actor_options"]
