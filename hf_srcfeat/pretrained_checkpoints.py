"""Pretrained translation checkpoints as this project's backbone: Marian (OPUS-MT), M2M100 (and NLLB, which has
M2M100's architecture) and mBART, from a Hub id or a local folder.

    from hf_srcfeat.pretrained_checkpoints import convert_pretrained

    model = convert_pretrained("Helsinki-NLP/opus-mt-en-de")   # a SrcFeatTransformerForConditionalGeneration
    model.save_pretrained("runs/opus-mt-en-de")                 # loads with AutoModelForSeq2SeqLM

The checkpoint is loaded with its own Transformers class, and its weights are renamed into a
`SrcFeatTransformerForConditionalGeneration` whose config switches reproduce the family's architecture (LayerNorm
placement, positions and their offset, embedding scale and LayerNorm, final LayerNorms, activation, the logits
bias, tied or shared embeddings); the checkpoint's generation config (decoder start, forced BOS language token,
beam settings) comes along. The converted model computes the original's logits.

`graft(model, model_type, ...)` then adds a method to it in a form that starts as the model: at step 0 the grafted
model's logits are the pretrained model's, and fine-tuning moves the added parts away from the identity:

| method | graft form |
|---|---|
| `deps_san` | the scaled layers' scores times 1 + g (D^s - 1), a gate g per layer from 0 |
| `relevance_features` | `relevance_combine="add"`: factor embeddings added to the subword embeddings, zero at the start; `concat` and the relevance masks narrow or reweight the subword embedding, so they cannot start as the pretrained model |
| `diverse_input` | the pretrained input representation x mixed toward the diverse one F as x + g (F - x), g from 0 |
| `phrase_rep` | every phrase sublayer (encoder and decoder) as x + g (sublayer(x) - x), a gate per layer from 0 |
| `latent_feedback` | the LFE starts as a copy of the pretrained encoder (its own embeddings, trained on); feedback enters as x + g ctx, a gate per layer from 0 |

A composition (`srcfeat_composed` with `components=[...]`) takes each component's graft form. The gates
(`graft_gates=True`, `hf_srcfeat.closed_gates`) are learned with the rest; g = 1 is the published method.
"""

from __future__ import annotations

import copy
import difflib
import re
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForSeq2SeqLM, PretrainedConfig, PreTrainedModel

from .configuration_srcfeat_transformer import (
    TOKENIZER_SIZE_ARGUMENTS,
    SrcFeatTransformerConfig,
    accepted_arguments,
    zoo_config_classes,
)
from .damaged_files import named_weights_error
from .modeling_srcfeat_transformer import SrcFeatTransformerForConditionalGeneration

#: The config arguments that make each method start as the model it is grafted onto.
GRAFT_FORMS: dict[str, dict[str, Any]] = {
    "deps_san": {"graft_gates": True},
    "relevance_features": {"relevance_combine": "add"},
    "diverse_input": {"graft_gates": True},
    "phrase_rep": {"graft_gates": True},
    # The pretrained encoder is the pre-trained LFE here (no autoencoder folder): trained on, with its own embeddings.
    "latent_feedback": {"graft_gates": True, "lfe_mode": "joint", "lfe_own_embeddings": True},
}
#: Why a method's published forms cannot be grafted as they are.
NOT_GRAFTABLE = {
    ("relevance_features", "concat"): "concatenation gives the subword only part of d_model, so the pretrained "
                                      "subword embeddings do not fit; use relevance_combine='add'",
    ("relevance_features", "linear"): "the linear merge replaces the pretrained embedding by a projection; use "
                                      "relevance_combine='add'",
    ("relevance_features", "self_relevance"): "the relevance masks halve every embedding at the start (sigmoid(0) = "
                                              "0.5); use relevance_combine='add'",
    ("relevance_features", "word_relevance"): "the factor embeddings are concatenated to the subword's; use "
                                              "relevance_combine='add'",
}
#: Backbone settings the checkpoint's weights fix (sizes, layout, special tokens); its dropouts may change, and so
#: may `max_position_embeddings` where positions are computed (sinusoidal), not a learned table.
CHECKPOINT_FIXED_SETTINGS = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                             "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "activation_function",
                             "scale_embedding", "share_embeddings", "tie_word_embeddings",
                             "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
                             "layernorm_position", "position_embedding_type", "position_offset",
                             "layernorm_embedding", "final_logits_bias")


