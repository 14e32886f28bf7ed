"""What WebFetch and WebSearch share: the model that reads for them, and asking it.

WebFetch has the session's small model answer its prompt about a page; WebSearch has the
session's model run the provider's own search. Either request goes to the model of the calling
agent (a :class:`~taskloom.models.switch.ModelSwitch`: the one chosen now) and is charged to
that agent in the session's ledger, like its own requests.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from taskloom.errors import ModelError
from taskloom.messages import Message
from taskloom.models.base import MessageComplete, Model, ModelRequest
from taskloom.models.switch import ModelSwitch
from taskloom.tasks.usage import MAIN

if TYPE_CHECKING:
    from taskloom.models.anthropic import AnthropicModel
    from taskloom.tools.base import ToolContext

#: The setting naming the small model (an alias or a model id); Claude Code's variable next.
SMALL_MODEL_SETTING = "smallFastModel"
SMALL_MODEL_ENV = "ANTHROPIC_SMALL_FAST_MODEL"


def agent_model(ctx: ToolContext) -> Model | None:
    """The model the calling agent asks now (None: a call outside an engine)."""
    if ctx.engine is None:
        return None
    model = ctx.engine.config.model
    current: Model = model.current if isinstance(model, ModelSwitch) else model
    return current


def anthropic(model: Model | None) -> AnthropicModel | None:
    """``model`` when it is on the Anthropic API, else None."""
    # Not loaded means not in use: a scripted or OpenAI session does not import it to ask.
    module = sys.modules.get("taskloom.models.anthropic")
    if module is None or model is None:
        return None
    found: AnthropicModel | None = model if isinstance(model, module.AnthropicModel) else None
    return found


def offers_server_search(model: Model) -> bool:
    """Whether ``model`` (a session's, maybe behind a switch) can run the API's web search."""
    current = model.current if isinstance(model, ModelSwitch) else model
    return anthropic(current) is not None


def small_model(model: Model, settings: dict[str, Any]) -> tuple[Model, bool]:
    """The model that answers WebFetch's prompt, and whether the caller must close it.

    On Anthropic: the ``smallFastModel`` setting, else ``ANTHROPIC_SMALL_FAST_MODEL``, else
    the ``haiku`` alias, with the session's credentials and base URL. On any other provider
    (or a scripted model): ``model`` itself, which has no small sibling.
    """
    on_api = anthropic(model)
    if on_api is None:
        return model, False
    from taskloom.models.anthropic import AnthropicModel
    from taskloom.models.resolve import expand_alias

    spec = settings.get(SMALL_MODEL_SETTING) or os.environ.get(SMALL_MODEL_ENV) or "haiku"
    name = expand_alias(str(spec), settings)
    if name == on_api.name:
        return on_api, False
    small = AnthropicModel(
        name,
        api_key=on_api.api_key,
        auth_token=on_api.auth_token,
        base_url=on_api.base_url,
        idle_timeout=on_api.idle_timeout,
    )
    return small, True


async def ask(ctx: ToolContext, model: Model, request: ModelRequest) -> Message:
    """``model``'s whole answer to ``request``, charged to the calling agent.

    Raises:
        ModelError: The provider failed, or its stream ended without an answer.
    """
    final: Message | None = None
    async with model.stream(request) as events:
        async for event in events:
            if isinstance(event, MessageComplete):
                final = event.message
    if final is None:
        raise ModelError("the model's stream ended without a complete message")
    key = ctx.engine.ledger_key if ctx.engine is not None else ctx.agent_id or MAIN
    ctx.runtime.usage.charge(str(key), final.model or request.model, final.usage)
    return final
