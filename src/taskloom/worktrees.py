"""Git worktree isolation with a strict contract.

Worktree ``NAME`` lives at ``<root>/.taskloom/worktrees/NAME`` (``root``: ``git rev-parse
--show-toplevel``) on a new branch ``taskloom/NAME`` at the repository's HEAD commit or ``base``.
Any failure raises :class:`WorktreeError` with git's message; nothing falls back to the main tree.

Decisions:

- ``/.taskloom/worktrees/`` goes into the repository's ``info/exclude`` so the main tree's
  ``git status`` never shows worktrees or metadata; unlike a ``.gitignore`` it is never committed.
- ``.taskloom/worktrees/.meta/NAME.json`` records the base commit, the creation time and the
  creating process (pid + start time since boot + boot id). *Stale clean* means: no modified,
  staged or untracked file, HEAD still the base commit on its own branch, and the creating
  process gone — so :func:`prune` never pulls a worktree from under a live session.
- A clean branch is deleted with ``git update-ref -d REF BASE``, a compare-and-delete: a commit
  landing between our check and the deletion makes it fail instead of being lost.
- Outside git, ``WorktreeCreate`` hooks make the directory (the last stdout line names it) and
  ``WorktreeRemove`` hooks get it back; without those we keep it, as we cannot tell what another
  VCS would lose.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from taskloom._aio import finish_despite_cancel
from taskloom._dataclass import dataclass
from taskloom.errors import TaskloomError
from taskloom.hooks import HookConfig, HookResult, run_hooks
from taskloom.process.git import GitError, git
from taskloom.process.identity import boot_id, is_same_process, process_start_time

WORKTREES_DIR = Path(".taskloom") / "worktrees"
BRANCH_PREFIX = "taskloom/"
WORKTREE_CREATE = "WorktreeCreate"
WORKTREE_REMOVE = "WorktreeRemove"
_EXCLUDE_LINE = "/.taskloom/worktrees/"
# One path component that is also a valid branch suffix: no "..", no leading "." or "-".
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}(?:\.[A-Za-z0-9_-]+)*")


class WorktreeError(TaskloomError):
    """A worktree cannot be created, inspected or removed; the message says why."""


@dataclass(frozen=True, slots=True)
class Worktree:
    """An isolated working directory.

    Attributes:
        path: Its directory.
        branch: ``taskloom/NAME``; None when a WorktreeCreate hook made it (as below).
        base_commit: The commit it started from.
        repo_root: The top level of the tree it was made from.
    """

    path: Path
    branch: str | None
    base_commit: str | None
    repo_root: Path | None

    @property
    def hook_based(self) -> bool:
        """Whether a WorktreeCreate hook made it (outside git)."""
        return self.base_commit is None


@dataclass(frozen=True, slots=True)
class WorktreeState:
    """A git worktree compared with its base.

    Attributes:
        head: Its HEAD commit.
        moved: HEAD differs from the base commit.
        commits: Commits in ``BASE..HEAD``.
        changes: ``(XY, path)`` from ``git status --porcelain``, untracked files included.
        diffstat: ``git diff --stat BASE`` (committed and uncommitted) and the untracked files.
    """

    head: str
    moved: bool
    commits: int
    changes: tuple[tuple[str, str], ...]
    diffstat: str

    @property
    def changed_files(self) -> list[str]:
        """Paths with uncommitted or untracked changes."""
        return [path for _, path in self.changes]

    @property
    def clean(self) -> bool:
        """Nothing would be lost by removing the worktree and its branch."""
        return not self.moved and not self.changes


@dataclass(frozen=True, slots=True)
class FinishResult:
    """What :func:`finish`, :func:`remove` or :func:`prune` did with one worktree.

    Attributes:
        kept: The worktree and its branch still exist.
        path: The worktree directory.
        branch: Its branch (None when hook-made).
        diffstat: What it holds beyond its base (empty when clean or unknown).
        reason: Why it was kept or removed.
    """

    kept: bool
    path: Path
    branch: str | None
    diffstat: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WorktreeInfo:
    """One worktree under ``.taskloom/worktrees/`` as :func:`list_worktrees` found it.

    Attributes:
        name: Its directory name.
        path: Its directory.
        branch: The branch checked out there (None when detached).
        head: Its HEAD commit.
        base_commit: The recorded base commit (None without metadata).
        changes: Paths with uncommitted or untracked changes.
        clean: No changes, and HEAD at the base commit on its own branch.
        age_s: Seconds since it was created (None if unknown).
        in_use: The process that created it is still running.
        missing: Git knows it but its directory is gone.
    """

    name: str
    path: Path
    branch: str | None
    head: str
    base_commit: str | None
    changes: tuple[str, ...]
    clean: bool
    age_s: float | None
    in_use: bool
    missing: bool


async def create_worktree(
    repo_cwd: Path,
    name: str,
    *,
    base: str | None = None,
    hooks: HookConfig | None = None,
    session_id: str = "",
) -> Worktree:
    """Create worktree ``name`` on a new branch ``taskloom/NAME`` at ``base`` (default: HEAD).

    Outside a git repository the ``WorktreeCreate`` hooks of ``hooks`` make it instead.

    Raises:
        WorktreeError: A bad name, an unresolvable base (an unborn HEAD), a taken branch or
            path, a failing hook, or neither a git repository nor a WorktreeCreate hook.
    """
    if not _NAME.fullmatch(name):
        raise WorktreeError(
            f"invalid worktree name {name!r}: up to 64 letters, digits, '-', '_' or '.', "
            "starting with a letter or digit"
        )
    root = await _repo_root(repo_cwd)
    if root is None:
        return await _create_with_hooks(repo_cwd, name, hooks, session_id)
    rev = base or "HEAD"
    if rev.startswith("-"):
        raise WorktreeError(f"invalid base {rev!r}")
    try:
        base_commit = (await _git(root, "rev-parse", "--verify", f"{rev}^{{commit}}")).strip()
    except WorktreeError as exc:
        raise WorktreeError(f"cannot resolve {rev} to a commit (unborn HEAD?): {exc}") from exc
    path, branch = root / WORKTREES_DIR / name, BRANCH_PREFIX + name
    if path.exists() or path.is_symlink():
        raise WorktreeError(f"cannot create worktree: {path} already exists")
    branch_existed = await _succeeds(root, "rev-parse", "--verify", "-q", f"refs/heads/{branch}")
    await _ensure_excluded(root)
    try:
        await _git(root, "worktree", "add", "-b", branch, str(path), base_commit)
        _write_meta(root, name, branch, base_commit)
    except BaseException:
        # A failed checkout leaves git's new branch behind; undo all we did, even if cancelled.
        await finish_despite_cancel(_undo_create(root, path, branch, base_commit, branch_existed))
        raise
    return Worktree(path, branch, base_commit, root)


async def inspect(wt: Worktree) -> WorktreeState:
    """Compare a git worktree with its base: HEAD, commits, uncommitted and untracked files.

    Raises:
        WorktreeError: The worktree is hook-made or gone, or git fails.
    """
    if wt.base_commit is None or not wt.path.is_dir():
        raise WorktreeError(f"{wt.path} is not a git worktree that can be inspected")
    head = (await _git(wt.path, "rev-parse", "--verify", "HEAD")).strip()
    commits = int(await _git(wt.path, "rev-list", "--count", f"{wt.base_commit}..HEAD"))
    changes = await _status(wt.path)
    stat = (await _git(wt.path, "diff", "--stat=120", wt.base_commit, "--")).rstrip()
    untracked = [f" {p} | untracked" for code, p in changes if code == "??"]
    untracked += [f" {p} | ignored by git, kept" for code, p in changes if code == "!!"]
    diffstat = "\n".join(part for part in (stat, *untracked) if part)
    return WorktreeState(head, head != wt.base_commit, commits, changes, diffstat)


async def finish(
    wt: Worktree, *, hooks: HookConfig | None = None, session_id: str = ""
) -> FinishResult:
    """Remove the worktree and its branch if nothing would be lost, else keep both.

    A hook-made worktree goes to the ``WorktreeRemove`` hooks (kept when there are none).

    Raises:
        WorktreeError: Inspecting or removing failed; the worktree is then kept.
    """
    if wt.hook_based:
        return await _remove_with_hooks(wt, hooks, session_id)
    state = await inspect(wt)
    if not state.clean:
        return FinishResult(True, wt.path, wt.branch, state.diffstat, _describe(state))
    await _remove_git(wt, force=False)
    return FinishResult(False, wt.path, wt.branch, "", "no changes")


async def remove(
    wt: Worktree, *, discard_changes: bool, hooks: HookConfig | None = None, session_id: str = ""
) -> FinishResult:
    """Remove the worktree and its branch; one with changes only if ``discard_changes``.

    Raises:
        WorktreeError: It has changes (named in the message) and ``discard_changes`` is false;
            git or a WorktreeRemove hook failed; a hook-made one has no WorktreeRemove hook.
    """
    if wt.hook_based:
        result = await _remove_with_hooks(wt, hooks, session_id)
        if result.kept:
            raise WorktreeError(f"cannot remove {wt.path}: {result.reason}")
        return result
    state = await inspect(wt)
    if not state.clean and not discard_changes:
        raise WorktreeError(f"worktree {wt.path} {_describe(state)}; pass discard_changes")
    await _remove_git(wt, force=not state.clean)
    return FinishResult(False, wt.path, wt.branch, state.diffstat, "removed")


async def list_worktrees(repo_cwd: Path) -> list[WorktreeInfo]:
    """The worktrees under ``.taskloom/worktrees/`` of the repository holding ``repo_cwd``.

    Raises:
        WorktreeError: ``repo_cwd`` is not inside a git repository, or git fails.
    """
    root = await _repo_root(repo_cwd)
    if root is None:
        raise WorktreeError(f"{repo_cwd} is not inside a git repository")
    home = (root / WORKTREES_DIR).resolve()
    found: list[WorktreeInfo] = []
    listing = await _git(root, "worktree", "list", "--porcelain")
    for block in listing.split("\n\n"):  # "key value" lines, one block per worktree
        entry = dict(line.partition(" ")[::2] for line in block.splitlines())
        path = Path(entry.get("worktree", "/"))
        if path.resolve().parent != home:
            continue
        meta = _read_meta(root, path.name)
        branch = entry.get("branch", "").removeprefix("refs/heads/") or None
        head, missing = entry.get("HEAD", ""), not path.is_dir()
        changes = () if missing else tuple(p for _, p in await _status(path))
        base = meta.get("base_commit") if isinstance(meta.get("base_commit"), str) else None
        clean = not missing and not changes and head == base and branch == meta.get("branch")
        created = meta.get("created_at")
        if not isinstance(created, int | float):
            created = None if missing else path.stat().st_mtime
        age = None if created is None else max(0.0, time.time() - created)
        info = (path.name, path, branch, head, base, changes, clean, age, _owner_alive(meta))
        found.append(WorktreeInfo(*info, missing=missing))
    return found


async def prune(repo_cwd: Path) -> list[FinishResult]:
    """Remove the stale clean worktrees (see the module docstring); report what became of each.

    Raises:
        WorktreeError: ``repo_cwd`` is not inside a git repository, or listing fails.
    """
    results: list[FinishResult] = []
    for info in await list_worktrees(repo_cwd):
        why = ""
        if info.missing:
            why = "its directory is missing (see `git worktree prune`)"
        elif info.in_use:
            why = "in use: the process that created it is still running"
        elif info.base_commit is None:
            why = "no record of its base commit"
        elif info.changes:
            why = f"uncommitted or untracked changes: {', '.join(info.changes[:10])}"
        elif not info.clean:
            why = "HEAD moved from its base commit: commits would be lost"
        if why:
            results.append(FinishResult(True, info.path, info.branch, "", why))
            continue
        root = info.path.parents[2]  # the path is <root>/.taskloom/worktrees/NAME
        try:
            done = await finish(Worktree(info.path, info.branch, info.base_commit, root))
        except WorktreeError as exc:  # e.g. a commit landed since we looked: keep it
            done = FinishResult(True, info.path, info.branch, "", f"removal failed: {exc}")
        results.append(done if done.kept else replace(done, reason="stale and clean"))
    return results


# --- git --------------------------------------------------------------------------------------


async def _git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` and return its stdout; WorktreeError with git's stderr on failure.

    git runs repository hooks (``post-checkout`` on ``worktree add``) that may hang or start
    daemons: :func:`~taskloom.process.git.git` records it for the orphan sweep, bounds it and
    leaves nothing of it running.
    """
    try:
        return await git(cwd, *args)
    except GitError as exc:
        raise WorktreeError(str(exc)) from exc


