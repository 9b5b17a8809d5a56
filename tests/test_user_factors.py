"""User-supplied factors: read from CoNLL-U MISC (`Factor_<name>=<value>`) and from OpenNMT-py's `word￨value`
lines, given their own vocabulary by the tokenizer, aligned to subwords, and embedded by name by a relevance model
trained end to end on real Multi30k sentences with a casing factor (a classic NMT factor)."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

from hf_srcfeat import (
    AnnotatedSentence,
    FeatureVocabularies,
    RelevanceFeaturesConfig,
    RelevanceFeaturesForConditionalGeneration,
    SrcFeatTransformerConfig,
)
from hf_srcfeat.conllu import read_conllu, write_conllu
from hf_srcfeat.data.multi30k import load_multi30k
from hf_srcfeat.data.user_factors import FACTOR_SEPARATOR, parse_factored_lines, split_factored_line
from hf_srcfeat.subword_training import SPECIAL_TOKENS
from hf_srcfeat.tokenization_source_features import SourceFeatureTokenizer

from .end_to_end import tiny_method_config
from .helpers import random_model, train_briefly
from .test_bad_input import TINY_RUN


def casing(word: str) -> str:
    return "UPPER" if word.isupper() and len(word) > 1 else "Cap" if word[:1].isupper() else \
        "lower" if word.islower() else "other"


def factored(sentence: str) -> str:
    return " ".join(f"{word}{FACTOR_SEPARATOR}{casing(word)}" for word in sentence.split())


def with_case(sentence: AnnotatedSentence, value: str) -> AnnotatedSentence:
    """The sentence with every word's casing factor set to `value`."""
    return dataclasses.replace(sentence, words=[dataclasses.replace(word, factors=(("case", value),))
                                                for word in sentence.words])


def test_conllu_misc_factors_are_read_and_written_back(tmp_path):
    lines = ["# text = Anna runs.", "1\tAnna\tAnna\tPROPN\tNNP\t_\t2\tnsubj\t_\tFactor_ner=B-PER|Factor_case=Cap",
             "2\truns\trun\tVERB\tVBZ\t_\t0\troot\t_\tSpaceAfter=No|Factor_ner=O|Factor_case=lower",
             "3\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\tFactor_ner=O|Factor_case=other", ""]
    [sentence] = list(read_conllu(lines))
    assert sentence.words[0].factors == (("ner", "B-PER"), ("case", "Cap"))
    assert sentence.words[1].factor("ner") == "O" and not sentence.words[1].space_after
    write_conllu([sentence], tmp_path / "out.conllu")
    assert list(read_conllu(tmp_path / "out.conllu")) == [sentence]


def test_a_factored_line_with_a_missing_value_is_refused_naming_line_and_token():
    words, values = split_factored_line(f"Two{FACTOR_SEPARATOR}Cap dogs{FACTOR_SEPARATOR}lower", ["case"])
    assert words == ["Two", "dogs"] and values == {"case": ["Cap", "lower"]}
    with pytest.raises(ValueError, match="line 7: token 'dogs' has 0 factor values, expected 1 \\(case\\)"):
        split_factored_line(f"Two{FACTOR_SEPARATOR}Cap dogs", ["case"], line_number=7)
    with pytest.raises(ValueError, match="line 2: token 'dogs￨': the value of case is empty"):
        split_factored_line(f"Two{FACTOR_SEPARATOR}Cap dogs{FACTOR_SEPARATOR}", ["case"], line_number=2)


@pytest.fixture(scope="module")
def factored_data(stanza_annotator, train_pairs, subword_tokenizer):
    sources = list(train_pairs["source"])[:300]
    parses = parse_factored_lines(stanza_annotator, [factored(source) for source in sources], ["case"])
    tokenizer = SourceFeatureTokenizer(tokenizer_object=subword_tokenizer.backend_tokenizer,
                                       feature_vocabularies=FeatureVocabularies.build(parses),
                                       annotator=stanza_annotator, model_max_length=256, **SPECIAL_TOKENS)
    return tokenizer, parses, list(train_pairs["target"])[:300]


