"""Translation pipeline: raw source sentences in, translations out, the source features computed on the way.

Transformers 5 removed the `translation` task (`transformers.pipeline("translation")` raises KeyError), so
`hf_srcfeat.pipeline("translation", model=..., tokenizer=...)` provides it, and the same class is registered
as the task `source-feature-translation` for `transformers.pipeline(...)`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForSeq2SeqLM, Pipeline
from transformers import pipeline as transformers_pipeline
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.pipelines.pt_utils import PipelineDataset, PipelineIterator

from .annotated_sentence import AnnotatedSentence, check_text
from .decoding_options import check_decoding_options
from .linear import prepared_inference_weights
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
    4 translation pipeline did. Generation parameters (`num_beams`, `max_new_tokens`, ...) may be given when
    the pipeline is created or at each call; the model's generation config supplies the rest.
    `return_scores=True` (beam search only) adds each translation's `score`: beam search's own ranking score,
    the sum of the token log-probabilities divided by the length to the power `length_penalty`.
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

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        check_tokenizer_matches(self.model.config, self.tokenizer)

    def _sanitize_parameters(self, skip_special_tokens: bool | None = None, return_scores: bool | None = None,
                             truncation: bool | None = None, parse: bool | None = None, **generate_kwargs):
        postprocess = {} if skip_special_tokens is None else {"skip_special_tokens": skip_special_tokens}
        if return_scores is not None:
            generate_kwargs["return_scores"] = return_scores
        preprocess = {} if truncation is None else {"truncation": truncation}
        if parse is not None:  # kept with the pipeline's own options, so that parse=False given at creation holds
            preprocess["parse"] = parse
        return preprocess, generate_kwargs, postprocess

    def __call__(self, inputs: str | AnnotatedSentence | list | tuple, **kwargs):
        check_generation_options({**getattr(self, "_generate_kwargs", {}), **kwargs})  # before any parsing
        single = isinstance(inputs, (str, AnnotatedSentence))
        if not single and not isinstance(inputs, (list, tuple)):
            check_input(0, inputs)  # None, a number, bytes, a dict: an error that names it
        items = [inputs] if isinstance(inputs, (str, AnnotatedSentence)) else list(inputs)
        if not items:
            raise ValueError("no sentences to translate.")
        for index, item in enumerate(items):
            check_input(index, item)
        texts = [item for item in items if isinstance(item, str)]
        # parse=False: raw sentences go in as subwords alone, the model's features take their defaults (a warning).
        if texts and kwargs.get("parse", self._preprocess_params.get("parse", True)):  # one annotator call for all raw sentences: faster on batches
            parsed = iter(self.annotate(texts))
            items = [next(parsed) if isinstance(item, str) else item for item in items]
        # The weights stay as they are during a call: the linear layers read copies prepared for inference.
        with prepared_inference_weights(self.model):
            results = super().__call__(items, **kwargs)
        if single:
            return results[0]
        return [result[0] for result in results] if all(len(result) == 1 for result in results) else results

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
        limit = self.tokenizer.model_max_length if truncation else positions
        if limit is None or length <= limit:
            return dict(encoded)
        if not truncation:
            raise ValueError(f"sentence {name} has {length} tokens, more than the model's "
                             f"max_position_embeddings ({positions}); split it, or translate it cut with "
                             "truncation=True.")
        warnings.warn(f"sentence {name} has {length} tokens; only its first {limit} (the tokenizer's "
                      f"model_max_length) are translated. Split it, or pass truncation=False to keep up to "
                      f"{positions} tokens.", stacklevel=2)
        return dict(encode(truncation=True, max_length=limit))

    def _forward(self, model_inputs: dict[str, torch.Tensor], return_scores: bool = False, **generate_kwargs
                 ) -> dict[str, torch.Tensor]:
        batch_size = model_inputs["input_ids"].shape[0]
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        if "max_new_tokens" in generate_kwargs and "generation_config" not in generate_kwargs:
            generate_kwargs.setdefault("max_length", None)  # the limit asked for wins, without a warning
        inputs = {name: model_inputs[name] for name in model_inputs
                  if name in MODEL_INPUTS or is_user_factor_feature(name)}
        if not return_scores:
            output_ids = self.model.generate(**inputs, **generate_kwargs)
            # [batch, returned sequences, length], so that batches unbatch into one entry per input sentence.
            return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}
        generated = self.model.generate(**inputs, **generate_kwargs, return_dict_in_generate=True,
                                        output_scores=True)
        if getattr(generated, "sequences_scores", None) is None:
            raise ValueError("return_scores=True needs beam search (num_beams > 1): only beam search ranks its "
                             "translations by a score.")
        output_ids = generated.sequences
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1]),
                "scores": generated.sequences_scores.float().reshape(batch_size, -1)}

    def postprocess(self, model_outputs: dict[str, torch.Tensor], skip_special_tokens: bool = True
                    ) -> list[dict[str, Any]]:
        translations = [{"translation_text": self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
                         .strip()} for ids in model_outputs["output_ids"][0]]
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


#: What `pipeline` passes on to a tokenizer it loads itself.
TOKENIZER_LOADING_OPTIONS = ("revision", "token", "trust_remote_code")


def pipeline(task: str | None = None, model: Any = None, tokenizer: Any = None, **kwargs) -> Pipeline:
    """`transformers.pipeline`, with `translation` (and `translation_xx_to_yy`) mapped to this library's
    source-feature translation pipeline; every other task goes to Transformers unchanged. Translation runs this
    installed library's pipeline class, also for a published repository, whose config names its own copy (which
    Transformers would run only with `trust_remote_code=True`), and a model given by name gets its tokenizer as
    `load_tokenizer` reads it (a model started from a pretrained checkpoint keeps that checkpoint's tokenizer)."""
    if task is not None and (task == "translation" or task.startswith("translation_")):
        task = TASK
        check_generation_options(kwargs)
    if task == TASK:
        kwargs.setdefault("pipeline_class", SourceFeatureTranslationPipeline)
        if tokenizer is None and isinstance(model, (str, Path)):
            from .tokenization_pretrained_source_features import load_tokenizer

            tokenizer = load_tokenizer(model, **{name: kwargs[name] for name in TOKENIZER_LOADING_OPTIONS
                                                 if name in kwargs})
    return transformers_pipeline(task, model=model, tokenizer=tokenizer, **kwargs)  # type: ignore[arg-type]  # its overloads name the tasks