async def _succeeds(cwd: Path, *args: str) -> bool:
    try:
        await _git(cwd, *args)
    except WorktreeError:
        return False
    return True


async def _repo_root(cwd: Path) -> Path | None:
    """The top level of the work tree holding ``cwd``; None outside git (or without git)."""
    if not cwd.is_dir():  # else git's failure to start would read as "not a repository"
        raise WorktreeError(f"{cwd} is not a directory")
    try:
        return Path((await _git(cwd, "rev-parse", "--show-toplevel")).strip())
    except WorktreeError as exc:
        if "not a git repository" in str(exc) or "cannot run git" in str(exc):
            return None
        raise


#: Ignored paths that are rebuilt at will (caches, dependencies, build output): a worktree
#: holding only these is still clean. Any other ignored file (``.env``, a log) counts as work,
#: because ``git worktree remove`` would delete it without a word.
REGENERABLE = frozenset(
    {
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".hypothesis",
        "node_modules",
        ".venv",
        "venv",
        ".tox",
        "dist",
        "build",
        "target",
        ".next",
        ".cache",
        ".gradle",
        ".eggs",
    }
)


def _regenerable(path: str) -> bool:
    parts = [p for p in path.split("/") if p]
    return any(p in REGENERABLE or p.endswith(".egg-info") for p in parts) or path.endswith(
        (".pyc", ".pyo")
    )