@pytest.mark.slow
def test_the_tokenizer_gives_each_user_factor_its_vocabulary_and_aligns_it_to_subwords(factored_data, tmp_path):
    tokenizer, parses, _ = factored_data
    vocabulary = tokenizer.feature_vocabularies.extra["case"]
    assert {"Cap", "lower", "other"} <= set(vocabulary.labels)
    assert tokenizer.feature_vocabularies.sizes()["extra_factors"] == {"case": len(vocabulary)}
    encoded = tokenizer(annotations=parses[0])
    expected = [vocabulary.id(parses[0].words[word].factor("case")) if word >= 0 else 2
                for word in encoded["word_ids"]]
    assert encoded["factor_case_ids"] == expected
    assert [word.text for word in parses[0].words] == list(parses[0].text.split()), "the given words are kept"
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.feature_vocabularies.extra["case"] == vocabulary
    # A value training never saw reads as <unk>, said once per factor with the first such value
    unseen = with_case(parses[0], "Titlecase")
    with pytest.warns(UserWarning, match="values of the 'case' factor not seen in training get <unk> "
                                         "\\(the first: 'Titlecase'"):
        encoded = loaded(annotations=unseen)
    assert set(encoded["factor_case_ids"][:-1]) == {1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded(annotations=with_case(parses[1], "Other"))


@pytest.mark.slow
def test_a_model_trained_with_a_user_factor_translates_raw_text_with_its_factor(factored_data, test_sentences,
                                                                                stanza_annotator, tmp_path):
    tokenizer, parses, targets = factored_data
    config = tiny_method_config(RelevanceFeaturesConfig, tokenizer, relevance_combine="concat",
                                source_factors=["pos", "case"], **tokenizer.feature_vocabularies.sizes())
    assert config.extra_factors == {"case": len(tokenizer.feature_vocabularies.extra["case"])}
    torch.manual_seed(0)
    model = RelevanceFeaturesForConditionalGeneration(config)
    losses = train_briefly(model, tokenizer, {"source": parses, "target": targets}, steps=60)
    assert sum(losses[-10:]) / 10 < 0.8 * sum(losses[:5]) / 5
    model.eval().save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval(), AutoTokenizer.from_pretrained(tmp_path)
    sentences = parse_factored_lines(stanza_annotator, [factored(text) for text in test_sentences[:4]], ["case"])
    batch = tokenizer(annotations=sentences, padding=True, return_tensors="pt")
    assert "factor_case_ids" in batch
    together = model.generate(**batch, num_beams=4, max_new_tokens=12)
    for index, sentence in enumerate(sentences):
        alone = model.generate(**tokenizer(annotations=sentence, return_tensors="pt"), num_beams=4, max_new_tokens=12)
        assert tokenizer.decode(alone[0], skip_special_tokens=True) == \
            tokenizer.decode(together[index], skip_special_tokens=True)
    # The casing differs between two factor values of one word: the factor reaches the model.
    changed = tokenizer(annotations=sentences[:1], return_tensors="pt")
    changed["factor_case_ids"] = torch.where(changed["factor_case_ids"] > 2, 3, changed["factor_case_ids"])
    assert not torch.equal(model.get_encoder()(**changed).last_hidden_state,
                           model.get_encoder()(**tokenizer(annotations=sentences[:1],
                                                           return_tensors="pt")).last_hidden_state)
    with pytest.warns(UserWarning, match="words without a value of the 'case' factor get <unk>"):
        plain = tokenizer(test_sentences[:1], return_tensors="pt")  # raw text without the factor: <unk>
    assert (plain["factor_case_ids"][0, :-1] == 1).all()
    assert model.generate(**plain, max_new_tokens=5).shape[0] == 1


@pytest.mark.slow
@pytest.mark.parametrize("combine", ["add", "linear", "self_relevance", "word_relevance"])
def test_every_factor_combination_embeds_a_user_factor_by_name(combine, factored_data):
    tokenizer, parses, _ = factored_data
    config = tiny_method_config(RelevanceFeaturesConfig, tokenizer, relevance_combine=combine,
                                source_factors=["pos", "case"], **tokenizer.feature_vocabularies.sizes())
    model = random_model(RelevanceFeaturesForConditionalGeneration, config)
    batch = tokenizer(annotations=parses[:2], padding=True, return_tensors="pt")
    changed = {**batch, "factor_case_ids": torch.where(batch["factor_case_ids"] > 2, 3, batch["factor_case_ids"])}
    assert not torch.equal(batch["factor_case_ids"], changed["factor_case_ids"])
    assert not torch.allclose(model.get_encoder()(**changed).last_hidden_state,
                              model.get_encoder()(**batch).last_hidden_state), "the factor reaches the encoder"


@pytest.mark.slow
def test_the_translate_command_reads_factored_lines(factored_data, test_sentences, tmp_path):
    from hf_srcfeat.commands.translate import main

    tokenizer, _, _ = factored_data
    config = tiny_method_config(RelevanceFeaturesConfig, tokenizer, relevance_combine="concat",
                                source_factors=["case"], **tokenizer.feature_vocabularies.sizes())
    torch.manual_seed(0)
    model = RelevanceFeaturesForConditionalGeneration(config).eval()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    lines = [factored(text) for text in test_sentences[:3]]
    (tmp_path / "input.txt").write_text("\n".join([lines[0], "", *lines[1:]]) + "\n", encoding="utf-8")
    assert main(["--model", str(tmp_path / "model"), "--input", str(tmp_path / "input.txt"), "--output",
                 str(tmp_path / "output.de"), "--input_format", "factored", "--factor_names", "case",
                 "--num_beams", "1", "--max_new_tokens", "8", "--quiet", "--device", "cpu"]) == 0
    output = (tmp_path / "output.de").read_text(encoding="utf-8").splitlines()
    assert len(output) == 4 and output[1] == "" and all(output[index] for index in (0, 2, 3))


@pytest.mark.slow
def test_the_translate_command_refuses_factors_the_model_does_not_read(factored_data, test_sentences, tmp_path,
                                                                       capsys):
    """Factored lines for a model without that factor would be parsed and dropped (or, by a model without source
    features, translated with their values as part of the words): refused before any output, naming the factor."""
    from hf_srcfeat.commands.translate import main

    tokenizer, _, _ = factored_data
    (tmp_path / "input.txt").write_text(factored(test_sentences[0]) + "\n", encoding="utf-8")
    for name, config in (("pos_only", tiny_method_config(RelevanceFeaturesConfig, tokenizer, relevance_combine="concat",
                                                         source_factors=["pos"],
                                                         **tokenizer.feature_vocabularies.sizes())),
                         ("baseline", tiny_method_config(SrcFeatTransformerConfig, tokenizer))):
        model = AutoModelForSeq2SeqLM.from_config(config)
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
        with pytest.raises(SystemExit, match=r"--factor_names case: the model reads no such factor \(it reads no user "
                                             r"factor\)"):
            main(["--model", str(tmp_path / name), "--input", str(tmp_path / "input.txt"), "--output",
                  str(tmp_path / "output.de"), "--input_format", "factored", "--factor_names", "case", "--quiet",
                  "--device", "cpu"])
        assert not (tmp_path / "output.de").exists()
    reads_case = RelevanceFeaturesForConditionalGeneration(tiny_method_config(
        RelevanceFeaturesConfig, tokenizer, relevance_combine="concat", source_factors=["case"],
        **tokenizer.feature_vocabularies.sizes()))
    reads_case.save_pretrained(tmp_path / "case")
    tokenizer.save_pretrained(tmp_path / "case")
    (tmp_path / "two.txt").write_text(" ".join(f"{token}{FACTOR_SEPARATOR}O" for token in
                                               factored(test_sentences[0]).split()) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"--factor_names ner: the model reads no such factor \(its user factors: "
                                         r"case\)"):
        main(["--model", str(tmp_path / "case"), "--input", str(tmp_path / "two.txt"), "--output",
              str(tmp_path / "output.de"), "--input_format", "factored", "--factor_names", "case", "ner", "--quiet",
              "--device", "cpu"])
    pytest.importorskip("ctranslate2")
    from hf_srcfeat.integrations.ctranslate2 import export

    export(str(tmp_path / "baseline"), str(tmp_path / "baseline_ct2"))
    with pytest.raises(SystemExit, match=r"--factor_names case: the model reads no such factor"):
        main(["--model", str(tmp_path / "baseline_ct2"), "--backend", "ctranslate2", "--input",
              str(tmp_path / "input.txt"), "--output", str(tmp_path / "output.de"), "--input_format", "factored",
              "--factor_names", "case", "--quiet"])
    assert not (tmp_path / "output.de").exists()
    # A model that reads a user factor exports it as a CTranslate2 source factor and translates factored lines alike
    export(str(tmp_path / "case"), str(tmp_path / "case_ct2"))
    outputs = []
    for backend in (["--model", str(tmp_path / "case")], ["--model", str(tmp_path / "case_ct2"), "--backend",
                                                            "ctranslate2"]):
        main([*backend, "--input", str(tmp_path / "input.txt"), "--output", str(tmp_path / "case.de"),
              "--input_format", "factored", "--factor_names", "case", "--num_beams", "1", "--max_new_tokens", "8",
              "--quiet", "--device", "cpu"])
        outputs.append((tmp_path / "case.de").read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1] and outputs[0].strip()
    # Factored lines given as plain text would be translated values and all: each is an empty line, named
    assert main(["--model", str(tmp_path / "case"), "--input", str(tmp_path / "input.txt"), "--output",
                 str(tmp_path / "plain.de"), "--quiet", "--device", "cpu"]) == 1
    assert (tmp_path / "plain.de").read_text(encoding="utf-8").strip() == ""
    assert "line 1: the line carries factors inline (word￨value" in capsys.readouterr().err


def write_factor_corpus(path, pairs, case_values=None) -> str:
    """JSON lines of Multi30k pairs with a `case` field: one casing value per whitespace-separated source word."""
    with open(path, "w", encoding="utf-8") as handle:
        for index, (source, target) in enumerate(zip(pairs["source"], pairs["target"], strict=True)):
            case = case_values(index, source) if case_values else " ".join(casing(word) for word in source.split())
            handle.write(json.dumps({"translation": {"en": source, "de": target}, "case": case},
                                    ensure_ascii=False) + "\n")
    return str(path)


@pytest.mark.slow
def test_train_py_reads_a_word_aligned_factor_column_and_the_model_embeds_it(multi30k_dir, tmp_path):
    from hf_srcfeat.commands import train

    corpus = write_factor_corpus(tmp_path / "train.jsonl", load_multi30k("train", "en", "de", multi30k_dir, limit=200))
    run = tmp_path / "run"
    train.main(TINY_RUN + [
        "--output_dir", str(run), "--do_train", "--train_file", corpus, "--validation_file", corpus,
        "--source_factor_columns", "case", "--model_type", "relevance_features",
        "--config_overrides", json.dumps({"relevance_combine": "concat", "source_factors": ["pos", "case"]})])
    tokenizer, config = AutoTokenizer.from_pretrained(run), AutoConfig.from_pretrained(run)
    vocabulary = tokenizer.feature_vocabularies.extra["case"]
    assert {"Cap", "lower", "other"} <= set(vocabulary.labels)
    assert config.extra_factors == {"case": len(vocabulary)} and "case" in config.source_factors
    # The trained model, evaluated or trained on, is given its factor, and only factors it reads
    for options, message in (([], "reads the user factors case: no such factor comes with the corpus"),
                             (["--source_factor_columns", "case", "size"],
                              "size: .* would not read it \\(its user factors: case\\); leave it out")):
        with pytest.raises(SystemExit, match=message):
            train.main([*TINY_RUN, "--model_name_or_path", str(run), "--output_dir", str(tmp_path / "evaluated"),
                        "--do_eval", "--validation_file", corpus, *options])
        assert not (tmp_path / "evaluated").exists()
    evaluated = train.main([*TINY_RUN, "--model_name_or_path", str(run), "--output_dir", str(tmp_path / "evaluated"),
                            "--do_eval", "--validation_file", corpus, "--source_factor_columns", "case"])
    assert evaluated["eval_metrics"]["eval_loss"] > 0


def write_inline_factor_corpus(folder, pairs) -> str:
    """Text-file pairs whose source words carry their casing inline, OpenNMT-py's `word￨value` format."""
    (folder / "corpus.en").write_text("".join(factored(source) + "\n" for source in pairs["source"]), encoding="utf-8")
    (folder / "corpus.de").write_text("".join(target + "\n" for target in pairs["target"]), encoding="utf-8")
    return str(folder / "corpus")


@pytest.mark.slow
def test_train_py_reads_opennmt_py_inline_factors_and_translate_reads_the_same_format(multi30k_dir, tmp_path):
    """`--inline_source_factors case`: the source's `word￨value` tokens become the words and a `case` factor, as
    the translate command's `--input_format factored` reads them; without the option such a corpus is refused
    (it would be trained on as text, values and all)."""
    from hf_srcfeat.commands import train
    from hf_srcfeat.commands.translate import main as translate

    pairs = load_multi30k("train", "en", "de", multi30k_dir, limit=200)
    corpus = write_inline_factor_corpus(tmp_path, pairs)
    arguments = TINY_RUN + ["--do_train", "--train_file", corpus, "--validation_file", corpus, "--model_type",
                            "relevance_features", "--config_overrides",
                            json.dumps({"relevance_combine": "concat", "source_factors": ["pos", "case"]})]
    with pytest.raises(ValueError, match=r"corpus.en row 1: the source carries factors inline \(word￨value, "
                                         r"OpenNMT-py's format\): name them with --inline_source_factors"):
        train.main(TINY_RUN + ["--do_train", "--train_file", corpus, "--validation_file", corpus, "--output_dir",
                               str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()
    with pytest.raises(SystemExit, match="source_factors case: no such factor comes with the corpus"):
        train.main(arguments + ["--output_dir", str(tmp_path / "refused")])
    run = tmp_path / "run"
    train.main(arguments + ["--output_dir", str(run), "--inline_source_factors", "case"])
    tokenizer, config = AutoTokenizer.from_pretrained(run), AutoConfig.from_pretrained(run)
    assert {"Cap", "lower", "other"} <= set(tokenizer.feature_vocabularies.extra["case"].labels)
    assert config.extra_factors == {"case": len(tokenizer.feature_vocabularies.extra["case"])}
    assert not any(FACTOR_SEPARATOR in token for token in tokenizer.get_vocab()), "the values are not text"
    (tmp_path / "input.en").write_text(factored(pairs["source"][0]) + "\n", encoding="utf-8")
    assert translate(["--model", str(run), "--input", str(tmp_path / "input.en"), "--output",
                      str(tmp_path / "output.de"), "--input_format", "factored", "--factor_names", "case",
                      "--num_beams", "1", "--max_new_tokens", "8", "--quiet", "--device", "cpu"]) == 0
    (tmp_path / "bad.en").write_text("A￨Cap dog￨lower￨X\n", encoding="utf-8")
    (tmp_path / "bad.de").write_text("Ein Hund\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.en row 1: token 'dog￨lower￨X' has 2 factor values, expected 1"):
        train.main(arguments + ["--output_dir", str(tmp_path / "bad_run"), "--inline_source_factors", "case",
                                "--train_file", str(tmp_path / "bad")])


def test_a_factor_column_that_does_not_match_its_words_is_refused_naming_the_row(multi30k_dir, tmp_path):
    from hf_srcfeat.commands import train

    pairs = load_multi30k("train", "en", "de", multi30k_dir, limit=40)
    corpus = write_factor_corpus(tmp_path / "train.jsonl", pairs, lambda index, source: " ".join(
        casing(word) for word in source.split()[:-1] if index == 2) or " ".join(casing(w) for w in source.split()))
    reading = ["--model_type", "relevance_features", "--config_overrides",
               json.dumps({"relevance_combine": "concat", "source_factors": ["pos", "case"]})]
    with pytest.raises(ValueError, match=r"train.jsonl row 3: .*factor 'case' has \d+ values for \d+ words"):
        train.main(TINY_RUN + ["--output_dir", str(tmp_path / "run"), "--do_train", "--train_file", corpus,
                               "--validation_file", corpus, "--source_factor_columns", "case", *reading])
    # A factor the model would not read (trained on as a column, then dropped), or named like a built-in feature
    for options, message in (([], "case: srcfeat_transformer would not read it .*it reads no user factor"),
                             (["--variant", "relevance_concat"], "case: relevance_features would not read it"),
                             (["--source_factor_columns", "pos", *reading], "pos: a built-in feature's name")):
        with pytest.raises(SystemExit, match=message):
            train.main(TINY_RUN + ["--output_dir", str(tmp_path / "unread"), "--do_train", "--train_file", corpus,
                                   "--validation_file", corpus, "--source_factor_columns", "case", *options])
        assert not (tmp_path / "unread").exists()
