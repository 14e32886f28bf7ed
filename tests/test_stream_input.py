"""``--input-format stream-json`` at its edges: input that ends at once, a signal while idle,
lines that are not the protocol, and tool output too large for one protocol line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from helpers import clean_env


def start(tmp_path: Path, turns: list[Any]) -> subprocess.Popen[str]:
    script = tmp_path / "turns.yaml"
    script.write_text(yaml.safe_dump({"turns": turns}))
    argv = [sys.executable, "-m", "taskloom", "--input-format", "stream-json"]
    argv += ["--output-format", "stream-json", "--model", f"scripted:{script}"]
    argv += ["--dangerously-skip-permissions"]
    return subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=clean_env(TASKLOOM_HOME=str(tmp_path / "home")),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def user(text: str) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n"


def test_input_that_ends_before_any_line_ends_the_session(tmp_path: Path) -> None:
    proc = start(tmp_path, [])
    out, err = proc.communicate("", timeout=30)
    assert proc.returncode == 0, err
    assert out == ""


def test_a_signal_while_no_turn_runs_ends_the_session_at_once(tmp_path: Path) -> None:
    proc = start(tmp_path, [{"text": "one"}])
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(user("hi"))
    proc.stdin.flush()
    lines = []
    while not lines or json.loads(lines[-1])["type"] != "result":
        lines.append(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)  # idle now, its input still open
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 143
    assert out == ""  # no second result: no turn was running


def test_lines_that_are_not_the_protocol_are_reported_and_skipped(tmp_path: Path) -> None:
    proc = start(tmp_path, [{"text": "still here"}])
    text = "not json\n" + json.dumps({"type": "bogus"}) + "\n" + user("hi")
    out, err = proc.communicate(text, timeout=30)
    assert proc.returncode == 0, err
    assert "stdin line 1 is not JSON" in err and "unknown message type 'bogus'" in err
    assert json.loads(out.splitlines()[-1])["result"] == "still here"


def test_a_huge_tool_result_still_fits_the_protocols_line_limit(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text(("x" * 1500 + "\n") * 1000)  # 1.5 MB
    turns = [{"tool_calls": [{"name": "Read", "input": {"file_path": str(tmp_path / "big.txt")}}]}]
    proc = start(tmp_path, [*turns, {"text": "read it"}])
    out, err = proc.communicate(user("read"), timeout=60)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert max(len(line.encode()) for line in lines) < 1024 * 1024  # the SDK's default buffer
    events = [json.loads(line) for line in lines]
    assert events[-1]["result"] == "read it"
    (shown,) = [b for e in events if e["type"] == "user" for b in e["message"]["content"]]
    assert "left out of this line" in str(shown["content"])


def test_a_signal_during_a_turn_ends_it_with_its_result_and_the_session(tmp_path: Path) -> None:
    proc = start(tmp_path, [{"tool_calls": [{"name": "Bash", "input": {"command": "sleep 30"}}]}])
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(user("wait"))
    proc.stdin.flush()
    while '"task_started"' not in proc.stdout.readline():  # the command runs now
        pass
    proc.send_signal(signal.SIGTERM)  # its input still open
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 143
    result = json.loads(out.splitlines()[-1])
    assert result["type"] == "result" and result["result"] == "interrupted"
