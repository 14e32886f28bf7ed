"""The change between two texts as unified-diff hunks: Edit's and Write's ``structuredPatch``.

Its cost is bounded, whatever the texts: the lines the two share at their start and end are
set aside first (an edit of a huge file costs what it changed, plus one pass over it), and the
rest is diffed with Myers' algorithm, whose work grows with the lines times the edits, within
:data:`MAX_DIFF_STEPS`. A change that needs more is given as one hunk that removes every line
in between and adds the new ones: a valid patch, if not the smallest, as the reference gives
none when its diff runs out of time.
"""

from __future__ import annotations

from typing import Any

#: Lines of context around each change in a hunk (as in a unified diff).
PATCH_CONTEXT = 3
#: Most steps (diagonals tried plus lines matched) the diff may take before giving up.
MAX_DIFF_STEPS = 1_000_000

#: (tag, i1, i2, j1, j2): lines ``old[i1:i2]`` become ``new[j1:j2]``, as difflib's opcodes.
Opcode = tuple[str, int, int, int, int]


def structured_patch(before: str, after: str) -> list[dict[str, Any]]:
    """The change from ``before`` to ``after`` as unified-diff hunks (see the module docstring).

    Each hunk is ``{oldStart, oldLines, newStart, newLines, lines}``, its lines prefixed with
    `` ``, ``-`` or ``+`` and without their line ends.
    """
    old, new = before.splitlines(), after.splitlines()
    head, shortest = 0, min(len(old), len(new))
    while head < shortest and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < shortest - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    old_end, new_end = len(old) - tail, len(new) - tail
    if head == old_end and head == new_end:
        return []
    blocks = _matches(old[head:old_end], new[head:new_end], MAX_DIFF_STEPS)
    if blocks is None:  # too costly: everything between is one change
        blocks = []
    middle = _opcodes([(i + head, j + head, n) for i, j, n in blocks], head, old_end, new_end)
    codes = [("equal", 0, head, 0, head), *middle, ("equal", old_end, len(old), new_end, len(new))]
    return [_hunk(group, old, new) for group in _grouped(codes)]


def _matches(a: list[str], b: list[str], budget: int) -> list[tuple[int, int, int]] | None:
    """The lines ``a`` and ``b`` share, as (i, j, size) runs in order; None past ``budget``.

    Myers' greedy O((N+M)D) diff: for each number of edits ``d``, the furthest point reached
    on each diagonal ``k = x - y``, kept per ``d`` (``trace``) to walk the path back.
    """
    n, m = len(a), len(b)
    if not n or not m:  # only added, or only removed: nothing shared
        return []
    offset = n + m + 1
    v = [0] * (2 * offset + 1)
    trace: list[list[int]] = []
    steps = 0
    for d in range(n + m + 1):
        trace.append(v[offset - d : offset + d + 1])
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]  # down: a line of ``b`` added
            else:
                x = v[offset + k - 1] + 1  # right: a line of ``a`` removed
            y, start = x - k, x
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[offset + k] = x
            steps += 1 + x - start
            if x >= n and y >= m:
                return _walk_back(trace, n, m)
        if steps > budget:
            return None
    raise AssertionError("unreachable: n + m edits always suffice")


def _walk_back(trace: list[list[int]], x: int, y: int) -> list[tuple[int, int, int]]:
    """The shared runs of the path that ends at (``x``, ``y``), from the start."""
    runs: list[tuple[int, int, int]] = []
    for d in range(len(trace) - 1, 0, -1):
        v, k = trace[d], x - y  # v[k + d]: the furthest x on diagonal k after d - 1 edits
        # The diagonal it came from, chosen as the forward pass chose it.
        came = k + 1 if k == -d or (k != d and v[k - 1 + d] < v[k + 1 + d]) else k - 1
        prev_x = v[came + d]
        prev_y = prev_x - came
        # The snake after the edit: from where the edit led to (x, y), diagonally.
        edit_x, edit_y = (prev_x, prev_y + 1) if came == k + 1 else (prev_x + 1, prev_y)
        if x > edit_x:
            runs.append((edit_x, edit_y, x - edit_x))
        x, y = prev_x, prev_y
    if x:  # the snake from the start, before any edit
        runs.append((0, 0, x))
    runs.reverse()
    return runs


def _opcodes(
    runs: list[tuple[int, int, int]], start: int, old_end: int, new_end: int
) -> list[Opcode]:
    """difflib-style opcodes of ``old[start:old_end]`` to ``new[start:new_end]`` from its runs."""
    codes: list[Opcode] = []
    i = j = start
    for ai, bj, size in [*runs, (old_end, new_end, 0)]:
        if i < ai or j < bj:
            tag = "replace" if i < ai and j < bj else "delete" if i < ai else "insert"
            codes.append((tag, i, ai, j, bj))
        i, j = ai + size, bj + size
        if size:
            codes.append(("equal", ai, i, bj, j))
    return codes


def _grouped(codes: list[Opcode]) -> list[list[Opcode]]:
    """The opcodes cut into hunks with :data:`PATCH_CONTEXT` lines of context, as difflib does."""
    n = PATCH_CONTEXT
    codes = [c for c in codes if c[0] != "equal" or c[2] > c[1]]
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = (tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2)
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = (tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n))
    groups: list[list[Opcode]] = []
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * n:  # a long unchanged run ends one hunk
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            groups.append(group)
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        groups.append(group)
    return [g for g in groups if any(c[0] != "equal" for c in g)]


def _hunk(group: list[Opcode], old: list[str], new: list[str]) -> dict[str, Any]:
    """One hunk from its opcodes (positions in ``old`` and ``new``)."""
    lines: list[str] = []
    for tag, i1, i2, j1, j2 in group:
        if tag == "equal":
            lines += [" " + line for line in old[i1:i2]]
            continue
        lines += ["-" + line for line in old[i1:i2]]
        lines += ["+" + line for line in new[j1:j2]]
    first, last = group[0], group[-1]
    old_lines, new_lines = last[2] - first[1], last[4] - first[3]
    return {
        # An empty side starts at the line before it, as in a unified diff.
        "oldStart": first[1] + (1 if old_lines else 0),
        "oldLines": old_lines,
        "newStart": first[3] + (1 if new_lines else 0),
        "newLines": new_lines,
        "lines": lines,
    }
