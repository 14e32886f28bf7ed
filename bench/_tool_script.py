"""The fixed script of tool calls of ``bench/tool_results.py``, and the driver that runs it.

Run as a child process (``python bench/_tool_script.py REPO OUT``) with ``PYTHONPATH`` naming the
taskloom to measure: it drives the real engine through :class:`taskloom.Harness` with a
``FunctionModel`` that makes one call per turn, and writes what the model was shown — every
``tool_result`` block — to ``OUT`` as JSON. Only the public API is used, the same in every
version measured, so that one script runs against the old and the new tree alike.

The repository (``make_repo``) and the calls are deterministic: a few thousand small Python
files, a 225 KB text file, a 300 KB CSV with long lines, a build that prints 100 KB.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Packages x modules in the generated repository.
PACKAGES, MODULES = 60, 50

Call = tuple[str, dict[str, Any] | Callable[[str], dict[str, Any]]]


def make_repo(root: Path) -> None:
    """Write the measured repository under ``root`` and commit it."""
    for p in range(PACKAGES):
        pkg = root / "src" / f"pkg{p:02d}"
        pkg.mkdir(parents=True)
        for m in range(MODULES):
            body = [f'"""Module {m} of package {p}."""', "", "import os", ""]
            for f in range(6):
                body += [f"def handler_{f}(event):", f"    return event.get('k{f}')", ""]
            if (p * MODULES + m) % 7 == 0:
                body.append(f"# TODO: make module {m} faster")
            (pkg / f"mod{m:02d}.py").write_text("\n".join(body) + "\n")
    data = root / "data"
    data.mkdir()
    line = "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor"
    (data / "big.txt").write_text("".join(f"{i:05d} {line}\n" for i in range(2800)))
    row = ",".join(f"field{c}" for c in range(300))
    (data / "wide.csv").write_text("".join(f"{i},{row}\n" for i in range(110)))
    (root / "README.md").write_text("# Sample\n\nA project to read and search.\n")
    (root / "build.sh").write_text(
        'for i in $(seq 1 1500); do echo "compiling src/pkg/module_$i.c -O2 -Wall"; done\n'
    )
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b", "-C", str(root)]
    date = "2026-01-01T00:00:00Z"  # the same commit id on both sides
    env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "sample"], check=True, env=env)


def _task_id(previous: str) -> str:
    found = re.search(r"ID: (\w+)", previous)
    return found.group(1) if found else "missing"


def calls(root: Path) -> list[Call]:
    """The fixed script: what a coding agent does in its first minutes in a repository."""
    src, data = root / "src", root / "data"
    reads: list[Call] = [
        ("Read", {"file_path": str(src / f"pkg{p:02d}" / "mod01.py")}) for p in range(8)
    ]
    reads += [
        ("Read", {"file_path": str(root / "README.md")}),
        ("Read", {"file_path": str(data / "big.txt")}),
        ("Read", {"file_path": str(data / "big.txt"), "offset": 1000, "limit": 200}),
        ("Read", {"file_path": str(data / "wide.csv")}),
        ("Read", {"file_path": str(data / "wide.csv"), "offset": 1, "limit": 5}),
        ("Read", {"file_path": str(root / "missing.py")}),
        ("Read", {"file_path": str(src / "pkg03" / "mod07.py"), "offset": 5, "limit": 10}),
    ]
    greps: list[Call] = [
        ("Grep", {"pattern": "TODO"}),
        ("Grep", {"pattern": "TODO", "output_mode": "content"}),
        ("Grep", {"pattern": "def handler_3", "output_mode": "content"}),
        ("Grep", {"pattern": "handler", "output_mode": "count"}),
        ("Grep", {"pattern": "import os", "output_mode": "files_with_matches"}),
        ("Grep", {"pattern": "module 49 of package 59", "-i": True}),
        ("Grep", {"pattern": "faster", "output_mode": "content", "path": str(src / "pkg01")}),
        ("Grep", {"pattern": "Sample", "glob": "*.md", "output_mode": "content"}),
        ("Grep", {"pattern": "nothing-matches-this"}),
        ("Grep", {"pattern": "event.get", "output_mode": "content", "head_limit": 20}),
        ("Grep", {"pattern": "TODO", "output_mode": "content", "-B": 1}),
        ("Grep", {"pattern": "lorem", "path": str(data), "output_mode": "count"}),
    ]
    globs: list[Call] = [
        ("Glob", {"pattern": "**/*.py"}),
        ("Glob", {"pattern": "src/pkg0*/mod0*.py"}),
        ("Glob", {"pattern": "*.md"}),
        ("Glob", {"pattern": "data/*"}),
        ("Glob", {"pattern": "**/mod49.py"}),
        ("Glob", {"pattern": "*.py", "path": str(src / "pkg05")}),
        ("Glob", {"pattern": "**/*.rs"}),
        ("Glob", {"pattern": "src/**/mod1*.py"}),
    ]
    shells: list[Call] = [
        ("Bash", {"command": "bash build.sh", "description": "Build the project"}),
        ("Bash", {"command": "seq 1 20000", "description": "Count"}),
        ("Bash", {"command": "ls -R src | head -400", "description": "List sources"}),
        ("Bash", {"command": "find . -name '*.py' -path '*pkg1*'", "description": "Find"}),
        ("Bash", {"command": "git log --oneline", "description": "History"}),
        ("Bash", {"command": "git status --short", "description": "Status"}),
        ("Bash", {"command": "cat data/big.txt", "description": "Show the data"}),
        ("Bash", {"command": "wc -l data/*", "description": "Count lines"}),
        ("Bash", {"command": "echo hello", "description": "Say hello"}),
        ("Bash", {"command": "grep -rn TODO src | head -30", "description": "TODOs"}),
        ("Bash", {"command": "grep -c nothing README.md", "description": "No match"}),
        ("Bash", {"command": "ls missing-dir", "description": "Missing"}),
        ("Bash", {"command": "python3 -c \"print('x' * 50000)\"", "description": "Wide"}),
        ("Bash", {"command": "du -sh src data", "description": "Sizes"}),
        ("Bash", {"command": "head -c 2000 data/wide.csv", "description": "Peek"}),
    ]
    background: list[Call] = [
        ("Bash", {"command": "bash build.sh; seq 1 3000", "run_in_background": True}),
        ("TaskOutput", lambda prev: {"task_id": _task_id(prev), "timeout": 30000}),
        ("Bash", {"command": "sleep 0.2; echo tests passed", "run_in_background": True}),
        ("TaskOutput", lambda prev: {"task_id": _task_id(prev), "timeout": 30000}),
        ("Bash", {"command": "sleep 30", "run_in_background": True}),
        ("TaskStop", lambda prev: {"task_id": _task_id(prev)}),
    ]
    edits: list[Call] = [
        ("Write", {"file_path": str(root / "notes.md"), "content": "# Notes\n\nfirst\n"}),
        ("Read", {"file_path": str(root / "notes.md")}),
        ("Edit", {"file_path": str(root / "notes.md"), "old_string": "first", "new_string": "1st"}),
        ("Read", {"file_path": str(src / "pkg00" / "mod00.py")}),
        (
            "Edit",
            {
                "file_path": str(src / "pkg00" / "mod00.py"),
                "old_string": "import os",
                "new_string": "import os\nimport sys",
            },
        ),
    ]
    return reads + greps + globs + shells + background + edits


async def drive(root: Path) -> list[dict[str, Any]]:
    """Run the script through the engine; the tool results the model was shown, in order."""
    import taskloom
    from taskloom.messages import ToolResultBlock
    from taskloom.testing import FunctionModel, ToolCall, Turn

    script = calls(root)
    shown: list[dict[str, Any]] = []

    def respond(request: Any) -> Any:
        last = request.messages[-1]
        blocks = [b for b in last.content if isinstance(b, ToolResultBlock)]
        for block in blocks:
            content = (
                block.content
                if isinstance(block.content, str)
                else [b.dump() for b in block.content]
            )
            shown[-1].update(content=content, is_error=block.is_error)
        step = len(shown)
        if step == len(script):
            return "done"
        name, spec = script[step]
        previous = blocks[0].text() if blocks else ""
        tool_input = spec(previous) if callable(spec) else spec
        shown.append({"tool": name, "input": tool_input})
        return Turn(tool_calls=(ToolCall(name, tool_input),))

    async with taskloom.Harness(model=FunctionModel(respond), cwd=root, skip_permissions=True) as h:
        async for _ in h.run("Explore this repository, build it, and tidy the notes."):
            pass
    return shown


def main() -> None:
    """``_tool_script.py REPO OUT``: drive the script in REPO, write the results to OUT."""
    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    os.chdir(root)
    out.write_text(json.dumps(asyncio.run(drive(root))))


if __name__ == "__main__":
    main()
