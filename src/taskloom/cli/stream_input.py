"""The input of a stream-json session: stdin's lines, each checked before anything acts on it.

A line that cannot be taken never ends the session. Each is read in bounded pieces, decoded
as UTF-8, parsed as one JSON object no deeper than
:data:`~taskloom.untrusted.MAX_INPUT_DEPTH` levels (lone surrogates replaced, NaN refused),
and a ``user`` line's content is validated as a user message's. What fails is a
:class:`BadLine` whose message names what is wrong; the session reports it (an error reply to a
control request, else one line on stderr naming the line's number) and reads on.

Line numbers are stdin's: every line counts, the ``initialize`` request and blank lines too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from typing import Any, BinaryIO, get_args

from taskloom._dataclass import dataclass
from taskloom.cli.control import ControlChannel
from taskloom.errors import clipped
from taskloom.messages import (
    MAX_IMAGE_BASE64_BYTES,
    ImageMediaType,
    Message,
    MessageError,
    base64_image_problem,
)
from taskloom.untrusted import MAX_INPUT_DEPTH, clean_json, strict_loads

log = logging.getLogger(__name__)

#: Longest stdin line taken, in bytes. The largest prompt the API takes (a few images of up to
#: 5 MB each, base64) fits; a longer line is skipped without being held in memory whole.
MAX_LINE_BYTES = 8 * 1024 * 1024

#: How much of a line is read at a time while the rest of a line too long is skipped.
_CHUNK = 1024 * 1024

#: A ``\\u`` escape of a surrogate: only a line holding one can carry a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

#: How much of a line that cannot be read is kept, to find a control request's id in it.
_HEAD_BYTES = 64 * 1024

_CONTROL_REQUEST = re.compile(r'"type"\s*:\s*"control_request"')
_REQUEST_ID = re.compile(r'"request_id"\s*:\s*"([^"\\]{1,256})"')

#: The content blocks a user message may hold (the API refuses a tool call or thinking there),
#: and the fields each takes.
_USER_BLOCKS = ("text", "image", "tool_result")
_BLOCK_FIELDS = {
    "text": {"type", "text", "cache_control"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
    "image": {"type", "source", "cache_control"},
}
#: What a tool result's content list may hold.
_RESULT_BLOCKS = ("text", "image")
#: The fields of an image's source, by its type.
_SOURCE_FIELDS = {"base64": {"type", "media_type", "data"}, "url": {"type", "url"}}
_MEDIA_TYPES = get_args(ImageMediaType)


class BadLine(ValueError):
    """A stdin line that cannot be taken; its message says why (after "stdin line N")."""


@dataclass(frozen=True)
class InputLine:
    """One line of stdin.

    Attributes:
        number: Its line number on stdin (from 1).
        text: The line, decoded; None when it could not be read (see ``error``).
        error: Why it could not be read (too long, not UTF-8), if so.
        head: The start of a line that could not be read, decoded as far as it goes.
    """

    number: int
    text: str | None
    error: str | None = None
    head: str = ""


class LineReader:
    """stdin's lines, read on a thread and handed to the event loop as they come.

    A thread, not the loop's pipe transport: stdin may be a regular file or a terminal, which
    the transport refuses; and the loop never blocks on a line that is slow to arrive.

    Answers to our own requests go to ``channel`` as they arrive, not through the queue: they
    are awaited while the session is built too (by the program's MCP servers), when nothing
    reads the queue yet.
    """

    def __init__(self, stream: BinaryIO, channel: ControlChannel | None = None) -> None:
        """Start reading ``stream`` (bytes) in the background."""
        self._loop = asyncio.get_running_loop()
        #: The lines read, then None at the end of the input.
        self.lines: asyncio.Queue[InputLine | None] = asyncio.Queue()
        self._stream = stream
        self._channel = channel
        threading.Thread(target=self._read, name="taskloom-stdin", daemon=True).start()

    def _deliver(self, line: InputLine) -> None:
        if self._channel is not None and line.text and '"control_response"' in line.text:
            try:
                message = parse_line(line.text)
            except BadLine:
                pass  # reported in its turn, through the queue
            else:
                if message.get("type") == "control_response":
                    self._channel.resolve(message)  # a late answer is dropped
                    return
        self.lines.put_nowait(line)

    def _end(self) -> None:
        if self._channel is not None:  # no answer can come any more: those waiting fail now
            self._channel.close("the program closed its input; nobody can answer")
        self.lines.put_nowait(None)

    def _read(self) -> None:
        number = 0
        try:
            while raw := self._stream.readline(MAX_LINE_BYTES + 1):
                number += 1
                line = _decoded(number, raw)
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    line = InputLine(number, None, self._skip_rest(len(raw)), _head(raw))
                self._loop.call_soon_threadsafe(self._deliver, line)
        except RuntimeError:  # the loop is gone (a library session ended): nobody reads on
            return
        except (OSError, ValueError) as exc:  # closed under us: as the end of input
            log.debug("stdin: %s", exc)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                self._loop.call_soon_threadsafe(self._end)

    def _skip_rest(self, size: int) -> str:
        """Read past the rest of a line too long to take; why it is skipped."""
        while chunk := self._stream.readline(_CHUNK):
            size += len(chunk)
            if chunk.endswith(b"\n"):
                break
        return f"is {size:,} bytes long, over the limit of {MAX_LINE_BYTES:,} bytes a line"


def _decoded(number: int, raw: bytes) -> InputLine:
    try:
        return InputLine(number, raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        why = f"is not UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start})"
        return InputLine(number, None, why, _head(raw))


def _head(raw: bytes) -> str:
    return raw[:_HEAD_BYTES].decode("utf-8", "replace")


def request_id_in(line: InputLine) -> str | None:
    """The id of the control request a line that could not be taken seems to carry, if any.

    Such a request is answered with an error (its program waits for an answer), though the
    line itself could not be parsed: it is looked for in the raw text. Quotes inside a JSON
    string are escaped, so text a prompt quotes does not match.
    """
    text = line.text if line.text is not None else line.head
    if not _CONTROL_REQUEST.search(text):
        return None
    found = _REQUEST_ID.search(text)
    return found.group(1) if found else None


def parse_line(text: str) -> dict[str, Any]:
    """The JSON object a line holds, made safe to act on.

    Raises:
        BadLine: It is not JSON, not an object, or nested too deeply.
    """
    try:
        value = strict_loads(text)
    except RecursionError:
        raise BadLine(f"is nested more than {MAX_INPUT_DEPTH} levels deep") from None
    except ValueError as exc:
        raise BadLine(f"is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BadLine(f"is not a JSON object but {_kind(value)}")
    # Walking the whole value costs time on a large line; only a line with many brackets can
    # be too deep, and only one with a surrogate escape can hold a lone surrogate.
    if text.count("{") + text.count("[") > MAX_INPUT_DEPTH or _SURROGATE_ESCAPE.search(text):
        try:
            value, _ = clean_json(value)
        except ValueError as exc:
            raise BadLine(f"is {exc}") from None
    return value  # type: ignore[no-any-return]


def user_prompt(message: dict[str, Any]) -> str | Message:
    """The prompt a ``user`` line carries: its text, or its content blocks as a message.

    Raises:
        BadLine: No content, or content that is not a valid user message's.
    """
    inner = message.get("message")
    content = inner.get("content") if isinstance(inner, dict) else None
    if isinstance(content, str):
        if not content.strip():
            raise BadLine("a user message needs content (message.content is empty)")
        return content
    if not isinstance(content, list) or not content:
        raise BadLine("a user message needs content (message.content: a string or blocks)")
    for i, block in enumerate(content):
        _check_block(f"message.content[{i}]", block)
    try:
        return Message.from_dict({"role": "user", "content": content})
    except MessageError as exc:
        where, problem = exc.errors[0]
        more = f" (and {len(exc.errors) - 1} more)" if len(exc.errors) > 1 else ""
        raise BadLine(f"message.{where}: {problem}{more}") from None


def _check_block(where: str, block: Any, kinds: tuple[str, ...] = _USER_BLOCKS) -> None:
    """Refuse a content block the API would refuse, in this request and every later one.

    That is a block of another type, a field its type does not take, or blank text.

    Raises:
        BadLine: Naming the block and what is wrong with it.
    """
    kind = block.get("type") if isinstance(block, dict) else None
    if kind not in kinds:
        allowed = " or ".join(kinds)
        raise BadLine(f"{where}: a user message's blocks are {allowed}, not {kind!r}")
    extra = sorted(set(block) - _BLOCK_FIELDS[kind])
    if extra:
        raise BadLine(f"{where}: a {kind} block takes no field {clipped(str(extra[0]))!r}")
    control = block.get("cache_control")
    if control is not None and not (
        isinstance(control, dict)
        and control.get("type") == "ephemeral"
        and set(control) <= {"type", "ttl"}
        and control.get("ttl", "5m") in ("5m", "1h")
    ):
        raise BadLine(f'{where}.cache_control: must be {{"type": "ephemeral"}} (ttl 5m or 1h)')
    text = block.get("text")
    if kind == "text" and isinstance(text, str) and not text.strip():
        raise BadLine(f"{where}.text: text blocks must hold non-whitespace text")
    if kind == "tool_result" and isinstance(block.get("content"), list):
        for j, inner in enumerate(block["content"]):
            _check_block(f"{where}.content[{j}]", inner, _RESULT_BLOCKS)
    if kind == "image":
        _check_image_source(f"{where}.source", block.get("source"))


def _check_image_source(where: str, source: Any) -> None:
    """Refuse an image source the API would refuse: other fields, bad base64, over 5 MB.

    Raises:
        BadLine: Naming the source and what is wrong with it.
    """
    kind = source.get("type") if isinstance(source, dict) else None
    if not isinstance(source, dict) or kind not in _SOURCE_FIELDS:
        raise BadLine(f'{where}: must be {{"type": "base64", ...}} or {{"type": "url", ...}}')
    extra = sorted(set(source) - _SOURCE_FIELDS[kind])
    if extra:
        raise BadLine(f"{where}: a {kind} source takes no field {clipped(str(extra[0]))!r}")
    if kind != "base64":
        return
    media_type = source.get("media_type")
    if media_type not in _MEDIA_TYPES:
        given = clipped(str(media_type))
        raise BadLine(f"{where}.media_type: must be {', '.join(_MEDIA_TYPES)}, got {given!r}")
    data = source.get("data")
    if not isinstance(data, str):
        raise BadLine(f"{where}.data: must be a string of base64")
    if len(data) > MAX_IMAGE_BASE64_BYTES:
        raise BadLine(
            f"{where}.data: {len(data):,} bytes of base64, over the API's limit of "
            f"{MAX_IMAGE_BASE64_BYTES:,} for one image"
        )
    problem = base64_image_problem(media_type, data)  # not base64, or not what it says it is
    if problem is not None:
        raise BadLine(f"{where}.data: {problem}")


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return "a boolean" if isinstance(value, bool) else "a number"
