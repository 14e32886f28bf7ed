"""Every flag of Claude Code's print mode, and those the Agent SDKs pass, is taken by taskloom.

The lists below are the source of truth for "every": :data:`CLAUDE_CODE` is ``claude --help`` of
Claude Code 2.1.328, :data:`SDK_ONLY` the flags not in that help that the SDKs build into the
command line (the TypeScript SDK's ``sdk.mjs`` (0.3.328 and 0.3.337), the 0.2.83 that
``@zed-industries/claude-agent-acp`` 0.23.1 bundles, the Python SDK 0.2's
``subprocess_cli.py``). Each is parsed with a plausible value, its conversion run: nothing may
be refused as unknown. A flag taskloom has no feature for is named in the ``--debug`` log.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fake_servers import FakeAnthropicServer
from helpers import clean_env, json_lines, run_cli, write_turns
from taskloom.cli.flag_kinds import Flag
from taskloom.cli.flags import FLAGS, fields_of, inert_notes, print_parser, refusals

SESSION = "0b7c8a52-3f0e-4d59-9a43-8f2f1a5f3e11"
SCHEMA = '{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}'

#: ``claude --help`` of Claude Code 2.1.328, each flag with a plausible value (the help's own
#: examples where it gives one). Interactive-only flags are here too: the command line is one.
CLAUDE_CODE: list[tuple[str, ...]] = [
    ("--add-dir", "docs", "src"),
    ("--agent", "reviewer"),
    ("--agents", '{"reviewer": {"description": "Reviews code", "prompt": "You review code"}}'),
    ("--allow-dangerously-skip-permissions",),
    ("--allowedTools", "Bash(git *) Edit"),
    ("--allowed-tools", "Read"),
    ("--append-system-prompt", "Answer briefly."),
    ("--autocompact", "auto"),
    ("--ax-screen-reader",),
    ("--bg",),
    ("--background",),
    ("--bare",),
    ("--betas", "interleaved-thinking-2025-05-14"),
    ("--brief",),
    ("--chrome",),
    ("--cloud", "fix the flaky test"),
    ("--cloud",),
    ("-c",),
    ("--continue",),
    ("--dangerously-skip-permissions",),
    ("-d",),
    ("--debug", "hooks,mcp"),
    ("--debug=!hooks,!mcp",),
    ("--debug-file", "debug.log"),
    ("--desktop",),
    ("--disable-slash-commands",),
    ("--disallowedTools", "Bash(git *) Edit"),
    ("--disallowed-tools", "WebFetch"),
    ("--effort", "xhigh"),
    ("--environment", "ccpool_0123"),
    ("--exclude-dynamic-system-prompt-sections",),
    ("--fallback-model", "haiku"),
    ("--file", "file_abc:doc.txt", "file_def:img.png"),
    ("--fork-session",),
    ("--forward-subagent-text",),
    ("--from-pr", "123"),
    ("--from-pr",),
    ("-h",),
    ("--help",),
    ("--ide",),
    ("--include-hook-events",),
    ("--include-partial-messages",),
    ("--input-format", "stream-json"),
    ("--json-schema", SCHEMA),
    ("--max-budget-usd", "2.50"),
    ("--mcp-config", '{"mcpServers": {}}'),
    ("--model", "sonnet"),
    ("-n", "nightly fix"),
    ("--name", "nightly fix"),
    ("--no-chrome",),
    ("--no-session-persistence",),
    ("--output-format", "stream-json"),
    *(
        ("--permission-mode", mode)
        for mode in ("acceptEdits", "auto", "bypassPermissions", "manual", "dontAsk", "plan")
    ),
    ("--permission-prompts", "host"),
    ("--permission-prompts", "none"),
    ("--plugin-dir", "plugins/a", "--plugin-dir", "plugins/b.zip"),
    ("--plugin-url", "plugin.zip"),
    ("-p",),
    ("--print",),
    ("--prompt-suggestions",),
    ("--prompt-suggestions", "off"),
    ("--remote-control",),
    ("--remote-control", "desk"),
    ("--remote-control-session-name-prefix", "buildbox"),
    ("--replay-user-messages",),
    ("--restricted",),
    ("-r", SESSION),
    ("--resume", SESSION),
    ("--safe-mode",),
    ("--session-id", SESSION),
    ("--setting-sources", "user,project,local"),
    ("--settings", '{"model": "sonnet"}'),
    ("--strict-mcp-config",),
    ("--system-prompt", "You are terse."),
    ("--system-prompt-snapshot", "off"),
    ("--teleport",),
    ("--teleport", "session-1"),
    ("--tmux",),
    ("--tmux=classic",),
    ("--tools", "Bash,Edit,Read"),
    ("--tools", ""),
    ("--verbose",),
    ("-v",),
    ("--version",),
    ("-w",),
    ("--worktree", "feature-x"),
]

#: Flags the SDKs pass that ``claude --help`` does not list, in the forms they pass them
#: (``--flag=value`` is the TypeScript SDK 0.3's). ``--await-initialize`` (TypeScript SDK 0.3)
#: is left to the tests of the stream-json session that implements it.
SDK_ONLY: list[tuple[str, ...]] = [
    ("--thinking", "adaptive"),
    ("--thinking=disabled",),
    ("--thinking-display", "summarized"),
    ("--max-thinking-tokens", "8000"),
    ("--max-thinking-tokens=8000",),
    ("--task-budget", "50000"),
    ("--debug-to-stderr",),
    ("--permission-prompt-tool", "stdio"),
    ("--permission-prompt-tool=stdio",),
    ("--channels", "plugin:inbox@market"),
    ("--session-mirror",),
    ("--project-config-root", "."),
    ("--plugin-dir-no-mcp", "plugins/a"),
    ("--resume-session-at", SESSION),
    ("--resume-drops-turn", "true"),
    ("--initialize-fields", "settings,disallowedTools"),
    ("--managed-settings-in-initialize",),
    ("--managed-settings", '{"permissions": {}}'),
    ("--proactive",),
    ("--workload", "ci"),  # the TypeScript SDK's workload option (0.3.337)
    ("--await-claim",),  # the TypeScript SDK's prewarm() (0.3.337)
    ("--assistant",),
    ("--system-prompt-file", "prompt.md"),
    ("--append-system-prompt-file", "prompt.md"),
    ("--setting-sources=",),
    ("--allowedTools=Read,Bash(git status)",),
    ("--mcp-config", '{"mcpServers": {"t": {"command": "x"}}}'),
    ("--resume=" + SESSION,),
    ("--tools=default",),
]


def _parse(args: tuple[str, ...]) -> int:
    """The exit code of parsing ``args`` and converting their fields (0: taken)."""
    parser = print_parser()
    try:
        fields_of(parser, parser.parse_args(list(args)))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.mark.parametrize("args", CLAUDE_CODE + SDK_ONLY, ids=" ".join)
def test_the_parser_takes_every_flag_claude_code_and_the_sdks_pass(
    args: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompt.md").write_text("Answer in French.")
    code = _parse(args)
    err = capsys.readouterr().err
    assert "unrecognized arguments" not in err
    assert code != 2, err


def test_a_bad_value_is_still_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    # Taking every flag does not mean taking any value of it.
    assert _parse(("--permission-prompts", "sometimes")) == 2
    assert "--permission-prompts: invalid choice: 'sometimes'" in capsys.readouterr().err
    assert _parse(("--max-thinking-tokens", "many")) == 2
    assert _parse(("--no-such-flag",)) == 2


def test_each_ignored_flag_given_gets_one_debug_line_naming_it() -> None:
    parser = print_parser()
    given = [f for f in FLAGS if f.note is not None and f.group is not None]
    assert len(given) > 40
    ns = parser.parse_args(["--effort", "high", "--bare", "--plugin-url", "a", "--plugin-url", "b"])
    assert inert_notes(ns) == [
        "--bare: accepted for compatibility; taskloom has no such feature, no effect",
        "--effort high: accepted for compatibility; taskloom has no such feature, no effect",
        "--plugin-url a b: accepted for compatibility; taskloom has no such feature, no effect",
    ]
    assert inert_notes(parser.parse_args([])) == []


def test_claude_codes_permission_modes_map_to_taskloom_ones() -> None:
    parser = print_parser()
    for mode, expected in [("manual", "default"), ("auto", "default"), ("plan", "plan")]:
        ns = parser.parse_args(["--permission-mode", mode])
        assert fields_of(parser, ns).session["permission_mode"] == expected
    notes = inert_notes(parser.parse_args(["--permission-mode", "auto"]))
    assert notes == [
        "--permission-mode auto: taskloom has no auto mode (a classifier approving calls); "
        "default mode applies"
    ]
    assert inert_notes(parser.parse_args(["--permission-mode", "manual"])) == []


def test_permission_prompts_none_asks_no_one() -> None:
    parser = print_parser()
    asked = ["--permission-prompt-tool", "stdio"]
    assert fields_of(parser, parser.parse_args(asked)).printed["permission_prompt_tool"] == "stdio"
    ns = parser.parse_args([*asked, "--permission-prompts", "none"])
    assert fields_of(parser, ns).printed["permission_prompt_tool"] is None


def test_debug_takes_an_optional_filter_and_debug_to_stderr_is_debug() -> None:
    parser = print_parser()
    for args, debug in [([], False), (["-d"], True), (["--debug=hooks"], True), (["-d2e"], True)]:
        assert fields_of(parser, parser.parse_args(args)).printed["debug"] is debug, args
    assert inert_notes(parser.parse_args(["--debug", "hooks,mcp"])) == [
        "--debug hooks,mcp: taskloom does not filter its debug log by category; all of it shows"
    ]


# -- the command ------------------------------------------------------------------------------


def _ignored(args: tuple[str, ...]) -> Flag | None:
    """The flag of ``args`` if it is one taskloom ignores (``-h`` is argparse's own)."""
    name = args[0].split("=")[0]
    return next((f for f in FLAGS if name in f.names and f.group is not None), None)


@pytest.mark.e2e
def test_a_run_with_every_ignored_flag_succeeds_and_debug_names_each(tmp_path: Path) -> None:
    model = write_turns(tmp_path / "turns.yaml", [{"text": "hello"}])
    ignored = [args for args in CLAUDE_CODE + SDK_ONLY if _ignored(args) is not None]
    argv = [a for args in ignored for a in args]
    proc = run_cli("-p", "hi", "--model", model, *argv, "--debug", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello\n"
    named = [line for line in proc.stderr.splitlines() if "accepted for compatibility" in line]
    flags = {flag.names[-1] for args in ignored if (flag := _ignored(args)) is not None}
    # One line for each flag, however often or under whichever name it was given.
    assert sorted(
        line.split(" taskloom.cli: ")[1].split(" ")[0].rstrip(":") for line in named
    ) == sorted(flags)


@pytest.mark.e2e
def test_debug_file_gets_the_debug_log_and_stderr_stays_quiet(tmp_path: Path) -> None:
    model = write_turns(tmp_path / "turns.yaml", [{"text": "hello"}])
    log = tmp_path / "debug.log"
    proc = run_cli("-p", "hi", "--model", model, "--effort", "high", "--debug-file", str(log),
                   cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    text = log.read_text()
    assert "DEBUG taskloom.cli: --effort high: accepted for compatibility" in text
    bad = run_cli("-p", "hi", "--debug-file", str(tmp_path / "no" / "dir.log"), cwd=tmp_path)
    assert bad.returncode == 2
    assert f"--debug-file {tmp_path}/no/dir.log: No such file or directory" in bad.stderr


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("--restricted",), "--restricted: taskloom has no restricted mode"),
        (("--agent", "reviewer"), "--agent: taskloom cannot run the main thread as an agent"),
        (("-w",), "--worktree: taskloom cannot start a session in a new worktree"),
        (("--managed-settings", "{}"), "--managed-settings: taskloom does not read managed"),
        (("--managed-settings-in-initialize",), "--managed-settings-in-initialize: taskloom"),
        (("--initialize-fields", "disallowedTools"), "--initialize-fields: taskloom does not"),
    ],
    ids=lambda v: v[0] if isinstance(v, tuple) else "",
)
def test_a_flag_that_would_loosen_the_session_is_refused_not_ignored(
    tmp_path: Path, args: tuple[str, ...], why: str
) -> None:
    # Ignored, each would run the session with less confinement or policy than asked for.
    proc = run_cli("-p", "hi", *args, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"Error: {why}"), proc.stderr
    assert proc.stderr.rstrip().endswith("run without it")


