"""SourceFeatureTokenizer: raw text or gold CoNLL-U trees -> subwords with every word feature aligned, padded
and truncated consistently, saved and reloaded exactly, and robust to awkward input."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer, DataCollatorForSeq2Seq

from hf_srcfeat import SOURCE_FEATURE_NAMES, AnnotatedSentence, SourceFeatureTokenizer
from hf_srcfeat.feature_vocabulary import SPECIAL_ID, UNK_ID
from hf_srcfeat.tokenization_source_features import train_source_feature_tokenizer

from .helpers import bfs_distances

PER_TOKEN = [name for name in SOURCE_FEATURE_NAMES if name != "dep_distance"]


def token_positions_of_words(word_ids: list[int]) -> dict[int, list[int]]:
    positions: dict[int, list[int]] = {}
    for position, word in enumerate(word_ids):
        if word >= 0:
            positions.setdefault(word, []).append(position)
    return positions


def test_every_subword_of_a_word_carries_that_words_features(feature_tokenizer, test_sentences):
    vocab = feature_tokenizer.feature_vocabularies
    sentences = feature_tokenizer.annotate(test_sentences)
    encoding = feature_tokenizer(test_sentences)
    for sentence, ids, *features in zip(sentences, encoding["input_ids"], *(encoding[n] for n in PER_TOKEN),
                                        strict=True):
        row = dict(zip(PER_TOKEN, features, strict=True))
        positions = token_positions_of_words(row["word_ids"])
        assert sorted(positions) == list(range(len(sentence.words))), "every word has at least one subword"
        for word_index, word in enumerate(sentence.words):
            tokens = positions[word_index]
            assert feature_tokenizer.decode([ids[p] for p in tokens]).strip() == word.text
            for position in tokens:
                assert row["pos_ids"][position] == vocab.pos.id(word.upos)
                assert row["lemma_ids"][position] == vocab.lemma.id(word.lemma)
                assert row["deprel_ids"][position] == vocab.deprel.id(word.deprel)
        assert ids[-1] == feature_tokenizer.eos_token_id and row["word_ids"][-1] == -1
        assert all(row[name][-1] == SPECIAL_ID for name in ("pos_ids", "lemma_ids", "deprel_ids",
                                                            "subword_tag_ids"))


def test_source_subwords_keep_the_raw_texts_spacing(feature_tokenizer, test_sentences):
    encoding = feature_tokenizer(test_sentences)
    decoded = feature_tokenizer.batch_decode(encoding["input_ids"], skip_special_tokens=True)
    assert [text.strip() for text in decoded] == [" ".join(text.split()) for text in test_sentences]


def test_dependency_distances_equal_breadth_first_search_on_gold_ewt_trees(feature_tokenizer, ewt_dev_sample):
    encoding = feature_tokenizer(annotations=ewt_dev_sample)
    for sentence, word_ids, distances in zip(ewt_dev_sample, encoding["word_ids"], encoding["dep_distance"],
                                             strict=True):
        reference = bfs_distances(sentence.heads)
        for i, word_i in enumerate(word_ids):
            for j, word_j in enumerate(word_ids):
                expected = -1 if word_i < 0 or word_j < 0 else reference[word_i][word_j]
                assert distances[i][j] == expected, (sentence.sentence_id, i, j)


def test_subword_tags_are_begin_inside_end_single_within_each_gold_word(feature_tokenizer, ewt_dev_sample):
    tag = feature_tokenizer.feature_vocabularies.subword_tag.id
    encoding = feature_tokenizer(annotations=ewt_dev_sample)
    multi = 0
    for word_ids, tags in zip(encoding["word_ids"], encoding["subword_tag_ids"], strict=True):
        for positions in token_positions_of_words(word_ids).values():
            expected = ["S"] if len(positions) == 1 else ["B"] + ["I"] * (len(positions) - 2) + ["E"]
            assert [tags[p] for p in positions] == [tag(t) for t in expected]
            multi += len(positions) > 2
    assert multi > 50, "the sample must exercise I tags"


def test_phrase_ids_number_contiguous_phrases_from_zero(feature_tokenizer, ewt_dev_sample):
    encoding = feature_tokenizer(annotations=ewt_dev_sample[:100])
    for phrase_ids, word_ids in zip(encoding["phrase_ids"], encoding["word_ids"], strict=True):
        real = [p for p, w in zip(phrase_ids, word_ids, strict=True) if w >= 0]
        assert real[0] == 0 and all(b - a in (0, 1) for a, b in zip(real, real[1:], strict=False))
        words_of_phrase: dict[int, set[int]] = {}
        for p, w in zip(phrase_ids, word_ids, strict=True):
            words_of_phrase.setdefault(p, set()).add(w)
        # A word is never split between phrases.
        assert sum(len(words) for p, words in words_of_phrase.items() if p >= 0) == len(set(word_ids) - {-1})


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_a_padded_batch_gives_what_each_sentence_gives_alone(feature_tokenizer, test_sentences, padding_side):
    batch = feature_tokenizer(test_sentences, padding=True, padding_side=padding_side, return_tensors="pt")
    length = batch["input_ids"].shape[1]
    assert batch["dep_distance"].shape == (len(test_sentences), length, length)
    for index, text in enumerate(test_sentences):
        alone = feature_tokenizer(text, return_tensors="pt")
        size = alone["input_ids"].shape[1]
        real = slice(0, size) if padding_side == "right" else slice(length - size, length)
        for name in ("input_ids", "attention_mask", *PER_TOKEN):
            assert torch.equal(batch[name][index, real], alone[name][0]), name
        assert torch.equal(batch["dep_distance"][index, real, real], alone["dep_distance"][0])
        padded = torch.ones(length, dtype=torch.bool)
        padded[real] = False
        assert (batch["dep_distance"][index, padded] == -1).all()
        assert (batch["dep_distance"][index][:, padded] == -1).all()
        assert (batch["pos_ids"][index, padded] == 0).all() and (batch["word_ids"][index, padded] == -1).all()


@pytest.mark.parametrize("names", [(), ("subword_tag_ids",), ("pos_ids", "dep_distance"), ("phrase_ids", "word_ids")])
def test_named_source_features_are_the_only_ones_encoded_and_equal_the_full_encoding(feature_tokenizer,
                                                                                    test_sentences, names):
    sentences = feature_tokenizer.annotate(test_sentences)
    full = feature_tokenizer(annotations=sentences, padding=True, return_tensors="pt")
    some = feature_tokenizer(annotations=sentences, padding=True, return_tensors="pt", source_feature_names=names,
                             return_dep_distance="dep_distance" in names, return_word_heads=False)
    assert set(some) == {"input_ids", "attention_mask", *names}
    for name in some:
        assert torch.equal(some[name], full[name]), name


def test_raw_text_asked_only_for_features_without_a_parse_is_segmented_and_encodes_the_same(
        feature_tokenizer, test_sentences, monkeypatch):
    depths = []
    annotate = SourceFeatureTokenizer.annotate
    monkeypatch.setattr(SourceFeatureTokenizer, "annotate", lambda tokenizer, texts, **options: depths.append(
        options.get("words_only", False)) or annotate(tokenizer, texts, **options))
    options = dict(source_feature_names=("subword_tag_ids",), return_dep_distance=False, return_word_heads=False)
    segmented = feature_tokenizer(test_sentences, padding=True, return_tensors="pt", **options)
    parsed = feature_tokenizer(annotations=annotate(feature_tokenizer, test_sentences), padding=True,
                               return_tensors="pt", **options)
    assert depths == [True] and set(segmented) == {"input_ids", "attention_mask", "subword_tag_ids"}
    for name in parsed:
        assert torch.equal(segmented[name], parsed[name]), name
    feature_tokenizer(test_sentences[:1], source_feature_names=("pos_ids",), return_dep_distance=False,
                      return_word_heads=False)
    feature_tokenizer(test_sentences[:1], source_feature_names=())  # the tree (dep_distance) is still asked for
    assert depths[1:] == [False, False], "a tag or the tree needs the parse"


def test_truncation_cuts_every_feature_at_the_same_token(feature_tokenizer, ewt_dev_sample):
    sentence = max(ewt_dev_sample, key=lambda s: len(s.words))
    full = feature_tokenizer(annotations=sentence)
    cut = feature_tokenizer(annotations=sentence, truncation=True, max_length=12)
    assert len(cut["input_ids"]) == 12 and cut["input_ids"][-1] == feature_tokenizer.eos_token_id
    assert cut["input_ids"][:11] == full["input_ids"][:11]
    for name in PER_TOKEN:
        assert cut[name][:11] == full[name][:11], name
    assert [row[:11] for row in cut["dep_distance"][:11]] == [row[:11] for row in full["dep_distance"][:11]]
    assert cut["dep_distance"][11] == [-1] * 12


def test_truncating_a_padded_batch_pads_to_the_longest_row_without_warnings(feature_tokenizer, test_sentences):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        longest = feature_tokenizer(test_sentences, padding=True, truncation=True, max_length=64)
    assert {len(row) for row in longest["input_ids"]} == {max(len(row) for row in feature_tokenizer(test_sentences)
                                                               ["input_ids"])}
    to_max = feature_tokenizer(test_sentences, padding="max_length", truncation=True, max_length=64)
    assert {len(row) for row in to_max["input_ids"]} == {64}
    assert {len(row) for row in to_max["dep_distance"]} == {64}


def test_labels_are_the_plain_subwords_of_the_target(feature_tokenizer, subword_tokenizer, train_pairs):
    sources, targets = list(train_pairs["source"])[:3], list(train_pairs["target"])[:3]
    encoding = feature_tokenizer(sources, text_target=targets)
    assert encoding["labels"] == subword_tokenizer(text_target=targets)["input_ids"]
    assert feature_tokenizer(text_target=targets)["input_ids"] == encoding["labels"]


def test_save_and_reload_through_auto_tokenizer_reproduce_encodings_exactly(feature_tokenizer, ewt_dev_sample,
                                                                             tmp_path):
    feature_tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "feature_vocab.json").exists() and (tmp_path / "tokenizer.json").exists()
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(reloaded, SourceFeatureTokenizer)
    assert reloaded.feature_vocabularies == feature_tokenizer.feature_vocabularies
    sample = ewt_dev_sample[:40]
    assert reloaded(annotations=sample) == feature_tokenizer(annotations=sample)
    # The subword merges survive (Transformers 5 can silently rebuild a merge-less BPE on reload).
    long_word = "skateboarding"
    assert reloaded.tokenize(long_word) == feature_tokenizer.tokenize(long_word)
    assert len(reloaded.tokenize(long_word)) < len(long_word)


@pytest.mark.parametrize("subword_model", ["bpe", "unigram"])
def test_training_helper_builds_a_joint_vocabulary_and_the_feature_vocabularies(train_pairs, train_annotations,
                                                                                subword_model):
    sources, targets = list(train_pairs["source"])[:300], list(train_pairs["target"])[:300]
    tokenizer = train_source_feature_tokenizer(sources, targets, vocab_size=600, subword_model=subword_model,
                                               source_annotations=train_annotations)
    assert 300 < len(tokenizer) <= 600
    # Subwords never cross the parser's words, and mostly equal the raw text's own subwords.
    aligned = tokenizer(annotations=train_annotations[:100])["input_ids"]
    raw = tokenizer(sources[:100], source_features=False)["input_ids"]
    assert sum(a == b for a, b in zip(aligned, raw, strict=True)) >= 90
    german = tokenizer(text_target=["Ein Mann schläft."])["input_ids"]
    assert tokenizer.unk_token_id not in german, "the target side is part of the subword vocabulary"
    sizes = tokenizer.feature_vocabularies.sizes()
    assert sizes["num_pos_tags"] == 20 and sizes["num_subword_tags"] == 7 and sizes["num_lemmas"] > 100
    with pytest.raises(ValueError, match="source_texts is empty"):
        train_source_feature_tokenizer([], targets)


def test_an_xpos_tokenizer_carries_penn_treebank_tags_and_keeps_the_choice_when_saved(
    train_pairs, train_annotations, tmp_path
):
    sources, targets = list(train_pairs["source"])[:300], list(train_pairs["target"])[:300]
    tokenizer = train_source_feature_tokenizer(sources, targets, vocab_size=600, source_annotations=train_annotations,
                                               pos_tagset="xpos")
    vocabulary = tokenizer.feature_vocabularies.pos
    assert {"NN", "NNS", "VBZ", "VBG", "DT", "IN", "JJ"} <= set(vocabulary.labels), "Penn Treebank tags"
    assert 20 < len(vocabulary) <= 48 and "NOUN" not in vocabulary.labels
    sentence = train_annotations[0]
    encoded = tokenizer(annotations=sentence)
    word_tags = [vocabulary.labels[encoded["pos_ids"][i]] for i, word in enumerate(encoded["word_ids"]) if word >= 0]
    expected = [sentence.words[word].xpos for word in encoded["word_ids"] if word >= 0]
    assert word_tags == expected
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded.feature_vocabularies.pos_tagset == "xpos"
    assert reloaded(annotations=sentence) == encoded
    upos = train_source_feature_tokenizer(sources, targets, vocab_size=600, source_annotations=train_annotations)
    assert "pos_tagset" not in upos.feature_vocabularies.to_dict(), "the default leaves old files unchanged"
    with pytest.raises(ValueError, match="pos_tagset"):
        train_source_feature_tokenizer(sources, targets, vocab_size=600, source_annotations=train_annotations,
                                       pos_tagset="penn")


def test_every_subword_carries_its_words_morphological_features(feature_tokenizer, ewt_dev_sample):
    vocabulary = feature_tokenizer.feature_vocabularies.feats
    assert vocabulary is not None and "Number=Plur" in vocabulary.labels
    for sentence in ewt_dev_sample[:20]:
        encoded = feature_tokenizer(annotations=sentence)
        expected = [vocabulary.id(sentence.words[word].feats) if word >= 0 else 2 for word in encoded["word_ids"]]
        assert encoded["feats_ids"] == expected


def test_a_loaded_tokenizer_saved_again_records_nothing_about_how_it_was_loaded(feature_tokenizer, tmp_path):
    feature_tokenizer.save_pretrained(tmp_path / "first")
    AutoTokenizer.from_pretrained(tmp_path / "first", local_files_only=True).save_pretrained(tmp_path / "again")
    saved = json.loads((tmp_path / "again" / "tokenizer_config.json").read_text())
    assert not {"is_local", "local_files_only"} & set(saved), "a Hub repository's config is not 'local'"
    assert saved["annotator_settings"] == feature_tokenizer.annotator_settings
    feature_tokenizer(["A dog runs."], truncation=True, max_length=4)  # a call that sets truncation on the backend
    feature_tokenizer.save_pretrained(tmp_path / "after_a_call")
    assert (tmp_path / "after_a_call" / "tokenizer.json").read_bytes() == \
        (tmp_path / "first" / "tokenizer.json").read_bytes(), "the same tokenizer, the same bytes"


def test_a_tokenizer_saved_before_morphological_features_encodes_without_them(feature_tokenizer, tmp_path):
    feature_tokenizer.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "feature_vocab.json").read_text())
    del saved["feats"]
    (tmp_path / "feature_vocab.json").write_text(json.dumps(saved))
    old = AutoTokenizer.from_pretrained(tmp_path)
    assert old.feature_vocabularies.feats is None and "num_morph_features" not in old.feature_vocabularies.sizes()
    encoded = old("A dog runs.")
    assert "feats_ids" not in encoded and encoded["pos_ids"] == feature_tokenizer("A dog runs.")["pos_ids"]


def test_unseen_lemmas_and_relations_map_to_unk_or_their_base_relation(feature_tokenizer):
    vocab = feature_tokenizer.feature_vocabularies
    sentence = AnnotatedSentence.from_features(
        ["Zorblax", "glimmered", "."], ["PROPN", "VERB", "PUNCT"], ["Zorblax", "glimmer", "."],
        ["nsubj:unseen", "root", "weirdrel"], [2, 0, 2])
    encoding = feature_tokenizer(annotations=sentence)
    assert encoding["lemma_ids"][0] == UNK_ID
    assert encoding["deprel_ids"][0] == vocab.deprel.id("nsubj") != UNK_ID
    assert encoding["deprel_ids"][-2] == UNK_ID


def test_a_sentence_built_from_features_and_its_text_gets_the_subwords_of_the_raw_text(feature_tokenizer):
    """Without its text every word is followed by a space (`man ,`), which training never saw; with it, the words'
    spacing is read from the text, and a text that does not spell the words is refused, naming the word."""
    text = "A man, wearing a hat, rides a bike."
    parsed = feature_tokenizer.annotate([text])[0]
    features = ([word.text for word in parsed.words], [word.upos for word in parsed.words],
                [word.lemma for word in parsed.words], [word.deprel for word in parsed.words], parsed.heads)
    expected = feature_tokenizer(annotations=parsed)["input_ids"]
    assert feature_tokenizer(annotations=AnnotatedSentence.from_features(*features, text=text))["input_ids"] == \
        expected
    assert feature_tokenizer(annotations=AnnotatedSentence.from_features(*features))["input_ids"] != expected
    with pytest.raises(ValueError, match=r"word 2 \('man'\) is not where the text goes on"):
        AnnotatedSentence.from_features(*features, text="A woman, wearing a hat, rides a bike.")


def test_max_length_without_truncation_truncates_and_return_attention_mask_false_drops_the_mask(feature_tokenizer):
    """As Transformers' tokenizers do."""
    with pytest.warns(UserWarning, match="max_length is given without truncation: truncating to it"):
        cut = feature_tokenizer(["A dog runs very fast in the green park."], max_length=4)
    assert cut["input_ids"] == feature_tokenizer(["A dog runs very fast in the green park."], truncation=True,
                                                 max_length=4)["input_ids"] and len(cut["input_ids"][0]) == 4
    assert "attention_mask" not in feature_tokenizer("A dog runs.", return_attention_mask=False)


