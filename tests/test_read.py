"""Read as models know it: its bounds, relative paths, images and PDFs (the tool itself)."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest

from read_files import gif_header, jpeg_header, pdf, png, webp_header
from taskloom import messages
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tools.base import Tool, ToolContext, ToolResult
from taskloom.tools.edit import Edit
from taskloom.tools.inputs.read import ReadInput
from taskloom.tools.read import Read
from taskloom.tools.write import Write

CAP_CHARS = 25_000 * 4  # the default cap, 25,000 tokens, at 4 characters a token


@pytest.fixture(autouse=True)
def _no_cap_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLAUDE_CODE_FILE_READ_MAX_OUTPUT_TOKENS", raising=False)


async def run(tool: Tool[Any], ctx: ToolContext, **raw: Any) -> ToolResult:
    params = tool.validate(raw)
    assert not isinstance(params, ToolResult), params.content
    return await tool.call(params, ctx)


def numbered(content: str) -> list[tuple[int, str]]:
    """The ``cat -n`` lines of a result, without its reminder."""
    body = content.split("\n\n<system-reminder>")[0]
    return [(int(n), text) for n, text in (line.split("\t", 1) for line in body.split("\n"))]


def next_offset(content: str) -> int | None:
    found = re.search(r"call Read with offset=(\d+)\.", content)
    return int(found.group(1)) if found else None


# --- bounds -----------------------------------------------------------------------------------


async def test_a_file_over_256kb_without_offset_or_limit_is_refused(ctx: ToolContext) -> None:
    path = ctx.cwd / "data.csv"
    path.write_bytes(b"a,b,c\n" + b"1," * 40 + b"\n" + b"x" * (300 * 1024 - 88) + b"\n")
    assert path.stat().st_size == 300 * 1024
    result = await run(Read(), ctx, file_path=str(path))
    assert result.is_error
    assert result.content == (
        "<tool_use_error>File content (300KB) exceeds maximum allowed size (256KB). Please use "
        "offset and limit parameters to read specific portions of the file, or use the Grep "
        "tool to search for specific content.</tool_use_error>"
    )
    assert str(path) not in ctx.files.seen
    # With offset or limit it is read, within the output cap.
    for paged in ({"offset": 1}, {"limit": 2}):
        result = await run(Read(), ctx, file_path=str(path), **paged)
        assert not result.is_error and result.content.startswith("     1\ta,b,c\n")
        assert len(result.content) <= CAP_CHARS


async def test_a_225kb_file_is_capped_and_paging_on_continues_where_it_stopped(
    ctx: ToolContext,
) -> None:
    path = ctx.cwd / "big.txt"
    lines = [f"row {i:05d} " + "abcdefghij" * 13 + "abcdefghi" for i in range(1, 1537)]
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size == 225 * 1024  # under the size bound, over the token cap
    first = await run(Read(), ctx, file_path=str(path))
    assert not first.is_error and len(first.content) <= CAP_CHARS
    offset = next_offset(first.content)
    assert offset is not None and 1 < offset < len(lines)
    assert f"Showing lines 1-{offset - 1} of {len(lines)}" in first.content
    assert "capped at about 25,000 tokens" in first.content
    assert first.data is not None and first.data["nextOffset"] == offset
    # Reading on from each named offset shows every line once, in order, whole.
    seen = numbered(first.content)
    result = first
    while (offset := next_offset(result.content)) is not None:
        result = await run(Read(), ctx, file_path=str(path), offset=offset)
        assert len(result.content) <= CAP_CHARS
        page = numbered(result.content)
        assert page[0][0] == offset == seen[-1][0] + 1
        seen += page
    assert seen == list(enumerate(lines, 1))
    assert f"of {len(lines)}" in result.content  # the last page says where it is


async def test_the_cap_comes_from_the_setting_or_the_environment(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = ctx.cwd / "f.txt"
    path.write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    whole = await run(Read(), ctx, file_path=str(path))
    assert next_offset(whole.content) is None and len(numbered(whole.content)) == 1000
    ctx.settings["readMaxTokens"] = 1000
    by_setting = await run(Read(), ctx, file_path=str(path))
    assert len(by_setting.content) <= 4000 and "capped at about 1,000 tokens" in by_setting.content
    monkeypatch.setenv("CLAUDE_CODE_FILE_READ_MAX_OUTPUT_TOKENS", "2000")  # wins
    by_env = await run(Read(), ctx, file_path=str(path))
    assert 4000 < len(by_env.content) <= 8000 and "about 2,000 tokens" in by_env.content
    monkeypatch.setenv("CLAUDE_CODE_FILE_READ_MAX_OUTPUT_TOKENS", "lots")
    bad = await run(Read(), ctx, file_path=str(path))
    assert bad.is_error and "CLAUDE_CODE_FILE_READ_MAX_OUTPUT_TOKENS" in bad.content
    assert "'lots'" in bad.content
    monkeypatch.delenv("CLAUDE_CODE_FILE_READ_MAX_OUTPUT_TOKENS")
    ctx.settings["readMaxTokens"] = 0
    zero = await run(Read(), ctx, file_path=str(path))
    assert zero.is_error and "the setting readMaxTokens" in zero.content


async def test_long_lines_are_whole_and_only_a_line_over_the_cap_is_cut(ctx: ToolContext) -> None:
    path = ctx.cwd / "min.js"
    long_line = "x" * 10_000
    huge = "y" * 150_000
    path.write_text(f"head\n{long_line}\n{huge}\nend\n")
    first = await run(Read(), ctx, file_path=str(path))
    assert numbered(first.content) == [(1, "head"), (2, long_line)]  # whole: no 2,000 cut
    assert next_offset(first.content) == 3
    cut = await run(Read(), ctx, file_path=str(path), offset=3)
    ((number, shown),) = numbered(cut.content)
    assert number == 3 and huge.startswith(shown) and 90_000 < len(shown) < 100_000
    assert len(cut.content) <= CAP_CHARS
    assert "Line 3 (150,000 characters) is longer than the cap by itself and is cut" in cut.content
    assert next_offset(cut.content) == 4
    last = await run(Read(), ctx, file_path=str(path), offset=4)
    assert numbered(last.content) == [(4, "end")]
    # A line too long even to be held (over the bytes the cap can take) is cut the same way.
    path.write_bytes(b"z" * 1_000_000)
    cut = await run(Read(), ctx, file_path=str(path), offset=1)
    assert "Line 1 (1,000,000 bytes) is longer than the cap" in cut.content
    assert len(cut.content) <= CAP_CHARS and next_offset(cut.content) is None


# --- relative paths ---------------------------------------------------------------------------


async def test_relative_paths_resolve_against_the_working_directory(ctx: ToolContext) -> None:
    created = await run(Write(), ctx, file_path="new/b.txt", content="b\n")
    assert not created.is_error and (ctx.cwd / "new" / "b.txt").read_text() == "b\n"
    assert str(ctx.cwd / "new" / "b.txt") in created.content
    # Relative to the agent's working directory of the moment, not the process's.
    ctx.cwd = ctx.cwd / "new"
    again = await run(Read(), ctx, file_path="b.txt")
    assert not again.is_error and again.content == "     1\tb"
    changed = await run(Edit(), ctx, file_path="./b.txt", old_string="b", new_string="c")
    assert not changed.is_error and (ctx.cwd / "b.txt").read_text() == "c\n"
    assert Read().permission_target(ReadInput(file_path="../new/b.txt"), ctx) == str(
        ctx.cwd / "b.txt"
    )


async def test_permission_rules_match_the_resolved_path_of_a_relative_one(tmp_path: Path) -> None:
    from taskloom.engine import Engine, EngineConfig, ToolDone
    from taskloom.permissions import PermissionPolicy
    from taskloom.permissions.rules import parse_rule
    from taskloom.testing import ScriptedModel, ToolCall, Turn

    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key").write_text("TOPSECRET\n")
    (tmp_path / "notes.txt").write_text("public\n")
    rules = [
        parse_rule("Read(./secrets/**)", "deny", "test"),
        parse_rule("Edit(./secrets/**)", "deny", "test"),
    ]
    calls = (
        ToolCall("Read", {"file_path": "notes.txt"}),
        ToolCall("Read", {"file_path": "secrets/../secrets/key"}),
        ToolCall("Write", {"file_path": "secrets/new", "content": "x"}),
    )
    model = ScriptedModel([Turn(tool_calls=calls), "done"])
    async with TaskRuntime() as rt:
        config = EngineConfig(
            model=model,
            system_prompt="",
            tools=[Read(), Write()],
            owner=rt.session_id,
            cwd=tmp_path,
            permissions=PermissionPolicy("acceptEdits", rules, tmp_path),
        )
        events = [e async for e in Engine(config, rt).run("go")]
    notes, key, new = [e.result for e in events if isinstance(e, ToolDone)]
    assert not notes.is_error and "public" in notes.content
    assert key.is_error and "TOPSECRET" not in key.content
    assert new.is_error and not (tmp_path / "secrets" / "new").exists()


# --- images -----------------------------------------------------------------------------------


async def test_a_png_is_returned_as_an_image_block(ctx: ToolContext) -> None:
    data = png(64, 48)
    (ctx.cwd / "shot.png").write_bytes(data)
    result = await run(Read(), ctx, file_path="shot.png")
    assert not result.is_error
    path = str(ctx.cwd / "shot.png")
    assert result.content == f"Image 64x48 png, {len(data)} bytes: {path}"
    assert result.blocks is not None
    (image,) = result.blocks
    assert isinstance(image, messages.ImageBlock)
    assert image.dump() == {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(data).decode(),
        },
    }
    assert result.data == {
        "type": "image",
        "filePath": path,
        "mediaType": "image/png",
        "bytes": len(data),
        "width": 64,
        "height": 48,
    }
    assert path in ctx.files.seen


@pytest.mark.parametrize(
    ("name", "data", "kind", "size"),
    [
        ("photo.jpg", jpeg_header(1024, 768), "jpeg", "1024x768"),
        ("anim.gif", gif_header(320, 200), "gif", "320x200"),
        ("a.webp", webp_header(800, 600, "VP8X"), "webp", "800x600"),
        ("b.webp", webp_header(300, 7000, "VP8L"), "webp", "300x7000"),
        ("c.webp", webp_header(640, 480, "VP8 "), "webp", "640x480"),
        # The first bytes decide, not the name.
        ("screenshot.dat", png(10, 20), "png", "10x20"),
    ],
)
async def test_image_formats_and_dimensions_come_from_the_header(
    ctx: ToolContext, name: str, data: bytes, kind: str, size: str
) -> None:
    (ctx.cwd / name).write_bytes(data)
    result = await run(Read(), ctx, file_path=name)
    assert result.content.startswith(f"Image {size} {kind}, "), result.content
    assert result.blocks is not None and isinstance(result.blocks[0], messages.ImageBlock)
    assert result.blocks[0].source.dump()["media_type"] == f"image/{kind}"


async def test_images_the_api_would_refuse_are_refused_with_the_reason(ctx: ToolContext) -> None:
    big = png(16, 16)
    big += b"\0" * (4 * 1024 * 1024 - len(big))  # 4 MB: over 5 MB in base64
    (ctx.cwd / "big.png").write_bytes(big)
    result = await run(Read(), ctx, file_path="big.png")
    assert result.is_error and result.blocks is None
    assert "4.0 MB (5.3 MB in base64), over the 5.0 MB the API takes" in result.content
    (ctx.cwd / "wide.gif").write_bytes(gif_header(9000, 10))
    wide = await run(Read(), ctx, file_path="wide.gif")
    assert wide.is_error and "9000x10 pixels" in wide.content and "8000" in wide.content
    (ctx.cwd / "torn.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    torn = await run(Read(), ctx, file_path="torn.png")
    assert torn.is_error and "header is unreadable" in torn.content
    (ctx.cwd / "fake.png").write_bytes(b"\0\x01garbage")
    fake = await run(Read(), ctx, file_path="fake.png")
    assert fake.is_error and "named like a png image but is not one" in fake.content
    assert not ctx.files.seen


# --- PDFs -------------------------------------------------------------------------------------


async def test_a_pdfs_pages_come_back_as_text(ctx: ToolContext) -> None:
    (ctx.cwd / "doc.pdf").write_bytes(pdf(["Alpha page", None, "Gamma page"]))
    whole = await run(Read(), ctx, file_path="doc.pdf")
    assert not whole.is_error
    assert whole.content == (
        "--- Page 1 of 3 ---\nAlpha page\n\n"
        "--- Page 2 of 3 ---\n(page 2 has no text; it may be a scanned image)\n\n"
        "--- Page 3 of 3 ---\nGamma page"
    )
    assert whole.data is not None and whole.data["pages"] == [1, 2, 3]
    third = await run(Read(), ctx, file_path="doc.pdf", pages="3")
    assert third.content == "--- Page 3 of 3 ---\nGamma page"
    some = await run(Read(), ctx, file_path="doc.pdf", pages=" 3, 1 ")
    assert [int(n) for n in re.findall(r"Page (\d) of", some.content)] == [3, 1]


async def test_a_long_pdf_needs_pages_and_pages_are_checked(ctx: ToolContext) -> None:
    (ctx.cwd / "long.pdf").write_bytes(pdf([f"Text of page {n}" for n in range(1, 12)]))
    refused = await run(Read(), ctx, file_path="long.pdf")
    assert refused.is_error and "This PDF has 11 pages" in refused.content
    assert 'pages="1-5"' in refused.content and "at most 20 pages a call" in refused.content
    picked = await run(Read(), ctx, file_path="long.pdf", pages="2,4-5,11")
    assert re.findall(r"Text of page (\d+)", picked.content) == ["2", "4", "5", "11"]
    for spec, said in [
        ("0", "not a range of pages"),
        ("5-3", "not a range of pages"),
        ("first", 'like "3", "1-5" or "2,4-6"'),
        ("1-21", "more than 20 pages"),
        ("1-1000000000", "more than 20 pages"),
        ("12", "page 12 is past the end; the PDF has 11"),
    ]:
        bad = await run(Read(), ctx, file_path="long.pdf", pages=spec)
        assert bad.is_error and said in bad.content, (spec, bad.content)
    offset = await run(Read(), ctx, file_path="long.pdf", offset=3)
    assert offset.is_error and "give pages for a PDF" in offset.content
    (ctx.cwd / "t.txt").write_text("text\n")
    not_pdf = await run(Read(), ctx, file_path="t.txt", pages="1")
    assert not_pdf.is_error and "pages is for PDF files only" in not_pdf.content
    (ctx.cwd / "broken.pdf").write_bytes(b"%PDF-1.4\nnothing else")
    broken = await run(Read(), ctx, file_path="broken.pdf")
    assert broken.is_error and "is not a PDF Read can open" in broken.content
    (ctx.cwd / "notes.pdf").write_text("plain text, named .pdf\n")
    text = await run(Read(), ctx, file_path="notes.pdf")
    assert text.content == "     1\tplain text, named .pdf"
    (ctx.cwd / "report.bin").write_bytes(pdf(["Named otherwise"]))
    by_header = await run(Read(), ctx, file_path="report.bin")
    assert by_header.content == "--- Page 1 of 1 ---\nNamed otherwise"


async def test_pdf_text_is_bounded_by_the_same_cap(ctx: ToolContext) -> None:
    words = " ".join(f"word{i}" for i in range(300))  # about 2,300 characters a page
    (ctx.cwd / "p.pdf").write_bytes(pdf([words] * 4))
    ctx.settings["readMaxTokens"] = 1500  # 6,000 characters: two pages
    first = await run(Read(), ctx, file_path="p.pdf")
    assert first.content.count("--- Page") == 2 and len(first.content) <= 6000
    assert 'to read on, call Read with pages="3-4"' in first.content
    ctx.settings["readMaxTokens"] = 300  # smaller than one page: that page is cut
    cut = await run(Read(), ctx, file_path="p.pdf", pages="2-3")
    assert cut.content.count("--- Page") == 1 and len(cut.content) <= 1200
    assert "Page 2's text is longer than the output cap and was cut" in cut.content
    assert 'pages="3"' in cut.content
