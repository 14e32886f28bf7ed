"""A skill or command made into the model's instructions, with its arguments put in.

As Claude Code does it: a skill's text starts with ``Base directory for this skill: <dir>``;
``$ARGUMENTS`` is every argument as typed, ``$ARGUMENTS[N]`` and its shorthand ``$N`` the Nth
(from 0; shell quoting groups words), ``$name`` the argument its frontmatter's ``arguments``
names at that place; arguments given to a text that has no placeholder are appended as
``ARGUMENTS: …``. ``${CLAUDE_SKILL_DIR}``, ``${CLAUDE_SESSION_ID}`` and a plugin's
``${CLAUDE_PLUGIN_ROOT}`` are replaced too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from taskloom.permissions.rules import Rule, parse_rule
from taskloom.skills.catalog import PromptCommand

_SLASH = re.compile(r"/([^\s/][^\s]*)(?:\s+(.*))?", re.DOTALL)
_INDEXED = re.compile(r"\$ARGUMENTS\[(\d+)\]")
_SHORTHAND = re.compile(r"\$(\d+)(?!\w)")


def parse_slash(text: str) -> tuple[str, str] | None:
    """``(name, arguments)`` of a prompt typed as ``/name arguments``; None for any other."""
    found = _SLASH.fullmatch(text.strip())
    if found is None:
        return None
    return found.group(1), (found.group(2) or "").strip()


def parse_arguments(args: str) -> list[str]:
    """The arguments, split as a shell would (quotes group words); on bad quoting, by spaces."""
    import shlex

    try:
        return shlex.split(args)
    except ValueError:
        return args.split()


def substitute_arguments(content: str, args: str, names: Sequence[str] = ()) -> str:
    """``content`` with its argument placeholders replaced (see the module docstring)."""
    parsed = parse_arguments(args)
    original = content

    def nth(index: int) -> str:
        return parsed[index] if index < len(parsed) else ""

    for i, name in enumerate(names):
        # The value as a replacement template: its backslashes stay literal.
        value = nth(i).replace("\\", "\\\\")
        content = re.sub(rf"\${re.escape(name)}(?![\[\w])", value, content)
    content = _INDEXED.sub(lambda m: nth(int(m.group(1))), content)
    content = _SHORTHAND.sub(lambda m: nth(int(m.group(1))), content)
    content = content.replace("$ARGUMENTS", args)
    if content == original and args:
        content += f"\n\nARGUMENTS: {args}"
    return content


def instructions(command: PromptCommand, args: str, session_id: str) -> str:
    """What the model is given of ``command`` run with ``args``."""
    text = command.body
    if command.base_dir is not None:
        text = f"Base directory for this skill: {command.base_dir}\n\n{text}"
    text = substitute_arguments(text, args, command.argument_names)
    if command.base_dir is not None:
        text = text.replace("${CLAUDE_SKILL_DIR}", str(command.base_dir))
    if command.plugin_root is not None:
        # A plugin's commands run its scripts as !`${CLAUDE_PLUGIN_ROOT}/scripts/…`.
        text = text.replace("${CLAUDE_PLUGIN_ROOT}", str(command.plugin_root))
    return text.replace("${CLAUDE_SESSION_ID}", session_id)


def invocation(command: PromptCommand, args: str) -> str:
    """The line that tells the model the user ran ``/name args`` (Claude Code's tags)."""
    lines = [
        f"<command-message>{command.name} is running…</command-message>",
        f"<command-name>/{command.name}</command-name>",
    ]
    if args:
        lines.append(f"<command-args>{args}</command-args>")
    return "\n".join(lines)


def allow_rules(command: PromptCommand) -> list[Rule]:
    """Its ``allowed-tools``, as the allow rules that hold while it runs."""
    source = f"allowed-tools of /{command.name} ({command.path})"
    return [parse_rule(text, "allow", source) for text in command.allowed_tools]


__all__ = [
    "allow_rules",
    "instructions",
    "invocation",
    "parse_arguments",
    "parse_slash",
    "substitute_arguments",
]
