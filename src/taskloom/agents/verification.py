"""The verification nudge: after 3 completed tasks in a turn and no verifier, say to spawn one.

The spec's rule, as Claude Code words its reminder: once the main thread has completed three or
more tasks in one turn with no verification step, its next request carries a
``<system-reminder>`` to spawn the ``verification`` agent before it writes its summary.

- A **turn** is one run of the main thread on a prompt (:meth:`Session.run
  <taskloom.session.Session.run>`), its Stop-hook continuations included.
- A **completed task** is a TodoWrite item that became ``completed`` in that turn (compared
  with the list as it was, so re-sending a done item does not count again), or a task of the
  team's task list the main thread marked ``completed`` with TaskUpdate.
- A **verification step** is an Agent call of that turn that started the ``verification``
  agent.

The reminder is given once a turn, in the request right after the tool call that completed
the third task. Only the main thread is nudged (as Claude Code: a subagent reports to it),
and only when it can start the verifier (:func:`can_spawn_verifier`: it has the Agent tool,
may start that type, and no rule denies ``Agent(verification)``) -- else the reminder would
ask for what it cannot do. The setting ``verificationNudge: false`` turns it off.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom.agents.agent_tool import AgentTool
from taskloom.agents.builtin_checks import VERIFICATION_AGENT_TYPE
from taskloom.events import ToolDone
from taskloom.permissions import PermissionRequest

if TYPE_CHECKING:
    from taskloom.events import EngineEvent, Meter
    from taskloom.permissions import PermissionPolicy
    from taskloom.tools.base import Tool

#: Completed tasks in a turn that call for a verifier.
NUDGE_AFTER = 3
#: The reminder (Claude Code's words).
NUDGE = (
    "<system-reminder>NOTE: You just closed out 3+ tasks and none of them was a verification "
    "step. Before writing your final summary, spawn the verification agent "
    f'(subagent_type="{VERIFICATION_AGENT_TYPE}"). You cannot self-assign PARTIAL by listing '
    "caveats in your summary — only the verifier issues a verdict.</system-reminder>"
)


class VerificationNudge:
    """The main thread's meter, with the nudge added to what it tells the model.

    It hears the main thread's events (:meth:`saw`) and wraps the session's budget meter: its
    :meth:`reminder` is the budget's note and, once a turn, the nudge.

    Args:
        meter: The budget meter it wraps (None: there is none).
        done: The TodoWrite items already completed (a resumed conversation's list).
    """

    def __init__(self, meter: Meter | None, done: Iterable[str] = ()) -> None:
        self.meter = meter
        #: Tasks completed in this turn, and whether a verifier was started in it.
        self.completed = 0
        self.verified = False
        self._nudged = False
        self._due = False
        #: TodoWrite items done as of the last call (by content): re-sent ones do not count.
        self._done_todos: set[str] = set(done)

    @classmethod
    def for_settings(
        cls,
        settings: Mapping[str, Any],
        meter: Meter | None,
        done: Iterable[str] = (),
        *,
        can_verify: bool = True,
    ) -> VerificationNudge | None:
        """The nudge over ``meter``.

        None when the setting ``verificationNudge`` is false, or when the thread cannot start
        the verifier (``can_verify``, see :func:`can_spawn_verifier`).
        """
        if settings.get("verificationNudge") is False or not can_verify:
            return None
        return cls(meter, done)

    def new_turn(self) -> None:
        """A turn starts: nothing is completed or verified in it yet."""
        self.completed, self.verified, self._nudged, self._due = 0, False, False, False

    def saw(self, event: EngineEvent) -> None:
        """Count what ``event`` (a tool call that ended) completed or verified."""
        if not isinstance(event, ToolDone) or event.result.is_error:
            return
        call = event.call
        if call.name == "Agent" and call.input.get("subagent_type") == VERIFICATION_AGENT_TYPE:
            self.verified = True
        elif call.name == "TodoWrite":
            self.completed += self._newly_done(call.input.get("todos"))
        elif call.name == "TaskUpdate" and call.input.get("status") == "completed":
            data = event.result.data or {}
            if "status" in (data.get("updatedFields") or ()):
                self.completed += 1
        if self.completed >= NUDGE_AFTER and not self.verified and not self._nudged:
            self._nudged = self._due = True

    def _newly_done(self, todos: Any) -> int:
        if not isinstance(todos, list):
            return 0
        done = {
            str(t.get("content"))
            for t in todos
            if isinstance(t, dict) and t.get("status") == "completed"
        }
        new = len(done - self._done_todos)
        # A list whose items are all done is cleared (TodoWrite): the next list starts afresh.
        everything = all(isinstance(t, dict) and t.get("status") == "completed" for t in todos)
        self._done_todos = set() if everything else done
        return new

    # -- Meter --------------------------------------------------------------------------------

    def admit_tool_call(self) -> str | None:
        """The budget's answer (see :class:`taskloom.events.Meter`)."""
        return self.meter.admit_tool_call() if self.meter is not None else None

    def reminder(self) -> str | None:
        """The budget's note, and the nudge when it is due (once a turn)."""
        said = self.meter.reminder() if self.meter is not None else None
        if self._due:
            self._due = False
            said = f"{said}\n\n{NUDGE}" if said else NUDGE
        return said


def can_spawn_verifier(
    tools: Iterable[Tool[Any]], policy: PermissionPolicy | None, cwd: Path
) -> bool:
    """Whether a thread with ``tools`` and ``policy`` can start the ``verification`` agent.

    It needs the Agent tool, one that may start that type (not limited to others), with the
    type known to it, and no deny rule for ``Agent`` or ``Agent(verification)``.
    """
    agent = next((t for t in tools if isinstance(t, AgentTool)), None)
    if agent is None:
        return False
    if agent.allowed_types is not None and VERIFICATION_AGENT_TYPE not in agent.allowed_types:
        return False
    if agent.service.builder.catalog.get(VERIFICATION_AGENT_TYPE) is None:
        return False
    if policy is None:
        return True
    request = PermissionRequest("Agent", "other", VERIFICATION_AGENT_TYPE, cwd)
    return policy.decide(request).behavior != "deny"


__all__ = ["NUDGE", "NUDGE_AFTER", "VerificationNudge", "can_spawn_verifier"]
