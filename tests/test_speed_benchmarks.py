"""The speed benchmarks' scripts on small slices of real data: the decoding benchmark on CPU from CoNLL-U parses, the
GPU training benchmark's compiled path run on the CPU (its smoke-test mode), and the CPU training-efficiency
benchmark."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from hf_srcfeat.conllu import write_conllu

from .helpers import pre_norm_model


def test_decoding_benchmark_reads_parses_from_conllu_and_reports_identical_tokens_per_second(
        model_folder, stanza_annotator, multi30k_dir, tmp_path):
    from benchmarks import measure_decoding_speed
    from hf_srcfeat.data.multi30k import load_multi30k

    sources = list(load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=4)["source"])
    parses = tmp_path / "test.en.conllu"
    write_conllu(stanza_annotator.annotate(sources, show_progress=False), parses)
    result = measure_decoding_speed.main([
        "--models", str(model_folder), "--graft", "deps_san", "--sentences", "4", "--rounds", "1",
        "--source_conllu", str(parses), "--data_dir", str(multi30k_dir), "--work_dir", str(tmp_path / "work"),
        "--operation_breakdown", "--ctranslate2", "--output", str(tmp_path / "speed.json")])

    assert result["source_parses"] == str(parses) and result["sorted_by_length"]
    assert result["timings"]["batch1_beam1"][f"{model_folder} (fast)"]["identical_to_ctranslate2"] == 1.0, "greedy"
    for setting in ("batch32_beam4", "batch1_beam1"):
        assert {row["loop"] for row in result["timings"][setting].values()} == {
            "fast", "fast_modules", "fast_unprepared", "transformers", "transformers_mkl", "ctranslate2"}
        fast_rows = [row for row in result["timings"][setting].values() if row["loop"] == "fast"]
        assert [row["model_type"] for row in fast_rows] == ["srcfeat_transformer", "deps_san"]
        for row in fast_rows:
            assert row["identical_to_transformers"] == row["identical_to_fast_modules"] == 1.0
            assert row["generated_tokens_per_second"] > row["sentences_per_second"] > 0
            assert len(row["round_seconds"]) == 1 and row["round_seconds"][0] > 0  # one per round
        assert 0 <= fast_rows[0]["identical_to_ctranslate2"] <= 1 and "time_over_ctranslate2" in fast_rows[0]
        # The baseline's fast path, operation by operation: the products with the weights among them
        breakdown = result["operation_breakdown"][setting]
        assert breakdown["unit"] == "sentence"
        assert 0 < breakdown["milliseconds_per_unit_in_operations"] < breakdown["milliseconds_per_unit_timed"]
        names = {operation["name"] for operation in breakdown["operations"]}
        assert names & {"aten.addmm", "aten.mm", "mkldnn._linear_pointwise"}
        assert 0.5 < sum(operation["share"] for operation in breakdown["operations"]) <= 1.0001


def test_generated_tokens_end_at_each_rows_first_end_of_sentence(model_folder, test_sentences):
    # Beam search fills a finished row with </s>, greedy search with padding: neither counts as generated.
    from transformers import AutoModelForSeq2SeqLM

    from benchmarks.measure_decoding_speed import generated_token_count
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(model_folder).eval()
    batch = load_tokenizer(model_folder)(test_sentences[:6], padding=True, return_tensors="pt")
    eos, pad = model.config.eos_token_id, model.config.pad_token_id
    for beams in (1, 4):
        sequences = model.generate(**batch, num_beams=beams, do_sample=False, max_new_tokens=20)
        expected = 0
        for row in sequences[:, 1:].tolist():
            tokens = row[:row.index(eos) + 1] if eos in row else row
            expected += sum(token != pad for token in tokens)
        assert generated_token_count(sequences, eos, pad) == expected < sequences[:, 1:].numel()


def test_beam_stopping_benchmark_counts_the_decoder_rows_each_stopping_rule_computes(model_folder, multi30k_dir,
                                                                                      tmp_path):
    from benchmarks import beam_stopping

    result = beam_stopping.main(["--model", str(model_folder), "--sentences", "6", "--batch_size", "3",
                                 "--data_dir", str(multi30k_dir), "--no_repeat_ngram_size", "0", "--ctranslate2",
                                 "--work_dir", str(tmp_path / "work"), "--output", str(tmp_path / "stopping.json")])
    default, num_beams_finished = (result["rules"][rule]["decoder_rows_per_sentence"]
                                   for rule in ("transformers_default", "num_beams_finished"))
    # At least one step of one row per sentence, then num_beams rows a step; the default never stops sooner.
    assert default >= num_beams_finished >= 1 + 4
    assert result["rows_over_num_beams_finished"] >= 1 and 0 <= result["identical_translations"] <= 1
    # Stopping as CTranslate2 does, without an n-gram ban, its export translates as the model does.
    assert result["no_repeat_ngram_size"] == 0
    assert result["rules"]["num_beams_finished"]["identical_to_ctranslate2"] == 1.0
    assert 0 <= result["rules"]["transformers_default"]["identical_to_ctranslate2"] <= 1


def test_beam_stopping_benchmark_refuses_no_sentences(model_folder, multi30k_dir, tmp_path, capsys):
    from benchmarks import beam_stopping

    with pytest.raises(SystemExit):
        beam_stopping.main(["--model", str(model_folder), "--sentences", "0", "--data_dir", str(multi30k_dir),
                            "--output", str(tmp_path / "stopping.json")])
    assert "--sentences must be at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        beam_stopping.main(["--model", str(model_folder), "--no_repeat_ngram_size", "-1", "--data_dir",
                            str(multi30k_dir), "--output", str(tmp_path / "stopping.json")])
    assert "--no_repeat_ngram_size must be 0 or more, got -1" in capsys.readouterr().err
    assert not (tmp_path / "stopping.json").exists()


def test_decoding_benchmark_refuses_an_operation_breakdown_on_a_gpu(tmp_path, capsys):
    # GPU kernels run asynchronously: a wall clock around each call would time their launches.
    from benchmarks import measure_decoding_speed

    with pytest.raises(SystemExit):
        measure_decoding_speed.main(["--models", "unused", "--device", "cuda", "--operation_breakdown",
                                     "--output", str(tmp_path / "speed.json")])
    assert "--operation_breakdown times operations as the CPU runs them" in capsys.readouterr().err
    assert not (tmp_path / "speed.json").exists()


def test_decoding_benchmark_times_only_the_loops_asked_for_and_refuses_a_choice_without_the_fast_loops(
        model_folder, stanza_annotator, multi30k_dir, tmp_path, capsys):
    from benchmarks import measure_decoding_speed
    from hf_srcfeat.data.multi30k import load_multi30k

    sources = list(load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=3)["source"])
    parses = tmp_path / "test.en.conllu"
    write_conllu(stanza_annotator.annotate(sources, show_progress=False), parses)
    arguments = ["--models", str(model_folder), "--sentences", "3", "--rounds", "2", "--source_conllu", str(parses),
                 "--data_dir", str(multi30k_dir), "--output", str(tmp_path / "speed.json")]
    result = measure_decoding_speed.main([*arguments, "--loops", "fast", "transformers"])

    assert result["loops"] == ["fast", "transformers"]
    for setting in ("batch32_beam4", "batch1_beam1"):
        rows = result["timings"][setting]
        assert [row["loop"] for row in rows.values()] == ["fast", "transformers"]
        fast = rows[f"{model_folder} (fast)"]
        assert fast["identical_to_transformers"] == 1.0 and "identical_to_fast_modules" not in fast
        assert fast["speedup_over_transformers"] > 0 and len(fast["round_seconds"]) == 2

    (tmp_path / "speed.json").unlink()
    with pytest.raises(SystemExit):
        measure_decoding_speed.main([*arguments, "--loops", "transformers"])
    assert "`fast` must be among them" in capsys.readouterr().err
    assert not (tmp_path / "speed.json").exists()


def test_decoding_benchmark_refuses_parses_of_other_sentences(model_folder, stanza_annotator, multi30k_dir,
                                                             tmp_path, capsys):
    from benchmarks import measure_decoding_speed
    from hf_srcfeat.data.multi30k import load_multi30k

    sources = list(load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=3)["source"])
    parses = tmp_path / "shuffled.conllu"
    write_conllu(stanza_annotator.annotate(sources[::-1], show_progress=False), parses)
    with pytest.raises(SystemExit):
        measure_decoding_speed.main(["--models", str(model_folder), "--sentences", "3", "--source_conllu",
                                     str(parses), "--data_dir", str(multi30k_dir), "--output",
                                     str(tmp_path / "speed.json")])
    assert "does not hold the parses of test_2016_flickr's first 3 sources" in capsys.readouterr().err


def encoded_rows(feature_tokenizer, train_annotations, train_pairs, count: int) -> list[dict]:
    """The first `count` training pairs encoded, one dict of features per pair (as the benchmarks batch them)."""
    encodings = feature_tokenizer(annotations=train_annotations[:count],
                                  text_target=list(train_pairs["target"][:count]), truncation=True, max_length=128)
    return [{name: encodings[name][index] for name in encodings} for index in range(count)]


def saved_benchmark_inputs(feature_tokenizer, annotations, folder) -> tuple:
    """The tokenizer folder and the sources' CoNLL-U file a benchmark command reads, written under `folder`."""
    tokenizer_folder, parses = folder / "tokenizer", folder / "train.en.conllu"
    feature_tokenizer.save_pretrained(tokenizer_folder)
    write_conllu(annotations, parses)
    return tokenizer_folder, parses


