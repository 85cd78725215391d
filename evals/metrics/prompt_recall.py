"""What of a question's answer reached a prompt: answer words and evidence turns (judge-free).

* ``answer_recall``: the share of the gold answer's distinct content words present in the
  prompt (``lexical_recall``: LoCoMo's normaliser, Porter stems, stopwords dropped).
* ``turn_present``: a conversation turn reached the prompt when its text is in it verbatim
  (whitespace folded), or when more than half of its distinct content words are.
* ``evidence_recall``: the share of a question's evidence turns present (None without evidence).
* ``BM25``: Okapi BM25 over turns on the same content words (a baseline's ranking).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from .lexical_recall import content_tokens, lexical_recall
from .token_f1 import answer_tokens

__all__ = ["BM25", "EVIDENCE_WORD_SHARE", "PromptText", "answer_recall", "evidence_recall", "turn_present"]

EVIDENCE_WORD_SHARE = 0.5
"""A turn counts as present when more than this share of its content words is in the prompt."""

_SPACE = re.compile(r"\s+")


def _folded(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


class PromptText:
    """A prompt's text prepared once for many look-ups (verbatim and by stemmed words)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.folded = _folded(text)
        self.words = set(answer_tokens(text))


def answer_recall(gold: str, prompt: PromptText | str) -> float:
    text = prompt.text if isinstance(prompt, PromptText) else prompt
    return lexical_recall(gold, text)


def turn_present(turn_text: str, prompt: PromptText, *, verbatim_only: bool = False) -> bool:
    if _folded(turn_text) and _folded(turn_text) in prompt.folded:
        return True
    if verbatim_only:
        return False
    words = set(content_tokens(turn_text))
    if not words:
        return False
    return len(words & prompt.words) / len(words) > EVIDENCE_WORD_SHARE


def evidence_recall(evidence_texts: Sequence[str], prompt: PromptText, *, verbatim_only: bool = False) -> float | None:
    """The share of evidence turns present (``verbatim_only``: only whole turns count; the word
    share is lenient on a long prompt, where a short turn's common words are often all there)."""
    if not evidence_texts:
        return None
    return sum(turn_present(t, prompt, verbatim_only=verbatim_only) for t in evidence_texts) / len(evidence_texts)


class BM25:
    """Okapi BM25 (k1 = 1.2, b = 0.75) over ``documents``, on their content words."""

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(content_tokens(d)) for d in documents]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        df: Counter[str] = Counter()
        for d in self.docs:
            df.update(d.keys())
        n = len(self.docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def scores(self, query: str) -> list[float]:
        terms = set(content_tokens(query))
        out = []
        for doc, length in zip(self.docs, self.lengths):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * length / self.avg) if self.avg else self.k1
            for t in terms:
                tf = doc.get(t, 0)
                if tf:
                    s += self.idf[t] * tf * (self.k1 + 1) / (tf + norm)
            out.append(s)
        return out

    def ranked(self, query: str) -> list[int]:
        """Document indices best first (ties in document order); documents scoring 0 are left out."""
        scores = self.scores(query)
        return [i for i in sorted(range(len(scores)), key=lambda i: (-scores[i], i)) if scores[i] > 0]
