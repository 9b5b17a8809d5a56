"""Phrases from a dependency parse: Algorithm 1 of Xu et al. (2020), adapted from constituency to dependency
subtrees, for the `phrase_ids` source feature.

The paper walks the tree from the right: it takes the largest subtree at the right edge that fits the
phrase length limit, then prepends adjacent subtrees of the same depth while they fit. Here a "subtree" is
a word with its not yet taken descendants, valid when its words form the right end of the not yet taken
words (so every phrase is a contiguous span). Lengths are counted in subword tokens, as in the paper. Two
readings of the loosely written algorithm, both keeping each phrase within the limit:
- the limit covers the whole phrase (the paper starts the adjacent-subtree budget at n again, which would
  allow phrases of almost 2n tokens, beyond "maximum tokens allowed in a phrase");
- a single word longer than the limit (a word of many subwords) is a phrase of its own, never split.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .dependency_tree import ancestor_matrix


def phrase_token_limit(num_tokens: int) -> int:
    """Footnote 2 of the paper: ntok = max(min(8, seq / 6), 3) tokens per phrase (seq / 6 rounded down)."""
    return max(min(8, num_tokens // 6), 3)


def parse_phrases(heads: Sequence[int], token_counts: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Split the words (0-based indices, left to right) of a tree given by its 1-based `heads` into phrases.

    `token_counts[i]` is the number of subword tokens of word i. Returns the phrases left to right.
    """
    if len(heads) != len(token_counts):
        raise ValueError(f"{len(heads)} heads but {len(token_counts)} token counts.")
    ancestors = ancestor_matrix(heads).astype(bool)
    depths = ancestors.sum(axis=1) - 1
    tokens = np.asarray(token_counts, dtype=np.int64)
    remaining = len(heads)  # the words not yet taken are always the prefix [0, remaining)

    def right_edge_subtree(root: int) -> np.ndarray | None:
        """Words of `root`'s remaining subtree if they form the right end of the remaining words."""
        members = ancestors[:remaining, root]
        first = int(members.argmax())
        return np.arange(first, remaining) if members[first:].all() else None

    def remaining_ancestors(word: int) -> list[int]:
        """`word` and its not yet taken ancestors, bottom-up."""
        return sorted((int(k) for k in np.flatnonzero(ancestors[word, :remaining])), key=lambda k: -depths[k])

    phrases: list[list[int]] = []
    while remaining:
        right = remaining - 1
        phrase, root = np.array([right]), right
        # Step 3: the largest subtree at the right edge within the limit (growing as the root climbs).
        for candidate in remaining_ancestors(right):
            members = right_edge_subtree(candidate)
            if members is None:
                continue
            if tokens[members].sum() > max_tokens:
                break
            phrase, root = members, candidate
        budget = max_tokens - int(tokens[phrase].sum())
        remaining = int(phrase[0])
        # Steps 6-15: prepend adjacent subtrees whose root has the same depth, while they fit.
        while budget > 0 and remaining:
            same_depth = [k for k in remaining_ancestors(remaining - 1) if depths[k] == depths[root]]
            members = right_edge_subtree(same_depth[0]) if same_depth else None
            if members is None or tokens[members].sum() > budget:
                break
            phrase = np.concatenate([members, phrase])
            budget -= int(tokens[members].sum())
            remaining = int(members[0])
        phrases.append(phrase.tolist())
    return phrases[::-1]
