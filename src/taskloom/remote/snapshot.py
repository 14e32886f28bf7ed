"""The copy of the project a remote agent works on, and its changes coming back.

Out: the parent's HEAD plus its uncommitted changes (untracked files too, ``.gitignore``
respected) become one commit, written through a private index so that the user's index and
working tree are never touched; a git bundle of it (full history: the worker clones it) is
what travels. Back: the worker commits what the agent changed on top of that commit and
bundles only that; the parent fetches it as branch ``taskloom/remote-<id8>``. Nothing is ever
written over the working tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path

from taskloom._dataclass import dataclass
from taskloom.errors import TaskloomError
from taskloom.process.git import GitError
from taskloom.process.git import git as run_git

#: Seconds one git command of a copy may take: copying a large project (``add -A``, a bundle
#: of its whole history, the worker's fetch and checkout) may take minutes, but none may hang.
GIT_TIMEOUT_S = 600.0

#: Who the snapshot commits are by (git refuses to commit without a name).
_IDENTITY = {
    "GIT_AUTHOR_NAME": "taskloom",
    "GIT_AUTHOR_EMAIL": "taskloom@localhost",
    "GIT_COMMITTER_NAME": "taskloom",
    "GIT_COMMITTER_EMAIL": "taskloom@localhost",
}


class SnapshotError(TaskloomError):
    """The project could not be copied, or the changes could not be brought back."""


@dataclass(frozen=True)
class Snapshot:
    """The commit a remote agent starts from.

    Attributes:
        root: The repository's top directory.
        commit: The snapshot commit (HEAD plus the uncommitted changes).
        ref: The ref that keeps it until the agent's changes are back.
        bundle: Its bundle's bytes.
    """

    root: Path
    commit: str
    ref: str
    bundle: bytes


async def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run git in ``cwd`` as the snapshot's author; its output.

    Raises:
        SnapshotError: It failed or ran past :data:`GIT_TIMEOUT_S` (the message says why).
    """
    try:
        return await run_git(cwd, *args, env={**_IDENTITY, **(env or {})}, timeout=GIT_TIMEOUT_S)
    except GitError as exc:
        raise SnapshotError(str(exc)) from exc


async def take(cwd: Path, tag: str) -> Snapshot:
    """Snapshot the repository ``cwd`` is in, kept by ``refs/taskloom/snapshot-<tag>``.

    Raises:
        SnapshotError: ``cwd`` is not in a git repository, or git failed.
    """
    try:
        root = Path((await git(cwd, "rev-parse", "--show-toplevel")).strip())
    except SnapshotError:
        raise SnapshotError(
            f"isolation 'remote' copies a git repository, and {cwd} is not in one"
        ) from None
    with tempfile.TemporaryDirectory(prefix="taskloom-snapshot-") as scratch:
        index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        head: str | None
        try:
            head = (await git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}")).strip()
        except SnapshotError:
            head = None  # a repository with no commit yet
        if head:
            await git(root, "read-tree", head, env=index)
        await git(root, "add", "-A", env=index)
        tree = (await git(root, "write-tree", env=index)).strip()
        parents = ["-p", head] if head else []
        commit = (
            await git(root, "commit-tree", tree, *parents, "-m", f"taskloom remote {tag}")
        ).strip()
        ref = f"refs/taskloom/snapshot-{tag}"
        await git(root, "update-ref", ref, commit)
        path = Path(scratch) / "snapshot.bundle"
        await git(root, "bundle", "create", "-q", str(path), ref)
        return Snapshot(root, commit, ref, path.read_bytes())


async def bring_back(snapshot: Snapshot, bundle: bytes, branch: str) -> None:
    """Fetch the agent's changes (a bundle on top of the snapshot) as ``branch``.

    Raises:
        SnapshotError: git refused it (the branch exists, the bundle is broken).
    """
    with tempfile.TemporaryDirectory(prefix="taskloom-changes-") as scratch:
        path = Path(scratch) / "changes.bundle"
        path.write_bytes(bundle)
        await git(
            snapshot.root,
            "fetch", "-q", "--no-write-fetch-head", str(path), f"{branch}:refs/heads/{branch}",
        )  # fmt: skip


async def forget(snapshot: Snapshot) -> None:
    """Drop the ref that kept the snapshot (its objects go with git's next gc)."""
    with contextlib.suppress(SnapshotError):  # gone already: nothing to keep
        await git(snapshot.root, "update-ref", "-d", snapshot.ref)


class Snapshots:
    """Snapshots shared by the remote agents of one moment.

    Agents spawned together (one turn's Agent calls) start from the same commit: one
    snapshot is taken for all that ask while it is being taken, and its ref goes once the
    last of them is done with it. One asked for later is a new one (the tree may have
    changed since). What is made of a snapshot to send it (a Ray object) is kept with it.
    """

    def __init__(self) -> None:
        """No snapshot yet."""
        self._taking: dict[Path, asyncio.Future[Snapshot]] = {}
        self._users: dict[str, int] = {}
        #: By snapshot ref: the snapshot as sent (see :meth:`payload`).
        self._payloads: dict[str, object] = {}
        #: Refs a detached agent still needs after this process.
        self._kept: set[str] = set()

    async def take(self, cwd: Path, tag: str) -> Snapshot:
        """The snapshot being taken of ``cwd`` now, else a new one (kept until released).

        Raises:
            SnapshotError: ``cwd`` is not in a git repository, or git failed.
        """
        key = cwd.resolve()
        pending = self._taking.get(key)
        if pending is None:
            pending = asyncio.ensure_future(take(cwd, tag))
            self._taking[key] = pending
            pending.add_done_callback(lambda _: self._taking.pop(key, None))
        snapshot = await asyncio.shield(pending)
        self._users[snapshot.ref] = self._users.get(snapshot.ref, 0) + 1
        return snapshot

    def adopt(self, snapshot: Snapshot) -> None:
        """Hold a snapshot taken by an earlier process (a resumed agent's), until released."""
        self._users[snapshot.ref] = self._users.get(snapshot.ref, 0) + 1

    def payload(self, snapshot: Snapshot, make: Callable[[bytes], object]) -> object:
        """``make(snapshot.bundle)``, made once per snapshot (its agents share it)."""
        if snapshot.ref not in self._payloads:
            self._payloads[snapshot.ref] = make(snapshot.bundle)
        return self._payloads[snapshot.ref]

    async def release(self, snapshot: Snapshot, *, keep_ref: bool = False) -> None:
        """One user is done with it; the last one drops its ref.

        Unless one of them said ``keep_ref``: a detached agent's changes come back on top of
        it later, in another process.
        """
        if keep_ref:
            self._kept.add(snapshot.ref)
        left = self._users.get(snapshot.ref, 1) - 1
        if left > 0:
            self._users[snapshot.ref] = left
            return
        self._users.pop(snapshot.ref, None)
        self._payloads.pop(snapshot.ref, None)
        if snapshot.ref not in self._kept:
            await forget(snapshot)


__all__ = ["Snapshot", "SnapshotError", "Snapshots", "bring_back", "forget", "git", "take"]
