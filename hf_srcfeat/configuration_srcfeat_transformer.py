"""Configuration of the baseline Transformer, the config every method's config extends."""

from __future__ import annotations

import difflib
import inspect
import math
import warnings
from collections.abc import Mapping

from transformers import PretrainedConfig

from .feature_dropout import check_feature_dropout
from .loading_saved import loading_saved, refuse_or_warn_when_loading
from .source_features import PARSED_FEATURE_NAMES

LAYERNORM_POSITIONS = ("post", "pre")
#: Sizes beyond this many parameters (400 GB in float32) are refused as a mistake before anything is allocated.
MAX_PARAMETERS = 10**11
ACTIVATIONS = ("relu", "gelu", "swish", "silu")
#: How positions enter the embeddings: Vaswani et al.'s interleaved sin/cos (this project's own models), the
#: sin | cos halves of Marian (OPUS-MT) and of fairseq (M2M100, NLLB), or a learned table (mBART).
POSITION_EMBEDDING_TYPES = ("sinusoidal", "sinusoidal_marian", "sinusoidal_fairseq", "learned")
#: Linguistic factor -> the config argument with its vocabulary size (the keys of `FeatureVocabularies.sizes()`).
FACTOR_VOCABULARY_SIZE_ARGUMENTS = {"lemma": "num_lemmas", "subword_tag": "num_subword_tags",
                                    "pos": "num_pos_tags", "deprel": "num_dependency_relations",
                                    "feats": "num_morph_features"}
#: Facts about the tokenizer (its feature vocabularies' sizes), which every config accepts whether or not its model
#: reads them: the training command gives them to whichever method it builds.
TOKENIZER_SIZE_ARGUMENTS = frozenset({*FACTOR_VOCABULARY_SIZE_ARGUMENTS.values(), "extra_factors"})


def check_positive_int(name: str, value: object, allow_zero: bool = False) -> None:
    """Raise a ValueError naming `name` unless `value` is a positive (or non-negative) integer."""
    smallest = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
        kind = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"`{name}` must be {kind} integer, got {value!r}.")


def check_positive_number(name: str, value: object) -> None:
    """Raise a ValueError naming `name` unless `value` is a finite number greater than 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"`{name}` must be a finite positive number, got {value!r}.")


def check_probability(name: str, value: object) -> None:
    """Raise a ValueError naming `name` unless `value` lies in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a number in [0, 1), got {value!r}.")


def check_indices(name: str, values: object, limit: int, what: str) -> None:
    """Raise a ValueError naming `name` unless `values` is a non-empty list of distinct integers in [0, limit)."""
    if not isinstance(values, (list, tuple)) or not values or len(set(values)) != len(values) or any(
            isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < limit for v in values):
        raise ValueError(f"`{name}` must be distinct 0-based indices below {what} ({limit}), got {values!r}.")


def mapping_argument(name: str, value: object) -> dict | None:
    """`value` (a mapping, or None) as a dict; anything else a ValueError naming `name`."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"`{name}` must be a mapping (a dict of names to values), got {value!r}.")
    return dict(value)


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    """Raise a ValueError naming `name` unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {list(choices)}, got {value!r}.")


