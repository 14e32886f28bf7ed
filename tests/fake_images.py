"""What the providers' APIs refuse of images, in their words, for the fake servers.

Each check returns the message of the API's 400 (``invalid_request_error``), or None when the
API takes the request: a wrong media type, bad base64 or over 5 MB on the Messages API; on
Chat Completions an ``image_url`` outside a ``user`` message, or one that is not an image.
"""

from __future__ import annotations

import base64
from typing import Any

#: The image formats both APIs take, by their first bytes.
IMAGE_MAGIC = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
#: The Messages API's limit on one image's base64.
MAX_IMAGE_BASE64 = 5 * 1024 * 1024


def image_media_type(raw: bytes) -> str | None:
    """The media type ``raw`` (an image's bytes) is, by its first bytes; None if none."""
    for media_type, magics in IMAGE_MAGIC.items():
        if raw.startswith(magics) and (media_type != "image/webp" or raw[8:12] == b"WEBP"):
            return media_type
    return None


def _anthropic_image(where: str, block: Any) -> str | None:
    """What the Messages API says of an image block it refuses (None: it takes it)."""
    source = block.get("source") if isinstance(block, dict) else None
    if not isinstance(source, dict) or source.get("type") not in ("base64", "url"):
        return f"{where}.source: Input tag does not match any of the expected tags: 'base64', 'url'"
    if source["type"] == "url":
        return None
    data, declared = source.get("data"), source.get("media_type")
    if declared not in IMAGE_MAGIC:
        return f"{where}.source.base64.media_type: Input should be " + ", ".join(
            repr(m) for m in IMAGE_MAGIC
        )
    if not isinstance(data, str):
        return f"{where}.source.base64.data: Input should be a valid string"
    if len(data) > MAX_IMAGE_BASE64:
        return (
            f"{where}.source.base64: image exceeds 5 MB maximum: {len(data)} bytes > "
            f"{MAX_IMAGE_BASE64} bytes"
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return f"{where}.source.base64.data: The image data is not valid base64"
    actual = image_media_type(raw)
    if actual is None:
        return f"{where}.source.base64.data: Could not process image"
    if actual != declared:
        return (
            f"{where}.source.base64: The image was specified using the {declared} media type, "
            f"but the image appears to be a {actual} image"
        )
    return None


def anthropic_image_problem(messages: list[Any]) -> str | None:
    """What the Messages API's 400 says of an image it refuses, in a message or a tool result."""
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            found: list[tuple[str, Any]] = []
            if block.get("type") == "image":
                found.append((f"messages.{i}.content.{j}.image", block))
            inner = block.get("content") if block.get("type") == "tool_result" else None
            for k, part in enumerate(inner if isinstance(inner, list) else []):
                if part.get("type") not in ("text", "image"):
                    return (
                        f"messages.{i}.content.{j}.tool_result.content.{k}: Input tag "
                        f"{part.get('type')!r} found using 'type' does not match any of the "
                        "expected tags: 'text', 'image', 'search_result', 'document'"
                    )
                if part["type"] == "image":
                    where = f"messages.{i}.content.{j}.tool_result.content.{k}.image"
                    found.append((where, part))
            for where, image in found:
                problem = _anthropic_image(where, image)
                if problem is not None:
                    return problem
    return None


def openai_image_problem(i: int, message: dict[str, Any]) -> str | None:
    """What the Chat Completions API's 400 says of an ``image_url`` part it refuses, if any."""
    content = message.get("content")
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict) or part.get("type") != "image_url":
            continue
        if message.get("role") != "user":
            return (
                f"Invalid 'messages[{i}]'. Image URLs are only allowed for messages with role "
                f"'user', but this message with role '{message.get('role')}' contains an image "
                "URL."
            )
        url = (part.get("image_url") or {}).get("url")
        head, _, data = url.partition(",") if isinstance(url, str) else ("", "", "")
        unsupported = (
            "You uploaded an unsupported image. Please make sure your image is below 20 MB in "
            "size and is of one the following formats: ['png', 'jpeg', 'gif', 'webp']."
        )
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            continue
        if not head.startswith("data:image/") or not head.endswith(";base64"):
            return f"Invalid 'messages[{i}]': image_url.url must be a URL"
        try:
            raw = base64.b64decode(data, validate=True)
        except ValueError:
            return unsupported
        if image_media_type(raw) is None:
            return unsupported
    return None
