"""Greedy and beam search that compute only what the output depends on, for every model of the zoo.

`generate` runs Transformers' loops through `SrcFeatTransformerForConditionalGeneration._sample` and
`._beam_search`; for the settings a translation uses (greedy or beam search, the length and repetition options,
the outputs as token ids) the model hands them to the loops here instead. Same algorithm, same outputs, less work:

* a sentence leaves the batch as soon as its result is fixed (greedy: it emitted EOS; beam search: the stopping
  rule Transformers applies to the whole batch holds for it), instead of being computed until the longest is done;
* self-attention keys and values live in buffers allocated once for the longest output, a row's positions one
  block; beam search reorders them in place (one gather per layer) instead of concatenating a new copy every step;
* beam search turns the step's logits into scores in place (log-softmax, banned n-grams, the beams' running
  scores), with no new vocabulary-sized tensor per operation;
* cross-attention keys and values are computed once per sentence and never reordered: the beams of a sentence
  attend to them together, as the query positions of one row; beam search's first step, where all beams of a
  sentence hold the same prompt, runs once per sentence;
* one decoder pass per step straight through the layers, without `generate`'s per-step input preparation,
  mask building and output bookkeeping; where the model restates its decoder layers (the baseline's, phrase
  representations'), the steps of one new token run as tensor operations over weights looked up once per call
  (`hf_srcfeat.decoder_step`), not module by module.

Transformers' own per-step pieces (logits processors, stopping criteria, the beam bookkeeping of
`GenerationMixin`) are called as they are, so the two loops cannot drift apart in what they choose.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, cast

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicCache, DynamicLayer, EncoderDecoderCache
from transformers.generation import logits_process
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria
from transformers.masking_utils import create_bidirectional_mask

#: Logits processors that look at each row on its own (its tokens so far, its length): rows may leave the batch.
ROW_WISE_PROCESSORS = (
    logits_process.MinLengthLogitsProcessor,
    logits_process.MinNewTokensLengthLogitsProcessor,
    logits_process.RepetitionPenaltyLogitsProcessor,
    logits_process.NoRepeatNGramLogitsProcessor,
    logits_process.SequenceBiasLogitsProcessor,  # NoBadWordsLogitsProcessor too
    logits_process.ForcedBOSTokenLogitsProcessor,
    logits_process.ForcedEOSTokenLogitsProcessor,
    logits_process.InfNanRemoveLogitsProcessor,
    logits_process.ExponentialDecayLengthPenalty,
    logits_process.LogitNormalization,
    logits_process.SuppressTokensAtBeginLogitsProcessor,
    logits_process.SuppressTokensLogitsProcessor,
)
ROW_WISE_STOPPING_CRITERIA = (MaxLengthCriteria, EosTokenCriteria)


def apply_processors(logits_processor, input_ids: torch.Tensor, scores: torch.Tensor, in_place: bool = False
                     ) -> torch.Tensor:
    """`logits_processor(input_ids, scores)` for the row-wise processors, which take no other argument: without
    `LogitsProcessorList`'s per-call signature inspection of every processor (2% of a greedy step of one sentence).
    No-repeat n-grams are banned by `ban_repeated_ngrams` instead of the processor's loops over rows (`in_place`:
    in `scores` itself, when the caller owns it)."""
    for processor in logits_processor:
        if type(processor) is logits_process.NoRepeatNGramLogitsProcessor:
            scores = ban_repeated_ngrams(input_ids, scores, processor.ngram_size, in_place)
        else:
            scores = processor(input_ids, scores)
    return scores


def ban_repeated_ngrams(input_ids: torch.Tensor, scores: torch.Tensor, ngram_size: int, in_place: bool = False
                        ) -> torch.Tensor:
    """`NoRepeatNGramLogitsProcessor(ngram_size)(input_ids, scores)`: a token that would complete an n-gram the row
    already holds gets -inf (in a copy of `scores`, or in `scores` itself with `in_place`); tokens past the
    vocabulary of `scores` are not banned, as the processor ignores them. Writing only the banned entries instead of
    the processor's mask over every row and token and its masked copy takes 0.09 ms at 128 rows and 8,000 tokens
    against 1.4 ms (a beam search step at batch 32, beam 4), 4 us against 36 us for one row."""
    length = input_ids.shape[1]
    if length < ngram_size:  # no n-gram complete yet
        return scores
    if input_ids.shape[0] == 1:
        # One row (greedy decoding of one sentence): its tokens compared in Python take 4 us against 30 us for the
        # tensor operations below.
        tokens = input_ids[0].tolist()
        followed = tokens[length - ngram_size + 1:]  # what a new token would follow
        vocabulary = scores.shape[-1]
        banned = [tokens[end - 1] for end in range(ngram_size, length + 1)
                  if tokens[end - ngram_size:end - 1] == followed and tokens[end - 1] < vocabulary]
        if banned:
            scores = scores if in_place else scores.clone()
            scores[0, banned] = -float("inf")
        return scores
    ngrams = input_ids.unfold(1, ngram_size, 1)  # [rows, windows, ngram_size]
    last_tokens = input_ids[:, length - ngram_size + 1:]  # what a new token would follow
    repeated = (ngrams[:, :, :-1] == last_tokens[:, None, :]).all(-1) & (ngrams[:, :, -1] < scores.shape[-1])
    banned_rows, windows = repeated.nonzero(as_tuple=True)
    if not in_place:
        scores = scores.clone()
    scores[banned_rows, ngrams[banned_rows, windows, -1]] = -float("inf")
    return scores


def finished_rows(stopping_criteria, sequences: torch.Tensor) -> torch.Tensor | None:
    """`stopping_criteria(sequences, None)`, or None where no row is finished. For one row on the CPU under
    Transformers' own max-length and EOS criteria, decided from its last token: 4 us against 18 us for the criteria's
    tensors and reading their result back (2% of a greedy step of one sentence)."""
    rows, length = sequences.shape
    if rows == 1 and sequences.device.type == "cpu" and all(type(criterion) is EosTokenCriteria or (
            type(criterion) is MaxLengthCriteria  # and not past the positions it warns about
            and (criterion.max_position_embeddings is None or length <= criterion.max_position_embeddings))
            for criterion in stopping_criteria):
        last_token = int(sequences[0, -1])
        finished = any(length >= criterion.max_length if type(criterion) is MaxLengthCriteria
                       else last_token in criterion.eos_token_id.reshape(-1).tolist()
                       for criterion in stopping_criteria)
        return sequences.new_ones(1, dtype=torch.bool) if finished else None
    finished = stopping_criteria(sequences, None)
    return finished if bool(finished.any()) else None


def reason_settings_not_supported(generation_config, model_kwargs: dict) -> str | None:
    """Why the generation config or the model inputs need Transformers' own loop, or None: what is known before
    `generate` builds the loop's processors and criteria (`reason_not_supported` checks those too)."""
    if generation_config.do_sample:
        return "sampling"
    if generation_config.return_dict_in_generate:
        return "return_dict_in_generate"
    if not model_kwargs.get("use_cache", True) or generation_config.use_cache is False:
        return "use_cache=False"
    if model_kwargs.get("decoder_attention_mask") is not None or model_kwargs.get("encoder_outputs") is None:
        return "a decoder attention mask or no encoder output"
    if generation_config._pad_token_tensor is None:
        return "no pad token"
    if getattr(generation_config, "num_beam_groups", 1) not in (None, 1):
        return "diverse beam search"
    return None


