"""The test-wide guards of conftest.py, on small suites of their own run by a real pytest.

Each inner run gets a copy of this directory's conftest and helpers, and a run mark and a
temporary directory of its own (none inherited from this run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import RUN_MARK, TIME_FACTOR, clean_env

# It starts pytest, whose tests start taskloom: a whole run, not the inner loop's business.
pytestmark = pytest.mark.e2e

HERE = Path(__file__).parent

INI = """[pytest]
addopts = -p no:cacheprovider
markers =
    e2e: end-to-end
"""


def _run(tmp_path: Path, files: dict[str, str], *args: str) -> tuple[str, int]:
    """Run pytest on ``files`` (name to source) beside copies of our conftest and helpers."""
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("conftest.py", "helpers.py", "tmux_driver.py"):
        shutil.copy(HERE / name, suite / name)
    (suite / "pytest.ini").write_text(INI)
    for name, source in files.items():
        (suite / name).write_text(source)
    env = clean_env()
    for own in (RUN_MARK, "TASKLOOM_TEST_TMP_ROOT", "TASKLOOM_TEST_PYCACHE"):
        env.pop(own, None)
    env["TMPDIR"] = str(tmp_path)  # its run directories land in this test's, to be removed
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", *args],
        capture_output=True,
        text=True,
        timeout=120 * TIME_FACTOR,
        cwd=suite,
        env=env,
    )
    return proc.stdout + proc.stderr, proc.returncode


def _outcomes(output: str) -> dict[str, str]:
    """Test name to PASSED, FAILED or ERROR, from -rA's short summary."""
    found = {}
    for word, name in re.findall(r"^(PASSED|FAILED|ERROR) \S+::(\w+)", output, re.M):
        found[name] = "ERROR" if word == "ERROR" or found.get(name) == "ERROR" else word
    return found


LEAKS = """
import os, signal, subprocess, sys, tempfile


def test_leaves_a_process():
    subprocess.Popen(["sleep", "300"])


def test_after_the_process():
    pass


def test_leaves_a_temp_dir():
    tempfile.mkdtemp(prefix="left-")


def test_after_the_temp_dir():
    pass


def test_ends_as_its_child_cleans_up_after_term():
    # The child takes a second over its TERM cleanup: it is on its way out, not left behind.
    child = subprocess.Popen(
        ["bash", "-c", "trap 'sleep 1; exit 0' TERM; echo ready; while :; do sleep 0.05; done"],
        stdout=subprocess.PIPE,
    )
    assert child.stdout.readline() == b"ready\\n"
    child.send_signal(signal.SIGTERM)


def test_starts_taskloom_unmarked():
    subprocess.run([sys.executable, "-m", "taskloom", "--help"], capture_output=True)


def test_starts_taskloom_marked():
    pass
"""


def test_what_a_test_leaves_is_blamed_on_it_and_a_child_gets_its_term_grace(
    tmp_path: Path,
) -> None:
    source = LEAKS.replace(
        "def test_starts_taskloom_marked():\n    pass",
        "import pytest\n\n\n@pytest.mark.e2e\ndef test_starts_taskloom_marked():\n"
        '    subprocess.run([sys.executable, "-m", "taskloom", "--help"], capture_output=True)',
    )
    output, code = _run(tmp_path, {"test_leaks.py": source}, "-n", "0")
    assert code == 1, output
    assert _outcomes(output) == {
        "test_leaves_a_process": "ERROR",
        "test_after_the_process": "PASSED",
        "test_leaves_a_temp_dir": "ERROR",
        "test_after_the_temp_dir": "PASSED",
        "test_ends_as_its_child_cleans_up_after_term": "PASSED",
        "test_starts_taskloom_unmarked": "ERROR",
        "test_starts_taskloom_marked": "PASSED",
    }, output
    assert re.search(r"processes left running [\d.]+ s after the test: \['\d+ sleep 300'\]", output)
    assert re.search(r"temp entries left behind in \S+: \['left-\w+'\]", output), output
    assert "the test starts taskloom (" in output and "-m taskloom --help" in output, output
    assert "LEAK CHECK FAILED" not in output, output  # each was blamed on its test, and gone


# Two files, one a worker: each test's child lives while the other's test ends.
FIRST = """
import subprocess, time
from pathlib import Path


def test_first():
    child = subprocess.Popen(["sleep", "300"])
    Path("first_up").touch()
    deadline = time.monotonic() + 60
    while not Path("second_checked").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    child.kill()
    child.wait()
    assert Path("second_checked").exists(), "the other test never ended"
"""

SECOND = """
import subprocess, time
from pathlib import Path

import pytest


@pytest.fixture(scope="module", autouse=True)
def checked():
    yield  # torn down after the test's own checks
    Path("second_checked").touch()


def test_second():
    deadline = time.monotonic() + 60
    while not Path("first_up").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Path("first_up").exists(), "the other test never started"
"""


def test_xdist_workers_do_not_take_each_other_s_processes_for_leaks(tmp_path: Path) -> None:
    output, code = _run(
        tmp_path,
        {"test_first.py": FIRST, "test_second.py": SECOND},
        "-n",
        "2",
        "--dist",
        "loadfile",
    )
    assert code == 0, output
    assert _outcomes(output) == {"test_first": "PASSED", "test_second": "PASSED"}, output
    assert not [p for p in os.listdir(tmp_path) if p.startswith("taskloom-tests-")], output
