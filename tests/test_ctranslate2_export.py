"""CTranslate2 export (`hf-srcfeat-export-ct2`): a trained baseline exported and run by CTranslate2 translates
real sentences as the PyTorch model does (greedy, float32), through the translator class and through
`hf-srcfeat-translate --backend ctranslate2`; the models CTranslate2 cannot express are refused with the reason."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("ctranslate2")

from hf_srcfeat import DepsSanConfig, PhraseRepConfig
from hf_srcfeat.commands.export_ct2 import main
from hf_srcfeat.commands.translate import main as translate_main
from hf_srcfeat.integrations.ctranslate2 import CTranslate2Translator, check_exportable, export

from .helpers import annotator_fails_on


@pytest.fixture(scope="module")
def exported(trained_baseline, feature_tokenizer, tmp_path_factory):
    model, _ = trained_baseline
    folder = tmp_path_factory.mktemp("baseline")
    model.save_pretrained(folder)
    feature_tokenizer.save_pretrained(folder)
    output = tmp_path_factory.mktemp("ct2") / "baseline-ct2"
    assert main([str(folder), str(output)]) == 0
    return folder, output


def pytorch_greedy(model, tokenizer, sentences: list[str], max_new_tokens: int = 24) -> list[str]:
    batch = tokenizer(sentences, source_features=False, padding=True, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                   num_beams=1, do_sample=False, max_new_tokens=max_new_tokens)
    return [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]


def test_greedy_translations_equal_the_pytorch_models(exported, trained_baseline, feature_tokenizer, test_sentences):
    model, _ = trained_baseline
    translator = CTranslate2Translator(exported[1], intra_threads=1)
    sentences = test_sentences[:40]
    assert translator.translate(sentences, num_beams=1, max_new_tokens=24) == pytorch_greedy(
        model, feature_tokenizer, sentences)
    settings = json.loads((exported[1] / "hf_srcfeat_export.json").read_text())
    assert settings["model_type"] == "srcfeat_transformer" and settings["quantization"] is None


def test_beam_search_translations_equal_the_pytorch_models_stopping_as_ctranslate2_does(exported, trained_baseline,
                                                                                       feature_tokenizer, multi30k_dir):
    from hf_srcfeat.data.multi30k import load_multi30k

    # CTranslate2 ends a sentence's search once it holds num_beams finished hypotheses: Transformers'
    # early_stopping=True. (Its default, False, searches on while a longer hypothesis could still win.)
    model, _ = trained_baseline
    sentences = list(load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=40)["source"])
    translator = CTranslate2Translator(exported[1], intra_threads=1)
    batch = feature_tokenizer(sentences, source_features=False, padding=True, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                   num_beams=4, early_stopping=True, do_sample=False, max_new_tokens=24)
    expected = [text.strip() for text in feature_tokenizer.batch_decode(generated, skip_special_tokens=True)]
    assert translator.translate(sentences, num_beams=4, max_new_tokens=24, batch_size=16) == expected


def test_the_translate_command_runs_the_export_line_for_line(exported, test_sentences, tmp_path):
    folder, ct2_folder = exported
    # Contractions, hyphens and a tab: the export reads the annotator's words, as the PyTorch pipeline does.
    lines = [test_sentences[0], "", *test_sentences[1:5], "I don't think he's here, but it can't rain.",
             "A full-fledged search-engine with an opt-out.", "Two dogs\tplay in the snow."]
    source = tmp_path / "input.en"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    outputs = {}
    for backend, model in (("transformers", folder), ("ctranslate2", ct2_folder)):
        target = tmp_path / f"{backend}.de"
        assert translate_main(["--model", str(model), "--backend", backend, "--input", str(source), "--output",
                               str(target), "--num_beams", "1", "--max_new_tokens", "24", "--quiet",
                               "--device", "cpu"]) == 0
        outputs[backend] = target.read_text(encoding="utf-8").splitlines()
    assert outputs["ctranslate2"] == outputs["transformers"] and outputs["ctranslate2"][1] == ""


def test_the_export_translates_a_sentence_the_annotator_fails_on_from_its_raw_text(exported, test_sentences, tmp_path,
                                                                                   monkeypatch, capsys):
    """As the PyTorch backend does for a model without source features; the other lines as before."""
    annotator_fails_on(monkeypatch)
    _, ct2_folder = exported
    source = tmp_path / "input.en"
    source.write_text(f"{test_sentences[0]}\nFAIL {test_sentences[1]}\n", encoding="utf-8")
    assert translate_main(["--model", str(ct2_folder), "--backend", "ctranslate2", "--input", str(source), "--output",
                           str(tmp_path / "output.de"), "--num_beams", "1", "--max_new_tokens", "24", "--quiet"]) == 0
    assert all((tmp_path / "output.de").read_text(encoding="utf-8").splitlines())
    assert "line 2: the annotator failed: RuntimeError: the parser gave up; translated without a parse" in \
        capsys.readouterr().err


def test_an_export_with_a_tokenizer_without_an_annotator_reads_raw_text(exported, test_sentences, tmp_path):
    """A converted checkpoint exported with its own plain tokenizer: no parse, its subwords of the raw text."""
    from transformers import PreTrainedTokenizerFast

    _, ct2_folder = exported
    plain = tmp_path / "plain-ct2"
    shutil.copytree(ct2_folder, plain)
    wrapped = CTranslate2Translator(str(ct2_folder))
    for name in ("tokenizer_config.json", "feature_vocab.json", "tokenizer.json"):
        (plain / name).unlink(missing_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=wrapped.tokenizer.backend_tokenizer, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>", bos_token="<s>").save_pretrained(plain)
    translator = CTranslate2Translator(str(plain))
    assert not translator.reads_parses
    assert translator.translate(test_sentences[:3], num_beams=1, max_new_tokens=24) == \
        wrapped.translate(test_sentences[:3], num_beams=1, max_new_tokens=24, parse=False)


def test_sampling_draws_as_generate_does_from_the_models_top_k_or_transformers_default(exported, tmp_path):
    """CTranslate2's own default samples from the whole vocabulary; `generate` from the generation config's top_k,
    else 50: the export samples as `generate` would, unless told otherwise."""
    folder, ct2_folder = exported
    sampling = CTranslate2Translator(str(ct2_folder), num_beams=1, do_sample=True).decoding
    assert (sampling["sampling_topk"], sampling["sampling_topp"], sampling["sampling_temperature"]) == (50, 1.0, 1.0)
    assert CTranslate2Translator(str(ct2_folder), num_beams=1, do_sample=True, top_k=5).decoding["sampling_topk"] == 5
    assert "sampling_topk" not in CTranslate2Translator(str(ct2_folder)).decoding, "no sampling unless asked"
    model_folder = shutil.copytree(folder, tmp_path / "top_k_10")
    settings = json.loads((model_folder / "generation_config.json").read_text())
    (model_folder / "generation_config.json").write_text(json.dumps({**settings, "top_k": 10}))
    assert main([str(model_folder), str(tmp_path / "ct2")]) == 0
    assert CTranslate2Translator(str(tmp_path / "ct2"), num_beams=1, do_sample=True).decoding["sampling_topk"] == 10
    # N samples per sentence, as the Transformers backend draws them: n-best lines, best first, one seed one draw
    source = tmp_path / "input.en"
    source.write_text("A dog runs in the snow.\nTwo men play football.\n", encoding="utf-8")
    outputs = []
    for run in range(2):
        assert translate_main(["--model", str(ct2_folder), "--backend", "ctranslate2", "--input", str(source),
                               "--output", str(tmp_path / f"samples{run}.de"), "--do_sample", "--num_return_sequences",
                               "3", "--seed", "4", "--quiet"]) == 0
        outputs.append((tmp_path / f"samples{run}.de").read_text(encoding="utf-8").splitlines())
    assert outputs[0] == outputs[1] and [line.split(" ||| ")[0] for line in outputs[0]] == ["0"] * 3 + ["1"] * 3
    scores = [float(line.split(" ||| ")[2]) for line in outputs[0][:3]]
    assert scores == sorted(scores, reverse=True)


def test_an_export_given_without_its_backend_or_a_model_folder_that_is_not_there_is_named(exported, tmp_path,
                                                                                          capsys):
    import huggingface_hub.constants

    # conftest sets it before huggingface_hub reads it: without it, the Hub lookup below retries for a minute.
    assert huggingface_hub.constants.HF_HUB_OFFLINE or os.environ["HF_HUB_OFFLINE"] != "1"
    _, ct2_folder = exported
    source = tmp_path / "input.en"
    source.write_text("A dog runs.\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        translate_main(["--model", str(ct2_folder), "--input", str(source), "--quiet"])
    assert "is a CTranslate2 export (hf-srcfeat-export-ct2): add --backend ctranslate2" in capsys.readouterr().err
    missing = "runs_nowhere/baseline"  # spelled like a Hub id, so it is looked up there (no network here)
    with pytest.raises(SystemExit, match=f"--model {missing}: no such folder here, and it does not load from the Hub"):
        translate_main(["--model", missing, "--input", str(source), "--quiet"])


def test_the_export_decodes_with_the_models_saved_generation_settings_as_pytorch_does(
        trained_baseline, feature_tokenizer, test_sentences, tmp_path):
    model, _ = trained_baseline
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    feature_tokenizer.save_pretrained(folder)
    settings = json.loads((folder / "generation_config.json").read_text())
    settings.pop("max_new_tokens")  # the fixture's; the saved max_length then limits the length
    (folder / "generation_config.json").write_text(json.dumps({**settings, "no_repeat_ngram_size": 2,
                                                               "max_length": 9}))
    assert main([str(folder), str(tmp_path / "ct2")]) == 0
    source = tmp_path / "input.en"
    source.write_text("".join(line + "\n" for line in test_sentences[:30]), encoding="utf-8")
    outputs = {}
    for backend, model_folder in (("transformers", folder), ("ctranslate2", tmp_path / "ct2")):
        target = tmp_path / f"{backend}.de"
        assert translate_main(["--model", str(model_folder), "--backend", backend, "--input", str(source),
                               "--output", str(target), "--num_beams", "1", "--quiet", "--device", "cpu"]) == 0
        outputs[backend] = target.read_text(encoding="utf-8").splitlines()
    assert outputs["ctranslate2"] == outputs["transformers"]
    unlimited = CTranslate2Translator(tmp_path / "ct2", intra_threads=1, no_repeat_ngram_size=0, max_new_tokens=64)
    assert outputs["ctranslate2"] != unlimited.translate(test_sentences[:30], num_beams=1, max_new_tokens=64), \
        "the saved settings change these translations"


def test_a_source_longer_than_the_export_takes_is_cut_with_a_warning(exported, test_sentences):
    translator = CTranslate2Translator(exported[1], intra_threads=1)
    assert translator.max_length == translator.tokenizer.model_max_length < 1024, \
        "where the PyTorch pipeline cuts: the tokenizer's limit, below the model's positions"
    translator.max_length = 16
    with pytest.warns(UserWarning, match=r"has \d+ tokens; only its first 16 \(the tokenizer's model_max_length"):
        assert translator.translate([" ".join(test_sentences[:3])], num_beams=1, max_new_tokens=8)[0]


def test_decoding_options_reach_ctranslate2(exported, test_sentences):
    plain = CTranslate2Translator(exported[1], intra_threads=1)
    blocked = CTranslate2Translator(exported[1], intra_threads=1, no_repeat_ngram_size=1)
    sentences = test_sentences[:20]
    outputs = blocked.translate(sentences, num_beams=1, max_new_tokens=24)
    assert outputs != plain.translate(sentences, num_beams=1, max_new_tokens=24)
    ids = [blocked.tokenizer(text_target=output)["input_ids"][:-1] for output in outputs]
    assert all(len(row) == len(set(row)) for row in ids), "no token twice with no_repeat_ngram_size=1"


def test_an_int8_export_translates(exported, test_sentences, tmp_path):
    folder, _ = exported
    assert main([str(folder), str(tmp_path / "int8"), "--quantization", "int8"]) == 0
    translations = CTranslate2Translator(tmp_path / "int8").translate(test_sentences[:5], num_beams=2)
    assert len(translations) == 5 and all(isinstance(text, str) and text for text in translations)


@pytest.mark.parametrize(("config", "reason"), [
    (DepsSanConfig(vocab_size=100, d_model=16, encoder_attention_heads=2, decoder_attention_heads=2),
     "score modification"),
    (PhraseRepConfig(vocab_size=100, d_model=16, encoder_attention_heads=2, decoder_attention_heads=2),
     "fixed sublayers"),
])
def test_models_ctranslate2_cannot_express_are_refused_with_the_reason(config, reason):
    with pytest.raises(ValueError, match=reason):
        check_exportable(config)


def test_a_model_ctranslate2_cannot_express_is_refused_from_its_config_before_its_weights_load(tmp_path, capsys):
    DepsSanConfig(vocab_size=100, d_model=16, encoder_attention_heads=2, decoder_attention_heads=2).save_pretrained(
        tmp_path / "run")
    (tmp_path / "run" / "model.safetensors").write_bytes(b"never read")
    assert main([str(tmp_path / "run"), str(tmp_path / "out")]) != 0
    assert "score modification" in capsys.readouterr().err


def test_an_existing_output_folder_is_not_overwritten(exported, tmp_path, capsys):
    folder, _ = exported
    (tmp_path / "kept.txt").write_text("mine")
    assert main([str(folder), str(tmp_path)]) == 1
    assert "not empty" in capsys.readouterr().err and (tmp_path / "kept.txt").read_text() == "mine"


def relevance_model_folder(feature_tokenizer, folder, combine: str = "concat"):
    """A random (untrained) relevance-features model with its factor tables, saved with the feature tokenizer."""
    from hf_srcfeat import RelevanceFeaturesConfig, RelevanceFeaturesForConditionalGeneration

    from .end_to_end import tiny_method_config
    from .helpers import random_model

    config = tiny_method_config(RelevanceFeaturesConfig, feature_tokenizer, relevance_combine=combine,
                                **feature_tokenizer.feature_vocabularies.sizes())
    model = random_model(RelevanceFeaturesForConditionalGeneration, config).eval()
    model.save_pretrained(folder)
    feature_tokenizer.save_pretrained(folder)
    return model, config


def test_force_replaces_an_earlier_exports_files_both_ways_and_keeps_the_users_own(exported, feature_tokenizer,
                                                                                  test_sentences, tmp_path):
    """A factored export over a plain one must not keep shared_vocabulary.json (CTranslate2 would load one source
    vocabulary for five input features), nor the reverse the factored one's vocabularies."""
    baseline_folder, baseline_export = exported
    relevance_model_folder(feature_tokenizer, tmp_path / "factored")
    output = tmp_path / "ct2"
    shutil.copytree(baseline_export, output)
    (output / "notes.txt").write_text("mine\n")
    assert main([str(tmp_path / "factored"), str(output), "--force"]) == 0
    assert len(CTranslate2Translator(output, intra_threads=1).translate(test_sentences[:2], num_beams=1,
                                                                        max_new_tokens=4)) == 2
    settings = json.loads((output / "hf_srcfeat_export.json").read_text())
    assert settings["code_version"] and settings["ctranslate2_version"], "which code exported, for which runtime"
    assert sorted(path.name for path in output.iterdir()) == sorted([*settings["files"], "notes.txt"])
    assert not (output / "shared_vocabulary.json").exists() and (output / "source_1_vocabulary.json").exists()
    # An export from before exports listed their files, holding a stale wrapped-tokenizer settings file.
    settings.pop("files")
    (output / "hf_srcfeat_export.json").write_text(json.dumps(settings))
    (output / "source_features_config.json").write_text("{}")
    assert main([str(baseline_folder), str(output), "--force"]) == 0
    assert sorted(path.name for path in output.iterdir()) == sorted([*(path.name for path in baseline_export.iterdir()),
                                                                     "notes.txt"])
    assert (output / "notes.txt").read_text() == "mine\n"
    assert CTranslate2Translator(output, intra_threads=1).translate(test_sentences[:3], num_beams=1,
                                                                    max_new_tokens=24) == \
        CTranslate2Translator(baseline_export, intra_threads=1).translate(test_sentences[:3], num_beams=1,
                                                                          max_new_tokens=24)


