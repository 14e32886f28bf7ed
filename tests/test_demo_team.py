"""``taskloom demo --team`` and ``bench/team.py``, run as a user would run them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from helpers import TIME_FACTOR, clean_env

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent


def _taskloom(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskloom", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
    )


def test_the_team_demo_splits_a_task_list_between_two_teammates(tmp_path: Path) -> None:
    env = clean_env(TASKLOOM_HOME=str(tmp_path / "home"))
    proc = _taskloom("demo", "--team", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout

    # The lead makes the task list, spawns both teammates in one message, assigns one each.
    assert "← Task #1 created successfully: Fix clamp in mathutil.py" in out
    assert "← Task #2 created successfully: Fix slugify in textutil.py" in out
    spawn = out.index("lead: Spawning alice and bob, in one message.")
    calls = out[spawn:].splitlines()[1:3]
    assert calls[0].startswith("  → Agent(") and "name='alice'" in calls[0]
    assert calls[1].startswith("  → Agent(") and "name='bob'" in calls[1]
    team = re.search(r"agent_id: alice@(\S+)", out)
    assert team is not None and f"agent_id: bob@{team.group(1)}" in out
    assert "→ TaskUpdate(taskId='1', owner='alice')" in out
    assert "→ TaskUpdate(taskId='2', owner='bob')" in out

    # Each teammate is told, claims its task, fixes its file, tests it, completes, reports.
    for name, task, module in (("alice", 1, "mathutil"), ("bob", 2, "textutil")):
        steps = [
            f"    {name} ✉ from team-lead: task_assignment: #{task} ",
            f"    {name} → TaskUpdate(taskId='{task}', status='in_progress')",
            f"    {name} → Edit(file_path=",
            f"    {name} ← The file ",
            f"    {name} → Bash(command='python3 test_{module}.py'",
            f"    {name} → TaskUpdate(taskId='{task}', status='completed')",
            f"    {name} → SendMessage(to='team-lead', message='Fixed #{task} ",
            f"✉ {name} → lead: Fixed #{task} ",
            f"    {name} ✉ from team-lead: shutdown_request shutdown-",
            f"✉ {name} → lead: shutdown_approved shutdown-",
        ]
        at = [out.index(step) for step in steps]
        assert at == sorted(at), name
        assert re.search(rf"✉ {name} → lead: Fixed #{task} .*\[#{task} fixed, 3 passed", out)
        assert re.search(r"^ +3 passed, 0 failed$", out, re.M)
    assert re.search(r"6\s+return max\(low, min\(value, high\)\)", out)  # Edit's snippet
    assert re.search(r'6\s+return "-"\.join\(title\.lower\(\)\.split\(\)\)', out)

    # The task list: both completed, with their owners; then the lead's summary.
    assert "← #1 [completed] Fix clamp in mathutil.py (alice)" in out
    assert "  #2 [completed] Fix slugify in textutil.py (bob)" in out
    assert out.count("shutdown_approved shutdown-") == 2
    assert "lead: Done. Both bugs are fixed and tested" in out
    assert "+    return max(low, min(value, high))" in out  # git diff, in the demo's repo

    # No team is left behind in the store, and nothing runs in the demo's repository.
    listed = _taskloom("teams", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["teams"] == []
    repo = re.search(r"a scripted model in (\S+)", out)
    assert repo is not None and not Path(repo.group(1)).exists()
    assert not [
        p for p in psutil.process_iter(["cwd"]) if (p.info["cwd"] or "").startswith(repo.group(1))
    ]


def test_the_team_demo_and_the_coordinator_demo_are_exclusive(tmp_path: Path) -> None:
    env = clean_env(TASKLOOM_HOME=str(tmp_path / "home"))
    proc = _taskloom("demo", "--team", "--coordinator", env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--team" in proc.stderr
    assert proc.stdout == ""


def test_the_team_bench_prints_its_figures() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "team.py"), "--runs", "1"],
        capture_output=True,
        text=True,
        # About 11 s alone; the whole suite running beside it has made it take over 60 s.
        timeout=180 * TIME_FACTOR,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for figure in ("wall_s_median", "wall_s_min", "peak_rss_mib_max"):
        assert re.search(rf"^  {figure}: \d+\.\d+", out, re.M), figure
    for figure in ("delivery_ms_p50", "delivery_ms_max"):
        assert re.search(rf"^  {figure}: \d+\.\d+$", out, re.M), figure
    assert re.search(r"^  lead_requests_per_run: \d+$", out, re.M)
    assert re.search(r"^  teammate_requests_per_run: \d+$", out, re.M)
    assert "finished_runs: 1/1" in out and "teams_left: 0" in out
    assert re.search(r"^baseline: taskloom -p hi", out, re.M)
    assert re.search(r"^(PASS|MISS): wall \d+\.\d+ s \(target <= 1.0 s\)$", out, re.M)
    assert re.search(r"^(PASS|MISS): delivery p50 \d+\.\d+ ms \(target <= 20 ms\)$", out, re.M)
    assert re.search(r"^(PASS|MISS): peak RSS \d+\.\d+ MiB \(target <= 70 MiB\)$", out, re.M)
