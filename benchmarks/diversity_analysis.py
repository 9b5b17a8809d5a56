#!/usr/bin/env python
"""Diversity analysis of Chen et al. (Section V-E, Table IV): average cosine similarity between the head
representations of the encoder's feature groups, over the tokens of a test set.

    python -m benchmarks.diversity_analysis runs/diverse_input_multi30k_en_de --max_sentences 500 \
        --output benchmarks/results/diversity_fusing_diverse.json

Eq. (14): Sim(G1, G2) = 1/(H1 H2) sum_{i in G1} sum_{j in G2} cos(O^i, O^j), per token, summed over the test
tokens and divided by their number. O^i is head i's output (its attention-weighted values, before the output
projection) in the chosen encoder layer (default: the last, the "final feature representations"). Head i
belongs to the group whose slice of the input it lines up with (groups are whole heads, in order). A
baseline model is one global group of all heads (Table IV's first row).

A group's similarity with itself is taken over pairs of distinct heads: Eq. (14) as written also pairs each
head with itself (cosine 1), which makes the diagonal of a group of one head exactly 1.0 whatever the model
learned (the benchmark's 4-head Fusing_Diverse has one head per group); such a diagonal entry is then
undefined (n/a). `--include_same_head` restores the literal sum. "Average" is the paper's headline figure
(0.826 for the base Transformer, 0.641 for Fusing_Diverse): the mean of the matrix's defined entries.
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_srcfeat  # noqa: F401  (registers the model classes)
from hf_srcfeat.commands.train import code_version
from hf_srcfeat.data.multi30k import load_multi30k, multi30k_file
from hf_srcfeat.safe_writing import write_json_atomically


def head_groups(config) -> dict[str, list[int]]:
    """Group name -> the encoder heads it spans, in order."""
    head_size = config.d_model // config.encoder_attention_heads
    widths = getattr(config, "group_widths", {"global": config.d_model})
    groups, first = {}, 0
    for name, width in widths.items():
        groups[name] = list(range(first, first + width // head_size))
        first += width // head_size
    return groups


def head_group_similarity(head_outputs: torch.Tensor, groups: dict[str, list[int]],
                          include_same_head: bool = False) -> dict[str, dict[str, float | None]]:
    """Eq. (14) averaged over tokens: `head_outputs` is [tokens, heads, head_dim]. Without `include_same_head`,
    a head is never paired with itself; an entry with no pair left is None."""
    unit = torch.nn.functional.normalize(head_outputs.double(), dim=-1)
    cosine = (unit @ unit.transpose(1, 2)).mean(0)  # [heads, heads], mean over tokens
    distinct = ~torch.eye(cosine.shape[0], dtype=torch.bool)
    matrix: dict[str, dict[str, float | None]] = {}
    for first, heads_1 in groups.items():
        matrix[first] = {}
        for second, heads_2 in groups.items():
            block = cosine[heads_1][:, heads_2]
            if not include_same_head:
                block = block[distinct[heads_1][:, heads_2]]
            matrix[first][second] = float(block.mean()) if block.numel() else None
    return matrix


def average_similarity(matrix: dict[str, dict[str, float | None]]) -> float | None:
    """Table IV's "Average": the mean of the matrix's defined entries."""
    values = [value for row in matrix.values() for value in row.values() if value is not None]
    return sum(values) / len(values) if values else None


def encoder_head_outputs(model, batch, layer: int) -> torch.Tensor:
    """Per-head outputs of encoder layer `layer`'s self-attention for the real tokens: [tokens, heads, dim]."""
    attention = model.get_encoder().layers[layer].self_attn
    captured = []
    handle = attention.out_proj.register_forward_pre_hook(lambda module, args: captured.append(args[0]))
    try:
        with torch.no_grad():
            model.get_encoder()(**{k: v for k, v in batch.items() if k != "labels"})
    finally:
        handle.remove()
    outputs = captured[0].view(*captured[0].shape[:2], attention.num_heads, attention.head_dim)
    return outputs[batch["attention_mask"].bool()]


def diversity_matrix(model, tokenizer, sentences: list[str], layer: int = -1, batch_size: int = 32,
                     include_same_head: bool = False) -> dict[str, dict[str, float | None]]:
    """Table IV for `model` over `sentences`: every token weighs the same."""
    groups = head_groups(model.config)
    layer = layer % model.config.encoder_layers
    totals, count = None, 0
    for start in range(0, len(sentences), batch_size):
        batch = tokenizer(sentences[start:start + batch_size], padding=True, return_tensors="pt")
        outputs = encoder_head_outputs(model, batch, layer)
        matrix = head_group_similarity(outputs, groups, include_same_head)
        weight = outputs.shape[0]
        totals = {g1: {g2: None if value is None else value * weight + (totals[g1][g2] if totals else 0.0)
                       for g2, value in row.items()} for g1, row in matrix.items()}
        count += weight
    return {g1: {g2: None if value is None else value / count for g2, value in row.items()}
            for g1, row in totals.items()}


def markdown_table(matrix: dict[str, dict[str, float | None]]) -> str:
    names = list(matrix)
    lines = ["| group | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines += [f"| {g1} | " + " | ".join("n/a" if matrix[g1][g2] is None else f"{matrix[g1][g2]:.3f}"
                                        for g2 in names) + " |" for g1 in names]
    average = average_similarity(matrix)
    lines.append(f"| Average | {'n/a' if average is None else f'{average:.3f}'} |" + " |" * (len(names) - 1))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="folder (or Hub id) of a trained model with its tokenizer")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--source_lang", default="en")
    parser.add_argument("--target_lang", default="de", help="target side of the Multi30k pair (read, not used)")
    parser.add_argument("--max_sentences", type=int, default=None)
    parser.add_argument("--layer", type=int, default=-1, help="encoder layer, 0-based; -1 = the last")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--include_same_head", action="store_true",
                        help="pair every head with itself too, as Eq. (14) is written (cosine 1)")
    parser.add_argument("--output", help="JSON file for the matrix")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    model = AutoModelForSeq2SeqLM.from_pretrained(args.model).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    data = load_multi30k(args.split, args.source_lang, args.target_lang, limit=args.max_sentences)
    sentences = list(data["source"])
    matrix = diversity_matrix(model, tokenizer, sentences, args.layer, include_same_head=args.include_same_head)
    print(markdown_table(matrix))
    result = {"model": args.model, "model_type": model.config.model_type, "layer": args.layer,
              "data_file": str(multi30k_file(args.split, args.source_lang)), "sentences": len(sentences),
              "groups": head_groups(model.config), "include_same_head": args.include_same_head, "similarity": matrix,
              "average": average_similarity(matrix), "code_version": code_version()}
    if args.output:
        write_json_atomically(args.output, result)
    return result


if __name__ == "__main__":
    main()
