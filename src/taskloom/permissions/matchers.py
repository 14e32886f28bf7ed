"""Does a rule match a request? Tool names, Bash commands, file paths, domains.

- Tool names: exact; ``Edit`` covers every edit-kind tool and ``Read`` every read-kind file
  tool; ``mcp__srv`` and ``mcp__srv__*`` cover all of a server's tools; ``*`` is a wildcard.
- Bash: exact, ``prefix:*`` (the prefix, then the end or a space), ``*`` anywhere. Compound
  commands are split on ``&& || ; | &`` and newlines outside quotes; see :func:`find_rule`.
- Paths: gitignore-style globs based at ``//`` (root), ``~/`` (home), ``/`` (project root),
  ``./`` or nothing (cwd). A rule naming a directory covers everything below it.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from taskloom.permissions.rules import PermissionRequest, Rule

#: Read-kind tools whose target is a file path; ``Read(...)`` rules speak for all of them.
READ_FILE_TOOLS = frozenset({"Read", "Glob", "Grep", "LS", "NotebookRead"})

#: Programs whose second word picks a subcommand, so a suggested rule keeps it
#: (``git push:*`` rather than ``git:*``, which would allow far more than was asked).
_SUBCOMMAND_PROGRAMS = frozenset(
    {"git", "npm", "pnpm", "yarn", "bun", "cargo", "go", "docker", "kubectl", "pip", "uv",
     "poetry", "gh", "make", "dotnet", "brew", "apt", "apt-get", "systemctl", "terraform"}
)  # fmt: skip
#: Tools that run a shell command line: their rules are matched as Bash's are.
SHELL_TOOLS = frozenset({"Bash", "Monitor"})
_WORD = re.compile(r"[A-Za-z][\w:.-]*")
_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=\S*")


def tool_matches(rule: Rule, request: PermissionRequest) -> bool:
    """Whether ``rule`` is about the requested tool (its content aside)."""
    name = request.tool_name
    if rule.tool == name:
        return True
    if rule.tool == "Bash" and name in SHELL_TOOLS:
        return True  # a Monitor runs a shell command: Bash's rules hold for it as well
    if rule.tool == "Edit":
        return request.kind == "edit"
    if rule.tool == "Read":
        return request.kind == "read" and name in READ_FILE_TOOLS
    if rule.tool.startswith("mcp__"):
        segments = rule.tool.split("__")
        if len(segments) == 2 or (len(segments) == 3 and segments[2] == "*"):
            return name.startswith(f"mcp__{segments[1]}__")
    if "*" in rule.tool:
        return _wildcard(rule.tool).fullmatch(name) is not None
    return False


def find_rule(
    rules: Iterable[Rule], request: PermissionRequest, project_root: Path, *, every_part: bool
) -> Rule | None:
    """Return the first rule that matches ``request``, or None.

    For a Bash command made of several parts (``a && b``), ``every_part=False`` (deny and ask
    rules) matches when any part — or the whole command — matches a rule, and
    ``every_part=True`` (allow rules) only when every part is matched by some rule, or when a
    rule without wildcards equals the whole command. A wildcard allow rule never matches a
    part with command substitution (``$(...)``, backticks), whose real command is hidden.
    """
    candidates = [r for r in rules if tool_matches(r, request)]
    if not candidates:
        return None
    if not _is_bash(request) or request.target is None:
        return next(
            (r for r in candidates if _content_matches(r, request, project_root, every_part)),
            None,
        )
    whole = _squash(request.target)
    parts = split_command(request.target)
    if not every_part:
        # Commands hidden in substitutions run too, so a deny rule must see them; and each
        # part is also tried as the program it runs (``/bin/rm``, ``\rm``, ``env X=1 rm``).
        everything = [whole, *with_hidden(parts)]
        everything += [normalize_command(p) for p in everything]
        unsure = unsure_syntax(request.target) or _has_substitution(request.target)
        for rule in candidates:
            if rule.content is None or any(command_matches(rule.content, p) for p in everything):
                return rule
            if unsure and _program_mentioned(rule.content, request.target):
                return rule  # cannot tell where it runs: assume it does
        return None
    for rule in candidates:
        if rule.content is None or (_squash(rule.content) == whole and "*" not in rule.content):
            return rule
    if unsure_syntax(request.target):
        # Our splitter cannot vouch for what this runs (comments, ANSI-C quoting, escapes,
        # heredocs, redirections that write files): no wildcard rule may allow it.
        return None
    first: Rule | None = None
    for part in parts:
        found = _allowing(candidates, part)
        if found is None:
            return None
        first = first or found
    return first


def uncovered_commands(rules: Iterable[Rule], request: PermissionRequest) -> list[str]:
    """The parts of a Bash command that no rule in ``rules`` allows (all of them if none do)."""
    if request.target is None:
        return []
    candidates = [r for r in rules if tool_matches(r, request)]
    return [p for p in split_command(request.target) if _allowing(candidates, p) is None]


def suggest_rule(request: PermissionRequest, command: str | None = None) -> str:
    """A rule allowing this request: ``Bash(git push:*)``, ``WebFetch(domain:x)``, a name."""
    if request.tool_name == "WebFetch":
        url = request.input.get("url", request.target)
        host = urlsplit(url).hostname if isinstance(url, str) else None
        return f"WebFetch(domain:{host})" if host else "WebFetch"
    if not _is_bash(request):
        return request.tool_name
    command = command or request.target or ""
    if _has_substitution(command):
        # No prefix rule can allow it (see find_rule); only the exact command can.
        escaped = _squash(command).replace("(", "\\(").replace(")", "\\)")
        return f"Bash({escaped})"
    words = command.split()
    while words and _ENV_ASSIGNMENT.fullmatch(words[0]):
        words.pop(0)  # FOO=1 cmd: the rule is about cmd
    if not words:
        return "Bash"
    prefix = words[0]
    if (
        len(words) > 1
        and os.path.basename(prefix) in _SUBCOMMAND_PROGRAMS
        and _WORD.fullmatch(words[1])
    ):
        prefix = f"{prefix} {words[1]}"
    return f"Bash({prefix}:*)"


def split_command(command: str) -> list[str]:
    """Split a shell command on ``&& || ; | |& &`` and newlines outside quotes.

    Nothing inside quotes, ``$(..)``, ``<(..)``, ``>(..)`` or backticks is split (those inner
    commands are examined separately). Redirections such as ``2>&1`` and ``&>`` are not
    separators. Unmatched subshell or group brackets at a part's edges are dropped, so
    ``(cd x && make)`` gives ``cd x`` and ``make``. Empty parts are dropped; each part has its
    whitespace squashed.
    """
    parts: list[str] = []
    current: list[str] = []
    quote = ""  # the open quote character, if any
    depth = 0  # nesting of $( <( >( substitutions
    backtick = False
    i = 0
    n = len(command)
    while i < n:
        char = command[i]
        if quote == "'":  # nothing is special inside single quotes
            quote = "" if char == "'" else quote
        elif char == "\\" and i + 1 < n:
            current.append(char)
            i += 1
            char = command[i]
        elif quote == '"':
            quote = "" if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char == "`":
            backtick = not backtick
        elif char == "(" and (depth or (i and command[i - 1] in "$<>")):
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif not (depth or backtick) and (width := _separator_width(command, i)):
            parts.append("".join(current))
            current = []
            i += width
            continue
        current.append(char)
        i += 1
    parts.append("".join(current))
    return [p for p in (_trim_brackets(_squash(p)) for p in parts) if p]


def command_matches(pattern: str, command: str) -> bool:
    """Whether one simple command matches a Bash rule's content.

    ``prefix:*`` and a trailing `` *`` (when it is the only wildcard) match the prefix alone
    or followed by a space; any other ``*`` matches any text; no ``*`` means an exact match.
    Runs of whitespace count as one space on both sides.
    """
    pattern = _squash(pattern)
    command = _squash(command)
    if pattern.endswith(":*"):
        prefix = pattern[:-2].rstrip()
        return command == prefix or command.startswith(prefix + " ")
    if "*" not in pattern:
        return command == pattern
    if pattern.endswith(" *") and pattern.count("*") == 1:
        prefix = pattern[:-2]
        return command == prefix or command.startswith(prefix + " ")
    return _wildcard(pattern).fullmatch(command) is not None


def path_matches(pattern: str, path: str, cwd: Path, project_root: Path) -> bool:
    """Whether an absolute ``path`` matches a Read/Edit rule's gitignore-style pattern.

    Args:
        pattern: ``//abs/**``, ``~/x``, ``/from/project/root``, ``./from/cwd`` or ``x``.
        path: The file the tool would touch (made absolute against ``cwd`` if it is not).
        cwd: The agent's working directory.
        project_root: The root that ``/x`` patterns are based at.
    """
    base, glob, anchored = _pattern_base(pattern, cwd, project_root)
    target = PurePosixPath(os.path.normpath(os.path.join(cwd, path)))
    try:
        rel = target.relative_to(base)
    except ValueError:
        return False
    if not glob:
        return True  # the base itself: it and everything under it
    regex = _glob_regex(glob, anchored)
    # gitignore semantics: a pattern that matches a directory matches everything inside it.
    return any(
        regex.fullmatch("/".join(rel.parts[:depth])) for depth in range(1, len(rel.parts) + 1)
    )


def domain_matches(pattern: str, url: str) -> bool:
    """Whether ``url``'s host matches ``example.com`` exactly or ``*.example.com`` as a suffix."""
    host = (urlsplit(url if "//" in url else f"//{url}").hostname or "").lower().rstrip(".")
    pattern = pattern.lower().rstrip(".")
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


