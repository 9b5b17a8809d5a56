"""Annotator backends by name: the one place that turns `--annotator NAME`, or the settings a saved tokenizer
recorded, into an annotator. A new backend subclasses `Annotator` and is added to `ANNOTATORS`."""

from __future__ import annotations

import os

from .annotator import Annotator
from .annotator_spacy import SpacyAnnotator
from .annotator_stanza import StanzaAnnotator

ANNOTATORS: dict[str, type[Annotator]] = {"stanza": StanzaAnnotator, "spacy": SpacyAnnotator}


def annotator_class(name: str) -> type[Annotator]:
    """The backend registered as `name`, or an error listing the known ones."""
    if name not in ANNOTATORS:
        raise ValueError(f"unknown annotator {name!r}; this version of hf_srcfeat knows {', '.join(ANNOTATORS)}.")
    return ANNOTATORS[name]


def make_annotator(name: str, language: str | None = None, model: str | os.PathLike | None = None,
                   device: str = "cpu", **options) -> Annotator:
    """The annotator every command builds from its `--annotator` arguments.

    Args:
        name: the backend, a key of `ANNOTATORS` ("stanza" or "spacy").
        language: the texts' language. Stanza loads its models for it (default "en"); a spaCy pipeline of another
            language is refused.
        model: Stanza: the resources folder (default `$HF_SRCFEAT_STANZA_DIR`, else Stanza's download); spaCy:
            the pipeline package or folder (required).
        device: where the parser runs ("cpu" or "cuda"; Stanza only).
        options: what every `Annotator` takes (cache_path, use_cache, batch_size, max_characters, pretokenized).
    """
    annotator = annotator_class(name).from_arguments(language=language, model=model, device=device, **options)
    if language and annotator.language != language:
        raise ValueError(f"the {name} model {model} is a {annotator.language!r} pipeline, the source language is "
                         f"{language!r}.")
    return annotator


def annotator_from_settings(settings: dict, **options) -> Annotator:
    """Re-create the annotator a tokenizer recorded (`Annotator.settings()`); `options` (cache_path, model_dir,
    device, ...) are passed on to its class."""
    name = settings.get("backend", "stanza")
    if name not in ANNOTATORS:
        raise ValueError(f"unknown annotator backend {name!r} in the tokenizer's settings ({settings}); this version "
                         f"of hf_srcfeat knows {', '.join(repr(known) for known in ANNOTATORS)}.")
    return ANNOTATORS[name].from_settings(settings, **options)