def test_initialize_fields_naming_only_directories_is_not_refused() -> None:
    # Directories not read from initialize narrow the session: nothing is loosened.
    parser = print_parser()
    assert refusals(parser.parse_args(["--initialize-fields", "additionalDirectories"])) == []
    loose = refusals(parser.parse_args(["--initialize-fields", "additionalDirectories,settings"]))
    assert len(loose) == 1 and loose[0].startswith("--initialize-fields: ")


@pytest.mark.e2e
def test_append_system_prompt_file_reaches_the_model(tmp_path: Path) -> None:
    (tmp_path / "extra.md").write_text("Always answer in French.")
    with FakeAnthropicServer() as server:
        server.add_turn(text="Bonjour.")
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
        proc = run_cli("-p", "hi", "--append-system-prompt-file", "extra.md", cwd=tmp_path,
                       env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        (request,) = server.requests
    assert "Always answer in French." in json.dumps(request.body["system"])
    both = run_cli("-p", "hi", "--append-system-prompt", "x", "--append-system-prompt-file",
                   "extra.md", cwd=tmp_path)  # fmt: skip
    assert both.returncode == 2
    assert "give --append-system-prompt or --append-system-prompt-file, not both" in both.stderr


@pytest.mark.e2e
def test_an_empty_argument_after_a_switch_is_no_prompt_in_a_stream_session(
    tmp_path: Path,
) -> None:
    """The TypeScript SDK 0.2 passes an extra flag as a name and a value, even a switch.

    ``extraArgs: {"replay-user-messages": ""}`` becomes ``--replay-user-messages ""``.
    """
    model = write_turns(tmp_path / "turns.yaml", [{"text": "hello"}])
    line = {"type": "user", "message": {"role": "user", "content": "hi"}}
    proc = run_cli(
        "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
        "--model", model, "--replay-user-messages", "",
        cwd=tmp_path, stdin=json.dumps(line) + "\n",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = json_lines(proc.stdout)
    assert [e.get("isReplay") for e in events if e["type"] == "user"] == [True]
    assert events[-1]["type"] == "result" and events[-1]["result"] == "hello"
    worded = run_cli(
        "--input-format", "stream-json", "--output-format", "stream-json", "--model", model,
        "a prompt", cwd=tmp_path,
    )  # fmt: skip
    assert worded.returncode == 2
    assert "reads its prompts from stdin, not an argument" in worded.stderr


def test_every_flag_taskloom_ignores_is_one_claude_code_or_an_sdk_passes() -> None:
    listed = {args[0].split("=")[0] for args in CLAUDE_CODE + SDK_ONLY}
    ignored = {n for f in FLAGS if f.group is not None for n in f.names}
    assert ignored - listed == set()


@pytest.mark.e2e
async def test_the_python_sdk_with_every_flag_bearing_option_runs_taskloom(tmp_path: Path) -> None:
    """Each option the Python SDK turns into a flag, set at once: the session runs."""
    sdk = pytest.importorskip("claude_agent_sdk")
    (tmp_path / "plugin").mkdir()
    with FakeAnthropicServer() as server:
        server.add_turn(text="ok")
        options = sdk.ClaudeAgentOptions(
            cli_path=str(Path(sys.executable).with_name("taskloom")),
            cwd=str(tmp_path),
            env={**clean_env(), "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test"},
            model="claude-sonnet-4-5",
            fallback_model="claude-haiku-4-5",
            system_prompt={"type": "preset", "preset": "claude_code", "append": "Be brief."},
            tools=["Bash", "Read"],
            allowed_tools=["Read"],
            disallowed_tools=["WebFetch"],
            permission_mode="acceptEdits",
            max_turns=3,
            max_budget_usd=5.0,
            betas=["context-1m-2025-08-07"],
            thinking={"type": "adaptive", "display": "summarized"},
            effort="high",
            task_budget={"total": 50000},
            plugins=[{"type": "local", "path": str(tmp_path / "plugin")}],
            setting_sources=["project"],
            add_dirs=[str(tmp_path)],
            include_hook_events=True,
            extra_args={"debug-to-stderr": None, "name": "nightly"},
        )
        messages = [m async for m in sdk.query(prompt="hi", options=options)]
    result = messages[-1]
    assert isinstance(result, sdk.ResultMessage)
    assert (result.subtype, result.result) == ("success", "ok")
    assert "Be brief." in json.dumps(server.requests[0].body["system"])
