"""Glob and gitignore matching, and the file walk of Glob and Grep's pure-Python search.

Patterns are translated to regular expressions over ``/``-separated relative paths: ``*`` and
``?`` stay within one path segment, ``**`` spans segments, ``[...]`` is a character class and
``{a,b}`` an alternation.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from taskloom._dataclass import dataclass

#: Version-control metadata: never searched or listed (ripgrep is given the same list).
VCS_DIRS = (".git", ".svn", ".hg", ".bzr", ".jj", ".sl")
_MAGIC = re.compile(r"[*?\[{\\]")


def glob_to_regex(pattern: str, *, braces: bool = True) -> str:
    """A regex (for ``fullmatch``) equivalent to the glob ``pattern``."""
    out: list[str] = []
    i, n, depth = 0, len(pattern), 0
    while i < n:
        c = pattern[i]
        if c == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            whole_segment = (i == 0 or pattern[i - 1] == "/") and (j == n or pattern[j] == "/")
            if j - i >= 2 and whole_segment:
                # "**/" may match no directory at all; a trailing "**" matches everything below.
                out.append(".*" if j == n else "(?:.*/)?")
                if j < n:
                    j += 1  # the "/" is part of "**/"
            else:
                out.append("[^/]*")
            i = j
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[" and (close := _class_end(pattern, i)) > 0:
            body = pattern[i + 1 : close]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[" + ("^/" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = close
        elif c == "{" and braces:
            depth += 1
            out.append("(?:")
        elif c == "," and depth:
            out.append("|")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    if depth:
        return glob_to_regex(pattern, braces=False)  # unbalanced: braces are literal
    return "(?s:" + "".join(out) + ")"


def _class_end(pattern: str, start: int) -> int:
    """Index of the ``]`` closing the class opened at ``start``, or -1."""
    j = start + 1
    if pattern[j : j + 1] in ("!", "^"):
        j += 1
    if pattern[j : j + 1] == "]":
        j += 1  # a leading "]" is a member, not the end
    return pattern.find("]", j)


@dataclass(frozen=True, slots=True)
class IgnoreRule:
    """One line of an ignore file (or one ``--glob``), with gitignore semantics.

    Attributes:
        regex: Matches the path relative to ``base``.
        negated: A ``!`` rule (re-include; for overrides: exclude).
        dir_only: Written with a trailing ``/``.
        base: The directory the rule is relative to.
        rank: Precedence of its source; lower wins (``.rgignore`` < ``.ignore`` < ...).
    """

    regex: re.Pattern[str]
    negated: bool
    dir_only: bool
    base: str
    rank: int = 0

    def matches(self, path: str, is_dir: bool) -> bool:
        """Whether the rule applies to the absolute ``path``."""
        if self.dir_only and not is_dir:
            return False
        prefix = self.base.rstrip("/") + "/"
        if not path.startswith(prefix):
            return False
        return self.regex.fullmatch(path[len(prefix) :]) is not None


def parse_ignore_line(line: str, base: str, rank: int = 0) -> IgnoreRule | None:
    """Compile one gitignore line; None for blanks and comments."""
    line = line.removesuffix("\r")
    if not line.strip() or line.startswith("#"):
        return None
    stripped = line.rstrip(" ")
    if stripped.endswith("\\"):
        stripped += " "  # an escaped trailing space is kept
    negated = stripped.startswith("!")
    stripped = stripped[1:] if negated else stripped
    if stripped[:2] in ("\\!", "\\#"):
        stripped = stripped[1:]
    dir_only = stripped.endswith("/")
    stripped = stripped.rstrip("/")
    if not stripped:
        return None
    # A slash anywhere but the end anchors the pattern to ``base``; otherwise any depth.
    anchored = "/" in stripped
    stripped = stripped.lstrip("/") if anchored else "**/" + stripped
    return IgnoreRule(re.compile(glob_to_regex(stripped)), negated, dir_only, base, rank)


def read_ignore_file(path: str, rank: int, base: str | None = None) -> list[IgnoreRule]:
    """The rules of an ignore file, relative to ``base`` (default: its directory); [] if none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
    except OSError:
        return []
    base = base or os.path.dirname(path)
    return [r for r in (parse_ignore_line(line, base, rank) for line in lines) if r is not None]


def last_match(rules: list[IgnoreRule], path: str, is_dir: bool) -> IgnoreRule | None:
    """The deciding rule: the best-ranked source, then the last matching line in it."""
    best: IgnoreRule | None = None
    for rule in rules:
        if rule.matches(path, is_dir) and (best is None or rule.rank <= best.rank):
            best = rule
    return best


