"""WebFetch's HTTP side: the URL's checks, the GET with its bounds, redirects, the page cache.

As Claude Code's: ``http`` is upgraded to ``https`` (not for a loopback host, which serves no
TLS: a local server stays reachable), credentials in a URL are refused, a redirect is followed
only on the same host (``www.`` aside), scheme and port, and one elsewhere is reported for the
model to fetch itself (so that the permission rules see the new host); at most 10 MiB are read
and 60 s spent; pages stay cached 15 minutes (50 MiB in all, the least recently used go
first). HTML is converted to Markdown by ``markdownify``, imported only here.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit, urlunsplit

from taskloom._dataclass import dataclass
from taskloom._version import __version__

if TYPE_CHECKING:
    import httpx

MAX_URL_LENGTH = 2000
#: Bytes of a response read at most (Claude Code's 10 MiB).
MAX_CONTENT_BYTES = 10 * 1024 * 1024
#: Seconds one fetch may take, redirects included.
FETCH_TIMEOUT_S = 60.0
MAX_REDIRECTS = 10
#: The most of an HTML page converted to Markdown: the conversion is slow (seconds a megabyte)
#: and only the Markdown's start is read by the model anyway.
MAX_HTML_CHARS = 500_000
CACHE_TTL_S = 15 * 60.0
CACHE_MAX_BYTES = 50 * 1024 * 1024
ACCEPT = "text/markdown, text/html, */*"
USER_AGENT = f"taskloom/{__version__} (WebFetch)"
#: Content types read as text; anything else (images, archives) is refused.
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml")
_TEXT_SUFFIXES = ("+json", "+xml", "javascript")


class FetchError(Exception):
    """A fetch that failed in a way the model should be told (the message says how)."""


@dataclass(frozen=True, slots=True)
class Page:
    """A fetched page.

    Attributes:
        url: The URL it was fetched from (after the redirects followed).
        code: The HTTP status code.
        code_text: Its reason phrase.
        bytes: The size of the body as received.
        content_type: The ``Content-Type`` header's media type.
        content: The body as text; Markdown when it was HTML.
    """

    url: str
    code: int
    code_text: str
    bytes: int
    content_type: str
    content: str


@dataclass(frozen=True, slots=True)
class Redirect:
    """A redirect to another host, not followed: the model is told to fetch it itself."""

    original_url: str
    redirect_url: str
    code: int
    code_text: str


def checked_url(raw: str) -> str:
    """``raw`` as it will be fetched: an absolute http(s) URL, ``http`` made ``https``.

    Raises:
        FetchError: Too long, not http(s), without a host, or carrying credentials.
    """
    url = raw.strip()
    if len(url) > MAX_URL_LENGTH:
        raise FetchError(f"Invalid URL: longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise FetchError(f"Invalid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"Invalid URL {url!r}: give a full http:// or https:// URL")
    if parts.username or parts.password:
        raise FetchError("Invalid URL: URLs with a user name or password are not fetched")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        netloc = parts.hostname if port is None else f"{parts.hostname}:{port}"
        if ":" in parts.hostname:  # an IPv6 address keeps its brackets
            netloc = f"[{parts.hostname}]" + ("" if port is None else f":{port}")
        return urlunsplit(("https", netloc, parts.path, parts.query, parts.fragment))
    return url


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine (``localhost``, ``*.localhost``, 127/8, ``::1``)."""
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def same_site(original: str, target: str) -> bool:
    """Whether a redirect from ``original`` to ``target`` is followed: the same host only.

    Claude Code also follows one that adds or drops ``www.``; taskloom does not, since the
    permission rules name hosts exactly (``WebFetch(domain:www.example.com)``) and a redirect
    is not checked against them: the model is told of it and fetches the new URL, asked for.
    """
    a, b = urlsplit(original), urlsplit(target)
    if b.username or b.password or a.scheme != b.scheme or a.port != b.port:
        return False
    return (a.hostname or "").lower() == (b.hostname or "").lower()


