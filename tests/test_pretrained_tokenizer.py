"""The feature-aware tokenizer wraps a checkpoint's own tokenizer: Marian's (two SentencePiece models and a joint
vocabulary, a Python tokenizer), NLLB's (SentencePiece BPE with language codes, a fast tokenizer) and mBART-50's,
each built here with its real Transformers class from SentencePiece models trained on Multi30k. On 200 sentences
with punctuation, numbers, hyphens, apostrophes and non-ASCII text the source `input_ids` are exactly the
checkpoint tokenizer's, the labels too, and every subword carries the features of the word its characters belong
to."""

from __future__ import annotations

import gzip
import json
import shutil
import unicodedata

import pytest

from hf_srcfeat.conllu import read_conllu
from hf_srcfeat.tokenization_pretrained_source_features import PretrainedSourceFeatureTokenizer, word_starts
from hf_srcfeat.tokenization_source_features import BASE_FOLDER

spm = pytest.importorskip("sentencepiece")

#: Hand-written sources for what Multi30k and EWT rarely have: non-ASCII letters and symbols, numbers with
#: separators, hyphenation and apostrophes of several kinds.
CRAFTED = [
    "The café's owner, Zoë, sold 3,500 crème brûlées in 2019 — a record!",
    "A well-known Düsseldorf-based NGO didn't reply until 10:45 p.m.",
    "“Naïve” isn’t the word: it's 25.7% cheaper (≈€12).",
    "Señor García’s 2-year-old dog jumps over the 1.5-metre fence.",
    "Two men—one in a red hat—are arguing about Øresund's toll.",
    "She said: «C'est la vie», then left at 8 o'clock.",
]


def train_sentencepiece(folder, name: str, lines: list[str], model_type: str) -> str:
    (folder / f"{name}.txt").write_text("\n".join(lines), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(folder / f"{name}.txt"), model_prefix=str(folder / name),
                                   vocab_size=1200, model_type=model_type, character_coverage=0.9995, bos_id=0,
                                   pad_id=1, eos_id=2, unk_id=3, minloglevel=2)
    return str(folder / f"{name}.model")


@pytest.fixture(scope="module")
def checkpoint_tokenizers(multi30k_dir, tmp_path_factory) -> dict:
    """The three families' tokenizers, saved with save_pretrained and loaded back with AutoTokenizer."""
    from transformers import AutoTokenizer, MarianTokenizer, MBart50Tokenizer, NllbTokenizer

    folder = tmp_path_factory.mktemp("checkpoint_tokenizers")
    with gzip.open(multi30k_dir / "train.en.gz", "rt") as english, gzip.open(multi30k_dir / "train.de.gz", "rt") as german:
        pairs = [(en.strip(), de.strip()) for en, de, _ in zip(english, german, range(4000), strict=False)]
    source = train_sentencepiece(folder, "source", [en for en, _ in pairs] + CRAFTED, "unigram")
    target = train_sentencepiece(folder, "target", [de for _, de in pairs], "unigram")
    joint = train_sentencepiece(folder, "joint", [text for pair in pairs for text in pair] + CRAFTED, "bpe")
    vocabulary: dict[str, int] = {}
    for model in (source, target):
        processor = spm.SentencePieceProcessor(model_file=model)
        for index in range(processor.get_piece_size()):
            vocabulary.setdefault(processor.id_to_piece(index), len(vocabulary))
    (folder / "vocab.json").write_text(json.dumps(vocabulary))
    made = {"marian": MarianTokenizer(source_spm=source, target_spm=target, vocab=str(folder / "vocab.json"),
                                      source_lang="en", target_lang="de")}
    for family, cls, languages in (("nllb", NllbTokenizer, ("eng_Latn", "deu_Latn")),
                                   ("mbart50", MBart50Tokenizer, ("en_XX", "de_DE"))):
        (folder / family).mkdir()
        shutil.copy(joint, folder / family / "sentencepiece.bpe.model")
        made[family] = cls.from_pretrained(str(folder / family), src_lang=languages[0], tgt_lang=languages[1],
                                           additional_special_tokens=list(languages))
    loaded = {}
    for family, tokenizer in made.items():
        tokenizer.save_pretrained(str(folder / f"{family}_saved"))
        loaded[family] = AutoTokenizer.from_pretrained(str(folder / f"{family}_saved"))
    return loaded


