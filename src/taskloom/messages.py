"""Canonical messages: Anthropic-shaped content blocks, usage, and their (de)serialisation.

Every provider adapter converts to and from these; the engine, transcripts and the
``stream-json`` output use them as they are (the JSON form is the Anthropic Messages form).

They are plain classes (:class:`taskloom._records.Record`), not pydantic models: a plain
``taskloom -p`` must not pay for importing pydantic before its first request, and fan-out
builds thousands of them. Data from outside (transcripts, stream-json input, a provider's
answer) is read by one parser, ``from_dict`` (:meth:`Message.from_dict`,
:meth:`Usage.from_dict`, ``WebSearchResultBlock.from_dict``...), which checks each field as
the pydantic models did, by each class's ``_CHECKS``, and raises :class:`MessageError` naming
the path of every field that is wrong. Fields a block or message does not declare (a
provider's ``citations``, ``cache_control``...) are kept in its ``extra`` and written back out
where they were; :meth:`~taskloom._records.Record.replace` copies one with changes.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any, ClassVar, Literal, get_args

# Raised by from_dict: part of this module's API (re-exported).
from taskloom._records import MessageError as MessageError
from taskloom._records import (
    Record,
    boolean,
    copied_mapping,
    either,
    integer,
    list_of,
    literal,
    mapping,
    nested,
    optional_string,
    string,
    tagged,
)

#: Key under which an adapter passes on a tool input that was not a JSON object.
INVALID_INPUT_KEY = "__invalid_input__"


class ContentBlockBase(Record):
    """A content block: its ``type`` tag is its class's."""

    __slots__ = ()
    type: ClassVar[str]

    def dump(self) -> dict[str, Any]:
        """The block's JSON form (the Messages API's), fields that are None left out."""
        return self._dump_fields({"type": self.type})


class TextBlock(ContentBlockBase):
    """Plain text."""

    __slots__ = ("text",)
    _CHECKS = {"text": string}
    _REQUIRED = frozenset({"text"})
    type: ClassVar[Literal["text"]] = "text"

    def __init__(self, *, text: str, **extra: Any) -> None:
        self.text = text
        self.extra = extra

    def dump(self) -> dict[str, Any]:
        """The block's JSON form."""
        if self.extra:
            return self._dump_fields({"type": "text"})
        return {"type": "text", "text": self.text}


class ThinkingBlock(ContentBlockBase):
    """The model's visible reasoning (kept and sent back as the provider requires)."""

    __slots__ = ("signature", "thinking")
    _CHECKS = {"thinking": string, "signature": string}
    _REQUIRED = frozenset({"thinking"})
    type: ClassVar[Literal["thinking"]] = "thinking"

    def __init__(self, *, thinking: str, signature: str = "", **extra: Any) -> None:
        self.thinking = thinking
        self.signature = signature
        self.extra = extra


class ToolUseBlock(ContentBlockBase):
    """A tool call made by the model.

    ``defect``: why this call must not run (set by taskloom, see :mod:`taskloom.untrusted`):
    the engine answers it with this as a tool error. Never serialised, so never sent.
    """

    __slots__ = ("defect", "id", "input", "name")
    _CHECKS = {"id": string, "name": string, "input": mapping, "defect": optional_string}
    _REQUIRED = frozenset({"id", "name"})
    _HIDDEN = frozenset({"defect"})
    type: ClassVar[Literal["tool_use"]] = "tool_use"

    def __init__(
        self,
        *,
        id: str,
        name: str,
        input: dict[str, Any] | None = None,
        defect: str | None = None,
        **extra: Any,
    ) -> None:
        self.id = id
        self.name = name
        self.input: dict[str, Any] = {} if input is None else dict(input)
        self.defect = defect
        self.extra = extra


class ServerToolUseBlock(ContentBlockBase):
    """A call of a tool the provider runs itself (the Anthropic API's ``web_search``).

    Kept as the provider sent it: a request that goes on from this answer must send it back.
    """

    __slots__ = ("id", "input", "name")
    _CHECKS = {"id": string, "name": string, "input": mapping}
    _REQUIRED = frozenset({"id", "name"})
    type: ClassVar[Literal["server_tool_use"]] = "server_tool_use"

    def __init__(
        self,
        *,
        id: str,
        name: str,
        input: dict[str, Any] | None = None,
        **extra: Any,
    ) -> None:
        self.id = id
        self.name = name
        self.input: dict[str, Any] = {} if input is None else dict(input)
        self.extra = extra


