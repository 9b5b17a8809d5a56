"""Tree quantities behind the source features: depths, all-pairs tree distances, and Algorithm 1 phrases
(Xu et al. 2020) on dependency subtrees, checked on gold UD English-EWT trees."""

from __future__ import annotations

import pytest

from hf_srcfeat.dependency_tree import dependency_distances, top_down_order, tree_depths
from hf_srcfeat.parse_phrases import parse_phrases, phrase_token_limit

from .helpers import bfs_distances


def test_distances_equal_breadth_first_search_on_every_gold_ewt_dev_tree(ewt_dev_sample):
    for sentence in ewt_dev_sample:
        assert dependency_distances(sentence.heads).tolist() == bfs_distances(sentence.heads), sentence.sentence_id


def test_depth_is_the_distance_to_the_root(ewt_dev_sample):
    for sentence in ewt_dev_sample[:50]:
        root = sentence.heads.index(0)
        assert tree_depths(sentence.heads) == dependency_distances(sentence.heads)[root].tolist()


def test_heads_that_are_not_one_tree_are_rejected():
    with pytest.raises(ValueError, match="do not form one tree"):
        top_down_order([2, 1, 0])


@pytest.mark.parametrize(("tokens", "limit"), [(5, 3), (18, 3), (24, 4), (36, 6), (48, 8), (200, 8)])
def test_phrase_length_limit_follows_footnote_2(tokens, limit):
    assert phrase_token_limit(tokens) == limit


def test_phrases_of_a_gold_sentence_match_algorithm_1_worked_by_hand(ewt_dev_sample):
    # "From the AP comes this story :" -- from the right: ":" (depth 1) takes its same-depth neighbour
    # "this story"; "comes" (4 tokens with its subtree, over the limit of 3) stands alone; "From the AP" fits.
    sentence = ewt_dev_sample[0]
    words = [word.text for word in sentence.words]
    assert words == ["From", "the", "AP", "comes", "this", "story", ":"]
    phrases = parse_phrases(sentence.heads, [1] * len(words), phrase_token_limit(len(words)))
    assert [[words[i] for i in phrase] for phrase in phrases] == [["From", "the", "AP"], ["comes"],
                                                                  ["this", "story", ":"]]


def test_phrases_are_contiguous_cover_every_word_and_respect_the_limit(ewt_dev_sample):
    for sentence in ewt_dev_sample:
        token_counts = [1 + len(word.text) // 6 for word in sentence.words]  # some words of several subwords
        limit = phrase_token_limit(sum(token_counts))
        phrases = parse_phrases(sentence.heads, token_counts, limit)
        assert [index for phrase in phrases for index in phrase] == list(range(len(sentence.words)))
        for phrase in phrases:
            assert len(phrase) == 1 or sum(token_counts[i] for i in phrase) <= limit, (sentence.sentence_id, phrase)


def test_phrases_of_a_word_with_its_dependents_are_one_subtree_when_it_fits(ewt_dev_sample):
    # With a generous limit, every sentence whose whole tree fits becomes a single phrase.
    sentence = next(s for s in ewt_dev_sample if 4 <= len(s.words) <= 8)
    assert parse_phrases(sentence.heads, [1] * len(sentence.words), 8) == [list(range(len(sentence.words)))]
