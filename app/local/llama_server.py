"""``python -m app.local.llama_server``: llama-cpp-python's server, with a prompt cache that counts
what it holds.

llama-cpp-python's RAM cache (``--cache``) bounds only the KV bytes of the states it keeps, but each
state also keeps a copy of the logits (up to n_batch x vocabulary floats: ~310 MB on Qwen2.5), so
many short prompts (titles, folds) pile up uncounted: a 0.5B server with a 128 MiB cache was seen at
9.8 GB. Here a state's size is every array it keeps, so ``--cache_size`` bounds the RAM the cache
really takes.

The library's app is served behind ``app.local.private_server.PrivateServer``: on a loopback address
only, with the key memory-agent generated (handed over in ``$MEMORY_AGENT_LOCAL_KEY``), refusing
foreign ``Host`` and ``Origin`` headers, without the library's CORS for every origin, and naming
the model by its alias. Everything else is the library's own server.
"""

from __future__ import annotations

import argparse
import os
import sys

import llama_cpp
from llama_cpp.llama_cache import LlamaRAMCache

from app.local.private_server import KEY_ENV, is_loopback_address, private_app


def state_bytes(state) -> int:
    """What one saved state holds in RAM: the KV state, the logits copy and the token ids."""
    return int(state.llama_state_size) + int(state.scores.nbytes) + int(state.input_ids.nbytes)


class BoundedRAMCache(LlamaRAMCache):
    """The library's LRU RAM cache, its size counted in real bytes (it evicts the oldest past capacity)."""

    @property
    def cache_size(self) -> int:
        return sum(state_bytes(s) for s in self.cache_state.values())


def isolate_requests() -> None:
    """Start every completion from an empty context, so no request's time depends on another's prompt.

    llama.cpp resumes a prompt from the longest prefix it shares with the live context (and, with
    ``--cache``, with a saved state), so a prompt that repeats a recent one is read faster: a client
    can time a guess of what another just sent. Here nothing is resumed; every call reads its whole
    prompt, as a chat's first turn does (its first token ~11 s instead of ~3 s on the 0.5B, docs/local-model.md).
    """
    create = llama_cpp.Llama._create_completion

    def from_empty_context(self, *args, **kwargs):
        self.reset()  # n_tokens = 0: generate() finds no prefix to keep
        return create(self, *args, **kwargs)

    llama_cpp.Llama._create_completion = from_empty_context


def main(argv: list[str] | None = None) -> int:
    llama_cpp.LlamaRAMCache = BoundedRAMCache  # the server builds its cache by this name (llama_cpp/server/model.py)
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(prog="python -m app.local.llama_server", description="llama-cpp-python's server, private to its owner")
    add_args_from_model(parser, Settings)
    parser.add_argument("--isolate_requests", action="store_true", help="no prompt cache; every request from an empty context")
    args = parser.parse_args(argv)
    key = os.environ.pop(KEY_ENV, "")  # out of the environment, so nothing the server runs inherits it
    os.environ.pop("CONFIG_FILE", None)  # create_app would take its settings (host, key) from that file instead
    server_settings = parse_model_from_args(ServerSettings, args)
    model_settings = parse_model_from_args(ModelSettings, args)
    if not key:
        parser.error(f"${KEY_ENV} must hold the key clients are to send (memory-agent local sets it)")
    if not is_loopback_address(server_settings.host):
        parser.error(f"--host {server_settings.host} is not a loopback address: this server answers only on this machine")
    if not model_settings.model_alias:
        parser.error("--model_alias is required: replies name the model by it, never by the file's path")
    server_settings.api_key = key  # the library's own check too, behind ours
    if args.isolate_requests:
        model_settings.cache = False
        isolate_requests()
    app = create_app(server_settings=server_settings, model_settings=[model_settings])
    private = private_app(app, key=key, alias=model_settings.model_alias)
    uvicorn.run(private, host=server_settings.host, port=server_settings.port, server_header=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