def test_tokenizer_pad_and_seq2seq_collator_pad_every_feature(feature_tokenizer, train_pairs):
    sources, targets = list(train_pairs["source"])[:2], list(train_pairs["target"])[:2]
    examples = [feature_tokenizer(s, text_target=t) for s, t in zip(sources, targets, strict=True)]
    batch = DataCollatorForSeq2Seq(feature_tokenizer)([dict(e) for e in examples])
    length = max(len(e["input_ids"]) for e in examples)
    assert batch["dep_distance"].shape == (2, length, length)
    assert all(batch[name].shape == (2, length) for name in PER_TOKEN)
    assert (batch["labels"] == -100).any() or len({len(e["labels"]) for e in examples}) == 1
    broken = dict(examples[0])
    broken["pos_ids"] = broken["pos_ids"][:-1]
    with pytest.raises(ValueError, match="`pos_ids` has .* entries but input_ids has"):
        feature_tokenizer.pad([broken, dict(examples[1])])


def test_datasets_map_stores_features_that_collate_back_identically(feature_tokenizer, test_sentences):
    dataset = Dataset.from_dict({"source": test_sentences})
    mapped = dataset.map(lambda batch: feature_tokenizer(batch["source"]), batched=True, batch_size=3,
                         remove_columns=["source"])
    assert set(mapped.column_names) == {"input_ids", "attention_mask", *SOURCE_FEATURE_NAMES}
    collated = feature_tokenizer.pad([mapped[i] for i in range(len(mapped))], return_tensors="pt")
    direct = feature_tokenizer(test_sentences, padding=True, return_tensors="pt")
    assert all(torch.equal(collated[name], direct[name]) for name in direct)


