"""Images for Read: recognised by their magic bytes, measured from their header, sent whole.

Nothing here decodes an image (no imaging library): the header gives the format and the
dimensions, and the file's bytes go to the model base64-encoded, as the Messages API takes
them. An image the API would refuse (too large, or a header we cannot read, which it could not
either) is refused here, with a message saying why: once in the conversation, a refused image
would make every later request fail.
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING

from taskloom.messages import MAX_IMAGE_BASE64_BYTES, image_media_type
from taskloom.tools import responses
from taskloom.tools._text import MAX_IMAGE_SIDE as MAX_IMAGE_SIDE
from taskloom.tools.base import ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.messages import ImageMediaType

#: Format name -> media type, for the formats the API takes.
MEDIA_TYPES: dict[str, ImageMediaType] = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}
_EXTENSIONS = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".gif": "gif", ".webp": "webp"}


def sniff_image(head: bytes) -> str | None:
    """The image format of a file starting with ``head`` (``png``, ``jpeg``, ...), if any."""
    media_type = image_media_type(head)
    return media_type.removeprefix("image/") if media_type else None


def image_extension(path: str) -> str | None:
    """The image format ``path``'s extension names, if it names one."""
    return _EXTENSIONS.get(os.path.splitext(path)[1].lower())


def dimensions(kind: str, data: bytes) -> tuple[int, int] | None:
    """(width, height) from the header of an image of format ``kind``; None if unreadable."""
    size: tuple[int, int] | None = None
    if kind == "png" and data[12:16] == b"IHDR" and len(data) >= 24:
        size = (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big"))
    elif kind == "gif" and len(data) >= 10:
        size = (int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little"))
    elif kind == "webp":
        size = _webp_size(data)
    elif kind == "jpeg":
        size = _jpeg_size(data)
    if size is None or not all(size):
        return None
    return size


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        # A lossy frame: 14-bit width and height after the key frame's start code.
        width = int.from_bytes(data[26:28], "little") & 0x3FFF
        return width, int.from_bytes(data[28:30], "little") & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        return width, int.from_bytes(data[27:30], "little") + 1
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """From the first frame header (SOFn), walking the segments before it."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # the image ends, or its data starts, before a frame header
            return None
        # SOF0-SOF15, except DHT (C4), JPG (C8) and DAC (CC), which share the range.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if i + 9 > len(data):
                return None
            height = int.from_bytes(data[i + 5 : i + 7], "big")
            return int.from_bytes(data[i + 7 : i + 9], "big"), height
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None


def human_size(size: int) -> str:
    """``12 KB``, ``3.4 MB`` (units of 1024), ``512 bytes``."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{round(size / 1024)} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def read_image(path: str, kind: str) -> tuple[ToolResult, int | None]:
    """The image at ``path`` as a tool result with an image block; its mtime (None if refused).

    Args:
        path: An absolute path.
        kind: Its format, as :func:`sniff_image` found it.
    """
    from taskloom.messages import Base64Source, ImageBlock

    with open(path, "rb") as f:
        stat = os.fstat(f.fileno())
        encoded_size = 4 * -(-stat.st_size // 3)
        if encoded_size > MAX_IMAGE_BASE64_BYTES:
            return (
                tool_error(
                    f"Image {path} is {human_size(stat.st_size)} ({human_size(encoded_size)} in "
                    f"base64), over the {human_size(MAX_IMAGE_BASE64_BYTES)} the API takes for "
                    "one image. Make a smaller copy (e.g. with ImageMagick via Bash: `convert "
                    "in.png -resize 50% out.png`) and Read that."
                ),
                None,
            )
        data = f.read()
    size = dimensions(kind, data)
    if size is None:
        return tool_error(f"{path} looks like a {kind} image but its header is unreadable."), None
    width, height = size
    if max(size) > MAX_IMAGE_SIDE:
        return (
            tool_error(
                f"Image {path} is {width}x{height} pixels; the API takes at most "
                f"{MAX_IMAGE_SIDE} pixels a side. Make a smaller copy (e.g. with ImageMagick "
                "via Bash: `convert in.png -resize 50% out.png`) and Read that."
            ),
            None,
        )
    media_type = MEDIA_TYPES[kind]
    source = Base64Source(media_type=media_type, data=base64.b64encode(data).decode("ascii"))
    text = f"Image {width}x{height} {kind}, {human_size(len(data))}: {path}"
    details = {"type": "image", "filePath": path, "mediaType": media_type, "bytes": len(data)}
    details |= {"width": width, "height": height}
    response = responses.read_image(
        source.data, media_type, original_size=stat.st_size, width=width, height=height
    )
    result = ToolResult(text, data=details, blocks=[ImageBlock(source=source)], response=response)
    return result, stat.st_mtime_ns