class PageCache:
    """Fetched pages by URL for ``ttl`` seconds, at most ``max_bytes`` of content in all."""

    def __init__(
        self,
        ttl: float = CACHE_TTL_S,
        max_bytes: int = CACHE_MAX_BYTES,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        """Keep pages ``ttl`` seconds (by ``now``), ``max_bytes`` of them in all."""
        self.ttl = ttl
        self.max_bytes = max_bytes
        self._now = now
        self._pages: OrderedDict[str, tuple[float, Page]] = OrderedDict()
        self._size = 0

    def get(self, url: str) -> Page | None:
        """The page fetched from ``url`` less than ``ttl`` seconds ago, if any."""
        entry = self._pages.get(url)
        if entry is None:
            return None
        stored, page = entry
        if self._now() - stored >= self.ttl:
            self._drop(url)
            return None
        self._pages.move_to_end(url)
        return page

    def put(self, url: str, page: Page) -> None:
        """Keep ``page`` for ``url``; the least recently used go when over the size bound."""
        self._drop(url)
        size = len(page.content)
        if size > self.max_bytes:
            return
        self._pages[url] = (self._now(), page)
        self._size += size
        while self._size > self.max_bytes:
            self._drop(next(iter(self._pages)))

    def _drop(self, url: str) -> None:
        entry = self._pages.pop(url, None)
        if entry is not None:
            self._size -= len(entry[1].content)


async def fetch(url: str, client: httpx.AsyncClient | None = None) -> Page | Redirect:
    """GET ``url`` (already :func:`checked_url`), following same-site redirects.

    Raises:
        FetchError: A failed request, an error status, a body over the bound or not text.
    """
    import httpx

    own = client is None
    client = client or httpx.AsyncClient(
        follow_redirects=False,
        timeout=httpx.Timeout(FETCH_TIMEOUT_S),
        headers={"accept": ACCEPT, "user-agent": USER_AGENT},
    )
    try:
        async with asyncio.timeout(FETCH_TIMEOUT_S):
            return await _follow(client, url)
    except TimeoutError:
        raise FetchError(f"Fetching {url} took more than {FETCH_TIMEOUT_S:g} s") from None
    except httpx.HTTPError as exc:
        raise FetchError(f"Failed to fetch {url}: {exc or type(exc).__name__}") from None
    finally:
        if own:
            await client.aclose()


async def _follow(client: httpx.AsyncClient, url: str) -> Page | Redirect:
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        async with client.stream("GET", current) as response:
            if response.is_redirect:
                target = urljoin(current, response.headers["location"])
                if not same_site(current, target):
                    return Redirect(current, target, response.status_code, response.reason_phrase)
                current = target
                continue
            if response.status_code >= 400:
                raise FetchError(f"Request failed with status code {response.status_code}")
            body = await _body(response)
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            text = body.decode(response.charset_encoding or "utf-8", errors="replace")
            return Page(
                url=current,
                code=response.status_code,
                code_text=response.reason_phrase,
                bytes=len(body),
                content_type=kind,
                # Off the event loop: a big page must not freeze the session, and a cancel
                # (the timeout, an interrupt) ends the wait for it.
                content=await asyncio.to_thread(_readable, text, kind),
            )
    raise FetchError(f"Too many redirects (more than {MAX_REDIRECTS}) from {url}")


async def _body(response: httpx.Response) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_CONTENT_BYTES:
        raise FetchError(_too_big(int(declared)))
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_CONTENT_BYTES:
            raise FetchError(_too_big(None))
        chunks.append(chunk)
    return b"".join(chunks)


def _too_big(size: int | None) -> str:
    told = f" ({size:,} bytes)" if size is not None else ""
    cap = MAX_CONTENT_BYTES // (1024 * 1024)
    return f"The response{told} is larger than the {cap} MB WebFetch reads"


def _readable(text: str, kind: str) -> str:
    if kind in ("text/html", "application/xhtml+xml") or (not kind and "<html" in text[:1000]):
        return to_markdown(text[:MAX_HTML_CHARS])
    if kind and not (kind.startswith(_TEXT_TYPES) or kind.endswith(_TEXT_SUFFIXES)):
        raise FetchError(f"WebFetch reads text and HTML, not {kind} content")
    return text


def to_markdown(html: str) -> str:
    """``html`` as Markdown (ATX headings; scripts and styles left out)."""
    from markdownify import markdownify

    markdown: str = markdownify(html, heading_style="ATX")  # it drops scripts and styles
    # markdownify keeps the blank lines of the source's layout; three or more say nothing.
    lines: list[str] = []
    for line in markdown.splitlines():
        if line.strip() or (lines and lines[-1]):
            lines.append(line.rstrip() if line.strip() else "")
    return "\n".join(lines).strip()