@pytest.fixture
def compiler_settings_kept():
    """The process-wide compiler settings `gpu_throughput` changes, restored after the test (with plain `setattr`:
    monkeypatch's undo trips over the config modules' attribute handling)."""
    import torch._dynamo

    from hf_srcfeat.compilation import ONE_GRAPH_SETTINGS

    settings = [(config, name) for config, values in ONE_GRAPH_SETTINGS for name in values] + [
        (torch._dynamo.config, name) for name in ("recompile_limit", "accumulated_recompile_limit",
                                                  "fail_on_recompile_limit_hit") if hasattr(torch._dynamo.config, name)]
    saved = [(module, name, getattr(module, name)) for module, name in settings]
    yield
    for module, name, value in saved:
        setattr(module, name, value)


def test_compiled_training_benchmark_warms_up_over_every_batch_and_counts_flops(
        feature_tokenizer, train_annotations, multi30k_dir, tmp_path, monkeypatch, compiler_settings_kept):
    from benchmarks import gpu_throughput

    tokenizer_folder, parses = saved_benchmark_inputs(feature_tokenizer, train_annotations[:120], tmp_path)
    output = tmp_path / "gpu.json"
    written = []
    monkeypatch.setattr(gpu_throughput, "write_json_atomically",
                        lambda path, result: written.append(json.loads(json.dumps(result))))
    gpu_throughput.main([
        "--device", "cpu", "--sizes", "benchmark", "--systems", "baseline", "--compile", "--baseline_variants",
        "eager", "cuda_graphs", "whole_model", "cuda_graphs+whole_model", "whole_model+cuda_graphs+eager_attention",
        "opaque_layer_norm+whole_model", "whole_model+packed_attention", "separate_layer_norm_gradients+whole_model",
        "--compile_backend", "eager", "--pairs",
        "120", "--max_tokens", "1024", "--warmup", "1", "--steps", "2",
        "--rounds", "2", "--profile_steps", "1", "--tokenizer", str(tokenizer_folder), "--source_conllu",
        str(parses), "--data_dir", str(multi30k_dir), "--output", str(output)])

    result = written[-1]
    assert result["errors"] == {"benchmark": {}}
    # CUDA graphs run a shape eagerly the first time and record it the second: two passes over the batches
    assert result["settings"]["warmup"] == 2 * result["settings"]["batches"] > 2
    systems = result["systems"]["benchmark"]
    # a variant is named by its parts in one order, however they were given; given twice, it is measured once
    assert set(systems) == {"baseline", "baseline_eager", "baseline_cuda_graphs", "baseline_whole_model",
                            "baseline_whole_model_cuda_graphs", "baseline_whole_model_cuda_graphs_eager_attention",
                            "baseline_whole_model_opaque_layer_norm", "baseline_whole_model_packed_attention",
                            "baseline_whole_model_separate_layer_norm_gradients"}
    layers = 2 * gpu_throughput.SIZES["benchmark"]["encoder_layers"]  # as many decoder layers
    assert systems["baseline"]["compiled"] == systems["baseline_cuda_graphs"]["compiled"] == \
        f"{layers} layers, backend eager"
    assert systems["baseline_eager"]["compiled"] == "eager"
    assert systems["baseline_whole_model"]["compiled"] == systems["baseline_whole_model_cuda_graphs"]["compiled"] == \
        systems["baseline_whole_model_opaque_layer_norm"]["compiled"] == \
        systems["baseline_whole_model_packed_attention"]["compiled"] == \
        systems["baseline_whole_model_separate_layer_norm_gradients"]["compiled"] == \
        "whole forward with the loss, backend eager, mode none"
    for summary in systems.values():
        assert summary["computed_tflops_per_second"] >= summary["useful_tflops_per_second"] > 0
        assert 0 < summary["padding_share"] < 0.5
        assert summary["steps"] == 2
    # the file is rewritten after each system's warm-up, after each round and before the profiles: a run stopped
    # early keeps what it measured
    snapshots = [snapshot["systems"]["benchmark"] for snapshot in written if "benchmark" in snapshot["systems"]]
    assert [len(snapshot) for snapshot in snapshots[:len(systems)]] == list(range(1, len(systems) + 1))
    assert [snapshot["baseline"].get("steps") for snapshot in snapshots] == [None] * len(systems) + [1, 2, 2, 2]
    assert all(snapshot["baseline"]["warmup_seconds"] > 0 for snapshot in snapshots)
    # after the rounds, one more step of each system is profiled (on the CPU: its operations' times)
    profiles = result["profiles"]["benchmark"]
    assert set(profiles) == set(systems)
    for profile in profiles.values():
        assert profile["unit"] == "step" and profile["milliseconds_per_unit_in_operations"] > 0
        assert any(operation["name"] == "mkldnn._linear_pointwise" or operation["name"].startswith("aten.")
                   for operation in profile["operations"])


def test_the_cpp_wrapper_variant_gives_inductor_its_option_for_the_whole_forward_and_for_each_layer(
        feature_tokenizer, monkeypatch, compiler_settings_kept):
    from benchmarks import gpu_throughput

    settings_given, real_compile = [], torch.compile

    def recording_compile(model, **settings):  # compiles lazily with the eager backend: nothing is lowered here
        settings_given.append(settings)
        return real_compile(model, dynamic=settings["dynamic"], backend="eager")

    monkeypatch.setattr(torch, "compile", recording_compile)
    options = gpu_throughput.CPP_WRAPPER_OPTIONS
    layered = gpu_throughput.build("baseline", "benchmark", feature_tokenizer)
    layers = gpu_throughput.compile_layers(layered, None, "inductor", options)
    whole = gpu_throughput.Trainee(gpu_throughput.build("baseline", "benchmark", feature_tokenizer), "cpu",
                                   whole_model=True, options=options)
    assert options == {"cpp_wrapper": True}
    assert len(settings_given) == layers + 1
    assert all(settings["options"] == options and settings["mode"] is None and settings["backend"] == "inductor"
               for settings in settings_given)
    assert whole.compiled == 'whole forward with the loss, backend inductor, mode none, options {"cpp_wrapper": true}'
    assert gpu_throughput.Trainee(layered, "cpu", options=options).compiled == \
        f'{layers} layers, backend inductor, options {{"cpp_wrapper": true}}'