def test_pre_split_words_are_parsed_without_retokenization(feature_tokenizer):
    words = ["A", "dog", "runs", "."]
    encoding = feature_tokenizer([words], is_split_into_words=True)
    assert sorted(set(encoding["word_ids"][0]) - {-1}) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="non-empty words without spaces"):
        feature_tokenizer([["A", "hot dog"]], is_split_into_words=True)


@pytest.mark.parametrize("text", [" ", "", "\n\t "])
def test_empty_or_whitespace_text_raises_a_value_error_saying_so(feature_tokenizer, text):
    with pytest.raises(ValueError, match="empty or whitespace only"):
        feature_tokenizer(["A dog runs.", text])


@pytest.mark.parametrize("text", [
    "A man\x07 in a\x00 red\x1b hat.",  # control characters
    "Two kids 😀🎉 laugh at a 🐶.",  # emoji
    "Visit https://example.org/a?b=c&d=e or mail info@example.com now.",  # URL and e-mail address
    "Москва — столица России.",  # Cyrillic
    "东京是日本的首都。",  # Chinese, no spaces
    "القاهرة مدينة كبيرة",  # Arabic, right to left
])
def test_awkward_text_keeps_every_feature_the_length_of_the_tokens(feature_tokenizer, text):
    encoding = feature_tokenizer(text)
    length = len(encoding["input_ids"])
    assert length >= 2
    assert all(len(encoding[name]) == length for name in PER_TOKEN)
    assert len(encoding["dep_distance"]) == length and all(len(row) == length for row in encoding["dep_distance"])


