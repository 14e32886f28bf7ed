"""MCP server configuration in Claude Code's format (``.mcp.json``).

Two files are read: ``$TASKLOOM_HOME/mcp.json`` (the user's servers) and ``.mcp.json`` at the
project root; a project server replaces a user server of the same name. Both hold::

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server-files"], "env": {"K": "${K}"}},
        "web": {"type": "http", "url": "https://example.com/mcp", "headers": {"A": "${TOKEN}"}}
    }}

``type`` is ``stdio`` (also when absent), ``http`` (streamable HTTP), ``sse`` or ``sdk`` (a
server hosted by the program driving the session, reached with ``mcp_message`` control
requests; see :mod:`taskloom.mcp.program`). ``${VAR}`` and
``${VAR:-default}`` are expanded from the environment in command, args, env values, url and
headers. A server that cannot be used (malformed, or naming an unset variable without a
default) is skipped with a warning on the ``taskloom.mcp`` logger; the others still load.

``--mcp-config`` adds servers from files or JSON strings of the same form
(:func:`load_flag_configs`); there every problem is a usage error naming the argument.

This module deliberately uses only the standard library: the ``mcp`` SDK costs ~0.7 s at import
and is loaded only once a server is actually started (see :mod:`taskloom.mcp.manager`).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from taskloom._dataclass import dataclass
from taskloom.errors import UsageError, UserError
from taskloom.settings import find_project_root, read_json_file, taskloom_home

log = logging.getLogger("taskloom.mcp")

McpTransport = Literal["stdio", "http", "sse", "sdk"]
_TRANSPORTS: tuple[McpTransport, ...] = ("stdio", "http", "sse", "sdk")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class McpConfigError(UserError):
    """One server entry cannot be used; the message names the source and the server."""


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One MCP server, with every ``${VAR}`` already expanded.

    Attributes:
        name: The server's name (the key under ``mcpServers``).
        type: ``stdio``, ``http`` (streamable HTTP), ``sse`` or ``sdk`` (hosted by the program
            driving the session).
        command: The executable of a stdio server.
        args: Its arguments.
        env: Variables added to the environment of a stdio server.
        url: The endpoint of an http or sse server.
        headers: HTTP headers sent to an http or sse server.
        source: Where the entry came from (a file path, or a label for inline entries).
    """

    name: str
    type: McpTransport = "stdio"
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    source: str = ""


def load_mcp_config(cwd: Path, home: Path | None = None) -> dict[str, McpServerConfig]:
    """Load the MCP servers configured for ``cwd``.

    Args:
        cwd: The working directory; its project root (:func:`find_project_root`) holds
            ``.mcp.json``.
        home: The taskloom state directory holding ``mcp.json``; defaults to
            :func:`taskloom_home`.

    Returns:
        The usable servers by name, user servers first; a project entry replaces a user entry
        of the same name. Missing files give nothing; bad files and entries are skipped with a
        warning.
    """
    servers: dict[str, McpServerConfig] = {}
    user = (home or taskloom_home()) / "mcp.json"
    project = find_project_root(cwd) / ".mcp.json"
    # The same file can be both when the project root is the taskloom home; read it once.
    paths = [user] if os.path.realpath(user) == os.path.realpath(project) else [user, project]
    for path in paths:
        mapping = _read_file(path)
        if mapping is not None:
            servers.update(parse_servers(mapping, str(path)))
    return servers


def parse_servers(mapping: Mapping[str, Any], source: str) -> dict[str, McpServerConfig]:
    """Parse a ``{name: config}`` mapping (the value of ``mcpServers``).

    Used for both files and inline configurations such as an agent definition's
    ``mcpServers``. Each unusable entry is skipped with a warning naming ``source`` and the
    server.

    Args:
        mapping: Server names to their raw JSON configuration.
        source: Where the mapping came from, for messages.

    Returns:
        The usable servers by name, in the mapping's order.
    """
    out: dict[str, McpServerConfig] = {}
    for name, raw in mapping.items():
        try:
            out[name] = parse_server(name, raw, source)
        except McpConfigError as exc:
            log.warning("skipping MCP server: %s", exc)
    return out