def test_the_gpu_benchmark_pads_every_feature_of_its_token_batches_to_a_multiple(feature_tokenizer,
                                                                                  train_annotations, train_pairs):
    from benchmarks import gpu_throughput

    rows = encoded_rows(feature_tokenizer, train_annotations, train_pairs, 200)
    plain = gpu_throughput.token_batches(feature_tokenizer, rows, 1024, seed=1)
    padded = gpu_throughput.token_batches(feature_tokenizer, rows, 1024, seed=1, pad_to_multiple_of=8)
    assert len(plain) == len(padded) > 3
    assert any(batch["input_ids"].shape[1] % 8 for batch in plain)  # the padding below is not the data's own
    for before, after in zip(plain, padded, strict=True):
        assert after.keys() == before.keys()
        for name, values in after.items():  # [batch, length], or [batch, length, length] for the distances
            assert values.shape[0] == before[name].shape[0]
            assert all(length % 8 == 0 and length - old < 8
                       for length, old in zip(values.shape[1:], before[name].shape[1:], strict=True)), name
            assert torch.equal(values[tuple(slice(0, length) for length in before[name].shape)], before[name]), name
        assert (after["attention_mask"][:, before["attention_mask"].shape[1]:] == 0).all()
        assert (after["labels"][:, before["labels"].shape[1]:] == -100).all()


def test_the_gpu_benchmark_keeps_only_batches_of_a_multiple_of_sentences(feature_tokenizer, train_annotations,
                                                                         train_pairs):
    from benchmarks import gpu_throughput

    rows = encoded_rows(feature_tokenizer, train_annotations, train_pairs, 200)
    plain = gpu_throughput.token_batches(feature_tokenizer, rows, 1024, seed=1)
    even = gpu_throughput.token_batches(feature_tokenizer, rows, 1024, seed=1, batch_size_multiple=2)
    assert any(len(batch["input_ids"]) % 2 for batch in plain)  # the rounding below is not the data's own
    assert even and all(len(batch["input_ids"]) % 2 == 0 for batch in even)
    # here only the epoch's last batch can be odd (no sentence is longer than half the budget): one left out at most
    assert len(plain) - len(even) <= 1 and sum(len(batch["input_ids"]) for batch in even) >= 200 - len(even[-1])


@pytest.mark.parametrize("arguments, named", [
    (["--baseline_variants", "eager_attention", "whole_model"], "--baseline_variants whole_model only apply with "
                                                                 "--compile"),
    (["--compile", "--compile_backend", "eager", "--compile_mode", "max-autotune"], "--compile_mode is inductor's"),
    (["--compile", "--compile_mode", "reduce-overhead", "--baseline_variants", "cuda_graphs"],
     "already runs under CUDA graphs"),
    (["--compile", "--baseline_variants", "whole_model+cuda_graph"], "'whole_model+cuda_graph': a variant is one or "
                                                                     "more of whole_model, cuda_graphs"),
    (["--compile", "--baseline_variants", "eager+whole_model"], "'eager' (not compiled) excludes whole_model"),
    (["--baseline_variants", "eager_attention+packed_attention"], "eager_attention and packed_attention each set"),
    (["--compile", "--baseline_variants", "opaque_layer_norm+separate_layer_norm_gradients"],
     "opaque_layer_norm and separate_layer_norm_gradients each set the LayerNorm"),
    (["--whole_model"], "--whole_model only apply with --compile"),
    (["--profile_steps", "-1"], "--profile_steps must be at least 0, got -1"),
    (["--compile", "--whole_model", "--baseline_variants", "whole_model+cuda_graphs"],
     "--whole_model already compiles every system whole"),
    (["--compile", "--baseline_variants", "cuda_graphs+cpp_wrapper"],
     'cuda_graphs (compile mode "reduce-overhead") and cpp_wrapper (inductor options) are not combined'),
    (["--compile", "--compile_backend", "eager", "--baseline_variants", "whole_model+cpp_wrapper"],
     "--baseline_variants whole_model+cpp_wrapper: cpp_wrapper sets inductor's options"),
    (["--compile", "--compile_mode", "max-autotune", "--baseline_variants", "cpp_wrapper"],
     "--baseline_variants cpp_wrapper: cpp_wrapper sets inductor's options, which take neither"),
])
def test_the_gpu_benchmark_refuses_options_that_would_not_apply(arguments, named, tmp_path, capsys):
    from benchmarks import gpu_throughput

    with pytest.raises(SystemExit):
        gpu_throughput.main(["--device", "cpu", "--output", str(tmp_path / "gpu.json"), *arguments])
    assert named in capsys.readouterr().err
    assert not (tmp_path / "gpu.json").exists()


@pytest.mark.parametrize("option", ["--lines", "--rounds", "--processes"])
def test_the_parsing_scaling_benchmark_refuses_a_count_below_one(option, multi30k_dir, tmp_path, capsys):
    from benchmarks import measure_annotation_scaling

    with pytest.raises(SystemExit):
        measure_annotation_scaling.main(["--input", str(multi30k_dir / "val.en.gz"), option, "0",
                                         "--output", str(tmp_path / "scaling.json")])
    assert f"{option} must be at least 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "scaling.json").exists()


def test_training_efficiency_benchmark_times_every_arm_on_parsed_pairs(feature_tokenizer, train_annotations,
                                                                      multi30k_dir, tmp_path):
    from benchmarks import batching_efficiency

    tokenizer_folder, parses, output = tmp_path / "tokenizer", tmp_path / "train.en.conllu", tmp_path / "cpu.json"
    feature_tokenizer.save_pretrained(tokenizer_folder)
    write_conllu(train_annotations[:300], parses)
    batching_efficiency.main([
        "--tokenizer", str(tokenizer_folder), "--source_conllu", str(parses), "--data_dir", str(multi30k_dir),
        "--pairs", "300", "--max_tokens", "512", "--batch_size", "32", "--rounds", "1", "--steps_per_round", "2",
        "--operation_breakdown", "--undone", "log_softmax_loss", "--output", str(output)])

    result = json.loads(output.read_text())
    arms = ("sentence_batches", "token_batches", "token_batches_onednn_logits_kept", "token_batches_onednn",
            "cost_ordered_token_batches_onednn", "token_batches_onednn_without_log_softmax_loss")
    for arm in arms:
        assert result[arm]["steps"] == 2
        assert 0 < result[arm]["useful_fraction_of_peak"] <= result[arm]["computed_fraction_of_peak"]
    # Token batches pad less than random sentence batches
    assert result["token_batches"]["padding_share"] < result["sentence_batches"]["padding_share"] / 2
    assert 0 < result["matmul_peak_gflops"] == max(result["matmul_peak_gflops_mkl"],
                                                   result["matmul_peak_gflops_onednn"])
    # The shipped step operation by operation, its backward included
    breakdown = result["operation_breakdown"]
    assert breakdown["arm"] == "token_batches_onednn" and breakdown["unit"] == "step"
    assert 0 < breakdown["target_tokens_per_step"] <= 512
    products = [operation for operation in breakdown["operations"] if operation["name"] == "mkldnn._linear_pointwise"]
    assert products and products[0]["calls_per_unit"] > 0


@pytest.mark.parametrize("change", ["log_softmax_loss", "boolean_dropout_masks", "copied_loss_weight_gradient"])
def test_an_undone_change_restores_the_earlier_step_with_the_same_loss_and_gradients(change, trained_baseline,
                                                                                     multi30k_dir, subword_tokenizer):
    from benchmarks.undone_changes import EARLIER_WAYS, undone
    from hf_srcfeat.data.multi30k import load_multi30k

    model, _ = trained_baseline
    pairs = load_multi30k("val", data_dir=multi30k_dir, limit=16)
    batch = subword_tokenizer(list(pairs["source"]), text_target=list(pairs["target"]), padding=True,
                              return_tensors="pt")
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == subword_tokenizer.pad_token_id, -100)

    shipped = {(owner, name): vars(owner)[name] for owner, name, _ in EARLIER_WAYS[change]}
    replaced, results = [], []
    model.train()
    try:
        for undo in (None, change):
            model.zero_grad(set_to_none=True)
            torch.manual_seed(0)  # the same dropout masks
            with undone(undo):
                replaced.append([vars(owner)[name] is not way for (owner, name), way in shipped.items()])
                loss = model(**batch, skip_logits=True).loss
                loss.backward()
            results.append((loss.detach(), [parameter.grad.clone() for parameter in model.parameters()
                                            if parameter.grad is not None]))
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    # The earlier ways only within the block
    assert replaced == [[False] * len(shipped), [True] * len(shipped)]
    assert all(vars(owner)[name] is way for (owner, name), way in shipped.items())
    (loss, gradients), (earlier_loss, earlier_gradients) = results
    assert torch.allclose(loss, earlier_loss, rtol=1e-5)
    for gradient, earlier in zip(gradients, earlier_gradients, strict=True):
        assert torch.allclose(gradient, earlier, rtol=1e-4, atol=1e-5 * earlier.abs().max())