@pytest.fixture(scope="module")
def parsed_sources(multi30k_dir, ewt_dir, stanza_annotator) -> list:
    """200 parsed sources: 144 Multi30k test sentences and the crafted ones (Stanza), 50 UD EWT dev sentences
    with their gold trees (web text: URLs, numbers, quotes, contractions)."""
    with gzip.open(multi30k_dir / "test_2016_flickr.en.gz", "rt") as lines:
        multi30k = [line.strip() for line, _ in zip(lines, range(144), strict=False)]
    stanza = stanza_annotator.annotate(multi30k + CRAFTED)
    ewt_file = next(path for path in (ewt_dir / "en_ewt-ud-dev.conllu.gz", ewt_dir / "en_ewt-ud-dev.conllu")
                    if path.exists())
    ewt = [sentence for sentence in read_conllu(ewt_file) if sentence.text][:50]
    return stanza + ewt


@pytest.fixture(scope="module")
def wrapped(checkpoint_tokenizers, parsed_sources) -> dict:
    return {family: PretrainedSourceFeatureTokenizer.build(base, parsed_sources)
            for family, base in checkpoint_tokenizers.items()}


FAMILIES = ["marian", "nllb", "mbart50"]


@pytest.mark.parametrize("family", FAMILIES)
def test_source_ids_and_labels_are_exactly_the_checkpoint_tokenizers(family, wrapped, checkpoint_tokenizers,
                                                                     parsed_sources):
    assert len(parsed_sources) == 200
    base, tokenizer = checkpoint_tokenizers[family], wrapped[family]
    texts = [sentence.text for sentence in parsed_sources]
    targets = [text[::-1] for text in texts[:20]]  # any target text: tokenized by the base tokenizer's target side
    encoded = tokenizer(texts, annotations=parsed_sources)
    assert encoded["input_ids"] == base(texts)["input_ids"]
    with_labels = tokenizer(texts[:20], annotations=parsed_sources[:20], text_target=targets)
    assert with_labels["labels"] == base(text_target=targets)["input_ids"]
    for name in ("pos_ids", "lemma_ids", "deprel_ids", "subword_tag_ids", "word_ids", "phrase_ids", "dep_distance"):
        assert [len(row) for row in encoded[name]] == [len(row) for row in encoded["input_ids"]], name


@pytest.mark.parametrize("family", FAMILIES)
def test_every_subword_carries_the_features_of_the_word_its_characters_belong_to(family, wrapped,
                                                                                  parsed_sources):
    tokenizer = wrapped[family]
    vocabularies = tokenizer.feature_vocabularies
    encoded = tokenizer([s.text for s in parsed_sources], annotations=parsed_sources)
    checked = 0
    for sentence, ids, words, pos, tags in zip(parsed_sources, encoded["input_ids"], encoded["word_ids"],
                                                encoded["pos_ids"], encoded["subword_tag_ids"], strict=True):
        starts = word_starts(sentence, sentence.text)
        tokens = tokenizer.convert_ids_to_tokens(ids)
        for token, word, pos_id in zip(tokens, words, pos, strict=True):
            if word < 0:  # special tokens: language codes, </s>
                assert token in tokenizer.all_special_tokens
                continue
            assert pos_id == vocabularies.pos.id(vocabularies.pos_tag(sentence.words[word]))
            surface = unicodedata.normalize("NFKC", token.replace("▁", ""))
            span = unicodedata.normalize("NFKC", sentence.text[starts[word]:])
            if surface and token != tokenizer.unk_token:
                assert span.startswith(surface) or surface[0] in span[:len(sentence.words[word].text) + 1], \
                    (family, sentence.text, token, sentence.words[word].text)
                checked += 1
        for run in _runs(words, tags):  # a word's subwords are tagged B I ... E, a single one S
            expected = ["S"] if len(run) == 1 else ["B", *["I"] * (len(run) - 2), "E"]
            assert [vocabularies.subword_tag.labels[tag] for tag in run] == expected
    assert checked > 2500


