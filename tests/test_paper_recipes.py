"""The paper-size recipes (examples/recipes/paper/): each parses as train.py reads it and builds, at the
paper's size, a model whose parameter count is the paper's table's within 3%, as are the rows around it
(the baseline and the method's other variants) with the same set-up. Vocabulary sizes are chosen as the
recipes' README explains; the models are built on the meta device."""

from __future__ import annotations

import json

import pytest

from benchmarks.paper_parameter_counts import PAPER_COUNTS, PAPER_RECIPES, parameter_count, read_recipe


def test_every_paper_recipe_is_pinned_here():
    assert {path.stem for path in PAPER_RECIPES.glob("*.json")} == set(PAPER_COUNTS)


@pytest.mark.parametrize("name", sorted(PAPER_COUNTS))
def test_paper_recipes_are_post_ln_transformer_base_and_match_the_papers_parameter_counts(name):
    recipe = json.loads((PAPER_RECIPES / f"{name}.json").read_text())
    assert recipe["bf16"] is True and "use_cpu" not in recipe, "paper recipes are for a GPU"
    model_args, data_args, _ = read_recipe(name)
    assert (model_args.encoder_layers, model_args.decoder_layers, model_args.attention_heads,
            model_args.ffn_dim, model_args.layernorm_position, model_args.dropout, model_args.label_smoothing) == \
        (6, 6, 8, 2048, "post", 0.1, 0.1)
    assert model_args.d_model in (512, 536) and data_args.max_tokens_per_batch
    for model_type, overrides, paper_millions, where in PAPER_COUNTS[name]:
        count = parameter_count(model_args, model_type, overrides) / 1e6
        assert abs(count - paper_millions) <= 0.03 * paper_millions, f"{where}: {count:.2f}M vs {paper_millions}M"
