"""The read-only policy's reading of shell text: heredocs, comments, sed and cp options.

Each command is decided by a real read-only policy; none is run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from taskloom.permissions import PermissionPolicy, PermissionRequest

#: Writes hidden behind a heredoc, a quote or a comment as a careless scanner reads them.
HEREDOC_WRITES = [
    "cat <<\\EOF >/tmp/x\nhi\nEOF\nrm -rf src",
    "cat <<\\EOF\nhi\nEOF\necho x > README.md",
    'echo "<<EOF"\nrm -rf src\nEOF',
    "grep -n '<<EOF' f\ngit checkout -- src\nEOF",
    "# <<EOF\nrm -rf src",
    "ls # <<EOF\nrm -rf src\nEOF",
    'cat <<"EOF"\nhi\nEOF\nrm x',
    "cat <<E'O'F\nhi\nEOF\nrm x",
    "cat <<-EOF\n\thi\n\tEOF\nrm x",
    "cat <<A <<B\na\nA\nb\nB\nrm x",
    # Never closed (a trailing space is not the delimiter): the rest is judged as commands.
    "cat <<EOF\nhi\nEOF \nrm -rf src",
    "cat <<EOF\nrm -rf src",
    # A substitution's redirection, even inside double quotes.
    'echo "$(echo x > README.md)"',
    # An unquoted delimiter's body is expanded: its substitutions run.
    "cat <<EOF\n$(rm -rf src)\nEOF",
    "cat <<EOF\n`rm -rf src`\nEOF",
    "cat <<-EOF\n\t$(rm -rf src)\n\tEOF",
    "x=$(cat <<EOF\n$(rm -rf src)\nEOF\n)",
    "cat <<EOF\n${x:=$(rm f)}\nEOF",
    "cat <<EOF | grep x\n$(touch README.md)\nEOF",
    "cat <<EOF >/tmp/out.txt\n$(rm -rf src)\n`echo y > README.md`\nEOF",
    # A substitution whose extent a count of parentheses could misread is refused.
    "cat <<EOF\n$(echo a\nrm f)\nEOF",
    "cat <<EOF\n`echo \\`rm f\\``\nEOF",
    'cat <<EOF\n$(echo ")"; rm f)\nEOF',
    "cat <<EOF\n$(case a in a) rm f;; esac)\nEOF",
    'echo $(echo ")"; rm f)',
    "echo $(case a in a) rm f;; esac)",
    # Nested subshells.
    "((rm f) )",
    "( (rm f) )",
    # Arithmetic's << shifts bits; it opens no heredoc.
    "echo $(( 1<<2 ))\nrm -rf src\n2",
    "(( x = 1<<2 ))\nrm -rf src\n2",
]

#: Heredoc bodies are data; comments are nothing.
HEREDOC_READS = [
    "cat > /tmp/check.py <<'EOF'\nrm -rf src\necho x > README.md\nEOF",
    "cat <<\\EOF > /tmp/x\nrm -rf src\nEOF\ncat /tmp/x",
    "cat <<-EOF >/tmp/x\n\trm x > f\n\tEOF\nwc -l /tmp/x",
    "cat <<A >/tmp/a <<B\nrm x\nA\nrm y\nB",
    "grep -c '<<EOF' f",
    # Data with no substitution, under an unquoted delimiter: nothing of it runs.
    "cat <<EOF >/tmp/x\nrm -rf src $HOME and > quotes\nEOF\ncat /tmp/x",
    "cat <<EOF\ntoday is $(date) in `pwd`\nEOF",
    "echo $(( 1<<2 ))",
    # Plain substitutions are read surely.
    "pytest -q $(git diff --name-only)",
    'echo "$(date)" `pwd`',
    "(( x = 1<<2 ))",
    "ls # > README.md; rm x",
    "git log --oneline  # don't > worry",
]

SED_WRITES = [
    "sed -i s/a/b/ f",
    "sed -ri s/a/b/ f",
    "sed -Ei s/a/b/ f",
    "sed -ni p f",
    "sed -zi s/a/b/ f",
    "sed --in-place s/a/b/ f",
    "sed --in-place=.bak s/a/b/ f",
    "sed --in-pl s/a/b/ f",
    "sed -i.bak s/a/b/ f",
    "sed -s -i s/a/b/ f",
    "sed s/a/b/ -i f",
    "sed -e s/a/b/ -i f",
]

SED_READS = [
    "sed -n '/-i/p' f",
    "sed -e '/-i/d' f",
    "sed -n 's/x/ -i/p' f",
    "sed -e -i f",  # -e's value is the script "-i"
    "sed -n 5p f -- -i",
]

CP_LINKS = [
    "cp -s /repo/README.md /tmp/lnk; echo x >> /tmp/lnk",
    "cp -rs $PWD/src /tmp/m && echo x >> /tmp/m/x.py",
    "cp -l README.md /tmp/hard && echo x >> /tmp/hard",
    "cp -al src /tmp/q/",
    "cp --symbolic-link a /tmp/b",
    "cp --link a /tmp/b",
    "cp --sym a /tmp/b",
    "cp -t /tmp -s a",
]

CP_COPIES = [
    "cp a /tmp/a.bak",
    "cp -r src /tmp/copy/",
    "cp -a src /tmp/copy/",
    "cp -S s a /tmp/b",  # -S's value is the suffix "s"
]

#: Code fed on an input, programs known only at run time, wrappers that run a command.
HIDDEN_WRITES = [
    "python3 /dev/stdin <<< 'open(1)'",
    "bash /dev/stdin <<< 'rm f'",
    "source /dev/stdin <<< 'rm f'",
    ". /dev/fd/0 <<< 'rm f'",
    "sh /proc/self/fd/0 < cmds",
    "bash <(echo 'rm f')",
    "node /dev/stdin < code.js",
    "$(echo rm) f",
    "`echo rm` f",
    "${RM:-rm} f",
    "$'rm' f",
    "$cmd f",
    "busybox rm f",
    "flock /tmp/l rm f",
    "flock /tmp/l -c 'rm f'",
    "flock -w 5 /tmp/l git commit -m x",
    "flock .lock pytest",
    "watch -n 1 rm f",
    "watch 'echo x > f'",
    "parallel rm ::: a b",
    "parallel -j 4 rm {} ::: a b",
    "cat cmds | parallel",
    "script -c 'rm f' /dev/null",
    "script -qc 'rm f' /tmp/log",
    "script -c 'pytest'",
    "su -c 'rm f'",
    "su user -c 'rm f'",
    "su user",
    "awk -i inplace '{print}' f",
    "gawk --include=inplace '{print}' f",
    "sort -o f f",
    "sort f --output=f",
    "ed f",
    "vim -c wq f",
]

HIDDEN_READS = [
    "bash /tmp/check.sh",
    "source .venv/bin/activate && pytest -q",
    "python3 tests/check.py",
    'for f in $(ls); do echo "$f"; done',
    "echo $HOME",
    "busybox ls",
    "flock /tmp/l pytest -q",
    "watch -n 1 git status",
    "parallel -j 2 wc -l ::: a b",
    "script -qc 'pytest -q' /dev/null",
    "su user -c 'git status'",
    "awk '{print $1}' f",
    "sort -o /tmp/sorted f",
    "sort -k 2 f",
    "diff <(sort a) <(sort b)",
]

GIT_WRITES = [
    "git branch newb",
    "git branch -f main HEAD",
    "git branch -u origin/main",
    "git diff --output=f",
    "git log --output=f",
    "git log --output f",
    "git archive -o x.tar HEAD",
    "git archive --output=x.tar HEAD",
    "git bundle create b.bundle HEAD",
    "git hash-object -w f",
    "git merge-file a b c",
    "git remote update",
    "git remote prune origin",
    "git remote set-head origin -a",
    "git rerere",
    "git init-db",
    "git stash",
    "git stash pop",
    "git tag v1",
    "git tag -d v1",
    "git config user.email a@b",
    "git config --unset user.email",
    "git config set user.email a@b",
    "git worktree add ../w",
    "git submodule update --init",
    "git notes add -m x",
    "git bisect start",
    "git reflog expire --all",
    "git -c core.pager='rm f' log",
    "git -c alias.x='!rm f' x",
    "git -c diff.x.textconv=sh log -p",
    "git --config-env=core.editor=ED commit",
    "git --config-env=core.pager=P log",
    "GIT_PAGER='rm f' git log",
    "env GIT_EXTERNAL_DIFF=./x git diff",
    "PAGER='rm f' git log",
    "export GIT_PAGER='rm f'",
    "git --exec-path=/tmp/x status",
    "git -C d commit -m x",
]

#: Ordinary reads, refused before.
PLAIN_READS = [
    "git stash list",
    "git stash show -p stash@{0}",
    "git tag",
    "git tag -l 'v*'",
    "git tag --contains HEAD",
    "git config --get user.email",
    "git config --list",
    "git config -l",
    "git config user.email",
    "git config get user.email",
    "git worktree list",
    "git submodule status",
    "git submodule",
    "git notes list",
    "git notes",
    "git bisect log",
    "git branch",
    "git branch -a",
    "git branch --format '%(refname)'",
    "git branch --contains HEAD",
    "git remote -v",
    "git remote show origin",
    "git reflog",
    "git reflog show HEAD",
    "git apply --check p.diff",
    "git merge-file -p a b c",
    "git format-patch --stdout -1",
    "git -c color.ui=never log",
    "git --no-pager log -3",
    "GIT_AUTHOR_NAME=x git log",
    "command -v python",
    "command -V git",
    "node --test",
    "node --test tests/",
    "sed -n '/-i/p' f",
]

PACKAGE_WRITES = [
    "pip install x",
    "pip -q install x",
    "pip --quiet install x",
    "pip --log /tmp/l install x",
    "pip3.11 install x",
    "python -m pip -q install x",
    "python -m pip uninstall x",
    "python3.11 -m pip install x",
    "python3 -mpip install x",
    "pip download x",
    "pip wheel x",
    "pip config set global.x y",
    "npm update",
    "npm audit fix",
    "npm rm x",
    "npm add x",
    "npm link",
    "npm version patch",
    "npm pkg set name=x",
    "npm init -y",
    "npm --prefix x install",
    "npm ci",
    "yarn",
    "yarn remove x",
    "yarn upgrade",
    "pnpm i",
    "pnpm audit --fix",
    "uv lock",
    "uv remove x",
    "uv venv",
    "uv pip install x",
    "uv export -o req.txt",
    "poetry lock",
    "poetry remove x",
    "cargo add serde",
    "go mod tidy",
    "go install ./...",
    "go env -w GOFLAGS=x",
    "pipx install x",
    "conda install x",
    "conda config --set x y",
    "apt-get install x",
]

PACKAGE_READS = [
    "pip list",
    "pip -q show x",
    "pip3.11 freeze",
    "python -m pip list",
    "python3 -m pip --version",
    "pip config list",
    "npm ls",
    "npm audit",
    "npm audit --json",
    "npm version",
    "npm test",
    "npm run build",
    "npm view x version",
    "yarn --version",
    "yarn list",
    "pnpm ls",
    "uv tree",
    "uv pip list",
    "uv run pytest -q",
    "uv export",
    "poetry show",
    "poetry env info",
    "cargo test",
    "cargo tree",
    "go test ./...",
    "go mod graph",
    "go env GOPATH",
    "go list -u -m all",
    "conda list",
    "conda config --show",
    "python -m pytest -q",
]


#: Writes a probe got past the guard; real bash wrote or deleted a file with each.
PROBED_WRITES = [
    # Process substitutions and arithmetic whose end a count of parentheses misreads.
    'diff <(echo ")"; rm victim) a',
    'cat a >(echo ")"; rm victim)',
    "diff <(case a in a) rm victim;; esac) a",
    'echo $((echo ")"); rm victim)',
    "echo $((echo \\)); rm victim)",
    "((echo ')) # '; rm victim) )",
    'echo "don\'t" $(echo ")"; rm victim)',
    # A '#' bash does not read as a comment.
    "echo $(true)#; rm victim",
    "echo $((1))#; rm victim",
    "echo `ls #`; rm victim",
    # A '<<' that is a shift, not a heredoc.
    "echo $[1<<2]\nrm victim\n2]",
    "echo ${x:1<<1}\nrm victim\n1}",
    "a[1<<2]=5\nrm victim\n2]=5",
    # Redirections to files named by digits or '-'.
    "echo x > 5",
    "echo x >-",
    "echo x &>5",
    "echo x >>8",
    "echo x 2>9",
    # Program words this reading splits otherwise than bash.
    "{fd}>/dev/null rm victim",
    "{fd}< a rm victim",
    'case "x y" in "x y") rm victim;; esac',
    "case a in a)rm victim;; esac",
    "if true;then(rm victim);fi",
    "for i in 1;do(rm victim);done",
    "f(){ rm victim; }; f",
    "time(rm victim)",
    "coproc x { rm victim; }",
    "r\\\nm victim",
    "git com\\\nmit -qam x",
    # Brace expansion and globs.
    "{rm,victim}",
    "sed {-i,s/v/w/,victim}",
    "git {commit,-qam,x}",
    "/usr/bin/r[m] victim",
    # Wrappers.
    "/usr/bin/time rm victim",
    "taskset 1 rm victim",
    "setpriv rm victim",
    "prlimit rm victim",
    "strace -o /dev/null rm victim",
    "fakeroot rm victim",
    "sg root -c 'rm victim'",
    "env --split-string='rm victim'",
    "env -iS'rm victim'",
    "env 'BASH_FUNC_ls%%=() { rm victim; }' bash -c ls",
    "bash --rcfile <(echo rm victim) -ic true",
    "bash -c -- 'rm victim'",
    "bash -c -e 'rm victim'",
    # Builtins that run text or change what a name runs.
    "trap 'rm victim' EXIT",
    "mapfile -C 'rm victim #' -c 1 <<< x",
    "x='$(rm victim)'; echo ${x@P}",
    "shopt -s expand_aliases\nalias v='rm victim'\nv",
    "shopt -s expand_aliases; BASH_ALIASES[v]='rm victim'\nv",
    "hash -p /usr/bin/rm ls; ls victim",
    "BASH_CMDS[ls]=/usr/bin/rm; ls victim",
    # Fed paths written otherwise.
    ". /dev/./stdin <<< 'rm victim'",
    "source //dev/stdin <<< 'rm victim'",
    "source /proc/$$/fd/0 <<< 'rm victim'",
    "bash /dev/./stdin <<< 'rm victim'",
    # Git: options and subcommands that write or run, variables set otherwise.
    "git grep -Orm victim",
    "git grep --open-files-in-pager=rm victim",
    "git difftool -y -x rm",
    "git ls-remote --upload-pack='rm victim;' .",
    "git archive -ox.tar HEAD",
    "git archive --remote=. --exec='rm victim;' HEAD",
    "git diff --outp=o",
    "git pack-objects p < /dev/null",
    "git unpack-file HEAD:a",
    "git mailinfo m p < /dev/null",
    "git fast-export --export-marks=m HEAD",
    "git interpret-trailers --in-place a",
    "git bugreport",
    "git merge-tree HEAD HEAD",
    "git -c protocol.ext.allow=always ls-remote 'ext::rm victim'",
    "printf -v GIT_EXTERNAL_DIFF rm; export GIT_EXTERNAL_DIFF; git diff",
    "declare -x GIT_EXTERNAL_DIFF=rm; git diff",
    "declare -n r=GIT_EXTERNAL_DIFF; r=rm; export GIT_EXTERNAL_DIFF; git diff",
    "set -a; read GIT_EXTERNAL_DIFF <<< rm; git diff",
    "for GIT_EXTERNAL_DIFF in rm; do export GIT_EXTERNAL_DIFF; git diff; done",
    "HOME=/tmp/h git diff",
    # Programs that write files.
    "sort --out victim a",
    "shuf -o victim a",
    "uniq a victim",
    "gzip -k a",
    "split -l1 a",
    "mknod p p",
    "link a b",
    "mktemp x.XXXX",
    "mktemp -p . x.XXXX",
]

#: Reads next to those writes, still allowed.
PROBED_READS = [
    "git diff --output-indicator-new=+ HEAD",
    "git grep -n foo",
    "echo $((1+2)) $(( 16#ff ))",
    "echo hi >&2",
    "bash -c 'git status'",
    "env -i PATH=/usr/bin ls",
    "trap - EXIT",
    "declare -p HOME",
    "mktemp -d",
    "gzip -dc a.gz",
    "strace -f -o /tmp/s.log ls",
    "time python -m pytest -q",
    "git stash show -p stash@{0}",
    "echo 'a{b,c}'",
]


def _decide(tmp_path: Path, command: str) -> tuple[str, str]:
    policy = PermissionPolicy("bypassPermissions", (), tmp_path).read_only()
    decision = policy.decide(PermissionRequest("Bash", "execute", command, tmp_path))
    return decision.behavior, decision.reason


@pytest.mark.parametrize(
    "command",
    HEREDOC_WRITES
    + SED_WRITES
    + CP_LINKS
    + HIDDEN_WRITES
    + GIT_WRITES
    + PACKAGE_WRITES
    + PROBED_WRITES,
)
def test_writes_behind_heredocs_quotes_comments_and_option_clusters_are_refused(
    tmp_path: Path, command: str
) -> None:
    behavior, reason = _decide(tmp_path, command)
    assert behavior == "deny", reason
    assert "read-only" in reason


@pytest.mark.parametrize(
    "command",
    HEREDOC_READS
    + SED_READS
    + CP_COPIES
    + HIDDEN_READS
    + PLAIN_READS
    + PACKAGE_READS
    + PROBED_READS,
)
def test_heredoc_bodies_comments_and_scripts_are_not_taken_for_commands(
    tmp_path: Path, command: str
) -> None:
    behavior, reason = _decide(tmp_path, command)
    assert behavior == "allow", reason


def test_the_refusals_say_what_was_seen(tmp_path: Path) -> None:
    assert "rm -rf src" in _decide(tmp_path, "cat <<\\EOF\nhi\nEOF\nrm -rf src")[1]
    assert "sed -i" in _decide(tmp_path, "sed -ri s/a/b/ f")[1]
    assert "cp making links" in _decide(tmp_path, "cp -al src /tmp/q/")[1]
    assert "known only when the command runs" in _decide(tmp_path, "$(echo rm) f")[1]
    # A verifier that wrote "$PYTHON" is told what it can run instead.
    assert ".venv/bin/python -m pytest" in _decide(tmp_path, '"$PYTHON" -m pytest')[1]
    assert "on its input" in _decide(tmp_path, "bash /dev/stdin <<< 'rm f'")[1]
    assert "lock file .lock" in _decide(tmp_path, "flock .lock pytest")[1]
    assert "records the session in typescript" in _decide(tmp_path, "script -c 'pytest'")[1]
    assert "brace expansion '{rm,victim}'" in _decide(tmp_path, "{rm,victim}")[1]
    assert "git bugreport, which is not known to only read" in _decide(tmp_path, "git bugreport")[1]
    assert "it sets GIT_EXTERNAL_DIFF" in _decide(tmp_path, "declare -x GIT_EXTERNAL_DIFF=rm")[1]
    assert "right after ')'" in _decide(tmp_path, "echo $(true)#; rm victim")[1]
