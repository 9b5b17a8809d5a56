"""Half precision on CPU: every model type runs forward, backward and beam search in bfloat16 and float16, whether
cast with `.to(dtype)` or loaded with `from_pretrained(..., dtype=...)`, and a trained model cast to bfloat16
translates most sentences exactly as in float32."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

from hf_srcfeat import (
    MODEL_CLASSES_BY_TYPE,
    DepsSanConfig,
    DiverseInputConfig,
    LatentFeedbackConfig,
    PhraseRepConfig,
    RelevanceFeaturesConfig,
    SrcFeatComposedConfig,
    SrcFeatTransformerConfig,
)
from hf_srcfeat.data.multi30k import load_multi30k

from .end_to_end import tiny_method_config

#: One tiny configuration of each model type (the latent feature encoder trained jointly: no autoencoder needed).
VARIANTS = {
    "baseline": (SrcFeatTransformerConfig, {}),
    "deps_san": (DepsSanConfig, {"deps_san_heads": [0, 2]}),
    "relevance_concat": (RelevanceFeaturesConfig, {"relevance_combine": "concat"}),
    "fusing_diverse": (DiverseInputConfig, {"diverse_variant": "fusing_diverse"}),
    # Narrow phrase sublayers (the paper-size 12 d / 3 d defaults learn slower in the CUDA test's 60 steps at d 64).
    "phrase_rep": (PhraseRepConfig, {"phrase_pooling_dim": 64, "phrase_combination_dim": 64}),
    "lfe_joint": (LatentFeedbackConfig, {"lfe_mode": "joint"}),
    # Four methods at once, one on each extension point (the LFE embeds the source itself: relevance features make
    # the NMT subword embeddings narrower than d_model).
    "composed": (SrcFeatComposedConfig, {
        "components": ["relevance_features", "deps_san", "phrase_rep", "latent_feedback"],
        "relevance_combine": "concat", "deps_san_heads": [0, 2], "phrase_pooling_dim": 64,
        "phrase_combination_dim": 64, "lfe_own_embeddings": True}),
}


def variant_config(variant: str, tokenizer):
    config_class, overrides = VARIANTS[variant]
    sizes = tokenizer.feature_vocabularies.sizes()
    if config_class in (RelevanceFeaturesConfig, SrcFeatComposedConfig):
        overrides = {**overrides, **sizes}
    if config_class is DiverseInputConfig:
        overrides = {**overrides, "num_pos_tags": sizes["num_pos_tags"]}
    return tiny_method_config(config_class, tokenizer, **overrides)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_model_type_trains_and_generates_in_half_precision(variant, dtype, feature_tokenizer, test_sentences,
                                                                 tmp_path):
    config = variant_config(variant, feature_tokenizer)
    torch.manual_seed(0)
    MODEL_CLASSES_BY_TYPE[config.model_type](config).save_pretrained(tmp_path)
    batch = feature_tokenizer(test_sentences[:4], text_target=test_sentences[4:8], padding=True, return_tensors="pt")
    inputs = {name: value for name, value in batch.items() if name != "labels"}
    for model in (AutoModelForSeq2SeqLM.from_pretrained(tmp_path).to(dtype),
                  AutoModelForSeq2SeqLM.from_pretrained(tmp_path, dtype=dtype)):
        assert {parameter.dtype for parameter in model.parameters()} == {dtype}
        model.train()
        loss = model(**batch).loss
        loss.backward()
        assert torch.isfinite(loss)
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        model.eval()
        assert model.generate(**inputs, num_beams=4, max_new_tokens=8).shape[0] == 4


@pytest.mark.slow
def test_a_trained_model_in_bfloat16_predicts_the_next_token_as_in_float32(trained_baseline, feature_tokenizer,
                                                                            multi30k_dir):
    """Teacher-forced, so one changed choice does not derail the rest of a sentence as in free-running decoding
    (the README states the greedy-output figure of a fully trained model)."""
    model, _ = trained_baseline
    pairs = load_multi30k("test_2016_flickr", data_dir=multi30k_dir, limit=100)
    batch = feature_tokenizer(list(pairs["source"]), text_target=list(pairs["target"]), padding=True,
                              return_tensors="pt")
    half_model = AutoModelForSeq2SeqLM.from_config(model.config).to(torch.bfloat16).eval()
    half_model.load_state_dict(model.state_dict())
    with torch.no_grad():
        full, half = model(**batch).logits.argmax(-1), half_model(**batch).logits.argmax(-1)
    real = batch["labels"] != feature_tokenizer.pad_token_id
    agreement = float((full == half)[real].float().mean())
    print(f"bfloat16 predicts float32's next token at {agreement:.1%} of {int(real.sum())} target positions")
    assert agreement > 0.9, agreement
