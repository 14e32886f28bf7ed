"""The fake server's prompt caching rules (tests/fake_cache.py) behave as the API's do."""

from __future__ import annotations

from typing import Any

from fake_cache import PromptCache, block_tokens

FIVE = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}
TOOLS = [{"name": "Bash", "description": "x" * 4000, "input_schema": {}}]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def text(t: str, mark: dict[str, str] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": t}
    return block | ({"cache_control": mark} if mark else {})


def request(turns: int, *, mark: dict[str, str] = FIVE, marks: tuple[int, ...] = (-1,)) -> Any:
    """Tools, a marked system, ``turns`` question/answer pairs and a question; ``marks`` marked.

    Each request's messages begin with the messages of the one with fewer turns.
    """
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages.append({"role": "user", "content": [text(f"question {i} " + "y" * 400)]})
        messages.append({"role": "assistant", "content": [text(f"answer {i}")]})
    messages.append({"role": "user", "content": [text(f"question {turns} " + "y" * 400)]})
    for at in marks:
        messages[at] = {**messages[at], "content": [text(messages[at]["content"][0]["text"], mark)]}
    system = [text("You help." + "z" * 400, mark)]
    return {"model": "claude-x", "tools": TOOLS, "system": system, "messages": messages}


def total(body: dict[str, Any]) -> int:
    blocks = [*body["tools"], *body["system"]]
    blocks += [b for m in body["messages"] for b in m["content"]]
    return sum(block_tokens(b) for b in blocks)


def test_a_first_request_writes_up_to_its_last_breakpoint_and_the_next_reads_it() -> None:
    cache = PromptCache(clock=Clock())
    first = request(2)
    usage = cache.usage(first)
    assert usage["cache_read_input_tokens"] == 0
    assert usage["input_tokens"] == 0  # the last block is a breakpoint
    assert usage["cache_creation_input_tokens"] == total(first)
    assert usage["cache_creation"] == {
        "ephemeral_5m_input_tokens": total(first),
        "ephemeral_1h_input_tokens": 0,
    }
    second = request(3)
    again = cache.usage(second)
    shared = total(first)  # the second request goes on from the first's last question
    assert again["cache_read_input_tokens"] == shared
    assert again["cache_creation_input_tokens"] == total(second) - shared
    assert again["input_tokens"] == 0


def test_nothing_after_the_last_breakpoint_is_cached() -> None:
    cache = PromptCache(clock=Clock())
    body = request(2, marks=(-3,))
    usage = cache.usage(body)
    after = sum(block_tokens(m["content"][0]) for m in body["messages"][-2:])
    assert usage["input_tokens"] == after
    assert usage["cache_creation_input_tokens"] == total(body) - after


def test_prefixes_under_the_minimum_are_not_cached() -> None:
    cache = PromptCache(min_tokens=10**6, clock=Clock())
    body = request(2)
    for _ in range(2):
        usage = cache.usage(body)
        assert (usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]) == (0, 0)
        assert usage["input_tokens"] == total(body)


def test_a_hit_is_looked_for_only_twenty_blocks_back_from_a_breakpoint() -> None:
    cache = PromptCache(min_tokens=1, clock=Clock())
    cache.usage(request(1))  # caches up to message 2 (question 1)
    base = block_tokens(TOOLS[0]) + block_tokens(request(1)["system"][0])
    far = request(12)  # its only message breakpoint is 22 blocks past the cached prefix
    assert cache.usage(far)["cache_read_input_tokens"] == base  # only tools + system
    near = request(12, marks=(-1, 2))  # a breakpoint where the cached prefix ended...
    cache2 = PromptCache(min_tokens=1, clock=Clock())
    cache2.usage(request(1))
    assert cache2.usage(near)["cache_read_input_tokens"] == total(request(1))  # ...finds it


def test_entries_expire_after_their_ttl_and_a_hit_renews_them() -> None:
    clock = Clock()
    cache = PromptCache(clock=clock)
    body = request(2)
    cache.usage(body)
    clock.now += 299
    assert cache.usage(body)["cache_read_input_tokens"] == total(body)  # renewed now
    clock.now += 299
    assert cache.usage(body)["cache_read_input_tokens"] == total(body)
    clock.now += 301
    expired = cache.usage(body)
    assert expired["cache_read_input_tokens"] == 0
    assert expired["cache_creation_input_tokens"] == total(body)


def test_hour_breakpoints_live_an_hour_and_their_writes_are_reported_apart() -> None:
    clock = Clock()
    cache = PromptCache(clock=clock)
    body = request(2, mark=HOUR)
    usage = cache.usage(body)
    assert usage["cache_creation"] == {
        "ephemeral_5m_input_tokens": 0,
        "ephemeral_1h_input_tokens": total(body),
    }
    clock.now += 3000
    assert cache.usage(body)["cache_read_input_tokens"] == total(body)


def test_a_changed_system_prompt_misses_everything_after_the_tools() -> None:
    cache = PromptCache(min_tokens=1, clock=Clock())
    body = request(2)
    cache.usage(body)
    changed = {**body, "system": [text("You help, today." + "z" * 400, FIVE)]}
    usage = cache.usage(changed)
    assert usage["cache_read_input_tokens"] == 0  # the tools alone were no breakpoint
    assert usage["cache_creation_input_tokens"] == total(changed)


def test_the_fake_refuses_the_cache_marks_the_api_refuses() -> None:
    from fake_cache import breakpoint_problem

    mark = {"type": "ephemeral"}
    hour = {"type": "ephemeral", "ttl": "1h"}
    text = [{"type": "text", "text": f"t{i}", "cache_control": mark} for i in range(5)]
    assert "A maximum of 4 blocks" in str(breakpoint_problem({"system": text}))
    assert breakpoint_problem({"system": text[:4]}) is None
    empty = {"system": [{"type": "text", "text": "", "cache_control": mark}]}
    assert "empty text blocks" in str(breakpoint_problem(empty))
    thinking = {"type": "thinking", "thinking": "x", "signature": "s", "cache_control": mark}
    body = {"messages": [{"role": "assistant", "content": [thinking]}]}
    assert "thinking blocks" in str(breakpoint_problem(body))
    late_hour = {"system": [text[0], {"type": "text", "text": "h", "cache_control": hour}]}
    assert "must not come after" in str(breakpoint_problem(late_hour))
    hour_first = {"system": [{"type": "text", "text": "h", "cache_control": hour}, text[0]]}
    assert breakpoint_problem(hour_first) is None
