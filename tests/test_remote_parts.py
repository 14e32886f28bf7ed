"""Remote agents' parts that need no Ray: the snapshot and its changes coming back, the
cluster's address, what travels in the environment."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import TIME_FACTOR, run_processes
from taskloom.remote.cluster import ClusterError, configured_address, endpoint, probe
from taskloom.remote.snapshot import SnapshotError, Snapshots, bring_back, forget, git, take
from taskloom.remote.spec import carried_env

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run([*GIT, "init", "-q"], cwd=repo, check=True)
    (repo / "a.txt").write_text("one\n")
    (repo / ".gitignore").write_text("ignored.txt\n")
    subprocess.run([*GIT, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "one"], cwd=repo, check=True)
    (repo / "a.txt").write_text("two\n")  # modified, staged
    subprocess.run([*GIT, "add", "a.txt"], cwd=repo, check=True)
    (repo / "new.txt").write_text("new\n")  # untracked
    (repo / "ignored.txt").write_text("secret\n")
    return repo


def _state(repo: Path) -> tuple[str, str]:
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True,
                            text=True, check=True).stdout  # fmt: skip
    index = subprocess.run(["git", "ls-files", "-s"], cwd=repo, capture_output=True, text=True,
                           check=True).stdout  # fmt: skip
    return status, index


async def test_a_snapshot_holds_head_and_the_uncommitted_changes_and_touches_nothing(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    before = _state(repo)
    snap = await take(repo, "rtest0001")
    assert _state(repo) == before  # the user's index and working tree are as they were
    files = (await git(repo, "ls-tree", "-r", "--name-only", snap.commit)).split()
    assert sorted(files) == [".gitignore", "a.txt", "new.txt"]  # not the ignored file
    assert (await git(repo, "show", f"{snap.commit}:a.txt")) == "two\n"
    # A worker's side: clone the bundle, change something, bundle it back.
    work = tmp_path / "work"
    work.mkdir()
    bundle = tmp_path / "s.bundle"
    bundle.write_bytes(snap.bundle)
    await git(work, "init", "-q")
    await git(work, "fetch", "-q", str(bundle), f"{snap.ref}:refs/heads/taskloom/remote-t")
    await git(work, "checkout", "-q", "taskloom/remote-t")
    (work / "made.txt").write_text("made\n")
    await git(work, "add", "-A")
    await git(work, "commit", "-q", "-m", "agent")
    back = tmp_path / "back.bundle"
    await git(work, "bundle", "create", "-q", str(back), "taskloom/remote-t", f"^{snap.commit}")
    await bring_back(snap, back.read_bytes(), "taskloom/remote-t")
    assert (await git(repo, "show", "taskloom/remote-t:made.txt")) == "made\n"
    assert _state(repo) == before and not (repo / "made.txt").exists()
    await forget(snap)
    assert (await git(repo, "for-each-ref", "refs/taskloom")) == ""


async def test_agents_spawned_together_share_one_snapshot_and_the_last_drops_its_ref(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    shared = Snapshots()
    one, two = await asyncio.gather(shared.take(repo, "r1"), shared.take(repo, "r2"))
    assert one is two
    await shared.release(one)
    assert (await git(repo, "for-each-ref", "refs/taskloom")).strip()  # one still uses it
    await shared.release(two)
    assert (await git(repo, "for-each-ref", "refs/taskloom")) == ""
    later = await shared.take(repo, "r3")
    assert later.ref != one.ref
    await shared.release(later)


async def test_a_directory_outside_git_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="copies a git repository"):
        await take(tmp_path, "rnogit001")


# Run by a repository hook: is the tag of the git running it recorded in the store?
RECORDED = (
    "import os, sqlite3, sys; "
    "db = os.path.join(os.environ['TASKLOOM_HOME'], 'taskloom.db'); "
    "tag = os.environ.get('TASKLOOM_TASK_ID', 'none'); "
    "n = sqlite3.connect(db).execute('SELECT count(*) FROM tags WHERE tag = ?', (tag,)); "
    "open(sys.argv[1], 'a').write(f'{tag} {n.fetchone()[0]}' + chr(10))"
)


async def test_the_snapshot_s_git_is_recorded_and_killed_at_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taskloom.remote import snapshot
    from taskloom.tasks.runtime import TaskRuntime

    repo = _repo(tmp_path)
    report = tmp_path / "report"
    hook = repo / ".git" / "hooks" / "reference-transaction"  # run by `update-ref`
    # It says whether its git was recorded, then hangs with a child that left its group.
    check = shlex.join([sys.executable, "-c", RECORDED, str(report)])
    hook.write_text(
        f"#!/bin/sh\n{check}\nsetsid sleep 3421 </dev/null >/dev/null 2>&1 &\nsleep 3421\n"
    )
    hook.chmod(0o755)
    monkeypatch.setattr(snapshot, "GIT_TIMEOUT_S", 1.0)
    async with TaskRuntime():
        started = time.monotonic()
        with pytest.raises(SnapshotError, match=r"git update-ref timed out after 1 s in "):
            await asyncio.wait_for(take(repo, "rhang0001"), 30 * TIME_FACTOR)
        assert time.monotonic() - started < 1.0 + 5.0 * TIME_FACTOR
    [line] = report.read_text().splitlines()
    tag, count = line.split()
    assert tag.startswith("git-") and count == "1", line  # recorded before it ran
    assert run_processes(lambda p: p.info.get("cmdline") == ["sleep", "3421"]) == []


def test_the_cluster_address_comes_from_the_environment_then_the_settings() -> None:
    settings = {"remote": {"address": "head:6379"}}
    assert configured_address(settings, {"RAY_ADDRESS": "ray://x:1"}) == "ray://x:1"
    assert configured_address(settings, {}) == "head:6379"
    assert configured_address({}, {}) is None
    assert endpoint("ray://h") == ("h", 10001)
    assert endpoint("h:7000") == ("h", 7000)
    assert endpoint("auto") is None
    with pytest.raises(ClusterError, match="the port is not a number"):
        endpoint("h:x")


async def test_a_cluster_that_is_not_there_is_said_at_once() -> None:
    with pytest.raises(ClusterError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:9"):
        await probe("127.0.0.1:9", "127.0.0.1", 9)


def test_the_model_s_credentials_travel_and_the_parent_s_own_paths_do_not() -> None:
    env = {
        "ANTHROPIC_API_KEY": "k", "OPENAI_BASE_URL": "u", "TASKLOOM_HOME": "/h",
        "TASKLOOM_TASK_ID": "b1", "TASKLOOM_MODEL": "m", "HOME": "/root", "PATH": "/bin",
    }  # fmt: skip
    assert carried_env(env) == {"ANTHROPIC_API_KEY": "k", "OPENAI_BASE_URL": "u",
                                "TASKLOOM_MODEL": "m"}  # fmt: skip
