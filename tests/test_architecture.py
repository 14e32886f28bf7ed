"""The import structure: layers import only downward, and no two modules import each other.

Every import counts — at module level, inside functions, and under ``TYPE_CHECKING``: a cycle
hidden by a deferred import is still a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "taskloom"

#: The layers, bottom up. A module may import from its own layer and the layers below.
LAYERS: list[set[str]] = [
    {"errors", "messages", "settings", "clock", "_aio", "_version"},
    {"store"},
    {"process"},
    {"tasks"},
    {"untrusted", "models", "testing"},
    {"permissions", "hooks"},
    {"transcript", "prompts", "worktrees"},
    {"tools", "mcp"},
    {"engine", "events", "gate"},
    {"conversation"},
    {"agents", "session", "options"},
    {"teams"},
    {"harness"},
    {"cli", "__main__", "__init__"},
]

#: Known violations, to be removed (each must still exist: fixed ones leave this list).
KNOWN_UPWARD: set[tuple[str, str]] = set()
KNOWN_MUTUAL: set[frozenset[str]] = set()


def modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every taskloom module ``name`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import mod`` imports the module pkg.mod when there is one.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("taskloom") and target != name:
                yield target


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports_of(name, path, known)) for name, path in known.items()}


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer(module: str) -> int:
    name = top(module)
    for i, members in enumerate(LAYERS):
        if name in members:
            return i
    raise AssertionError(f"{module} belongs to no layer: add {name!r} to LAYERS")


def test_every_module_has_a_layer() -> None:
    for module in graph():
        layer(module)


def test_layers_import_only_downward() -> None:
    upward = {
        (top(src), top(dst))
        for src, targets in graph().items()
        for dst in targets
        if layer(dst) > layer(src)
    }
    assert upward - KNOWN_UPWARD == set(), "imports from a higher layer"
    assert KNOWN_UPWARD - upward == set(), "fixed: remove these from KNOWN_UPWARD"


def test_no_two_modules_import_each_other() -> None:
    edges = graph()
    mutual = {
        frozenset((a, b)) for a, targets in edges.items() for b in targets if a in edges.get(b, ())
    }
    assert mutual - KNOWN_MUTUAL == set(), "modules that import each other"
    assert KNOWN_MUTUAL - mutual == set(), "fixed: remove these from KNOWN_MUTUAL"


def test_no_package_cycles() -> None:
    packages: dict[str, set[str]] = {}
    for src, targets in graph().items():
        packages.setdefault(top(src), set()).update(top(t) for t in targets if top(t) != top(src))
    cycles = set()
    for start in packages:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in packages.get(node, ()):
                if nxt == start:
                    cycles.add(frozenset(path))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    known = {frozenset(pair) for pair in KNOWN_UPWARD}
    assert {c for c in cycles if not any(k <= c for k in known)} == set()
