"""The decoding loops of `hf_srcfeat.decoding`: what `generate` runs for greedy and beam search. They must give
exactly Transformers' own loops' token ids (`fast_decoding=False`) while dropping finished sentences from the batch.
Every method's end-to-end class (tests/end_to_end.py) checks the same on its own trained model."""

from __future__ import annotations

import pytest
import torch

from hf_srcfeat import decoding, modeling_srcfeat_transformer


@pytest.fixture(scope="module")
def sources(multi30k_dir) -> list[str]:
    from hf_srcfeat.data.multi30k import load_multi30k

    return list(load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=32)["source"])


@pytest.fixture(scope="module")
def batch(subword_tokenizer, sources):
    """32 real test sources of different lengths, padded together."""
    return subword_tokenizer(sources, padding=True, return_tensors="pt")


def spy_on(monkeypatch, name: str) -> list:
    """Record the calls of a loop (or check) as the model calls it."""
    calls: list = []
    original = getattr(modeling_srcfeat_transformer, name)

    def recorded(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(modeling_srcfeat_transformer, name, recorded)
    return calls


@pytest.mark.parametrize("options", [
    {"num_beams": 1},
    {"num_beams": 4},
    {"num_beams": 5, "length_penalty": 0.6},
    {"num_beams": 4, "early_stopping": True},
    {"num_beams": 4, "num_return_sequences": 3},
    {"num_beams": 1, "no_repeat_ngram_size": 2, "min_new_tokens": 3},
    {"num_beams": 4, "no_repeat_ngram_size": 3, "repetition_penalty": 1.3},
    {"num_beams": 3, "max_new_tokens": 6},  # every sentence stopped by the length limit
])
def test_the_fast_loops_generate_what_transformers_loops_generate(trained_baseline, batch, monkeypatch, options):
    model, _ = trained_baseline
    expected = model.generate(**batch, **options, fast_decoding=False)
    calls = spy_on(monkeypatch, "beam_search" if options["num_beams"] > 1 else "greedy_search")
    assert torch.equal(model.generate(**batch, **options), expected)
    assert calls, "generate did not take the fast loop"


def test_a_decoder_prompt_of_several_tokens_per_sentence_gives_transformers_beams(trained_baseline, batch,
                                                                                  monkeypatch):
    # The first step runs one row per sentence: each sentence's own prompt, repeated for its beams.
    model, _ = trained_baseline
    start = model.config.decoder_start_token_id
    prompts = torch.tensor([[start, 5 + row % 7, 40 + row] for row in range(len(batch["input_ids"]))])
    options = {"decoder_input_ids": prompts, "num_beams": 4, "num_return_sequences": 2, "max_new_tokens": 12}
    expected = model.generate(**batch, **options, fast_decoding=False)
    calls = spy_on(monkeypatch, "beam_search")
    assert torch.equal(model.generate(**batch, **options), expected)
    assert calls


def test_sentences_leave_the_batch_when_they_are_done(trained_baseline, batch, monkeypatch):
    model, _ = trained_baseline
    rows_per_step: list[int] = []
    step = decoding.DecoderState.step

    def counted(self, input_ids):
        rows_per_step.append(input_ids.shape[0])
        return step(self, input_ids)

    monkeypatch.setattr(decoding.DecoderState, "step", counted)
    model.generate(**batch, num_beams=4)
    beams = rows_per_step[1:]  # the first step runs once per sentence (next test)
    assert beams[0] == 32 * 4
    assert beams[-1] < beams[0] and beams == sorted(beams, reverse=True)


def test_beam_search_starts_with_one_decoder_row_per_sentence(trained_baseline, batch, monkeypatch):
    # Every beam of a sentence starts from the same prompt: the first step, and the cross-attention keys and values
    # it computes, run once per sentence; the beams then attend to their sentence's keys and values together.
    model, _ = trained_baseline
    rows_per_step: list[int] = []
    cross_attention_rows: list[list[int]] = []
    step = decoding.DecoderState.step

    def counted(self, input_ids):
        rows_per_step.append(input_ids.shape[0])
        logits = step(self, input_ids)
        cross_attention_rows.append([len(layer.keys) for layer in self.cache.cross_attention_cache.layers])
        return logits

    monkeypatch.setattr(decoding.DecoderState, "step", counted)
    expected = model.generate(**batch, num_beams=4, fast_decoding=False)
    assert torch.equal(model.generate(**batch, num_beams=4), expected)
    assert rows_per_step[:2] == [32, 32 * 4]
    # Sentences leave with all their beams: the cross-attention caches keep one row per sentence still decoded
    assert rows_per_step[-1] < 32 * 4
    assert all(rows == [rows_in_step // 4] * model.config.decoder_layers
               for rows, rows_in_step in zip(cross_attention_rows[1:], rows_per_step[1:], strict=True))


def test_a_sentence_alone_and_in_a_padded_batch_get_the_same_translation(trained_baseline, subword_tokenizer,
                                                                          sources, batch):
    model, _ = trained_baseline
    for num_beams in (1, 4):
        together = model.generate(**batch, num_beams=num_beams)
        for index in (0, 7, 19):
            alone = model.generate(**subword_tokenizer(sources[index], return_tensors="pt"),
                                   num_beams=num_beams)
            assert subword_tokenizer.decode(alone[0], skip_special_tokens=True) == \
                subword_tokenizer.decode(together[index], skip_special_tokens=True)


@pytest.mark.parametrize("max_new_tokens", [64, 5])  # finished by </s>; by the length limit
def test_one_sentence_decoded_greedily_gets_transformers_tokens(trained_baseline, subword_tokenizer, sources,
                                                               max_new_tokens):
    model, _ = trained_baseline
    for source in sources[:6]:
        alone = subword_tokenizer(source, return_tensors="pt")
        ours = model.generate(**alone, num_beams=1, no_repeat_ngram_size=3, max_new_tokens=max_new_tokens)
        theirs = model.generate(**alone, num_beams=1, no_repeat_ngram_size=3, max_new_tokens=max_new_tokens,
                                fast_decoding=False)
        assert torch.equal(ours, theirs), source


def test_a_single_row_is_finished_exactly_when_transformers_criteria_say_so(subword_tokenizer, sources):
    from transformers.generation.stopping_criteria import (
        EosTokenCriteria,
        MaxLengthCriteria,
        StoppingCriteriaList,
    )

    eos = subword_tokenizer.eos_token_id
    row = torch.tensor([subword_tokenizer(sources[0])["input_ids"]])  # ends with </s>
    comma = subword_tokenizer.convert_tokens_to_ids(",")
    criteria_sets = [
        [MaxLengthCriteria(10), EosTokenCriteria(eos)],
        [EosTokenCriteria([comma, eos])],
        [MaxLengthCriteria(5)],
        [MaxLengthCriteria(30, max_position_embeddings=8), EosTokenCriteria(eos)],  # Transformers' warning path
        [EosTokenCriteria(torch.tensor(eos))],  # one id as a 0-d tensor
    ]
    outcomes = set()
    for criteria in criteria_sets:
        for length in range(1, row.shape[1] + 1):
            expected = StoppingCriteriaList(criteria)(row[:, :length], None)
            finished = decoding.finished_rows(StoppingCriteriaList(criteria), row[:, :length])
            assert (finished is not None) == bool(expected.any()), (criteria, length)
            assert finished is None or torch.equal(finished, expected)
            outcomes.add(finished is not None)
    assert outcomes == {True, False}


@pytest.mark.parametrize("options, reason", [
    ({"do_sample": True, "num_beams": 1}, "sampling"),
    ({"num_beams": 4, "return_dict_in_generate": True, "output_scores": True}, "return_dict_in_generate"),
    ({"num_beams": 1, "use_cache": False}, "use_cache=False"),
    ({"num_beams": 2, "encoder_no_repeat_ngram_size": 2}, "EncoderNoRepeatNGramLogitsProcessor"),
])
def test_settings_the_fast_loops_do_not_cover_fall_back_to_transformers_loops(trained_baseline, batch, monkeypatch,
                                                                             options, reason):
    model, _ = trained_baseline
    reasons = []

    def recorded(*arguments, **keywords):
        reasons.append(decoding.reason_not_supported(*arguments, **keywords))
        return reasons[-1]

    monkeypatch.setattr(modeling_srcfeat_transformer, "reason_not_supported", recorded)
    beam_calls, greedy_calls = spy_on(monkeypatch, "beam_search"), spy_on(monkeypatch, "greedy_search")
    torch.manual_seed(0)
    model.generate(**batch, max_new_tokens=5, **options)
    assert reasons == [reason] and not beam_calls and not greedy_calls


@pytest.mark.parametrize("num_beams", [1, 4])
def test_the_fast_loops_get_no_cache_prepared_for_transformers_loops(trained_baseline, batch, monkeypatch, num_beams):
    # They keep their own: the one generate would prepare (copying the model config twice) is never read.
    model, _ = trained_baseline
    caches = []
    loop_name = "beam_search" if num_beams > 1 else "greedy_search"
    loop = getattr(modeling_srcfeat_transformer, loop_name)

    def recorded(*args, **kwargs):
        caches.append(kwargs.get("past_key_values"))
        return loop(*args, **kwargs)

    monkeypatch.setattr(modeling_srcfeat_transformer, loop_name, recorded)
    model.generate(**batch, num_beams=num_beams, max_new_tokens=5)
    assert caches == [None]


class CollectingStreamer:
    """A `generate` streamer (Transformers' `BaseStreamer` interface) keeping what it is sent."""

    def __init__(self):
        self.tokens: list[torch.Tensor] = []

    def put(self, value: torch.Tensor) -> None:
        self.tokens.append(value.clone())

    def end(self) -> None:
        pass


def record_cache_preparation(monkeypatch) -> list[bool]:
    """The model's `fast_decoding` at each call that prepares Transformers' cache."""
    from transformers.generation.utils import GenerationMixin

    prepared: list[bool] = []
    prepare = GenerationMixin._prepare_cache_for_generation

    def recorded(self, *args, **kwargs):
        prepared.append(self.fast_decoding)
        return prepare(self, *args, **kwargs)

    monkeypatch.setattr(GenerationMixin, "_prepare_cache_for_generation", recorded)
    return prepared


@pytest.mark.parametrize("options, prepared_for_the_loop", [
    ({"num_beams": 1, "encoder_no_repeat_ngram_size": 2}, False),
    ({"num_beams": 3, "encoder_no_repeat_ngram_size": 2}, False),
    ({"num_beams": 1, "streamer": "collecting"}, False),
    # Chunked prefill writes the cache before the first step: generate prepares it as always.
    ({"num_beams": 1, "encoder_no_repeat_ngram_size": 2, "prefill_chunk_size": 4}, True),
])
def test_transformers_loops_taking_over_from_a_setting_seen_in_the_loop_get_a_cache_and_give_the_same_tokens(
        trained_baseline, batch, monkeypatch, options, prepared_for_the_loop):
    # These settings show only in the loop (a logits processor, a streamer): generate prepared no cache for it, so
    # the decoder makes one at its first step.
    from transformers.cache_utils import EncoderDecoderCache

    model, _ = trained_baseline
    prepared = record_cache_preparation(monkeypatch)
    made = []  # the model's fast_decoding at each cache made, by generate's preparation or by the decoder
    make = EncoderDecoderCache.__init__

    def recorded(self, *args, **kwargs):
        made.append(model.fast_decoding)
        make(self, *args, **kwargs)

    monkeypatch.setattr(EncoderDecoderCache, "__init__", recorded)
    streamer_rows = 1 if options.get("streamer") else 4  # a streamer takes one sentence
    rows = {key: value[:streamer_rows] for key, value in batch.items()}
    outputs, streamed = {}, {}
    for fast_decoding in (True, False):
        streamer = CollectingStreamer() if options.get("streamer") else None
        settings = {**options, "streamer": streamer} if streamer else options
        outputs[fast_decoding] = model.generate(**rows, **settings, max_new_tokens=8, fast_decoding=fast_decoding)
        streamed[fast_decoding] = [tokens.tolist() for tokens in streamer.tokens] if streamer else None
    assert (True in prepared) == prepared_for_the_loop and False in prepared
    assert True in made  # Transformers' loop had a cache: prepared, or else made by the decoder
    assert torch.equal(outputs[True], outputs[False]) and streamed[True] == streamed[False]


def test_assisted_generation_gets_transformers_cache_and_tokens(trained_baseline, batch, monkeypatch):
    model, _ = trained_baseline
    prepared = record_cache_preparation(monkeypatch)
    rows = {key: value[:1] for key, value in batch.items()}  # assisted generation takes one sentence
    assisted = model.generate(**rows, assistant_model=model, max_new_tokens=8)
    assert True in prepared
    assert torch.equal(assisted, model.generate(**rows, max_new_tokens=8, fast_decoding=False))


def test_a_custom_generate_loop_gets_transformers_cache(trained_baseline, batch):
    from transformers.cache_utils import EncoderDecoderCache

    model, _ = trained_baseline
    received = []

    def custom_generate(model, input_ids, **model_kwargs):
        received.append(model_kwargs.get("past_key_values"))
        return input_ids

    model.generate(**batch, custom_generate=custom_generate, max_new_tokens=4)
    assert len(received) == 1 and isinstance(received[0], EncoderDecoderCache)
    assert model.fast_decoding  # the model's setting is back


def test_the_cache_reorders_beams_in_place_without_growing():
    layer = decoding.PreallocatedLayer(max_length=5)
    keys = torch.arange(3.0).reshape(3, 1, 1, 1)
    for _ in range(2):
        layer.update(keys, keys + 10)
    buffer = layer.key_buffer
    layer.select_rows(torch.tensor([2, 2]))  # two beams continue row 2; row 0 and 1 leave
    stored, values = layer.update(torch.zeros(2, 1, 1, 1), torch.zeros(2, 1, 1, 1))
    assert layer.key_buffer is buffer and stored.shape == (2, 1, 3, 1)
    assert stored[:, 0, :, 0].tolist() == [[2.0, 2.0, 0.0], [2.0, 2.0, 0.0]]
    assert values[:, 0, :, 0].tolist() == [[12.0, 12.0, 0.0], [12.0, 12.0, 0.0]]


def test_the_cache_reorders_swapped_and_shared_parents():
    layer = decoding.PreallocatedLayer(max_length=4)
    keys = torch.arange(4.0).reshape(4, 1, 1, 1)
    layer.update(keys, keys + 10)
    layer.select_rows(torch.tensor([1, 0, 2, 0]))  # rows 0 and 1 swap, row 2 stays, row 3 continues row 0
    stored, values = layer.update(torch.zeros(4, 1, 1, 1), torch.zeros(4, 1, 1, 1))
    assert stored[:, 0, 0, 0].tolist() == [1.0, 0.0, 2.0, 0.0]
    assert values[:, 0, 0, 0].tolist() == [11.0, 10.0, 12.0, 10.0]


def test_the_cache_repeats_rows_for_beams_into_larger_buffers():
    layer = decoding.PreallocatedLayer(max_length=4)
    layer.update(torch.tensor([1.0, 2.0]).reshape(2, 1, 1, 1), torch.zeros(2, 1, 1, 1))
    layer.select_rows(torch.tensor([0, 0, 0, 1, 1, 1]))  # three beams per sentence
    stored, _ = layer.update(torch.full((6, 1, 1, 1), 9.0), torch.zeros(6, 1, 1, 1))
    assert stored[:, 0, :, 0].tolist() == [[1.0, 9.0]] * 3 + [[2.0, 9.0]] * 3


def test_the_cache_keeps_every_heads_positions_through_reordering_as_concatenation_would():
    # Several heads and positions, so that a layout that mixed heads and positions up shows.
    generator = torch.Generator().manual_seed(0)
    layer, reference_keys, reference_values = decoding.PreallocatedLayer(max_length=6), None, None
    for rows in (torch.tensor([0, 1]), torch.tensor([0, 0, 0, 1, 1, 1]), torch.tensor([2, 0, 1, 5, 5, 3])):
        keys, values = torch.randn(len(rows), 4, 1, 8, generator=generator), torch.randn(len(rows), 4, 1, 8,
                                                                                         generator=generator)
        if reference_keys is not None:
            layer.select_rows(rows)
            reference_keys, reference_values = reference_keys[rows], reference_values[rows]
        stored_keys, stored_values = layer.update(keys, values)
        reference_keys = keys if reference_keys is None else torch.cat((reference_keys, keys), dim=2)
        reference_values = values if reference_values is None else torch.cat((reference_values, values), dim=2)
        assert stored_keys.shape == reference_keys.shape == (len(rows), 4, layer.get_seq_length(), 8)
        assert torch.equal(stored_keys, reference_keys) and torch.equal(stored_values, reference_values)


def test_repeated_ngrams_are_banned_exactly_as_transformers_processor_bans_them(subword_tokenizer, sources):
    from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

    # Real target-side token ids, each sentence followed by itself so that every n-gram repeats.
    ids = [subword_tokenizer(text)["input_ids"] for text in sources[:12]]
    rows = torch.tensor([(row * 2)[:24] for row in ids if len(row) >= 12])
    generator = torch.Generator().manual_seed(0)
    bans = 0
    for ngram_size in (1, 2, 3, 4):
        for length in range(1, rows.shape[1] + 1):
            prefix = rows[:, :length]
            scores = torch.randn(len(rows), len(subword_tokenizer), generator=generator)
            expected = NoRepeatNGramLogitsProcessor(ngram_size)(prefix, scores)
            banned = decoding.ban_repeated_ngrams(prefix, scores, ngram_size)
            assert torch.equal(banned, expected), (ngram_size, length)
            # In place (the beam loop's own scores): the same values, written over the given tensor
            own = scores.clone()
            assert decoding.ban_repeated_ngrams(prefix, own, ngram_size, in_place=True) is own
            assert torch.equal(own, expected), (ngram_size, length)
            for row in range(len(rows)):  # one row at a time, as greedy decoding of one sentence bans them
                assert torch.equal(decoding.ban_repeated_ngrams(prefix[row:row + 1], scores[row:row + 1], ngram_size),
                                   expected[row:row + 1]), (ngram_size, length, row)
                own = scores[row:row + 1].clone()
                assert decoding.ban_repeated_ngrams(prefix[row:row + 1], own, ngram_size, in_place=True) is own
                assert torch.equal(own, expected[row:row + 1]), (ngram_size, length, row)
            bans += int(torch.isinf(expected).sum())
    assert bans > 1000  # the rows repeat themselves: most prefixes past their first sentence ban something
    # Scores narrower than the token ids (an output layer smaller than the embeddings): ids past them are not banned
    narrow = torch.randn(len(rows), int(rows.max()) - 5, generator=generator)
    for row in (slice(None), slice(0, 1)):
        expected = NoRepeatNGramLogitsProcessor(2)(rows[row], narrow[row])
        assert torch.equal(decoding.ban_repeated_ngrams(rows[row], narrow[row], 2), expected)


@pytest.mark.parametrize("score_modified", [False, True])
def test_beams_attending_to_their_sentences_cached_memory_get_what_repeated_memory_gives(trained_baseline,
                                                                                          score_modified):
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    from hf_srcfeat.attention import ScoreModification

    attention = trained_baseline[0].get_decoder().layers[0].encoder_attn
    torch.manual_seed(0)
    d_model, beams = attention.embed_dim, 3
    memory = torch.randn(2, 5, d_model)
    source_mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    queries = torch.randn(2 * beams, 1, d_model)
    # A score modification (none of the zoo's cross-attentions has one) takes the repeated keys and values
    modification = ScoreModification(bias=torch.randn(2 * beams, attention.num_heads, 1, 5)) if score_modified \
        else None
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    with torch.no_grad():
        attention(queries[::beams], key_value_states=memory, attention_mask=source_mask, past_key_values=cache)
        assert cache.cross_attention_cache.layers[0].keys.shape[0] == 2  # one row per sentence
        shared = attention(queries, key_value_states=memory.repeat_interleave(beams, 0),
                           attention_mask=source_mask.repeat_interleave(beams, 0), past_key_values=cache,
                           score_modification=modification)[0]
        repeated = attention(queries, key_value_states=memory.repeat_interleave(beams, 0),
                             attention_mask=source_mask.repeat_interleave(beams, 0),
                             score_modification=modification)[0]
    assert shared.shape == repeated.shape == (2 * beams, 1, d_model)
    assert torch.allclose(shared, repeated, atol=1e-5)


def test_every_models_encoders_and_decoders_forward_keeps_the_signature_inspect_reads():
    """generate asks for these signatures several times per call: each is computed once, with the class."""
    import inspect

    from hf_srcfeat.auto_registration import model_classes
    from hf_srcfeat.modeling_srcfeat_transformer import ForwardSignatureKept

    model_classes()  # imports every method's modules

    def subclasses(cls: type) -> list[type]:
        return [cls] + [descendant for child in cls.__subclasses__() for descendant in subclasses(child)]

    owners = subclasses(ForwardSignatureKept)
    assert {"SrcFeatEncoder", "SrcFeatDecoder", "PhraseRepForConditionalGeneration"} <= {
        owner.__name__ for owner in owners}
    for owner in owners:
        defined_by = next((cls for cls in owner.__mro__ if "forward" in vars(cls)), object)
        if not issubclass(defined_by, ForwardSignatureKept):  # the mixin, and the base with nn.Module's placeholder
            continue
        forward = owner.forward
        assert isinstance(forward.__signature__, inspect.Signature), owner.__name__
        assert list(forward.__signature__.parameters) == list(
            inspect.signature(inspect.unwrap(forward)).parameters), owner.__name__


@pytest.mark.parametrize("num_beams", [1, 4])
def test_the_loops_run_in_inference_mode_and_hand_back_token_ids_the_caller_may_change(trained_baseline, batch,
                                                                                     monkeypatch, num_beams):
    model, _ = trained_baseline
    modes: list[bool] = []
    step = decoding.DecoderState.step

    def noting_step(self, input_ids):
        modes.append(torch.is_inference_mode_enabled())
        return step(self, input_ids)

    monkeypatch.setattr(decoding.DecoderState, "step", noting_step)
    output = model.generate(**batch, num_beams=num_beams, max_new_tokens=5)
    assert modes and all(modes)
    assert not output.is_inference()
    output[output == model.config.pad_token_id] = -100  # as callers change Transformers' output, e.g. into labels


def test_a_model_that_translated_before_training_still_trains(tiny_config, batch):
    # What decoding leaves behind for later calls (the decoder's sinusoid table, made within the loop's inference
    # mode) must serve training too.
    from hf_srcfeat import SrcFeatTransformerForConditionalGeneration

    torch.manual_seed(0)
    model = SrcFeatTransformerForConditionalGeneration(tiny_config(position_embedding_type="sinusoidal")).eval()
    assert not model.get_decoder().embed_target.sinusoid_tables
    model.generate(input_ids=batch["input_ids"][:2], attention_mask=batch["attention_mask"][:2], num_beams=1,
                   max_new_tokens=3)
    assert model.get_decoder().embed_target.sinusoid_tables
    model.train()
    loss = model(input_ids=batch["input_ids"][:2], attention_mask=batch["attention_mask"][:2],
                 labels=batch["input_ids"][:2, :6]).loss
    loss.backward()
    assert model.get_encoder().layers[0].ffn.fc1.weight.grad is not None
