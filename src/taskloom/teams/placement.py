"""Where a teammate works, set up as a subagent of its type is: its directory and its servers.

A teammate's :class:`Placement` is the subagent's
:class:`~taskloom.agents.environment.AgentEnvironment`, made before it joins: its own git
worktree when ``isolation`` (or its definition) says ``worktree`` (the strict contract: a
worktree that cannot be made is an error, never the lead's tree), and its definition's own MCP
servers, started in its directory. Its end undoes both as a subagent run's end does: the servers
stop, and the worktree is removed if nothing in it would be lost, else kept and said where.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from taskloom._aio import finish_despite_cancel
from taskloom._dataclass import dataclass
from taskloom.errors import ToolError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from taskloom.agents.definition import AgentDefinition
    from taskloom.agents.environment import AgentEnvironment, Environments
    from taskloom.tools.base import Tool

log = logging.getLogger(__name__)

#: The isolation a teammate may have: it runs on this machine, in a pane or in this process.
ISOLATIONS = ("worktree",)


@dataclass
class Placement:
    """One teammate's environment (see the module docstring).

    Attributes:
        base: The lead's directory, where it works unless isolated.
        env: The subagent environment it is (None: nothing of its own, it works in ``base``).
    """

    base: Path
    env: AgentEnvironment | None = None

    @property
    def cwd(self) -> Path:
        """Where it works: its worktree, else the lead's directory."""
        return self.env.cwd if self.env is not None else self.base

    @property
    def worktree(self) -> Path | None:
        """Its own worktree's directory (None: it works in the lead's)."""
        env = self.env
        return env.worktree.path if env is not None and env.worktree is not None else None

    def tools(self) -> Sequence[Tool[Any]]:
        """The tools of its own MCP servers."""
        return self.env.tools() if self.env is not None else ()

    async def close(self) -> str:
        """Stop its servers, finish its worktree; what became of the worktree ('' if none).

        Removed if nothing would be lost; kept otherwise (the note says where and why).
        """
        if self.env is None:
            return ""
        await self.env.aclose()
        finisher = self.env.finisher
        if finisher is None:
            return ""
        _fields, note = await finisher()
        return note.strip()


class Placer(Protocol):
    """Sets up where a new teammate works (see :func:`place`)."""

    async def __call__(
        self, key: str, agent_type: str, *, cwd: Path, isolation: str | None, servers: bool
    ) -> Placement:
        """Its placement: ``key`` names its worktree; ``servers``: start its MCP servers here.

        Raises:
            ToolError: An unknown agent type or isolation; the worktree could not be made; a
                server it needs is missing.
        """
        ...


def isolation_of(requested: str | None, definition: AgentDefinition) -> str | None:
    """The teammate's isolation: what the spawn asked, else its definition's worktree.

    Raises:
        ToolError: An isolation a teammate cannot have (``remote``: it runs here).
    """
    if requested is not None and requested not in ISOLATIONS:
        raise ToolError(
            f'isolation: a teammate runs on this machine; only "worktree" isolates it, got '
            f"{requested!r}"
        )
    if requested is None and definition.isolation in ISOLATIONS:
        return definition.isolation
    return requested


async def place(
    environments: Environments,
    definition: AgentDefinition,
    key: str,
    *,
    cwd: Path,
    isolation: str | None,
    servers: bool,
) -> Placement:
    """Set up a teammate's environment as a subagent's is (a failure leaves nothing behind).

    Args:
        environments: The session's agent environments.
        definition: Its agent type.
        key: A unique id for it (its worktree's name comes from it).
        cwd: The lead's directory (its worktree is made from here).
        isolation: ``worktree`` or None (see :func:`isolation_of`).
        servers: Start its definition's MCP servers here (False: its own process does).

    Raises:
        ToolError: The worktree could not be made; a server it needs is missing.
    """
    env = environments.for_agent(
        key, definition, base=cwd, confine_to=None, isolation=isolation_of(isolation, definition)
    )
    await env.isolate()
    if servers:
        try:
            await env.start()
        except BaseException:
            await finish_despite_cancel(env.abandon())
            raise
    return Placement(cwd, env)


class Placements:
    """A team's teammates' environments, from their spawn to their end."""

    def __init__(self, placer: Placer | None) -> None:
        """Set them up with ``placer`` (None: every teammate works in the lead's directory)."""
        self.placer = placer
        self._kept: dict[str, Placement] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def make(
        self, agent_type: str, *, cwd: Path, isolation: str | None, servers: bool
    ) -> Placement:
        """A new teammate's environment (no placer: in ``cwd``, with nothing of its own).

        Raises:
            ToolError: See :class:`Placer`.
        """
        if self.placer is None:
            if isolation is not None:
                raise ToolError("isolation: this session cannot isolate teammates.")
            return Placement(cwd)
        # Its worktree's name comes from the key: unique, whatever the teammate is called.
        key = secrets.token_hex(4)
        return await self.placer(key, agent_type, cwd=cwd, isolation=isolation, servers=servers)

    def keep(self, agent_id: str, placement: Placement) -> None:
        """Hold ``agent_id``'s environment until it ends."""
        self._kept[agent_id] = placement

    def get(self, agent_id: str) -> Placement | None:
        """``agent_id``'s environment, while it runs."""
        return self._kept.get(agent_id)

    async def undo(self, agent_id: str, placement: Placement) -> None:
        """It did not start: its environment is undone now."""
        self._kept.pop(agent_id, None)
        await _close(agent_id, placement)

    def ended(self, agent_id: str) -> None:
        """It ended: its environment is undone (in a task of its own; :meth:`close` waits)."""
        placement = self._kept.pop(agent_id, None)
        if placement is None:
            return
        task = asyncio.get_running_loop().create_task(_close(agent_id, placement))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Wait for the environments being undone; undo those still held."""
        rest, self._kept = self._kept, {}
        await asyncio.gather(*self._closing, *(_close(a, p) for a, p in rest.items()))


async def _close(agent_id: str, placement: Placement) -> None:
    try:
        note = await placement.close()
    except Exception:  # its end must not fail over its directory
        log.exception("teammate %s: its environment could not be undone", agent_id)
        return
    if note:
        log.info("teammate %s: %s", agent_id, note)


__all__ = ["ISOLATIONS", "Placement", "Placements", "Placer", "isolation_of", "place"]
