"""The corruption of training/parse_robustness.py: on real parses, a share of the words gets a random head and random
tags, every sentence stays one tree with its root, and the same seed gives the same corruption."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))

from parse_robustness import corrupt  # noqa: E402

from hf_srcfeat.dependency_tree import top_down_order  # noqa: E402


def is_one_tree(heads: list[int]) -> bool:
    """One root, and every word reached from it (`top_down_order` raises on a cycle or a detached word)."""
    try:
        return heads.count(0) == 1 and len(top_down_order(heads)) == len(heads)
    except ValueError:
        return False


def test_corrupted_parses_stay_trees_and_change_about_the_share_asked(stanza_annotator, test_sentences):
    parses = stanza_annotator.annotate(test_sentences[:30])
    labels = {name: sorted({getattr(w, name) for s in parses for w in s.words}) for name in ("upos", "xpos", "deprel")}
    assert [corrupt(s, 0.0, random.Random(1), labels) for s in parses] == parses
    corrupted = [corrupt(s, 0.5, random.Random(f"1-{i}"), labels) for i, s in enumerate(parses)]
    assert corrupted == [corrupt(s, 0.5, random.Random(f"1-{i}"), labels) for i, s in enumerate(parses)]
    changed = words = 0
    for before, after in zip(parses, corrupted, strict=True):
        assert is_one_tree([word.head for word in after.words]), after
        assert [word.text for word in after.words] == [word.text for word in before.words]
        changed += sum(a.upos != b.upos or a.head != b.head for a, b in zip(after.words, before.words, strict=True))
        words += len(before.words)
    assert 0.25 < changed / words < 0.55, changed / words
