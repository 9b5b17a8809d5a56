"""Translation pipeline: raw source sentences in, translations out, the source features computed on the way.

Transformers 5 removed the `translation` task (`transformers.pipeline("translation")` raises KeyError), so
`hf_srcfeat.pipeline("translation", model=..., tokenizer=...)` provides it, and the same class is registered
as the task `source-feature-translation` for `transformers.pipeline(...)`.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Collection, Iterable, Mapping, Sequence, Set
from pathlib import Path
from typing import Any, cast

import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForSeq2SeqLM, GenerationConfig, Pipeline
from transformers import pipeline as transformers_pipeline
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.pipelines.pt_utils import PipelineDataset, PipelineIterator

from .annotated_sentence import AnnotatedSentence, carries_inline_factors, check_text
from .decoding_options import check_decoding_options, transformers_generation_default
from .feature_vocabulary import UNK_ID
from .linear import prepared_inference_weights
from .sequence_scores import sequence_scores
from .source_features import SOURCE_FEATURE_NAMES, is_user_factor_feature
from .tokenization_source_features import NO_WORD, check_tokenizer_matches, encoding_options

TASK = "source-feature-translation"
MODEL_INPUTS = ("input_ids", "attention_mask", *SOURCE_FEATURE_NAMES)



#: Generation and batching options that count something, and their smallest value.
COUNTS = {"num_beams": 1, "max_new_tokens": 1, "num_return_sequences": 1, "batch_size": 1, "min_new_tokens": 0}


def check_generation_options(options: dict) -> None:
    """Refuse, naming the option, a count below its minimum (num_beams=0 would divide by zero inside generate) and
    a decoding option outside its values (`hf_srcfeat.decoding_options`)."""
    for name, smallest in COUNTS.items():
        value = options.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < smallest):
            raise ValueError(f"`{name}` must be an integer of at least {smallest}, got {value!r}.")
    check_decoding_options(options)

class SourceFeatureTranslationPipeline(Pipeline):
    """Translate raw sentences (or pre-parsed `AnnotatedSentence`s) with a source-feature model.

    Call with one sentence or a list; returns `[{"translation_text": ...}]` per sentence, as the Transformers
    4 translation pipeline did (`return_tensors=True`: `translation_token_ids` instead, each ending at its end token
    whatever the batch size; `clean_up_tokenization_spaces` as there). Generation parameters (`num_beams`,
    `max_new_tokens`, ...) may be given when the pipeline is created or at each call; the model's generation config
    supplies the rest. `do_sample=True` draws with one beam (the model's config may search with more), `seed=N`
    makes the draws of a call reproducible.
    `return_scores=True` adds each translation's `score`: beam search's own ranking score, the sum of the token
    log-probabilities divided by the length to the power `length_penalty` (greedy and sampled translations are
    scored the same way, from the model's log-probabilities before any temperature or top-k/top-p);
    `do_sample=True, num_return_sequences=N` draws N translations of each sentence. An empty or
    whitespace-only sentence translates to `""` (score `-inf`) without the model, as in `hf-srcfeat-translate`.
    A call warns once of raw sentences in OpenNMT-py's factored format (`word￨value`: give the pipeline
    `parse_factored_lines`'s parses instead) and once (`UnknownLabelsWarning`) of parses most of whose POS tags or
    relations the model reads but never saw, naming the first such input.
    """

    # Transformers declares these switches `None` on Pipeline and the tokenizer and model Optional; this pipeline
    # always has a feature-aware tokenizer and a source-feature model.
    _load_tokenizer = True  # type: ignore[assignment]
    _load_processor = False  # type: ignore[assignment]
    _load_image_processor = False  # type: ignore[assignment]
    _load_feature_extractor = False  # type: ignore[assignment]
    _load_video_processor = False  # type: ignore[assignment]
    _pipeline_calls_generate = True
    tokenizer: Any
    model: Any

    def __init__(self, *args, seed: int | None = None, **kwargs):
        check_seed(seed)
        self._seed = seed
        super().__init__(*args, **kwargs)
        if not hasattr(self.tokenizer, "annotate"):
            raise TypeError(f"the translation pipeline needs the model's source-feature tokenizer "
                            f"(hf_srcfeat.load_tokenizer(<model folder>)), not a {type(self.tokenizer).__name__}.")
        check_tokenizer_matches(self.model.config, self.tokenizer)

    def _sanitize_parameters(self, skip_special_tokens: bool | None = None, return_scores: bool | None = None,
                             truncation: bool | None = None, parse: bool | None = None,
                             return_tensors: bool | None = None, return_text: bool | None = None,
                             clean_up_tokenization_spaces: bool | None = None, **generate_kwargs):
        check_generate_arguments(generate_kwargs, self.model)
        if return_text is False and not (return_tensors or getattr(self, "_postprocess_params", {}).get(
                "return_tensors")):
            raise ValueError("return_text=False: give return_tensors=True for the translations' token ids.")
        postprocess = {name: value for name, value in (("skip_special_tokens", skip_special_tokens),
                                                       ("return_tensors", return_tensors),
                                                       ("clean_up_tokenization_spaces", clean_up_tokenization_spaces))
                       if value is not None}
        if return_scores is not None:
            generate_kwargs["return_scores"] = return_scores
        preprocess = {} if truncation is None else {"truncation": truncation}
        if parse is not None:  # kept with the pipeline's own options, so that parse=False given at creation holds
            preprocess["parse"] = parse
        return preprocess, generate_kwargs, postprocess

    def __call__(self, inputs: str | AnnotatedSentence | list | tuple, **kwargs):
        seed = kwargs.pop("seed", self._seed)
        created = getattr(self, "_generate_kwargs", {})  # the generation settings given when the pipeline was made
        options = {**created, **kwargs}
        check_generation_options(options)  # before any parsing
        check_seed(seed)
        # Sampling asked for (in the call, at creation or in a given generation config), else the model's default.
        given_config = options.get("generation_config")
        asked = next((value for value in (options.get("do_sample"), getattr(given_config, "do_sample", None))
                      if value is not None), None)
        sampling = asked if asked is not None else bool(self.model.generation_config.do_sample)
        if sampling:
            # The beams asked for with the sampling (a search setting given apart, or the model's, yields to it; a
            # generation config given in the call replaces the settings given at creation, as in Transformers).
            if "do_sample" in kwargs:
                beams = kwargs.get("num_beams", 1)
            elif "generation_config" in kwargs:
                beams = kwargs.get("num_beams") or getattr(given_config, "num_beams", None)
            else:
                beams = kwargs.get("num_beams", created.get("num_beams", getattr(given_config, "num_beams", 1)))
            beams = beams or 1
            if beams > 1 and asked is None and seed is None:
                kwargs["do_sample"] = False  # beams asked for win over the model's default of sampling
            elif beams > 1:
                raise ValueError(f"do_sample=True draws each translation token by token: give num_beams=1 (or leave "
                                 f"it out), got num_beams={beams}.")
            else:
                kwargs["num_beams"] = 1  # into the generation config's copy, if one is given (see _forward)
        elif seed is not None:
            raise ValueError("seed makes sampling reproducible: it needs do_sample=True.")
        single = isinstance(inputs, (str, AnnotatedSentence))
        if not single and not isinstance(inputs, (list, tuple, bytes, bytearray, Mapping, Set)) and is_iterable(inputs):
            inputs = list(cast(Iterable, inputs))  # a generator, a datasets column, a KeyDataset: read whole
        if not single and not isinstance(inputs, (list, tuple)):
            check_input(0, inputs)  # None, a number, bytes, a dict: an error that names it
        items = [inputs] if isinstance(inputs, (str, AnnotatedSentence)) else list(inputs)
        if not items:
            raise ValueError("no sentences to translate.")
        # Empty lines translate to nothing without the model, as in the translate command, so that one of them does
        # not fail a whole batch.
        empty = [isinstance(item, str) and not item.strip() for item in items]
        for index, (item, is_empty) in enumerate(zip(items, empty, strict=True)):
            if not is_empty:
                check_input(index, item)
        warn_inline_factors(items, empty)
        positions = [index for index, is_empty in enumerate(empty) if not is_empty]  # in the inputs, for warnings
        items = [item for item, is_empty in zip(items, empty, strict=True) if not is_empty]
        texts = [item for item in items if isinstance(item, str)]
        # parse=False: raw sentences go in as subwords alone, the model's features take their defaults (a warning).
        if texts and kwargs.get("parse", self._preprocess_params.get("parse", True)):  # one annotator call for all raw sentences: faster on batches
            parsed = iter(self.annotate(texts))
            items = [next(parsed) if isinstance(item, str) else item for item in items]
        self.warn_unknown_labels(positions, items)
        if seed is not None:
            torch.manual_seed(seed)
        results: list = []
        if items:
            # The weights stay as they are during a call: the linear layers read copies prepared for inference.
            with prepared_inference_weights(self.model):
                results = super().__call__(items, **kwargs)
        translated = iter(results)
        nothing = self.empty_translation(options)
        results = [list(nothing) if is_empty else next(translated) for is_empty in empty]
        if single:
            return results[0]
        return [result[0] for result in results] if all(len(result) == 1 for result in results) else results

    def empty_translation(self, options: dict) -> list[dict[str, Any]]:
        """What an empty sentence translates to: as many empty translations as asked for, with score -inf."""
        given_config = options.get("generation_config")
        count = options.get("num_return_sequences") or getattr(given_config, "num_return_sequences", None) or \
            self.model.generation_config.num_return_sequences or 1
        return_tensors = options.get("return_tensors", self._postprocess_params.get("return_tensors"))
        entry: dict[str, Any] = {"translation_token_ids": torch.zeros(0, dtype=torch.long)} if return_tensors \
            else {"translation_text": ""}
        if options.get("return_scores", self._forward_params.get("return_scores")):
            entry["score"] = float("-inf")
        return [dict(entry) for _ in range(count)]

    def warn_unknown_labels(self, positions: list[int], items: list) -> None:
        """Once a call (an `UnknownLabelsWarning`), as `hf-srcfeat-translate` says it once a run: the first
        sentence most of whose POS tags or relations the model reads but never saw (CoNLL-U of another tag set,
        or with `_` in those columns), which translates with those features unknown."""
        vocabularies = getattr(self.tokenizer, "feature_vocabularies", None)
        read = getattr(self.model.config, "source_features_read", None)
        for position, item in zip(positions, items, strict=True):
            said = unknown_labels(item, vocabularies, read) if isinstance(item, AnnotatedSentence) else None
            if said is not None:
                warnings.warn(f"input {position} ({item.name}): {said}: {UNKNOWN_LABELS_CONSEQUENCE}; said once a "
                              "call.", UnknownLabelsWarning, stacklevel=3)
                return

    def annotate(self, texts: list[str]) -> list[AnnotatedSentence]:
        """Raw texts as the model reads them: parsed, or, for a model that reads no tag or tree (the baseline,
        n-gram phrases, latent feedback), only segmented into the annotator's words, the words it was trained on."""
        return self.tokenizer.annotate(texts, words_only=not getattr(self.model.config, "reads_parse", True))

    def preprocess(self, sentence: AnnotatedSentence | str, truncation: bool = True, parse: bool = True
                   ) -> dict[str, torch.Tensor]:
        """The sentence's encoding (a raw `str` only with `parse=False`: subwords without features). Longer than the
        tokenizer's `model_max_length`, it is cut there with a warning (`truncation=True`, the default); with
        `truncation=False` it is kept whole up to the model's `max_position_embeddings`, beyond which it is an error
        naming the sentence. Parsed or not, the same rule."""
        if isinstance(sentence, str):
            name = repr(sentence[:60])

            def encode(**options):
                return self.tokenizer(sentence, source_features=False, return_tensors="pt", **options)
        else:
            name = sentence.name

            def encode(**options):
                return self.tokenizer(annotations=sentence, return_tensors="pt", **encoding_options(self.model.config),
                                      **options)
        encoded = encode()
        length = encoded["input_ids"].shape[-1]
        positions = getattr(self.model.config, "max_position_embeddings", None)
        # A checkpoint's tokenizer may take more than the model's positions (or say no limit): the lower one holds.
        limits = [limit for limit in (self.tokenizer.model_max_length, positions) if isinstance(limit, int)]
        limit = (min(limits) if limits else None) if truncation else positions
        if limit is None or length <= limit:
            return dict(encoded)
        if not truncation:
            raise ValueError(f"sentence {name} has {length} tokens, more than the model's "
                             f"max_position_embeddings ({positions}); split it, or translate it cut with "
                             "truncation=True.")
        reason = "the tokenizer's model_max_length" if limit == self.tokenizer.model_max_length else \
            "the model's max_position_embeddings"
        keep = f" Split it, or pass truncation=False to keep up to {positions} tokens." if limit != positions else \
            " Split it."
        warnings.warn(f"sentence {name} has {length} tokens; only its first {limit} ({reason}) are translated.{keep}",
                      stacklevel=2)
        return dict(encode(truncation=True, max_length=limit))

    def _forward(self, model_inputs: dict[str, torch.Tensor], return_scores: bool = False, **generate_kwargs
                 ) -> dict[str, torch.Tensor]:
        batch_size = model_inputs["input_ids"].shape[0]
        generate_kwargs = inside_generation_config(self._prepare_generate_kwargs(generate_kwargs))
        if "max_new_tokens" in generate_kwargs and "generation_config" not in generate_kwargs:
            generate_kwargs.setdefault("max_length", None)  # the limit asked for wins, without a warning
        inputs = {name: model_inputs[name] for name in model_inputs
                  if name in MODEL_INPUTS or is_user_factor_feature(name)}
        # The settings `generate` will use: the call's, over the given generation config's, over the model's.
        settings = self._get_set_generation_params(generate_kwargs)
        given_prompt = generate_kwargs.get("decoder_input_ids")  # else the decoder starts from one token
        prompt = 1 if given_prompt is None else given_prompt.shape[-1]
        if not return_scores:
            output_ids = self.model.generate(**inputs, **generate_kwargs)
            lengths = translation_lengths(output_ids, settings.get("eos_token_id"), prompt)
            # [batch, returned sequences, length], so that batches unbatch into one entry per input sentence.
            return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1]),
                    "lengths": lengths.reshape(batch_size, -1)}
        searched = (settings.get("num_beams") or 1) > 1
        # Beam search ranks its hypotheses by a score; greedy and sampled translations are scored here the same way.
        generated = self.model.generate(**inputs, **inside_generation_config({
            **generate_kwargs, "return_dict_in_generate": True,
            **({"output_scores": True} if searched else {"output_logits": True})}))
        output_ids = generated.sequences
        if searched:
            scores = generated.sequences_scores
        else:
            penalty = settings.get("length_penalty")
            # The step at the length limit, where a generation config's forced_eos_token_id forces the end token.
            prompt = output_ids.shape[-1] - len(generated.logits)
            limit = settings.get("max_new_tokens") or (settings.get("max_length") or
                                                       transformers_generation_default("max_length")) - prompt
            # Transformers forces the first token only right after a one-token decoder prompt.
            scores = sequence_scores(output_ids, generated.logits, settings.get("eos_token_id"),
                                     transformers_generation_default("length_penalty") if penalty is None else penalty,
                                     forced_first_token=settings.get("forced_bos_token_id") if prompt == 1 else None,
                                     forced_last_token=(settings.get("forced_eos_token_id"), limit - 1))
        lengths = translation_lengths(output_ids, settings.get("eos_token_id"), prompt)
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1]),
                "lengths": lengths.reshape(batch_size, -1), "scores": scores.float().reshape(batch_size, -1)}

    def postprocess(self, model_outputs: dict[str, torch.Tensor], skip_special_tokens: bool = True,
                    return_tensors: bool = False, clean_up_tokenization_spaces: bool | None = None
                    ) -> list[dict[str, Any]]:
        # Each translation up to its end token: a batch pads the shorter ones after it, which are none of them.
        sequences = [ids[:length] for ids, length in zip(model_outputs["output_ids"][0],
                                                          model_outputs["lengths"][0].tolist(), strict=True)]
        if return_tensors:
            translations: list[dict[str, Any]] = [{"translation_token_ids": ids} for ids in sequences]
        else:
            decoding = {} if clean_up_tokenization_spaces is None else \
                {"clean_up_tokenization_spaces": clean_up_tokenization_spaces}
            translations = [{"translation_text": self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens,
                                                                       **decoding).strip()}
                            for ids in sequences]
        if "scores" in model_outputs:
            for translation, score in zip(translations, model_outputs["scores"][0].tolist(), strict=True):
                translation["score"] = score
        return translations

    def get_iterator(self, inputs, num_workers: int, batch_size: int, preprocess_params, forward_params,
                     postprocess_params):
        if batch_size == 1:
            return super().get_iterator(inputs, num_workers, batch_size, preprocess_params, forward_params,
                                        postprocess_params)
        # The default collate pads only the sequence axis; the tokenizer pads every per-token feature, and the
        # [S, S] distances are padded here as tensors (the tokenizer would turn them into nested lists).
        def collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
            matrices = [item["dep_distance"][0] for item in items if "dep_distance" in item]
            batch = dict(self.tokenizer.pad([{name: value[0] for name, value in item.items() if name != "dep_distance"}
                                             for item in items], return_tensors="pt"))
            if matrices:
                batch["dep_distance"] = pad_distance_matrices(matrices, batch["input_ids"].shape[-1],
                                                              left=self.tokenizer.padding_side == "left")
            return batch

        loader = DataLoader(PipelineDataset(inputs, self.preprocess, preprocess_params), num_workers=num_workers,
                            batch_size=batch_size, collate_fn=collate)
        model_iterator = PipelineIterator(loader, self.forward, forward_params, loader_batch_size=batch_size)
        return PipelineIterator(model_iterator, self.postprocess, postprocess_params)


