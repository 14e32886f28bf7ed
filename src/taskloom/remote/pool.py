"""A session's pool of warm actors for its remote agents (those not detached).

Making an actor per agent cost each one a Ray worker process (a Python importing Ray, about a
second of CPU on a local Ray once its few prestarted workers are taken) and then its own
``taskloom remote worker`` (0.6 s of CPU more): 20 agents on 2 CPUs waited up to 15 s for
their first line. The pool makes a few actors once, when the session's first remote agent
starts (as many as the cluster has CPUs, at most :data:`MAX_POOL`; the setting
``remote.poolSize`` says otherwise), each with a zygote forking its agents' workers warm (see
:mod:`taskloom.remote.zygote`); every agent goes to the actor with the fewest agents. An actor
takes no CPU (``num_cpus: 0``): it would keep the agents' own processes from a small cluster.

A warm actor starts each agent clean: a working copy of its own, a worker forked from a zygote
that never ran an agent, its events apart. An actor that died (killed, its node lost) leaves
the pool, and a new one takes its place for the agents that come after. The session's end
kills the pool's actors, once its agents are stopped: nothing of them is left on the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

log = logging.getLogger(__name__)

#: Most actors in a pool (a large cluster's CPUs would each cost an idle actor and zygote).
MAX_POOL = 16
#: Longest wait at the session's end for the actors to close before they are killed.
CLOSE_WAIT_S = 3.0


class ActorPool:
    """The session's warm actors (see the module docstring)."""

    def __init__(
        self,
        size: int,
        *,
        options: dict[str, Any] | None = None,
        tag: str | None = None,
        base_dir: str | None = None,
    ) -> None:
        """Up to ``size`` actors, made with ``options`` (Ray's, for ``.options``).

        ``tag``: the local Ray's, carried by the actors' zygotes (the sweep finds them by it).
        ``base_dir``: where the actors unpack snapshots (a local Ray's directory).
        """
        self.size = max(1, min(int(size), MAX_POOL))
        self.options = options or {}
        self.tag = tag
        self.base_dir = base_dir
        #: Each actor, and its number of agents.
        self._load: dict[Any, int] = {}
        self._warm: dict[Any, asyncio.Future[int]] = {}
        self._closed = False

    async def acquire(self) -> Any:
        """The warm actor with the fewest agents (else the first warming); held.

        The first call makes one actor; once it is warm, the rest of the pool is made (not all
        at once: the first agent would wait for every zygote's imports, on the same CPUs). One
        that died, or failed to warm, is made again here, once the others are warm.

        Raises:
            Exception: Ray's, if its actor could not be made or warmed.
        """
        if self._closed:
            raise RuntimeError("the session's remote agents are being stopped")
        # Every actor here is warm or warming: one whose warm-up failed left as it failed.
        warm = [a for a, w in self._warm.items() if w.done()]
        if not self._load:
            self._make()
        elif warm and len(warm) == len(self._load) < self.size:
            self._make()  # in the place of one that died (or failed to warm)
        actor = min(warm or self._load, key=self._load.__getitem__)
        self._load[actor] += 1
        try:
            await asyncio.shield(self._warm[actor])
        except BaseException:
            self.release(actor)
            raise
        return actor

    def _make(self) -> None:
        from taskloom.remote.actor import AgentHost

        actor = AgentHost.options(**self.options).remote(warm=True, base_dir=self.base_dir)
        self._load[actor] = 0
        warming = self._warm[actor] = asyncio.ensure_future(self._warm_up(actor))
        # An actor made in the background may fail with no agent ever awaiting it: its
        # failure is read here, not logged as never retrieved.
        warming.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def _warm_up(self, actor: Any) -> int:
        try:
            pid = int(await actor.warm.remote(self.tag))
        except Exception:
            # Dropped as it fails (not in a callback after: an agent asking in between would
            # be given it); the next agent gets another try.
            if not self._closed:
                self.lost(actor)
            raise
        while not self._closed and len(self._load) < self.size:  # the first is warm: the rest
            self._make()
        return pid

    def release(self, actor: Any) -> None:
        """One agent of ``actor`` is done."""
        if actor in self._load:
            self._load[actor] = max(0, self._load[actor] - 1)

    def lost(self, actor: Any) -> None:
        """``actor`` died or failed: it takes no more agents, and is killed."""
        if self._load.pop(actor, None) is None:
            return
        self._warm.pop(actor, None)
        _kill(actor)

    def actors(self) -> list[Any]:
        """The actors in the pool."""
        return list(self._load)

    async def close(self) -> None:
        """Kill every actor (the session's agents are stopped by now)."""
        self._closed = True
        actors, self._load = list(self._load), {}
        warming, self._warm = list(self._warm.values()), {}
        for future in warming:
            future.cancel()
        if actors:
            # Each closes first (its zygote, its snapshots' files): a killed actor cannot.
            closing = [asyncio.ensure_future(_close(a)) for a in actors]
            await asyncio.wait(closing, timeout=CLOSE_WAIT_S)
        for actor in actors:
            _kill(actor)


async def _close(actor: Any) -> None:
    with contextlib.suppress(Exception):  # dead, or never warmed: killed all the same
        await actor.close.remote()


def _kill(actor: Any) -> None:
    import ray

    with contextlib.suppress(Exception):  # it may be dead already
        ray.kill(actor)


__all__ = ["MAX_POOL", "ActorPool"]
