"""Benchmark: what the core tools show the model, in characters and tokens, before and after.

Runs the fixed script of ``bench/_tool_script.py`` (61 calls: reads of small and big files,
searches in a repository of 3,000 files, a build with long output, background commands, edits)
twice in the same run, each in a fresh copy of the same repository and a fresh state directory:

* ``before``: the taskloom of ``--base`` (default: the last commit before the core tools were
  brought in line with the reference), extracted with ``git archive`` into a temporary tree;
* ``after``: this working tree.

It prints, per tool and in total, the characters of the ``tool_result`` blocks the model was
shown and an estimate of their tokens (characters / 4; an image block counts as its pixel
estimate, width x height / 750, not as its base64 text), then checks that no call lost
information: whatever the before side showed that the after side does not show must be in the
file the after side names (a saved ``<persisted-output>`` file, or, for Read, the file itself with
the next offset named).

Target: total characters drop by at least 40 %. ``--check`` exits 1 when it is missed or a call
lost information. Run: ``.venv/bin/python bench/tool_results.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
#: The commit before issue 26 (tool fidelity) changed what the tools show.
DEFAULT_BASE = "e8c5d42"
PERSISTED = re.compile(r"saved to: (\S+)")
#: Lines that count, summarise or say nothing was found: worded differently, same fact.
META = re.compile(r"^(Found \d|\[\.\.\. output truncated|\(Output cut at|\(Results are trunc)")
#: How Read marked a line it cut (lines are now kept whole).
LINE_CUT = " [... line truncated]"
#: Marks a piece of a line (see :func:`_facts`).
PIECE = "\x00piece:"
EMPTY = re.compile(r"^No (files|matches) found$")
#: A note saying how to get the rest.
PAGER = re.compile(r"^.*(offset|Results are truncated).*$", re.MULTILINE)
#: Session and task ids (random on each side) and timings, which no side can keep equal.
VOLATILE = re.compile(r"[0-9a-f-]{36}|\b[bar][a-z0-9]{8}\b|\d+(\.\d+)?m?s\b")


def shown_chars(content: Any) -> tuple[int, int]:
    """(characters of text, estimated tokens of images) of one result's content."""
    if isinstance(content, str):
        return len(content), 0
    chars = images = 0
    for block in content:
        if block.get("type") == "image":
            images += _image_tokens(block)
        else:
            chars += len(block.get("text", ""))
    return chars, images


def _image_tokens(block: dict[str, Any]) -> int:
    import base64
    import struct

    data = base64.b64decode(block["source"]["data"][:64] + "==")
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        width, height = struct.unpack(">II", data[16:24])
        return width * height // 750
    return 1600  # the API's bound for an image it resizes