def pad_distance_matrices(matrices: Sequence[torch.Tensor], length: int, left: bool) -> torch.Tensor:
    """[batch, length, length] of [S, S] `dep_distance` matrices padded with -1 rows and columns, on the side the
    tokens were padded."""
    padded = torch.full((len(matrices), length, length), NO_WORD, dtype=torch.long)
    for index, matrix in enumerate(matrices):
        size = matrix.shape[-1]
        start = length - size if left else 0
        padded[index, start:start + size, start:start + size] = matrix
    return padded


def translation_lengths(output_ids: torch.Tensor, end_token_ids: int | Sequence[int] | torch.Tensor | None,
                        prompt_length: int) -> torch.Tensor:
    """[sequences] the length of each of `generate`'s [sequences, length] outputs up to and including its first end
    token after the decoder prompt (the whole length without one); what follows it is padding, which a batch adds
    to the shorter translations."""
    full = torch.full(output_ids.shape[:1], output_ids.shape[-1], dtype=torch.long, device=output_ids.device)
    if end_token_ids is None:
        return full
    ends = torch.as_tensor(end_token_ids, device=output_ids.device).flatten()
    is_end = torch.isin(output_ids[:, prompt_length:], ends)
    return torch.where(is_end.any(-1), is_end.long().argmax(-1) + prompt_length + 1, full)


