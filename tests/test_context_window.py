"""Knowing how full a context window is: per-model windows, the estimate, the thresholds."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator

import pytest

from taskloom.cli.stream_output import model_usage
from taskloom.context.window import (
    IMAGE_TOKENS,
    Fullness,
    Thresholds,
    estimate_tokens,
)
from taskloom.messages import (
    Base64Source,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from taskloom.models import windows
from taskloom.models.windows import context_window
from taskloom.tasks.usage import UsageLedger

ENV = "TASKLOOM_CONTEXT_WINDOW"
PCT_ENV = "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No window or threshold from the environment, and every warning said again."""
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(PCT_ENV, raising=False)
    monkeypatch.setattr(windows, "_WARNED", set())
    yield


# --- per-model windows ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        "claude-sonnet-4-5-20250929",
        "claude-opus-4-1",
        "claude-3-5-haiku-latest",
        "sonnet",
        "opus",
        "anthropic/claude-sonnet-4-5",
        "Claude-Haiku-4-5",
    ],
)
def test_claude_models_hold_200k(model: str) -> None:
    assert context_window(model, None) == 200_000


@pytest.mark.parametrize("model", ["claude-sonnet-4-5[1m]", "sonnet[1m]", "claude-opus-4-6[1M]"])
def test_the_1m_suffix_holds_a_million(model: str) -> None:
    assert context_window(model, {}) == 1_000_000


@pytest.mark.parametrize("model", ["gpt-4o", "qwen2.5-coder:32b", "scripted", "sonnetish", ""])
def test_any_other_model_gets_the_documented_default(model: str) -> None:
    assert context_window(model, None) == windows.DEFAULT_CONTEXT_WINDOW == 128_000


def test_the_setting_adds_and_overrides_by_longest_prefix() -> None:
    settings = {
        "modelContextWindows": {
            "qwen": 32_768,
            "qwen2.5-coder": 131_072,
            "claude-haiku": 50_000,
        }
    }
    assert context_window("qwen2.5-coder:32b", settings) == 131_072
    assert context_window("qwen3", settings) == 32_768
    assert context_window("claude-haiku-4-5", settings) == 50_000
    # A key is a prefix of the id, not a substring anywhere in it.
    assert context_window("my-qwen", settings) == 128_000
    assert context_window("claude-sonnet-4-5", settings) == 200_000


def test_the_environment_wins_for_every_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, " 64000 ")
    settings = {"modelContextWindows": {"gpt": 1_000}}
    assert context_window("gpt-4o", settings) == 64_000
    assert context_window("claude-sonnet-4-5[1m]", None) == 64_000


@pytest.mark.parametrize("raw", ["lots", "0", "-5", "1.5e5"])
def test_a_bad_environment_value_is_ignored_with_a_warning(
    raw: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV, raw)
    with caplog.at_level(logging.WARNING):
        assert context_window("gpt-4o", {"modelContextWindows": {"gpt": 8_192}}) == 8_192
    assert f"environment variable {ENV}" in caplog.text and repr(raw) in caplog.text


def test_bad_entries_of_the_setting_are_ignored_with_a_warning_naming_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = {
        "modelContextWindows": {"gpt": "big", "gpt-4": True, "gpt-4o": 0, "g": 16_000, "ok": 2.0}
    }
    with caplog.at_level(logging.WARNING):
        assert context_window("gpt-4o-mini", settings) == 16_000
        assert context_window("ok-model", settings) == 2  # a whole float is a whole number
    for key in ("gpt", "gpt-4", "gpt-4o"):
        assert f"modelContextWindows.{key} must be a whole number" in caplog.text
    assert "modelContextWindows.g " not in caplog.text


def test_a_setting_that_is_no_object_is_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert context_window("claude-sonnet-4-5", {"modelContextWindows": [1, 2]}) == 200_000
    assert "modelContextWindows must be an object" in caplog.text


def test_a_warning_is_given_once(caplog: pytest.LogCaptureFixture) -> None:
    settings = {"modelContextWindows": {"x": "no"}}
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            context_window("x-model", settings)
    assert caplog.text.count("modelContextWindows.x") == 1


def test_model_usage_reports_each_models_window(monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = UsageLedger()
    for model in ("claude-sonnet-4-5", "sonnet[1m]", "llama3"):
        ledger.charge("main", model, Usage(input_tokens=10, output_tokens=1))
    reported = model_usage(ledger, None)
    assert {m: e["contextWindow"] for m, e in reported.items()} == {
        "claude-sonnet-4-5": 200_000,
        "sonnet[1m]": 1_000_000,
        "llama3": 128_000,
    }
    monkeypatch.setenv(ENV, "32768")
    assert model_usage(ledger, None)["llama3"]["contextWindow"] == 32_768


# --- the estimate ---------------------------------------------------------------------------


def _image(size: int) -> ImageBlock:
    data = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(size)).decode()
    return ImageBlock(source=Base64Source(media_type="image/png", data=data))


