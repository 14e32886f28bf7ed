"""Canonical messages: Anthropic-shaped content blocks, usage, and their (de)serialisation.

Every provider adapter converts to and from these; the engine, transcripts and the
``stream-json`` output use them as they are (the JSON form is the Anthropic Messages form).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

if TYPE_CHECKING:
    from pydantic import TypeAdapter

#: Key under which an adapter passes on a tool input that was not a JSON object.
INVALID_INPUT_KEY = "__invalid_input__"


# Every model here is built when first used, not at import (``defer_build``): building them
# takes tens of milliseconds, and the first request needs none of it (see Message.user and
# Message.wire). The first answer read from a model builds them.
class _Block(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)


class TextBlock(_Block):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Block):
    """The model's visible reasoning (kept and sent back as the provider requires)."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class ToolUseBlock(_Block):
    """A tool call made by the model."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    #: Why this call must not run (set by taskloom, see :mod:`taskloom.untrusted`): the
    #: engine answers it with this as a tool error. Never serialised, so never sent.
    defect: str | None = Field(default=None, exclude=True)


class ServerToolUseBlock(_Block):
    """A call of a tool the provider runs itself (the Anthropic API's ``web_search``).

    Kept as the provider sent it: a request that goes on from this answer must send it back.
    """

    type: Literal["server_tool_use"] = "server_tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class WebSearchResultBlock(_Block):
    """What the provider's web search found, answering a :class:`ServerToolUseBlock`.

    ``content`` is a list of results (``{"type": "web_search_result", "title", "url",
    "encrypted_content", "page_age"}``) or one error
    (``{"type": "web_search_tool_result_error", "error_code"}``), as the API sends it.
    """

    type: Literal["web_search_tool_result"] = "web_search_tool_result"
    tool_use_id: str
    content: list[dict[str, Any]] | dict[str, Any] = Field(default_factory=list)


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


class Base64Source(_Block):
    """An image's bytes, base64-encoded, in the block itself."""

    type: Literal["base64"] = "base64"
    media_type: ImageMediaType
    data: str


class UrlSource(_Block):
    """An image the provider fetches from a URL."""

    type: Literal["url"] = "url"
    url: str


class ImageBlock(_Block):
    """An image: in a user's prompt, or in a tool result (what Read shows of an image file)."""

    type: Literal["image"] = "image"
    source: Annotated[Base64Source | UrlSource, Field(discriminator="type")]


#: What a tool result's ``content`` list may hold.
ToolResultContent = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolResultBlock(_Block):
    """The result of a tool call, sent back in a user message.

    ``content`` is a string, or a list of text and image blocks (as the Messages API takes
    it); :meth:`text` is the text of either.
    """

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[ToolResultContent] = ""
    is_error: bool = False

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


ContentBlock = Annotated[
    TextBlock
    | ImageBlock
    | ThinkingBlock
    | ToolUseBlock
    | ToolResultBlock
    | ServerToolUseBlock
    | WebSearchResultBlock,
    Field(discriminator="type"),
]


class CacheCreation(BaseModel):
    """The cache writes of a response by lifetime (the API's ``usage.cache_creation``)."""

    model_config = ConfigDict(defer_build=True)

    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0


class Usage(BaseModel):
    """Token counts of one model response (Anthropic field names).

    ``cache_creation`` splits ``cache_creation_input_tokens`` by cache lifetime when the
    provider said (a one-hour write costs more than a five-minute one); None: all five-minute.
    """

    model_config = ConfigDict(defer_build=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation: CacheCreation | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out when unknown: dumps of providers that never split stay as they were.
        data: dict[str, Any] = handler(self)
        if data.get("cache_creation") is None:
            data.pop("cache_creation", None)
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


class Message(BaseModel):
    """One conversation message.

    Assistant messages from a model carry ``id``, ``model``, ``stop_reason`` and ``usage``;
    ``sanitized`` lists what taskloom changed in the model's output before using it (kept in
    transcripts and ``stream-json``, not part of :meth:`wire`).
    """

    model_config = ConfigDict(extra="allow", defer_build=True)

    role: Literal["user", "assistant"]
    content: list[ContentBlock]
    id: str | None = None
    model: str | None = None
    stop_reason: str | None = None
    usage: Usage | None = None
    sanitized: list[str] | None = None

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message holding one text block."""
        if not isinstance(text, str):
            return cls(role="user", content=[TextBlock(text=text)])  # validated: it fails
        # Already valid: constructing it directly keeps the models unbuilt until needed.
        return cls.model_construct(role="user", content=[TextBlock.model_construct(text=text)])

    def text(self) -> str:
        """The concatenated text blocks (no tool blocks, no thinking)."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    def tool_uses(self) -> list[ToolUseBlock]:
        """The tool calls in this message, in order."""
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    def wire(self) -> dict[str, Any]:
        """The Anthropic wire form (role and content only, no ``None`` fields)."""
        return {"role": self.role, "content": self._content_dump()}

    def full(self) -> dict[str, Any]:
        """The full JSON form, as printed in ``stream-json`` and kept in transcripts."""
        data: dict[str, Any]
        if self._plain_text():
            # What model_dump(exclude_none=True) gives for it, without building the model.
            data = {"role": self.role, "content": self._content_dump()}
        else:
            data = self.model_dump(exclude_none=True)
        if self.role == "assistant":
            data = {"id": self.id, "type": "message", **data}
        return data

    def _plain_text(self) -> bool:
        """Only exact text blocks, no extra fields, nothing but role and content set."""
        return (
            not self.__pydantic_extra__
            and self.id is None
            and self.model is None
            and self.stop_reason is None
            and self.usage is None
            and self.sanitized is None
            and all(type(b) is TextBlock and not b.__pydantic_extra__ for b in self.content)
        )

    def _content_dump(self) -> list[dict[str, Any]]:
        if all(type(b) is TextBlock and not b.__pydantic_extra__ for b in self.content):
            # model_dump(exclude_none=True) of a text block, without building the model.
            return [{"type": b.type, "text": b.text} for b in self.content]  # type: ignore[union-attr]
        return [b.model_dump(exclude_none=True) for b in self.content]


def __getattr__(name: str) -> Any:
    # MESSAGE_ADAPTER is made on first use: a TypeAdapter builds its model at once.
    if name == "MESSAGE_ADAPTER":
        from pydantic import TypeAdapter

        adapter = TypeAdapter(Message)
        globals()[name] = adapter
        return adapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


MESSAGE_ADAPTER: TypeAdapter[Message]