class UnknownLabelsWarning(UserWarning):
    """A sentence most of whose POS tags or relations the model never saw (`unknown_labels`) is translated."""


#: What follows `unknown_labels`'s sentence in the pipeline's warning and `hf-srcfeat-translate`'s message.
UNKNOWN_LABELS_CONSEQUENCE = "translated with them unknown (a parse of another tag set?)"


def unknown_labels(sentence: AnnotatedSentence, vocabularies: Any, features_read: Collection[str] | None
                   ) -> str | None:
    """How a parse most of whose POS tags or relations the vocabularies never saw is said (by the translation
    pipeline and `hf-srcfeat-translate`), e.g. "3 of the 4 words have POS tags the model never saw ('ZZZ')": CoNLL-U
    of another tag set, or with `_` in those columns, translates with those features unknown. Only the features in
    `features_read` count (all where it is None); None for a sentence whose labels are mostly known."""
    words = sentence.words
    if vocabularies is None or not words:
        return None
    labels = {"pos_ids": ("POS tags", vocabularies.pos_tag, vocabularies.pos),
              "deprel_ids": ("relations", lambda word: word.deprel, vocabularies.deprel)}
    for feature, (what, label_of, vocabulary) in labels.items():
        if features_read is not None and feature not in features_read:
            continue
        unknown = [label_of(word) for word in words if vocabulary.id(label_of(word)) == UNK_ID]
        if 2 * len(unknown) > len(words):
            return (f"{len(unknown)} of the {len(words)} words have {what} the model never saw "
                    f"({', '.join(repr(label) for label in list(dict.fromkeys(unknown))[:5])})")
    return None