def check_checkpoint_settings(overrides: dict[str, Any], position_embedding_type: str) -> None:
    """Refuse, naming them, settings a converted checkpoint's weights fix."""
    fixed = [key for key in overrides if key in CHECKPOINT_FIXED_SETTINGS
             or key == "max_position_embeddings" and position_embedding_type == "learned"]
    if fixed:
        raise ValueError(f"{', '.join(fixed)}: a model started from a checkpoint has the checkpoint's sizes and "
                         f"layout; leave {'them' if len(fixed) > 1 else 'it'} out (dropout settings may change).")
#: Config keys that describe a saved config rather than the model.
CONFIG_BOOKKEEPING = ("model_type", "architectures", "transformers_version", "_name_or_path", "auto_map", "dtype",
                      "torch_dtype", "tokenizer_fingerprint")


@dataclass(frozen=True)
class CheckpointFamily:
    """What sets a family's architecture apart from Vaswani et al.'s Transformer, and whether its checkpoints are
    multilingual (source and target language codes say which pair a run translates)."""

    layernorm_position: str
    position_embedding_type: str
    position_offset: int | None  # None: fairseq's padding_idx + 1 (the checkpoint's pad_token_id + 1)
    layernorm_embedding: bool
    final_logits_bias: bool
    language_codes: bool = False


#: Keyed by the checkpoint config's `model_type`.
FAMILIES = {
    "marian": CheckpointFamily(layernorm_position="post", position_embedding_type="sinusoidal_marian",
                               position_offset=0, layernorm_embedding=False, final_logits_bias=True),
    # fairseq positions start after padding_idx (1 in M2M100 and NLLB): position 0 is index 2.
    "m2m_100": CheckpointFamily(layernorm_position="pre", position_embedding_type="sinusoidal_fairseq",
                                position_offset=None, layernorm_embedding=False, final_logits_bias=False,
                                language_codes=True),
    # mBART's learned table keeps 2 rows before position 0 (fairseq's offset).
    "mbart": CheckpointFamily(layernorm_position="pre", position_embedding_type="learned", position_offset=2,
                              layernorm_embedding=True, final_logits_bias=True, language_codes=True),
}

#: (pattern, replacement) on the checkpoint's parameter names inside `model.`, in order.
RENAMES = [
    (r"^(encoder)\.embed_tokens\.", r"\1.embed_source.embed_tokens."),
    (r"^(decoder)\.embed_tokens\.", r"\1.embed_target.embed_tokens."),
    (r"^(encoder)\.embed_positions\.", r"\1.embed_source.embed_positions."),
    (r"^(decoder)\.embed_positions\.", r"\1.embed_target.embed_positions."),
    (r"^(encoder)\.layernorm_embedding\.", r"\1.embed_source.layernorm_embedding."),
    (r"^(decoder)\.layernorm_embedding\.", r"\1.embed_target.layernorm_embedding."),
    (r"\.self_attn_layer_norm\.", ".self_attn_sublayer.layer_norm."),
    (r"\.encoder_attn_layer_norm\.", ".encoder_attn_sublayer.layer_norm."),
    (r"\.final_layer_norm\.", ".ffn_sublayer.layer_norm."),
    (r"\.(fc1|fc2)\.", r".ffn.\1."),
]


def checkpoint_family(config) -> CheckpointFamily:
    family = FAMILIES.get(str(getattr(config, "model_type", "")))
    if family is None:
        raise ValueError(f"a {getattr(config, 'model_type', type(config).__name__)!r} checkpoint cannot be converted; "
                         f"supported: {sorted(FAMILIES)} (Marian/OPUS-MT, M2M100 and NLLB, mBART).")
    return family


