"""Character-level language modelling data: the shipped names, a
character vocabulary, padded batches, a held-out split, and the bigram
baseline a model has to beat.

A document (one name) becomes ``BOS c1 c2 ... cn BOS``, as in microgpt: the
model reads ``BOS c1 .. cn`` and predicts ``c1 .. cn BOS``, so one token
both starts and ends a name. Documents longer than the context are cut.

The shipped list, ``chainrule/datasets/names.txt``, holds the 5,163
distinct first names of the 1990 US Census name-frequency files
(``dist.male.first`` and ``dist.female.first``, a work of the US
government and so in the public domain), lowercased, one per line.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np
from numpy.typing import ArrayLike

#: Target value for padding: ``cross_entropy`` ignores it.
IGNORE = -100


def shipped_names() -> list[str]:
    """The names dataset shipped with chainrule (5,163 names, a-z)."""
    text = resources.files("chainrule").joinpath("datasets/names.txt").read_text("utf-8")
    return [line for line in text.split() if line]


@dataclass(frozen=True)
class Vocabulary:
    """The characters of a corpus, each an integer id, plus one ``BOS`` id
    (the last) that starts and ends every document."""

    chars: str

    @classmethod
    def from_documents(cls, docs: Sequence[str]) -> Vocabulary:
        """The vocabulary of every character that occurs in ``docs``, sorted."""
        return cls("".join(sorted(set("".join(docs)))))

    @property
    def bos(self) -> int:
        """The id of ``BOS``, one past the last character's."""
        return len(self.chars)

    @property
    def size(self) -> int:
        """The number of ids, the characters and ``BOS``."""
        return len(self.chars) + 1

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.chars)}

    def encode(self, doc: str) -> list[int]:
        """``BOS`` + the ids of ``doc``'s characters + ``BOS``."""
        index = self._index
        try:
            return [self.bos, *(index[c] for c in doc), self.bos]
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: Sequence[int]) -> str:
        """The characters of ``ids``, with every ``BOS`` dropped."""
        return "".join(self.chars[i] for i in ids if i != self.bos)


def split(docs: Sequence[str], held_out: float, seed: int) -> tuple[list[str], list[str]]:
    """Shuffle ``docs`` with ``seed`` and hold out a fraction (at least one
    document, if there are two or more)."""
    order = np.random.default_rng(seed).permutation(len(docs))
    n_held = min(max(1, round(held_out * len(docs))), len(docs) - 1) if len(docs) > 1 else 0
    held = [docs[i] for i in order[:n_held]]
    train = [docs[i] for i in order[n_held:]]
    return train, held


def encode_all(docs: Sequence[str], vocab: Vocabulary, block_size: int) -> list[np.ndarray]:
    """Each document as token ids, cut to ``block_size + 1`` tokens (so it
    gives at most ``block_size`` predictions)."""
    return [np.array(vocab.encode(d)[: block_size + 1], dtype=np.int64) for d in docs]


def batch(seqs: Sequence[np.ndarray], pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets ``(B, T)``, ``T`` the longest sequence's
    predictions; shorter rows are padded (inputs with ``pad``, targets with
    ``IGNORE``, which the loss skips)."""
    T = max(len(s) for s in seqs) - 1
    x = np.full((len(seqs), T), pad, dtype=np.int64)
    y = np.full((len(seqs), T), IGNORE, dtype=np.int64)
    for i, s in enumerate(seqs):
        n = len(s) - 1
        x[i, :n] = s[:-1]
        y[i, :n] = s[1:]
    return x, y


class Bigram:
    """P(next | previous) from counts with add-one smoothing: the baseline
    a language model must beat, fitted on the training documents.

    Stored sparsely: only the pairs that occur, and each row's total, so a
    vocabulary of 10,000 characters costs what its text costs, not a
    10,000 x 10,000 table. ``P(b | a) = (count(a, b) + 1) / (count(a) + V)``.
    """

    def __init__(self, seqs: Sequence[np.ndarray], vocab_size: int) -> None:
        self.vocab_size = vocab_size
        prev, nxt = _pairs(seqs)
        pairs, counts = np.unique(prev * vocab_size + nxt, return_counts=True)
        # a last code larger than any pair's: every lookup lands on an entry
        self._pairs = np.append(pairs, vocab_size * vocab_size)
        self._counts = np.append(counts, 0)
        self._row_totals = np.bincount(prev, minlength=vocab_size)

    def log_prob(self, prev: ArrayLike, nxt: ArrayLike) -> np.ndarray:
        """``log P(nxt | prev)``, elementwise over integer ids."""
        prev, nxt = np.asarray(prev, dtype=np.int64), np.asarray(nxt, dtype=np.int64)
        codes = prev * self.vocab_size + nxt
        at = np.searchsorted(self._pairs, codes)
        counts = np.where(self._pairs[at] == codes, self._counts[at], 0)
        return np.log((counts + 1.0) / (self._row_totals[prev] + self.vocab_size))

    def loss(self, seqs: Sequence[np.ndarray]) -> float:
        """Mean negative log-likelihood per predicted token, in nats."""
        prev, nxt = _pairs(seqs)
        return float(-self.log_prob(prev, nxt).mean()) if len(prev) else math.nan


def _pairs(seqs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Every (previous, next) token pair of ``seqs``, as two id arrays."""
    if not seqs:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    prev = np.concatenate([np.asarray(s[:-1], dtype=np.int64) for s in seqs])
    nxt = np.concatenate([np.asarray(s[1:], dtype=np.int64) for s in seqs])
    return prev, nxt