def test_an_export_interrupted_while_replacing_an_earlier_one_is_named_incomplete_and_exported_again_whole(
        exported, feature_tokenizer, test_sentences, tmp_path, monkeypatch):
    baseline_folder, baseline_export = exported
    relevance_model_folder(feature_tokenizer, tmp_path / "factored")
    output = tmp_path / "ct2"
    shutil.copytree(baseline_export, output)
    moved, real_move = [], shutil.move

    def move_then_stop(source, target):
        if len(moved) == 2:
            raise KeyboardInterrupt  # Ctrl-C (or a kill) halfway through the files
        moved.append(target)
        return real_move(source, target)

    monkeypatch.setattr(shutil, "move", move_then_stop)
    with pytest.raises(KeyboardInterrupt):
        export(str(tmp_path / "factored"), str(output), force=True)
    monkeypatch.setattr(shutil, "move", real_move)
    with pytest.raises(ValueError, match="holds an incomplete CTranslate2 export .*export again with "
                                         "hf-srcfeat-export-ct2 --force"):
        CTranslate2Translator(output, intra_threads=1)
    assert main([str(baseline_folder), str(output), "--force"]) == 0
    assert sorted(path.name for path in output.iterdir() if not path.name.startswith(".")) == \
        sorted(path.name for path in baseline_export.iterdir())
    assert CTranslate2Translator(output, intra_threads=1).translate(test_sentences[:2], num_beams=1,
                                                                    max_new_tokens=12) == \
        CTranslate2Translator(baseline_export, intra_threads=1).translate(test_sentences[:2], num_beams=1,
                                                                          max_new_tokens=12)