def reason_not_supported(input_ids: torch.Tensor, logits_processor, stopping_criteria, generation_config,
                         model_kwargs: dict, synced_gpus: bool = False, streamer: Any = None) -> str | None:
    """Why these `generate` settings need Transformers' own loop, or None when the loops here produce them."""
    if (reason := reason_settings_not_supported(generation_config, model_kwargs)) is not None:
        return reason
    if synced_gpus or streamer is not None:
        return "synced_gpus or a streamer"
    if input_ids.shape[1] >= generation_config.max_length:
        return "a decoder prompt as long as max_length"
    for processor in logits_processor:
        if not isinstance(processor, ROW_WISE_PROCESSORS):
            return type(processor).__name__
    for criterion in stopping_criteria:
        if not isinstance(criterion, ROW_WISE_STOPPING_CRITERIA):
            return type(criterion).__name__
    return None


class PreallocatedLayer(CacheLayerMixin):
    """One layer's self-attention keys and values in [rows, max_length, heads, head_dim] buffers, allocated at the
    first step; the cache of the first `rows` rows is a [rows, heads, length, head_dim] view of them. `select_rows`
    reorders (and shrinks) them in place, or repeats rows into larger buffers when beams start.

    Positions come before heads so that a row's cached positions are one contiguous block: reordering rows copies
    whole blocks, and a step's keys are written as the projection lays them out. Attention reads the transposed
    view (SDPA computes the same values from it)."""

    def __init__(self, max_length: int):
        super().__init__()
        self.max_length = max_length
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        rows, heads, _, head_dim = key_states.shape
        self.key_buffer = key_states.new_empty(rows, self.max_length, heads, head_dim)
        self.value_buffer = value_states.new_empty(rows, self.max_length, heads, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        rows, end = key_states.shape[0], self.length + key_states.shape[2]
        self.key_buffer[:rows, self.length:end] = key_states.transpose(1, 2)
        self.value_buffer[:rows, self.length:end] = value_states.transpose(1, 2)
        self.length = end
        return self._expose(rows)

    def _expose(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`keys` and `values`: the first `rows` rows' cache as [rows, heads, length, head_dim] views."""
        keys = self.key_buffer[:rows, :self.length].transpose(1, 2)
        values = self.value_buffer[:rows, :self.length].transpose(1, 2)
        self.keys, self.values = keys, values
        return keys, values

    def select_rows(self, rows: torch.Tensor) -> None:
        """Row i becomes the old row `rows[i]` (a beam's parent); rows past `len(rows)` are dropped."""
        if not self.is_initialized:
            return
        count, end = rows.numel(), self.length
        if count > len(self.key_buffer):  # beams start from one row per sentence
            key_buffer = self.key_buffer.new_empty(count, *self.key_buffer.shape[1:])
            value_buffer = self.value_buffer.new_empty(count, *self.value_buffer.shape[1:])
            torch.index_select(self.key_buffer[:, :end], 0, rows, out=key_buffer[:, :end])
            torch.index_select(self.value_buffer[:, :end], 0, rows, out=value_buffer[:, :end])
            self.key_buffer, self.value_buffer = key_buffer, value_buffer
        else:  # index_select, then copy back: twice as fast as indexing with `rows`
            self.key_buffer[:count, :end] = self.key_buffer[:, :end].index_select(0, rows)
            self.value_buffer[:count, :end] = self.value_buffer[:, :end].index_select(0, rows)
        self._expose(count)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.max_length


def _select_context_rows(context: Any, rows: torch.Tensor, row_count: int) -> Any:
    """A decoder layer context with every tensor field that has one entry per row cut down to `rows`."""
    if not dataclasses.is_dataclass(context):
        return context
    changes = {field.name: value.index_select(0, rows) for field in dataclasses.fields(context)
               if isinstance(value := getattr(context, field.name), torch.Tensor) and value.dim()
               and value.shape[0] == row_count}
    return dataclasses.replace(context, **changes) if changes else context  # type: ignore[type-var]


class DecoderState:
    """Everything the decoder reads for the rows still being decoded: the caches, the encoder memory and its mask,
    the per-layer contexts a method builds from the encoder output. `step` runs one decoder pass."""

    def __init__(self, model: Any, model_kwargs: dict, max_length: int):
        self.model = model
        self.decoder = model.get_decoder()
        encoder_outputs = model_kwargs["encoder_outputs"]
        self.encoder_hidden_states = encoder_outputs.last_hidden_state
        self.encoder_attention_mask = model_kwargs.get("attention_mask")
        self.rows = self.encoder_hidden_states.shape[0]
        # The mask for one query position; rows stay aligned with the encoder memory (select_rows).
        query = self.encoder_hidden_states[:, :1]
        self.cross_mask = create_bidirectional_mask(config=self.decoder.config, inputs_embeds=query,
                                                    attention_mask=self.encoder_attention_mask,
                                                    encoder_hidden_states=self.encoder_hidden_states)
        self.contexts = self.decoder.layer_contexts(encoder_outputs, self.encoder_attention_mask)
        self.self_attention_layers = [PreallocatedLayer(max_length) for _ in self.decoder.layers]
        self.beams = 1  # rows per sentence; the cross-attention caches hold one row per sentence
        self.self_attention = Cache(layers=list(self.self_attention_layers))
        # No config: with one, every cache made deep-copies the model's config (a third of a millisecond), and
        # the cross-attention layers, filled in order at the first step, need nothing from it.
        self.cache = EncoderDecoderCache(self.self_attention, DynamicCache())
        # The steps of one new token as tensor operations, where the model restates its decoder layers.
        self.decoder_step = model.decoder_step_as_tensor_operations()

    def step(self, input_ids: torch.Tensor) -> torch.Tensor:
        """float32 logits of the next token after `input_ids` [rows, new tokens] for every row."""
        if self.decoder_step is not None and input_ids.shape[1] == 1:
            return self.decoder_step(self, input_ids)
        hidden_states = self.decoder.embed_target(input_ids, self.self_attention.get_seq_length())
        for layer, context in zip(self.decoder.layers, self.contexts, strict=True):
            hidden_states = layer(hidden_states, None, self.encoder_hidden_states, self.cross_mask, context,
                                  past_key_values=self.cache)[0]
        if self.decoder.layer_norm is not None:
            hidden_states = self.decoder.layer_norm(hidden_states)
        return self.model.output_logits(hidden_states[:, -1]).float()

    def first_step_of_beams(self, input_ids: torch.Tensor, num_beams: int) -> torch.Tensor:
        """`step` for the first token of beam search, whose `num_beams` rows per sentence all hold the same prompt:
        the decoder runs on one row per sentence (so the cross-attention keys and values are computed once per
        sentence, not once per beam, and stay so) and its logits and self-attention caches are repeated for every
        beam."""
        beam_memory = self.encoder_hidden_states, self.cross_mask, self.contexts, self.rows
        first_beams = torch.arange(0, self.rows, num_beams, device=input_ids.device)
        self.select_rows(first_beams, first_beams)
        logits = self.step(input_ids.index_select(0, first_beams))
        every_beam = torch.arange(first_beams.numel(), device=input_ids.device).repeat_interleave(num_beams)
        self.select_rows(every_beam)
        self.beams = num_beams
        # The encoder memory generate expanded for the beams, rather than a repeated copy of it.
        self.encoder_hidden_states, self.cross_mask, self.contexts, self.rows = beam_memory
        return logits.index_select(0, every_beam)

    def select_rows(self, rows: torch.Tensor, kept_rows: torch.Tensor | None = None) -> None:
        """Continue with row `rows[i]`'s history as row i. `kept_rows` are the rows whose encoder memory stays
        (in that order), when sentences left the batch or beams start; beams of one sentence share their memory,
        so reordering them does not touch it."""
        for layer in self.self_attention_layers:
            layer.select_rows(rows)
        if kept_rows is None:
            return
        # Sentences leave with all their beams: the cross-attention caches keep one row per sentence.
        self.select_cross_attention_rows(kept_rows[::self.beams] // self.beams)
        self.encoder_hidden_states = self.encoder_hidden_states.index_select(0, kept_rows)
        if isinstance(self.cross_mask, torch.Tensor):  # None when no source is padded
            self.cross_mask = self.cross_mask.index_select(0, kept_rows)
        self.contexts = [_select_context_rows(context, kept_rows, self.rows) for context in self.contexts]
        self.rows = kept_rows.numel()

    def select_cross_attention_rows(self, rows: torch.Tensor) -> None:
        """Cross-attention keys and values of rows `rows` (`batch_select_indices`, by index_select: twice as fast as
        its indexing)."""
        for cross_layer in self.cache.cross_attention_cache.layers:
            layer = cast(DynamicLayer, cross_layer)
            keys, values = layer.keys, layer.values
            if keys is not None and values is not None and layer.get_seq_length() > 0:
                layer.keys, layer.values = keys.index_select(0, rows), values.index_select(0, rows)


def in_inference_mode(loop: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """`loop` run under `torch.inference_mode()`, its token ids handed back as a normal tensor (outside an inference
    mode of the caller's own), which the caller may change in place as it could Transformers' output. Inference mode
    spares the loop's small tensor operations (about a hundred a step) the bookkeeping no-grad mode still does
    (version counters, autograd dispatch): one sentence decoded greedily on a CPU takes about 6% less
    (`benchmarks/greedy_step_costs.py`, its `paired_inference_mode` arm)."""

    @functools.wraps(loop)
    def run(*args, **kwargs) -> torch.Tensor:
        if torch.is_inference_mode_enabled():  # the caller's own: its tensors are inference tensors anyway
            return loop(*args, **kwargs)
        with torch.inference_mode():
            sequences = loop(*args, **kwargs)
        return sequences.clone()

    return run


@in_inference_mode
def greedy_search(model: Any, input_ids: torch.Tensor, logits_processor, stopping_criteria,
                  generation_config, **model_kwargs) -> torch.Tensor:
    """`GenerationMixin._sample` without sampling: the same token ids, each sentence decoded only until its EOS."""
    pad_token_id = int(generation_config._pad_token_tensor)
    max_length = generation_config.max_length
    state = DecoderState(model, model_kwargs, max_length)
    rows, length = input_ids.shape
    output = input_ids.new_full((rows, max(max_length, length)), pad_token_id)
    output[:, :length] = input_ids
    running = output.clone()  # the rows still decoded, compacted; row i is output row origin[i]
    origin = torch.arange(rows, device=input_ids.device)
    next_input = input_ids
    while True:
        scores = apply_processors(logits_processor, running[:, :length], state.step(next_input), in_place=True)
        running[:, length] = scores.argmax(dim=-1)
        length += 1
        finished = finished_rows(stopping_criteria, running[:, :length])
        if finished is not None:
            output[origin[finished], :length] = running[finished, :length]
            kept = (~finished).nonzero().squeeze(1)
            if not kept.numel():
                return output[:, :length]
            running, origin = running[kept], origin[kept]
            state.select_rows(kept, kept)
        next_input = running[:, length - 1:length]


@in_inference_mode
def beam_search(model: Any, input_ids: torch.Tensor, logits_processor, stopping_criteria, generation_config,
                **model_kwargs) -> torch.Tensor:
    """`GenerationMixin._beam_search` without sampling: the same steps on the sentences whose result can still
    change, with Transformers' beam bookkeeping (`model._get_top_k_continuations` and its siblings) called as is."""
    eos_token_id = generation_config._eos_token_tensor
    pad_token_id = generation_config._pad_token_tensor
    early_stopping = generation_config.early_stopping
    length_penalty = generation_config.length_penalty
    max_length = generation_config.max_length
    num_beams = generation_config.num_beams
    num_return_sequences = generation_config.num_return_sequences
    device = input_ids.device

    flat_rows, prompt_length = input_ids.shape
    batch_size = flat_rows // num_beams
    length = prompt_length
    n_eos_tokens = eos_token_id.shape[0] if eos_token_id is not None else 0
    beams_to_keep = max(2, 1 + n_eos_tokens) * num_beams
    top_num_beam_mask = torch.cat((torch.ones(num_beams, dtype=torch.bool),
                                   torch.zeros(beams_to_keep - num_beams, dtype=torch.bool))).to(device)
    fill_value = pad_token_id or eos_token_id[0] if eos_token_id is not None else -1

    running_sequences = torch.full((batch_size, num_beams, max_length), fill_value=fill_value, dtype=torch.int64,
                                   device=device)
    running_sequences[:, :, :length] = input_ids.reshape(batch_size, num_beams, -1)
    sequences = running_sequences.clone()
    running_beam_scores = torch.zeros((batch_size, num_beams), dtype=torch.float, device=device)
    running_beam_scores[:, 1:] = -1e9
    beam_scores = torch.full((batch_size, num_beams), fill_value=-1e9, dtype=torch.float, device=device)
    is_sent_finished = torch.zeros((batch_size, num_beams), dtype=torch.bool, device=device)
    is_early_stop_heuristic_unsatisfied = torch.ones((batch_size, 1), dtype=torch.bool, device=device)
    running_beam_indices = torch.full((batch_size, num_beams, max_length - length), fill_value=-1,
                                      dtype=torch.int32, device=device)
    beam_indices = running_beam_indices.clone()
    # What a sentence ends with, stored when it leaves the batch (origin: its index in the input batch).
    final_sequences, final_scores, final_beam_indices = sequences.clone(), beam_scores.clone(), beam_indices.clone()
    origin = torch.arange(batch_size, device=device)

    state = DecoderState(model, model_kwargs, max_length)
    next_input = input_ids
    while True:
        active = origin.numel()
        if length == prompt_length:
            logits = state.first_step_of_beams(next_input, num_beams)
        else:
            logits = state.step(next_input)
        # The step's logits are this loop's own: each operation writes its result over them (the same values as
        # Transformers' new tensors, without allocating and filling [rows, vocabulary] three times a step).
        log_probs = torch.log_softmax(logits, dim=-1, out=logits)
        log_probs = apply_processors(logits_processor, running_sequences[:, :, :length].reshape(active * num_beams, -1),
                                     log_probs, in_place=True)
        log_probs = log_probs.reshape(active, num_beams, -1).add_(running_beam_scores[:, :, None]).reshape(active, -1)

        topk_log_probs, topk_running_sequences, topk_running_beam_indices = model._get_top_k_continuations(
            accumulated_log_probs=log_probs, running_sequences=running_sequences,
            running_beam_indices=running_beam_indices, cur_len=length, decoder_prompt_len=prompt_length,
            do_sample=False, beams_to_keep=beams_to_keep, num_beams=num_beams, batch_size=active)
        next_token_hits_stopping_criteria = stopping_criteria(
            topk_running_sequences[:, :, :length + 1].reshape(active * beams_to_keep, -1), None
        ).reshape(active, beams_to_keep)
        running_sequences, running_beam_scores, running_beam_indices = model._get_running_beams_for_next_iteration(
            topk_log_probs=topk_log_probs, topk_running_sequences=topk_running_sequences,
            topk_running_beam_indices=topk_running_beam_indices,
            next_token_hits_stopping_criteria=next_token_hits_stopping_criteria, num_beams=num_beams)
        sequences, beam_scores, beam_indices, is_sent_finished = model._update_finished_beams(
            sequences=sequences, topk_running_sequences=topk_running_sequences, beam_scores=beam_scores,
            topk_log_probs=topk_log_probs, beam_indices=beam_indices,
            topk_running_beam_indices=topk_running_beam_indices,
            is_early_stop_heuristic_unsatisfied=is_early_stop_heuristic_unsatisfied,
            is_sent_finished=is_sent_finished, next_token_hits_stopping_criteria=next_token_hits_stopping_criteria,
            top_num_beam_mask=top_num_beam_mask, num_beams=num_beams, cur_len=length,
            decoder_prompt_len=prompt_length, length_penalty=length_penalty, early_stopping=early_stopping)
        parents = running_beam_indices[..., length - prompt_length].long()  # flat row each new beam continues
        length += 1
        is_early_stop_heuristic_unsatisfied = model._check_early_stop_heuristic(
            is_early_stop_heuristic_unsatisfied=is_early_stop_heuristic_unsatisfied,
            running_beam_scores=running_beam_scores, beam_scores=beam_scores, is_sent_finished=is_sent_finished,
            cur_len=length, max_length=max_length, decoder_prompt_len=prompt_length,
            early_stopping=early_stopping, length_penalty=length_penalty)

        # A sentence's finished hypotheses can no longer change once Transformers' stopping rule holds for it
        # (`_beam_search_has_unfinished_sequences`, applied there to the whole batch at once).
        done = ~is_early_stop_heuristic_unsatisfied[:, 0]
        if early_stopping is True:
            done |= is_sent_finished.all(dim=1)
        if bool(next_token_hits_stopping_criteria.all()):  # e.g. max_length: no sentence can continue
            done[:] = True
        if bool(done.any()):
            finished_origin = origin[done]
            final_sequences[finished_origin] = sequences[done]
            final_scores[finished_origin] = beam_scores[done]
            final_beam_indices[finished_origin] = beam_indices[done]
            kept = (~done).nonzero().squeeze(1)
            if not kept.numel():
                break
            origin = origin[kept]
            running_sequences, running_beam_scores = running_sequences[kept], running_beam_scores[kept]
            running_beam_indices, sequences = running_beam_indices[kept], sequences[kept]
            beam_scores, beam_indices = beam_scores[kept], beam_indices[kept]
            is_sent_finished = is_sent_finished[kept]
            is_early_stop_heuristic_unsatisfied = is_early_stop_heuristic_unsatisfied[kept]
            kept_rows = (kept[:, None] * num_beams + torch.arange(num_beams, device=device)).reshape(-1)
            state.select_rows(parents[kept].reshape(-1), kept_rows)
        else:
            state.select_rows(parents.reshape(-1))
        next_input = running_sequences[:, :, length - 1:length].reshape(-1, 1)

    sequences = final_sequences[:, :num_return_sequences].reshape(batch_size * num_return_sequences, -1)
    beam_indices = final_beam_indices[:, :num_return_sequences].reshape(batch_size * num_return_sequences, -1)
    max_generated_length = (beam_indices + 1).bool().sum(dim=1).max()
    return sequences[:, :prompt_length + max_generated_length]


__all__ = ["greedy_search", "beam_search", "in_inference_mode", "reason_not_supported", "reason_settings_not_supported",
           "DecoderState", "PreallocatedLayer"]