#: ripgrep's definitions (``rg --type-list``) of common types, for the Python search:
#: space-separated globs matched against file names.
TYPES: dict[str, str] = {
    "c": "*.[chH] *.[chH].in *.cats",
    "cpp": "*.[ChH] *.[ChH].in *.[ch]pp *.[ch]pp.in *.[ch]xx *.[ch]xx.in *.cc *.cc.in *.hh *.hh.in"
    " *.inl",
    "cs": "*.cs",
    "csharp": "*.cs",
    "css": "*.css *.scss",
    "go": "*.go",
    "html": "*.ejs *.htm *.html",
    "java": "*.java *.jsp *.jspx *.properties",
    "js": "*.js *.jsx *.vue",
    "json": "*.json composer.lock",
    "kotlin": "*.kt *.kts",
    "lua": "*.lua",
    "markdown": "*.markdown *.md *.mdown *.mkdn",
    "md": "*.markdown *.md *.mdown *.mkdn",
    "php": "*.php *.php3 *.php4 *.php5 *.phtml",
    "py": "*.py",
    "ruby": "*.gemspec *.rb *.rbw .irbrc Gemfile Rakefile config.ru",
    "rust": "*.rs",
    "sh": "*.bash *.bashrc *.csh *.ksh *.sh *.tcsh *.zsh .bashrc .profile .zshrc",
    "sql": "*.psql *.sql",
    "swift": "*.swift",
    "toml": "*.toml Cargo.lock",
    "ts": "*.ts *.tsx",
    "txt": "*.txt",
    "xml": "*.dtd *.rng *.sch *.xhtml *.xjb *.xml *.xml.dist *.xsd *.xsl *.xslt",
    "yaml": "*.yaml *.yml",
}

_IGNORE_FILES = ((".rgignore", 0), (".ignore", 1), (".gitignore", 2))


def is_binary_file(path: str) -> bool:
    """Whether the file contains a NUL byte anywhere (ripgrep's binary test)."""
    if not os.path.isfile(path):
        return True  # not a regular file: never opened (a FIFO would block)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 16):
                if b"\0" in chunk:
                    return True
    except OSError:
        return False
    return False


def iter_search_files(
    root: str,
    globs: tuple[str, ...],
    file_type: str | None,
    excluded_dirs: tuple[str, ...],
    max_depth: int | None = None,
) -> Iterator[str]:
    """The files ripgrep (``--hidden --sort=path``) would search under ``root``.

    Symlinks are skipped; ``globs`` (ripgrep ``--glob`` overrides, ``!`` to exclude) take
    precedence over ignore files, which take precedence over ``file_type``. A file ``root`` is
    searched whatever the filters say, as ripgrep does with explicit paths. ``max_depth``
    (like ``--max-depth`` less one) limits how many directories deep the walk goes: 0 lists
    only the files directly in ``root``.

    Raises:
        ValueError: ``file_type`` is not known.
    """
    if file_type is not None and file_type not in TYPES:
        raise ValueError(f"unrecognized file type: {file_type}")
    if not os.path.isdir(root):
        yield root
        return
    overrides = [parse_ignore_line(g, root) for g in (*globs, *(f"!{d}" for d in excluded_dirs))]
    walk = _SearchWalk(
        [r for r in overrides if r is not None],
        [re.compile(glob_to_regex(g)) for g in TYPES.get(file_type or "", "").split()],
        max_depth,
    )
    rules, in_git = _ancestor_rules(root)
    yield from walk.walk(root, rules, in_git, 0)


def _ancestor_rules(root: str) -> tuple[list[IgnoreRule], bool]:
    """Ignore rules of ``root``'s parents, top-down; whether ``root`` is inside a git repo."""
    parents: list[str] = []
    directory = os.path.dirname(root)
    while True:
        parents.append(directory)
        up = os.path.dirname(directory)
        if up == directory:
            break
        directory = up
    parents.reverse()
    repo = max((i for i, d in enumerate(parents) if os.path.lexists(f"{d}/.git")), default=None)
    rules: list[IgnoreRule] = []
    for i, directory in enumerate(parents):
        for name, rank in _IGNORE_FILES:
            # .gitignore files above the repository's top are not part of it.
            if name != ".gitignore" or (repo is not None and i >= repo):
                rules += read_ignore_file(os.path.join(directory, name), rank)
    if repo is not None:
        top = parents[repo]
        rules += read_ignore_file(os.path.join(top, ".git", "info", "exclude"), 3, top)
    return rules, repo is not None


@dataclass(frozen=True, slots=True)
class _SearchWalk:
    overrides: list[IgnoreRule]
    types: list[re.Pattern[str]]
    max_depth: int | None

    def walk(
        self, directory: str, rules: list[IgnoreRule], in_git: bool, depth: int
    ) -> Iterator[str]:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        if any(e.name == ".git" for e in entries):
            in_git = True
            exclude = os.path.join(directory, ".git", "info", "exclude")
            rules = [*rules, *read_ignore_file(exclude, 3, directory)]
        for name, rank in _IGNORE_FILES:
            if name != ".gitignore" or in_git:
                rules = [*rules, *read_ignore_file(os.path.join(directory, name), rank)]
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue
                is_dir = entry.is_dir()
                if not (is_dir or entry.is_file()) or self._skipped(entry, is_dir, rules):
                    continue
            except OSError:
                continue
            if is_dir:
                if self.max_depth is None or depth < self.max_depth:
                    yield from self.walk(entry.path, rules, in_git, depth + 1)
            else:
                yield entry.path

    def _skipped(self, entry: os.DirEntry[str], is_dir: bool, rules: list[IgnoreRule]) -> bool:
        """Apply ripgrep's precedence: overrides, then ignore files, then file types."""
        override = last_match(self.overrides, entry.path, is_dir)
        if override is not None:
            return override.negated
        if not is_dir and any(not r.negated for r in self.overrides):
            return True  # there are --glob whitelists and this file is on none of them
        rule = last_match(rules, entry.path, is_dir)
        if rule is not None and not rule.negated:
            return True
        return (
            bool(self.types) and not is_dir and not any(t.fullmatch(entry.name) for t in self.types)
        )