def test_an_output_in_a_folder_one_may_not_write_is_still_exported_whole(exported, tmp_path, monkeypatch):
    """The export is staged beside the output; where that folder is not writable (a mounted volume), inside it."""
    import tempfile

    model_folder, baseline_export = exported
    output = tmp_path / "mounted" / "ct2"
    output.mkdir(parents=True)
    make_folder = tempfile.mkdtemp

    def parent_not_writable(*args, dir=None, **kwargs):  # noqa: A002 (tempfile's name)
        if Path(dir) == output.parent:
            raise PermissionError(13, "Permission denied", str(dir))
        return make_folder(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", parent_not_writable)
    assert main([str(model_folder), str(output), "--force"]) == 0
    assert sorted(path.name for path in output.iterdir()) == sorted(path.name for path in baseline_export.iterdir())


def test_the_model_folder_or_a_folder_holding_it_is_refused_as_output_by_the_library_and_the_command(
        exported, tmp_path, capsys):

    model_folder, _ = exported
    config = (model_folder / "config.json").read_text()
    with pytest.raises(ValueError, match="is the model folder"):
        export(str(model_folder), str(model_folder), force=True)
    assert (model_folder / "config.json").read_text() == config
    run = tmp_path / "run"
    shutil.copytree(model_folder, run / "checkpoint-300")
    (run / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="holds the model folder"):
        export(str(run / "checkpoint-300"), str(run), force=True)
    with pytest.raises(SystemExit):
        main([str(run / "checkpoint-300"), str(run), "--force"])
    assert f"output {run} holds the model folder" in capsys.readouterr().err
    assert (run / "config.json").read_text() == "{}" and sorted(path.name for path in run.iterdir()) == \
        ["checkpoint-300", "config.json"]


def test_a_missing_model_or_a_ctranslate2_export_as_the_model_is_named_in_one_line(exported, tmp_path, capsys):
    _, ct2_folder = exported
    for model in ("nosuch", "runs_nowhere/baseline"):  # a name the Hub would take, looked up there (offline here)
        assert main([model, str(tmp_path / "out")]) == 1
        error = capsys.readouterr().err
        assert error.startswith(f"hf-srcfeat-export-ct2: model {model}: no such folder here, and it does not load "
                                "from the Hub (") and error.count("\n") == 1
    assert main([str(ct2_folder), str(tmp_path / "out")]) == 1
    assert f"model {ct2_folder} is a CTranslate2 export" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_export_records_the_absolute_folder_it_was_exported_from(exported, monkeypatch, tmp_path):
    model_folder, _ = exported
    monkeypatch.chdir(model_folder.parent)
    assert main([model_folder.name, str(tmp_path / "ct2")]) == 0
    assert json.loads((tmp_path / "ct2" / "hf_srcfeat_export.json").read_text())["exported_from"] == \
        str(model_folder.resolve())


def test_a_composed_model_is_refused_naming_the_components_ctranslate2_cannot_express():
    from hf_srcfeat import SrcFeatComposedConfig

    config = SrcFeatComposedConfig(components=["relevance_features", "deps_san"], vocab_size=100, d_model=16,
                                   encoder_attention_heads=2, decoder_attention_heads=2)
    with pytest.raises(ValueError, match=r"srcfeat_composed model \(relevance_features, deps_san\) cannot be exported "
                                         r"to CTranslate2: deps_san: .*score modification"):
        check_exportable(config)


@pytest.mark.parametrize("combine", ["concat", "add"])
def test_relevance_factor_embeddings_run_as_ctranslate2_source_features(combine, feature_tokenizer, test_sentences,
                                                                       tmp_path):
    model, config = relevance_model_folder(feature_tokenizer, tmp_path / "model", combine)
    assert main([str(tmp_path / "model"), str(tmp_path / "ct2")]) == 0
    translator = CTranslate2Translator(tmp_path / "ct2", intra_threads=1)
    sentences = test_sentences[:12]
    tokens = translator.source_tokens(sentences)[0]
    assert all(token.count("￨") == len(config.source_factors) for token in tokens), "subword￨lemma￨tag￨pos￨deprel"
    batch = feature_tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12)
    expected = [text.strip() for text in feature_tokenizer.batch_decode(generated, skip_special_tokens=True)]
    assert translator.translate(sentences, num_beams=1, max_new_tokens=12) == expected
    source = tmp_path / "input.en"
    source.write_text("".join(line + "\n" for line in sentences[:4]), encoding="utf-8")
    assert translate_main(["--model", str(tmp_path / "ct2"), "--backend", "ctranslate2", "--input", str(source),
                           "--output", str(tmp_path / "output.de"), "--num_beams", "1", "--max_new_tokens", "12",
                           "--quiet", "--device", "cpu"]) == 0
    assert (tmp_path / "output.de").read_text(encoding="utf-8").splitlines() == expected[:4], "parsed on the way"


def test_relevance_masks_cannot_be_exported(feature_tokenizer):
    from hf_srcfeat import RelevanceFeaturesConfig

    config = RelevanceFeaturesConfig(vocab_size=100, d_model=32, encoder_attention_heads=2, decoder_attention_heads=2,
                                     relevance_combine="self_relevance")
    with pytest.raises(ValueError, match="relevance masks"):
        check_exportable(config)
