"""Project instructions (CLAUDE.md, AGENTS.md): real files in a real git repository, found,
imported and capped as Claude Code does, and given to the main thread and its agents."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from helpers import harness, main_context, wait_until
from taskloom.agents.service import SpawnRequest
from taskloom.errors import UsageError
from taskloom.instructions import (
    MAX_FILE_CHARS,
    PREAMBLE,
    ConversationInstructions,
    imports,
    load_instructions,
)
from taskloom.messages import TextBlock, ToolResultBlock, ToolUseBlock
from taskloom.models.base import ModelRequest
from taskloom.models.scripted import FunctionModel, ToolCall, Turn
from taskloom.prompts import main_system_prompt
from taskloom.tasks.types import TaskStatus


def git_repo(path: Path) -> Path:
    """``path`` made a git repository (only ``.git`` is needed to find its root)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    return path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def user_dir() -> Path:
    return Path(os.environ["CLAUDE_CONFIG_DIR"])


def project(tmp_path: Path) -> tuple[Path, Path]:
    """A repository with instructions at its root, in ``.claude``, locally and in ``app``;
    the user's own; and a deeper ``app/pkg`` whose file is met only when worked in."""
    repo = git_repo(tmp_path / "repo")
    write(user_dir() / "CLAUDE.md", "USER: answer in English.\n")
    write(repo / "CLAUDE.md", "ROOT CLAUDE: run `make test`.\n")
    write(repo / ".claude" / "CLAUDE.md", "DOT-CLAUDE: no force pushes.\n")
    write(repo / "CLAUDE.local.md", "LOCAL: my sandbox is at /srv/me.\n")
    write(repo / "app" / "AGENTS.md", "APP AGENTS: the app is in Go.\n")
    write(repo / "app" / "pkg" / "CLAUDE.md", "PKG NESTED: parsers live here.\n")
    write(repo / "app" / "pkg" / "parse.go", "package pkg\n")
    write(tmp_path / "CLAUDE.md", "ABOVE THE REPO: never read.\n")
    return repo, repo / "app"


def test_files_load_in_claude_code_s_order_with_their_scopes(tmp_path: Path) -> None:
    repo, app = project(tmp_path)
    loaded = load_instructions(app, {})
    found = [(f.path, f.scope) for f in loaded.files]
    assert found == [
        (user_dir() / "CLAUDE.md", "user"),
        (repo / "CLAUDE.md", "project"),
        (repo / ".claude" / "CLAUDE.md", "project"),
        (repo / "CLAUDE.local.md", "local"),
        (app / "AGENTS.md", "project"),
    ]
    text = loaded.text()
    assert text.startswith(f"# claudeMd\n\n{PREAMBLE}\n\n")
    assert (
        f"Contents of {repo / 'CLAUDE.md'} (project instructions, checked into the codebase):"
        "\n\nROOT CLAUDE: run `make test`."
    ) in text
    assert f"Contents of {repo / 'CLAUDE.local.md'} (user's private project instructions" in text
    assert f"Contents of {user_dir() / 'CLAUDE.md'} (user's private global instructions" in text
    # Above the repository root, and below the working directory: not at the start.
    assert "ABOVE THE REPO" not in text and "PKG NESTED" not in text


def test_the_setting_names_the_files_and_setting_sources_leave_scopes_out(
    tmp_path: Path,
) -> None:
    _repo, app = project(tmp_path)
    only_agents = load_instructions(app, {"instructionFiles": ["AGENTS.md"]})
    assert [f.path for f in only_agents.files] == [app / "AGENTS.md"]
    assert load_instructions(app, {"instructionFiles": []}).text() == ""
    project_only = load_instructions(app, {}, sources=["project"])
    assert {f.scope for f in project_only.files} == {"project"}
    assert load_instructions(app, {}, sources=[]).files == []
    with pytest.raises(UsageError, match="instructionFiles must be a list of file names"):
        load_instructions(app, {"instructionFiles": "CLAUDE.md"})
    with pytest.raises(UsageError, match="instructionFiles"):
        load_instructions(app, {"instructionFiles": ["docs/CLAUDE.md"]})


