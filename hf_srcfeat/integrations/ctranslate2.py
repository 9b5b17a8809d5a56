"""Export to CTranslate2 for fast CPU/GPU inference, and a translator that runs the export from raw text.

    hf-srcfeat-export-ct2 runs/my_model runs/my_model-ct2 --quantization int8   (hf_srcfeat.commands.export_ct2)

CTranslate2 runs standard Transformer encoder-decoders; of the zoo it can express the baseline (either
LayerNorm position, any position encoding, scaled embeddings and their LayerNorm, tied or untied embeddings, a
logits bias: also a converted Marian, M2M100/NLLB or mBART checkpoint) and the relevance-feature
models that concatenate or add their factor embeddings (`relevance_combine` "concat" or "add"), through
CTranslate2's source-feature embeddings (one table per factor, as for OpenNMT-py models with `src_feats`): the
source tokens go in as `subword￨lemma￨tag￨...`, with the labels our tokenizer computed from the parse. The other
models change the encoder in ways its specs have no place for (a dependency-scaled attention, feature groups with
an RNN, phrase sublayers, an auxiliary encoder, relevance masks or a linear merge): they are refused with the
reason.

The export is written with CTranslate2's own spec classes (`ctranslate2.specs.TransformerSpec`), as its
converters for Marian and BART do; there is no converter for a custom Transformers architecture, so this
module maps our parameter names onto the spec.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hf_srcfeat.annotated_sentence import FACTOR_SEPARATOR  # CTranslate2 reads OpenNMT-py's factor format
from hf_srcfeat.decoding_options import check_decoding_options, transformers_generation_default
from hf_srcfeat.safe_writing import write_json_atomically

if TYPE_CHECKING:  # torch loads with the model, not with the command's --help
    import torch

#: Model types CTranslate2 cannot run, with the reason.
UNSUPPORTED = {
    "deps_san": "Deps-SAN multiplies the encoder's attention scores by a per-sentence matrix from the parse; "
                "CTranslate2's attention has no score modification",
    "diverse_input": "the diverse input representation runs an RNN and a convolution over feature groups of the "
                     "source embeddings; CTranslate2's encoder input is an embedding lookup",
    "phrase_rep": "phrase representations add phrase pooling and phrase attention sublayers to every layer; "
                  "CTranslate2's layers have fixed sublayers",
    "latent_feedback": "latent feature feedback runs a second encoder whose layers feed the first one's "
                       "attention; CTranslate2 has one encoder",
}
#: Our activations by CTranslate2's name for them.
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "swish": "SWISH", "silu": "SWISH"}
CONFIG_FILE = "hf_srcfeat_export.json"
#: The model's generation settings an export keeps (and the translator applies unless given), as the PyTorch model
#: applies its generation config.
SAVED_DECODING_OPTIONS = ("no_repeat_ngram_size", "length_penalty", "repetition_penalty")
#: The generation config's sampling settings, kept by the export and applied when sampling (as `generate` does).
SAVED_SAMPLING_OPTIONS = ("top_k", "top_p", "temperature")
#: New tokens at most, for an export that records no generation length.
DEFAULT_MAX_NEW_TOKENS = 256


def _numpy(tensor: torch.Tensor):
    import torch

    return tensor.detach().to(torch.float32).cpu().numpy()


def _linear(spec, module: torch.nn.Linear) -> None:
    spec.weight = _numpy(module.weight)
    if module.bias is not None:
        spec.bias = _numpy(module.bias)


def _fused_linear(spec, modules: Sequence[torch.nn.Linear]) -> None:
    """One linear layer computing several (CTranslate2 fuses q/k/v and k/v projections)."""
    import torch

    spec.weight = _numpy(torch.cat([module.weight for module in modules]))
    spec.bias = _numpy(torch.cat([module.bias for module in modules]))


def _layer_norm(spec, module: torch.nn.LayerNorm) -> None:
    spec.gamma = _numpy(module.weight)
    spec.beta = _numpy(module.bias)


def _attention(spec, attention, self_attention: bool) -> None:
    if self_attention:
        _fused_linear(spec.linear[0], [attention.q_proj, attention.k_proj, attention.v_proj])
    else:
        _linear(spec.linear[0], attention.q_proj)
        _fused_linear(spec.linear[1], [attention.k_proj, attention.v_proj])
    _linear(spec.linear[-1], attention.out_proj)


def _embeddings(spec, embedding, config, factors: Sequence[str] = ()) -> None:
    """Token table (and the encoder's factor tables), embedding scale and its LayerNorm, and the position encodings
    (written out as the model computes them: CTranslate2's own sinusoids differ)."""
    import torch

    table = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings  # encoder: one per factor
    table.weight = _numpy(embedding.embed_tokens.weight)
    for table, factor in zip(spec.embeddings[1:] if factors else [], factors, strict=True):
        table.weight = _numpy(embedding.factor_embeddings[factor].weight)
    spec.scale_embeddings = embedding.embed_scale
    positions = torch.arange(config.max_position_embeddings)
    with torch.no_grad():
        spec.position_encodings.encodings = _numpy(embedding.positional(positions))
    if getattr(embedding, "layernorm_embedding", None) is not None:
        _layer_norm(spec.layernorm_embedding, embedding.layernorm_embedding)


def check_exportable(config) -> None:
    """Raise a ValueError naming why a model cannot be exported."""
    if config.model_type in UNSUPPORTED:
        raise ValueError(f"a {config.model_type} model cannot be exported to CTranslate2: "
                         f"{UNSUPPORTED[config.model_type]}.")
    if config.model_type == "relevance_features" and config.relevance_combine not in ("concat", "add"):
        raise ValueError(f"a relevance_features model with relevance_combine={config.relevance_combine!r} cannot be "
                         "exported to CTranslate2: its source-feature embeddings are only concatenated or added, "
                         "with no relevance masks or linear merge (concat and add models can be).")
    if config.model_type == "srcfeat_composed":
        components = list(getattr(config, "components", []))
        reasons = [f"{name}: {UNSUPPORTED[name]}" for name in components if name in UNSUPPORTED]
        if "relevance_features" in components and config.relevance_combine not in ("concat", "add"):
            reasons.append(f"relevance_features with relevance_combine={config.relevance_combine!r}: relevance masks "
                           "or a linear merge of the factor embeddings")
        raise ValueError(f"a srcfeat_composed model ({', '.join(components) or 'no components'}) cannot be exported "
                         "to CTranslate2: " + ("; ".join(reasons) if reasons else
                                               "the export maps the single-method models only (a relevance_features "
                                               "model that concatenates or adds its factor embeddings exports)")
                         + ".")
    if config.model_type not in ("srcfeat_transformer", "relevance_features"):
        raise ValueError(f"model type {config.model_type!r} has no CTranslate2 export.")
    if config.activation_function not in ACTIVATIONS:
        raise ValueError(f"activation {config.activation_function!r} has no CTranslate2 equivalent here.")


def model_spec(model):
    """The `ctranslate2.specs.TransformerSpec` holding `model`'s weights."""
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    check_exportable(config)
    pre_norm = config.layernorm_position == "pre"
    activation = getattr(common_spec.Activation, ACTIVATIONS[config.activation_function])
    factors = list(getattr(config, "source_factors", []))
    merge = common_spec.EmbeddingsMerge.ADD if getattr(config, "relevance_combine", None) == "add" \
        else common_spec.EmbeddingsMerge.CONCAT
    spec = transformer_spec.TransformerSpec.from_config(
        (config.encoder_layers, config.decoder_layers), config.encoder_attention_heads, pre_norm=pre_norm,
        activation=activation, num_source_embeddings=1 + len(factors), embeddings_merge=merge,
        layernorm_embedding=bool(getattr(config, "layernorm_embedding", False)))
    if config.decoder_attention_heads != config.encoder_attention_heads:
        raise ValueError("CTranslate2's Transformer has one head count for encoder and decoder; this model has "
                         f"{config.encoder_attention_heads} and {config.decoder_attention_heads}.")
    encoder, decoder = model.get_encoder(), model.model.decoder
    _embeddings(spec.encoder, encoder.embed_source, config, factors)
    _embeddings(spec.decoder, decoder.embed_target, config)
    for layer_spec, layer in zip(spec.encoder.layer, encoder.layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_sublayer.layer_norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn.fc1)
        _linear(layer_spec.ffn.linear_1, layer.ffn.fc2)
        _layer_norm(layer_spec.ffn.layer_norm, layer.ffn_sublayer.layer_norm)
    for layer_spec, layer in zip(spec.decoder.layer, decoder.layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_sublayer.layer_norm)
        _attention(layer_spec.attention, layer.encoder_attn, self_attention=False)
        _layer_norm(layer_spec.attention.layer_norm, layer.encoder_attn_sublayer.layer_norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn.fc1)
        _linear(layer_spec.ffn.linear_1, layer.ffn.fc2)
        _layer_norm(layer_spec.ffn.layer_norm, layer.ffn_sublayer.layer_norm)
    if pre_norm:
        _layer_norm(spec.encoder.layer_norm, encoder.layer_norm)
        _layer_norm(spec.decoder.layer_norm, decoder.layer_norm)
    _linear(spec.decoder.projection, model.lm_head)
    if getattr(config, "final_logits_bias", False):
        spec.decoder.projection.bias = _numpy(model.final_logits_bias[0])
    return spec


def vocabulary(tokenizer, size: int) -> list[str]:
    """The tokens by id; ids the tokenizer does not have (a model vocabulary larger than the tokenizer's)
    get placeholder names, so ids stay aligned."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(min(size, len(tokenizer)))))
    return tokens + [f"<hf_srcfeat_unused_{index}>" for index in range(len(tokens), size)]


#: The files of an export from before the export listed its own ("files" in its CONFIG_FILE): CTranslate2's model,
#: config and vocabularies (the glob), and what the tokenizers save.
LEGACY_EXPORT_FILES = ("model.bin", "config.json", "vmap.txt", CONFIG_FILE, "tokenizer.json", "tokenizer_config.json",
                       "feature_vocab.json", "special_tokens_map.json", "source_features_config.json",
                       "added_tokens.json", "chat_template.jinja", "checkpoint_tokenizer")


def is_export(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds a CTranslate2 export (its settings file), not a Transformers model."""
    return Path(folder, CONFIG_FILE).is_file()


def ctranslate2_version() -> str:
    import ctranslate2

    return ctranslate2.__version__


def overwritten_model(model_path: str | os.PathLike, output_dir: str | os.PathLike) -> str | None:
    """Why writing an export into `output_dir` would write over the model folder `model_path` (it is that folder, or
    holds it), else None."""
    model, output = Path(model_path), Path(output_dir)
    if not model.is_dir():  # a Hub id
        return None
    if output.resolve() == model.resolve():
        return (f"output {output_dir} is the model folder {model_path}: the export would overwrite the model's files "
                "(its config.json); name another folder.")
    if model.resolve().is_relative_to(output.resolve()):
        return (f"output {output_dir} holds the model folder {model_path}: the export would write over files there "
                "(a run's config.json); name another folder.")
    return None


def earlier_export_files(folder: Path) -> list[Path]:
    """The entries of an earlier export in `folder` (none when it holds no export), which a new export replaces;
    any other file there is the user's."""
    settings_file = folder / CONFIG_FILE
    if not settings_file.is_file():
        return []
    try:
        names = json.loads(settings_file.read_text()).get("files")
    except (ValueError, AttributeError):
        names = None
    if not isinstance(names, list):  # an export from before the list: the names exports write
        names = [*LEGACY_EXPORT_FILES, *(path.name for path in folder.glob("*_vocabulary.json"))]
    # Only plain names of the folder's own entries: a doctored list never reaches outside it.
    return [folder / name for name in names if isinstance(name, str) and name not in ("", ".", "..")
            and Path(name).name == name and os.path.lexists(folder / name)]


def remove_entry(path: Path) -> None:
    """A file, link or folder, gone (a link is unlinked, never followed)."""
    import shutil

    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)


def export(model_path: str, output_dir: str, quantization: str | None = None, force: bool = False) -> Path:
    """Write the CTranslate2 model of `model_path` (folder or Hub id) and its tokenizer into `output_dir`.

    `force` writes into a non-empty folder: an earlier export's files there are replaced (the ones it does not write
    again removed, so that no stale vocabulary or tokenizer file is read with the new model); other files stay."""
    import shutil
    import tempfile

    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    from hf_srcfeat.provenance import code_version
    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer

    output = Path(output_dir)
    problem = overwritten_model(model_path, output)
    if problem:
        raise ValueError(problem)
    if output.exists() and not output.is_dir():
        raise ValueError(f"output {output} is a file; name a folder for the CTranslate2 model.")
    if output.exists() and any(output.iterdir()) and not force:
        raise ValueError(f"{output} exists and is not empty; choose another folder or pass --force.")
    if is_export(model_path):
        raise ValueError(f"model {model_path} is a CTranslate2 export (hf-srcfeat-export-ct2), not a Transformers "
                         "model; export the model it was exported from.")
    try:
        config = AutoConfig.from_pretrained(model_path)
    except OSError as error:  # not a folder here, and the Hub has no such model or cannot be reached
        from hf_srcfeat.commands import error_summary

        raise ValueError(f"model {model_path}: no such folder here, and it does not load from the Hub "
                         f"({error_summary(error)}).") from None
    check_exportable(config)  # from the config alone, before the weights load
    model = AutoModelForSeq2SeqLM.from_pretrained(model_path, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(model_path)
    spec = model_spec(model)
    tokens = vocabulary(tokenizer, model.config.vocab_size)
    spec.register_source_vocabulary(tokens)
    factors = list(getattr(model.config, "source_factors", []))
    for factor in factors:
        labels = factor_labels(tokenizer, model.config, factor)
        spec.register_source_vocabulary(labels)
    spec.register_target_vocabulary(tokens)
    decoder_start = tokenizer.convert_ids_to_tokens(model.config.decoder_start_token_id)
    spec.config.bos_token = tokenizer.bos_token or decoder_start  # Marian's tokenizer has none
    spec.config.eos_token = tokenizer.eos_token
    spec.config.unk_token = tokenizer.unk_token
    spec.config.decoder_start_token = decoder_start
    forced = model.generation_config.forced_bos_token_id
    spec.validate()
    spec.optimize(quantization=quantization)
    # Written whole into a folder beside the output, then moved in: a failed export leaves an earlier one as it was,
    # and the new one's file list is exactly what it wrote.
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}.", suffix=".partial"))
    except PermissionError:  # an output folder one may write in a folder one may not (a mounted volume): inside it
        output.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=output, prefix=".export.", suffix=".partial"))
    try:
        spec.save(str(staging))
        tokenizer.save_pretrained(staging)  # the translator encodes raw text with it (and its annotator)
        local = Path(model_path).is_dir()
        write_json_atomically(staging / CONFIG_FILE,
            {"code_version": code_version(), "ctranslate2_version": ctranslate2_version(),
             "exported_from": str(Path(model_path).resolve()) if local else model_path,
             "model_type": model.config.model_type, "quantization": quantization,
             "max_position_embeddings": model.config.max_position_embeddings, "source_factors": factors,
             # a target language token the model's generation config forces first (NLLB, mBART-50): a target prefix
             "forced_bos_token": tokenizer.convert_ids_to_tokens(forced) if forced is not None else None,
             # a generation config that forces </s> at the length limit (Marian's) leaves room for it there
             "forced_eos_at_max_length": model.generation_config.forced_eos_token_id is not None,
             "generation": {name: getattr(model.generation_config, name)
                            for name in (*SAVED_DECODING_OPTIONS, *SAVED_SAMPLING_OPTIONS, "max_new_tokens",
                                         "max_length")
                            if getattr(model.generation_config, name, None) is not None},
             # what a later export with --force replaces
             "files": sorted([path.name for path in staging.iterdir()] + [CONFIG_FILE])}, indent=1)
        output.mkdir(exist_ok=True)
        earlier = earlier_export_files(output)
        # While the files are swapped the folder says it holds an incomplete export, listing both exports' files: if
        # the swap is interrupted, the translator names it, and a new export removes them all. The new settings
        # file comes last.
        write_json_atomically(output / CONFIG_FILE, {
            "incomplete": True, "files": sorted({entry.name for entry in earlier} | {CONFIG_FILE}
                                                | {entry.name for entry in staging.iterdir()})})
        for entry in earlier:
            if entry.name != CONFIG_FILE:
                remove_entry(entry)
        for entry in sorted(staging.iterdir(), key=lambda entry: entry.name == CONFIG_FILE):
            if entry.name == CONFIG_FILE:  # over the marker in one step: the folder is never without one
                write_json_atomically(output / CONFIG_FILE, json.loads(entry.read_text()), indent=1)
                continue
            if os.path.lexists(output / entry.name):  # a user's file of an export file's name
                remove_entry(output / entry.name)
            shutil.move(entry, output / entry.name)  # a rename, unless the output is a link to another disk
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output