class WebSearchResultBlock(ContentBlockBase):
    """What the provider's web search found, answering a :class:`ServerToolUseBlock`.

    ``content`` is a list of results (``{"type": "web_search_result", "title", "url",
    "encrypted_content", "page_age"}``) or one error
    (``{"type": "web_search_tool_result_error", "error_code"}``), as the API sends it.
    """

    __slots__ = ("content", "tool_use_id")
    _CHECKS = {
        "tool_use_id": string,
        "content": either((dict,), copied_mapping, list_of(copied_mapping), "list or dictionary"),
    }
    _REQUIRED = frozenset({"tool_use_id"})
    type: ClassVar[Literal["web_search_tool_result"]] = "web_search_tool_result"

    def __init__(
        self,
        *,
        tool_use_id: str,
        content: list[dict[str, Any]] | dict[str, Any] | None = None,
        **extra: Any,
    ) -> None:
        self.tool_use_id = tool_use_id
        self.content: list[dict[str, Any]] | dict[str, Any] = (
            [] if content is None else dict(content) if isinstance(content, dict) else list(content)
        )
        self.extra = extra


#: The Messages API's limit on one image: 5 MB of base64.
MAX_IMAGE_BASE64_BYTES = 5 * 1024 * 1024
#: The image formats the Messages API takes.
ImageMediaType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]