def _runs(words: list[int], tags: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for index, (word, tag) in enumerate(zip(words, tags, strict=True)):
        if word < 0:
            continue
        if index and words[index - 1] == word:
            runs[-1].append(tag)
        else:
            runs.append([tag])
    return runs


@pytest.mark.parametrize("family", FAMILIES)
def test_truncation_and_padding_cut_and_pad_the_features_with_the_ids(family, wrapped, checkpoint_tokenizers,
                                                                      parsed_sources):
    base, tokenizer = checkpoint_tokenizers[family], wrapped[family]
    texts = [sentence.text for sentence in parsed_sources[140:150]]
    options = dict(truncation=True, max_length=9, padding=True)
    encoded = tokenizer(texts, annotations=parsed_sources[140:150], **options)
    assert encoded["input_ids"] == base(texts, **options)["input_ids"]
    assert encoded["attention_mask"] == base(texts, **options)["attention_mask"]
    for row, mask in zip(encoded["word_ids"], encoded["attention_mask"], strict=True):
        assert all(word == -1 for word, real in zip(row, mask, strict=True) if not real)


@pytest.mark.parametrize("family", FAMILIES)
def test_max_length_alone_truncates_and_return_attention_mask_false_drops_the_mask_as_the_base_does(
        family, wrapped, checkpoint_tokenizers, parsed_sources):
    base, tokenizer = checkpoint_tokenizers[family], wrapped[family]
    texts = [sentence.text for sentence in parsed_sources[140:143]]
    with pytest.warns(UserWarning, match="max_length is given without truncation"):
        encoded = tokenizer(texts, annotations=parsed_sources[140:143], max_length=6)
    assert encoded["input_ids"] == base(texts, max_length=6, truncation=True)["input_ids"]
    assert "attention_mask" not in tokenizer(texts, annotations=parsed_sources[140:143], return_attention_mask=False)


def test_a_wrapped_tokenizer_saves_and_loads_with_its_base(wrapped, parsed_sources, tmp_path):
    tokenizer = wrapped["marian"]
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    loaded = PretrainedSourceFeatureTokenizer.from_pretrained(tmp_path / "tokenizer")
    texts = [sentence.text for sentence in parsed_sources[:30]]
    assert loaded(texts, annotations=parsed_sources[:30]) == tokenizer(texts, annotations=parsed_sources[:30])
    assert loaded.fingerprint() == tokenizer.fingerprint()
    # Saved again (as publishing and exporting do), it records nothing about how it was loaded
    loaded.save_pretrained(tmp_path / "again")
    saved = json.loads((tmp_path / "again" / BASE_FOLDER / "tokenizer_config.json").read_text())
    assert not {"is_local", "local_files_only"} & set(saved)


def test_raw_text_is_parsed_by_the_annotator(wrapped, checkpoint_tokenizers, stanza_annotator):
    tokenizer = PretrainedSourceFeatureTokenizer(checkpoint_tokenizers["nllb"], wrapped["nllb"].feature_vocabularies,
                                                 annotator=stanza_annotator)
    encoded = tokenizer("A dog's owner runs.")
    assert encoded["input_ids"] == checkpoint_tokenizers["nllb"]("A dog's owner runs.")["input_ids"]
    assert encoded["word_ids"][0] == -1 and encoded["word_ids"][1] == 0  # the language code, then "A"


@pytest.mark.slow
def test_a_grafted_marian_model_fine_tunes_with_seq2seq_trainer_and_reloads(checkpoint_tokenizers, parsed_sources,
                                                                            stanza_annotator, multi30k_dir, tmp_path):
    """A Marian checkpoint with its own tokenizer, converted, Deps-SAN grafted on, fine-tuned for 8 steps on parsed
    Multi30k pairs by `Seq2SeqTrainer` with `SourceFeatureCollator`, saved and loaded back."""
    import torch
    from datasets import Dataset
    from transformers import (
        AutoModelForSeq2SeqLM,
        MarianConfig,
        MarianMTModel,
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
    )

    from hf_srcfeat.data.batching import SourceFeatureCollator
    from hf_srcfeat.data.multi30k import load_multi30k
    from hf_srcfeat.pretrained_checkpoints import convert_pretrained, graft

    base = checkpoint_tokenizers["marian"]
    torch.manual_seed(0)
    MarianMTModel(MarianConfig(vocab_size=len(base), pad_token_id=base.pad_token_id, eos_token_id=base.eos_token_id,
                               decoder_start_token_id=base.pad_token_id, d_model=32, encoder_layers=2,
                               decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                               encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128)
                  ).save_pretrained(tmp_path / "opus-mt-tiny")
    tokenizer = PretrainedSourceFeatureTokenizer.build(base, parsed_sources, annotator=stanza_annotator)
    model = graft(convert_pretrained(str(tmp_path / "opus-mt-tiny")), "deps_san", deps_san_layers=[0, 1],
                  **tokenizer.feature_vocabularies.sizes())

    pairs = load_multi30k("val", data_dir=multi30k_dir, limit=64)
    parses = stanza_annotator.annotate(list(pairs["source"]))
    encoded = tokenizer(list(pairs["source"]), annotations=parses, text_target=list(pairs["target"]),
                        truncation=True, max_length=64, return_dep_distance=False)
    arguments = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "run"), max_steps=8, per_device_train_batch_size=16,
                                         learning_rate=3e-3, report_to="none", use_cpu=True, save_strategy="no",
                                         logging_steps=2, remove_unused_columns=False, disable_tqdm=True)
    trainer = Seq2SeqTrainer(model=model, args=arguments, train_dataset=Dataset.from_dict(dict(encoded)),
                             data_collator=SourceFeatureCollator(tokenizer, model=model), processing_class=tokenizer)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < losses[0], losses
    assert model.model.encoder.deps_san_gates.values.abs().sum() > 0
    # Evaluation with the Trainer's default remove_unused_columns=True would run without the tree: refused
    dropping = Seq2SeqTrainer(model=model, args=Seq2SeqTrainingArguments(output_dir=str(tmp_path / "eval"),
                                                                        use_cpu=True, report_to="none"),
                              eval_dataset=Dataset.from_dict(dict(encoded)), processing_class=tokenizer,
                              data_collator=SourceFeatureCollator(tokenizer, model=model))
    with pytest.raises(ValueError, match="not their tree .*set remove_unused_columns=False"):
        dropping.evaluate()
    treeless = [{name: values[row] for name, values in encoded.items() if name != "word_heads"} for row in range(2)]
    batch = SourceFeatureCollator(tokenizer, model=model, require_tree=False)(treeless)  # no tree on purpose
    assert "dep_distance" not in batch and batch["input_ids"].shape[0] == 2

    trainer.save_model(str(tmp_path / "grafted"))
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "grafted").eval()
    reloaded_tokenizer = PretrainedSourceFeatureTokenizer.from_pretrained(tmp_path / "grafted")
    batch = reloaded_tokenizer(list(pairs["source"][:4]), annotations=parses[:4], padding=True, return_tensors="pt")
    model.eval()
    assert torch.equal(loaded.generate(**batch, num_beams=2, max_new_tokens=10),
                       model.generate(**batch, num_beams=2, max_new_tokens=10))


def test_user_factors_are_aligned_to_the_checkpoint_tokenizers_subwords(checkpoint_tokenizers, parsed_sources):
    """A factor no parser gives (here: whether a word is capitalised) travels with its word's subwords."""
    from hf_srcfeat.data.user_factors import attach_factors

    def capitalised(sentence):
        return attach_factors(sentence, {"case": ["cap" if word.text[:1].isupper() else "low"
                                                  for word in sentence.words]})

    sentences = [capitalised(sentence) for sentence in parsed_sources[:40]]
    tokenizer = PretrainedSourceFeatureTokenizer.build(checkpoint_tokenizers["mbart50"], sentences)
    encoded = tokenizer([s.text for s in sentences], annotations=sentences)
    labels = tokenizer.feature_vocabularies.extra["case"].labels
    for sentence, words, values in zip(sentences, encoded["word_ids"], encoded["factor_case_ids"], strict=True):
        for word, value in zip(words, values, strict=True):
            if word >= 0:
                assert labels[value] == sentence.words[word].factor("case")
