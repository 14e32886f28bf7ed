"""A task state narrowed to its kind's own class, for a client that needs the kind's fields.

Outside the task layer a client asks a task's kind what differs between kinds (see
:class:`~taskloom.tasks.kinds.TaskKind`: its progress, its title, whether it is an agent). Some
clients work with one kind only and read its own fields: delivery of SendMessage reads a
subagent's name, the team reads a teammate's agent id and whether it was asked to shut down.
They narrow here, where the state classes are known, instead of testing the class themselves
(``tests/test_architecture.py`` holds them to it).
"""

from __future__ import annotations

from taskloom.tasks.remote import RemoteAgentTaskState
from taskloom.tasks.teammate import TeammateTaskState
from taskloom.tasks.types import AgentTaskState, ShellTaskState, TaskState


def as_agent(state: TaskState | None) -> AgentTaskState | None:
    """``state`` if it is a subagent's of this process (``local_agent``), else None."""
    return state if isinstance(state, AgentTaskState) else None


def as_remote_agent(state: TaskState | None) -> RemoteAgentTaskState | None:
    """``state`` if it is a remote agent's (``remote_agent``), else None."""
    return state if isinstance(state, RemoteAgentTaskState) else None


def as_shell(state: TaskState | None) -> ShellTaskState | None:
    """``state`` if it is a shell command's (``local_bash``), else None."""
    return state if isinstance(state, ShellTaskState) else None


def as_teammate(state: TaskState | None) -> TeammateTaskState | None:
    """``state`` if it is a teammate's (``in_process_teammate``), else None."""
    return state if isinstance(state, TeammateTaskState) else None


__all__ = ["as_agent", "as_remote_agent", "as_shell", "as_teammate"]
