"""Clearing old tool results: stubs that say where the content is, nothing lost."""

from __future__ import annotations

import base64
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from taskloom.context import clearing
from taskloom.context.clearing import MIN_CLEAR_CHARS, STUB_PREFIX, Cleared, clear_old_results
from taskloom.context.window import IMAGE_TOKENS, estimate_tokens
from taskloom.engine import Engine, EngineConfig
from taskloom.messages import (
    Base64Source,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from taskloom.settings import taskloom_home
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools.bash import BashTool
from taskloom.tools.overflow import results_dir, save_text
from taskloom.tools.read import Read

BIG = "line of output\n" * 200  # 3,000 characters: over the floor


def _image() -> ImageBlock:
    data = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(64)).decode()
    return ImageBlock(source=Base64Source(media_type="image/png", data=data))


def call(tool_id: str, name: str, **given: Any) -> Message:
    return Message(role="assistant", content=[ToolUseBlock(id=tool_id, name=name, input=given)])


def result(tool_id: str, content: Any = BIG, *, is_error: bool = False) -> Message:
    block = ToolResultBlock(tool_use_id=tool_id, content=content, is_error=is_error)
    return Message(role="user", content=[block])


def results(messages: list[Message]) -> dict[str, ToolResultBlock]:
    return {b.tool_use_id: b for m in messages for b in m.content if isinstance(b, ToolResultBlock)}


def conversation() -> list[Message]:
    """A prompt, then three tool turns (Read, Bash, Grep) and a final answer."""
    return [
        Message.user("look around"),
        call("toolu_r", "Read", file_path="/src/app.py"),
        result("toolu_r"),
        call("toolu_b", "Bash", command="make test"),
        result("toolu_b"),
        call("toolu_g", "Grep", pattern="TODO"),
        result("toolu_g"),
        Message(role="assistant", content=[TextBlock(text="done")]),
    ]


def test_results_before_the_kept_turns_become_stubs(tmp_path: Path) -> None:
    messages = conversation()
    cleared = clear_old_results(messages, keep_turns=2, save_dir=tmp_path / "saved")
    found = results(cleared.messages)
    # The last two assistant turns are the Grep call and the answer: Grep's result is kept.
    assert cleared.count == 2
    assert found["toolu_r"].content == (
        f"{STUB_PREFIX}Read of /src/app.py; read the file again if needed]"
    )
    saved = tmp_path / "saved" / "toolu_b.txt"
    assert found["toolu_b"].content == (f"{STUB_PREFIX}the full output of Bash is in {saved}]")
    assert saved.read_text() == BIG
    assert found["toolu_g"].content == BIG


