"""Pure-Python eval metrics (no DB, no LLM).

* ``token_f1``: LoCoMo's QA scorer (normalise, Porter-stem, token F1, per-category rules).
* ``rouge``: ROUGE-1/2/L with rouge-score's tokenisation, multi-reference max.
* ``lexical_recall``: share of a gold answer's content words present in a text.
* ``bootstrap``: bootstrap CIs, paired differences, winner decisions.
* token counts come from ``core.tokens``, the counter every budget uses.
"""

from .bootstrap import (
    PairedBootstrap,
    WinnerDecision,
    bootstrap_ci,
    bootstrap_diff,
    decide_winner,
    group_means,
)
from .lexical_recall import STOPWORDS, content_tokens, lexical_recall, lexical_recall_multi
from .rouge import ROUGE_TYPES, RougeScore, rouge_l, rouge_n, rouge_scores, rouge_tokenize
from .token_f1 import (
    EXTENDED_REFUSAL_MARKERS,
    LOCOMO_REFUSAL_MARKERS,
    answer_tokens,
    f1,
    f1_multi_answer,
    is_refusal,
    normalize_answer,
    score_qa,
    stem_token,
)
from core.tokens import CHARS_PER_TOKEN, count_message_tokens, count_tokens  # the one counter

__all__ = [
    "CHARS_PER_TOKEN",
    "EXTENDED_REFUSAL_MARKERS",
    "LOCOMO_REFUSAL_MARKERS",
    "PairedBootstrap",
    "ROUGE_TYPES",
    "RougeScore",
    "STOPWORDS",
    "WinnerDecision",
    "answer_tokens",
    "bootstrap_ci",
    "bootstrap_diff",
    "content_tokens",
    "count_message_tokens",
    "count_tokens",
    "decide_winner",
    "f1",
    "f1_multi_answer",
    "group_means",
    "is_refusal",
    "lexical_recall",
    "lexical_recall_multi",
    "normalize_answer",
    "rouge_l",
    "rouge_n",
    "rouge_scores",
    "rouge_tokenize",
    "score_qa",
    "stem_token",
]