def warn_inline_factors(items: Sequence[object], empty: Sequence[bool]) -> None:
    """Once a call, naming the first: raw sentences in OpenNMT-py's factored format (`word￨value`, U+FFE8), which
    would be translated as text, values and all (`hf-srcfeat-translate` refuses such lines without
    `--input_format factored`)."""
    factored = [index for index, (item, is_empty) in enumerate(zip(items, empty, strict=True))
                if not is_empty and isinstance(item, str) and carries_inline_factors(item)]
    if not factored:
        return
    others = f" (and {len(factored) - 1} more)" if len(factored) > 1 else ""
    warnings.warn(f"input {factored[0]} ({items[factored[0]]!r:.60}){others} carries factors inline (word￨value, "
                  "OpenNMT-py's format) and is translated as plain text, values and all: give the pipeline "
                  "hf_srcfeat.data.user_factors.parse_factored_lines(translator.tokenizer.annotator, lines, "
                  "factor_names) instead, or translate the file with hf-srcfeat-translate --input_format factored "
                  "--factor_names NAME ...", stacklevel=3)


def inside_generation_config(generate_kwargs: dict) -> dict:
    """`generate`'s arguments with the generation settings moved into a copy of the given generation config, if
    there is one: `generate` deprecates settings beside a config."""
    given = generate_kwargs.get("generation_config")
    if given is None:
        return generate_kwargs
    settings = {name: value for name, value in generate_kwargs.items()
                if name != "generation_config" and hasattr(given, name)}
    config = copy.deepcopy(given)
    config.update(**settings)
    return {**{name: value for name, value in generate_kwargs.items() if name not in settings},
            "generation_config": config}