def text_of(content: Any) -> str:
    """A result's text (its text blocks joined)."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


def run_side(label: str, src: Path, work: Path) -> list[dict[str, Any]]:
    """Drive the script with the taskloom under ``src`` in a fresh repository copy."""
    sys.path.insert(0, str(HERE))
    from _tool_script import make_repo

    root, home = work / "repo", work / "home"  # the same paths on both sides: results name them
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    root.mkdir(parents=True)
    make_repo(root)
    (work / label).mkdir()
    out = work / label / "shown.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(PYTHONPATH=str(src), TASKLOOM_HOME=str(home))
    subprocess.run(
        [sys.executable, str(HERE / "_tool_script.py"), str(root), str(out)],
        env=env,
        check=True,
        timeout=600,
    )
    shown: list[dict[str, Any]] = json.loads(out.read_text())
    return shown


def verdict(before: dict[str, Any], after: dict[str, Any], root: str) -> str:
    """How what ``before`` showed survives in ``after``.

    ``same`` (all of it is shown), ``saved`` (the rest is in the file the result names),
    ``paged`` (the result shows part of it, nothing else, and says how to page on: Read's next
    offset, Grep's offset, Glob's narrower pattern), ``error`` (before was an error), or
    ``lost``.
    """
    if before.get("is_error"):
        return "error"
    old, new = _facts(before, root), _facts(after, root)
    if _covered(old, new):
        return "same"
    text = text_of(after.get("content", ""))
    saved = PERSISTED.search(text)
    if saved and Path(saved.group(1)).is_file():
        kept = _facts({"content": Path(saved.group(1)).read_text(errors="replace")}, root)
        return "saved" if _covered(old, new | kept) else "lost"
    if PAGER.search(text) and new - {_pager_line(text)} <= old:
        return "paged"
    return "lost"


def _facts(shown: dict[str, Any], root: str) -> set[str]:
    """The lines of a result with what may differ and still say the same taken out."""
    text = VOLATILE.sub("#", text_of(shown.get("content", "")).replace(root + "/", ""))
    rows = [ln.strip() for ln in text.splitlines()]
    # The old Bash cut its output's head and tail mid-line: the lines either side of its
    # marker are pieces of lines, found inside whole ones.
    for at in [i for i, ln in enumerate(rows) if ln.startswith("[... output truncated")]:
        for near in (_nearest(rows, at, -1), _nearest(rows, at, 1)):
            if near is not None:
                rows[near] = PIECE + rows[near]
    lines = set(rows)
    lines = {"No matches found" if EMPTY.match(ln) else ln for ln in lines}
    return {ln for ln in lines if ln and not META.match(ln)}


def _nearest(rows: list[str], at: int, step: int) -> int | None:
    i = at + step
    while 0 <= i < len(rows) and not rows[i]:
        i += step
    return i if 0 <= i < len(rows) else None


def _covered(old: set[str], pool: set[str]) -> bool:
    """Whether every fact of ``old`` is in ``pool``: a line Read cut short as the start of
    one, a piece of a line as part of one."""
    cut = {ln for ln in old if ln.endswith(LINE_CUT)}
    pieces = {ln for ln in old if ln.startswith(PIECE)}
    if not (old - cut - pieces) <= pool:
        return False
    starts = all(any(p.startswith(ln.removesuffix(LINE_CUT)) for p in pool) for ln in cut)
    return starts and all(any(ln.removeprefix(PIECE) in p for p in pool) for ln in pieces)


def _pager_line(text: str) -> str:
    found = PAGER.search(text)
    return found.group(0).strip() if found else ""


def report(
    before: list[dict[str, Any]], after: list[dict[str, Any]], root: str
) -> tuple[float, list[str]]:
    """Print the table; return the drop of total characters and the calls that lost facts."""
    per_tool: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    lost, verdicts = [], Counter[str]()
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        b_chars, b_img = shown_chars(b.get("content", ""))
        a_chars, a_img = shown_chars(a.get("content", ""))
        row = per_tool[a["tool"]]
        row[0] += 1
        row[1] += b_chars
        row[2] += a_chars
        row[3] += b_chars // 4 + b_img
        row[4] += a_chars // 4 + a_img
        verdicts[found := verdict(b, a, root)] += 1
        if found == "lost":
            lost.append(f"{i}: {a['tool']} {json.dumps(a['input'])[:80]}")
    print(
        f"{'tool':<12}{'calls':>6}{'chars before':>14}{'chars after':>13}"
        f"{'tokens before':>15}{'tokens after':>14}{'ratio':>7}"
    )
    totals = [0, 0, 0, 0, 0]
    for tool, row in sorted(per_tool.items()):
        totals = [t + r for t, r in zip(totals, row, strict=True)]
        ratio = row[2] / row[1] if row[1] else 1.0
        print(
            f"{tool:<12}{row[0]:>6}{row[1]:>14,}{row[2]:>13,}{row[3]:>15,}{row[4]:>14,}"
            f"{ratio:>7.2f}"
        )
    ratio = totals[2] / totals[1] if totals[1] else 1.0
    print(
        f"{'total':<12}{totals[0]:>6}{totals[1]:>14,}{totals[2]:>13,}{totals[3]:>15,}"
        f"{totals[4]:>14,}{ratio:>7.2f}"
    )
    print("\nwhat the after side shows of what the before side showed, per call:")
    print("  " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    return 1.0 - ratio, lost


def main() -> int:
    """Measure both sides, print the table and the verdict."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default=DEFAULT_BASE, help="the commit measured as before")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tool-results-"))
    try:
        base = work / "base"
        base.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.base, "src"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        before = run_side("before", base / "src", work)
        after = run_side("after", REPO / "src", work)
        drop, lost = report(before, after, str(work / "repo"))
        print(f"\ncharacters shown: {drop:.0%} fewer than {args.base} (target: at least 40 %)")
        print(f"calls that lost information: {len(lost)} of {len(after)}")
        for line in lost:
            print(f"  {line}")
        return 1 if args.check and (drop < 0.40 or lost) else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
