"""Behaviour metrics of completions (OPSFT Fig 7): response length, case-split and logical cues per 1k words.

The cue word lists live here and only here. A *word* is a run of letters (with an optional apostrophe
suffix) or a run of digits, so ``68-7=61, so \\boxed{61}`` has the words 68, 7, 61, so, boxed, 61.
Multi-word cues (``on the other hand``) are counted as phrases. The accuracy std across samples, the
fourth Fig 7 quantity, is :func:`opsft.evals.math.sample_accuracy_std`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# Cues that split the reasoning into cases or alternatives.
CASE_SPLIT_CUES: tuple[str, ...] = (
    "case", "cases", "if", "otherwise", "suppose", "assume", "alternatively", "either", "consider",
    "on the other hand", "else",
)
# Cues that chain or re-examine inferences.
LOGICAL_CUES: tuple[str, ...] = (
    "so", "therefore", "thus", "hence", "because", "since", "then", "implies", "but", "however", "wait",
    "check", "verify",
)
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?|\d+")


def words(text: str) -> list[str]:
    """The lower-cased words of ``text`` (letter runs and digit runs)."""
    return [w.lower() for w in _WORD.findall(text)]


def cue_count(text: str, cues: Sequence[str]) -> int:
    """Occurrences of the cues in ``text``: whole words, or whole-word phrases for multi-word cues."""
    tokens = words(text)
    total = 0
    for cue in cues:
        parts = cue.split()
        total += sum(tokens[i : i + len(parts)] == parts for i in range(len(tokens) - len(parts) + 1))
    return total


def per_thousand_words(texts: Sequence[str], cues: Sequence[str]) -> float:
    """Cue rate over all texts: 1000 * (total cue occurrences) / (total words); 0 when there are no words."""
    n_words = sum(len(words(t)) for t in texts)
    return 1000.0 * sum(cue_count(t, cues) for t in texts) / n_words if n_words else 0.0


@dataclass(frozen=True)
class Behaviour:
    """Fig 7 quantities of a set of completions; ``length`` is the mean length in tokens (or characters)."""

    length: float
    case_split_per_1k: float
    logical_per_1k: float


def behaviour(texts: Sequence[str], lengths: Sequence[int] | None = None) -> Behaviour:
    """Mean response length (``lengths`` in tokens if given, else characters) and both cue rates per 1k words."""
    if not texts:
        raise ValueError("behaviour metrics need at least one completion")
    sizes = lengths if lengths is not None else [len(t) for t in texts]
    return Behaviour(
        length=sum(sizes) / len(sizes),
        case_split_per_1k=per_thousand_words(texts, CASE_SPLIT_CUES),
        logical_per_1k=per_thousand_words(texts, LOGICAL_CUES),
    )
