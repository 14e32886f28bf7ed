"""``taskloom demo --coordinator`` and ``bench/coordinator.py``, run as a user would run them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from helpers import clean_env

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
BUGGY = "return (ordered[middle] + ordered[middle + 1]) / 2"
FIXED = "return (ordered[middle - 1] + ordered[middle]) / 2"


def _notes(out: str, task_id: str) -> list[str]:
    """The notification blocks printed for ``task_id``, in order."""
    blocks = re.findall(r"<task-notification>.*?</task-notification>", out, re.S)
    return [b for b in blocks if f"<task-id>{task_id}</task-id>" in b]


def _left_in(repo: str) -> list[psutil.Process]:
    """Processes still running in the demo's repository (its commands, had any survived)."""
    left = []
    for proc in psutil.process_iter(["cwd"]):
        if (proc.info["cwd"] or "").startswith(repo):
            left.append(proc)
    return left


def test_the_coordinator_demo_plays_the_four_phases_with_real_workers(tmp_path: Path) -> None:
    env = clean_env(TASKLOOM_HOME=str(tmp_path / "home"))
    proc = subprocess.run(
        [sys.executable, "-m", "taskloom", "demo", "--coordinator"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    lines = out.splitlines()

    # The phases, announced in order.
    phases = ["research", "synthesis", "implementation", "verification"]
    at = [out.index(f"coordinator: Phase {n} — {p}") for n, p in enumerate(phases, 1)]
    assert at == sorted(at)

    # Research: the coordinator's first turn starts both workers, one call after the other.
    first = next(i for i, line in enumerate(lines) if line.startswith("coordinator: Phase 1"))
    assert lines[first + 1].startswith("  → Agent(description='find the median bug'")
    assert lines[first + 2].startswith("  → Agent(description='run the whole test suite'")
    research, suite, verify = re.findall(r"^    agentId: (\w+)", out, re.M)

    # The slow worker really ran its command, and was stopped with everything it started.
    assert re.search(rf"{suite} \(run the whole test suite\) → Bash\(command='python3 ", out)
    assert f"← Successfully stopped task: {suite} (run the whole test suite)" in out
    (killed,) = _notes(out, suite)
    assert "<status>killed</status>" in killed
    assert 'Agent "run the whole test suite" was stopped' in killed

    # Implementation: the researcher, continued under its id, made the change with Edit.
    assert f"→ SendMessage(to='{research}'" in out
    assert f"Agent {research} had completed; it was resumed in the background" in out
    assert f"{research} (find the median bug) ✉ resumed with the coordinator's message" in out
    found, fixed = _notes(out, research)
    assert "<status>completed</status>" in found and "Location: " in found
    assert "<status>completed</status>" in fixed and "has been updated" in fixed
    assert re.search(rf"{research} \(find the median bug\) ← The file \S+stats.py has been", out)
    assert re.search(rf"15\s+{re.escape(FIXED)}", out)  # the edited file, as Edit showed it
    assert f"-    {BUGGY}" in out and f"+    {FIXED}" in out  # git diff, in the demo's repo

    # Verification: a third, fresh worker ran the tests, which passed.
    assert f"{verify} (verify the median fix) → Bash(command='python3 test_stats.py'" in out
    (verdict,) = _notes(out, verify)
    assert "<status>completed</status>" in verdict
    assert "Verification PASS" in verdict and "4 passed, 0 failed" in verdict
    assert "coordinator: Done." in out and "3 workers" in out

    # The store saw it the same way; nothing the demo started is still running.
    listed = subprocess.run(
        [sys.executable, "-m", "taskloom", "tasks", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    rows = {r["id"]: r["status"] for r in json.loads(listed.stdout)}
    assert (rows[research], rows[suite], rows[verify]) == ("completed", "killed", "completed")
    repo = re.search(r"a scripted model in (\S+)", out)
    assert repo is not None and _left_in(repo.group(1)) == []


def test_the_coordinator_bench_prints_its_figures() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "coordinator.py"), "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for figure in (
        "wall_s_median",
        "wall_s_min",
        "peak_rss_mib_max",
        "slowest_scripted_step_s",
        "overhead_s_median",
    ):
        assert re.search(rf"^  {figure}: \d+\.\d+", out, re.M), figure
    assert re.search(r"^  model_requests_per_run: \d+$", out, re.M)
    assert "finished_runs: 1/1" in out and "left_running: 0" in out
    assert re.search(r"^baseline: taskloom -p hi", out, re.M)
    assert re.search(r"^(PASS|MISS): overhead \d+\.\d+ s \(target <= 0.5 s\)$", out, re.M)
    assert re.search(r"^(PASS|MISS): peak RSS \d+\.\d+ MiB \(target <= 60 MiB\)$", out, re.M)