@pytest.mark.slow
def test_compiled_training_step_with_opaque_kernels_gives_the_eager_steps_loss_and_gradients(
        tiny_config, subword_tokenizer, train_pairs, monkeypatch):
    # The training benchmark's compiled arm with the zoo's kernels: the graph multiplies through oneDNN (forward and
    # both gradients) and computes what the eager step computes, on real pairs.
    from transformers import DataCollatorForSeq2Seq

    from benchmarks.opaque_kernels import use_opaque_kernels
    from hf_srcfeat import SrcFeatTransformerForConditionalGeneration, linear

    torch.manual_seed(0)
    eager = SrcFeatTransformerForConditionalGeneration(tiny_config()).train()
    compiled = use_opaque_kernels(SrcFeatTransformerForConditionalGeneration(eager.config).train())
    compiled.load_state_dict(eager.state_dict())
    encodings = subword_tokenizer(list(train_pairs["source"])[:12], text_target=list(train_pairs["target"])[:12])
    batch = DataCollatorForSeq2Seq(subword_tokenizer)(
        [{name: encodings[name][row] for name in encodings} for row in range(12)])
    products = []
    onednn_product = linear.onednn_product
    monkeypatch.setattr(linear, "onednn_product", lambda *operands: products.append(1) or onednn_product(*operands))

    eager_loss = eager(**batch).loss
    layer_calls = len(products)  # the eager forward's products (its backward's are not counted here)
    eager_loss.backward()
    products.clear()
    compiled_loss = torch.compile(compiled, dynamic=True)(**batch).loss
    compiled_loss.backward()

    # Every product of the compiled step through oneDNN: the output and both gradients of every layer call
    assert len(products) == 3 * layer_calls > 0
    assert torch.allclose(compiled_loss, eager_loss, atol=1e-5)
    for (name, parameter), compiled_parameter in zip(eager.named_parameters(), compiled.parameters(), strict=True):
        assert parameter.grad is not None, name
        assert torch.allclose(compiled_parameter.grad, parameter.grad, atol=1e-5), name


@pytest.mark.slow
def test_compiled_dropout_with_opaque_kernels_draws_the_zoos_lane_masks(monkeypatch):
    # In a compiled graph the training benchmark's dropout keeps or drops each element by the zoo's 16-bit-lane
    # masks, with the kept ones scaled as the eager module scales them.
    from benchmarks.opaque_kernels import use_opaque_kernels
    from hf_srcfeat import dropout

    masks = []
    dropout_mask = dropout.dropout_mask
    monkeypatch.setattr(dropout, "dropout_mask", lambda *arguments: masks.append(1) or dropout_mask(*arguments))
    layer = use_opaque_kernels(torch.nn.Sequential(dropout.Dropout(0.25))).train()
    inputs = torch.rand(64, 40, 32) + 1.0

    outputs = torch.compile(layer)(inputs)

    assert masks == [1]
    scale = 1 / (1 - dropout.dropped_share(0.25))
    kept = outputs != 0
    assert torch.allclose(outputs[kept], inputs[kept] * scale)
    assert abs((~kept).float().mean().item() - 0.25) < 0.02  # 81,920 elements


def layer_norm_with_random_affine(features: int) -> torch.nn.LayerNorm:
    """An nn.LayerNorm whose weight and bias are not their initial ones (seeded), and the random state seeded."""
    torch.manual_seed(0)
    layer = torch.nn.LayerNorm(features)
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
        layer.bias.uniform_(-0.5, 0.5)
    return layer


@pytest.mark.parametrize("autocast", [False, True])
def test_compiled_layer_norm_through_atens_kernels_gives_nn_layer_norms_values_and_gradients(autocast):
    # The GPU benchmark's opaque_layer_norm variant: compiled, the residual sublayer's LayerNorm is one call of ATen's
    # forward and one of its backward; values and the three gradients are nn.LayerNorm's, in the dtype autocast
    # gives LayerNorm on the CPU (the inputs').
    from benchmarks.opaque_kernels import use_opaque_layer_norm

    graphs = []

    def recording_backend(graph_module, example_inputs):
        graphs.append(str(graph_module.graph))
        return graph_module.forward

    reference = layer_norm_with_random_affine(48)
    opaque = use_opaque_layer_norm(torch.nn.Sequential(copy.deepcopy(reference)))[0]
    residual, update = torch.randn(12, 9, 48), torch.randn(12, 9, 48)
    results = []
    for layer, run in ((reference, lambda function: function),
                       (opaque, lambda function: torch.compile(function, backend=recording_backend, dynamic=True))):
        inputs = [residual.clone().requires_grad_(), update.clone().requires_grad_()]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            # Half-precision inputs under autocast, which runs LayerNorm in float32
            output = run(lambda x, y, layer=layer: layer((x + 2 * y).to(
                torch.bfloat16 if autocast else torch.float32)))(*inputs)
        (output.float() * torch.linspace(-1, 1, 48)).sum().backward()
        results.append((output, inputs[0].grad, inputs[1].grad, layer.weight.grad, layer.bias.grad))
    assert any("hf_srcfeat_benchmarks.layer_norm" in graph for graph in graphs)
    assert not any("native_layer_norm" in graph or "aten.layer_norm" in graph for graph in graphs)
    assert results[1][0].dtype == results[0][0].dtype == (torch.bfloat16 if autocast else torch.float32)
    for ours, expected in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize("autocast", [False, True])