def _content_matches(
    rule: Rule, request: PermissionRequest, project_root: Path, every_part: bool = False
) -> bool:
    if rule.content is None:
        return True
    target = request.target
    if rule.tool == "WebFetch" and rule.content.startswith("domain:"):
        url = request.input.get("url", target)
        return isinstance(url, str) and domain_matches(rule.content.removeprefix("domain:"), url)
    if target is None:
        return False
    if _is_file_tool(request):
        # A symlink must not dodge a rule: a deny (or ask) rule matching either the path as
        # named or where it leads applies; an allow rule must match both.
        literal = os.path.join(request.cwd, target)
        paths = {literal, os.path.realpath(literal)}
        hits = (path_matches(rule.content, p, request.cwd, project_root) for p in paths)
        return all(hits) if every_part else any(hits)
    return _wildcard(rule.content).fullmatch(target) is not None


def _allowing(rules: list[Rule], part: str) -> Rule | None:
    hidden = _has_substitution(part)
    for rule in rules:
        if rule.content is None:
            return rule
        if hidden and "*" in rule.content:
            continue
        if command_matches(rule.content, part):
            return rule
    return None


#: What makes a command line too hard for our splitter to vouch for.
_UNSURE = re.compile(r"#|\$'|\$\"|\\|<<|[\r\x00]")
#: Redirections that write nothing anyone cares about.
_HARMLESS_REDIRECT = re.compile(r"\d*>&\d+|&?\d*>{1,2}\s*/dev/null")
#: Words that run the next word as the program.
_WRAPPERS = frozenset({"env", "command", "builtin", "exec", "nohup", "sudo", "time", "nice"})


