"""The parent's side of remote agents: a ``remote_agent`` task per agent, driven from here.

:meth:`RemoteAgents.spawn` reaches the cluster first (a cluster that is not there is the
Agent call's error, at once), registers the task (prefix ``r``, owned by the caller) and
starts its :class:`RemoteRun`: the project's snapshot, the actor, and the stream of its events
into the task's output file, state and, at its end, the usual notification. Its changes come
back as branch ``taskloom/remote-<id8>`` (:mod:`taskloom.remote.snapshot`). The run is the
task's handle: TaskStop and the owner's end stop it (the actor's work, its processes, then
the actor). A lost connection or a dead node fails the task with the reason.

With the setting ``remote.exitPolicy: "detach"`` (on a cluster of its own, not the local Ray
a session starts and stops), the actor is named and detached: the end of the session, or its
crash, lets go of the agent without stopping it, and a resumed session follows it on from the
last event it had (:meth:`RemoteAgents.take_up`), to the usual notification.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskloom.errors import ToolError
from taskloom.remote.cluster import Cluster, ClusterError, Connected
from taskloom.remote.snapshot import Snapshot, SnapshotError, Snapshots, bring_back
from taskloom.tasks.output import DiskTaskOutput
from taskloom.tasks.remote import RemoteAgentTaskState, ended, failed_to_start, progressed
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import TaskStatus, TaskType

log = logging.getLogger(__name__)

#: Longest wait for the actor to stop its work once asked (it takes a few seconds at most:
#: see taskloom.remote.actor), and then for its stream to end, before it is killed.
STOP_WAIT_S = 5.0
#: Longest an agent holds its place among those starting (see RemoteRun) before its
#: process's session is ready.
READY_WAIT_S = 30.0
#: Remote agents starting at once on a cluster, unless the setting ``remote.maxStarting``
#: says (on a local Ray: its CPUs).
_STARTING = 16
#: The environment a remote agent's process gets: the model's endpoint and credentials, a
#: proxy. In the actor's runtime environment only: never in a log or an output.
_CARRIED_PREFIXES = ("ANTHROPIC_", "OPENAI_", "TASKLOOM_")
_CARRIED = {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"}
#: The parent's own, never carried.
_NOT_CARRIED = {"TASKLOOM_HOME", "TASKLOOM_TASK_ID"}
#: The Ray namespace of detached remote agents' actors.
NAMESPACE = "taskloom"
_EXIT_POLICIES = ("cancel", "detach")


@dataclass(frozen=True)
class RemoteSpec:
    """What a remote agent is asked to do.

    Attributes:
        description: The Agent call's description.
        prompt: Its task.
        agent_type: Its agent type.
        agents: ``--agents`` JSON defining that type where the worker cannot find it.
        model: Its model, by name (None: the worker's settings').
        mode: Its permission mode.
        skip_permissions: Whether every call is allowed (the parent's
            ``--dangerously-skip-permissions``).
        settings: The parent's settings, as JSON.
        name: The name it was spawned with.
    """

    description: str
    prompt: str
    agent_type: str
    agents: str | None = None
    model: str | None = None
    mode: str | None = None
    skip_permissions: bool = False
    settings: str = "{}"
    name: str | None = None


def carried_env(env: Mapping[str, str]) -> dict[str, str]:
    """What of ``env`` a remote agent's process gets (see ``_CARRIED_PREFIXES``)."""
    return {
        k: v
        for k, v in env.items()
        if (k.startswith(_CARRIED_PREFIXES) or k in _CARRIED) and k not in _NOT_CARRIED
    }


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
    ) -> None:
        """Drive the remote agent of task ``task_id`` (registered by the caller).

        ``starting``: held from its actor's creation until its process is ready (its session
        started), so that many agents spawned at once start a few at a time, each quickly,
        rather than all slowly (on a local Ray, their processes share this machine's CPUs).
        ``actor_name``: its actor is detached under that name (exit policy ``detach``).
        ``resumed``: the state an earlier process of the session left: its actor is followed
        on from there, on ``cluster``, instead of being started.
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
        self.branch = f"taskloom/remote-{task_id[1:9]}"
        self.driver: asyncio.Task[None] | None = None
        self._actor: Any = None
        self._stopping = False
        self._ended_cleanly = False
        self._result: str | None = None
        self._error: str | None = None
        self._snapshot: Snapshot | None = None
        self._output: DiskTaskOutput | None = None
        self._seen = resumed.seen if resumed is not None else 0
        #: Set once its actor has its work (from then on, letting go of it loses nothing).
        self._launched = asyncio.Event()
        self._detaching = asyncio.Event()
        self._detached = False

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
            await asyncio.wait([launched, driver], timeout=2 * STOP_WAIT_S)
            launched.cancel()
        actor = self._actor
        if actor is not None:
            with contextlib.suppress(Exception):  # it may be dead already
                await asyncio.wait_for(actor.stop.remote(), STOP_WAIT_S)
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
        if self.actor_name is None:
            await self.kill()
            return
        self._detaching.set()
        driver = self.driver
        if driver is None or driver.done():
            return
        launched = asyncio.ensure_future(self._launched.wait())
        try:
            await asyncio.wait([launched, driver], timeout=2 * STOP_WAIT_S)
        finally:
            launched.cancel()
        if not driver.done():
            self._detached = True
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driver

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
                stream = self._actor.follow.options(num_returns="streaming").remote(self._seen)
                async for ref in stream:
                    event = await ref
                    if event.get("type") == "end":
                        break
                    if event.get("type") != "started":
                        await launching.aclose()  # it has started: the next may go
                    await self._on(event)
                    self._seen += 1
                    if self.actor_name is not None:
                        self._note_seen(self._seen)
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

        from taskloom.remote.actor import RemoteAgentActor

        carried = carried_env(os.environ)
        options: dict[str, Any] = {}
        if not self.local:
            # A cluster's workers: the credentials in the actor's runtime environment (this
            # taskloom is the session's: see Cluster). A local Ray's idle workers are this
            # process's own (same environment, same packages): taken as they are, in a
            # fraction of a second, where a runtime environment of its own starts a new one.
            options["runtime_env"] = {"env_vars": carried}
        if self.actor_name is not None:
            options.update(name=self.actor_name, namespace=NAMESPACE, lifetime="detached")
        spec = {**self.spec.__dict__, "branch": self.branch, "snapshot_ref": snapshot.ref}
        await self._wait_turn(launching)
        if self._stopping:
            return
        bundle = self.snapshots.payload(snapshot, ray.put)  # once for all its agents
        self._actor = RemoteAgentActor.options(**options).remote(
            keep_events=self.actor_name is not None
        )
        await self._actor.start.remote(spec, bundle, carried)
        if self.actor_name is not None:
            name = self.actor_name
            self.runtime.update(self.task_id, lambda s: s.replace(actor=name))

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
        if resumed.repo and resumed.snapshot_commit and resumed.snapshot_ref:
            self._snapshot = Snapshot(
                Path(resumed.repo), resumed.snapshot_commit, resumed.snapshot_ref, b""
            )
            self.snapshots.adopt(self._snapshot)
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
            self._note(activities, totals)
        elif kind == "result":
            self._result = str(event.get("content") or "")
            totals = {
                k: int(event[k])
                for k in ("total_tokens", "tool_uses")
                if isinstance(event.get(k), int)
            }
            self._note([], totals)  # its final usage (progress lags one message)
        elif kind == "error":
            self._error = str(event.get("error") or "it failed, saying nothing")
        elif kind == "changes" and self._snapshot is not None:
            await self._changes(event)

    def _note_seen(self, seen: int) -> None:
        self.runtime.update(self.task_id, lambda s: s.replace(seen=seen))

    def _note(self, activities: list[str], totals: dict[str, int]) -> None:
        self.runtime.update(self.task_id, lambda s: progressed(s, activities, totals))

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
        self.runtime.update(self.task_id, lambda s: s.replace(branch=branch, diffstat=stat))

    def _finish(self) -> None:
        state = self.runtime.get(self.task_id)
        branch = state.branch if isinstance(state, RemoteAgentTaskState) else None
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
        if branch and isinstance(state, RemoteAgentTaskState):
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
            import ray

            if not self._ended_cleanly:
                # Its stream broke off (or this run was cancelled): its work is stopped first,
                # or killing the actor would leave its process's commands running.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(actor.stop.remote(), STOP_WAIT_S)
            with contextlib.suppress(Exception):
                ray.kill(actor)
        if self._snapshot is not None:
            await self.snapshots.release(self._snapshot)
        if self._output is not None:
            self._output.close()


class RemoteAgents:
    """A session's remote agents and its cluster (see the module docstring)."""

    def __init__(self, runtime: TaskRuntime, settings: Mapping[str, Any]) -> None:
        """Run remote agents for ``runtime``'s session, on the cluster ``settings`` name."""
        self.runtime = runtime
        self.cluster = Cluster(settings)
        self.runs: dict[str, RemoteRun] = {}
        self.snapshots = Snapshots()
        remote = settings.get("remote")
        remote = remote if isinstance(remote, dict) else {}
        self._max_starting = remote.get("maxStarting")
        self.exit_policy = remote.get("exitPolicy", "cancel")
        #: Agents starting at once (made once the cluster is known: see _starting).
        self.starting: asyncio.Semaphore | None = None

    async def spawn(
        self,
        spec: RemoteSpec,
        *,
        owner: str,
        tool_use_id: str | None,
        cwd: Path,
        background: bool = True,
    ) -> tuple[str, Connected]:
        """Start a remote agent; its task id, and how the cluster was reached.

        Raises:
            ToolError: The cluster cannot be reached, or the settings are wrong (nothing was
                started).
        """
        if self.exit_policy not in _EXIT_POLICIES:
            raise ToolError(
                f"the setting remote.exitPolicy is {self.exit_policy!r}: it must be one of"
                f" {', '.join(map(repr, _EXIT_POLICIES))}"
            )
        try:
            connected = await self.cluster.connect()
        except ClusterError as exc:
            raise ToolError(str(exc)) from None
        runtime = self.runtime
        task_id = runtime.new_id(TaskType.REMOTE_AGENT)
        # A local Ray ends with the session, and its actors with it: nothing to detach from.
        detach = self.exit_policy == "detach" and not connected.started_locally
        runtime.register(
            RemoteAgentTaskState(
                id=task_id,
                status=TaskStatus.RUNNING,
                description=spec.description,
                owner=owner,
                tool_use_id=tool_use_id,
                output_file=str(runtime.output_path(task_id)),
                agent_type=spec.agent_type,
                prompt=spec.prompt,
                name=spec.name,
                cluster=connected.address,
                # In the foreground its caller gets its answer: no notification besides.
                is_backgrounded=background,
                exit_policy="detach" if detach else "cancel",
            )
        )
        if self.starting is None:
            # On a local Ray, as many as it has CPUs (their processes share them); on a
            # cluster, more: its nodes start them.
            size = self._max_starting or (connected.cpus or _STARTING)
            self.starting = asyncio.Semaphore(max(1, int(size)))
        run = RemoteRun(
            runtime,
            task_id,
            spec,
            cwd,
            connected.started_locally,
            self.snapshots,
            self.starting,
            actor_name=f"taskloom-{runtime.session_id}-{task_id}" if detach else None,
        )
        self._follow(run)
        return task_id, connected

    def policy_note(self, connected: Connected) -> str | None:
        """What the result says when ``remote.exitPolicy`` cannot apply here, if anything."""
        if self.exit_policy == "detach" and connected.started_locally:
            return (
                "remote.exitPolicy is 'detach', but this local Ray ends with the session: its"
                " remote agents are stopped then (name a cluster of its own to detach them)"
            )
        return None

    def _follow(self, run: RemoteRun) -> None:
        try:
            self.runtime.attach_handle(run.task_id, run)
        except BaseException:
            self.runtime.update(run.task_id, lambda s: failed_to_start(s, "could not start"))
            raise
        self.runs[run.task_id] = run
        run.start()

    def take_up(self, states: list[RemoteAgentTaskState], cwd: Path) -> None:
        """Follow again the detached agents an earlier process of the session let go of.

        This is its resume: each is held by a run at once (TaskStop reaches it), which
        reaches the cluster and follows the agent on. If the cluster cannot be reached they
        stay as they are, for a later resume (warned).
        """
        for state in states:
            if state.id in self.runs or state.actor is None:
                continue
            spec = RemoteSpec(
                description=state.description,
                prompt=state.prompt,
                agent_type=state.agent_type,
                name=state.name,
            )
            run = RemoteRun(
                self.runtime,
                state.id,
                spec,
                cwd,
                False,
                self.snapshots,
                actor_name=state.actor,
                resumed=state,
                cluster=self.cluster,
            )
            self._follow(run)

    async def close(self) -> None:
        """Once the session's tasks are stopped (or let go of): let go of the cluster."""
        await self.cluster.close()


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def settings_json(settings: Mapping[str, Any]) -> str:
    """The parent's settings as the worker reads them (``--settings`` JSON)."""
    try:
        return json.dumps(dict(settings))
    except (TypeError, ValueError):
        return "{}"


__all__ = [
    "NAMESPACE",
    "READY_WAIT_S",
    "RemoteAgents",
    "RemoteRun",
    "RemoteSpec",
    "carried_env",
    "settings_json",
]