def test_compiled_layer_norm_with_its_weight_gradients_reduced_apart_gives_nn_layer_norms_values_and_gradients(
        autocast):
    # The GPU benchmark's separate_layer_norm_gradients variant: compiled, the residual sublayer's LayerNorm leaves
    # its weight and bias gradients to one `column_sums` call in the backward graph, not to a fused reduction, and
    # gives nn.LayerNorm's values and gradients: in float32 as they are; with half-precision inputs under autocast
    # within bfloat16's rounding (ATen's CPU LayerNorm rounds its weight gradients to bfloat16, ours are float32 sums).
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from benchmarks.opaque_kernels import use_separate_layer_norm_gradients

    graphs: dict[str, list[str]] = {"forward": [], "backward": []}

    def recorder(kind):
        def compiler(graph_module, example_inputs):
            graphs[kind].append(str(graph_module.graph))
            return make_boxed_func(graph_module.forward)
        return compiler

    reference = layer_norm_with_random_affine(48)
    separate = use_separate_layer_norm_gradients(torch.nn.Sequential(copy.deepcopy(reference)))[0]
    residual, update, upstream = torch.randn(12, 9, 48), torch.randn(12, 9, 48), torch.randn(12, 9, 48)
    dtype = torch.bfloat16 if autocast else torch.float32
    results = []
    torch._dynamo.reset()  # compiled code that an earlier test left for these layers' frames would be reused
    for layer, run in ((reference, lambda function: function),
                       (separate, lambda function: torch.compile(function, dynamic=True, backend=aot_autograd(
                           fw_compiler=recorder("forward"), bw_compiler=recorder("backward"))))):
        inputs = [residual.clone().requires_grad_(), update.clone().requires_grad_()]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            output = run(lambda x, y, layer=layer: layer((x + 2 * y).to(dtype)))(*inputs)
        (output.float() * upstream).sum().backward()
        results.append((output, inputs[0].grad, inputs[1].grad, layer.weight.grad, layer.bias.grad))
    assert any("hf_srcfeat_benchmarks.column_sums" in graph for graph in graphs["backward"])
    assert not any("column_sums" in graph for graph in graphs["forward"])
    assert results[1][0].dtype == results[0][0].dtype == dtype
    if not autocast:
        for ours, expected in zip(results[1], results[0], strict=True):
            torch.testing.assert_close(ours, expected)
        return
    for ours, expected in zip(results[1][:3], results[0][:3], strict=True):
        torch.testing.assert_close(ours.to(torch.bfloat16), expected.to(torch.bfloat16))
    # The weight and bias gradients against float64 from the same rounded inputs and output gradient
    exact = copy.deepcopy(reference).double()
    inputs = (residual + 2 * update).to(torch.bfloat16).double()
    (exact(inputs) * upstream.to(torch.bfloat16).double()).sum().backward()
    torch.testing.assert_close(results[1][3].double(), exact.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(results[1][4].double(), exact.bias.grad, rtol=1e-4, atol=1e-4)


def test_column_sums_keep_their_rows_precision_under_autocast():
    # The separate LayerNorm gradients' reduction: 4,096 rows summed in float32 even where autocast would multiply
    # in bfloat16 (which rounds each row to 8 bits of mantissa).
    from benchmarks.opaque_kernels import column_sums

    torch.manual_seed(0)
    rows = torch.randn(4096, 24) + 1.0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        sums = column_sums(rows)
    assert sums.dtype == torch.float32
    torch.testing.assert_close(sums.double(), rows.double().sum(0), rtol=1e-5, atol=1e-3)


def test_operation_timer_times_every_operation_of_a_forward_and_backward_pass(test_sentences):
    import torch

    from benchmarks.op_timing import OperationTimer

    layer = torch.nn.Linear(len(test_sentences), 4)
    # Inputs from real test sentences: a row per sentence, its word count in every column
    lengths = torch.tensor([[float(len(sentence.split()))] * len(test_sentences) for sentence in test_sentences])
    inputs = lengths.requires_grad_()
    timer = OperationTimer()
    with timer:
        layer(inputs).pow(2).sum().backward()
    assert timer.calls["aten.addmm"] == 1  # the forward product with the bias
    assert timer.calls["aten.mm"] == 2  # the backward's: the inputs' and the weight's gradients
    assert set(timer.seconds) == set(timer.calls) and all(seconds > 0 for seconds in timer.seconds.values())


def test_training_efficiency_benchmark_refuses_parses_of_other_sentences(feature_tokenizer, train_annotations,
                                                                         multi30k_dir, tmp_path):
    from benchmarks import batching_efficiency

    parses = tmp_path / "train.en.conllu"
    write_conllu(train_annotations[1:21], parses)
    with pytest.raises(SystemExit, match="does not hold the parses of the first 20 training sources in order"):
        batching_efficiency.main(["--tokenizer", "unused", "--source_conllu", str(parses), "--data_dir",
                                  str(multi30k_dir), "--pairs", "20", "--output", str(tmp_path / "unused.json")])


@pytest.mark.parametrize("zoo_products", [False, True])
def test_static_cache_decoder_step_gives_the_eager_steps_logits_in_greedy_and_beam_search(
        model_folder, test_sentences, zoo_products, monkeypatch):
    # The compiled-decoding benchmark's restated step, run eagerly on the loops' own state at every step after the
    # first (its products by PyTorch's linear or through the opaque operation calling the zoo's): the same logits
    # as the zoo's step, and the loops carry on as before; while sentences leave the batch, with the caches'
    # unwritten positions holding NaN (the loops allocate them uninitialised), post- and pre-norm.
    from transformers import AutoModelForSeq2SeqLM

    from benchmarks.compiled_decoding import StaticCacheDecoderStep, step_through
    from hf_srcfeat.decoding import DecoderState, PreallocatedLayer
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer

    def with_nan_beyond_length(method):
        """`method`, with the unwritten positions of the buffers it allocates set to NaN."""
        def filled(layer, *args):
            allocated = layer.key_buffer if layer.is_initialized else None
            method(layer, *args)
            if layer.is_initialized and layer.key_buffer is not allocated:
                layer.key_buffer[:, layer.length:] = layer.value_buffer[:, layer.length:] = float("nan")
        return filled

    monkeypatch.setattr(PreallocatedLayer, "lazy_initialization",
                        with_nan_beyond_length(PreallocatedLayer.lazy_initialization))
    monkeypatch.setattr(PreallocatedLayer, "select_rows", with_nan_beyond_length(PreallocatedLayer.select_rows))
    tokenizer = load_tokenizer(model_folder)
    batch = tokenizer(test_sentences, padding=True, return_tensors="pt")
    trained = AutoModelForSeq2SeqLM.from_pretrained(model_folder).eval()
    eager_step = DecoderState.step
    for model in (trained, pre_norm_model(tokenizer)):
        static_step = step_through(StaticCacheDecoderStep(model, zoo_products))
        differences, rows_seen = [], set()

        def both_steps(state, input_ids, static_step=static_step, differences=differences, rows_seen=rows_seen):
            length = state.self_attention.get_seq_length()
            logits = eager_step(state, input_ids)
            if length:
                for layer in state.self_attention_layers:
                    layer.length = length  # the static step writes the same position again
                differences.append(float((static_step(state, input_ids) - logits).abs().max()))
                rows_seen.add(input_ids.shape[0])
            return logits

        for beams in (1, 4):
            expected = model.generate(**batch, num_beams=beams, do_sample=False, max_new_tokens=24)
            monkeypatch.setattr(DecoderState, "step", both_steps)
            assert torch.equal(model.generate(**batch, num_beams=beams, do_sample=False, max_new_tokens=24),
                               expected)
            monkeypatch.setattr(DecoderState, "step", eager_step)
        assert len(differences) > 20 and max(differences) < 1e-4
        if model is trained:  # sentences finished at different steps and left the batch
            assert len(rows_seen) > 2


@pytest.mark.slow
def test_compiled_decoding_benchmark_times_a_compiled_step_beside_the_eager_loops(model_folder, multi30k_dir,
                                                                                   tmp_path):
    from benchmarks import compiled_decoding

    result = compiled_decoding.main(["--model", str(model_folder), "--sentences", "3", "--rounds", "1",
                                     "--max_new_tokens", "8", "--variants", "inductor", "--data_dir",
                                     str(multi30k_dir), "--output", str(tmp_path / "compiled.json")])
    assert json.loads((tmp_path / "compiled.json").read_text())["timings"] == result["timings"]
    for setting in ("batch32_beam4", "batch1_beam1"):
        eager, compiled = result["timings"][setting]["eager"], result["timings"][setting]["inductor"]
        assert eager["identical_to_eager"] == compiled["identical_to_eager"] == 1.0
        assert compiled["warm_up_seconds"] > 0 and compiled["sentences_per_second"] > 0
        assert compiled["speedup_over_eager"] > 0


@pytest.mark.slow
def test_annotation_depth_benchmark_translates_segmented_text_as_fully_parsed_text(model_folder, multi30k_dir,
                                                                                    tmp_path):
    from benchmarks import measure_annotation_depth

    result = measure_annotation_depth.main(["--model", str(model_folder), "--sentences", "4", "--rounds", "1",
                                            "--batch_size", "2", "--data_dir", str(multi30k_dir), "--output",
                                            str(tmp_path / "depth.json")])
    assert result["same_translations"] and result["source_features_read"] == []
    assert set(result["sentences_per_second"]) == {"full_parse_then_translate", "words_only_then_translate",
                                                   "full_parse_alone", "words_only_alone"}
    assert json.loads((tmp_path / "depth.json").read_text())["median_seconds"] == result["median_seconds"]


@pytest.mark.slow
def test_greedy_step_costs_time_every_kernel_over_the_models_own_step_weights(model_folder, multi30k_dir, tmp_path):
    from transformers import AutoConfig

    from benchmarks import greedy_step_costs
    from hf_srcfeat.integrations.ctranslate2 import export

    exported = export(str(model_folder), str(tmp_path / "ctranslate2"), None)
    result = greedy_step_costs.main(["--model", str(model_folder), "--sentences", "2", "--rounds", "1",
                                     "--max_new_tokens", "8", "--data_dir", str(multi30k_dir), "--ctranslate2",
                                     str(exported), "--positions", "3", "--output", str(tmp_path / "costs.json")])
    assert result["weight_matrices_per_step"] == 6 * AutoConfig.from_pretrained(model_folder).decoder_layers + 1
    assert set(result["milliseconds_per_sentence"]) == {
        "encoder_alone", "encoder_after_decoding", "generate_first_token", "generate_two_tokens", "generate_whole",
        "generate_whole_preparing_each_call", "loop_without_generate_front", "ctranslate2_first_token",
        "ctranslate2_two_tokens", "ctranslate2_whole"}
    assert result["milliseconds_per_sentence"]["encoder_after_decoding"] > 0
    # The loop called without generate's preparation decodes the same tokens
    assert result["loop_without_generate_front_identical"] is True
    assert isinstance(result["milliseconds_of_preparing_each_call_paired"], float)
    # The greedy loop in no-grad mode decodes the same tokens as the shipped loop in inference mode
    assert result["inference_mode_identical"] is True
    assert isinstance(result["milliseconds_of_no_grad_mode_paired"], float)
    # The same greedy translations: as many tokens as generate's (each counting its </s>).
    assert result["ctranslate2"]["tokens_per_sentence"] == result["tokens_per_sentence"]
    kernels = set(result["milliseconds_of_one_steps_products"])
    assert {"addmm_over_transposed_copies", "onednn_packed", "addmm_over_transposed_copies_after_other_memory"} <= kernels
    # numpy's OpenBLAS, timed where the zoo multiplies single rows by it
    assert ("openblas_over_transposed_copies" in kernels) == result["single_rows_through_openblas"]
    # Each side's first three tokens, timed one by one: the first (encoder and set-up included) the slowest
    by_position = result["milliseconds_to_token_by_position"]
    assert set(by_position) == {"generate", "ctranslate2"}
    for side in by_position.values():
        assert len(side) == 3 and min(side) > 0 and side[0] == max(side)
    assert json.loads((tmp_path / "costs.json").read_text())["tokens_per_sentence"] == result["tokens_per_sentence"]


@pytest.mark.slow
def test_batch1_alternatives_restate_the_encoder_layers_to_the_bit_and_time_every_arm(model_folder, multi30k_dir,
                                                                                       tmp_path):
    from benchmarks import batch1_alternatives

    result = batch1_alternatives.main(["--model", str(model_folder), "--sentences", "3", "--rounds", "1",
                                       "--max_new_tokens", "6", "--data_dir", str(multi30k_dir), "--output",
                                       str(tmp_path / "alternatives.json")])
    assert result["encoder_layers_restated_identical"] is True
    assert set(result["milliseconds_per_sentence"]) == {
        f"encoder_{way}_{when}" for way in ("modules", "layers_restated") for when in ("back_to_back", "after_decoding")}
    assert {"output_projection_bfloat16", "step_products_weights_on_huge_pages"} <= set(result["milliseconds_per_step"])
    assert all(value > 0 for value in [*result["milliseconds_per_sentence"].values(),
                                       *result["milliseconds_per_step"].values()])
    assert json.loads((tmp_path / "alternatives.json").read_text())["rounds"] == 1


def test_restated_encoder_layers_apply_only_within_the_block(model_folder):
    from transformers import AutoModelForSeq2SeqLM

    from benchmarks.batch1_alternatives import encoder_layers_restated
    from hf_srcfeat.modeling_srcfeat_transformer import SrcFeatEncoderLayer

    shipped = SrcFeatEncoderLayer.__call__
    model = AutoModelForSeq2SeqLM.from_pretrained(model_folder).eval()
    inputs = {"input_ids": torch.tensor([[5, 6, 7, 2]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    with torch.no_grad():
        expected = model.get_encoder()(**inputs).last_hidden_state
        with encoder_layers_restated():
            assert SrcFeatEncoderLayer.__call__ is not shipped
            restated = model.get_encoder()(**inputs).last_hidden_state
    assert SrcFeatEncoderLayer.__call__ is shipped
    assert torch.equal(restated, expected)


@pytest.mark.parametrize("script, option", [("measure_annotation_depth", "--sentences"),
                                            ("measure_annotation_depth", "--batch_size"),
                                            ("greedy_step_costs", "--rounds"), ("greedy_step_costs", "--max_new_tokens"),
                                            ("batch1_alternatives", "--sentences")])
def test_the_annotation_depth_and_greedy_cost_benchmarks_refuse_counts_below_one(script, option, tmp_path, capsys):
    import importlib

    benchmark = importlib.import_module(f"benchmarks.{script}")
    with pytest.raises(SystemExit):
        benchmark.main(["--model", str(tmp_path / "unused"), option, "0", "--output", str(tmp_path / "out.json")])
    assert f"{option} must be at least 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_compiled_decoding_benchmark_refuses_a_method_model_and_no_new_tokens(tmp_path, capsys):
    from benchmarks import compiled_decoding
    from hf_srcfeat import DepsSanConfig, DepsSanForConditionalGeneration

    config = DepsSanConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                           decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)
    DepsSanForConditionalGeneration(config).save_pretrained(tmp_path / "deps_san")
    with pytest.raises(SystemExit):
        compiled_decoding.main(["--model", str(tmp_path / "deps_san"), "--output", str(tmp_path / "out.json")])
    assert "is a deps_san model: this benchmark restates the baseline's" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compiled_decoding.main(["--model", str(tmp_path / "deps_san"), "--max_new_tokens", "0", "--output",
                                str(tmp_path / "out.json")])
    assert "--max_new_tokens must be at least 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_loss_benchmark_measures_both_ways_in_fresh_processes_with_the_same_loss(tmp_path):
    from benchmarks import measure_loss_without_logits

    output = tmp_path / "loss.json"
    measure_loss_without_logits.main(["--vocabularies", "600", "--positions", "300", "--d_model", "32",
                                      "--rounds", "1", "--output", str(output)])
    result = json.loads(output.read_text())["vocabularies"]["600"]
    assert result["same_loss"]
    for way in ("logits", "without_logits"):
        assert result[way]["seconds"] > 0 and result[way]["peak_memory_growth_mb"] >= 0


def test_sentences_packed_into_rows_give_each_sentence_its_own_attention(tmp_path):
    from benchmarks import measure_attention_packing

    output = tmp_path / "packing.json"
    measure_attention_packing.main(["--device", "cpu", "--sentences", "24", "--length", "8", "--heads", "2",
                                    "--head_dim", "16", "--groups", "2", "4", "--sdpa_groups", "3", "4",
                                    "--output", str(output)])

    ways = json.loads(output.read_text())["ways"]
    kinds = ("bidirectional", "causal")
    assert set(ways) == {f"{kind}_flex_packed_{group}" for kind in kinds for group in (2, 4)} | {
        f"{kind}_sdpa_math_packed_{group}" for kind in kinds for group in (3, 4)}
    for name, measured in ways.items():
        # the real positions' outputs against float32 math on the unpacked batch; for SDPA (a backward on the CPU)
        # the three input gradients too
        errors = measured["relative_errors"]
        assert len(errors) == (1 if "flex" in name else 4) and max(errors) < 1e-5, name


def test_a_model_attending_over_packed_rows_has_the_unpacked_models_loss_and_gradients(
        trained_baseline, multi30k_dir, subword_tokenizer, monkeypatch):
    # The GPU benchmark's packed_attention variant on real pairs: an odd batch, so one sentence is left unpacked.
    from benchmarks import packed_attention
    from hf_srcfeat.data.multi30k import load_multi30k

    model, _ = trained_baseline
    pairs = load_multi30k("val", data_dir=multi30k_dir, limit=15)
    batch = subword_tokenizer(list(pairs["source"]), text_target=list(pairs["target"]), padding=True,
                              return_tensors="pt")
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == subword_tokenizer.pad_token_id, -100)
    assert (batch["attention_mask"] == 0).any() and (batch["labels"] == -100).any()
    packed_calls = []
    block_diagonal_mask = packed_attention.block_diagonal_mask
    monkeypatch.setattr(packed_attention, "block_diagonal_mask",
                        lambda *arguments: packed_calls.append(arguments[1]) or block_diagonal_mask(*arguments))
    packed = packed_attention.use_packed_attention(copy.deepcopy(model)).eval()
    results = []
    for trained in (model.eval(), packed):
        trained.zero_grad(set_to_none=True)
        loss = trained(**batch).loss
        loss.backward()
        results.append((loss.detach(), {name: parameter.grad for name, parameter in trained.named_parameters()}))
    model.zero_grad(set_to_none=True)
    layers = model.config.encoder_layers + 2 * model.config.decoder_layers
    assert len(packed_calls) == layers and packed_calls.count(True) == model.config.decoder_layers  # causal ones
    (loss, gradients), (packed_loss, packed_gradients) = results
    torch.testing.assert_close(packed_loss, loss)
    for name, gradient in gradients.items():
        torch.testing.assert_close(packed_gradients[name], gradient, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("causal", [False, True])
def test_the_packed_rows_mask_puts_each_sentences_own_mask_on_the_diagonal(causal):
    from benchmarks.packed_attention import block_diagonal_mask

    real = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    own = real[:, None, None, :].expand(5, 1, 3, 3)
    if causal:
        own = own & torch.ones(3, 3, dtype=torch.bool).tril()
    expected = torch.zeros(2, 1, 6, 6, dtype=torch.bool)
    for row in range(2):  # the fifth sentence is left over
        for sentence in range(2):
            expected[row, 0, 3 * sentence:3 * sentence + 3, 3 * sentence:3 * sentence + 3] = own[2 * row + sentence, 0]
    additive = torch.zeros(5, 1, 1, 3).masked_fill(~real[:, None, None, :], torch.finfo(torch.float32).min)
    for mask in (real[:, None, None, :], own if causal else real[:, None, None, :].expand(5, 1, 3, 3), additive):
        assert torch.equal(block_diagonal_mask(mask, causal, 2, 2, 3, 3, torch.device("cpu")), expected)
    # one mask for the whole batch ([1, 1, queries, keys]), and none (causal only, or everything allowed)
    shared = block_diagonal_mask(real[1:2, None, None, :], causal, 2, 2, 3, 3, torch.device("cpu"))
    assert torch.equal(shared, block_diagonal_mask(None, causal, 2, 2, 3, 3, torch.device("cpu")))


def test_packed_attention_with_one_mask_for_the_whole_batch_attends_the_leftover_sentence_by_it_too():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from benchmarks.packed_attention import packed_sdpa_attention

    torch.manual_seed(0)
    # 5 sentences (one left over), 2 heads, 4 positions, as the projections' transposed views
    query, key, value = (torch.randn(5, 4, 2, 8).transpose(1, 2) for _ in range(3))
    shared = torch.tensor([True, True, False, True])[None, None, None, :]  # [1, 1, 1, keys]
    module = torch.nn.Module()
    packed, _ = packed_sdpa_attention(module, query, key, value, shared)
    unpacked, _ = sdpa_attention_forward(module, query, key, value, shared)
    torch.testing.assert_close(packed, unpacked)


def test_the_packing_benchmark_refuses_groups_that_do_not_divide_the_batch(tmp_path, capsys):
    from benchmarks import measure_attention_packing

    with pytest.raises(SystemExit):
        measure_attention_packing.main(["--device", "cpu", "--sentences", "24", "--groups", "4", "5",
                                        "--output", str(tmp_path / "packing.json")])
    assert "--groups 5: each must be at least 1 and divide --sentences 24" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        measure_attention_packing.main(["--device", "cpu", "--sentences", "24", "--sdpa_groups", "5",
                                        "--output", str(tmp_path / "packing.json")])
    assert "--sdpa_groups 5: each must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "packing.json").exists()


def test_the_gpu_time_breakdown_files_kernels_under_kinds_and_counts_launches_and_synchronisations():
    from collections import Counter

    from benchmarks.gpu_time_breakdown import summarize

    # Kernel names of the kinds torch.profiler reports for a compiled training step on an H100/H200 (shortened)
    device_work = [
        ("nvjet_sm90_tst_128x200_64x5_2x1_v_bz_coopA_bias_TNT", 300.0),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 300.0),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26", 200.0),
        ("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*)", 50.0),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)", 50.0),
        # inductor names its kernels by what they fuse: this one pads the attention mask, it is no attention
        ("triton_poi_fused__scaled_dot_product_efficient_attention_constant_pad_nd_1", 100.0),
        ("triton_per_fused__to_copy_add_native_dropout_backward_native_layer_norm_4", 50.0),
        ("triton_tem_fused_mm_0", 40.0),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", 100.0),
        ("Memcpy HtoD (Pinned -> Device)", 10.0),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", 10.0),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<float, float>", 30.0),
        ("void some_library::unknown_kernel<float>", 10.0),
    ]
    host_calls = Counter({"cuLaunchKernel": 6, "cudaLaunchKernel": 2, "cudaMemcpyAsync": 1,
                          "cudaStreamSynchronize": 3, "cudaFree": 5})
    summary = summarize(device_work, host_calls, wall_seconds=0.005, units=2, unit="step")

    assert [(entry["kind"], entry["milliseconds_per_unit"]) for entry in summary["by_kind"]] == [
        ("matrix product", 0.3), ("attention", 0.15), ("fused element-wise (inductor)", 0.075),
        ("optimizer", 0.05), ("template: matrix product or FlexAttention (inductor)", 0.02),
        ("element-wise or reduction (ATen)", 0.015), ("copy or fill", 0.01), ("other", 0.005)]  # longest first
    assert summary["device_busy_milliseconds_per_unit"] == 0.625
    assert summary["device_busy_share_of_wall"] == 0.25  # 1.25 ms of device work in 5 ms
    assert summary["launches_per_unit"] == 4.5  # kernel launches and the asynchronous copy, not cudaFree
    assert summary["host_synchronizations_per_unit"] == 1.5
    assert summary["kernels"][0]["share"] == 0.24
    assert sum(entry["share"] for entry in summary["by_kind"]) == pytest.approx(1)


