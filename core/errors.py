"""Errors the user can act on. Each message says what happened and what to do."""

from __future__ import annotations


class MemoryAgentError(RuntimeError):
    """Base class: the CLI and the HTTP app print these without a traceback."""


class DatabaseUnreachable(MemoryAgentError):
    pass


class PgvectorMissing(MemoryAgentError):
    pass


class ExtensionPermissionDenied(MemoryAgentError):
    pass


class EmbeddingMismatch(MemoryAgentError):
    pass


class InvalidMessage(MemoryAgentError, ValueError):
    """A user message the agent refuses (empty, too long, not text)."""


class ModelOutputError(MemoryAgentError):
    """The model's reply could not be validated, even after one repair attempt."""


class SettingError(MemoryAgentError, ValueError):
    """An environment setting whose value cannot be used; the message names the variable and what it takes."""
