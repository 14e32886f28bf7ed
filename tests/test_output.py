"""Task output files: private, exclusive, symlink-proof, capped, delta reads."""

from __future__ import annotations

import os
import stat
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskloom.errors import OutputError
from taskloom.settings import DEFAULT_OUTPUT_CAP_BYTES, tasks_dir
from taskloom.tasks.output import (
    DiskTaskOutput,
    human_size,
    output_path,
    read_delta,
    read_tail,
    truncation_line,
)

TRUNC_1K = b"\n[output truncated: exceeded 1KB disk cap]\n"


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """A permissive umask, so that private modes must come from the code, not the environment."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def snapshot(path: Path) -> tuple[bytes, int, int]:
    st = os.stat(path)
    return path.read_bytes(), st.st_mtime_ns, st.st_size


# -- creation ---------------------------------------------------------------------------------


def test_creates_private_dir_and_file(home: Path, loose_umask: None) -> None:
    with DiskTaskOutput.for_task("s1", "b12345678") as out:
        assert out.path == home / "sessions" / "s1" / "tasks" / "b12345678.output"
        assert out.path == output_path("s1", "b12345678")
        assert out.path.is_file()
        assert mode(out.path.parent) == 0o700
        assert mode(out.path) == 0o600
        assert out.size() == 0
        assert not out.capped


def test_tightens_existing_loose_tasks_dir(home: Path, loose_umask: None) -> None:
    directory = tasks_dir("s1")
    directory.mkdir(parents=True)
    directory.chmod(0o755)
    with DiskTaskOutput.for_task("s1", "b12345678"):
        pass
    assert mode(directory) == 0o700


def test_every_directory_it_creates_is_private(home: Path, loose_umask: None) -> None:
    assert not home.exists()
    with DiskTaskOutput.for_task("s1", "b12345678") as out:
        created = [home, home / "sessions", home / "sessions" / "s1", out.path.parent]
    assert {str(d): oct(mode(d)) for d in created} == {str(d): oct(0o700) for d in created}


def test_second_output_on_same_path_is_refused() -> None:
    with DiskTaskOutput.for_task("s1", "a12345678") as first:
        first.append(b"first writer\n")
        with pytest.raises(OutputError):
            DiskTaskOutput(first.path)
        first.append(b"still mine\n")
        assert first.path.read_bytes() == b"first writer\nstill mine\n"


def test_planted_symlink_at_output_path_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_bytes(b"precious data\n")
    os.utime(target, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    before = snapshot(target)

    path = output_path("s1", "b12345678")
    path.parent.mkdir(parents=True, mode=0o700)
    path.symlink_to(target)

    with pytest.raises(OutputError):
        DiskTaskOutput(path)

    assert snapshot(target) == before
    assert path.is_symlink()
    assert os.readlink(path) == str(target)


def test_dangling_symlink_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    target = tmp_path / "would-be-created.txt"
    path = output_path("s1", "b12345678")
    path.parent.mkdir(parents=True, mode=0o700)
    path.symlink_to(target)
    with pytest.raises(OutputError):
        DiskTaskOutput(path)
    assert not target.exists()


def _plant_tasks_dir_symlink(tmp_path: Path) -> tuple[Path, Path]:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    elsewhere.chmod(0o755)
    directory = tasks_dir("s1")
    directory.parent.mkdir(parents=True)
    directory.symlink_to(elsewhere, target_is_directory=True)
    return directory, elsewhere


def test_symlinked_tasks_dir_is_refused(tmp_path: Path) -> None:
    directory, elsewhere = _plant_tasks_dir_symlink(tmp_path)
    with pytest.raises(OutputError):
        DiskTaskOutput.for_task("s1", "b12345678")
    assert list(elsewhere.iterdir()) == []
    assert directory.is_symlink()


def test_symlinked_tasks_dir_target_is_left_untouched(tmp_path: Path) -> None:
    _, elsewhere = _plant_tasks_dir_symlink(tmp_path)
    with pytest.raises(OutputError):
        DiskTaskOutput.for_task("s1", "b12345678")
    assert oct(mode(elsewhere)) == oct(0o755)


def test_reading_through_a_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_bytes(b"secret")
    link = tmp_path / "link.output"
    link.symlink_to(target)
    with pytest.raises(OutputError):
        read_delta(link, 0)
    with pytest.raises(OutputError):
        read_tail(link, 10)


# -- cap ----------------------------------------------------------------------------------------


def test_default_cap_is_5_gib() -> None:
    assert DEFAULT_OUTPUT_CAP_BYTES == 5 * 1024**3
    with DiskTaskOutput.for_task("s1", "b00000000") as out:
        assert out.cap == DEFAULT_OUTPUT_CAP_BYTES


def test_append_past_cap_writes_one_truncation_line_and_drops_the_rest() -> None:
    with DiskTaskOutput.for_task("s1", "b12345678", cap=1024) as out:
        first = bytes(range(256)) * 3 + b"x" * 232  # 1000 bytes
        second = b"y" * 100
        out.append(first)
        assert not out.capped
        out.append(second)
        assert out.capped
        expected = first + second[:24] + TRUNC_1K
        assert out.path.read_bytes() == expected
        size = out.size()
        assert size == 1024 + len(TRUNC_1K)
        for chunk in (b"z" * 10, b"", "more text", b"w" * 5000):
            out.append(chunk)
            assert out.size() == size
        data = out.path.read_bytes()
    assert data == expected
    assert data.count(b"[output truncated") == 1


def test_append_exactly_to_cap_then_more() -> None:
    with DiskTaskOutput.for_task("s1", "b12345678", cap=1024) as out:
        out.append(b"a" * 1024)
        assert not out.capped
        assert out.path.read_bytes() == b"a" * 1024
        out.append(b"b")
        assert out.capped
        assert out.path.read_bytes() == b"a" * 1024 + TRUNC_1K


def test_append_str_is_utf8() -> None:
    with DiskTaskOutput.for_task("s1", "b12345678") as out:
        out.append("héllo ✓\n")
        assert out.path.read_bytes() == "héllo ✓\n".encode()


def test_enforce_cap_on_file_grown_through_fd() -> None:
    with DiskTaskOutput.for_task("s1", "b12345678", cap=1024) as out:
        payload = bytes(i % 251 for i in range(3000))
        os.write(out.fd, payload[:1000])
        assert out.enforce_cap() is False
        assert out.path.read_bytes() == payload[:1000]
        os.write(out.fd, payload[1000:])
        assert out.size() == 3000
        assert out.enforce_cap() is True
        assert out.capped
        expected = payload[:1024] + TRUNC_1K
        assert out.path.read_bytes() == expected
        assert out.enforce_cap() is True
        out.append(b"dropped")
        assert out.path.read_bytes() == expected


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0B"),
        (1, "1B"),
        (1000, "1000B"),
        (1024, "1KB"),
        (1536, "1536B"),
        (2048, "2KB"),
        (1024**2, "1MB"),
        (3 * 1024**2, "3MB"),
        (1024**3, "1GB"),
        (5 * 1024**3, "5GB"),
        (1024**3 + 1024, "1048577KB"),
    ],
)
def test_human_size(n: int, text: str) -> None:
    assert human_size(n) == text


def test_truncation_line_names_the_cap() -> None:
    assert truncation_line(1024) == TRUNC_1K
    assert truncation_line(5 * 1024**3) == b"\n[output truncated: exceeded 5GB disk cap]\n"


# -- reads --------------------------------------------------------------------------------------


def test_read_delta_from_start_middle_and_bounded() -> None:
    data = b"".join(f"line {i}\n".encode() for i in range(100))
    with DiskTaskOutput.for_task("s1", "b12345678") as out:
        out.append(data)
        path = out.path
    assert read_delta(path, 0) == (data, len(data))
    assert read_delta(path, 50) == (data[50:], len(data))
    assert read_delta(path, 50, max_bytes=10) == (data[50:60], 60)
    assert read_delta(path, len(data)) == (b"", len(data))
    assert read_delta(str(path), 0, max_bytes=7) == (data[:7], 7)


def test_readers_never_consume_each_others_data() -> None:
    with DiskTaskOutput.for_task("s1", "b12345678") as out:
        path = out.path
        seen_a: list[bytes] = []
        seen_b: list[bytes] = []
        off_a = off_b = 0
        written = b""
        for i in range(20):
            chunk = f"chunk-{i:02d};".encode()
            out.append(chunk)
            written += chunk
            got, off_a = read_delta(path, off_a, max_bytes=5)  # A reads slowly, every time
            seen_a.append(got)
            if i % 3 == 0:  # B reads rarely, everything at once
                got, off_b = read_delta(path, off_b)
                seen_b.append(got)
        while True:
            got, off_a = read_delta(path, off_a, max_bytes=5)
            if not got:
                break
            seen_a.append(got)
        got, off_b = read_delta(path, off_b)
        seen_b.append(got)
    assert b"".join(seen_a) == written
    assert b"".join(seen_b) == written
    assert off_a == off_b == len(written)


def test_read_tail() -> None:
    data = bytes(range(200))
    with DiskTaskOutput.for_task("s1", "b12345678") as out:
        out.append(data)
        path = out.path
    assert read_tail(path, 10) == data[-10:]
    assert read_tail(path, 200) == data
    assert read_tail(path, 10_000) == data
    assert read_tail(path, 0) == b""


def test_missing_file_reads_empty(tmp_path: Path) -> None:
    missing = tmp_path / "nope.output"
    assert read_delta(missing, 0) == (b"", 0)
    assert read_delta(missing, 123) == (b"", 123)
    assert read_tail(missing, 100) == b""


# -- memory -------------------------------------------------------------------------------------


def test_fast_producer_keeps_memory_bounded() -> None:
    chunk = os.urandom(64 * 1024)
    total = 64 * 1024 * 1024
    with DiskTaskOutput.for_task("s1", "b12345678") as out:
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            for _ in range(total // len(chunk)):
                out.append(chunk)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert out.size() == total
        assert read_tail(out.path, len(chunk)) == chunk
    assert peak < 2 * 1024 * 1024, f"peak traced memory {peak} bytes"
