"""Bringing back, at a lead's start, the teammates an earlier process of its session ran.

Each member still recorded active (its process died with it) goes on under its task id, with
its conversation read back from its transcript, built as it was spawned (its type, its
directory: its worktree, kept), and waits for mail: what was sent to it and never delivered is
handed to it now. A member whose task, transcript or worktree is gone is marked inactive
instead, as is one that fails to start: neither may keep the session from starting.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from taskloom.tasks.narrow import as_teammate
from taskloom.teams.executor import ConfigMaker, Executors, TeammateSpec
from taskloom.teams.model import LEAD_NAME, Member, TeamError

if TYPE_CHECKING:
    from taskloom.engine import EngineConfig
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.teams.roster import Roster

log = logging.getLogger(__name__)


async def resume_members(
    runtime: TaskRuntime,
    roster: Roster,
    executor: Executors,
    make_config: ConfigMaker,
    inactive: Callable[[str, str], None],
) -> list[str]:
    """Bring back the lead's active members (see the module docstring); their names.

    Args:
        runtime: The lead's runtime, holding the members' tasks of the earlier process.
        roster: The lead's team.
        executor: Where the members run again.
        make_config: Builds a member's engine configuration, as at its spawn.
        inactive: Marks a member of a team inactive (``team``, ``name``).
    """
    from taskloom.teams.teammate import sidechain_path

    team = roster.team()
    if team is None:
        return []
    states = runtime.list(include_evicted=True)
    tasks = {
        mate.agent_id: mate for mate in map(as_teammate, states) if mate is not None
    }  # oldest first: the latest task of each member wins
    back = []
    for member in team.members:
        if member.name == LEAD_NAME or not member.is_active:
            continue
        state = tasks.get(member.agent_id)
        path = sidechain_path(runtime, state.id) if state is not None else None
        if state is None or path is None or not path.is_file():
            log.warning(
                "teammate %s cannot be brought back (its task or its transcript is gone);"
                " it is marked inactive",
                member.agent_id,
            )
            inactive(team.name, member.name)
            continue
        try:
            config = _config(member, make_config)
            await _resume(executor, config, team.name, member, state.id, path, inactive)
        except Exception:  # one that cannot go on must not keep the session from starting
            log.exception("teammate %s could not be resumed", member.agent_id)
            inactive(team.name, member.name)
            continue
        back.append(member.name)
    return back


async def _resume(
    executor: Executors,
    config: EngineConfig,
    team: str,
    member: Member,
    task_id: str,
    path: Path,
    inactive: Callable[[str, str], None],
) -> None:
    from taskloom.pairing import repair
    from taskloom.transcript import load_messages

    messages, _ = repair(load_messages(path))
    spec = TeammateSpec(
        name=member.name,
        team=team,
        color=member.color,
        prompt=member.prompt,
        config=config,
        model=member.model,
        plan_mode_required=member.plan_mode_required,
        on_end=functools.partial(inactive, team, member.name),
        # Its type, for a pane teammate's process to build it from: without it an Explore
        # teammate would come back general-purpose, able to write.
        agent_type=member.agent_type,
        # Its own mode, as last recorded (plan until its plan is approved): a teammate in a
        # new process must not come back in the lead's.
        mode=member.mode,
    )
    await executor.resume(spec, task_id, messages)


def _config(member: Member, make_config: ConfigMaker) -> EngineConfig:
    """A member's engine as it was spawned: its type, its directory (its worktree, kept).

    Raises:
        TeamError: Its worktree is gone (it cannot go on where it worked).
    """
    worktree = member.worktree_path
    if worktree is not None and not Path(worktree).is_dir():
        raise TeamError(f"its worktree {worktree} is gone")
    return make_config(
        member.name, member.team, member.model, member.mode, agent_type=member.agent_type,
        where=Path(member.cwd) if member.cwd else None, confined=worktree is not None,
    )  # fmt: skip