def test_the_saved_file_and_its_directory_are_private(tmp_path: Path) -> None:
    save_dir = tmp_path / "a" / "tool-results"
    clear_old_results(conversation(), keep_turns=0, save_dir=save_dir)
    assert stat.S_IMODE(os.stat(save_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o700
    for path in save_dir.iterdir():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(p.name for p in save_dir.iterdir()) == ["toolu_b.txt", "toolu_g.txt"]


def test_nothing_old_changes_nothing(tmp_path: Path) -> None:
    messages = conversation()
    for keep in (4, 5, 100):
        cleared = clear_old_results(messages, keep_turns=keep, save_dir=tmp_path)
        assert (cleared.count, cleared.tokens_freed) == (0, 0)
        assert all(a is b for a, b in zip(cleared.messages, messages, strict=True))
    assert list(tmp_path.iterdir()) == []
    assert clear_old_results([], keep_turns=0, save_dir=tmp_path) == Cleared([], 0, 0)


def test_keep_turns_zero_clears_every_old_enough_result(tmp_path: Path) -> None:
    cleared = clear_old_results(conversation(), keep_turns=0, save_dir=tmp_path)
    assert cleared.count == 3
    assert all(b.content.startswith(STUB_PREFIX) for b in results(cleared.messages).values())


def test_the_input_is_never_changed(tmp_path: Path) -> None:
    messages = conversation()
    before = [m.full() for m in messages]
    cleared = clear_old_results(messages, keep_turns=0, save_dir=tmp_path)
    assert [m.full() for m in messages] == before
    assert cleared.messages is not messages
    # Messages without a cleared result are passed on as they were; the others are copies.
    assert cleared.messages[1] is messages[1] and cleared.messages[2] is not messages[2]


def test_pairing_ids_and_flags_survive(tmp_path: Path) -> None:
    messages = conversation()
    messages[2].content.append(TextBlock(text="a note after the result"))
    cleared = clear_old_results(messages, keep_turns=0, save_dir=tmp_path)
    for before, after in zip(messages, cleared.messages, strict=True):
        assert before.role == after.role
        assert [type(b) for b in before.content] == [type(b) for b in after.content]
    for before_block, after_block in zip(
        results(messages).values(), results(cleared.messages).values(), strict=True
    ):
        assert (after_block.tool_use_id, after_block.is_error) == (
            before_block.tool_use_id,
            before_block.is_error,
        )
    assert cleared.messages[2].content[1] == TextBlock(text="a note after the result")


def test_small_error_and_stubbed_results_are_left(tmp_path: Path) -> None:
    messages = [
        call("t_small", "Bash", command="ls"),
        result("t_small", "x" * MIN_CLEAR_CHARS),
        call("t_err", "Bash", command="make"),
        result("t_err", BIG, is_error=True),
        call("t_stub", "Bash", command="cat log"),
        result("t_stub", f"{STUB_PREFIX}the full output of Bash is in /elsewhere.txt]"),
        Message(role="assistant", content=[TextBlock(text="done")]),
    ]
    cleared = clear_old_results(messages, keep_turns=0, save_dir=tmp_path)
    assert cleared.count == 0
    assert [m.full() for m in cleared.messages] == [m.full() for m in messages]
    assert list(tmp_path.iterdir()) == []


def test_just_over_the_floor_is_cleared(tmp_path: Path) -> None:
    messages = [call("t1", "Bash", command="ls"), result("t1", "x" * (MIN_CLEAR_CHARS + 1))]
    assert clear_old_results(messages, keep_turns=0, save_dir=tmp_path).count == 1


def test_images_are_dropped_and_the_stub_says_so(tmp_path: Path) -> None:
    messages = [
        call("t_pic", "Read", file_path="/img/shot.png"),
        result("t_pic", [_image()]),
        call("t_shot", "screenshot"),
        result("t_shot", [TextBlock(text="two views"), _image(), _image()]),
        call("t_bare", "camera"),
        result("t_bare", [_image()]),
        Message(role="assistant", content=[TextBlock(text="done")]),
    ]
    cleared = clear_old_results(messages, keep_turns=0, save_dir=tmp_path)
    found = results(cleared.messages)
    assert cleared.count == 3
    assert found["t_pic"].content == (
        f"{STUB_PREFIX}Read of /img/shot.png (1 image dropped); read the file again if needed]"
    )
    assert found["t_shot"].content == (
        f"{STUB_PREFIX}the full output of screenshot is in {tmp_path / 't_shot.txt'} "
        "(2 images dropped)]"
    )
    assert (tmp_path / "t_shot.txt").read_text() == "two views"
    assert found["t_bare"].content == f"{STUB_PREFIX}camera returned no text (1 image dropped)]"
    assert not any(isinstance(b, ImageBlock) for b in found["t_shot"].images())
    assert cleared.tokens_freed >= 4 * IMAGE_TOKENS - 200


def test_a_result_saved_by_the_overflow_rule_keeps_its_file(tmp_path: Path) -> None:
    overflow_dir = results_dir("sess1")
    shown = save_text("y" * 120_000, overflow_dir, "toolu_big")
    messages = [call("toolu_big", "mcp__db__dump"), result("toolu_big", shown)]
    save_dir = tmp_path / "clears"
    cleared = clear_old_results(messages, keep_turns=0, save_dir=save_dir)
    saved = overflow_dir / "toolu_big.txt"
    assert results(cleared.messages)["toolu_big"].content == (
        f"{STUB_PREFIX}the full output of mcp__db__dump is in {saved}]"
    )
    assert saved.read_text() == "y" * 120_000
    assert not save_dir.exists()  # nothing written: the whole output was already there
    assert overflow_dir.is_relative_to(taskloom_home())


def test_an_overflow_preview_with_lines_after_it_is_saved_whole(tmp_path: Path) -> None:
    shown = save_text("z" * 50_000, results_dir("sess1"), "toolu_grep")
    text = f"{shown}\nNo matches found"
    messages = [call("toolu_grep", "Bash", command="grep -r x ."), result("toolu_grep", text)]
    cleared = clear_old_results(messages, keep_turns=0, save_dir=tmp_path)
    mine = tmp_path / "toolu_grep.txt"
    assert results(cleared.messages)["toolu_grep"].content.endswith(f"is in {mine}]")
    assert mine.read_text() == text  # the note is kept, and the preview names the full file


def test_an_overflow_preview_whose_file_is_gone_is_left(tmp_path: Path) -> None:
    shown = save_text("q" * 50_000, results_dir("sess1"), "toolu_gone")
    (results_dir("sess1") / "toolu_gone.txt").unlink()
    messages = [call("toolu_gone", "Bash", command="big"), result("toolu_gone", shown)]
    cleared = clear_old_results(messages, keep_turns=0, save_dir=tmp_path)
    assert cleared.count == 0 and results(cleared.messages)["toolu_gone"].content == shown


def test_clearing_twice_changes_nothing_the_second_time(tmp_path: Path) -> None:
    once = clear_old_results(conversation(), keep_turns=0, save_dir=tmp_path)
    twice = clear_old_results(once.messages, keep_turns=0, save_dir=tmp_path)
    assert (twice.count, twice.tokens_freed) == (0, 0)
    assert [m.full() for m in twice.messages] == [m.full() for m in once.messages]


def test_clearing_the_same_history_again_reuses_its_files(tmp_path: Path) -> None:
    messages = conversation()
    first = clear_old_results(messages, keep_turns=0, save_dir=tmp_path)
    again = clear_old_results(messages, keep_turns=0, save_dir=tmp_path)
    assert [m.full() for m in again.messages] == [m.full() for m in first.messages]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toolu_b.txt", "toolu_g.txt"]


def test_another_result_under_a_taken_id_gets_a_file_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "toolu_b.txt").write_text("someone else's")
    cleared = clear_old_results(conversation(), keep_turns=0, save_dir=tmp_path)
    assert results(cleared.messages)["toolu_b"].content.endswith(f"{tmp_path / 'toolu_b-1.txt'}]")
    assert (tmp_path / "toolu_b.txt").read_text() == "someone else's"
    assert (tmp_path / "toolu_b-1.txt").read_text() == BIG


def test_a_result_without_its_call_is_still_saved(tmp_path: Path) -> None:
    messages = [result("orphan"), Message(role="assistant", content=[TextBlock(text="ok")])]
    cleared = clear_old_results(messages, keep_turns=1, save_dir=tmp_path)
    assert results(cleared.messages)["orphan"].content == (
        f"{STUB_PREFIX}the full output of a tool is in {tmp_path / 'orphan.txt'}]"
    )


def test_a_read_without_a_path_is_saved_like_any_other(tmp_path: Path) -> None:
    messages = [call("t1", "Read"), result("t1")]
    cleared = clear_old_results(messages, keep_turns=0, save_dir=tmp_path)
    assert results(cleared.messages)["t1"].content.endswith(f"Read is in {tmp_path / 't1.txt'}]")


def test_a_result_that_cannot_be_saved_stays_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(clearing, "_UNSAVABLE", set())
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    messages = conversation()
    with caplog.at_level(logging.WARNING):
        cleared = clear_old_results(messages, keep_turns=0, save_dir=blocked)
        clear_old_results(messages, keep_turns=0, save_dir=blocked)
    found = results(cleared.messages)
    assert cleared.count == 1  # the Read: its file is the copy
    assert found["toolu_b"].content == BIG and found["toolu_g"].content == BIG
    assert caplog.text.count("cannot be saved to") == 1 and str(blocked) in caplog.text


def test_tokens_freed_is_the_estimates_difference(tmp_path: Path) -> None:
    messages = conversation()
    cleared = clear_old_results(messages, keep_turns=0, save_dir=tmp_path)
    difference = estimate_tokens(messages) - estimate_tokens(cleared.messages)
    assert cleared.tokens_freed == pytest.approx(difference, rel=0.05)
    assert cleared.tokens_freed > 3 * (len(BIG) // 4) - 300


def test_negative_keep_turns_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_turns must be 0 or more, got -1"):
        clear_old_results(conversation(), keep_turns=-1, save_dir=tmp_path)


async def test_a_real_sessions_old_read_and_bash_results_are_cleared(tmp_path: Path) -> None:
    """Real Read and Bash results (one over Bash's inline limit) through the real engine."""
    source = tmp_path / "notes.txt"
    source.write_text("".join(f"note {i}\n" for i in range(400)))
    model = ScriptedModel(
        [
            Turn(tool_calls=(ToolCall("Read", {"file_path": str(source)}, id="toolu_read"),)),
            Turn(tool_calls=(ToolCall("Bash", {"command": "seq 1 20000"}, id="toolu_seq"),)),
            Turn(tool_calls=(ToolCall("Bash", {"command": "seq 1 400"}, id="toolu_short"),)),
            Turn(tool_calls=(ToolCall("Bash", {"command": "echo last"}, id="toolu_last"),)),
            "all read",
        ]
    )
    async with TaskRuntime() as rt:
        config = EngineConfig(
            model=model,
            system_prompt="test",
            tools=[Read(), BashTool()],
            owner=rt.session_id,
            cwd=tmp_path,
        )
        engine = Engine(config, rt)
        _ = [event async for event in engine.run("read and run")]
        save_dir = results_dir(rt.session_id, rt.home)
        cleared = clear_old_results(engine.messages, keep_turns=2, save_dir=save_dir)
    found = results(cleared.messages)
    assert found["toolu_read"].content == (
        f"{STUB_PREFIX}Read of {source}; read the file again if needed]"
    )
    # seq 1 20000 is over Bash's inline limit: saved by the overflow rule, that file is named.
    assert found["toolu_seq"].content == (
        f"{STUB_PREFIX}the full output of Bash is in {save_dir / 'toolu_seq.txt'}]"
    )
    assert (save_dir / "toolu_seq.txt").read_text().split() == [str(i) for i in range(1, 20001)]
    # seq 1 400 was shown whole: saved now, by clearing.
    assert found["toolu_short"].content.endswith(f"is in {save_dir / 'toolu_short.txt'}]")
    assert (save_dir / "toolu_short.txt").read_text().split() == [str(i) for i in range(1, 401)]
    assert found["toolu_last"].content == "last"
    assert cleared.count == 3