async def _status(path: Path) -> tuple[tuple[str, str], ...]:
    raw = await _git(
        path, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignored=matching"
    )
    entries = iter(raw.split("\0"))
    out: list[tuple[str, str]] = []
    for entry in entries:
        if entry:
            code, name = entry[:2], entry[3:]
            if code == "!!" and _regenerable(name):
                continue
            out.append((code, name))
            if entry[0] in "RC":
                next(entries, None)  # with -z a rename's source is the next entry
    return tuple(out)


async def _ensure_excluded(root: Path) -> None:
    exclude = root / (await _git(root, "rev-parse", "--git-path", "info/exclude")).strip()
    try:
        text = exclude.read_text() if exclude.exists() else ""
        if _EXCLUDE_LINE not in text.splitlines():
            exclude.parent.mkdir(parents=True, exist_ok=True)
            with exclude.open("a") as f:
                sep = "\n" if text and not text.endswith("\n") else ""
                f.write(f"{sep}# taskloom worktrees\n{_EXCLUDE_LINE}\n")
    except OSError as exc:
        raise WorktreeError(f"cannot add {_EXCLUDE_LINE} to {exclude}: {exc}") from exc


async def _remove_git(wt: Worktree, *, force: bool) -> None:
    assert wt.repo_root is not None and wt.branch is not None and wt.base_commit is not None
    await _git(wt.repo_root, "worktree", "remove", *(["--force"] if force else []), str(wt.path))
    if force:
        await _git(wt.repo_root, "branch", "-D", wt.branch)
    else:
        await _git(wt.repo_root, "update-ref", "-d", f"refs/heads/{wt.branch}", wt.base_commit)
    _meta_path(wt.repo_root, wt.path.name).unlink(missing_ok=True)