class SrcFeatTransformerConfig(PretrainedConfig):
    r"""
    Configuration of [`SrcFeatTransformerForConditionalGeneration`], a standard Transformer encoder-decoder
    (Vaswani et al., 2017). The defaults reproduce Transformer-base. Every method of the zoo extends this config.

    Args:
        vocab_size (`int`, *optional*, defaults to 8000):
            Size of the subword vocabulary (source and target share one vocabulary by default).
        d_model (`int`, *optional*, defaults to 512):
            Width of embeddings and hidden states.
        encoder_layers (`int`, *optional*, defaults to 6):
            Number of encoder layers.
        decoder_layers (`int`, *optional*, defaults to 6):
            Number of decoder layers.
        encoder_attention_heads (`int`, *optional*, defaults to 8):
            Attention heads per encoder layer; must divide `d_model`.
        decoder_attention_heads (`int`, *optional*, defaults to 8):
            Attention heads per decoder layer; must divide `d_model`.
        encoder_ffn_dim (`int`, *optional*, defaults to 2048):
            Inner width of the encoder feed-forward sublayers.
        decoder_ffn_dim (`int`, *optional*, defaults to 2048):
            Inner width of the decoder feed-forward sublayers.
        activation_function (`str`, *optional*, defaults to `"relu"`):
            Feed-forward non-linearity: `"relu"`, `"gelu"`, `"swish"` or `"silu"`.
        dropout (`float`, *optional*, defaults to 0.1):
            Dropout on embeddings and on every sublayer output before the residual addition.
        attention_dropout (`float`, *optional*, defaults to 0.0):
            Dropout on attention probabilities.
        activation_dropout (`float`, *optional*, defaults to 0.0):
            Dropout after the feed-forward non-linearity.
        max_position_embeddings (`int`, *optional*, defaults to 1024):
            Longest sequence the position encoding covers; longer inputs raise an error.
        position_embedding_type (`str`, *optional*, defaults to `"sinusoidal"`):
            `"sinusoidal"`: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani et al.);
            `"sinusoidal_marian"`: the same angles laid out as [sin | cos] halves (Marian, OPUS-MT);
            `"sinusoidal_fairseq"`: [sin | cos] halves of angles pos / 10000^(i / (d/2 - 1)) (fairseq: M2M100,
            NLLB); `"learned"`: a trained table of `max_position_embeddings + position_offset` rows (mBART). The
            last three let pretrained checkpoints load exactly (`hf_srcfeat.pretrained_checkpoints`).
        position_offset (`int`, *optional*, defaults to 0):
            Added to every position index (fairseq counts positions from padding_idx + 1 = 2; mBART's table has
            2 leading rows).
        layernorm_embedding (`bool`, *optional*, defaults to `False`):
            LayerNorm on the sum of token and position embeddings, before dropout (mBART).
        final_logits_bias (`bool`, *optional*, defaults to `False`):
            Add a bias vector (a buffer, as in Marian and mBART checkpoints) to the output logits.
        graft_gates (`bool`, *optional*, defaults to `False`):
            For a method grafted onto a trained model (`hf_srcfeat.pretrained_checkpoints.graft`): every part the
            method adds mixes in as x + g (f(x) - x) with a learned gate g that starts at 0, so the grafted model
            starts as the trained one (`hf_srcfeat.closed_gates`). The baseline adds nothing to gate.
        layernorm_position (`str`, *optional*, defaults to `"post"`):
            `"post"`: LayerNorm after each residual addition (the original Transformer); `"pre"`: LayerNorm on
            each sublayer input plus a final LayerNorm on each stack output (more stable for deep models).
        scale_embedding (`bool`, *optional*, defaults to `True`):
            Multiply token embeddings by sqrt(d_model) before adding positions (Vaswani et al., Section 3.4).
        share_embeddings (`bool`, *optional*, defaults to `True`):
            Share one embedding matrix between source and target (needs a joint vocabulary).
        tie_word_embeddings (`bool`, *optional*, defaults to `True`):
            Tie the output projection to the target embedding matrix.
        label_smoothing (`float`, *optional*, defaults to 0.1):
            Label smoothing of the cross-entropy loss computed when `labels` are given.
        feature_dropout (`dict[str, float]`, *optional*):
            Training only: the probability that a word loses a source feature, by feature name (`pos_ids`,
            `dep_distance`, `factor_<name>_ids`, ...; see `hf_srcfeat.feature_dropout`). Default none.
        init_std (`float`, *optional*, defaults to `None`):
            Standard deviation of the embedding initialisation; `None` means d_model ** -0.5. Linear layers use
            Xavier-uniform initialisation, as in the original Transformer implementations.
        pad_token_id (`int`, *optional*, defaults to 0):
            Padding token id.
        bos_token_id (`int`, *optional*, defaults to 1):
            Beginning-of-sequence token id.
        eos_token_id (`int`, *optional*, defaults to 2):
            End-of-sequence token id.
        decoder_start_token_id (`int`, *optional*, defaults to 1):
            First token fed to the decoder.
        use_cache (`bool`, *optional*, defaults to `True`):
            Whether the decoder returns its key/value cache for fast generation.
        is_encoder_decoder (`bool`, *optional*, defaults to `True`):
            Always `True`; kept as an argument for Transformers compatibility.
    """

    model_type = "srcfeat_transformer"
    keys_to_ignore_at_inference = ["past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    def __init__(
        self,
        vocab_size: int = 8000,
        d_model: int = 512,
        encoder_layers: int = 6,
        decoder_layers: int = 6,
        encoder_attention_heads: int = 8,
        decoder_attention_heads: int = 8,
        encoder_ffn_dim: int = 2048,
        decoder_ffn_dim: int = 2048,
        activation_function: str = "relu",
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        max_position_embeddings: int = 1024,
        position_embedding_type: str = "sinusoidal",
        position_offset: int = 0,
        layernorm_embedding: bool = False,
        final_logits_bias: bool = False,
        graft_gates: bool = False,
        layernorm_position: str = "post",
        scale_embedding: bool = True,
        share_embeddings: bool = True,
        tie_word_embeddings: bool = True,
        label_smoothing: float = 0.1,
        feature_dropout: dict[str, float] | None = None,
        init_std: float | None = None,
        pad_token_id: int = 0,
        bos_token_id: int = 1,
        eos_token_id: int = 2,
        decoder_start_token_id: int = 1,
        use_cache: bool = True,
        is_encoder_decoder: bool = True,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.encoder_attention_heads = encoder_attention_heads
        self.decoder_attention_heads = decoder_attention_heads
        self.encoder_ffn_dim = encoder_ffn_dim
        self.decoder_ffn_dim = decoder_ffn_dim
        self.activation_function = activation_function
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.max_position_embeddings = max_position_embeddings
        self.position_embedding_type = position_embedding_type
        self.position_offset = position_offset
        self.layernorm_embedding = layernorm_embedding
        self.final_logits_bias = final_logits_bias
        self.graft_gates = graft_gates
        self.layernorm_position = layernorm_position
        self.scale_embedding = scale_embedding
        self.share_embeddings = share_embeddings
        self.tie_word_embeddings = tie_word_embeddings
        self.label_smoothing = label_smoothing
        self.feature_dropout = dict(feature_dropout) if isinstance(feature_dropout, dict) else feature_dropout or {}
        self.init_std = init_std
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.decoder_start_token_id = decoder_start_token_id
        self.use_cache = use_cache
        check_arguments_of_other_configs(type(self), kwargs)
        # `is_encoder_decoder` is a base dataclass field: it must go through super().__init__ or it is reset.
        super().__init__(is_encoder_decoder=is_encoder_decoder, **kwargs)
        self.check_arguments()

    @property
    def source_features_read(self) -> tuple[str, ...]:
        """The source features (tokenizer outputs besides `input_ids` and `attention_mask`) the model reads: the
        pipeline and the translate command compute only these. The baseline reads subwords alone; each method
        names what its paper adds."""
        return ()

    @property
    def reads_dependency_distances(self) -> bool:
        """Whether the model reads the [S, S] `dep_distance` feature (the one whose cost grows with the square of
        the length)."""
        return "dep_distance" in self.source_features_read

    @property
    def reads_parse(self) -> bool:
        """Whether a feature the model reads comes from tagging or parsing; if not, raw text is only segmented
        into the annotator's words (the words the model was trained on), some 10x faster with Stanza."""
        return any(name in PARSED_FEATURE_NAMES for name in self.source_features_read)

    def check_arguments(self) -> None:
        """Fail early, naming the argument, instead of with a shape error inside a forward pass.

        Method configs extend this (call `super().check_arguments()` first)."""
        for name, value in vars(self).items():  # NaN or inf in any float setting would give NaN logits
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"`{name}` must be a finite number, got {value!r}.")
        for name in ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                     "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings"):
            check_positive_int(name, getattr(self, name))
        for side in ("encoder", "decoder"):
            heads = getattr(self, f"{side}_attention_heads")
            if self.d_model % heads:
                raise ValueError(
                    f"`d_model` ({self.d_model}) must be divisible by `{side}_attention_heads` ({heads})."
                )
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            check_probability(name, getattr(self, name))
        check_feature_dropout(self.feature_dropout)
        check_choice("activation_function", self.activation_function, ACTIVATIONS)
        check_choice("layernorm_position", self.layernorm_position, LAYERNORM_POSITIONS)
        check_choice("position_embedding_type", self.position_embedding_type, POSITION_EMBEDDING_TYPES)
        check_positive_int("position_offset", self.position_offset, allow_zero=True)
        for name in ("layernorm_embedding", "final_logits_bias", "scale_embedding", "graft_gates", "share_embeddings",
                     "tie_word_embeddings", "use_cache"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be true or false, got {getattr(self, name)!r}.")
        if self.is_encoder_decoder is not True:
            raise ValueError(f"`is_encoder_decoder` must be True (every model of the zoo is an encoder-decoder), got "
                             f"{self.is_encoder_decoder!r}.")
        if self.init_std is not None:
            check_positive_number("init_std", self.init_std)
        self.check_size()
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if value is not None:
                check_positive_int(name, value, allow_zero=True)
                if value >= self.vocab_size:
                    raise ValueError(f"`{name}` ({value}) must be smaller than `vocab_size` ({self.vocab_size}).")

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """`PretrainedConfig.from_dict` (what `from_pretrained` calls), loading as saved (`loading_saved`)."""
        with loading_saved():
            return super().from_dict(config_dict, **kwargs)

    def validate(self) -> None:
        """Transformers' checks, then this config's: `save_pretrained` runs them, so a setting changed after the
        config was made is refused before it is saved as a model that would not load."""
        super().validate()  # type: ignore[misc]  # added to PretrainedConfig by huggingface_hub's @strict
        self.check_arguments()

    def estimated_parameters(self) -> dict[str, int]:
        """The backbone's parameters by the argument that sets them (embeddings, encoder and decoder layers),
        counted from the sizes alone, before anything is allocated."""
        width, vocabulary = self.d_model, self.vocab_size
        tables = 1 if self.share_embeddings else 2
        return {
            "vocab_size": vocabulary * width * (tables + (0 if self.tie_word_embeddings else 1)),
            "encoder_layers": self.encoder_layers * (4 * width * width + 2 * width * self.encoder_ffn_dim),
            "decoder_layers": self.decoder_layers * (8 * width * width + 2 * width * self.decoder_ffn_dim),
        }

    def check_size(self) -> None:
        """Refuse, naming the argument, sizes no machine holds (which would otherwise run for minutes before the
        allocator fails, or take the machine's memory)."""
        parts = self.estimated_parameters()
        total = sum(parts.values())
        if total > MAX_PARAMETERS:
            # Every part grows with d_model squared or more: a width past any real model's is the culprit.
            culprit = "d_model" if self.d_model > 65536 else max(parts, key=lambda name: parts[name])
            raise ValueError(
                f"`{culprit}`={getattr(self, culprit)} makes about {total:.2g} parameters ({4 * total / 1e12:.2g} TB "
                f"in float32; d_model {self.d_model}, {self.encoder_layers}+{self.decoder_layers} layers, vocabulary "
                f"{self.vocab_size}), more than the {MAX_PARAMETERS:.0e} allowed: check the size arguments.")


__all__ = ["SrcFeatTransformerConfig"]


def accepted_arguments(config_class: type) -> set[str]:
    """The named arguments of `config_class` and of every config it extends."""
    return {name for cls in config_class.__mro__ if issubclass(cls, SrcFeatTransformerConfig)
            for name in inspect.signature(cls.__init__).parameters if name not in ("self", "kwargs")}


def zoo_config_classes() -> list[type]:
    """Every config class defined so far that extends the backbone's, the backbone's first."""
    found: list[type] = []
    todo: list[type] = [SrcFeatTransformerConfig]
    while todo:
        cls = todo.pop(0)
        found.append(cls)
        subclasses: list[type] = cls.__subclasses__()
        todo.extend(subclass for subclass in subclasses if subclass not in found)
    return found


def check_arguments_of_other_configs(config_class: type, kwargs: Mapping[str, object]) -> None:
    """Refuse an argument of another method's config, naming it, and warn of a near miss of this config's own:
    Transformers keeps an unknown argument as an attribute nothing reads, so a model would be built without it."""
    accepted = accepted_arguments(config_class)
    for name in kwargs:
        if name in accepted or name in TOKENIZER_SIZE_ARGUMENTS or hasattr(PretrainedConfig, name):
            continue
        owners = [cls.__name__ for cls in zoo_config_classes() if name in accepted_arguments(cls)]
        if owners:
            refuse_or_warn_when_loading(f"`{name}` is an argument of {' and '.join(owners)}, not of "
                                        f"{config_class.__name__}; several methods on one model are a "
                                        "SrcFeatComposedConfig.")
            continue
        close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.85)
        if close:
            warnings.warn(f"{config_class.__name__} has no argument `{name}`: kept as an attribute that nothing "
                          f"reads. Did you mean `{close[0]}`?", stacklevel=3)