@pytest.mark.slow
def test_a_thousand_word_sentence_encodes_with_all_features(feature_tokenizer, train_pairs):
    words = " ".join(list(train_pairs["source"])[:120]).split()[:1000]
    text = " ".join(words)
    encoding = feature_tokenizer(text, return_tensors="pt")
    length = encoding["input_ids"].shape[1]
    assert length > 1000
    assert encoding["dep_distance"].shape == (1, length, length)
    assert all(encoding[name].shape == (1, length) for name in PER_TOKEN)
    assert int(encoding["word_ids"].max()) >= 999
    truncated = feature_tokenizer(text, truncation=True, max_length=256, return_tensors="pt")
    assert truncated["dep_distance"].shape == (1, 256, 256)


def test_stored_trees_collate_into_the_distances_the_tokenizer_gives(feature_tokenizer, test_sentences, tiny_config):
    """O(S) storage: `return_dep_distance=False` keeps the words' heads instead of the [S, S] matrix, and
    SourceFeatureCollator builds the same padded matrix per batch, so every model sees identical inputs."""
    from hf_srcfeat import DepsSanConfig, DepsSanForConditionalGeneration
    from hf_srcfeat.data.batching import SourceFeatureCollator

    sentences = test_sentences[:5]
    direct = feature_tokenizer(sentences, text_target=sentences, truncation=True, max_length=12, padding=True,
                               return_tensors="pt")
    stored = feature_tokenizer(sentences, text_target=sentences, truncation=True, max_length=12,
                               return_dep_distance=False)
    assert "dep_distance" not in stored and all(isinstance(heads[0], int) for heads in stored["word_heads"])
    rows = [{name: stored[name][index] for name in stored} for index in range(len(sentences))]
    collated = SourceFeatureCollator(feature_tokenizer)(rows)
    for name in ("input_ids", "attention_mask", "word_ids", "pos_ids", "phrase_ids", "dep_distance"):
        assert torch.equal(collated[name], direct[name]), name
    torch.manual_seed(0)
    model = DepsSanForConditionalGeneration(DepsSanConfig(**tiny_config().to_diff_dict(), deps_san_heads=[0, 1]))
    labels = {"labels": direct["labels"]}
    assert torch.equal(model(**{**direct, **labels}).logits, model(**{**collated, **labels}).logits)
    with pytest.raises(ValueError, match="return_dep_distance=False is for storing"):
        feature_tokenizer(sentences, padding=True, return_dep_distance=False)