async def _undo_create(root: Path, path: Path, branch: str, base: str, existed: bool) -> None:
    await _succeeds(root, "worktree", "remove", "--force", str(path))
    if not existed:
        await _succeeds(root, "update-ref", "-d", f"refs/heads/{branch}", base)
    _meta_path(root, path.name).unlink(missing_ok=True)


def _describe(state: WorktreeState) -> str:
    parts = []
    if files := state.changed_files:
        more = f" and {len(files) - 10} more" if len(files) > 10 else ""
        parts.append(f"uncommitted or untracked changes in {', '.join(files[:10])}{more}")
    if state.moved:
        parts.append(f"{state.commits} commit(s) beyond its base" if state.commits else "moved")
    return "has " + " and ".join(parts)


# --- metadata ---------------------------------------------------------------------------------


def _meta_path(root: Path, name: str) -> Path:
    return root / WORKTREES_DIR / ".meta" / f"{name}.json"


def _write_meta(root: Path, name: str, branch: str, base_commit: str) -> None:
    pid = os.getpid()
    owner = {"pid": pid, "start": process_start_time(pid), "boot": boot_id()}
    meta = {"branch": branch, "base_commit": base_commit, "created_at": time.time(), "owner": owner}
    path = _meta_path(root, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{name}.{pid}.tmp")
    tmp.write_text(json.dumps(meta, indent=2))
    os.replace(tmp, path)  # readers never see half a file


def _read_meta(root: Path, name: str) -> dict[str, Any]:
    try:
        data = json.loads(_meta_path(root, name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _owner_alive(meta: dict[str, Any]) -> bool:
    try:
        owner = meta["owner"]
        return is_same_process(int(owner["pid"]), float(owner["start"]), str(owner["boot"]))
    except (KeyError, TypeError, ValueError):  # no or malformed record: nobody claims it
        return False


# --- outside git: WorktreeCreate / WorktreeRemove hooks ---------------------------------------


async def _hooks(
    hooks: HookConfig, event: str, payload: dict[str, str], cwd: Path, session_id: str
) -> tuple[list[HookResult], list[str]]:
    """Run ``event``'s hooks; return their results and a description of each failure."""
    # The event is passed by name: HookEvent may not list the worktree events yet.
    out = await run_hooks(
        hooks, event, payload, target=None, cwd=cwd, session_id=session_id, transcript_path=None
    )
    failed = [r for r in out.results if r.exit_code != 0 or r.timed_out]
    why = [f"{r.command!r}: {r.stderr.strip() or f'exit code {r.exit_code}'}" for r in failed]
    return out.results, why


async def _create_with_hooks(
    cwd: Path, name: str, hooks: HookConfig | None, session_id: str
) -> Worktree:
    if hooks is None or not hooks.matching(WORKTREE_CREATE):
        raise WorktreeError(
            f"worktree isolation needs a git repository or WorktreeCreate hooks: {cwd} is not "
            "inside a git repository and no WorktreeCreate hook is configured"
        )
    results, failures = await _hooks(hooks, WORKTREE_CREATE, {"name": name}, cwd, session_id)
    if failures:
        raise WorktreeError(f"WorktreeCreate hook failed: {'; '.join(failures)}")
    lines = [ln.strip() for r in results for ln in r.stdout.splitlines() if ln.strip()]
    if not lines:
        raise WorktreeError("the WorktreeCreate hooks printed no directory")
    path = (cwd / lines[-1]).resolve()
    if not path.is_dir():
        raise WorktreeError(f"the WorktreeCreate hooks named {path}, which is not a directory")
    return Worktree(path, None, None, None)


async def _remove_with_hooks(
    wt: Worktree, hooks: HookConfig | None, session_id: str
) -> FinishResult:
    if hooks is None or not hooks.matching(WORKTREE_REMOVE):
        return FinishResult(True, wt.path, None, "", "hook-made and no WorktreeRemove hook")
    payload = {"worktree_path": str(wt.path)}
    _, failures = await _hooks(hooks, WORKTREE_REMOVE, payload, wt.path.parent, session_id)
    if failures:
        return FinishResult(True, wt.path, None, "", f"WorktreeRemove hook failed: {failures}")
    return FinishResult(False, wt.path, None, "", "removed by the WorktreeRemove hooks")