def backbone_config(config, **overrides: Any) -> SrcFeatTransformerConfig:
    """The backbone config computing what a Marian / M2M100 / mBART config computes; `overrides` win (settings the
    weights fix, CHECKPOINT_FIXED_SETTINGS, are refused)."""
    family = checkpoint_family(config)
    check_checkpoint_settings(overrides, family.position_embedding_type)
    decoder_vocab_size = getattr(config, "decoder_vocab_size", None) or config.vocab_size
    if decoder_vocab_size != config.vocab_size:
        raise ValueError(f"the checkpoint has a source vocabulary of {config.vocab_size} and a target vocabulary of "
                         f"{decoder_vocab_size}; only checkpoints with one vocabulary for both sides can be converted.")
    start = config.decoder_start_token_id if config.decoder_start_token_id is not None else config.bos_token_id
    arguments = dict(
        vocab_size=config.vocab_size, d_model=config.d_model, encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers, encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads, encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim, activation_function=config.activation_function,
        dropout=config.dropout, attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout, max_position_embeddings=config.max_position_embeddings,
        scale_embedding=bool(config.scale_embedding),
        share_embeddings=bool(getattr(config, "share_encoder_decoder_embeddings", True)),
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", True)),
        pad_token_id=config.pad_token_id, bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
        decoder_start_token_id=start, layernorm_position=family.layernorm_position,
        position_embedding_type=family.position_embedding_type,
        position_offset=config.pad_token_id + 1 if family.position_offset is None else family.position_offset,
        layernorm_embedding=family.layernorm_embedding, final_logits_bias=family.final_logits_bias,
        converted_from=config.model_type,
    )
    return SrcFeatTransformerConfig(**{**arguments, **overrides})


def backbone_state_dict(state_dict: dict[str, torch.Tensor], config: SrcFeatTransformerConfig) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under the backbone's names; sinusoidal position tables, which the backbone
    computes, are left out."""
    renamed = {}
    for name, tensor in state_dict.items():
        if name.startswith("model."):
            inner = name[len("model."):]
            if ".embed_positions." in inner and config.position_embedding_type != "learned":
                continue
            for pattern, replacement in RENAMES:
                inner = re.sub(pattern, replacement, inner)
            name = "model." + inner
        renamed[name] = tensor
    return renamed


def convert_model(source: PreTrainedModel, **config_overrides: Any) -> SrcFeatTransformerForConditionalGeneration:
    """A loaded Marian / M2M100 / mBART model as a backbone model with the same weights and generation config."""
    config = backbone_config(source.config, **config_overrides)
    model = SrcFeatTransformerForConditionalGeneration(config)
    weights = backbone_state_dict(source.state_dict(), config)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = set(model.get_expanded_tied_weights_keys(all_submodels=True))
    if unexpected or set(missing) - tied:
        raise ValueError(f"converting {source.config.model_type}: weights the backbone does not have: "
                         f"{sorted(unexpected)[:5]}; backbone weights the checkpoint does not give: "
                         f"{sorted(set(missing) - tied)[:5]}.")
    model.tie_weights()
    model.generation_config = copy.deepcopy(source.generation_config)
    model.to(source.dtype)  # type: ignore[arg-type]  # transformers' typing of the .to wrapper
    return model.eval()


def convert_pretrained(name_or_path: str, **config_overrides: Any) -> SrcFeatTransformerForConditionalGeneration:
    """`convert_model` of a Hub id or local folder, loaded with its own Transformers class."""
    from safetensors import SafetensorError

    try:
        source = AutoModelForSeq2SeqLM.from_pretrained(name_or_path)
    except SafetensorError as error:
        raise named_weights_error(name_or_path, error) from None
    return convert_model(source, **config_overrides)


def grafted_methods(model_type: str, method_arguments: dict[str, Any]) -> list[str]:
    """The methods a graft of `model_type` adds: itself, or a composition's components."""
    return list(method_arguments.get("components", ())) if model_type == "srcfeat_composed" else [model_type]


