#!/usr/bin/env python
"""A baseline of another shape with random weights, for timing decoding at a size no run here trained (a paper's
Transformer Base): the config of a trained model folder with `--config_overrides` applied, weights drawn by the
model's own initialisation under `--seed`, saved with that folder's tokenizer and generation config.

    python -m benchmarks.random_baseline --like runs/quickstart_1000 --output runs/paper_size_random_baseline \\
        --config_overrides '{"d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "encoder_ffn_dim": 2048,
        "decoder_ffn_dim": 2048, "encoder_attention_heads": 8, "decoder_attention_heads": 8, "vocab_size": 43000,
        "layernorm_position": "post", "share_embeddings": false, "tie_word_embeddings": true}'

Its translations mean nothing; grafted methods with closed gates decode the same tokens, so
`benchmarks/measure_decoding_speed.py` compares their cost per token at that size.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--like", type=Path, required=True, help="a trained model folder: its config and tokenizer")
    parser.add_argument("--output", type=Path, required=True, help="a new folder (refused when it holds files)")
    parser.add_argument("--config_overrides", default="{}", help="JSON object of config arguments to change")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        overrides = json.loads(args.config_overrides)
    except json.JSONDecodeError as error:
        parser.error(f"--config_overrides is not JSON: {error}")
    if not isinstance(overrides, dict):
        parser.error(f"--config_overrides must be a JSON object, got {args.config_overrides!r}")
    if not (args.like / "config.json").is_file():
        parser.error(f"--like {args.like} is not a model folder (no config.json there)")
    if args.output.exists() and any(args.output.iterdir()):
        parser.error(f"--output {args.output} already holds files; name a new folder")

    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, GenerationConfig

    from hf_srcfeat.tokenization_pretrained_source_features import load_tokenizer

    config = AutoConfig.from_pretrained(args.like)
    for name, value in overrides.items():
        if not hasattr(config, name):
            parser.error(f"--config_overrides: {type(config).__name__} has no argument {name!r}")
        setattr(config, name, value)
    config = type(config)(**config.to_dict())  # validated as a new config would be
    torch.manual_seed(args.seed)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    model.generation_config = GenerationConfig.from_pretrained(args.like)
    model.save_pretrained(args.output)
    load_tokenizer(args.like).save_pretrained(args.output)
    print(f"{args.output}: {sum(parameter.numel() for parameter in model.parameters()) / 1e6:.2f}M parameters")
    return args.output


if __name__ == "__main__":
    main()