def parse_server(name: str, raw: Any, source: str) -> McpServerConfig:
    """Parse and expand one server entry.

    Raises:
        McpConfigError: The entry is malformed or names an unset variable without a default.
    """
    where = f"{source}: server {name!r}"
    if not isinstance(name, str) or not name:
        raise McpConfigError(f"{source}: server names must be non-empty strings, got {name!r}")
    if not isinstance(raw, dict):
        raise McpConfigError(f"{where}: expected an object, got {type(raw).__name__}")
    kind = raw.get("type", "stdio")
    if kind not in _TRANSPORTS:
        raise McpConfigError(f"{where}: unknown type {kind!r}; use one of {', '.join(_TRANSPORTS)}")

    def expand(value: str) -> str:
        return expand_vars(value, where)

    if kind == "sdk":  # the program knows the server by this entry's key
        return McpServerConfig(name, "sdk", source=source)
    if kind == "stdio":
        command = raw.get("command")
        if not isinstance(command, str) or not command.strip():
            raise McpConfigError(f"{where}: a stdio server needs a 'command' string")
        args = _strings(raw.get("args", []), "args", where)
        env = _string_map(raw.get("env", {}), "env", where)
        return McpServerConfig(
            name,
            "stdio",
            command=expand(command),
            args=tuple(expand(a) for a in args),
            env={k: expand(v) for k, v in env.items()},
            source=source,
        )
    url = raw.get("url")
    if not isinstance(url, str) or not url.strip():
        raise McpConfigError(f"{where}: an {kind} server needs a 'url' string")
    headers = _string_map(raw.get("headers", {}), "headers", where)
    return McpServerConfig(
        name,
        kind,
        url=expand(url),
        headers={k: expand(v) for k, v in headers.items()},
        source=source,
    )


def expand_vars(value: str, where: str, environ: Mapping[str, str] | None = None) -> str:
    """Expand ``${VAR}`` and ``${VAR:-default}`` in ``value``.

    As in Claude Code (and unlike the shell), the default applies only when the variable is
    unset; a variable set to the empty string expands to the empty string.

    Args:
        value: The text to expand.
        where: What is being expanded, for the error message (``file: server 'x'``).
        environ: The variables; defaults to ``os.environ``.

    Raises:
        McpConfigError: A variable without a default is unset.
    """
    env = os.environ if environ is None else environ

    def repl(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        if var in env:
            return env[var]
        if default is not None:
            return default
        raise McpConfigError(f"{where}: environment variable {var} is not set (and has no default)")

    return _VAR.sub(repl, value)


def load_flag_configs(values: Iterable[str]) -> dict[str, McpServerConfig]:
    """Load the servers of ``--mcp-config`` values, each a file path or a JSON string.

    Each holds ``{"mcpServers": {name: config}}``, as ``.mcp.json`` does; a later value's
    server replaces an earlier one of the same name.

    Args:
        values: The flag's values, in order.

    Returns:
        The servers by name.

    Raises:
        UsageError: A missing or unreadable file, bad JSON, or an unusable entry; the message
            names the argument.
    """
    servers: dict[str, McpServerConfig] = {}
    for value in values:
        shown = value if len(value) <= 80 else value[:77] + "..."
        inline = value.lstrip().startswith("{")
        source = "--mcp-config" if inline else value
        try:
            text = value if inline else Path(value).expanduser().read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UsageError(f"--mcp-config {shown}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--mcp-config {shown}: cannot read it ({exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--mcp-config {shown}: not valid JSON ({exc})") from None
        mapping = data.get("mcpServers") if isinstance(data, dict) else None
        if not isinstance(mapping, dict):
            raise UsageError(
                f'--mcp-config {shown}: expected a JSON object {{"mcpServers": {{...}}}}'
            )
        for name, raw in mapping.items():
            try:
                servers[name] = parse_server(name, raw, source)
            except McpConfigError as exc:
                raise UsageError(f"--mcp-config {shown}: {exc}") from None
    return servers


def resolve_servers(
    entries: Iterable[str | Mapping[str, Any]],
    configured: Mapping[str, McpServerConfig],
    source: str,
) -> dict[str, McpServerConfig]:
    """Resolve an agent definition's ``mcpServers`` list.

    Each entry is either the name of a configured server or an inline ``{name: config}``
    mapping. Unknown names and bad inline entries are skipped with a warning.

    Args:
        entries: The list from the agent definition.
        configured: The servers from :func:`load_mcp_config`.
        source: The agent definition (file or name), for messages.

    Returns:
        The servers the agent uses, by name, in the order listed.
    """
    out: dict[str, McpServerConfig] = {}
    for entry in entries:
        if isinstance(entry, str):
            if entry in configured:
                out[entry] = configured[entry]
            else:
                log.warning("%s: MCP server %r is not configured; skipping it", source, entry)
        elif isinstance(entry, Mapping):
            out.update(parse_servers(entry, source))
        else:
            log.warning("%s: ignoring MCP server entry %r (not a name or a mapping)", source, entry)
    return out


def _read_file(path: Path) -> Mapping[str, Any] | None:
    """Return the ``mcpServers`` mapping of one file; None when missing or (warned) bad."""
    data = read_json_file(path, "MCP config", log)
    if data is None:
        return None
    servers = data.get("mcpServers", {}) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        log.warning("skipping MCP config %s: 'mcpServers' must be a JSON object", path)
        return None
    return servers


def _strings(value: Any, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise McpConfigError(f"{where}: {key!r} must be a list of strings")
    return value


def _string_map(value: Any, key: str, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise McpConfigError(f"{where}: {key!r} must be an object of strings")
    return value
