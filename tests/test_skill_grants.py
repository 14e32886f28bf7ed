"""Allow rules granted for a turn: what a skill's or command's ``allowed-tools`` do."""

from __future__ import annotations

from pathlib import Path

from taskloom.permissions import PermissionPolicy, PermissionRequest
from taskloom.permissions.rules import parse_rule


def bash(command: str, cwd: Path) -> PermissionRequest:
    return PermissionRequest("Bash", "execute", command, cwd, {"command": command})


def test_granted_rules_allow_until_the_turn_ends(tmp_path: Path) -> None:
    policy = PermissionPolicy("default", [parse_rule("Bash(rm:*)", "deny", "test")], tmp_path)
    child = policy.with_mode("default")  # an agent it starts: its own turns, its own grants
    assert policy.decide(bash("git status", tmp_path)).behavior == "ask"
    policy.grant(
        [parse_rule("Bash(git:*)", "allow", "skill"), parse_rule("Bash(rm:*)", "allow", "s")]
    )
    assert policy.decide(bash("git status", tmp_path)).behavior == "allow"
    assert policy.decide(bash("rm -rf x", tmp_path)).behavior == "deny"  # deny comes first
    assert child.decide(bash("git status", tmp_path)).behavior == "ask"
    assert [str(r) for r in policy.granted] == ["Bash(git:*)", "Bash(rm:*)"]
    policy.end_grants()
    assert policy.decide(bash("git status", tmp_path)).behavior == "ask"
    assert policy.granted == ()
