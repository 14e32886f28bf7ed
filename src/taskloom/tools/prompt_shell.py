"""Shell commands in a skill's or custom command's text, run before the model is given it.

As Claude Code does it: in the text (its arguments already put in), each ``!`command```
(``!`` at the start of a line or after whitespace) and each fenced block opened with
````` ```! ````` is run, in the order written, and replaced by its output; the model sees the
output, never the command. The scan is of plain text: a pattern inside a Markdown code span
or fence is run too.

Each command must be allowed outright by the permission rules, with the command's (or
skill's) ``allowed-tools`` added to them (``Bash(git status:*)``): a command that would ask is
refused, never asked about. It runs as a Bash tool call does (:func:`taskloom.tasks.shell.
run_shell`, a task of the runtime: killed when the caller is cancelled), at most the Bash
tool's default timeout, and its output (stdout and stderr as written, stripped) is cut at the
Bash tool's output limit with a note saying where the rest is.

A refused, failing (a non-zero exit that is no answer, see
:mod:`taskloom.tools._exit_meaning`) or timed-out command makes the whole command fail, as in
Claude Code: nothing is sent to the model, and :class:`PromptShellError` says which pattern
and why, in Claude Code's words (``Shell command permission check failed for pattern "…":
…``, ``Shell command failed for pattern "…": …``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.errors import UserError
from taskloom.permissions.rules import PermissionRequest
from taskloom.process.shell_env import shell_env
from taskloom.skills.expand import allow_rules
from taskloom.tasks.output import read_delta
from taskloom.tasks.shell import DEFAULT_TIMEOUT_S, ShellOutcome, run_shell
from taskloom.tasks.types import TaskStatus
from taskloom.tools._exit_meaning import exit_meaning
from taskloom.tools.bash import max_output_chars

if TYPE_CHECKING:
    from taskloom.permissions.policy import PermissionPolicy
    from taskloom.skills.catalog import PromptCommand
    from taskloom.tasks.runtime import TaskRuntime

#: A fenced block opened with ```` ```! ````: its body is one script.
_BLOCK = r"```!\s*\n?(?P<block>[\s\S]*?)\n?```"
#: ``!`command``` at the start of a line or after whitespace (not ``$!`` nor ``a!`b```).
_INLINE = r"(?<!\S)!`(?P<inline>[^`]+)`"
#: Either, scanned left to right (a block's inside is not scanned again).
PATTERN = re.compile(f"{_BLOCK}|{_INLINE}")
#: Seconds one command may run before it is killed (the Bash tool's default timeout).
TIMEOUT_S = DEFAULT_TIMEOUT_S


class PromptShellError(UserError):
    """A shell command in a skill's or command's text was refused or failed; nothing was sent."""


@dataclass(frozen=True, slots=True)
class ShellPlace:
    """Where, for whom and under which rules a text's shell commands run.

    Attributes:
        runtime: The session's task runtime (each command is a shell task of it).
        owner: The agent (or session) the commands run for.
        cwd: Where they run.
        rules_base: The directory permission rules are relative to.
        policy: The permission policy (None: everything is allowed).
        settings: Effective settings (the Bash tool's output limit is read from them).
        agent_id: The subagent they run for, None on the main thread.
    """

    runtime: TaskRuntime
    owner: str
    cwd: Path
    rules_base: Path
    policy: PermissionPolicy | None
    settings: Mapping[str, Any]
    agent_id: str | None = None


def has_commands(text: str) -> bool:
    """Whether ``text`` holds a shell command to run."""
    return any(_script(m) for m in PATTERN.finditer(text))


async def run_prompt_commands(text: str, command: PromptCommand, place: ShellPlace) -> str:
    """``text`` with each of its shell commands replaced by its output (see the module).

    Args:
        text: ``command``'s instructions, its arguments put in.
        command: The skill or custom command (its ``allowed-tools`` are allowed here).
        place: Where and under which rules they run.

    Raises:
        PromptShellError: A command was refused, failed or timed out.
    """
    parts: list[str] = []
    end = 0
    for found in PATTERN.finditer(text):
        script = _script(found)
        if not script:
            continue
        refused = _refusal(script, command, place)
        if refused is not None:
            raise PromptShellError(
                f'Shell command permission check failed for pattern "{found.group(0)}": {refused}'
            )
        parts += [text[end : found.start()], await _run(script, found.group(0), command, place)]
        end = found.end()
    return "".join([*parts, text[end:]])


def _script(found: re.Match[str]) -> str:
    return (found.group("block") or found.group("inline") or "").strip()


def _refusal(script: str, command: PromptCommand, place: ShellPlace) -> str | None:
    """Why the rules do not allow ``script`` outright; None when they do."""
    policy = place.policy
    if policy is None:
        return None
    # A copy sharing the rules: the command's allowed-tools count here without being granted
    # to the turn before the text is known to load.
    probe = policy.with_mode(policy.mode)
    probe.grant([*policy.granted, *allow_rules(command)])
    request = PermissionRequest("Bash", "execute", script, place.rules_base, {"command": script})
    decision = probe.decide(request)
    if decision.behavior == "allow":
        return None
    if decision.behavior == "deny":
        return decision.reason
    hint = decision.suggestion or "Bash"
    return (
        f"This command requires approval (allow it with {hint} in the allowed-tools of "
        f"{command.path} or a permissions.allow rule)"
    )


async def _run(script: str, pattern: str, command: PromptCommand, place: ShellPlace) -> str:
    """The output that replaces ``pattern``.

    Raises:
        PromptShellError: The command failed or timed out.
    """
    limit = max_output_chars(dict(place.settings))
    if isinstance(limit, str):
        raise PromptShellError(f'Shell command failed for pattern "{pattern}": {limit}')
    outcome = await run_shell(
        place.runtime,
        script,
        owner=place.owner,
        description=f"!`{script}` in /{command.name}",
        timeout=TIMEOUT_S,
        cwd=place.cwd,
        env=shell_env(home=place.runtime.home),
        agent_id=place.agent_id,
        # A read-only agent's (a skill it runs): sandboxed as its Bash commands are.
        sandboxed=place.policy is not None and place.policy.is_read_only,
    )
    output = _output(outcome, limit)
    if outcome.timed_out:
        raise PromptShellError(
            f'Shell command interrupted for pattern "{pattern}": '
            f"[Command timed out after {TIMEOUT_S:g}s]"
        )
    if outcome.status == TaskStatus.KILLED:
        raise PromptShellError(
            f'Shell command interrupted for pattern "{pattern}": [Command interrupted]'
        )
    code = outcome.exit_code
    if code != 0 and exit_meaning(script, code, outcome.stderr_written) is None:
        shown = "\n".join(part for part in [output, f"[Exit code {code}]"] if part)
        raise PromptShellError(f'Shell command failed for pattern "{pattern}": {shown}')
    return output


def _output(outcome: ShellOutcome, limit: int) -> str:
    """The command's output, stripped, cut at ``limit`` characters with a note saying so."""
    # At most 4 bytes a character past the limit: never the whole of a huge output.
    data, _ = read_delta(outcome.output_file, 0, 4 * (limit + 1))
    text = data.decode("utf-8", "replace").strip()
    if len(text) <= limit:
        return text
    return (
        f"{text[:limit]}\n[output cut at {limit:,} characters; all of it is in "
        f"{outcome.output_file}]"
    )


__all__ = [
    "PATTERN",
    "TIMEOUT_S",
    "PromptShellError",
    "ShellPlace",
    "has_commands",
    "run_prompt_commands",
]