def is_iterable(value: object) -> bool:
    try:
        iter(cast(Iterable, value))  # what is to be found out
    except TypeError:
        return False
    return True


def check_seed(seed: object) -> None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"`seed` must be an integer, got {seed!r}.")


#: Options of `generate` itself, besides the generation config's settings and the model's inputs.
GENERATE_ARGUMENTS = ("generation_config", "logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn",
                      "synced_gpus", "assistant_model", "streamer", "negative_prompt_ids",
                      "negative_prompt_attention_mask", "use_model_defaults", "custom_generate", "return_scores",
                      "assistant_tokenizer", "tokenizer")


def check_generate_arguments(options: dict, model: Any) -> None:
    """Refuse, naming it, an option that is no generation setting, no argument of the model's `generate` and no
    input of its `forward` (which `generate` would blame on the model)."""
    import inspect

    known = {*vars(GenerationConfig()), *GENERATE_ARGUMENTS, *inspect.signature(model.generate).parameters,
             *inspect.signature(model.forward).parameters}
    unknown = [name for name in options if name not in known]
    for name in unknown:
        if name in ("src_lang", "tgt_lang"):
            raise ValueError(f"`{name}` is not an option of this pipeline: a model translates the one direction it "
                             "was trained for (a model grafted on a multilingual checkpoint keeps the target "
                             "language it was fine-tuned for in its generation config).")
        raise ValueError(f"`{name}` is not an option of the translation pipeline (nor a generation setting); see "
                         "transformers.GenerationConfig for those.")


