"""Permission modes and the policy that turns rules and a mode into a decision.

Order of evaluation, whatever order the rules came in:

1. a matching **deny** rule denies (in every mode, bypassPermissions included); so does, for a
   read-only agent's policy (:meth:`PermissionPolicy.read_only`), an edit, an MCP tool not
   declared read-only, or a shell command whose text shows it writes files
   (:mod:`taskloom.permissions.read_only`; this holds even
   when a PreToolUse hook allowed the call); a tool only a person can answer
   (``approval="person"``) asks now (dontAsk: denies);
2. **plan** mode denies edit and execute tools, even ones an allow rule names (fetch tools,
   which change nothing here, go on to ask);
3. **bypassPermissions** allows the rest;
4. a matching **ask** rule asks (dontAsk: denies);
5. a matching **allow** rule allows (or a rule granted for the turn: a skill's or a custom
   command's ``allowed-tools``, see :meth:`PermissionPolicy.grant`);
6. a tool that asks itself (``approval="ask"``) asks (dontAsk: denies); then the mode: read
   and other tools are allowed; acceptEdits allows edits inside the working
   directories; anything else asks (dontAsk: denies).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from taskloom.errors import UsageError
from taskloom.permissions.matchers import find_rule, suggest_rule, tool_matches, uncovered_commands
from taskloom.permissions.rules import (
    Behavior,
    Decision,
    PermissionRequest,
    Rule,
    ToolKind,
    parse_rule,
    split_rule_list,
)


class PermissionMode(StrEnum):
    """How tool calls that no rule decides are treated (Claude Code's mode names)."""

    DEFAULT = "default"
    ACCEPT_EDITS = "acceptEdits"
    PLAN = "plan"
    BYPASS_PERMISSIONS = "bypassPermissions"
    DONT_ASK = "dontAsk"


def parse_mode(value: str, source: str) -> PermissionMode:
    """Parse a mode name.

    Raises:
        UsageError: ``value`` is not a mode; the message lists the valid ones.
    """
    try:
        return PermissionMode(value)
    except ValueError:
        valid = ", ".join(m.value for m in PermissionMode)
        raise UsageError(
            f"unknown permission mode {value!r} in {source}; use one of {valid}"
        ) from None


class PermissionPolicy:
    """Decides whether a tool call may run.

    Args:
        mode: The permission mode.
        rules: Allow, deny and ask rules, in any order.
        project_root: Where ``/path`` rules are based.
        additional_directories: Directories besides the cwd where acceptEdits allows edits.
    """

    def __init__(
        self,
        mode: PermissionMode | str,
        rules: Iterable[Rule],
        project_root: Path,
        *,
        additional_directories: Iterable[Path] = (),
    ) -> None:
        # A one-item list: the copies with_directories makes share it (a mode switched on
        # the session's policy reaches them), with_mode's do not (their mode is their own).
        self._mode = [parse_mode(str(mode), "the permission policy")]
        # The mode plan mode was entered from (shared like the mode): approving a plan goes
        # back to it.
        self._before_plan: list[PermissionMode | None] = [None]
        self.project_root = Path(project_root)
        self.additional_directories = tuple(Path(d) for d in additional_directories)
        # Shared by the copies with_mode makes (a subagent's, a teammate's): a rule the user
        # adds while the session runs ("allow always") holds for all of them at once.
        self._rules: list[Rule] = []
        self._by_behavior: dict[Behavior, list[Rule]] = {"allow": [], "deny": [], "ask": []}
        for rule in rules:
            self.add_rule(rule)
        # This policy's own (never a copy's): allow rules that hold until its turn ends.
        self._granted: list[Rule] = []
        #: Edits and shell commands that write files are denied (kept by every copy).
        self.is_read_only = False

    @property
    def mode(self) -> PermissionMode:
        """The permission mode (shared with the copies :meth:`with_directories` made)."""
        return self._mode[0]

    @property
    def rules(self) -> tuple[Rule, ...]:
        """Every rule, in the order given (then added)."""
        return tuple(self._rules)

    def add_rule(self, rule: Rule) -> None:
        """Apply ``rule`` from now on, here and in every copy made by :meth:`with_mode`."""
        self._rules.append(rule)
        self._by_behavior[rule.behavior].append(rule)

    @property
    def granted(self) -> tuple[Rule, ...]:
        """The allow rules granted for the current turn (:meth:`grant`)."""
        return tuple(self._granted)

    def grant(self, rules: Iterable[Rule]) -> None:
        """Allow ``rules`` without asking until :meth:`end_grants` (the turn's end).

        A skill or custom command's ``allowed-tools`` hold while it runs: for the rest of the
        turn of the agent that ran it, on this policy alone (not its copies: not the agents
        it starts). Deny and ask rules still come first.
        """
        self._granted.extend(rule for rule in rules if rule.behavior == "allow")

    def end_grants(self) -> None:
        """The turn is over: what :meth:`grant` allowed is asked about again."""
        self._granted.clear()

    def switch_mode(self, mode: PermissionMode | str) -> None:
        """Go on under ``mode`` (the program driving the session changed it).

        Raises:
            UsageError: Not a permission mode.
        """
        new = parse_mode(str(mode), "the permission mode")
        if new is PermissionMode.PLAN and self.mode is not PermissionMode.PLAN:
            self._before_plan[0] = self.mode
        self._mode[0] = new

    def leave_plan(self) -> PermissionMode | None:
        """Leave plan mode for the mode it was entered from (default if none); the new mode.

        None, and nothing changes, when the mode is not plan (already left).
        """
        if self.mode is not PermissionMode.PLAN:
            return None
        back = self._before_plan[0] or PermissionMode.DEFAULT
        self._mode[0], self._before_plan[0] = back, None
        return back

    def with_mode(self, mode: PermissionMode | str) -> PermissionPolicy:
        """The same rules, shared, under another mode (a subagent's ``permissionMode``)."""
        copy = PermissionPolicy(
            mode, (), self.project_root, additional_directories=self.additional_directories
        )
        copy._rules, copy._by_behavior = self._rules, self._by_behavior
        copy.is_read_only = self.is_read_only
        return copy

    def with_directories(self, directories: Iterable[Path]) -> PermissionPolicy:
        """The same rules and mode, shared, with more working directories.

        An agent's memory directory is one: acceptEdits allows its edits there. A mode
        switched on this policy (or on the copy) holds for both.
        """
        copy = PermissionPolicy(
            self.mode,
            (),
            self.project_root,
            additional_directories=(*self.additional_directories, *directories),
        )
        copy._rules, copy._by_behavior, copy._mode = self._rules, self._by_behavior, self._mode
        copy._before_plan = self._before_plan
        copy.is_read_only = self.is_read_only
        return copy

    def read_only(self) -> PermissionPolicy:
        """The same rules and mode, shared, for an agent that may not change files.

        Its edits are denied, and so are its shell commands that write files as far as their
        text shows (see :mod:`taskloom.permissions.read_only`, also for what is not caught),
        in every mode and whatever a PreToolUse hook answers (:meth:`read_only_refusal`).
        """
        copy = self.with_directories(())
        copy.is_read_only = True
        return copy

    @classmethod
    def from_settings(
        cls,
        settings: Mapping[str, Any],
        *,
        mode: str | None = None,
        allowed_tools: Sequence[str] = (),
        disallowed_tools: Sequence[str] = (),
        project_root: Path,
        skip_permissions: bool = False,
        add_dirs: Sequence[str | Path] = (),
    ) -> PermissionPolicy:
        """Build the policy from merged settings and the CLI flags.

        Args:
            settings: Merged settings; ``permissions.allow/deny/ask``, ``defaultMode``,
                ``additionalDirectories`` and ``disableBypassPermissionsMode`` are read.
            mode: ``--permission-mode``; None falls back to ``permissions.defaultMode``.
            allowed_tools: ``--allowedTools`` values, each one or more rules separated by
                commas or spaces outside parentheses.
            disallowed_tools: ``--disallowedTools`` values, likewise.
            project_root: Where ``/path`` rules and relative additional directories are based.
            skip_permissions: ``--dangerously-skip-permissions``: bypassPermissions mode.
            add_dirs: ``--add-dir`` values: more additional directories (relative to the cwd).

        Raises:
            UsageError: A malformed rule or mode, a settings value of the wrong type, or
                bypass requested while ``disableBypassPermissionsMode`` is ``"disable"``.
        """
        perms = settings.get("permissions", {})
        if not isinstance(perms, Mapping):
            raise UsageError("settings: 'permissions' must be a JSON object")
        rules: list[Rule] = []
        behaviors: tuple[Behavior, ...] = ("allow", "deny", "ask")
        for behavior in behaviors:
            source = f"settings permissions.{behavior}"
            rules += [parse_rule(text, behavior, source) for text in _strings(perms, behavior)]
        flags: tuple[tuple[Sequence[str], Behavior, str], ...] = (
            (allowed_tools, "allow", "--allowedTools"),
            (disallowed_tools, "deny", "--disallowedTools"),
        )
        for values, behavior, source in flags:
            for value in values:
                rules += [parse_rule(t, behavior, source) for t in split_rule_list(value)]
        chosen = cls._choose_mode(perms, mode, skip_permissions)
        extra = [
            project_root / Path(d).expanduser() for d in _strings(perms, "additionalDirectories")
        ]
        extra += [Path(d).expanduser().absolute() for d in add_dirs]
        return cls(chosen, rules, project_root, additional_directories=extra)

    @staticmethod
    def _choose_mode(
        perms: Mapping[str, Any], mode: str | None, skip_permissions: bool
    ) -> PermissionMode:
        if skip_permissions:
            chosen = PermissionMode.BYPASS_PERMISSIONS
            source = "--dangerously-skip-permissions"
        elif mode is not None:
            chosen, source = parse_mode(mode, "--permission-mode"), "--permission-mode"
        else:
            default = perms.get("defaultMode", PermissionMode.DEFAULT.value)
            if not isinstance(default, str):
                raise UsageError("settings: permissions.defaultMode must be a string")
            source = "settings permissions.defaultMode"
            chosen = parse_mode(default, source)
        if (
            chosen is PermissionMode.BYPASS_PERMISSIONS
            and perms.get("disableBypassPermissionsMode") == "disable"
        ):
            raise UsageError(
                f"bypassPermissions mode (from {source}) is disabled by the settings "
                "permissions.disableBypassPermissionsMode"
            )
        return chosen

    def decide(self, request: PermissionRequest) -> Decision:
        """Decide one tool call (see the module docstring for the order)."""
        name = request.tool_name
        root = self.project_root
        deny = find_rule(self._by_behavior["deny"], request, root, every_part=False)
        if deny is not None:
            return Decision(
                "deny",
                f"Permission to use {name} has been denied by the rule {deny} ({deny.source}).",
                deny,
                name,
            )
        refused = self.read_only_refusal(request)
        if refused is not None:
            return Decision("deny", refused, None, name)
        if request.approval == "person":
            return self._person(name)
        if self.mode is PermissionMode.PLAN and request.kind in ("edit", "execute"):
            doing = "edit files" if request.kind == "edit" else "run commands"
            return Decision(
                "deny",
                f"{name} is not allowed in plan mode: plan mode may read and plan but not "
                f"{doing}. Present the plan and wait for it to be approved.",
                None,
                name,
            )
        if self.mode is PermissionMode.BYPASS_PERMISSIONS:
            return Decision("allow", "bypassPermissions mode", None, name)
        ask = find_rule(self._by_behavior["ask"], request, root, every_part=False)
        if ask is not None:
            return self._ask(request, f"the rule {ask} ({ask.source}) requires approval", ask)
        allowing = self._by_behavior["allow"]
        if self._granted:
            allowing = [*allowing, *self._granted]
        allow = find_rule(allowing, request, root, every_part=True)
        if allow is not None:
            return Decision("allow", f"allowed by the rule {allow} ({allow.source})", allow, name)
        if request.approval == "ask":
            return self._ask(request, f"{name} asks for approval", None)
        if request.kind == "read":
            return Decision("allow", "read-only tools need no approval", None, name)
        if request.kind == "other":
            return Decision("allow", f"{name} needs no approval", None, name)
        if (
            self.mode is PermissionMode.ACCEPT_EDITS
            and request.kind == "edit"
            and request.target is not None
            and self._in_working_dirs(request.target, request.cwd)
        ):
            return Decision(
                "allow", "acceptEdits mode allows edits in the working directories", None, name
            )
        return self._ask(request, f"{name} needs approval in {self.mode.value} mode", None)

    def headless(self, decision: Decision) -> Decision:
        """Same as the module-level :func:`headless`, for callers holding a policy."""
        return headless(decision)

    def hides(self, tool_name: str, kind: ToolKind) -> bool:
        """Whether a deny rule without content covers the whole tool.

        Claude Code leaves such tools out of what the model is offered; callers building the
        tool list can do the same.
        """
        probe = PermissionRequest(tool_name, kind, None, self.project_root)
        return any(r.content is None and tool_matches(r, probe) for r in self._by_behavior["deny"])

    def read_only_refusal(self, request: PermissionRequest) -> str | None:
        """Why a read-only agent may not make ``request``; None if it may, or is not read-only.

        This holds whatever else says yes: a rule, the mode, a PreToolUse hook's "allow".
        """
        return self._written(request) if self.is_read_only else None

    @staticmethod
    def _written(request: PermissionRequest) -> str | None:
        """Why a read-only agent may not make ``request`` (it would change files), if so."""
        from taskloom.permissions.matchers import SHELL_TOOLS
        from taskloom.permissions.read_only import shell_writes

        name = request.tool_name
        if request.kind == "edit":
            return f"{name} is not allowed: this agent is read-only and may not change files."
        if name.startswith("mcp__") and not request.declared_read_only:
            return (
                f"{name} is not allowed: this agent is read-only, and the tool's MCP server "
                "does not declare it read-only (readOnlyHint)."
            )
        why = shell_writes(request) if name in SHELL_TOOLS else None
        if why is None:
            return None
        return (
            f"Permission to use {name} has been denied: this agent is read-only, and {why}. "
            "Run only commands that read and test, and do not try to change files another way."
        )

    def _person(self, name: str) -> Decision:
        """The decision on a tool only someone asked can answer: ask, or in dontAsk deny."""
        if self.mode is PermissionMode.DONT_ASK:
            return Decision(
                "deny",
                f"{name} needs an answer from the user, and dontAsk mode denies instead of asking.",
                None,
                name,
            )
        return Decision("ask", f"{name} needs an answer from the user", None, name)

    def _ask(self, request: PermissionRequest, reason: str, rule: Rule | None) -> Decision:
        name = request.tool_name
        suggestion = None
        if rule is None:  # an allow rule would help; after an ask rule, it would not
            uncovered = uncovered_commands(self._by_behavior["allow"], request)
            suggestion = suggest_rule(request, uncovered[0] if uncovered else None)
        if self.mode is PermissionMode.DONT_ASK:
            hint = f" Allow it with the rule {suggestion}." if suggestion else ""
            return Decision(
                "deny",
                f"Permission to use {name} has been denied: {reason}, and dontAsk mode denies "
                f"instead of asking.{hint}",
                rule,
                name,
                suggestion,
            )
        return Decision("ask", reason[:1].upper() + reason[1:], rule, name, suggestion)

    def _in_working_dirs(self, target: str, cwd: Path) -> bool:
        # The file as named and the file a symlink leads to must both be inside: a link in
        # the project pointing at ~/.bashrc is not an edit "in the working directories".
        literal = os.path.normpath(os.path.join(cwd, target))
        return all(
            any(
                path == base or path.startswith(base.rstrip("/") + "/")
                for base in {
                    candidate
                    for directory in (cwd, *self.additional_directories)
                    for candidate in (os.path.normpath(directory), os.path.realpath(directory))
                }
            )
            for path in (literal, os.path.realpath(literal))
        )


def headless(decision: Decision) -> Decision:
    """Turn an ``ask`` into a ``deny`` for a run that has nobody to ask.

    Other decisions are returned unchanged. The message names the tool and how to allow it,
    like Claude Code's print mode.
    """
    if decision.behavior != "ask":
        return decision
    name = decision.tool_name or "this tool"
    if decision.rule is not None:
        reason = (
            f"Permission to use {name} has been denied because the ask rule {decision.rule} "
            f"({decision.rule.source}) requires approval and taskloom is running in "
            "non-interactive mode. Remove the rule, or pass --dangerously-skip-permissions."
        )
    else:
        suggestion = decision.suggestion or name
        reason = (
            f"Permission to use {name} has been denied because taskloom is running in "
            f'non-interactive mode. Allow it with --allowedTools "{suggestion}" or a '
            "permissions.allow rule in settings, or pass --dangerously-skip-permissions."
        )
    return Decision("deny", reason, decision.rule, decision.tool_name, decision.suggestion)


def _strings(perms: Mapping[str, Any], key: str) -> list[str]:
    value = perms.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"settings: permissions.{key} must be a list of strings")
    return value
