"""List prices of common OpenAI chat models, to turn token counts into an estimated cost.

USD per 1M tokens (input, output), standard tier, from openai.com/api/pricing
as of mid-2025. Prices change: check the page before quoting a cost. Unknown
models (and the offline model, which costs nothing) get no estimate rather than
a guess. Cached-input discounts are ignored, so estimates err high.
"""

from __future__ import annotations

import re

__all__ = ["PRICES_PER_MILLION", "PRICES_AS_OF", "estimate_cost", "price_of"]

PRICES_AS_OF = "2025-07 (openai.com/api/pricing, standard tier)"

PRICES_PER_MILLION: dict[str, tuple[float, float]] = {
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "o3-mini": (1.10, 4.40),
    "gpt-3.5-turbo": (0.50, 1.50),
}

_DATE_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def price_of(model: str | None) -> tuple[float, float] | None:
    """``(input, output)`` USD per 1M tokens, or None when the model is not in the table."""
    if not model:
        return None
    name = model.split(":", 1)[1] if ":" in model else model
    name = _DATE_SUFFIX.sub("", name.strip().lower())
    return PRICES_PER_MILLION.get(name)


def estimate_cost(model: str | None, input_tokens: int, output_tokens: int) -> float | None:
    """Estimated USD for these tokens, or None when the price is unknown."""
    price = price_of(model)
    if price is None:
        return None
    return (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000
