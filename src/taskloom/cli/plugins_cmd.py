"""``taskloom plugins``: list the plugins that load here, what each brings, and what was skipped."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def plugins_report(plugin_dirs: Sequence[str], cwd: Path) -> dict[str, Any]:
    """What a session started in ``cwd`` with ``--plugin-dir plugin_dirs`` would load.

    Raises:
        SettingsError: The settings (their ``enabledPlugins``) cannot be read.
    """
    from taskloom.plugins import describe, load_plugins
    from taskloom.settings import load_settings

    return describe(load_plugins(plugin_dirs, load_settings(cwd)))


def list_plugins(plugin_dirs: Sequence[str], as_json: bool) -> int:
    """Print the plugins that load in the current directory; returns the exit code."""
    report = plugins_report(plugin_dirs, Path.cwd())
    if as_json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not report["plugins"]:
        print("No plugins.")
    for plugin in report["plugins"]:
        version = f" {plugin['version']}" if plugin["version"] else ""
        print(f"{plugin['name']}{version}  ({plugin['source']}: {plugin['path']})")
        for kind in ("agents", "skills", "commands", "hooks", "mcp_servers"):
            if plugin[kind]:
                print(f"  {kind.replace('_', ' ')}: {', '.join(plugin[kind])}")
    for skipped in report["skipped"]:
        print(f"skipped: {skipped['file']}: {skipped['reason']}")
    return 0
