"""Where taskloom keeps its state, and the few settings the runtime needs.

The layout::

    $TASKLOOM_HOME/            (default ~/.taskloom)
        taskloom.db            the embedded store
        sessions/<id>/tasks/   task output files
        agents/  settings.json

Claude Code's user configuration directory (:func:`claude_config_dir`: ``$CLAUDE_CONFIG_DIR``,
else ``~/.claude``) is read for its ``settings.json``, ``agents/`` and agent memory, and holds
the transcripts (``projects/``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import stat
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from taskloom.errors import SettingsError, UsageError

#: Default cap on one task's output file.
DEFAULT_OUTPUT_CAP_BYTES = 5 * 1024**3

#: Default cap on the length of one model response, in tokens (``max_tokens``).
DEFAULT_MAX_OUTPUT_TOKENS = 16_000
#: The environment variable that sets it (Claude Code's), and the setting.
MAX_OUTPUT_TOKENS_ENV = "CLAUDE_CODE_MAX_OUTPUT_TOKENS"
MAX_OUTPUT_TOKENS_SETTING = "maxOutputTokens"


def taskloom_home() -> Path:
    """Return the state directory: ``$TASKLOOM_HOME`` or ``~/.taskloom``."""
    env = os.environ.get("TASKLOOM_HOME")
    return Path(env).expanduser().absolute() if env else Path.home() / ".taskloom"


def claude_config_dir() -> Path:
    """Claude Code's user configuration directory: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``.

    Claude Code reads its user settings, agents, commands, skills and agent memory there and
    keeps its transcripts there; with the variable set, ``~/.claude`` is not read at all.
    """
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    raw = str(Path(env).expanduser().absolute()) if env else str(Path.home() / ".claude")
    return Path(unicodedata.normalize("NFC", raw))  # as Claude Code names the directory


def db_path(home: Path | None = None) -> Path:
    """Return the path of the store database."""
    return (home or taskloom_home()) / "taskloom.db"


def session_dir(session_id: str, home: Path | None = None) -> Path:
    """Return the directory of one session (transcript, subagents, tasks)."""
    return (home or taskloom_home()) / "sessions" / session_id


def tasks_dir(session_id: str, home: Path | None = None) -> Path:
    """Return the directory holding a session's task output files."""
    return session_dir(session_id, home) / "tasks"


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents with mode 0700 and return it.

    An existing directory we own is tightened to 0700, so output written by one user is never
    readable by another through a loose directory. A symlink is refused (never followed, never
    chmod-ed): it could point anywhere. Inside the state directory (:func:`taskloom_home`)
    that holds for every component below the home, and the home must be one of the user's own
    (see :func:`check_home`).

    Raises:
        OSError: ``path`` (or a component of it inside the home, or a parent it had to create)
            is a symlink or not a directory, or the home is not the user's own.
    """
    home = taskloom_home()
    if path == home or path.is_relative_to(home):
        check_home(home)
        refuse_symlinks(home, path.relative_to(home).parts)
    missing = []
    probe = path
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made concurrently; checked below
            os.mkdir(directory, 0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, "refusing a symlinked directory", str(path))
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, "not a directory", str(path))
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def check_home(home: Path) -> None:
    """Refuse a state directory that is not the user's own.

    The home itself may be a symlink the user made (to another disk, say); what it points at
    must be a directory owned by the user and writable by nobody else. Others could plant
    links in it otherwise, or read what it holds, so a home owned by someone else is refused
    (also one writable by everybody, ``/tmp``), and so is one of the user's own that other
    users may write (they may have planted something already): the message says how to fix
    it. One that others may only read, or that only the user's private group may write, is
    tightened to 0700 by :func:`ensure_private_dir`. A home that does not exist yet is made
    private.

    Raises:
        OSError: The home is not a directory, is another user's, or others may write it.
    """
    try:
        st = os.stat(home)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, "TASKLOOM_HOME is not a directory", str(home))
    if st.st_uid != os.getuid():
        loose = " and writable by others" if st.st_mode & 0o022 else ""
        raise OSError(
            errno.EPERM,
            f"TASKLOOM_HOME is owned by another user (uid {st.st_uid}){loose}; taskloom keeps "
            "private state there. Point TASKLOOM_HOME at a directory of your own (for "
            "example: mkdir -m 700 ~/.taskloom && export TASKLOOM_HOME=~/.taskloom)",
            str(home),
        )
    if st.st_mode & 0o002 or (st.st_mode & 0o020 and _shared_group(st.st_gid)):
        raise OSError(
            errno.EPERM,
            f"TASKLOOM_HOME is writable by others (mode {stat.S_IMODE(st.st_mode):o}): they "
            f"could plant links in taskloom's state. Check what it holds, then: chmod 700 {home}",
            str(home),
        )


def _shared_group(gid: int) -> bool:
    """Whether users other than this one may be in group ``gid``.

    A user's private group (``umask 002`` systems make directories group-writable for it) is
    the primary group with no other members listed.
    """
    if gid != os.getgid():
        return True
    import grp

    try:
        return bool(grp.getgrgid(gid).gr_mem)
    except KeyError:
        return False


def refuse_symlinks(base: Path, parts: tuple[str, ...]) -> None:
    """Refuse a symlink at any existing component of ``base / parts`` below ``base``.

    Raises:
        OSError: ``ELOOP`` naming the first symlinked component.
    """
    probe = base
    for part in parts:
        probe = probe / part
        try:
            mode = os.lstat(probe).st_mode
        except FileNotFoundError:
            return  # nothing below a missing component exists yet
        if stat.S_ISLNK(mode):
            raise OSError(errno.ELOOP, "refusing a symlink in taskloom's state", str(probe))


def whole_number(
    settings: Mapping[str, Any],
    env: str,
    key: str,
    *,
    unit: str,
    low: int = 1,
    given: int | None = None,
    flag: str = "",
) -> int | str | None:
    """A count set by a flag (``given``), else the environment variable ``env``, else ``key``.

    Returns:
        The number; None when none of them is set; or a one-line error naming where the bad
        value came from (``the setting bashMaxOutputChars must be a whole number of
        characters (at least 1), got 'x'``).
    """
    raw: Any = given
    source = flag
    if raw is None:
        raw, source = os.environ.get(env) or None, f"the environment variable {env}"
    if raw is None and settings.get(key) is not None:
        raw, source = settings[key], f"the setting {key}"
    if raw is None:
        return None
    value: int | None = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit():
        value = int(raw.strip())
    if value is None or value < low:
        return f"{source} must be a whole number of {unit} (at least {low}), got {raw!r}"
    return value


def max_output_tokens(settings: Mapping[str, Any], given: int | None = None) -> int:
    """The cap on each model response, in tokens: for the main thread and every agent.

    ``given`` (``--max-output-tokens``), else ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``, else the
    setting ``maxOutputTokens``, else 16,000. A model that never stops costs at most this
    much per request: on a slow local server, minutes.

    Raises:
        UsageError: The value is not a whole number of at least 1; the message names where
            it came from.
    """
    value = whole_number(
        settings,
        MAX_OUTPUT_TOKENS_ENV,
        MAX_OUTPUT_TOKENS_SETTING,
        unit="tokens",
        given=given,
        flag="--max-output-tokens",
    )
    if isinstance(value, str):
        raise UsageError(value)
    return DEFAULT_MAX_OUTPUT_TOKENS if value is None else value


# --- Settings files (Claude Code compatible) -------------------------------------------------

_log = logging.getLogger("taskloom.settings")

#: Lists that accumulate across settings files instead of being replaced: a project must not be
#: able to drop a user's deny rule just by having its own ``deny`` list.
_CONCAT_LISTS = frozenset(
    {
        ("permissions", "allow"),
        ("permissions", "deny"),
        ("permissions", "ask"),
        ("permissions", "additionalDirectories"),
    }
)

#: Project files, lowest precedence first; ``.taskloom`` wins over ``.claude`` at each level.
_PROJECT_FILES = (
    ".claude/settings.json",
    ".taskloom/settings.json",
    ".claude/settings.local.json",
    ".taskloom/settings.local.json",
)


#: The kinds of settings files, as ``--setting-sources`` names them.
SETTING_SOURCES = ("user", "project", "local")


def parse_setting_sources(text: str) -> tuple[str, ...]:
    """``--setting-sources user,project``: the sources to read (empty: none but --settings).

    Raises:
        UsageError: An unknown source name.
    """
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in SETTING_SOURCES]
    if unknown:
        raise UsageError(
            f"--setting-sources: unknown source {unknown[0]!r}; use {', '.join(SETTING_SOURCES)}"
        )
    return names


def _source_of(name: str) -> str:
    return "local" if name.endswith(".local.json") else "project"


def find_project_root(cwd: Path) -> Path:
    """Return the git repository root above ``cwd`` (a ``.git`` dir or file), else ``cwd``.

    A ``.git`` *file* marks a worktree or submodule root, which is a project root too.
    """
    start = Path(cwd).absolute()
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return start


def load_settings(
    cwd: Path,
    extra: Path | str | None = None,
    home: Path | None = None,
    *,
    skip_broken: bool = False,
    sources: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Load and merge every settings file that applies to ``cwd``.

    Precedence, lowest first: ``settings.json`` of :func:`claude_config_dir`
    (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``), ``$TASKLOOM_HOME/settings.json``, then in
    the project root (see :func:`find_project_root`) ``.claude/settings.json``,
    ``.taskloom/settings.json``, ``.claude/settings.local.json``,
    ``.taskloom/settings.local.json``, and last ``extra``. Dicts merge recursively, later
    scalars (and lists) win, except ``permissions.allow/deny/ask/additionalDirectories``,
    which are concatenated without duplicates. A missing file is skipped silently.

    Args:
        cwd: The working directory of the session.
        extra: The ``--settings`` value: a file path, or inline JSON starting with ``{``.
        home: The taskloom state directory; defaults to :func:`taskloom_home`.
        skip_broken: Skip a settings file that exists but is broken (with a warning on the
            ``taskloom.settings`` logger) instead of raising. ``extra`` is never skipped.
        sources: Read only these kinds of files (``user``: the two user files, ``project``:
            the project's shared ones, ``local``: its ``*.local.json``); None reads all.
            ``extra`` is always read.

    Returns:
        The merged settings (a fresh dict the caller may modify).

    Raises:
        SettingsError: A settings file exists but cannot be read, is not valid JSON (the
            message gives the line and column), is not an object, or has a value of the
            wrong type where permissions or hooks go. Such a file may hold a deny rule, so
            running without it would fail open. ``extra`` raises the same way when it is
            missing: it was asked for explicitly.
    """
    return _load_all(cwd, extra, home, skip_broken, sources)[0]