def test_the_estimate_is_json_characters_over_four() -> None:
    messages = [Message.user("x" * 4000), Message(role="assistant", content=[TextBlock(text="ok")])]
    chars = sum(len(json.dumps(m.wire(), separators=(",", ":"))) for m in messages)
    assert estimate_tokens(messages) == -(-chars // 4)
    assert 1000 < estimate_tokens(messages) < 1030
    assert estimate_tokens([]) == 0


def test_non_ascii_text_counts_its_characters_not_its_escapes() -> None:
    assert estimate_tokens([Message.user("é" * 400)]) == estimate_tokens([Message.user("e" * 400)])


def test_an_image_costs_a_fixed_amount_whatever_its_size() -> None:
    def with_image(size: int) -> list[Message]:
        result = ToolResultBlock(
            tool_use_id="t1", content=[TextBlock(text="a picture"), _image(size)]
        )
        return [Message(role="user", content=[result])]

    small, large = estimate_tokens(with_image(10)), estimate_tokens(with_image(3_000_000))
    assert small == large
    assert IMAGE_TOKENS <= small < IMAGE_TOKENS + 50


def test_the_estimate_does_not_change_the_messages() -> None:
    call = ToolUseBlock(id="t1", name="Read", input={"file_path": "/a"})
    message = Message(role="assistant", content=[call])
    before = message.full()
    estimate_tokens([message])
    assert message.full() == before


# --- fullness and thresholds ----------------------------------------------------------------


def test_fullness_adds_the_last_requests_context_and_the_estimate_of_what_came_since() -> None:
    last = Usage(
        input_tokens=1_000, cache_read_input_tokens=50_000, cache_creation_input_tokens=9_000
    )
    added = [Message.user("y" * 3_990)]  # 1,000 tokens of JSON, more or less
    seen = Fullness.measure(last, added, 100_000)
    assert seen.tokens == 60_000 + estimate_tokens(added)
    assert seen.fraction == pytest.approx(seen.tokens / 100_000)
    assert 61.0 <= seen.percent < 61.1
    assert seen.should_clear() and not seen.should_compact()


def test_without_a_last_request_everything_is_estimated() -> None:
    history = [Message.user("z" * 400_000)]
    seen = Fullness.measure(None, history, 200_000)
    assert seen.tokens == estimate_tokens(history)
    assert not seen.should_clear()


def test_the_default_thresholds_are_60_and_85_percent() -> None:
    def at(tokens: int) -> Fullness:
        return Fullness(tokens, 1_000)

    assert (at(599).should_clear(), at(600).should_clear()) == (False, True)
    assert (at(849).should_compact(), at(850).should_compact()) == (False, True)
    assert at(1_500).fraction == 1.5  # an overflow shows as such


def test_less_takes_out_what_clearing_freed() -> None:
    seen = Fullness(900, 1_000)
    assert seen.should_compact()
    after = seen.less(200)
    assert (after.tokens, after.should_compact(), after.should_clear()) == (700, False, True)
    assert seen.less(5_000).tokens == 0
    assert seen.tokens == 900  # frozen: a new value


def test_a_window_must_hold_something() -> None:
    with pytest.raises(ValueError, match="at least 1 token, got 0"):
        Fullness.measure(None, [], 0)


def test_thresholds_come_from_settings_and_the_environment() -> None:
    settings = {"contextClearPercent": 40, "autoCompactPercent": 70.5}
    assert Thresholds.from_settings(settings, env={}) == Thresholds(40.0, 70.5, True)
    assert Thresholds.from_settings(settings, env={PCT_ENV: "50"}).compact_percent == 50.0
    assert Thresholds.from_settings(None, env={}) == Thresholds(60.0, 85.0, True)


def test_the_environment_variable_is_read_from_the_process_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PCT_ENV, "30")
    assert Thresholds.from_settings({}).compact_percent == 30.0


def test_auto_compact_false_stops_compaction_but_not_clearing() -> None:
    thresholds = Thresholds.from_settings({"autoCompact": False}, env={})
    full = Fullness(990, 1_000, thresholds)
    assert full.should_clear() and not full.should_compact()


@pytest.mark.parametrize(
    ("settings", "env", "named"),
    [
        ({"contextClearPercent": 0}, {}, "the setting contextClearPercent"),
        ({"contextClearPercent": "half"}, {}, "the setting contextClearPercent"),
        ({"autoCompactPercent": 120}, {}, "the setting autoCompactPercent"),
        ({"autoCompactPercent": True}, {}, "the setting autoCompactPercent"),
        ({}, {PCT_ENV: "nan"}, f"the environment variable {PCT_ENV}"),
        ({}, {PCT_ENV: "-3"}, f"the environment variable {PCT_ENV}"),
    ],
)
def test_a_bad_percent_is_ignored_with_a_warning_naming_it(
    settings: dict[str, object],
    env: dict[str, str],
    named: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert Thresholds.from_settings(settings, env=env) == Thresholds()
    assert f"{named} must be a percent above 0 and at most 100" in caplog.text


def test_a_bad_env_percent_falls_back_to_the_setting(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        found = Thresholds.from_settings({"autoCompactPercent": 75}, env={PCT_ENV: "x"})
    assert found.compact_percent == 75.0 and PCT_ENV in caplog.text


def test_a_bad_auto_compact_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert Thresholds.from_settings({"autoCompact": "no"}, env={}).auto_compact is True
    assert "the setting autoCompact must be true or false" in caplog.text
