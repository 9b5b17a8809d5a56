"""Quantities of a dependency tree given by its heads (1-based, 0 = root, as in CoNLL-U)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def top_down_order(heads: Sequence[int]) -> list[int]:
    """Word indices (0-based) with every head before its dependents, starting at the root."""
    children: list[list[int]] = [[] for _ in range(len(heads) + 1)]
    for index, head in enumerate(heads):
        children[head].append(index + 1)
    order, frontier = [], list(children[0])
    while frontier:
        node = frontier.pop()
        order.append(node - 1)
        frontier.extend(children[node])
    if len(order) != len(heads):
        raise ValueError(f"heads {list(heads)} do not form one tree rooted at 0.")
    return order


def tree_depths(heads: Sequence[int]) -> list[int]:
    """Edges between each word and the root (the root word has depth 0)."""
    depths = [0] * len(heads)
    for index in top_down_order(heads):
        head = heads[index]
        depths[index] = 0 if head == 0 else depths[head - 1] + 1
    return depths


def ancestor_matrix(heads: Sequence[int]) -> np.ndarray:
    """[W, W] float matrix A with A[i, k] = 1 when word k is word i or one of its ancestors."""
    count = len(heads)
    ancestors = np.zeros((count, count), dtype=np.float32)
    for index in top_down_order(heads):
        head = heads[index]
        if head:
            ancestors[index] = ancestors[head - 1]
        ancestors[index, index] = 1.0
    return ancestors


def dependency_distances(heads: Sequence[int]) -> np.ndarray:
    """[W, W] matrix of the number of edges on the tree path between every two words.

    The path between i and j climbs from i to their lowest common ancestor and down to j, so with S[i, j] the
    number of shared ancestors (i and j themselves included): distance = S[i, i] + S[j, j] - 2 S[i, j]. S is
    filled top-down in O(W^2), one row per word: a word shares with j what its head shares with j, plus itself
    when it is an ancestor of j.
    """
    ancestors = ancestor_matrix(heads)
    shared = np.zeros_like(ancestors)
    for index in top_down_order(heads):
        head = heads[index]
        shared[index] = ancestors[:, index] + (shared[head - 1] if head else 0.0)
    sizes = np.diagonal(shared)
    return np.rint(sizes[:, None] + sizes[None, :] - 2.0 * shared).astype(np.int64)


def token_distance_matrix(heads: Sequence[int], word_ids: Sequence[int]) -> np.ndarray:
    """[S, S] tree distances between the words of S tokens (`word_ids`, -1 for special tokens and padding, whose
    rows and columns are -1): what `dep_distance` holds, built from the O(S) pair (heads, word_ids) whenever a
    batch needs it."""
    words = np.asarray(word_ids, dtype=np.int64)
    matrix = np.full((len(words), len(words)), -1, dtype=np.int64)
    is_word = words >= 0
    if is_word.any():
        distances = dependency_distances(heads)
        matrix[np.ix_(is_word, is_word)] = distances[np.ix_(words[is_word], words[is_word])]
    return matrix