def grafted_config(backbone: PretrainedConfig, model_type: str, **method_arguments: Any) -> PretrainedConfig:
    """The config of `model_type` in its graft form on a backbone of config `backbone`; a ValueError names a method
    that cannot be grafted or a setting its config refuses (what `graft` would meet, known before any weights)."""
    from . import MODEL_CLASSES_BY_TYPE

    if not isinstance(backbone, SrcFeatTransformerConfig):
        family = f"a {backbone.model_type} model" if backbone.model_type in FAMILIES else type(backbone).__name__
        raise ValueError(f"a graft starts from the zoo's backbone, not from {family}: convert the checkpoint first "
                         "(convert_model(model) or convert_pretrained(name_or_path)).")
    methods = grafted_methods(model_type, method_arguments)
    unknown = [method for method in methods if method not in GRAFT_FORMS]
    if unknown or not methods:
        raise ValueError(f"{unknown or model_type!r} cannot be grafted onto a pretrained model yet; graftable: "
                         f"{sorted(GRAFT_FORMS)} and their compositions (srcfeat_composed, components=[...]).")
    for method in methods:  # the settings of a graft form are what lets the model start as the checkpoint
        for key, form in GRAFT_FORMS[method].items():
            value = method_arguments.get(key, form)
            if value != form:
                # NOT_GRAFTABLE says why for the forms it knows (keyed by string values).
                reason = (NOT_GRAFTABLE.get((method, value)) if isinstance(value, str) else None) or \
                    f"only {key}={form!r} does"
                raise ValueError(f"{method} with {key}={value!r} cannot start as the pretrained model: {reason}.")
    check_checkpoint_settings(method_arguments, backbone.position_embedding_type)
    config_class = MODEL_CLASSES_BY_TYPE[model_type].config_class
    check_method_arguments(config_class, method_arguments)
    arguments = {key: value for method in methods for key, value in GRAFT_FORMS[method].items()}
    arguments.update(method_arguments)
    settings = {key: value for key, value in backbone.to_dict().items() if key not in CONFIG_BOOKKEEPING}
    return config_class(**{**settings, **arguments})


def check_method_arguments(config_class: type[SrcFeatTransformerConfig], method_arguments: dict[str, Any]) -> None:
    """Refuse, naming it, a method argument `config_class` does not take (a misspelling would otherwise graft the
    method with its default settings)."""
    accepted = accepted_arguments(config_class) | TOKENIZER_SIZE_ARGUMENTS
    if config_class.model_type == "srcfeat_composed":
        accepted |= {name for cls in zoo_config_classes() for name in accepted_arguments(cls)}
    for name in method_arguments:
        if name not in accepted:
            close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.75)
            hint = f"; did you mean {close[0]!r}?" if close else "."
            raise ValueError(f"{config_class.__name__} has no argument {name!r}{hint}")


def graft(model: PreTrainedModel, model_type: str,
          **method_arguments: Any) -> PreTrainedModel:
    """`model` (e.g. a converted checkpoint) with the method `model_type` added in its graft form (GRAFT_FORMS):
    the backbone's weights are kept, and the method's own parameters start where the logits do not change.
    `method_arguments` are the method's config arguments, e.g. the tokenizer's feature vocabulary sizes
    (`tokenizer.feature_vocabularies.sizes()`) and `deps_san_layers`."""
    from . import MODEL_CLASSES_BY_TYPE

    config = grafted_config(model.config, model_type, **method_arguments)
    grafted = MODEL_CLASSES_BY_TYPE[model_type](config)
    missing, unexpected = grafted.load_state_dict(model.state_dict(), strict=False)
    if unexpected:
        raise ValueError(f"the {model_type} model has no place for the weights {sorted(unexpected)[:5]}.")
    with torch.no_grad():
        for method in grafted_methods(model_type, method_arguments):
            start_as_identity(grafted, model, method, set(missing))
    tied = set(grafted.get_expanded_tied_weights_keys(all_submodels=True))
    # Recorded in the config, so that a later run can train these apart (--freeze_pretrained, their own rate).
    grafted.config.grafted_parameters = sorted(set(missing) - tied)
    grafted.generation_config = copy.deepcopy(model.generation_config)
    grafted.to(next(model.parameters()).dtype)  # type: ignore[arg-type]  # transformers' typing of .to
    return grafted.train(model.training)


def start_as_identity(grafted: PreTrainedModel, model: PreTrainedModel, model_type: str, added: set[str]) -> None:
    """Give the added parameters the values at which the method changes nothing (the gates start at 0 by their own
    initialisation): zero factor embeddings, an LFE copied from the pretrained encoder."""
    if model_type == "latent_feedback":
        grafted.load_lfe_from(model.get_encoder())  # type: ignore[operator]  # nn.Module.__getattr__ typing
    if model_type == "relevance_features":
        for name, parameter in grafted.named_parameters():
            if name in added and ".factor_embeddings." in name:
                parameter.zero_()


__all__ = ["FAMILIES", "GRAFT_FORMS", "graft", "CheckpointFamily", "backbone_config", "backbone_state_dict", "convert_model",
           "convert_pretrained"]
