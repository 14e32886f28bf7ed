"""Permission rules, matchers and the policy: modes x rule forms, precedence, headless."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskloom.errors import UserError
from taskloom.permissions import (
    Behavior,
    Decision,
    PermissionMode,
    PermissionPolicy,
    PermissionRequest,
    Rule,
    command_matches,
    headless,
    parse_rule,
    path_matches,
    split_command,
    split_rule_list,
)
from taskloom.permissions.matchers import tool_matches
from taskloom.tools.base import ToolKind

ROOT = Path("/work/proj")
CWD = ROOT / "pkg"
HOME = Path("/home/tester")

KINDS: dict[str, ToolKind] = {
    "Bash": "execute",
    "Read": "read",
    "Glob": "read",
    "Grep": "read",
    "Edit": "edit",
    "Write": "edit",
    "NotebookEdit": "edit",
    "WebFetch": "fetch",
    "Agent": "other",
    "TaskOutput": "other",
}


@pytest.fixture(autouse=True)
def fake_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(HOME))


def req(tool: str, target: str | None = None, **inp: object) -> PermissionRequest:
    kind = KINDS.get(tool, "execute")  # MCP tools: they act on the world
    return PermissionRequest(tool, kind, target, CWD, dict(inp))


def policy(mode: str = "default", **lists: list[str]) -> PermissionPolicy:
    settings = {"permissions": lists}
    return PermissionPolicy.from_settings(settings, mode=mode, project_root=ROOT)


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tool", "content"),
    [
        ("Bash", "Bash", None),
        ("Bash()", "Bash", None),
        ("Bash(*)", "Bash", None),
        ("Bash(npm test:*)", "Bash", "npm test:*"),
        ("Bash(git diff *)", "Bash", "git diff *"),
        ("  Read(./secrets/**) ", "Read", "./secrets/**"),
        ("Edit(/src/**/*.ts)", "Edit", "/src/**/*.ts"),
        ("Read(//etc/passwd)", "Read", "//etc/passwd"),
        ("Read(~/x)", "Read", "~/x"),
        ("WebFetch(domain:example.com)", "WebFetch", "domain:example.com"),
        ("mcp__srv", "mcp__srv", None),
        ("mcp__srv__*", "mcp__srv__*", None),
        ("mcp__srv__tool", "mcp__srv__tool", None),
        ("Agent(Explore)", "Agent", "Explore"),
        ("Task(Explore)", "Agent", "Explore"),
        ("Bash(echo (hi))", "Bash", "echo (hi)"),
        (r"Bash(python -c print\(1\))", "Bash", "python -c print(1)"),
    ],
)
def test_parse_rule(text: str, tool: str, content: str | None) -> None:
    rule = parse_rule(text, "allow", "test")
    assert (rule.tool, rule.content, rule.behavior, rule.source) == (tool, content, "allow", "test")


@pytest.mark.parametrize(
    "text", ["", "()", "(ls)", "Bash(ls", "Bash(ls))", "Bash)", "Bash(ls) x", "Ba sh", "Bash((ls)"]
)
def test_malformed_rule_names_rule_and_source(text: str) -> None:
    with pytest.raises(UserError) as info:
        parse_rule(text, "deny", "settings permissions.deny")
    assert repr(text) in str(info.value)
    assert "settings permissions.deny" in str(info.value)


def test_rule_str_round_trips() -> None:
    for text in ["Bash", "Bash(npm test:*)", r"Bash(python -c print\(1\))", "mcp__srv__*"]:
        assert str(parse_rule(text, "allow", "t")) == text


@pytest.mark.parametrize(
    ("value", "rules"),
    [
        ("Bash(git:*) Edit", ["Bash(git:*)", "Edit"]),
        ("Bash(git diff *),Edit, Read", ["Bash(git diff *)", "Edit", "Read"]),
        ("Bash(echo a,b)  mcp__srv__*", ["Bash(echo a,b)", "mcp__srv__*"]),
        (r"Bash(echo \( x) Read", [r"Bash(echo \( x)", "Read"]),
        ("", []),
        (" , ", []),
    ],
)
def test_split_rule_list(value: str, rules: list[str]) -> None:
    assert split_rule_list(value) == rules


# --- matchers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "command", "expected"),
    [
        ("npm test", "npm test", True),
        ("npm test", "npm test --watch", False),
        ("npm test", "npm  test", True),
        ("npm test:*", "npm test", True),
        ("npm test:*", "npm test --watch", True),
        ("npm test:*", "npm tester", False),
        ("npm test:*", "npm", False),
        ("git diff *", "git diff", True),
        ("git diff *", "git diff HEAD~1", True),
        ("git diff *", "git diffstat", False),
        ("ls*", "lsof", True),
        ("git * main", "git push origin main", True),
        ("git * main", "git push origin dev", False),
        ("* --version", "python --version", True),
        ("*", "anything at all", True),
    ],
)
def test_command_matches(pattern: str, command: str, expected: bool) -> None:
    assert command_matches(pattern, command) is expected


@pytest.mark.parametrize(
    ("command", "parts"),
    [
        ("a && b", ["a", "b"]),
        ("a; b;c", ["a", "b", "c"]),
        ("a | b |& c", ["a", "b", "c"]),
        ("a || b", ["a", "b"]),
        ("a & b", ["a", "b"]),
        ("a\nb", ["a", "b"]),
        ("make 2>&1 | tee log", ["make 2>&1", "tee log"]),
        ("make &> log; x >&2", ["make &> log", "x >&2"]),
        ("echo 'a && b' \"c; d\"", ["echo 'a && b' \"c; d\""]),
        ("echo a\\;b", ["echo a\\;b"]),
        ("echo $(a && b) | c", ["echo $(a && b)", "c"]),
        ("echo `a; b`", ["echo `a; b`"]),
        ("(cd x && make)", ["cd x", "make"]),
        ("{ a; b; }", ["a", "b"]),
        ("  ;; ", []),
    ],
)
def test_split_command(command: str, parts: list[str]) -> None:
    assert split_command(command) == parts


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        # ./x and x: relative to the cwd
        ("./secrets/**", f"{CWD}/secrets/a/b.txt", True),
        ("./secrets/**", f"{ROOT}/secrets/a.txt", False),
        ("./secrets", f"{CWD}/secrets/deep/a.txt", True),  # a directory covers its contents
        ("secrets/*.txt", f"{CWD}/secrets/a.txt", True),
        ("secrets/*.txt", f"{CWD}/secrets/a/b.txt", False),  # * stays within one segment
        ("*.env", f"{CWD}/deep/er/.env", True),  # no slash: any depth (gitignore)
        ("*.env", f"{ROOT}/.env", False),  # but only below the cwd
        ("../other/**", f"{ROOT}/other/x", True),
        # /x: relative to the project root
        ("/src/**/*.ts", f"{ROOT}/src/a.ts", True),
        ("/src/**/*.ts", f"{ROOT}/src/a/b/c.ts", True),
        ("/src/**/*.ts", f"{ROOT}/src/a/b/c.js", False),
        ("/src/**/*.ts", f"{CWD}/src/a.ts", False),
        # //x: absolute
        ("//etc/passwd", "/etc/passwd", True),
        ("//etc/passwd", "/etc/passwd-", False),
        ("//etc/**", "/etc/ssh/sshd_config", True),
        ("//tmp/*.log", "/tmp/a.log", True),
        # ~/x: home
        ("~/.ssh/**", f"{HOME}/.ssh/id_rsa", True),
        ("~/.ssh/**", f"{CWD}/.ssh/id_rsa", False),
        ("~", f"{HOME}/anything", True),
        # ** at the start, character classes, ?
        ("**/node_modules/**", f"{CWD}/a/node_modules/x/y.js", True),
        ("./secrets/**", f"{CWD}/secrets", True),  # dir/** covers dir itself (Grep roots)
        ("./secrets/**", f"{CWD}/secrets-old/x", False),
        ("a/**/b", f"{CWD}/a/b", True),
        ("a/**/b", f"{CWD}/a/x/y/b", True),
        ("a/**/b", f"{CWD}/a/xb", False),
        ("[!a]*.py", f"{CWD}/b.py", True),
        ("[!a]*.py", f"{CWD}/a.py", False),
        ("?.md", f"{CWD}/x.md", True),
        ("?.md", f"{CWD}/xy.md", False),
        # relative targets are taken against the cwd; .. is normalised away
        ("./secrets/**", "secrets/k", True),
        ("./secrets/**", f"{CWD}/public/../secrets/k", True),
    ],
)
def test_path_matches(pattern: str, path: str, expected: bool) -> None:
    assert path_matches(pattern, path, CWD, ROOT) is expected


@pytest.mark.parametrize(
    ("rule", "tool", "expected"),
    [
        ("Edit", "Edit", True),
        ("Edit", "Write", True),
        ("Edit", "NotebookEdit", True),
        ("Edit", "Read", False),
        ("Read", "Read", True),
        ("Read", "Glob", True),
        ("Read", "Grep", True),
        ("Read", "Edit", False),
        ("Read", "TaskOutput", False),
        ("Write", "Edit", False),
        ("mcp__srv", "mcp__srv__query", True),
        ("mcp__srv__*", "mcp__srv__query", True),
        ("mcp__srv", "mcp__srv2__query", False),
        ("mcp__srv__*", "mcp__other__query", False),
        ("mcp__srv__query", "mcp__srv__query", True),
        ("mcp__srv__query", "mcp__srv__update", False),
        ("mcp__srv__get_*", "mcp__srv__get_user", True),
        ("Agent", "Agent", True),
        ("Bash", "BashOutput", False),
    ],
)
def test_tool_matches(rule: str, tool: str, expected: bool) -> None:
    assert tool_matches(parse_rule(rule, "allow", "t"), req(tool)) is expected


@pytest.mark.parametrize(
    ("rule", "url", "expected"),
    [
        ("WebFetch(domain:example.com)", "https://example.com/a", True),
        ("WebFetch(domain:example.com)", "https://EXAMPLE.com:8443/a", True),
        ("WebFetch(domain:example.com)", "https://api.example.com/a", False),
        ("WebFetch(domain:example.com)", "https://example.com.evil.org/", False),
        ("WebFetch(domain:*.example.com)", "https://api.example.com/a", True),
        ("WebFetch(domain:*.example.com)", "https://example.com/a", False),
    ],
)
def test_webfetch_domains(rule: str, url: str, expected: bool) -> None:
    p = policy(allow=[rule])
    assert (p.decide(req("WebFetch", url, url=url)).behavior == "allow") is expected


# --- modes x rule forms ----------------------------------------------------------------------

RULES = {
    "allow": [
        "Bash(npm test:*)",
        "Edit(/src/**)",
        "WebFetch(domain:example.com)",
        "mcp__srv__*",
    ],
    "deny": ["Bash(rm:*)", "Read(./secrets/**)", "mcp__evil", "Agent(Plan)"],
    "ask": ["Bash(git push:*)", "Edit(/src/generated/**)"],
}

REQUESTS = {
    "bash_allowed": req("Bash", "npm test --watch"),
    "bash_denied": req("Bash", "rm -rf build"),
    "bash_ask_rule": req("Bash", "git push origin main"),
    "bash_no_rule": req("Bash", "make"),
    "read_plain": req("Read", f"{CWD}/a.py"),
    "read_secret": req("Read", f"{CWD}/secrets/key"),
    "grep_secret": req("Grep", f"{CWD}/secrets"),
    "edit_allowed": req("Edit", f"{ROOT}/src/a.py"),
    "edit_ask_rule": req("Edit", f"{ROOT}/src/generated/x.py"),
    "write_in_cwd": req("Write", f"{CWD}/notes.md"),
    "notebook_outside": req("NotebookEdit", "/elsewhere/x.ipynb"),
    "fetch_allowed": req("WebFetch", "https://example.com/", url="https://example.com/"),
    "fetch_other": req("WebFetch", "https://other.org/", url="https://other.org/"),
    "mcp_allowed": req("mcp__srv__query"),
    "mcp_denied": req("mcp__evil__run"),
    "agent_explore": req("Agent", "Explore", subagent_type="Explore"),
    "agent_denied": req("Agent", "Plan", subagent_type="Plan"),
    "task_output": req("TaskOutput"),
}

A, D, Q = "allow", "deny", "ask"
EXPECTED = {
    #                  default acceptEdits plan bypass dontAsk
    "bash_allowed": (A, A, D, A, A),
    "bash_denied": (D, D, D, D, D),
    "bash_ask_rule": (Q, Q, D, A, D),
    "bash_no_rule": (Q, Q, D, A, D),
    "read_plain": (A, A, A, A, A),
    "read_secret": (D, D, D, D, D),
    "grep_secret": (D, D, D, D, D),
    "edit_allowed": (A, A, D, A, A),
    "edit_ask_rule": (Q, Q, D, A, D),
    "write_in_cwd": (Q, A, D, A, D),
    "notebook_outside": (Q, Q, D, A, D),
    # WebFetch reads, changes nothing here: plan mode lets it run by the rules (or asks).
    "fetch_allowed": (A, A, A, A, A),
    "fetch_other": (Q, Q, Q, A, D),
    "mcp_allowed": (A, A, D, A, A),
    "mcp_denied": (D, D, D, D, D),
    "agent_explore": (A, A, A, A, A),
    "agent_denied": (D, D, D, D, D),
    "task_output": (A, A, A, A, A),
}
MODES = ["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk"]


@pytest.mark.parametrize(
    ("mode", "name", "expected"),
    [(mode, name, row[i]) for name, row in EXPECTED.items() for i, mode in enumerate(MODES)],
)
def test_mode_by_rule_form(mode: str, name: str, expected: str) -> None:
    decision = policy(mode, **RULES).decide(REQUESTS[name])
    assert decision.behavior == expected, decision.reason
    assert decision.tool_name == REQUESTS[name].tool_name


def test_mode_enum_values() -> None:
    assert [m.value for m in PermissionMode] == MODES


def test_plan_mode_reason_mentions_plan_even_when_allowed() -> None:
    decision = policy("plan", allow=["Bash"]).decide(req("Bash", "ls"))
    assert decision.behavior == "deny"
    assert "plan mode" in decision.reason


def test_deny_reason_names_rule_and_source() -> None:
    decision = policy(deny=["Bash(rm:*)"]).decide(req("Bash", "rm x"))
    assert decision.rule == Rule("Bash", "rm:*", "deny", "settings permissions.deny")
    assert "Bash(rm:*)" in decision.reason
    assert "settings permissions.deny" in decision.reason


def test_dont_ask_turns_ask_into_deny_with_hint() -> None:
    decision = policy("dontAsk").decide(req("Bash", "git push origin"))
    assert decision.behavior == "deny"
    assert "dontAsk" in decision.reason
    assert "Bash(git push:*)" in decision.reason


# --- precedence ------------------------------------------------------------------------------

SAME_TARGET = [
    ("Bash", "git push origin", "Bash(git push:*)"),
    ("Read", f"{CWD}/secrets/k", "Read(./secrets/**)"),
    ("Write", f"{ROOT}/src/x.py", "Edit(/src/**)"),
    ("mcp__srv__q", None, "mcp__srv__*"),
    ("Agent", "Explore", "Agent(Explore)"),
]


@pytest.mark.parametrize(("tool", "target", "text"), SAME_TARGET)
@pytest.mark.parametrize("mode", ["default", "acceptEdits", "dontAsk", "bypassPermissions"])
def test_deny_beats_ask_and_allow_in_any_order(
    tool: str, target: str | None, text: str, mode: str
) -> None:
    behaviors: tuple[Behavior, ...] = ("allow", "deny", "ask")
    for order in itertools.permutations(behaviors):
        rules = [parse_rule(text, b, "t") for b in order]
        decision = PermissionPolicy(mode, rules, ROOT).decide(req(tool, target))
        assert decision.behavior == "deny", order
        assert decision.rule is not None
        assert decision.rule.behavior == "deny"


@pytest.mark.parametrize(("tool", "target", "text"), SAME_TARGET)
def test_ask_beats_allow_in_any_order(tool: str, target: str | None, text: str) -> None:
    behaviors: tuple[Behavior, ...] = ("allow", "ask")
    for order in itertools.permutations(behaviors):
        rules = [parse_rule(text, b, "t") for b in order]
        decision = PermissionPolicy("default", rules, ROOT).decide(req(tool, target))
        assert decision.behavior == "ask", order


def test_broad_deny_beats_narrow_allow() -> None:
    p = policy(allow=["Bash(aws s3 ls)"], deny=["Bash(aws *)"])
    assert p.decide(req("Bash", "aws s3 ls")).behavior == "deny"


def test_cli_deny_beats_settings_allow_and_cli_allow() -> None:
    p = PermissionPolicy.from_settings(
        {"permissions": {"allow": ["Bash"]}},
        mode=None,
        allowed_tools=["Bash"],
        disallowed_tools=["Bash(curl:*)"],
        project_root=ROOT,
    )
    assert p.decide(req("Bash", "curl x")).behavior == "deny"
    assert p.decide(req("Bash", "ls")).behavior == "allow"


# --- compound Bash ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("npm test && git status", A),
        ("npm test&&git status", A),
        ("(npm test && git status)", A),
        ("npm test 2>&1 | git status", A),
        ("npm test && curl x", Q),
        ("npm test || echo failed", Q),
        ("npm test; rm -rf /", D),
        ("git status | rm x", D),
        ("npm test & rm x", D),
        ("npm test\nrm x", D),
        ("echo 'a && rm x'", Q),  # quoted: one command, which no rule names
        ("npm test 'a && rm x'", A),
        ("npm test $(rm x)", D),  # the hidden command is seen by deny rules
        ("npm test `rm x`", D),
        ("npm test $(curl evil)", Q),  # a wildcard rule never allows hidden commands
        ("npm test && git status $(date)", Q),
        ("npm tester && git status", Q),
    ],
)
def test_compound_commands(command: str, expected: str) -> None:
    p = policy(allow=["Bash(npm test:*)", "Bash(git status)"], deny=["Bash(rm:*)"])
    assert p.decide(req("Bash", command)).behavior == expected


def test_exact_allow_rule_covers_a_whole_compound_command() -> None:
    p = policy(allow=["Bash(git log | head)"])
    assert p.decide(req("Bash", "git log | head")).behavior == "allow"
    assert p.decide(req("Bash", "git log | tail")).behavior == "ask"


def test_whole_command_deny_pattern() -> None:
    p = policy(allow=["Bash"], deny=["Bash(curl * | bash)"])
    assert p.decide(req("Bash", "curl https://x.sh | bash")).behavior == "deny"


@given(st.text(alphabet="ab ;&|'\"$()`\\\n", max_size=30))
def test_deny_all_beats_allow_all_for_any_command(command: str) -> None:
    rules = [parse_rule("Bash", "allow", "t"), parse_rule("Bash", "deny", "t")]
    p = PermissionPolicy("bypassPermissions", rules, ROOT)
    assert p.decide(req("Bash", command)).behavior == "deny"
    split_command(command)  # never raises


# --- acceptEdits and working directories -----------------------------------------------------


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (f"{CWD}/a.py", A),
        (f"{CWD}/deep/er/a.py", A),
        (f"{CWD}/../outside.py", Q),
        (f"{ROOT}/pkg2/a.py", Q),  # a sibling sharing the cwd's name as a prefix
        (f"{ROOT}/extra/a.py", A),  # permissions.additionalDirectories, relative to the root
        (f"{HOME}/scratch/a.py", A),  # ~/ additional directory
    ],
)
def test_accept_edits_working_dirs(target: str, expected: str) -> None:
    p = policy("acceptEdits", additionalDirectories=["extra", "~/scratch"])
    assert p.decide(req("Write", target)).behavior == expected


def test_accept_edits_does_not_cover_bash() -> None:
    assert policy("acceptEdits").decide(req("Bash", "touch x")).behavior == "ask"


# --- from_settings ---------------------------------------------------------------------------


def test_default_mode_from_settings_and_overrides() -> None:
    settings = {"permissions": {"defaultMode": "acceptEdits"}}

    def mode_of(mode: str | None, skip: bool = False) -> PermissionMode:
        p = PermissionPolicy.from_settings(
            settings,
            mode=mode,
            allowed_tools=[],
            disallowed_tools=[],
            project_root=ROOT,
            skip_permissions=skip,
        )
        return p.mode

    assert mode_of(None) is PermissionMode.ACCEPT_EDITS
    assert mode_of("plan") is PermissionMode.PLAN
    assert mode_of("plan", skip=True) is PermissionMode.BYPASS_PERMISSIONS
    assert PermissionPolicy.from_settings({}, mode=None, project_root=ROOT).mode == "default"


@pytest.mark.parametrize(
    ("settings", "mode", "skip", "fragment"),
    [
        ({}, "yolo", False, "--permission-mode"),
        ({"permissions": {"defaultMode": "yolo"}}, None, False, "defaultMode"),
        ({"permissions": {"defaultMode": 3}}, None, False, "defaultMode"),
        ({"permissions": []}, None, False, "'permissions'"),
        ({"permissions": {"allow": "Bash"}}, None, False, "permissions.allow"),
        ({"permissions": {"deny": [1]}}, None, False, "permissions.deny"),
        ({"permissions": {"ask": ["Bash(ls"]}}, None, False, "settings permissions.ask"),
        (
            {"permissions": {"disableBypassPermissionsMode": "disable"}},
            None,
            True,
            "disableBypassPermissionsMode",
        ),
    ],
)
def test_from_settings_errors(
    settings: dict[str, object], mode: str | None, skip: bool, fragment: str
) -> None:
    with pytest.raises(UserError, match=fragment):
        PermissionPolicy.from_settings(
            settings, mode=mode, project_root=ROOT, skip_permissions=skip
        )


def test_malformed_cli_rule_names_flag() -> None:
    with pytest.raises(UserError, match="--disallowedTools"):
        PermissionPolicy.from_settings(
            {}, mode=None, disallowed_tools=["Bash(rm"], project_root=ROOT
        )


def test_allowed_tools_values_are_split() -> None:
    p = PermissionPolicy.from_settings(
        {},
        mode=None,
        allowed_tools=["Bash(git diff *),Edit", "Read mcp__srv"],
        disallowed_tools=["Bash(git push:*) WebFetch"],
        project_root=ROOT,
    )
    assert [(str(r), r.behavior, r.source) for r in p.rules] == [
        ("Bash(git diff *)", "allow", "--allowedTools"),
        ("Edit", "allow", "--allowedTools"),
        ("Read", "allow", "--allowedTools"),
        ("mcp__srv", "allow", "--allowedTools"),
        ("Bash(git push:*)", "deny", "--disallowedTools"),
        ("WebFetch", "deny", "--disallowedTools"),
    ]
    assert p.decide(req("Bash", "git diff HEAD")).behavior == "allow"
    assert p.decide(req("Write", "/anywhere/x")).behavior == "allow"


def test_hides_tools_denied_without_content() -> None:
    p = policy(deny=["WebFetch", "Bash(rm:*)", "mcp__evil"])
    assert p.hides("WebFetch", "execute")
    assert p.hides("mcp__evil__run", "execute")
    assert not p.hides("Bash", "execute")


# --- headless --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "target", "suggestion"),
    [
        ("Bash", "git push origin main", "Bash(git push:*)"),
        ("Bash", "FOO=1 make all -j4", "Bash(make all:*)"),
        ("Bash", "git -C x push", "Bash(git:*)"),
        ("Bash", "ls -la", "Bash(ls:*)"),
        ("Bash", "npm test && curl x", "Bash(curl:*)"),  # the part no rule allows
        ("Bash", "echo $(date)", r"Bash(echo $\(date\))"),
        ("Write", f"{CWD}/x", "Write"),
        ("mcp__srv__q", None, "mcp__srv__q"),
    ],
)
def test_headless_turns_ask_into_deny(tool: str, target: str | None, suggestion: str) -> None:
    asked = policy(allow=["Bash(npm test:*)"]).decide(req(tool, target))
    assert asked.behavior == "ask"
    denied = headless(asked)
    assert denied.behavior == "deny"
    assert denied.reason == (
        f"Permission to use {tool} has been denied because taskloom is running in "
        f'non-interactive mode. Allow it with --allowedTools "{suggestion}" or a '
        "permissions.allow rule in settings, or pass --dangerously-skip-permissions."
    )


def test_headless_ask_rule_names_the_rule() -> None:
    denied = headless(policy(ask=["Bash(git push:*)"]).decide(req("Bash", "git push")))
    assert denied.behavior == "deny"
    assert "Bash(git push:*)" in denied.reason
    assert "non-interactive" in denied.reason


@pytest.mark.parametrize("behavior", ["allow", "deny"])
def test_headless_keeps_allow_and_deny(behavior: Behavior) -> None:
    decision = Decision(behavior, "why")
    assert headless(decision) is decision
    assert policy().headless(decision) is decision
