"""Hook configuration in Claude Code's settings format, parsed into typed entries.

The ``hooks`` setting maps an event name to a list of matcher entries, each holding command
hooks::

    {"hooks": {"PreToolUse": [{"matcher": "Bash|Write",
                               "hooks": [{"type": "command", "command": "...", "timeout": 30}]}]}}

Parsing never fails: a malformed piece is skipped with a warning on the ``taskloom.hooks``
logger naming the event and index, because one bad line in a user's settings must not take
every other hook (or the session) down with it.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from taskloom._dataclass import dataclass
from taskloom.errors import SettingsError, TaskloomError, UsageError
from taskloom.permissions.matchers import find_rule
from taskloom.permissions.rules import PermissionRequest, Rule, parse_rule

_log = logging.getLogger("taskloom.hooks")

#: Seconds a hook may run when its entry names no timeout (Claude Code's default).
DEFAULT_TIMEOUT_S = 60.0


class HookEvent(enum.StrEnum):
    """The events a hook can be attached to; values are Claude Code's event names."""

    PRE_TOOL_USE = "PreToolUse"
    POST_TOOL_USE = "PostToolUse"
    POST_TOOL_USE_FAILURE = "PostToolUseFailure"
    SUBAGENT_START = "SubagentStart"
    SUBAGENT_STOP = "SubagentStop"
    TASK_CREATED = "TaskCreated"
    TASK_COMPLETED = "TaskCompleted"
    TEAMMATE_IDLE = "TeammateIdle"
    PERMISSION_REQUEST = "PermissionRequest"
    STOP = "Stop"
    SESSION_START = "SessionStart"
    SESSION_END = "SessionEnd"
    USER_PROMPT_SUBMIT = "UserPromptSubmit"
    WORKTREE_CREATE = "WorktreeCreate"
    WORKTREE_REMOVE = "WorktreeRemove"
    NOTIFICATION = "Notification"
    PRE_COMPACT = "PreCompact"
    POST_COMPACT = "PostCompact"


#: Events whose matcher is tested against the tool name.
TOOL_EVENTS = frozenset(
    {
        HookEvent.PRE_TOOL_USE,
        HookEvent.POST_TOOL_USE,
        HookEvent.POST_TOOL_USE_FAILURE,
        HookEvent.PERMISSION_REQUEST,
    }
)
#: Events whose matcher is tested against the subagent's type.
AGENT_EVENTS = frozenset({HookEvent.SUBAGENT_START, HookEvent.SUBAGENT_STOP})
#: Events whose matcher is tested against the notification's type (``permission_prompt``).
NOTIFICATION_EVENTS = frozenset({HookEvent.NOTIFICATION})
#: Events whose matcher is tested against what started it: ``manual`` or ``auto`` for the
#: compaction events, the ``source`` (``startup``, ``resume``, ``compact``) for SessionStart.
TRIGGER_EVENTS = frozenset({HookEvent.PRE_COMPACT, HookEvent.POST_COMPACT, HookEvent.SESSION_START})

# A matcher made only of names and ``|`` is a list of exact names, not a regex: ``Edit`` must
# not match ``NotebookEdit`` or ``MultiEdit`` by accident.
_NAME_LIST = re.compile(r"[A-Za-z0-9_\-|]+")


