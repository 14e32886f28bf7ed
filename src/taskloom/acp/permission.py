"""Permission prompts as ``session/request_permission``: the editor answers what would ask.

A call the policy answers with ``ask`` reaches the session's prompter, as in the REPL and for
``claude-agent-sdk``'s ``can_use_tool``: here the prompter asks the client, with the call as a
tool call and four options. ``allow_always`` does what the REPL's "don't ask again" does: the
rule that would allow the call (``Bash(npm test:*)``, ``Write``) is saved to the project's
``.taskloom/settings.local.json`` and applied to the running session at once, so the same call
is not asked about again. ``reject_always`` adds the matching deny rule to the running session
(not saved: a denial kept in the settings would outlive what the user meant). Approving a plan
(ExitPlanMode) "always" goes on in ``acceptEdits``, as the REPL's second choice does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import acp
from acp.schema import AllowedOutcome, PermissionOption

from taskloom.acp.updates import tool_kind, tool_title
from taskloom.errors import TaskloomError, reason
from taskloom.permissions import PromptAnswer, PromptError
from taskloom.permissions.rules import parse_rule
from taskloom.repl.asks import save_allow_rule
from taskloom.settings import find_project_root

if TYPE_CHECKING:
    from taskloom.harness import Harness
    from taskloom.permissions import Decision, PermissionRequest

log = logging.getLogger(__name__)

#: The tool whose approval approves a plan.
PLAN_TOOL = "ExitPlanMode"

#: The options offered, by id: (name shown, kind).
OPTIONS: dict[str, tuple[str, str]] = {
    "allow_once": ("Allow once", "allow_once"),
    "allow_always": ("Allow always", "allow_always"),
    "reject_once": ("Reject", "reject_once"),
    "reject_always": ("Reject always", "reject_always"),
}

Ask = Callable[..., Awaitable[Any]]


def options() -> list[PermissionOption]:
    """The options every request offers."""
    return [
        PermissionOption(option_id=option_id, name=name, kind=kind)  # type: ignore[arg-type]
        for option_id, (name, kind) in OPTIONS.items()
    ]


class AcpPrompter:
    """Asks the ACP client about calls that need approval (a ``PermissionPrompter``).

    Args:
        ask: The connection's ``request_permission``.
        session_id: The ACP session the calls belong to.
        harness: The session (its policy gets the rules "always" adds).
    """

    def __init__(self, ask: Ask, session_id: str, harness: Harness | None = None) -> None:
        self._ask = ask
        self.session_id = session_id
        self.harness = harness

    async def ask(
        self,
        request: PermissionRequest,
        decision: Decision,
        *,
        tool_use_id: str,
        agent_id: str | None,
    ) -> PromptAnswer:
        """Ask the client; its choice as the gate's answer.

        Raises:
            PromptError: The client did not answer (it went away, or refused the request).
        """
        name = request.tool_name
        call = acp.update_tool_call(
            tool_use_id,
            title=tool_title(name, request.input),
            kind=tool_kind(name),
            status="pending",
            raw_input=request.input,
        )
        try:
            response = await self._ask(
                session_id=self.session_id, tool_call=call, options=options()
            )
        except (ConnectionError, acp.RequestError) as exc:
            raise PromptError(f"the editor gave no answer ({exc})") from exc
        outcome = response.outcome
        if not isinstance(outcome, AllowedOutcome):  # cancelled: the turn is being cancelled
            return PromptAnswer(allow=False, message="The user cancelled the turn.", interrupt=True)
        chosen = outcome.option_id
        if chosen not in OPTIONS:
            raise PromptError(f"the editor chose an option that was not offered: {chosen!r}")
        if chosen.startswith("reject"):
            if chosen == "reject_always":
                self._add(decision, request, "deny")
            return PromptAnswer(allow=False, message=f"The user denied this {name} call.")
        if name == PLAN_TOOL:
            return PromptAnswer(
                allow=True, mode="acceptEdits" if chosen == "allow_always" else None
            )
        if chosen == "allow_always":
            self._add(decision, request, "allow")
        return PromptAnswer(allow=True)

    def _add(self, decision: Decision, request: PermissionRequest, behavior: str) -> None:
        """Apply the rule for ``request`` from now on (an allow rule saved, as the REPL does)."""
        if self.harness is None:
            return
        rule = decision.suggestion or request.tool_name
        try:
            if behavior == "allow":
                path = save_allow_rule(find_project_root(self.harness.cwd), rule)
                self.harness.policy.add_rule(parse_rule(rule, "allow", str(path)))
            else:
                self.harness.policy.add_rule(parse_rule(rule, "deny", "the editor"))
        except (TaskloomError, OSError) as exc:  # the answer still holds, once
            log.warning("the rule %s was not kept: %s", rule, reason(exc))


__all__ = ["OPTIONS", "PLAN_TOOL", "AcpPrompter", "options"]
