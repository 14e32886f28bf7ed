"""From --model, settings and environment to a model."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskloom.errors import UserError
from taskloom.models.anthropic import AnthropicModel
from taskloom.models.openai import OpenAIModel
from taskloom.models.resolve import NO_MODEL, expand_alias, resolve_model
from taskloom.testing import ScriptedModel


@pytest.fixture(autouse=True)
def no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "TASKLOOM_MODEL_SONNET",
        "TASKLOOM_OPENAI_MODEL",
    ):
        monkeypatch.delenv(var, raising=False)


def test_nothing_configured_names_the_variables() -> None:
    with pytest.raises(UserError) as err:
        resolve_model(None)
    assert str(err.value) == NO_MODEL


def test_defaults_follow_the_configured_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    model = resolve_model(None, {"openaiModel": "llama3"})
    assert isinstance(model, OpenAIModel) and model.name == "llama3"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    model = resolve_model(None, {"model": "opus"})
    assert isinstance(model, AnthropicModel) and model.name == expand_alias("opus", {})


def test_aliases_come_from_settings_then_env_then_builtins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert expand_alias("sonnet", {}).startswith("claude-")
    monkeypatch.setenv("TASKLOOM_MODEL_SONNET", "claude-from-env")
    assert expand_alias("sonnet", {}) == "claude-from-env"
    assert expand_alias("sonnet", {"modelAliases": {"sonnet": "claude-x"}}) == "claude-x"
    assert expand_alias("claude-full-id", {}) == "claude-full-id"


def test_prefixes(tmp_path: Path) -> None:
    turns = tmp_path / "t.json"
    turns.write_text('{"turns": ["hi"]}')
    assert isinstance(resolve_model(f"scripted:{turns}"), ScriptedModel)
    assert isinstance(resolve_model("openai:gpt-4o-mini"), OpenAIModel)
    model = resolve_model("anthropic:claude-haiku-4-5")
    assert isinstance(model, AnthropicModel) and model.name == "claude-haiku-4-5"
    for bad in ("scripted:", "openai:", "anthropic:"):
        with pytest.raises(UserError):
            resolve_model(bad)
    with pytest.raises(UserError, match="cannot read scripted model file"):
        resolve_model(f"scripted:{tmp_path / 'missing.yaml'}")