@dataclass(frozen=True, slots=True)
class CommandHook:
    """One shell command to run on an event.

    Attributes:
        command: The command line, run with ``sh -c``.
        timeout: Seconds before its process tree is killed.
        background: ``async``: it runs in the background; nothing waits for it, and its
            ``systemMessage`` and ``additionalContext`` reach the model with its next turn.
        rewake: ``asyncRewake`` (implies ``background``): its exit 2 wakes the model with
            its stderr (its stdout when stderr is empty).
        rewake_message: ``rewakeMessage``: what the model reads before that output.
        rewake_summary: ``rewakeSummary``: the one line the user is shown for the wake.
        condition: ``if``: a permission rule (``Bash(git commit:*)``) the tool call must
            match for it to run; on events other than tool events it never runs.
    """

    command: str
    timeout: float = DEFAULT_TIMEOUT_S
    background: bool = False
    rewake: bool = False
    rewake_message: str = ""
    rewake_summary: str = ""
    condition: Rule | None = None

    @property
    def key(self) -> str:
        """What makes two hooks the same one (run once when several entries match).

        The same command under two ``if`` rules is two hooks: each runs when its rule holds.
        """
        return self.command if self.condition is None else f"{self.command}\0if {self.condition}"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The tool call a tool event is about, for the hooks' ``if`` rules.

    Attributes:
        request: The call as the permission rules see it.
        project_root: What rules' ``/path`` patterns are relative to.
    """

    request: PermissionRequest
    project_root: Path

    def matches(self, rule: Rule) -> bool:
        """Whether ``rule`` matches the call, as a deny rule would (any part of a command)."""
        return find_rule([rule], self.request, self.project_root, every_part=False) is not None


@dataclass(frozen=True, slots=True)
class CallbackHook:
    """A function of the program driving the session, called by its id.

    ``claude-agent-sdk`` registers its Python hooks this way (``initialize``); the session's
    :class:`HookCaller` calls them, and their answer is read as a command hook's JSON output.

    Attributes:
        callback_id: The id the program gave it (``hook_0``).
        timeout: Seconds to wait for its answer.
        block_on_failure: A call that fails (an error, no answer in time, no output) blocks
            the action, as a hook exiting 2 does (``onFailure: "block"``); else it counts as
            no decision.
    """

    callback_id: str
    timeout: float = DEFAULT_TIMEOUT_S
    block_on_failure: bool = False

    @property
    def key(self) -> str:
        """What makes two hooks the same one."""
        return f"callback {self.callback_id}"


class CallerGone(TaskloomError):
    """The program that registered a hook function can no longer be asked (its input ended).

    A hook that gates what happens (PreToolUse, PermissionRequest, UserPromptSubmit) then
    blocks: the program's rules cannot be checked, and running unchecked would bypass them.
    """


class HookCaller(Protocol):
    """Calls the program's hook functions (:class:`CallbackHook`)."""

    async def call(
        self, callback_id: str, data: dict[str, Any], tool_use_id: str | None
    ) -> dict[str, Any]:
        """Call one with the event's input; its output, as a command hook prints it.

        Raises:
            CallerGone: The program can no longer be asked.
            TaskloomError: The program answered with an error, or not at all.
        """
        ...


Hook = CommandHook | CallbackHook