def test_an_import_cycle_is_cut_and_each_file_comes_once(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    write(repo / "CLAUDE.md", "Start. See @docs/a.md and @AGENTS.md\n")
    write(repo / "docs" / "a.md", "A: imports @b.md\n")
    write(repo / "docs" / "b.md", "B: imports @a.md and @../CLAUDE.md back\n")
    write(repo / "AGENTS.md", "AGENTS (also imported by CLAUDE.md)\n")
    loaded = load_instructions(repo, {})
    assert [f.path for f in loaded.files] == [
        repo / "CLAUDE.md",
        repo / "docs" / "a.md",
        repo / "docs" / "b.md",
        repo / "AGENTS.md",
    ]
    assert [f.imported_by for f in loaded.files] == [
        None,
        repo / "CLAUDE.md",
        repo / "docs" / "a.md",
        repo / "CLAUDE.md",
    ]
    assert loaded.text().count("A: imports") == 1 and loaded.text().count("Start.") == 1
    cuts = "\n".join(loaded.skipped)
    assert f"@{repo / 'docs' / 'a.md'} in {repo / 'docs' / 'b.md'}: already loaded" in cuts
    assert f"in {repo / 'docs' / 'b.md'}: already loaded (each file once)" in cuts


def test_imports_skip_code_stop_five_deep_and_stay_inside_the_project(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    secret = write(tmp_path / "secret.md", "SECRET OUTSIDE\n")
    chain = "".join(f"@d{i}.md\n" for i in range(1, 2))
    write(repo / "CLAUDE.md", f"{chain}`@code.md` not this\n```\n@fenced.md\n```\n@{secret}\n")
    for i in range(1, 8):
        write(repo / f"d{i}.md", f"depth {i}\n@d{i + 1}.md\n")
    write(repo / "code.md", "CODE SPAN\n")
    write(repo / "fenced.md", "FENCED\n")
    loaded = load_instructions(repo, {})
    text = loaded.text()
    assert "CODE SPAN" not in text and "FENCED" not in text
    assert "SECRET OUTSIDE" not in text
    assert [f"depth {i}" in text for i in range(1, 8)] == [True] * 5 + [False] * 2
    cuts = "\n".join(loaded.skipped)
    assert f"@{secret} in {repo / 'CLAUDE.md'}: outside the project {repo}" in cuts
    assert f"imports in {repo / 'd5.md'}: not followed, 5 imports deep" in cuts
    # The user's own file may import from anywhere.
    write(user_dir() / "CLAUDE.md", f"@{secret}\n")
    assert "SECRET OUTSIDE" in load_instructions(repo, {}).text()


def test_import_syntax_as_claude_code_reads_it(tmp_path: Path) -> None:
    base = tmp_path
    text = "mail me at a@b.com, see @./x.md or @y\\ z.md#part, and @/abs/p.md; @~ no. @q.md.\n"
    assert imports(text, base) == [base / "x.md", base / "y z.md", Path("/abs/p.md"), base / "q.md"]
    assert imports("    @indented.md\n", base) == []


def test_a_file_over_the_cap_is_cut_and_says_so(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    big = write(repo / "CLAUDE.md", "x" * (MAX_FILE_CHARS + 500))
    (loaded,) = load_instructions(repo, {}).files
    assert loaded.cut is not None and loaded.size == MAX_FILE_CHARS + 500
    assert loaded.text.startswith("x" * MAX_FILE_CHARS + "\n\n[")
    assert loaded.text.endswith(f"[{big} is cut here ({loaded.cut}): read the file for the rest.]")


def test_a_nested_file_is_told_once_when_its_directory_is_first_worked_in(
    tmp_path: Path,
) -> None:
    repo, app = project(tmp_path)
    told = ConversationInstructions(load_instructions(app, {}))
    call = ToolUseBlock(id="toolu_1", name="Read", input={"file_path": "pkg/parse.go"})
    ok = ToolResultBlock(tool_use_id="toolu_1", content="1\tpackage pkg")
    (block,) = told.after_tools([call], [ok], app)
    pkg = repo / "app" / "pkg" / "CLAUDE.md"
    assert block == TextBlock(
        text=f"<system-reminder>\nContents of {pkg}:\n\nPKG NESTED: parsers live here.\n"
        "</system-reminder>"
    )
    assert told.after_tools([call], [ok], app) == []  # once
    assert told.files[-1].nested and told.files[-1].path == pkg
    # A failed call saw nothing; another conversation keeps its own.
    other = ConversationInstructions(load_instructions(app, {}))
    failed = ToolResultBlock(tool_use_id="toolu_1", content="no such file", is_error=True)
    assert other.after_tools([call], [failed], app) == []


async def test_a_plain_session_without_files_has_the_same_prompt_as_before(
    tmp_path: Path,
) -> None:
    git_repo(tmp_path)
    assert load_instructions(tmp_path, {}).text() == ""
    systems: list[str] = []

    def respond(request: ModelRequest) -> str:
        systems.append(request.system)
        return "done"

    async with harness(tmp_path, FunctionModel(respond)) as h:
        async for _ in h.run("hi"):
            pass
    assert systems == [main_system_prompt(tmp_path)]


async def test_the_main_thread_a_subagent_and_not_explore_get_the_instructions(
    tmp_path: Path,
) -> None:
    _repo, app = project(tmp_path)
    systems: dict[str, list[str]] = {}
    requests: list[ModelRequest] = []
    subagent: list[ModelRequest] = []
    read_parser = Turn(tool_calls=(ToolCall("Read", {"file_path": str(app / "pkg/parse.go")}),))

    def respond(request: ModelRequest) -> Turn | str:
        kind = request.metadata.get("agent_type", "main")
        systems.setdefault(kind, []).append(request.system)
        if kind == "general-purpose":
            subagent.append(request)
            return read_parser if len(subagent) == 1 else "report"
        if kind != "main":
            return "report"
        requests.append(request)
        if len(requests) == 1:
            return Turn(tool_calls=(ToolCall("Read", {"file_path": str(app / "pkg/parse.go")}),))
        return "done"

    async with harness(app, FunctionModel(respond)) as h:
        async for _ in h.run("look at the parser"):
            pass
        for kind in ("general-purpose", "Explore"):
            launched = await h.agents.spawn(
                SpawnRequest(description="look", prompt="go", subagent_type=kind),
                main_context(h),
            )
            state = h.runtime.get(launched.agent_id)
            assert state is not None and state.status == TaskStatus.COMPLETED
    main = systems["main"]
    for needle in ("USER: answer", "ROOT CLAUDE", "DOT-CLAUDE", "LOCAL: my", "APP AGENTS"):
        assert needle in main[0]
        assert needle in systems["general-purpose"][0]
        assert needle not in systems["Explore"][0]  # omitClaudeMd
    assert main[0].index("ROOT CLAUDE") < main[0].index("APP AGENTS")  # closer files last
    # The nested file came after the Read's result, and the system prompt kept its bytes.
    assert len(set(main)) == 1 and "PKG NESTED" not in main[0]
    last = requests[1].messages[-1]
    texts = [b.text for b in last.content if isinstance(b, TextBlock)]
    assert isinstance(last.content[0], ToolResultBlock)
    pkg = app / "pkg" / "CLAUDE.md"
    assert f"<system-reminder>\nContents of {pkg}:\n\nPKG NESTED: parsers live here." in texts[-1]
    # What /memory shows: the main thread's files, the nested one among them.
    assert h.session.engine.config.instructions is not None
    shown = [(f.path, f.nested) for f in h.session.engine.config.instructions.files]
    assert shown[-1] == (pkg, True)
    # A subagent meeting the directory is told its file too, after its own call.
    told = [b.text for b in subagent[1].messages[-1].content if isinstance(b, TextBlock)]
    assert f"Contents of {pkg}:\n\nPKG NESTED" in told[-1]


async def test_a_replaced_system_prompt_keeps_the_instructions(tmp_path: Path) -> None:
    _repo, app = project(tmp_path)
    seen: list[str] = []

    def respond(request: ModelRequest) -> str:
        seen.append(request.system)
        return "ok"

    async with harness(app, FunctionModel(respond), system_prompt="Only this.") as h:
        async for _ in h.run("hi"):
            pass
    assert seen[0].startswith("Only this.\n\n# claudeMd\n\n")
    assert "APP AGENTS" in seen[0]


async def test_teammates_get_the_instructions_unless_their_type_omits_them(
    tmp_path: Path,
) -> None:
    _repo, app = project(tmp_path)
    systems: dict[str, str] = {}

    def respond(request: ModelRequest) -> str:
        member = request.metadata.get("teammate")
        if member:
            systems.setdefault(str(member).split("@")[0], request.system)
        return "ok"

    async with harness(app, FunctionModel(respond), teams=True) as h:
        agent = next(t for t in h.tools if t.name == "Agent")
        for name, kind in (("mate", None), ("scout", "Explore"), ("coder", "general-purpose")):
            params = {"description": "d", "prompt": "p", "name": name}
            if kind is not None:
                params["subagent_type"] = kind
            await agent.call(agent.validate(params), main_context(h))
        await wait_until(lambda: len(systems) == 3, what="each teammate's first request")
        stop = next(t for t in h.tools if t.name == "TaskStop")
        for name in systems:
            await stop.call(stop.validate({"task_id": name}), main_context(h))
    assert "APP AGENTS" in systems["mate"] and "ROOT CLAUDE" in systems["coder"]
    assert "APP AGENTS" not in systems["scout"] and "# claudeMd" not in systems["scout"]


def test_block_comments_are_left_out_but_not_in_code_nor_unclosed(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    write(
        repo / "CLAUDE.md",
        "<!-- a note for maintainers\n@hidden.md -->\nKeep this.\n"
        "```html\n<!-- code -->\n```\ninline <!-- stays --> here\n<!-- never closed\nTail\n",
    )
    write(repo / "hidden.md", "HIDDEN\n")
    (loaded,) = load_instructions(repo, {}).files
    assert loaded.text == (
        "Keep this.\n```html\n<!-- code -->\n```\ninline <!-- stays --> here\n"
        "<!-- never closed\nTail"
    )


async def test_a_coordinator_and_its_workers_get_the_instructions(tmp_path: Path) -> None:
    _repo, app = project(tmp_path)
    systems: dict[str, str] = {}

    def respond(request: ModelRequest) -> str:
        systems.setdefault(request.metadata.get("agent_type", "main"), request.system)
        return "ok"

    async with harness(app, FunctionModel(respond), coordinator=True) as h:
        async for _ in h.run("plan it"):
            pass
        launched = await h.agents.spawn(
            SpawnRequest(description="w", prompt="go", subagent_type="worker"), main_context(h)
        )
        state = h.runtime.get(launched.agent_id)
        assert state is not None and state.status == TaskStatus.COMPLETED
    assert "APP AGENTS" in systems["main"] and "Workers have access to" in systems["main"]
    assert "APP AGENTS" in systems["worker"]
