"""Remote agents' parts that need no Ray: the snapshot and its changes coming back, the
cluster's address, what travels in the environment."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

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