def check_input(index: int, item: object) -> None:
    """A sentence to translate is a non-empty string or an `AnnotatedSentence`; anything else is an error naming it."""
    if isinstance(item, AnnotatedSentence):
        return
    if isinstance(item, dict):
        raise TypeError(f"input {index} is a dict ({item!r:.60}); pass the sentence itself, a str or an "
                        "AnnotatedSentence.")
    check_text(index, item)


def register_pipeline() -> None:
    PIPELINE_REGISTRY.register_pipeline(TASK, pipeline_class=SourceFeatureTranslationPipeline,
                                        pt_model=AutoModelForSeq2SeqLM, type="text")


def check_task_direction(task: str | None, tokenizer: Any) -> None:
    """`translation_xx_to_yy` names a direction; a model translates from its tokenizer's source language only."""
    parts = (task or "").split("_")
    language = getattr(tokenizer, "language", None)
    if len(parts) == 4 and parts[2] == "to" and isinstance(language, str) and parts[1] != language:
        raise ValueError(f"task {task!r}: the model translates from {language!r}, not {parts[1]!r}; use "
                         "'translation'.")


#: What `pipeline` passes on to a tokenizer it loads itself.
TOKENIZER_LOADING_OPTIONS = ("revision", "token", "trust_remote_code")


def pipeline(task: str | None = None, model: Any = None, tokenizer: Any = None, **kwargs) -> Pipeline:
    """`transformers.pipeline`, with `translation` (and `translation_xx_to_yy`) mapped to this library's
    source-feature translation pipeline; every other task goes to Transformers unchanged. Translation runs this
    installed library's pipeline class, also for a published repository, whose config names its own copy (which
    Transformers would run only with `trust_remote_code=True`), and a model given by name gets its tokenizer as
    `load_tokenizer` reads it (a model started from a pretrained checkpoint keeps that checkpoint's tokenizer)."""
    named = task
    if task is not None and (task == "translation" or task.startswith("translation_")):
        task = TASK
        check_generation_options(kwargs)
    if task == TASK:
        kwargs.setdefault("pipeline_class", SourceFeatureTranslationPipeline)
        if tokenizer is None and isinstance(model, (str, Path)):
            from .tokenization_pretrained_source_features import load_tokenizer

            tokenizer = load_tokenizer(model, **{name: kwargs[name] for name in TOKENIZER_LOADING_OPTIONS
                                                 if name in kwargs})
        check_task_direction(named, tokenizer)
    return transformers_pipeline(task, model=model, tokenizer=tokenizer, **kwargs)  # type: ignore[arg-type]  # its overloads name the tasks
