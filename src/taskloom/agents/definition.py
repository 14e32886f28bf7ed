"""What an agent is: :class:`AgentDefinition`, and how one is read from frontmatter or JSON.

The fields follow Claude Code's agent files (``.claude/agents/*.md``): the frontmatter keys are
Claude Code's camelCase names (``disallowedTools``, ``permissionMode``, ...); snake_case and
kebab-case spellings are accepted too. The markdown body is the agent's system prompt.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any, TypeVar

from taskloom._dataclass import dataclass
from taskloom.permissions.policy import PermissionMode
from taskloom.permissions.rules import split_rule_list

#: Where definitions come from, lowest precedence first; a later source wins by name.
AGENT_SOURCES = (
    "built-in",
    "plugin",
    "userSettings",
    "projectSettings",
    "flagSettings",
    "policySettings",
)

MODEL_ALIASES = ("sonnet", "opus", "haiku", "inherit")
ISOLATION_MODES = ("worktree", "remote")
MEMORY_SCOPES = ("user", "project", "local")


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """One agent type: who it is, when to use it, what it may do, and its system prompt.

    Attributes:
        agent_type: The unique name (``name`` in a file); dots and dashes are fine.
        when_to_use: The ``description``, shown to the model choosing an agent.
        system_prompt: The file body (``prompt`` in ``--agents`` JSON).
        source: One of :data:`AGENT_SOURCES`.
        path: The file the definition came from; None for built-ins and ``--agents``.
        tools: Allowed tools; None (or ``("*",)``) means all, ``()`` means none at all.
        disallowed_tools: Tools removed from whatever ``tools`` allows.
        model: ``sonnet``, ``opus``, ``haiku``, ``inherit`` or a full model id; None means
            the default subagent model.
        color: The UI colour, kept as written (unknown names are not an error).
        permission_mode: A permission mode name (``default``, ``acceptEdits``, ``plan``, ...).
        max_turns: The most model turns the agent may take.
        mcp_servers: Server names, or ``{name: config}`` objects, for the agent alone.
        hooks: Hook settings for the agent alone.
        memory: Persistent memory scope: ``user``, ``project`` or ``local``.
        background: Always run in the background.
        isolation: ``worktree`` or ``remote``.
        skills: Skills to preload.
        effort: Reasoning effort (``low``, ``medium``, ``high``, ``max`` or a number).
        initial_prompt: Text sent as the first user turn when the agent starts a session.
        omit_claude_md: Leave CLAUDE.md out of the context (saves tokens for search agents).
        required_mcp_servers: MCP servers that must be available for the agent to be offered.
        tokens: The token budget of the agent and every agent it starts.
        read_only: It may not change files: no edit, and no shell command that writes as far
            as its text shows (the ``readOnly`` field, ours; see
            :mod:`taskloom.permissions.read_only`). The ``verification`` agent is.
        allowed_agent_types: The agent types it may start: the ``allowedAgentTypes`` field
            and the types of ``Agent(a, b)`` entries in ``tools``, together; None when
            neither is given (any type, where it may start agents at all). Naming types
            gives the agent the Agent tool even where agents may not start agents (the
            setting ``allowNestedAgents``); an empty list takes it away.
    """

    agent_type: str
    when_to_use: str
    system_prompt: str = ""
    source: str = "built-in"
    path: str | None = None
    tools: tuple[str, ...] | None = None
    disallowed_tools: tuple[str, ...] = ()
    model: str | None = None
    color: str | None = None
    permission_mode: str | None = None
    max_turns: int | None = None
    # Both may hold dicts, which cannot be hashed; leave them out of the hash.
    mcp_servers: tuple[Any, ...] = field(default=(), hash=False)
    hooks: dict[str, Any] | None = field(default=None, hash=False)
    memory: str | None = None
    background: bool = False
    isolation: str | None = None
    skills: tuple[str, ...] = ()
    effort: str | None = None
    initial_prompt: str | None = None
    omit_claude_md: bool = False
    required_mcp_servers: tuple[str, ...] = ()
    tokens: int | None = None
    allowed_agent_types: tuple[str, ...] | None = None
    read_only: bool = False

    @property
    def name(self) -> str:
        """The agent type (the ``name`` it was defined with)."""
        return self.agent_type

    @property
    def all_tools(self) -> bool:
        """Whether ``tools`` allows every tool (absent, or ``*``), before ``disallowed_tools``."""
        return self.tools is None or "*" in self.tools

    @classmethod
    def from_mapping(
        cls,
        data: Mapping[Any, Any],
        *,
        source: str,
        path: str | None = None,
        name: str | None = None,
        body: str | None = None,
        on_warning: Callable[[str], None] | None = None,
    ) -> AgentDefinition:
        """Build a definition from frontmatter (or one ``--agents`` JSON entry).

        A malformed optional field is dropped with a call to ``on_warning``; the rest of the
        definition still loads. Unknown keys are ignored: files are shared with other tools.

        Args:
            data: The parsed frontmatter or JSON object.
            source: One of :data:`AGENT_SOURCES`.
            path: The file it came from, if any.
            name: The agent name when it comes from outside ``data`` (the ``--agents`` key).
            body: The system prompt (a file's body); None takes ``data["prompt"]``.
            on_warning: Called with a message for each field that was dropped.

        Raises:
            ValueError: ``name`` or ``description`` is missing or not text.
        """
        warn = on_warning or _ignore
        fields = _canonical(data, warn)
        if name is not None:
            fields["agent_type"] = name
        agent_type = _required(fields, "agent_type", "name")
        # Claude Code writes descriptions on one line with literal "\n" for line breaks.
        when_to_use = _required(fields, "when_to_use", "description").replace("\\n", "\n")
        if body is None:
            body = _opt(fields, "system_prompt", _text, warn) or ""
        tools = _opt(fields, "tools", _names, warn)
        return cls(
            agent_type=agent_type,
            when_to_use=when_to_use,
            system_prompt=body.strip(),
            source=source,
            path=path,
            tools=tools,
            disallowed_tools=_opt(fields, "disallowed_tools", _names, warn) or (),
            model=_opt(fields, "model", _model, warn),
            color=_opt(fields, "color", _text, warn),
            permission_mode=_opt(fields, "permission_mode", _mode, warn),
            max_turns=_opt(fields, "max_turns", _positive_int, warn),
            mcp_servers=_opt(fields, "mcp_servers", _servers, warn) or (),
            hooks=_opt(fields, "hooks", _mapping, warn),
            memory=_opt(fields, "memory", _choice(MEMORY_SCOPES), warn),
            background=_opt(fields, "background", _bool, warn) or False,
            isolation=_opt(fields, "isolation", _choice(ISOLATION_MODES), warn),
            skills=_opt(fields, "skills", _names, warn) or (),
            effort=_opt(fields, "effort", _text, warn),
            initial_prompt=_opt(fields, "initial_prompt", _text, warn),
            omit_claude_md=_opt(fields, "omit_claude_md", _bool, warn) or False,
            required_mcp_servers=_opt(fields, "required_mcp_servers", _names, warn) or (),
            tokens=_opt(fields, "tokens", _positive_int, warn),
            allowed_agent_types=_agent_types(
                _opt(fields, "allowed_agent_types", _type_names, warn), tools
            ),
            read_only=_opt(fields, "read_only", _bool, warn) or False,
        )


# --- Reading fields ----------------------------------------------------------------------------

#: Frontmatter spellings that do not map to a field name by case conversion alone.
_ALIASES = {
    "name": "agent_type",
    "description": "when_to_use",
    "prompt": "system_prompt",
}
_SETTABLE = frozenset(AgentDefinition.__dataclass_fields__) - {"source", "path"}
_T = TypeVar("_T")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


class _BadField(ValueError):
    """A field whose value cannot be used; the message says why."""


def _ignore(message: str) -> None:
    """Drop a warning (no ``on_warning`` given)."""


def _canonical(data: Mapping[Any, Any], warn: Callable[[str], None]) -> dict[str, Any]:
    """Map every known key spelling to its field name; the first spelling of a field wins."""
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    allowed_tools: Any = None
    for key, value in data.items():
        if not isinstance(key, str):
            continue
        snake = _CAMEL.sub("_", key.strip()).lower().replace("-", "_")
        if snake == "allowed_tools":
            # Seen in reverse-engineered definitions; only a fallback when ``tools`` is absent.
            allowed_tools = value
            continue
        target = _ALIASES.get(snake, snake)
        if target not in _SETTABLE:
            continue
        if target in out:
            warn(f"{key!r} repeats {spelled[target]!r}; using {spelled[target]!r}")
            continue
        out[target] = value
        spelled[target] = key
    if "tools" not in out and allowed_tools is not None:
        out["tools"] = allowed_tools
    return out


def _required(fields: dict[str, Any], key: str, label: str) -> str:
    try:
        value = _text(fields.get(key))
    except _BadField as exc:
        raise ValueError(f"{label!r} {exc}") from None
    if not value:
        raise ValueError(f"missing required field {label!r}")
    return value


def _opt(
    fields: dict[str, Any],
    key: str,
    parse: Callable[[Any], _T | None],
    warn: Callable[[str], None],
) -> _T | None:
    """Parse an optional field; a bad value is dropped with a warning, never fatal."""
    value = fields.get(key)
    if value is None:
        return None
    try:
        return parse(value)
    except _BadField as exc:
        warn(f"ignoring {key}: {exc}")
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _BadField(f"must be text, not {type(value).__name__}")
    return str(value).strip() or None


def _names(value: Any) -> tuple[str, ...]:
    """A comma (or space) separated string, or a list; ``[]`` and ``""`` mean none at all."""
    if isinstance(value, str):
        items = split_rule_list(value)
    elif isinstance(value, list | tuple):
        items = []
        for item in value:
            text = _text(item)  # raises for nested lists and mappings
            if text:
                items.append(text)
    else:
        raise _BadField(f"must be a list or a comma-separated string, not {type(value).__name__}")
    # Claude Code called the Agent tool "Task" before 2.1, and older agent files still do.
    items = ["Agent" + n[4:] if n == "Task" or n.startswith("Task(") else n for n in items]
    # Hand-written lists say "bash" or "read": match built-in names whatever their case.
    return tuple(_KNOWN_TOOLS.get(n.lower(), n) if "(" not in n else n for n in items)


_KNOWN_TOOLS = {
    name.lower(): name
    for name in (
        "Agent",
        "Bash",
        "Edit",
        "Glob",
        "Grep",
        "Read",
        "Write",
        "NotebookEdit",
        "WebFetch",
        "WebSearch",
        "TodoWrite",
        "TaskOutput",
        "TaskStop",
        "SendMessage",
        "Skill",
        "Monitor",
    )
}


def _type_names(value: Any) -> tuple[str, ...]:
    """Agent type names: a list, or a comma-separated string; no tool-name spelling fixes."""
    if isinstance(value, str):
        return tuple(n.strip() for n in value.split(",") if n.strip())
    if isinstance(value, list | tuple):
        return tuple(text for item in value if (text := _text(item)))
    raise _BadField(f"must be a list or a comma-separated string, not {type(value).__name__}")


def _agent_types(
    listed: tuple[str, ...] | None, tools: tuple[str, ...] | None
) -> tuple[str, ...] | None:
    """The types ``allowedAgentTypes`` and the ``Agent(a, b)`` entries of ``tools`` name.

    None when neither names any (a bare ``Agent`` entry restricts nothing), as in Claude
    Code, where ``Agent(worker, researcher)`` in an agent's tools is how it is written.
    """
    named = [
        name.strip()
        for entry in tools or ()
        if entry.startswith("Agent(") and entry.endswith(")")
        for name in entry[len("Agent(") : -1].split(",")
        if name.strip()
    ]
    if listed is None and not named:
        return None
    return tuple(dict.fromkeys([*(listed or ()), *named]))


def _model(value: Any) -> str | None:
    text = _text(value)
    if text is not None and text.lower() in MODEL_ALIASES:
        return text.lower()
    return text


def _mode(value: Any) -> str | None:
    text = _text(value)
    if text is not None and text not in {m.value for m in PermissionMode}:
        valid = ", ".join(m.value for m in PermissionMode)
        raise _BadField(f"unknown permission mode {text!r} (use one of {valid})")
    return text


def _choice(choices: tuple[str, ...]) -> Callable[[Any], str | None]:
    def parse(value: Any) -> str | None:
        text = _text(value)
        if text is not None and text not in choices:
            raise _BadField(f"{text!r} is not one of {', '.join(choices)}")
        return text

    return parse


def _positive_int(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _BadField(f"must be a positive whole number, not {value!r}")
    return value


def _bool(value: Any) -> bool:
    word = value.strip().lower() if isinstance(value, str) else value
    if isinstance(word, bool) or word in ("true", "yes", "on", "false", "no", "off"):
        return word in (True, "true", "yes", "on")
    raise _BadField(f"must be true or false, not {value!r}")


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _BadField(f"must be a mapping, not {type(value).__name__}")
    return value


def _servers(value: Any) -> tuple[Any, ...]:
    """Server names and ``{name: config}`` objects; a bare mapping is split into the latter."""
    if isinstance(value, str):
        return tuple(split_rule_list(value))
    if isinstance(value, dict):
        return tuple({name: config} for name, config in value.items())
    if isinstance(value, list | tuple):
        for item in value:
            if not isinstance(item, str | dict):
                raise _BadField(f"entries must be names or objects, not {type(item).__name__}")
        return tuple(value)
    raise _BadField(f"must be a list, not {type(value).__name__}")