def settings_sources(
    cwd: Path, extra: Path | str | None = None, home: Path | None = None
) -> list[str]:
    """Return which settings sources :func:`load_settings` would read, lowest precedence first.

    Only sources that exist and parse are listed (broken files are skipped here, never
    raised); inline ``--settings`` JSON is listed as ``"--settings (inline JSON)"``. Meant
    for diagnostics.
    """
    return _load_all(cwd, extra, home, True)[1]


def merge_settings(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` overlaid with ``override`` by the rules of :func:`load_settings`.

    Neither argument is modified.
    """
    return _merge(_merge({}, base, ()), override, ())


def _load_all(
    cwd: Path,
    extra: Path | str | None,
    home: Path | None,
    skip_broken: bool,
    only: Sequence[str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    root = find_project_root(cwd)
    wanted = set(SETTING_SOURCES if only is None else only)
    user = [claude_config_dir() / "settings.json", (home or taskloom_home()) / "settings.json"]
    candidates = [
        *(user if "user" in wanted else []),
        *(root / name for name in _PROJECT_FILES if _source_of(name) in wanted),
    ]
    merged: dict[str, Any] = {}
    sources: list[str] = []
    seen: set[str] = set()
    for path in candidates:
        # When the project is the home directory, ~/.claude/settings.json is both the user and
        # the project file; reading it once keeps the diagnostics honest.
        key = os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        data = _read_optional(path, skip_broken)
        if data is not None:
            merged = _merge(merged, data, ())
            sources.append(str(path))
    if extra is not None:
        data, label = _read_extra(extra)
        merged = _merge(merged, data, ())
        sources.append(label)
    return merged, sources


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON parsers keep the last of two equal keys: a second "permissions" would silently
    # drop the first one's deny rules.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"duplicate key {key!r}")
        out[key] = value
    return out


def _parse_json(text: str) -> tuple[Any, str | None]:
    """Parse JSON text; on failure the problem says where (line and column) and what."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys), None
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    except _DuplicateKey as exc:
        return None, f"invalid JSON: {exc}"


def _read_json(path: Path) -> tuple[bool, Any, str | None]:
    """Read and parse a JSON file: ``(exists, data, problem)``; a missing file has no problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return False, None, None
    except (OSError, UnicodeDecodeError) as exc:
        return True, None, f"cannot read it: {getattr(exc, 'strerror', None) or exc}"
    data, problem = _parse_json(text)
    return True, data, problem


def read_json_file(path: Path, what: str, log: logging.Logger) -> Any:
    """Parse a JSON file; None when it is missing, unreadable or invalid.

    The last two are logged to ``log`` as "skipping <what> <path>: <reason>".
    """
    _, data, problem = _read_json(path)
    if problem is not None:
        log.warning("skipping %s %s: %s", what, path, problem)
    return data


def _read_optional(path: Path, skip_broken: bool) -> dict[str, Any] | None:
    """Parse one settings file; None when it is missing (or broken, when told to skip)."""
    exists, data, problem = _read_json(path)
    if not exists:
        return None
    problem = problem or _shape_problem(data)
    if problem is None and isinstance(data, dict):
        return data
    if skip_broken:
        _log.warning("skipping broken settings file %s (--skip-broken-settings): %s", path, problem)
        return None
    raise SettingsError(
        f"settings file {path}: {problem}. Fix the file, or pass --skip-broken-settings "
        "to run without it"
    )


def _read_extra(extra: Path | str) -> tuple[dict[str, Any], str]:
    """Parse the ``--settings`` value (inline JSON or a path) or raise SettingsError.

    Returns:
        The settings, and the label :func:`settings_sources` lists them under.
    """
    if isinstance(extra, str) and extra.lstrip().startswith("{"):
        label = where = "--settings (inline JSON)"
        data, problem = _parse_json(extra)
    else:
        label, where = str(extra), f"--settings {extra}"
        exists, data, problem = _read_json(Path(extra).expanduser())
        if not exists:
            problem = "cannot read it: No such file or directory"
    problem = problem or _shape_problem(data)
    if problem is not None or not isinstance(data, dict):
        raise SettingsError(f"{where}: {problem}")
    return data, label


def _shape_problem(data: Any) -> str | None:
    """What is of the wrong type where permissions or hooks go, or None when all is well.

    Only what decides what may run is checked here, per file, so that the error can name the
    file: a wrong type there would otherwise replace or drop another layer's rules when the
    files are merged.
    """
    if not isinstance(data, dict):
        return f"expected a JSON object, got {_kind(data)}"
    perms = data.get("permissions")
    if perms is not None:
        if not isinstance(perms, dict):
            return f"'permissions' must be an object, got {_kind(perms)}"
        for key in ("allow", "deny", "ask", "additionalDirectories"):
            value = perms.get(key)
            if value is not None and not (
                isinstance(value, list) and all(isinstance(v, str) for v in value)
            ):
                return f"permissions.{key} must be a list of strings, got {_kind(value)}"
        for key in ("defaultMode", "disableBypassPermissionsMode"):
            value = perms.get(key)
            if value is not None and not isinstance(value, str):
                return f"permissions.{key} must be a string, got {_kind(value)}"
    hooks = data.get("hooks")
    if hooks is None:
        return None
    if not isinstance(hooks, dict):
        return f"'hooks' must be an object of events, got {_kind(hooks)}"
    for event, entries in hooks.items():
        if not isinstance(entries, list):
            return f"hooks.{event} must be a list of matcher entries, got {_kind(entries)}"
        for i, entry in enumerate(entries):
            where = f"hooks.{event}[{i}]"
            if not isinstance(entry, dict):
                return f"{where} must be an object, got {_kind(entry)}"
            matcher = entry.get("matcher")
            if matcher is not None and not isinstance(matcher, str):
                return f"{where}.matcher must be a string, got {_kind(matcher)}"
            inner = entry.get("hooks")
            if not isinstance(inner, list):
                return f"{where}.hooks must be a list of objects, got {_kind(inner)}"
            for j, hook in enumerate(inner):
                problem = _hook_problem(hook, f"{where}.hooks[{j}]")
                if problem is not None:
                    return problem
    return None


def _hook_problem(hook: Any, where: str) -> str | None:
    """What is wrong with one hook object, or None (its own type decides what it needs)."""
    if not isinstance(hook, dict):
        return f"{where} must be an object, got {_kind(hook)}"
    kind = hook.get("type")
    if not isinstance(kind, str):
        return f"{where}.type must be a string, got {_kind(kind)}"
    if kind == "command":
        command = hook.get("command")
        if not isinstance(command, str) or not command.strip():
            return f"{where}.command must be a non-empty string, got {_kind(command)}"
    timeout = hook.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        return f"{where}.timeout must be a positive number of seconds, got {timeout!r}"
    return None


def _kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)


def _concatenated(path: tuple[str, ...]) -> bool:
    # ``hooks.<Event>`` lists (matcher entries) accumulate across files, like permissions.
    return path in _CONCAT_LISTS or (len(path) == 2 and path[0] == "hooks")


def _merge(
    base: dict[str, Any], override: dict[str, Any], where: tuple[str, ...]
) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        path = (*where, key)
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = _merge(old, value, path)
        elif _concatenated(path) and isinstance(old, list) and isinstance(value, list):
            # A later file adds to these lists; it cannot take away what an earlier one set
            # (a project file must not silently drop the user's guard hooks).
            out[key] = _dedup([*old, *value])
        elif path == ("permissions", "disableBypassPermissionsMode") and (
            old == "disable" or value == "disable"
        ):
            out[key] = "disable"  # once any layer turns bypass off, it stays off
        elif isinstance(value, dict):
            out[key] = _merge({}, value, path)  # a private copy: callers may mutate the result
        elif isinstance(value, list):
            out[key] = _dedup(value) if _concatenated(path) else list(value)
        else:
            out[key] = value
    return out


def _dedup(items: list[Any]) -> list[Any]:
    """Drop repeated items, keeping the first of each (unhashable items are compared by ==)."""
    out: list[Any] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out