def test_the_gpu_time_breakdown_counts_device_work_once_leaving_out_annotations_on_the_device_timeline():
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from benchmarks.gpu_time_breakdown import device_work_and_host_calls

    def event(name, device_type, microseconds=0.0, annotation=False):
        return SimpleNamespace(name=name, device_type=device_type, is_user_annotation=annotation,
                               time_range=SimpleNamespace(elapsed_us=lambda: microseconds))

    events = [event("aten::mm", DeviceType.CPU), event("cudaLaunchKernel", DeviceType.CPU),
              event("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", DeviceType.CUDA, 30.0),
              event("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", DeviceType.CUDA, 20.0),
              # the optimiser's span on the device's timeline covers its kernel above
              event("Optimizer.step#AdamW.step", DeviceType.CUDA, 25.0, annotation=True),
              event("Activity Buffer Request", DeviceType.CUDA, 7.0), event("cudaStreamSynchronize", DeviceType.CPU)]
    device_work, host_calls = device_work_and_host_calls(events)
    assert device_work == [("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 30.0),
                           ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", 20.0)]
    assert host_calls == {"cudaLaunchKernel": 1, "cudaStreamSynchronize": 1}


def test_the_whole_model_compiles_once_although_its_first_batch_has_equally_long_sources_and_targets(
        feature_tokenizer, train_annotations, train_pairs, compiler_settings_kept):
    import torch._dynamo
    from torch._dynamo.utils import counters

    from benchmarks import gpu_throughput

    rows = encoded_rows(feature_tokenizer, train_annotations, train_pairs, 200)
    batches = gpu_throughput.token_batches(feature_tokenizer, rows, 1024, seed=1)
    equal = [batch for batch in batches if batch["input_ids"].shape[1] == batch["labels"].shape[1]]
    unequal = [batch for batch in batches if batch["input_ids"].shape[1] != batch["labels"].shape[1]]
    assert equal and len(unequal) >= 2
    torch._dynamo.reset()
    counters.clear()
    try:
        trainee = gpu_throughput.Trainee(gpu_throughput.build("baseline", "benchmark", feature_tokenizer), "cpu",
                                         whole_model=True, backend="eager")
        # one graph with a symbol per size serves every batch (duck sizing would trace the first batch's sizes as
        # one symbol and compile the whole model again for the next)
        with torch._dynamo.config.patch(error_on_recompile=True):
            for batch in [equal[0], *unequal[:2]]:
                trainee.step(batch)
        assert counters["stats"]["unique_graphs"] == 1
    finally:
        torch._dynamo.reset()


def test_the_gpu_benchmark_compiles_every_system_whole_with_whole_model(
        feature_tokenizer, train_annotations, multi30k_dir, tmp_path, compiler_settings_kept):
    from benchmarks import gpu_throughput

    tokenizer_folder, parses = saved_benchmark_inputs(feature_tokenizer, train_annotations[:120], tmp_path)
    output = tmp_path / "gpu.json"
    gpu_throughput.main([
        "--device", "cpu", "--sizes", "benchmark", "--systems", "baseline", "deps_san", "--compile", "--whole_model",
        "--baseline_variants", "eager", "--compile_backend", "eager", "--pairs", "120", "--max_tokens", "1024",
        "--warmup", "1", "--steps", "1", "--rounds", "1", "--tokenizer", str(tokenizer_folder), "--source_conllu",
        str(parses), "--data_dir", str(multi30k_dir), "--output", str(output)])

    result = json.loads(output.read_text())
    assert result["errors"] == {"benchmark": {}}
    assert result["settings"]["compiled"].startswith("the whole forward with the loss")
    systems = result["systems"]["benchmark"]
    whole = "whole forward with the loss, backend eager, mode none"
    assert {name: summary["compiled"] for name, summary in systems.items()} == {
        "baseline": whole, "deps_san": whole, "baseline_eager": "eager"}


def test_method_flops_counts_the_baseline_s_products_and_states_each_method_relative_to_it(
        feature_tokenizer, train_annotations, multi30k_dir, tmp_path):
    from benchmarks import method_flops

    tokenizer_folder, parses = saved_benchmark_inputs(feature_tokenizer, train_annotations[:60], tmp_path)
    output = tmp_path / "flops.json"
    result = method_flops.main([
        "--size", "benchmark", "--systems", "baseline", "lfe_joint", "deps_san", "--pairs", "60", "--max_tokens",
        "512", "--batches", "2", "--paper_vocabulary", "37000", "--tokenizer", str(tokenizer_folder),
        "--source_conllu", str(parses), "--data_dir", str(multi30k_dir), "--output", str(output)])
    assert json.loads(output.read_text()) == json.loads(json.dumps(result))
    systems = result["systems"]
    # The baseline's products over the padded positions, 3 x the forward's (input and weight gradients): the
    # projections, feed-forward and output layers; attention's own products run inside SDPA, uncounted on the CPU.
    size = method_flops.gpu_throughput.SIZES["benchmark"]
    d, ffn, layers = size["d_model"], size["ffn_dim"], size["encoder_layers"]
    sources, targets, vocabulary = result["source_positions"], result["target_positions"], result["vocab_size"]
    forward = (layers * (8 * sources * d * d + 4 * sources * d * ffn)
               + layers * (12 * targets * d * d + 4 * sources * d * d + 4 * targets * d * ffn)
               + 2 * targets * d * vocabulary)
    assert systems["baseline"]["flops"] == 3 * forward
    assert systems["baseline"]["relative_to_baseline"] == 1.0
    assert systems["deps_san"]["relative_to_baseline"] == pytest.approx(1.0, abs=0.01)  # a mask: no products
    # the latent feature encoder is a second encoder of the same size; at a larger vocabulary the output layer
    # takes a larger share of the baseline's work, and the encoder a smaller one
    encoder_share = 3 * layers * (8 * sources * d * d + 4 * sources * d * ffn) / (3 * forward)
    assert systems["lfe_joint"]["relative_to_baseline"] == pytest.approx(1 + encoder_share, abs=0.01)
    assert 1 < systems["lfe_joint"]["relative_to_baseline_at_paper_vocabulary"] < systems["lfe_joint"][
        "relative_to_baseline"]


def test_method_flops_counts_a_blockwise_product_by_its_blocks_rows_as_the_step_runs_it(monkeypatch):
    """Phrase pooling multiplies a phrase's glance once per phrase, not once per token: the count follows what runs."""
    from benchmarks import method_flops
    from hf_srcfeat import linear

    monkeypatch.setattr(linear, "ONEDNN_MIN_ROWS", 1 << 62)  # PyTorch's products, as training_step_flops counts
    layer = linear.Linear(64 + 32, 48)
    tokens, shared = torch.randn(10, 4, 64, requires_grad=True), torch.randn(10, 1, 32, requires_grad=True)
    with method_flops.ProductCounter() as counter:
        token_products, shared_products = linear.products_of_concatenated_inputs(layer, [tokens, shared])
        (token_products + shared_products).sum().backward()
    assert counter.flops == 3 * 2 * 48 * (40 * 64 + 10 * 32)  # forward, input and weight gradients


@pytest.mark.parametrize("arguments, message", [
    (["--systems", "lfe_joint"], "--systems must include baseline"),
    (["--batches", "0"], "--batches must be at least 1, got 0"),
    (["--paper_vocabulary", "-5"], "--paper_vocabulary must be 0"),
])
def test_method_flops_refuses_arguments_it_cannot_count_with_before_any_work(arguments, message, tmp_path, capsys):
    from benchmarks import method_flops

    output = tmp_path / "flops.json"
    with pytest.raises(SystemExit):
        method_flops.main(["--output", str(output), *arguments])
    assert message in capsys.readouterr().err
    assert not output.exists()


def test_random_baseline_takes_another_shape_and_refuses_bad_overrides_a_used_folder_and_a_missing_model(model_folder, tmp_path,
                                                                                            capsys):
    from transformers import AutoModelForSeq2SeqLM

    from benchmarks import random_baseline

    overrides = '{"d_model": 48, "encoder_layers": 1, "decoder_ffn_dim": 96, "vocab_size": 5000}'
    folder = random_baseline.main(["--like", str(model_folder), "--output", str(tmp_path / "random"),
                                   "--config_overrides", overrides])
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    assert (model.config.d_model, model.config.encoder_layers, model.config.vocab_size) == (48, 1, 5000)
    assert (folder / "tokenizer.json").exists()
    for arguments, message in [(["--output", str(folder)], "already holds files"),
                               (["--output", str(tmp_path / "other"), "--config_overrides", "[1, 2]"],
                                "must be a JSON object"),
                               (["--output", str(tmp_path / "other"), "--config_overrides", "{d_model: 48"],
                                "is not JSON"),
                               (["--output", str(tmp_path / "other"), "--config_overrides", '{"d_modle": 48}'],
                                "has no argument 'd_modle'")]:
        with pytest.raises(SystemExit):
            random_baseline.main(["--like", str(model_folder), *arguments])
        assert message in capsys.readouterr().err
    assert not (tmp_path / "other").exists()  # nothing written for a refused call
    with pytest.raises(SystemExit):
        random_baseline.main(["--like", str(tmp_path / "missing"), "--output", str(tmp_path / "other")])
    assert "is not a model folder" in capsys.readouterr().err


@pytest.mark.parametrize("prepare_untimed", [False, True])
def test_a_setting_times_its_arms_in_one_fresh_prepared_block_after_any_untimed_preparation(prepare_untimed):
    import contextlib

    from benchmarks.measure_decoding_speed import timed_setting

    events: list[str] = []

    @contextlib.contextmanager
    def prepared_weights():
        events.append("block opens")
        yield
        events.append("block closes")

    runners = {name: (lambda batch_size, beams, name=name: events.append(f"{name} {batch_size}x{beams}"))
               for name in ("baseline fast", "method fast")}
    preparers = [lambda batch_size, beams, name=name: events.append(f"prepare {name}")
                 for name in ("baseline", "method")] if prepare_untimed else []
    seconds = timed_setting(runners, preparers, 32, 4, prepared_weights)
    assert set(seconds) == set(runners) and all(value >= 0 for value in seconds.values())
    assert events == ["block opens", *(["prepare baseline", "prepare method"] if prepare_untimed else []),
                      "baseline fast 32x4", "method fast 32x4", "block closes"]