def image_media_type(head: bytes) -> ImageMediaType | None:
    """The image format of bytes starting with ``head``, by their magic bytes.

    None when they start no image of a format the API takes.
    """
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def base64_image_problem(media_type: object, data: object) -> str | None:
    """Why the Messages API would refuse a base64 image, in words that end "its data is".

    ``data`` is the base64, ``media_type`` what it is said to be; None when the API takes it.
    Once in a conversation, a refused image would make that request and every later one fail.
    """
    taken = get_args(ImageMediaType)
    if media_type not in taken:
        return f"of type {str(media_type)[:80]!r}, which the API does not take ({', '.join(taken)})"
    if not isinstance(data, str) or not data:
        return "empty" if data == "" else "not a string of base64"
    if len(data) > MAX_IMAGE_BASE64_BYTES:
        return (
            f"{len(data):,} bytes of base64, over the API's limit of "
            f"{MAX_IMAGE_BASE64_BYTES:,} for one image"
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return "not valid base64"
    found = image_media_type(raw[:16])
    if found is None:
        return f"not an image of type {media_type}"
    if found != media_type:
        return f"of type {found}, not the {media_type} it is said to be"
    return None


class Base64Source(ContentBlockBase):
    """An image's bytes, base64-encoded, in the block itself."""

    __slots__ = ("data", "media_type")
    _CHECKS = {"media_type": literal(*get_args(ImageMediaType)), "data": string}
    _REQUIRED = frozenset({"media_type", "data"})
    type: ClassVar[Literal["base64"]] = "base64"

    def __init__(self, *, media_type: ImageMediaType, data: str, **extra: Any) -> None:
        self.media_type = media_type
        self.data = data
        self.extra = extra


class UrlSource(ContentBlockBase):
    """An image the provider fetches from a URL."""

    __slots__ = ("url",)
    _CHECKS = {"url": string}
    _REQUIRED = frozenset({"url"})
    type: ClassVar[Literal["url"]] = "url"

    def __init__(self, *, url: str, **extra: Any) -> None:
        self.url = url
        self.extra = extra


class ImageBlock(ContentBlockBase):
    """An image: in a user's prompt, or in a tool result (what Read shows of an image file)."""

    __slots__ = ("source",)
    _CHECKS = {"source": tagged(Base64Source, UrlSource)}
    _REQUIRED = frozenset({"source"})
    type: ClassVar[Literal["image"]] = "image"

    def __init__(self, *, source: Base64Source | UrlSource, **extra: Any) -> None:
        self.source = source
        self.extra = extra


#: What a tool result's ``content`` list may hold.
ToolResultContent = TextBlock | ImageBlock


class ToolResultBlock(ContentBlockBase):
    """The result of a tool call, sent back in a user message.

    ``content`` is a string, or a list of text and image blocks (as the Messages API takes
    it); :meth:`text` is the text of either.
    """

    __slots__ = ("content", "is_error", "tool_use_id")
    _CHECKS = {
        "tool_use_id": string,
        "content": either(
            (str,), string, list_of(tagged(TextBlock, ImageBlock)), "string or a list of blocks"
        ),
        "is_error": boolean,
    }
    _REQUIRED = frozenset({"tool_use_id"})
    type: ClassVar[Literal["tool_result"]] = "tool_result"

    def __init__(
        self,
        *,
        tool_use_id: str,
        content: str | Iterable[ToolResultContent] = "",
        is_error: bool = False,
        **extra: Any,
    ) -> None:
        self.tool_use_id = tool_use_id
        self.content: str | list[ToolResultContent] = (
            content if isinstance(content, str) else list(content)
        )
        self.is_error = is_error
        self.extra = extra

    def text(self) -> str:
        """The result's text as one string (images left out)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    def images(self) -> list[ImageBlock]:
        """The result's images, in order."""
        if isinstance(self.content, str):
            return []
        return [b for b in self.content if isinstance(b, ImageBlock)]


ContentBlock = (
    TextBlock
    | ImageBlock
    | ThinkingBlock
    | ToolUseBlock
    | ToolResultBlock
    | ServerToolUseBlock
    | WebSearchResultBlock
)


class CacheCreation(Record):
    """The cache writes of a response by lifetime (the API's ``usage.cache_creation``)."""

    __slots__ = ("ephemeral_1h_input_tokens", "ephemeral_5m_input_tokens")
    _CHECKS = {"ephemeral_5m_input_tokens": integer, "ephemeral_1h_input_tokens": integer}
    _KEEPS_EXTRA = False

    def __init__(
        self, *, ephemeral_5m_input_tokens: int = 0, ephemeral_1h_input_tokens: int = 0
    ) -> None:
        self.ephemeral_5m_input_tokens = ephemeral_5m_input_tokens
        self.ephemeral_1h_input_tokens = ephemeral_1h_input_tokens
        self.extra = {}  # fields it does not declare are dropped, never kept

    def dump(self) -> dict[str, int]:
        """The counts as the API names them."""
        return {
            "ephemeral_5m_input_tokens": self.ephemeral_5m_input_tokens,
            "ephemeral_1h_input_tokens": self.ephemeral_1h_input_tokens,
        }


class Usage(Record):
    """Token counts of one model response (Anthropic field names).

    ``cache_creation`` splits ``cache_creation_input_tokens`` by cache lifetime when the
    provider said (a one-hour write costs more than a five-minute one); None: all five-minute.
    Fields it does not declare (a provider's ``service_tier``...) are dropped when read.
    """

    __slots__ = (
        "cache_creation",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "input_tokens",
        "output_tokens",
    )
    _CHECKS = {
        "input_tokens": integer,
        "output_tokens": integer,
        "cache_creation_input_tokens": integer,
        "cache_read_input_tokens": integer,
        "cache_creation": nested(CacheCreation),
    }
    _KEEPS_EXTRA = False

    def __init__(
        self,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_creation_input_tokens: int = 0,
        cache_read_input_tokens: int = 0,
        cache_creation: CacheCreation | None = None,
    ) -> None:
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cache_creation_input_tokens = cache_creation_input_tokens
        self.cache_read_input_tokens = cache_read_input_tokens
        self.cache_creation = cache_creation
        self.extra = {}

    def dump(self) -> dict[str, Any]:
        """The counts as the API names them; ``cache_creation`` only when known.

        Left out when unknown: dumps of providers that never split stay as they were.
        """
        data: dict[str, Any] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }
        if self.cache_creation is not None:
            data["cache_creation"] = self.cache_creation.dump()
        return data

    @property
    def hour_cache_writes(self) -> int:
        """The cache writes of the one-hour cache (0 when not split)."""
        split = self.cache_creation
        if split is None:
            return 0
        return min(split.ephemeral_1h_input_tokens, self.cache_creation_input_tokens)

    @property
    def context_tokens(self) -> int:
        """Everything the model read: input plus cache reads and writes."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


#: The check of a message's content block (data from outside), told apart by its ``type``.
_BLOCK = tagged(
    TextBlock,
    ImageBlock,
    ThinkingBlock,
    ToolUseBlock,
    ToolResultBlock,
    ServerToolUseBlock,
    WebSearchResultBlock,
)


class Message(Record):
    """One conversation message.

    Assistant messages from a model carry ``id``, ``model``, ``stop_reason`` and ``usage``;
    ``sanitized`` lists what taskloom changed in the model's output before using it (kept in
    transcripts and ``stream-json``, not part of :meth:`wire`).
    """

    __slots__ = ("content", "id", "model", "role", "sanitized", "stop_reason", "usage")
    _CHECKS = {
        "role": literal("user", "assistant"),
        "content": list_of(_BLOCK),
        "id": optional_string,
        "model": optional_string,
        "stop_reason": optional_string,
        "usage": nested(Usage),
        "sanitized": list_of(string, optional=True),
    }
    _REQUIRED = frozenset({"role", "content"})

    def __init__(
        self,
        *,
        role: Literal["user", "assistant"],
        content: Iterable[ContentBlock],
        id: str | None = None,
        model: str | None = None,
        stop_reason: str | None = None,
        usage: Usage | None = None,
        sanitized: list[str] | None = None,
        **extra: Any,
    ) -> None:
        self.role = role
        self.content: list[ContentBlock] = list(content)
        self.id = id
        self.model = model
        self.stop_reason = stop_reason
        self.usage = usage
        self.sanitized = sanitized
        self.extra = extra

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message holding one text block.

        Raises:
            MessageError: ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise MessageError([("content[0].text", "Input should be a valid string")])
        return cls(role="user", content=[TextBlock(text=text)])

    def text(self) -> str:
        """The concatenated text blocks (no tool blocks, no thinking)."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    def tool_uses(self) -> list[ToolUseBlock]:
        """The tool calls in this message, in order."""
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    def wire(self) -> dict[str, Any]:
        """The Anthropic wire form (role and content only, no ``None`` fields)."""
        return {"role": self.role, "content": [b.dump() for b in self.content]}

    def full(self) -> dict[str, Any]:
        """The full JSON form, as printed in ``stream-json`` and kept in transcripts."""
        data = self._dump_fields({})
        if self.role == "assistant":
            data = {"id": self.id, "type": "message", **data}
        return data
