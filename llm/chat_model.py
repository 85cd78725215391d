"""Which chat model a turn uses: any init_chat_model string, the offline model, or one registered by name."""

from __future__ import annotations

import logging
import os
import threading

from langchain_core.language_models import BaseChatModel

from core.env_settings import env_seconds

log = logging.getLogger(__name__)

OFFLINE = "offline"
AUTO = "auto"
DEFAULT_OPENAI_MODEL = "openai:gpt-4.1-mini"
# Seconds an OpenAI-compatible provider may take to answer (per attempt; the client retries twice).
# Without it the client waits ten minutes a try, and the user watches a reply that never comes.
TIMEOUT_ENV = "MEMORY_AGENT_MODEL_TIMEOUT"
DEFAULT_TIMEOUT_SECONDS = 60.0

_lock = threading.Lock()
_cache: dict[str, BaseChatModel] = {}
_registered: dict[str, BaseChatModel] = {}


def register_model(name: str, model: BaseChatModel) -> None:
    """Make a model instance selectable by name (``Context.model``): used by tests and embedders."""
    _registered[name] = model


def unregister_model(name: str) -> None:
    _registered.pop(name, None)


def resolve_model_name(spec: str | None) -> str:
    """Turn 'auto' (the default) into a concrete choice; other names pass through."""
    spec = (spec or os.environ.get("MEMORY_AGENT_MODEL") or AUTO).strip()
    if spec != AUTO:
        return spec
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return DEFAULT_OPENAI_MODEL  # another model: MEMORY_AGENT_MODEL=openai:<name>
    return OFFLINE


def offline_notice(spec: str | None) -> str | None:
    """The one line said at start when the offline model is in use."""
    if resolve_model_name(spec) != OFFLINE:
        return None
    return (
        "Using the built-in offline model: not an LLM, it echoes what memory gives it and extracts with rules. "
        "Set OPENAI_API_KEY (or OPENAI_BASE_URL for Ollama/vLLM/LM Studio) or MEMORY_AGENT_MODEL for real replies."
    )


def load_chat_model(spec: str | None) -> BaseChatModel:
    """The model for ``spec``, created once per name and reused."""
    name = resolve_model_name(spec)
    if name in _registered:
        return _registered[name]
    with _lock:
        if name not in _cache:
            _cache[name] = _create(name)
        return _cache[name]


def _create(name: str) -> BaseChatModel:
    if name == OFFLINE:
        from offline_model.model import OfflineChatModel

        return OfflineChatModel()
    if name == "offline-slow" or name.startswith("offline-slow:"):
        # The offline model with a delay per word: for demos and stop/cancel tests.
        from offline_model.slow_model import from_spec

        return from_spec(name)
    from langchain.chat_models import init_chat_model

    kwargs: dict = {"temperature": 0}
    provider = name.split(":", 1)[0] if ":" in name else None
    if provider in (None, "openai") and os.environ.get("OPENAI_BASE_URL") and not os.environ.get("OPENAI_API_KEY"):
        # Local OpenAI-compatible servers (Ollama, vLLM, LM Studio) ignore the key, but the client wants one.
        kwargs["api_key"] = "not-needed"
    if provider in (None, "openai"):
        # Token usage in streamed replies, for the cost figures.
        kwargs["stream_usage"] = True
        kwargs["timeout"] = env_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_SECONDS)
        # langchain-openai also drops a stream that sends no chunk for 120 s: a local model on a busy
        # machine reading a long prompt before its first token took longer, and the reply failed.
        kwargs["stream_chunk_timeout"] = kwargs["timeout"]
    try:
        if provider in (None, "openai") and not is_openai_endpoint(os.environ.get("OPENAI_BASE_URL")):
            from llm.compatible_openai import CompatibleChatOpenAI

            return CompatibleChatOpenAI(model=name.split(":", 1)[1] if provider else name, **kwargs)
        return init_chat_model(name, **kwargs)
    except Exception as exc:
        raise ValueError(
            f"Cannot load chat model {name!r}: {exc}. Use an init_chat_model string such as "
            "'openai:gpt-4.1-mini', or 'offline'."
        ) from exc


def model_label(model: BaseChatModel) -> str:
    for attr in ("model_name", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def server_of(model: BaseChatModel) -> str | None:
    """The base URL a model talks to (None: the provider's default endpoint, or in-process)."""
    inner = getattr(model, "inner", None)  # a forwarding wrapper (the evals' metered model)
    if isinstance(inner, BaseChatModel):
        return server_of(inner)
    for attr in ("openai_api_base", "base_url", "api_base"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value.rstrip("/")
    client = getattr(model, "root_async_client", None) or getattr(model, "root_client", None)
    value = getattr(client, "base_url", None)  # OPENAI_BASE_URL is read by the SDK client, not langchain
    return str(value).rstrip("/") if value else None


def is_openai_endpoint(server: str | None) -> bool:
    return server is None or "api.openai.com" in server


def with_output_cap(model: BaseChatModel, max_tokens: int) -> BaseChatModel:
    """The same model generating at most ``max_tokens`` tokens per call.

    langchain-openai sends the cap as ``max_completion_tokens``, which OpenAI wants but
    llama-cpp-python's server (and older local servers) silently ignore; behind a custom
    base URL the classic ``max_tokens`` rides along in the body too, so every server caps.
    """
    inner = getattr(model, "inner", None)
    if isinstance(inner, BaseChatModel):
        return model.model_copy(update={"inner": with_output_cap(inner, max_tokens)})
    if "max_tokens" not in type(model).model_fields:
        return model  # in-process models (offline, scripted) have nothing to cap
    update: dict = {"max_tokens": max_tokens}
    if "extra_body" in type(model).model_fields and not is_openai_endpoint(server_of(model)):
        update["extra_body"] = {**(getattr(model, "extra_body", None) or {}), "max_tokens": max_tokens}
    return model.model_copy(update=update)


def with_temperature(model: BaseChatModel, temperature: float) -> BaseChatModel:
    """The same model sampling at ``temperature`` (models without the setting, in-process ones, as they are)."""
    inner = getattr(model, "inner", None)
    if isinstance(inner, BaseChatModel):
        return model.model_copy(update={"inner": with_temperature(inner, temperature)})
    if "temperature" not in type(model).model_fields:
        return model
    return model.model_copy(update={"temperature": temperature})
