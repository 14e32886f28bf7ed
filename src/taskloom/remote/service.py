"""The parent's side of remote agents: a session's cluster and its ``remote_agent`` tasks.

:meth:`RemoteAgents.spawn` reaches the cluster first (a cluster that is not there is the
Agent call's error, at once), registers the task (prefix ``r``, owned by the caller) and
starts its :class:`~taskloom.remote.run.RemoteRun`, the task's handle, which drives it.

With the setting ``remote.exitPolicy: "detach"`` (on a cluster of its own, not the local Ray
a session starts and stops), the actor is named and detached: the end of the session, or its
crash, lets go of the agent without stopping it, and a resumed session follows it on from the
last event it had (:meth:`RemoteAgents.take_up`), to the usual notification.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from taskloom.errors import ToolError
from taskloom.events import Meter
from taskloom.remote.cluster import Cluster, ClusterError, Connected
from taskloom.remote.pool import ActorPool
from taskloom.remote.run import RemoteRun, actor_options
from taskloom.remote.snapshot import Snapshots
from taskloom.remote.spec import RemoteSpec, carried_env
from taskloom.settings import session_dir
from taskloom.tasks.remote import RemoteAgentTaskState, ended, failed_to_start
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import TaskStatus, TaskType

log = logging.getLogger(__name__)

#: Remote agents starting at once on a cluster, unless the setting ``remote.maxStarting``
#: says (on a local Ray: 8 a CPU).
_STARTING = 16
_EXIT_POLICIES = ("cancel", "detach")
#: Longest wait at the session's end for the runs still cleaning up (each bounds its own
#: steps: see taskloom.remote.run).
_CLEANUP_WAIT_S = 15.0


class RemoteAgents:
    """A session's remote agents and its cluster (see the module docstring)."""

    def __init__(
        self, runtime: TaskRuntime, settings: Mapping[str, Any], cluster: Cluster | None = None
    ) -> None:
        """Run remote agents for ``runtime``'s session, on the cluster ``settings`` name.

        ``cluster``: the session's connection made already (its ``bridge:`` listener's); it
        is closed here, at the end, as one made here would be.
        """
        self.runtime = runtime
        self.cluster = cluster or Cluster(
            settings,
            recorder=runtime.recorder,
            log_path=session_dir(runtime.session_id, runtime.home) / "ray.log",
        )
        self.runs: dict[str, RemoteRun] = {}
        self.snapshots = Snapshots()
        remote = settings.get("remote")
        remote = remote if isinstance(remote, dict) else {}
        self._max_starting = remote.get("maxStarting")
        self._pool_size = remote.get("poolSize")
        #: The session's warm actors (made with its first remote agent that is not detached).
        self.pool: ActorPool | None = None
        self.exit_policy = remote.get("exitPolicy", "cancel")
        prices = settings.get("modelPrices")
        self._prices = prices if isinstance(prices, Mapping) else None
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
        meter_for: Callable[[str], Meter] | None = None,
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
        actor = f"taskloom-{runtime.session_id}-{task_id}" if detach else None
        pool = None if detach else await self._pool(connected)
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
                actor=actor,  # known from the start: a crash at any point leaves its name
            )
        )
        if self.starting is None:
            # On a local Ray, 8 a CPU (a pooled actor forks a worker warm in about 0.1 s of
            # CPU, detached agents go to a cluster), or as many as its CPUs without a pool
            # (each starts a Ray worker and a taskloom); on a cluster, 16: its nodes start them.
            per_cpu = 8 if pool is not None else 1
            size = self._max_starting or (per_cpu * connected.cpus or _STARTING)
            self.starting = asyncio.Semaphore(max(1, int(size)))
        run = RemoteRun(
            runtime,
            task_id,
            spec,
            cwd,
            connected.started_locally,
            self.snapshots,
            self.starting,
            actor_name=actor,
            meter=meter_for(task_id) if meter_for is not None else None,
            prices=self._prices,
            pool=pool,
        )
        self._follow(run)
        return task_id, connected

    async def _pool(self, connected: Connected) -> ActorPool | None:
        """The session's pool of warm actors (made on first use: see taskloom.remote.pool).

        None with the setting ``remote.poolSize: 0``: each agent gets an actor of its own,
        started cold (as detached agents do).
        """
        if self._pool_size is not None and int(self._pool_size) <= 0:
            return None
        if self.pool is None:
            size = self._pool_size or connected.cpus or await _cluster_cpus()
            options = actor_options(connected.started_locally, carried_env(os.environ))
            if not connected.started_locally:
                options["scheduling_strategy"] = "SPREAD"  # over the cluster's nodes
            base_dir = str(Path(connected.local_dir) / "bases") if connected.local_dir else None
            self.pool = ActorPool(int(size), options=options, tag=connected.tag, base_dir=base_dir)
        return self.pool

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
        here = self.cluster.address
        for state in states:
            if state.id in self.runs:
                continue
            if state.actor is None:  # nothing names what it ran in: it cannot be followed
                self.runtime.update(state.id, _never_ran)
                continue
            if state.cluster != here:
                # Never another cluster (nor a local Ray started for it): it is not there.
                log.warning(
                    "remote agent %s runs on the cluster %s, and this session's is %s: resume"
                    " with RAY_ADDRESS=%s to follow it",
                    state.id,
                    state.cluster,
                    here or "a local Ray",
                    state.cluster,
                )
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
        """Once the session's tasks are stopped (or let go of): let go of the cluster.

        A run that has ended may still be cleaning up (stopping its actor, reaping its worker):
        it is waited for (bounded) first, since a call into Ray during its shutdown ends the
        process.
        """
        drivers = [r.driver for r in self.runs.values() if r.driver and not r.driver.done()]
        if drivers:
            _, late = await asyncio.wait(drivers, timeout=_CLEANUP_WAIT_S)
            for driver in late:
                driver.cancel()
            if late:
                await asyncio.wait(late)
        pool, self.pool = self.pool, None
        if pool is not None:
            await pool.close()
        await self.cluster.close()


async def _cluster_cpus() -> int:
    """The CPUs of the cluster the session is connected to (1 if Ray does not say)."""
    import ray

    def ask() -> int:
        resources: dict[str, Any] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        return int(resources.get("CPU") or 1)

    try:
        return await asyncio.get_running_loop().run_in_executor(None, ask)
    except Exception:  # Ray's: the pool is then as small as it gets
        return 1


def _never_ran(state: RemoteAgentTaskState) -> RemoteAgentTaskState:
    return ended(state, error="it was let go of before it had an actor: it never ran")


__all__ = ["RemoteAgents"]