def test_no_tree_at_all_for_a_model_that_reads_no_distances(feature_tokenizer, test_sentences):
    annotations = feature_tokenizer.annotate(test_sentences[:4])
    with_tree = feature_tokenizer(annotations=annotations, padding=True, return_tensors="pt")
    without = feature_tokenizer(annotations=annotations, padding=True, return_tensors="pt",
                                return_dep_distance=False, return_word_heads=False)
    assert set(with_tree) - set(without) == {"dep_distance"}
    for name in without:
        assert torch.equal(without[name], with_tree[name]), name


def test_a_word_level_vocabulary_keeps_the_most_frequent_word_forms_and_maps_the_rest_to_unk(train_pairs):
    from hf_srcfeat.subword_training import build_subword_tokenizer

    sources, targets = list(train_pairs["source"][:500]), list(train_pairs["target"][:500])
    words = build_subword_tokenizer(sources + targets, vocab_size=300, model="word")
    assert words.get_vocab_size() == 300
    encoded = words.encode("A man in a blue shirt is playing a xylophonist's guitar.")
    assert encoded.tokens == ["▁A", "▁man", "▁in", "▁a", "▁blue", "▁shirt", "▁is", "▁playing", "▁a", "<unk>", "'",
                              "s", "<unk>", ".", "</s>"]
    assert words.decode(words.encode("A man in a blue shirt.").ids) == "A man in a blue shirt."
