"""A remote agent's working copy on the worker, and its changes bundled for the way back.

The snapshot (a git bundle, put once in Ray's object store for all the agents spawned with it)
is unpacked once per actor into a bare repository, its *base* (:class:`Bases`); each agent's
copy is a repository of its own whose objects are borrowed from the base (git's
``objects/info/alternates``): its own refs, index, working tree and branch, and no copy of the
project's history. What the agent commits is written into its own repository, never into the
base. The base goes once the last agent working on it is done.

Nothing here imports Ray.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from taskloom.remote.snapshot import SnapshotError, git

#: The tag on the snapshot commit in an agent's copy (its changes are bundled from there).
BASE_TAG = "taskloom-base"


class Bases:
    """The bare repositories an actor unpacked its snapshots into, by snapshot ref."""

    def __init__(self, root: str | None = None) -> None:
        """Keep them in a directory of their own under ``root`` (None: the temporary one).

        Of their own: the actors of a pool share ``root`` (a local Ray's directory), and an
        actor that ends removes its bases, which other actors' agents still borrow from.
        """
        self._root_given = root
        self._root: Path | None = None
        self._made: dict[str, asyncio.Future[Path]] = {}
        self._users: dict[str, int] = {}

    @property
    def root(self) -> Path:
        """Where they are (made on first use)."""
        if self._root is None:
            parent = None
            if self._root_given:
                parent = Path(self._root_given)
                parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._root = Path(tempfile.mkdtemp(prefix="taskloom-bases-", dir=parent))
        return self._root

    async def hold(self, ref: str, bundle: Callable[[], Awaitable[bytes]]) -> Path:
        """The base of snapshot ``ref`` (unpacked from ``bundle()`` if not yet), held.

        Raises:
            SnapshotError: git could not unpack it.
        """
        self._users[ref] = self._users.get(ref, 0) + 1
        made = self._made.get(ref)
        if made is None or (made.done() and made.exception() is not None):
            made = self._made[ref] = asyncio.ensure_future(self._unpack(ref, bundle))
        try:
            return await asyncio.shield(made)
        except BaseException:
            await self.release(ref)
            raise

    async def _unpack(self, ref: str, bundle: Callable[[], Awaitable[bytes]]) -> Path:
        base = Path(tempfile.mkdtemp(prefix="base-", dir=self.root))
        path = base.with_suffix(".bundle")
        try:
            path.write_bytes(await bundle())
            await git(base, "init", "-q", "--bare")
            await git(base, "fetch", "-q", "--no-write-fetch-head", str(path), f"{ref}:{ref}")
        except BaseException:
            shutil.rmtree(base, ignore_errors=True)
            raise
        finally:
            path.unlink(missing_ok=True)
        return base

    async def release(self, ref: str) -> None:
        """One agent is done with the base of ``ref``; the last one removes it."""
        left = self._users.get(ref, 1) - 1
        if left > 0:
            self._users[ref] = left
            return
        self._users.pop(ref, None)
        made = self._made.pop(ref, None)
        if made is not None and made.done() and made.exception() is None:
            shutil.rmtree(made.result(), ignore_errors=True)

    def remove_all(self) -> None:
        """Remove every base (the actor is ending)."""
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)


async def checkout(scratch: Path, base: Path, spec: dict[str, Any]) -> tuple[Path, str]:
    """The snapshot checked out on the agent's branch, in ``scratch/work``, borrowing ``base``."""
    work = scratch / "work"
    work.mkdir()
    branch = str(spec["branch"])
    await git(work, "init", "-q")
    alternates = work / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{base / 'objects'}\n")
    commit = str(spec.get("snapshot_commit") or "")
    if not commit:
        ref = f"{spec['snapshot_ref']}^{{commit}}"
        commit = (await git(base, "rev-parse", "--verify", ref)).strip()
    await git(work, "checkout", "-q", "-b", branch, commit)
    await git(work, "tag", BASE_TAG)
    return work, branch


async def changes(work: Path, branch: str) -> dict[str, Any] | None:
    """Commit what the agent changed; its bundle and diffstat, None if it changed nothing."""
    try:
        if (await git(work, "status", "--porcelain")).strip():
            await git(work, "add", "-A")
            await git(work, "commit", "-q", "--no-verify", "-m", "taskloom remote agent")
        stat = (await git(work, "diff", "--stat", BASE_TAG, "HEAD")).strip()
        if not stat:
            return None
        out = work.parent / "changes.bundle"
        await git(work, "bundle", "create", "-q", str(out), branch, f"^{BASE_TAG}")
        return {"bundle": out.read_bytes(), "diffstat": stat}
    except SnapshotError as exc:
        return {"error": f"its changes could not be bundled: {exc}"}


__all__ = ["BASE_TAG", "Bases", "changes", "checkout"]
