"""Named variants: each paper's main set-ups as a model type plus config settings, under the names the benchmark
reports them by (`hf-srcfeat-train --variant relevance_concat`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Variant:
    """A model type with the settings that make one published set-up.

    Args:
        model_type: the zoo's model type.
        config: config arguments on top of the model type's defaults.
        description: what it is, in a few words.
        ctranslate2: whether `hf-srcfeat-export-ct2` can export it (checked against the exporter by the tests).
    """

    model_type: str
    config: dict = field(default_factory=dict)
    description: str = ""
    ctranslate2: bool = False


VARIANTS: dict[str, Variant] = {
    "baseline": Variant("srcfeat_transformer", {}, "the Transformer baseline", ctranslate2=True),
    "deps_san": Variant("deps_san", {"deps_san_layers": [0]}, "dependency-scaled self-attention in the first "
                        "encoder layer"),
    "relevance_concat": Variant("relevance_features", {"relevance_combine": "concat"},
                                "linguistic factors, embeddings concatenated", ctranslate2=True),
    "relevance_add": Variant("relevance_features", {"relevance_combine": "add"},
                             "linguistic factors, embeddings added", ctranslate2=True),
    "relevance_self": Variant("relevance_features", {"relevance_combine": "self_relevance"},
                              "linguistic factors gated by self relevance"),
    "relevance_word": Variant("relevance_features", {"relevance_combine": "word_relevance"},
                              "linguistic factors gated by word-based relevance"),
    "fusing_diverse": Variant("diverse_input", {"diverse_variant": "fusing_diverse"},
                              "diverse input representation, fused"),
    "phrase_max_attn_ta": Variant("phrase_rep", {}, "phrase representations (Max+Attn, target attention)"),
    "lfe_joint": Variant("latent_feedback", {"lfe_mode": "joint"}, "latent feature feedback, trained jointly"),
    "lfe_dae": Variant("latent_feedback", {"lfe_mode": "fine_tuned"},
                       "latent feature feedback from a denoising autoencoder (give lfe_pretrained_from)"),
    "relevance_concat+deps_san": Variant(
        "srcfeat_composed", {"components": ["relevance_features", "deps_san"], "relevance_combine": "concat",
                             "deps_san_layers": [0]}, "relevance_concat and deps_san in one model"),
}


def variant(name: str) -> Variant:
    """The variant called `name`, or an error listing the names."""
    if name not in VARIANTS:
        raise ValueError(f"no variant {name!r}; the variants are {', '.join(VARIANTS)}.")
    return VARIANTS[name]


def markdown_table() -> str:
    """The variants as the documentation lists them (a test keeps the docs equal to it)."""
    rows = ["| variant (benchmark name) | model type | settings | CTranslate2 |", "|---|---|---|---|"]
    for name, one in VARIANTS.items():
        settings = ", ".join(f"`{key}={value}`" for key, value in one.config.items()) or "–"
        rows.append(f"| `{name}` | `{one.model_type}` | {settings} | {'yes' if one.ctranslate2 else 'no'} |")
    return "\n".join(rows)
