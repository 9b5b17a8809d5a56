"""Helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import torch

from hf_srcfeat.annotated_sentence import AnnotatedSentence
from hf_srcfeat.data.batching import TokenBudgetBatchSampler

REPO = Path(__file__).resolve().parents[1]


def random_model(model_class, config, seed: int = 0, scale: float = 3.0):
    """A model with large random weights, so that its outputs differ between tokens and beams differ."""
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() > 1 and "embed" not in name and "shared" not in name:
                parameter.mul_(scale)
    return model


def train_briefly(model, tokenizer, pairs, steps: int = 120, batch_size: int = 32, learning_rate: float = 3e-3,
                  seed: int = 0, device: str = "cpu") -> list[float]:
    """A few optimiser steps of teacher-forced training on real pairs; returns the loss of every step. The sources
    are raw texts or `AnnotatedSentence`s (pre-parsed, e.g. carrying user factors)."""
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    sources, targets = list(pairs["source"]), list(pairs["target"])
    losses = []
    model.train()
    for step in range(steps):
        start = (step * batch_size) % (len(sources) - batch_size)
        chunk = sources[start:start + batch_size]
        source = {"annotations": chunk} if isinstance(chunk[0], AnnotatedSentence) else {"text": chunk}
        batch = tokenizer(**source, text_target=targets[start:start + batch_size], padding=True,
                          return_tensors="pt").to(device)
        batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.eval()
    return losses


def unmodified_scores(model, batch):
    """Per layer, the scaled dot-product scores computed by hand from the layer's attention input,
    and the attention probabilities the model reports."""
    captured = []
    attentions = [layer.self_attn for layer in model.get_encoder().layers]
    handles = [attention.register_forward_pre_hook(lambda module, args: captured.append(args[0]))
               for attention in attentions]
    outputs = model.get_encoder()(**batch, output_attentions=True)
    for handle in handles:
        handle.remove()
    scores = []
    for attention, x in zip(attentions, captured, strict=True):
        q, k = attention._project(attention.q_proj, x), attention._project(attention.k_proj, x)
        scores.append(torch.matmul(q, k.transpose(2, 3)) * attention.scaling)
    return scores, outputs.attentions


def masked_softmax(scores, attention_mask):
    """Softmax over keys of [B, Q, K] scores, with padded keys masked out."""
    return scores.masked_fill(attention_mask[:, None, :] == 0, torch.finfo(scores.dtype).min).softmax(-1)


def bfs_distances(heads: list[int]) -> list[list[int]]:
    """Path lengths by breadth-first search over the undirected tree: the reference for `dep_distance`."""
    neighbours = [[] for _ in heads]
    for index, head in enumerate(heads):
        if head:
            neighbours[index].append(head - 1)
            neighbours[head - 1].append(index)
    table = []
    for start in range(len(heads)):
        distance = [-1] * len(heads)
        distance[start], queue = 0, deque([start])
        while queue:
            node = queue.popleft()
            for other in neighbours[node]:
                if distance[other] < 0:
                    distance[other] = distance[node] + 1
                    queue.append(other)
        table.append(distance)
    return table


def pre_norm_model(tokenizer, **overrides):
    """An untrained 2-layer baseline with what the trained test model lacks: pre-norm with a final layer norm, learned
    positions after an offset, a layer norm on the embeddings, GELU and a logits bias (as Marian and mBART
    checkpoints carry), over `tokenizer`'s vocabulary."""
    from hf_srcfeat import SrcFeatTransformerConfig, SrcFeatTransformerForConditionalGeneration

    config = SrcFeatTransformerConfig(**{
        "vocab_size": len(tokenizer), "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
        "layernorm_position": "pre", "position_embedding_type": "learned", "position_offset": 2,
        "layernorm_embedding": True, "final_logits_bias": True, "activation_function": "gelu",
        "pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id, "decoder_start_token_id": tokenizer.bos_token_id, **overrides})
    torch.manual_seed(0)
    model = SrcFeatTransformerForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_()
    return model


class RecordingSampler(TokenBudgetBatchSampler):
    """The sampler, keeping every instance's batches: what a training command asked of it."""

    made: list[list[list[int]]] = []

    def _make_batches(self) -> list[list[int]]:
        batches = super()._make_batches()
        RecordingSampler.made.append(batches)
        return batches


def sampled_batches(monkeypatch) -> list[list[list[int]]]:
    """The batches of every token-batch sampler the trainers make from now on (in this test)."""
    from hf_srcfeat.data import batching

    monkeypatch.setattr(batching, "TokenBudgetBatchSampler", RecordingSampler)
    monkeypatch.setattr(RecordingSampler, "made", [])
    return RecordingSampler.made


def annotator_fails_on(monkeypatch, marker: str = "FAIL") -> None:
    """The feature-aware tokenizer's parser gives up on every batch holding a text with `marker`."""
    from hf_srcfeat.tokenization_source_features import SourceFeatureTokenizer

    annotate = SourceFeatureTokenizer.annotate

    def failing(self, texts, *args, **kwargs):
        if any(marker in text for text in texts):
            raise RuntimeError("the parser gave up")
        return annotate(self, texts, *args, **kwargs)

    monkeypatch.setattr(SourceFeatureTokenizer, "annotate", failing)