def unsure_syntax(command: str) -> bool:
    """Whether ``command`` uses syntax the splitter cannot follow safely.

    Comments, ANSI-C and locale quoting, backslash escapes, heredocs, control characters, and
    output redirections to files (``> ~/.bashrc`` writes a file whatever the program is).
    """
    if _UNSURE.search(command):
        return True
    return ">" in _HARMLESS_REDIRECT.sub("", command)


def normalize_command(part: str) -> str:
    """The command a part really runs, as deny rules should see it.

    No ``X=1`` prefixes or wrappers (``env``, ``command``...), no quotes or backslashes in
    the program word, and the program by its base name (``/bin/rm`` is ``rm``).
    """
    words = _squash(part).split(" ")
    while words and (_ENV_ASSIGNMENT.fullmatch(words[0]) or words[0] in _WRAPPERS):
        words.pop(0)
        while words and words[0].startswith("-"):  # wrapper options: env -i, nice -n
            words.pop(0)
    if not words:
        return ""
    program = os.path.basename(words[0].replace("\\", "").strip("'\""))
    return " ".join([program, *words[1:]])


def _program_mentioned(pattern: str, command: str) -> bool:
    """Whether the program a rule is about appears anywhere in ``command`` as a word."""
    program = pattern.split(":", 1)[0].split(" ", 1)[0].strip()
    if not program or "*" in program:
        return False
    cleaned = re.sub(r"[\\'\"]", "", command)
    return (
        re.search(rf"(?:^|[\s;&|()`$/]){re.escape(program)}(?:$|[\s;&|()`])", cleaned) is not None
    )


def _is_bash(request: PermissionRequest) -> bool:
    return request.tool_name in SHELL_TOOLS


def _is_file_tool(request: PermissionRequest) -> bool:
    return request.kind == "edit" or (
        request.kind == "read" and request.tool_name in READ_FILE_TOOLS
    )


def _separator_width(command: str, i: int) -> int:
    """Length of the command separator starting at ``command[i]``, 0 if there is none."""
    char = command[i]
    after = command[i + 1] if i + 1 < len(command) else ""
    if char in ";\n":
        return 1
    if char == "|":
        return 2 if after in ("|", "&") else 1
    if char == "&":
        if after == "&":
            return 2
        before = command[i - 1] if i else ""
        # `2>&1`, `>&2`, `<&3` and `&>file` are redirections, not background jobs.
        if before in ("<", ">") or after == ">":
            return 0
        return 1
    return 0


