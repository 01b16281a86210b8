"""Contextual biasing: the recogniser's greedy choice leans toward the words an assistant knows.

A small recogniser hears "the passenger window" said by a voice it was not trained on as "a pass in Juglindo",
"the fan" as "the pan", "heated seats" as "key that seeds": in each the right token was a close second. Given
the phrases a profile's requests are made of (`agent/profiles/understanding.py`'s vocabulary), every token that
starts one of them, or goes on with one already begun, is `bonus` more likely (natural log) at each step of the
decoding. A token the model is sure of is never overruled; only near ties move. Sans-I/O: a trie of token
sequences, asked for the tokens to boost after a prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

_Node = dict[int, "_Node"]


class PhraseBias:
    """Phrases as token sequences (each beginning a word), and how much each token along them is favoured."""

    def __init__(self, phrases: Iterable[Sequence[int]], bonus: float) -> None:
        if bonus < 0:
            raise ValueError(f"a bias's bonus is a log-likelihood it adds, at least 0 (not {bonus})")
        self.bonus = bonus
        self._root: _Node = {}
        self.phrases = 0
        for tokens in phrases:
            if not tokens:
                continue
            node = self._root
            for token in tokens:
                node = node.setdefault(int(token), {})
            self.phrases += 1
        self._starts = np.array(sorted(self._root), dtype=np.int64)
        self._start_boost = np.zeros(0, np.float32)  # `bonus` at every phrase's first token, sized at first use

    def applied(self, logits: np.ndarray, prefix: Sequence[int]) -> np.ndarray:
        """`logits` (one step's, over the vocabulary) with the favoured tokens `bonus` higher."""
        if self._start_boost.size != logits.shape[-1]:
            self._start_boost = np.zeros(logits.shape[-1], np.float32)
            self._start_boost[self._starts] = self.bonus
        biased = logits + self._start_boost
        going_on = np.fromiter(self.going_on(prefix), np.int64)
        biased[going_on] = logits[going_on] + self.bonus  # once, a phrase's first token or not
        return biased

    def going_on(self, prefix: Sequence[int]) -> set[int]:
        """The tokens that go on with a phrase the end of `prefix` is partway through (a phrase's first token
        is favoured anywhere)."""
        chosen: set[int] = set()
        for start in range(len(prefix)):
            node: _Node | None = self._root.get(prefix[start])
            for token in prefix[start + 1 :]:
                if node is None:
                    break
                node = node.get(token)
            if node:
                chosen.update(node)
        return chosen