@dataclass(frozen=True, slots=True)
class HookMatcher:
    """A matcher entry: which targets it applies to and the hooks it runs.

    Attributes:
        matcher: The matcher as written (empty or ``*``: everything).
        hooks: The command hooks of the entry, in order.
    """

    matcher: str
    hooks: tuple[Hook, ...]
    _test: Callable[[str], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Compile the matcher once (see :func:`compile_matcher`).

        Raises:
            re.error: The matcher is neither a name list nor a valid regular expression.
        """
        object.__setattr__(self, "_test", compile_matcher(self.matcher))

    def matches(self, target: str | None) -> bool:
        """Whether this entry applies to ``target`` (None matches only match-all entries)."""
        if target is None:
            return self.matcher.strip() in ("", "*")
        return self._test(target)


def compile_matcher(matcher: str) -> Callable[[str], bool]:
    """Turn a matcher string into a predicate on a tool name or agent type.

    Empty or ``*`` matches everything; ``Name`` or ``A|B`` matches those exact names; anything
    else is a regular expression that must match the whole target.

    Raises:
        re.error: The matcher is an invalid regular expression.
    """
    text = matcher.strip()
    if text in ("", "*"):
        return lambda _: True
    if _NAME_LIST.fullmatch(text):
        names = frozenset(part for part in text.split("|") if part)
        return names.__contains__
    pattern = re.compile(text)
    return lambda target: pattern.fullmatch(target) is not None


@dataclass(frozen=True, slots=True)
class HookConfig:
    """Every configured hook, by event.

    Attributes:
        events: Matcher entries per event, in settings order.
    """

    events: Mapping[HookEvent, tuple[HookMatcher, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    caller: HookCaller | None = field(default=None, compare=False)

    @classmethod
    def from_callbacks(cls, value: Any, caller: HookCaller) -> HookConfig:
        """The hooks a program registered by id (``claude-agent-sdk``'s ``initialize``).

        ``value`` maps event names to ``[{"matcher": M, "hookCallbackIds": [ID...],
        "timeout": S}]``; events taskloom does not run are skipped with a warning.

        Raises:
            ValueError: ``value`` is not in that shape.
        """
        if value is None:
            return cls(caller=caller)
        if not isinstance(value, Mapping):
            raise ValueError(f"hooks must be an object of events, not {type(value).__name__}")
        events: dict[HookEvent, tuple[HookMatcher, ...]] = {}
        for name, entries in value.items():
            try:
                event = HookEvent(name)
            except ValueError:
                _log.warning("the program's hooks: event %r is not run by taskloom", name)
                continue
            if not isinstance(entries, list):
                raise ValueError(f"hooks.{name} must be a list of matcher entries")
            parsed = []
            for entry in entries:
                ids = entry.get("hookCallbackIds") if isinstance(entry, Mapping) else None
                if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                    raise ValueError(f"hooks.{name}: each entry needs hookCallbackIds")
                timeout = entry.get("timeout")
                seconds = float(timeout) if isinstance(timeout, int | float) else DEFAULT_TIMEOUT_S
                # Anything but "continue" (the default) blocks: a word this version does not
                # know must not turn a gate the program asked for into no gate.
                block = entry.get("onFailure", "continue") != "continue"
                hooks = tuple(CallbackHook(i, seconds, block) for i in ids)
                parsed.append(HookMatcher(str(entry.get("matcher") or ""), hooks))
            events[event] = tuple(parsed)
        return cls(MappingProxyType(events), caller)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> HookConfig:
        """Parse the ``hooks`` key of merged settings (see :func:`taskloom.settings.load_settings`).

        ``disableAllHooks: true`` yields an empty configuration, as in Claude Code.
        """
        if settings.get("disableAllHooks") is True:
            return cls()
        return cls.parse(settings.get("hooks"), typos_fail=True)

    @classmethod
    def parse(cls, value: Any, *, source: str = "hooks", typos_fail: bool = False) -> HookConfig:
        """Parse a ``hooks`` value (the settings key, or an agent definition's own hooks).

        Args:
            value: The mapping of event names to matcher entries; None means no hooks.
            source: Names the origin in warnings (e.g. an agent file).
            typos_fail: Raise for an event name that looks like a misspelt known one
                (``PreTooluse``), instead of skipping it with a warning: a guard hook that
                never runs fails open. Names of events we do not run are still skipped.

        Raises:
            SettingsError: With ``typos_fail``, an event name close to a known one.
        """
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            _log.warning("%s: expected an object of events, got %s", source, type(value).__name__)
            return cls()
        events: dict[HookEvent, tuple[HookMatcher, ...]] = {}
        for name, entries in value.items():
            try:
                event = HookEvent(name)
            except ValueError:
                guess = _misspelt(name) if typos_fail else None
                if guess is not None:
                    raise SettingsError(
                        f"settings {source}: unknown hook event {name!r}; did you mean "
                        f"{guess!r}? (a hook under a misspelt event never runs)"
                    ) from None
                _log.warning("%s: unknown hook event %r skipped", source, name)
                continue
            parsed = _parse_entries(event, entries, source)
            if parsed:
                events[event] = events.get(event, ()) + parsed
        return cls(MappingProxyType(events))

    def merged(self, other: HookConfig) -> HookConfig:
        """Return a configuration running this one's hooks and then ``other``'s.

        Used to add an agent definition's own hooks for the duration of the agent's run.
        """
        events = dict(self.events)
        for event, entries in other.events.items():
            events[event] = events.get(event, ()) + entries
        return HookConfig(MappingProxyType(events), self.caller or other.caller)

    def matching(
        self, event: HookEvent | str, target: str | None = None, call: ToolCall | None = None
    ) -> list[Hook]:
        """Return the hooks to run for ``event``, in order, identical commands once.

        Args:
            event: The event (an unknown name has no hooks).
            target: The tool name (tool events), agent type (Subagent events),
                notification type (Notification) or trigger (PreCompact, PostCompact,
                SessionStart: see :data:`TRIGGER_EVENTS`); ignored by other events, whose
                matchers are not consulted.
            call: The tool call of a tool event, which a hook's ``if`` rule must match;
                None keeps every hook with one (the question is then whether any may run).
        """
        try:
            key = HookEvent(event)
        except ValueError:
            return []
        use_matcher = key in TOOL_EVENTS or key in AGENT_EVENTS or key in NOTIFICATION_EVENTS
        use_matcher = use_matcher or key in TRIGGER_EVENTS
        found: dict[str, Hook] = {}
        for entry in self.events.get(key, ()):
            if use_matcher and not entry.matches(target):
                continue
            for hook in entry.hooks:
                if not _applies(hook, key, call):
                    continue
                # Claude Code runs an identical command once even if several entries match.
                found.setdefault(hook.key, hook)
        return list(found.values())

    def __bool__(self) -> bool:
        """True when at least one hook is configured."""
        return any(self.events.values())


def _applies(hook: Hook, event: HookEvent, call: ToolCall | None) -> bool:
    """Whether ``hook``'s ``if`` rule (if any) lets it run for this event and call."""
    if not isinstance(hook, CommandHook) or hook.condition is None:
        return True
    if event not in TOOL_EVENTS:
        return False  # Claude Code: on other events a hook with `if` never runs
    return call is None or call.matches(hook.condition)


#: Claude Code events that taskloom does not run: their hooks are skipped, never "misspelt".
_OTHER_EVENTS = frozenset({"PostToolBatch"})


def _misspelt(name: str) -> str | None:
    """The known event ``name`` is probably a misspelling of, or None."""
    if name in _OTHER_EVENTS:
        return None
    import difflib  # only on this rare path

    known = {event.value.lower(): event.value for event in HookEvent}
    close = difflib.get_close_matches(name.lower(), list(known), n=1, cutoff=0.85)
    return known[close[0]] if close else None


def _parse_entries(event: HookEvent, entries: Any, source: str) -> tuple[HookMatcher, ...]:
    if not isinstance(entries, list):
        _log.warning("%s.%s: expected a list of entries, skipped", source, event)
        return ()
    out: list[HookMatcher] = []
    for index, entry in enumerate(entries):
        where = f"{source}.{event}[{index}]"
        if not isinstance(entry, Mapping):
            _log.warning("%s: entry is not an object, skipped", where)
            continue
        matcher = entry.get("matcher", "")
        if matcher is None:
            matcher = ""
        if not isinstance(matcher, str):
            _log.warning("%s: matcher is not a string, skipped", where)
            continue
        raw_hooks = entry.get("hooks")
        if not isinstance(raw_hooks, list):
            _log.warning("%s: 'hooks' is not a list, skipped", where)
            continue
        parsed = (_parse_hook(raw, f"{where}.hooks[{i}]") for i, raw in enumerate(raw_hooks))
        hooks = [hook for hook in parsed if hook is not None]
        if not hooks:
            continue
        try:
            out.append(HookMatcher(matcher, tuple(hooks)))
        except re.error as exc:
            _log.warning("%s: invalid matcher %r (%s), skipped", where, matcher, exc)
    return tuple(out)


def _parse_hook(raw: Any, where: str) -> CommandHook | None:
    if not isinstance(raw, Mapping):
        _log.warning("%s: hook is not an object, skipped", where)
        return None
    kind = raw.get("type")
    if kind in _UNBUILT_TYPES:
        prompt = raw.get("prompt")
        what = prompt if isinstance(prompt, str) else ""
        _log.warning(
            "%s: %r hooks are not run by taskloom (only 'command' hooks are); skipped: %s",
            where, kind, what[:80] or "(no prompt)",
        )  # fmt: skip
        return None
    if kind != "command":
        _log.warning("%s: unsupported hook type %r, skipped", where, kind)
        return None
    command = raw.get("command")
    if not isinstance(command, str) or not command.strip():
        _log.warning("%s: 'command' must be a non-empty string, skipped", where)
        return None
    timeout = raw.get("timeout", DEFAULT_TIMEOUT_S)
    # bool is an int subclass; `"timeout": true` is a mistake, not one second.
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        _log.warning("%s: 'timeout' must be a positive number of seconds, skipped", where)
        return None
    flags = {name: raw.get(name, False) for name in ("async", "asyncRewake")}
    texts = {name: raw.get(name, "") for name in ("rewakeMessage", "rewakeSummary")}
    wrong = [n for n, v in flags.items() if not isinstance(v, bool)]
    wrong += [n for n, v in texts.items() if not isinstance(v, str)]
    if wrong:
        # A guard meant to run in the background must not block the session, nor the reverse.
        _log.warning("%s: %s of the wrong type, skipped: %s", where, ", ".join(wrong), command)
        return None
    valid, condition = _condition(raw.get("if"), where)
    if not valid:
        return None
    return CommandHook(
        command,
        float(timeout),
        background=flags["async"] or flags["asyncRewake"],
        rewake=flags["asyncRewake"],
        rewake_message=texts["rewakeMessage"],
        rewake_summary=texts["rewakeSummary"],
        condition=condition,
    )


#: Hook types Claude Code runs that taskloom does not: their hooks are skipped, said so.
_UNBUILT_TYPES = frozenset({"prompt", "agent", "http"})


def _condition(value: Any, where: str) -> tuple[bool, Rule | None]:
    """(valid, a hook's ``if`` rule or None when it has none); a malformed one is warned of."""
    if value is None:
        return True, None
    if not isinstance(value, str) or not value.strip():
        _log.warning("%s: 'if' must be a permission rule such as 'Bash(git *)', skipped", where)
        return False, None
    try:
        return True, parse_rule(value, "allow", f"{where}.if")
    except UsageError as exc:
        # Run unconditionally it would do what its author said it must not: skip it.
        _log.warning("%s: %s; the hook is skipped", where, exc)
        return False, None