def factor_vocabulary(vocabularies, factor: str):
    """A factor's vocabulary in the tokenizer: a built-in one (lemma, pos, ...) or a user factor's (None if none)."""
    return vocabularies.extra.get(factor) if factor in (vocabularies.extra or {}) else \
        getattr(vocabularies, factor, None)


def factor_labels(tokenizer, config, factor: str) -> list[str]:
    """A factor's labels by id, as CTranslate2's vocabulary of that source embedding."""
    vocabulary = factor_vocabulary(tokenizer.feature_vocabularies, factor)
    size = config.factor_vocabulary_size(factor)
    if vocabulary is None or len(vocabulary) != size:
        raise ValueError(f"the tokenizer's {factor} vocabulary does not match the model's ({size} entries).")
    bad = [label for label in vocabulary.labels if FACTOR_SEPARATOR in label or not label.strip()
           or any(character.isspace() for character in label)]
    if bad:
        raise ValueError(f"{factor} labels {bad[:5]} contain whitespace or the factor separator "
                         f"{FACTOR_SEPARATOR!r}; CTranslate2 cannot read them as source features.")
    return list(vocabulary.labels)


def ctranslate2_decoding_options(options: dict[str, Any]) -> dict[str, Any]:
    """`hf_srcfeat.decoding_options` (Transformers' names) as CTranslate2's `translate_batch` arguments."""
    names = {"length_penalty": "length_penalty", "no_repeat_ngram_size": "no_repeat_ngram_size",
             "repetition_penalty": "repetition_penalty", "top_p": "sampling_topp",
             "temperature": "sampling_temperature"}
    converted = {names[name]: value for name, value in options.items() if name in names and value is not None}
    if options.get("do_sample"):
        converted["sampling_topk"] = options.get("top_k") or 0  # CTranslate2's 0: the whole distribution
    return converted