def _trim_brackets(part: str) -> str:
    """Drop subshell/group brackets left unmatched at a part's edges by splitting."""
    for opener, closer in (("(", ")"), ("{", "}")):
        while part.startswith(opener) and part.count(opener) > part.count(closer):
            part = part[1:].lstrip()
        while part.endswith(closer) and part.count(closer) > part.count(opener):
            part = part[:-1].rstrip()
    return part


def with_hidden(parts: list[str]) -> list[str]:
    """``parts`` followed by the commands inside their substitutions, recursively."""
    out = list(parts)
    for part in parts:
        for inner in _substitutions(part):
            out += with_hidden(split_command(inner))
    return out


def _substitutions(part: str) -> list[str]:
    """The text inside ``$(..)``, ``<(..)``, ``>(..)`` and backticks, outside single quotes."""
    found: list[str] = []
    quote = ""
    i = 0
    while i < len(part):
        char = part[i]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif char == "'" and not quote:
            quote = "'"
        elif char == '"':
            quote = "" if quote else '"'
        elif char == "`":
            end = part.find("`", i + 1)
            end = len(part) if end < 0 else end
            found.append(part[i + 1 : end])
            i = end
        elif char == "(" and i and part[i - 1] in "$<>":
            depth, j = 1, i + 1
            while j < len(part) and depth:
                depth += {"(": 1, ")": -1}.get(part[j], 0)
                j += 1
            found.append(part[i + 1 : j - 1 if depth == 0 else j])
            i = j - 1
        i += 1
    return found


def _has_substitution(part: str) -> bool:
    """Whether ``part`` runs hidden commands (``$(..)``, backticks, ``<(..)``) outside '...'."""
    quote = ""
    for i, char in enumerate(part):
        if quote == "'":
            quote = "" if char == "'" else quote
            continue
        if char == "'" and not quote:
            quote = "'"
        elif char == '"':
            quote = "" if quote else '"'
        elif char == "`" or (char == "(" and i and part[i - 1] in "$<>"):
            return True
    return False


def _squash(text: str) -> str:
    return " ".join(text.split())


def _pattern_base(pattern: str, cwd: Path, project_root: Path) -> tuple[PurePosixPath, str, bool]:
    """Split a path rule into (absolute base, glob relative to it, anchored?)."""
    anchored = True
    if pattern.startswith("//"):
        base, glob = "/", pattern[2:]
    elif pattern == "~" or pattern.startswith("~/"):
        base, glob = str(Path.home()), pattern[2:]
    elif pattern.startswith("/"):
        base, glob = str(project_root), pattern[1:]
    elif pattern == "." or pattern.startswith("./"):
        base, glob = str(cwd), pattern[2:]
    else:
        base, glob = str(cwd), pattern
        while glob.startswith("../"):
            base, glob = os.path.dirname(base), glob[3:]
        # gitignore: a pattern with no slash but a trailing one matches at any depth.
        anchored = "/" in glob.rstrip("/")
    return PurePosixPath(os.path.normpath(base)), glob.strip("/"), anchored


@functools.lru_cache(maxsize=512)
def _glob_regex(glob: str, anchored: bool) -> re.Pattern[str]:
    """Translate a gitignore-style glob (``*``, ``?``, ``[...]``, ``**``) to a regex."""
    out = [] if anchored else ["(?:[^/]+/)*"]
    segments = glob.split("/")
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            if not last:
                out.append("(?:[^/]+/)*")
            elif index:
                # `dir/**` also matches `dir` itself, so a Grep or Glob rooted at a denied
                # directory is denied too.
                out[-1] = "(?:/.*)?"
            else:
                out.append(".*")
            continue
        out.append(_segment_regex(segment))
        if not last:
            out.append("/")
    return re.compile("".join(out), re.DOTALL)


def _segment_regex(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (end := segment.find("]", i + 2)) > 0:
            body = segment[i + 1 : end]
            negate = body[:1] in ("!", "^")
            # Escape every member but range dashes, so no character means more than itself.
            members = "".join(c if c == "-" else re.escape(c) for c in body[negate:])
            out.append(f"[{'^' if negate else ''}{members}]")
            i = end + 1
            continue
        elif char == "\\" and i + 1 < len(segment):
            out.append(re.escape(segment[i + 1]))
            i += 2
            continue
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=512)
def _wildcard(pattern: str) -> re.Pattern[str]:
    """``*`` matches any text (spaces and slashes included); everything else is literal."""
    return re.compile(".*".join(re.escape(piece) for piece in pattern.split("*")), re.DOTALL)