class CTranslate2Translator:
    """Raw text in, translations out, with an exported model: our tokenizer (and its parser, for models with
    source features) prepares the source tokens, CTranslate2 decodes.

    Args:
        model_dir: folder written by `export` (the CTranslate2 model and the tokenizer).
        device: "cpu", "cuda" or "auto".
        compute_type: CTranslate2's compute type ("default" keeps the export's quantization; "int8",
            "float32", "int8_float16", ...).
        inter_threads, intra_threads: CTranslate2's parallelism (batches in parallel, threads per batch).
        num_beams, max_new_tokens, decoding: how `__call__` decodes; the length, `no_repeat_ngram_size`,
            `length_penalty` and `repetition_penalty` not given come from the model's generation config as the
            export kept it (as the PyTorch model decodes), and so do `top_k`, `top_p` and `temperature` when
            sampling (`do_sample=True`; Transformers' defaults where the config has none).
    """


    def __init__(self, model_dir: str | os.PathLike, device: str = "cpu", compute_type: str = "default",
                 inter_threads: int = 1, intra_threads: int = 0, num_beams: int = 4, max_new_tokens: int | None = None,
                 **decoding: Any):
        import ctranslate2

        from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer

        folder = Path(model_dir)
        if not (folder / CONFIG_FILE).exists():
            raise ValueError(f"{folder} is not an hf_srcfeat CTranslate2 export (no {CONFIG_FILE}); write one with "
                             "hf-srcfeat-export-ct2.")
        settings = json.loads((folder / CONFIG_FILE).read_text())
        if settings.get("incomplete"):  # before its files are read: any of them may be missing or another export's
            raise ValueError(f"{folder} holds an incomplete CTranslate2 export (its export was interrupted); export "
                             "again with hf-srcfeat-export-ct2 --force.")
        self.tokenizer = load_tokenizer(folder)
        self.forced_bos_token = settings.get("forced_bos_token")
        self.forced_eos_at_max_length = settings.get("forced_eos_at_max_length", False)
        # Cut where the PyTorch pipeline cuts: the tokenizer's model_max_length (where training cut), at most the
        # model's positions.
        limits = [limit for limit in (getattr(self.tokenizer, "model_max_length", None),
                                      settings["max_position_embeddings"]) if isinstance(limit, int)]
        self.max_length = min(limits)
        self.limit_reason = "the model's max_position_embeddings" if self.max_length == \
            settings["max_position_embeddings"] else "the tokenizer's model_max_length"

        self.factors = settings.get("source_factors", [])
        # Sources are read as the PyTorch pipeline reads them: a model without factors gets the annotator's words
        # (the words it was trained on; raw text split by the subword model alone differs, e.g. at "don't"), a
        # model with factors the parse. An export whose tokenizer has no annotator reads raw text.
        self.reads_parses = bool(self.factors) or hasattr(self.tokenizer, "annotate")
        # Without factors, a sentence the annotator fails on is still translated, from its raw text.
        self.translates_unparsed = not self.factors
        self.translator = ctranslate2.Translator(str(folder), device=device, compute_type=compute_type,
                                                 inter_threads=inter_threads, intra_threads=intra_threads)
        # As the PyTorch model's generation config decodes, unless told otherwise: max_new_tokens before max_length,
        # which counts the decoder's start token (CTranslate2's length does not).
        saved = settings.get("generation", {})
        self.num_beams = num_beams
        self.max_new_tokens = max_new_tokens or saved.get("max_new_tokens") or (
            saved["max_length"] - 1 if saved.get("max_length") else DEFAULT_MAX_NEW_TOKENS)
        decoding = {**{name: saved[name] for name in SAVED_DECODING_OPTIONS if name in saved}, **decoding}
        if decoding.get("do_sample"):
            # Sampling draws as `generate` draws: from the model's top_k (else Transformers' default, 50; CTranslate2's
            # own default is the whole vocabulary), top_p and temperature unless given.
            for name in SAVED_SAMPLING_OPTIONS:
                if decoding.get(name) is None:
                    decoding[name] = saved.get(name, transformers_generation_default(name))
        check_decoding_options(decoding)
        self.decoding = ctranslate2_decoding_options(decoding)

    def annotate(self, texts: list[str]) -> list:
        """Raw texts as the model reads them: parsed for a model with factors, else only segmented into the
        annotator's words, as the PyTorch pipeline does."""
        return self.tokenizer.annotate(texts, words_only=not self.factors)

    def source_tokens(self, sources: Sequence, parse: bool = True) -> list[list[str]]:
        """The subword tokens of the sources (raw texts, annotated here, or `AnnotatedSentence`s), with `</s>`,
        exactly as the PyTorch model reads them; with factors, `subword￨label￨...` per token. `parse=False` (or a
        tokenizer without an annotator) cuts raw texts into subwords directly, for a model without factors."""
        from hf_srcfeat.annotated_sentence import AnnotatedSentence
        from hf_srcfeat.configuration_relevance_features import RelevanceFeaturesConfig

        sources = list(sources)
        parsed = [source for source in sources if isinstance(source, AnnotatedSentence)]
        if parsed and len(parsed) != len(sources):
            raise ValueError("give either raw texts or AnnotatedSentences, not both.")
        if parsed or self.factors or (parse and self.reads_parses):
            parsed = parsed or self.annotate(sources)
            # The factors CTranslate2 takes have no tree; a model without factors reads the words' subwords alone.
            options: dict[str, Any] = dict(return_dep_distance=False, return_word_heads=False,
                                           **({} if self.factors else {"source_feature_names": ()}))
            encoded = self.tokenizer(annotations=parsed, truncation=True, max_length=self.max_length, **options)
            self.warn_truncated(parsed, encoded["input_ids"],
                                lambda sentence: self.tokenizer(annotations=sentence, **options))
        else:  # raw texts cut into subwords directly
            encoded = self.tokenizer(sources, source_features=False, truncation=True, max_length=self.max_length)
            self.warn_truncated(sources, encoded["input_ids"], lambda text: self.tokenizer(text, source_features=False))
        if not self.factors:
            return [cast(list[str], self.tokenizer.convert_ids_to_tokens(ids)) for ids in encoded["input_ids"]]
        vocabularies = self.tokenizer.feature_vocabularies
        rows = []
        for index, ids in enumerate(encoded["input_ids"]):
            columns = [self.tokenizer.convert_ids_to_tokens(ids)]
            for factor in self.factors:
                labels = factor_vocabulary(vocabularies, factor).labels
                columns.append([labels[value] for value in
                                encoded[RelevanceFeaturesConfig.factor_feature_name(factor)][index]])
            rows.append([FACTOR_SEPARATOR.join(parts) for parts in zip(*columns, strict=True)])
        return rows

    def warn_truncated(self, sources: Sequence, input_ids: Sequence[list[int]], encode) -> None:
        """Warn, naming it, about each source cut to the model's length (as the PyTorch pipeline does): only one
        that fills the limit is encoded again, whole, to tell a cut sentence from one of exactly that length."""
        from hf_srcfeat.annotated_sentence import AnnotatedSentence

        for source, ids in zip(sources, input_ids, strict=True):
            if len(ids) < self.max_length:
                continue
            length = len(encode(source)["input_ids"])
            if length > self.max_length:
                name = source.name if isinstance(source, AnnotatedSentence) else repr(source[:60])
                warnings.warn(f"sentence {name} has {length} tokens; only its first {self.max_length} "
                              f"({self.limit_reason}) are translated. Split it.", stacklevel=3)

    def translate(self, texts: Sequence, num_beams: int = 4, max_new_tokens: int = 256, batch_size: int = 32,
                  num_return_sequences: int = 1, return_scores: bool = False, parse: bool = True) -> list:
        """Translations of `texts` (raw, or `AnnotatedSentence`s; a list per text with `num_return_sequences` > 1;
        (text, score) pairs with `return_scores`; `parse` as for `source_tokens`)."""
        sources = self.source_tokens(texts, parse=parse)
        prefix = [[self.forced_bos_token]] * len(sources) if self.forced_bos_token else None
        results = self.translator.translate_batch(
            sources, target_prefix=prefix, max_batch_size=batch_size, beam_size=num_beams,
            num_hypotheses=num_return_sequences, max_decoding_length=max_new_tokens, return_scores=return_scores,
            **self.decoding)
        outputs = []
        for result in results:
            hypotheses = []
            for index, tokens in enumerate(result.hypotheses):
                if self.forced_eos_at_max_length and len(tokens) >= max_new_tokens:
                    tokens = tokens[:max_new_tokens - 1]  # Transformers' last step at the limit is the forced </s>
                text = cast(str, self.tokenizer.decode(self.tokenizer.convert_tokens_to_ids(tokens),
                                                       skip_special_tokens=True))
                hypotheses.append((text.strip(), result.scores[index]) if return_scores else text.strip())
            outputs.append(hypotheses if num_return_sequences > 1 else hypotheses[0])
        return outputs


    def __call__(self, texts: Sequence, batch_size: int = 32, num_return_sequences: int = 1,
                 return_scores: bool = False, parse: bool = True) -> list:
        """The translation pipeline's interface (what `hf-srcfeat-translate` calls): a dict
        {"translation_text", and "score" with `return_scores`} per text, or a list of them per text with
        `num_return_sequences` > 1. The score is CTranslate2's (log-probability normalised by length)."""
        results = self.translate(texts, self.num_beams, self.max_new_tokens, batch_size, num_return_sequences,
                                 return_scores=True, parse=parse)
        outputs = []
        for hypotheses in results:
            hypotheses = hypotheses if num_return_sequences > 1 else [hypotheses]
            dicts = [{"translation_text": text, **({"score": score} if return_scores else {})}
                     for text, score in hypotheses]
            outputs.append(dicts if num_return_sequences > 1 else dicts[0])
        return outputs
