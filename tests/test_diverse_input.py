"""Diverse input representation (Chen et al. 2020): Eq. (5)-(13) pinned on a tiny model over real parses,
the variants of Table I as configs, padding, the diversity analysis of Eq. (14), and the model end to end."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from benchmarks import diversity_analysis
from hf_srcfeat import (
    DiverseInputConfig,
    DiverseInputForConditionalGeneration,
    SrcFeatTransformerConfig,
    SrcFeatTransformerForConditionalGeneration,
)
from hf_srcfeat.embeddings import sinusoidal_position_encoding
from hf_srcfeat.source_features import SourceFeatures

from .end_to_end import EndToEndFromRawText, tiny_method_config, train_from_raw_text
from .helpers import random_model

FUSING_WIDTHS = {"global": 8, "recurrence": 8, "local": 8, "syntactic": 8}  # d_model 32, 4 heads of 8


@pytest.fixture
def diverse_config(feature_tokenizer):
    def make(**overrides) -> DiverseInputConfig:
        arguments = dict(vocab_size=len(feature_tokenizer), d_model=32, encoder_layers=2, decoder_layers=1,
                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
                         decoder_ffn_dim=32, dropout=0.0, num_pos_tags=feature_tokenizer.feature_vocabularies.sizes()[
                             "num_pos_tags"])
        arguments.update(overrides)
        return DiverseInputConfig(**arguments)

    return make


@pytest.fixture(scope="module")
def parsed_batch(feature_tokenizer, test_sentences):
    """Three real sentences of different lengths, right-padded, with UPOS ids."""
    batch = feature_tokenizer(test_sentences[:3], padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()
    return batch


def features_of(batch) -> SourceFeatures:
    return SourceFeatures(pos_ids=batch.get("pos_ids"))


def sentence_alone(batch, index: int) -> dict[str, torch.Tensor]:
    length = int(batch["attention_mask"][index].sum())
    return {key: batch[key][index:index + 1, :length] for key in ("input_ids", "attention_mask", "pos_ids")}


def left_padded(batch) -> dict[str, torch.Tensor]:
    """The same sentences with the padding moved to the left."""
    shifted = {}
    lengths = batch["attention_mask"].sum(1)
    for key in ("input_ids", "attention_mask", "pos_ids"):
        rows = [torch.roll(row, int(row.shape[0] - length)) for row, length in zip(batch[key], lengths, strict=True)]
        shifted[key] = torch.stack(rows)
    return shifted


def embedding_of(model):
    return model.get_encoder().embed_source


def test_table_1_variants_are_group_widths_in_whole_heads():
    def widths(variant, d_model, heads):
        return DiverseInputConfig(d_model=d_model, encoder_attention_heads=heads, decoder_attention_heads=heads,
                                  diverse_variant=variant).group_widths

    assert widths("rec_diverse", 512, 8) == {"global": 384, "recurrence": 128}
    assert widths("loc_diverse", 512, 8) == {"global": 384, "local": 128}
    assert widths("syn_diverse", 512, 8) == {"global": 320, "syntactic": 192}
    assert widths("fusing_diverse", 512, 8) == {"global": 128, "recurrence": 128, "local": 128, "syntactic": 128}
    # Other sizes keep each group's share of the heads.
    assert widths("fusing_diverse", 256, 4) == {"global": 64, "recurrence": 64, "local": 64, "syntactic": 64}
    assert widths("rec_diverse", 256, 4) == {"global": 192, "recurrence": 64}


@pytest.mark.parametrize(("overrides", "message"), [
    ({"feature_group_widths": {"global": 20, "local": 12}}, "20 wide, not a multiple of the head size 8"),
    ({"feature_group_widths": {"global": 16, "local": 8}}, "24 wide in total; they must sum to d_model \\(32\\)"),
    ({"feature_group_widths": {"global": 16, "convolution": 16}}, "names groups from"),
    ({"diverse_variant": "fusing"}, "diverse_variant"),
    ({"local_kernel_width": 4}, "odd"),
    ({"recurrent_cell": "transformer"}, "recurrent_cell"),
    ({"encoder_attention_heads": 2, "decoder_attention_heads": 2}, "needs more than 2 encoder heads"),
])
def test_invalid_groups_raise_errors_naming_the_numbers(diverse_config, overrides, message):
    with pytest.raises(ValueError, match=message):
        diverse_config(**overrides)


def test_each_group_is_a_projection_of_the_word_vectors_through_its_input_function(diverse_config, parsed_batch):
    model = random_model(DiverseInputForConditionalGeneration, diverse_config(feature_group_widths=FUSING_WIDTHS))
    embedding = embedding_of(model)
    mask = parsed_batch["attention_mask"]
    groups = embedding.group_representations(parsed_batch["input_ids"], features_of(parsed_batch), mask)
    words = embedding.embed_tokens.weight[parsed_batch["input_ids"]] * math.sqrt(32)
    projected = {name: words @ embedding.projections[name].weight.T for name in FUSING_WIDTHS}  # Eq. (5)
    positions = sinusoidal_position_encoding((mask.cumsum(-1) - 1).clamp(min=0), 8)
    torch.testing.assert_close(groups["global"], projected["global"] + positions)  # Eq. (2)
    pos_vectors = embedding.pos_embedding.weight[parsed_batch["pos_ids"]]
    torch.testing.assert_close(groups["syntactic"], projected["syntactic"] + positions + pos_vectors)  # Eq. (12)
    real = mask.bool()
    for index in range(3):
        length = int(mask[index].sum())
        x = projected["local"][index, :length]
        # Eq. (10): l_j = ReLU(sum_o W_o * x_{j+o-2} + b) + x_j with W in R^{m x d_l}: one filter per channel
        # (element-wise), zero outside the sentence, m = 5.
        padded = F.pad(x, (0, 0, 2, 2))
        weight, bias = embedding.local.convolution.weight, embedding.local.convolution.bias
        assert weight.shape == (8, 1, 5), "W in R^{m x d_l}: depthwise"
        convolved = torch.stack([sum(weight[:, 0, o] * padded[j + o] for o in range(5)) + bias
                                 for j in range(length)])
        torch.testing.assert_close(groups["local"][index, :length], torch.relu(convolved) + x)
        # Eq. (8)-(9): [forward; backward] GRU states over the sentence, projected back to d_r.
        forward_gru, backward_gru = gru_directions(embedding.recurrence.rnn)
        x = projected["recurrence"][index, :length]
        states = torch.cat([run_gru(forward_gru, x), run_gru(backward_gru, x.flip(0)).flip(0)], -1)
        torch.testing.assert_close(groups["recurrence"][index, :length],
                                   embedding.recurrence.projection(states), atol=1e-5, rtol=1e-4)
    assert (groups["recurrence"][~real] == 0).all()


def gru_directions(rnn: torch.nn.GRU) -> tuple[torch.nn.GRUCell, torch.nn.GRUCell]:
    cells = []
    for suffix in ("", "_reverse"):
        cell = torch.nn.GRUCell(rnn.input_size, rnn.hidden_size)
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, name).data.copy_(getattr(rnn, f"{name}_l0{suffix}"))
        cells.append(cell)
    return cells[0], cells[1]


def run_gru(cell: torch.nn.GRUCell, inputs: torch.Tensor) -> torch.Tensor:
    state, outputs = torch.zeros(cell.hidden_size), []
    for x in inputs:
        state = cell(x[None], state[None])[0]
        outputs.append(state)
    return torch.stack(outputs)


def test_groups_are_concatenated_in_order_as_the_encoder_input(diverse_config, parsed_batch):
    model = random_model(DiverseInputForConditionalGeneration, diverse_config(feature_group_widths=FUSING_WIDTHS))
    embedding = embedding_of(model)
    features, mask = features_of(parsed_batch), parsed_batch["attention_mask"]
    groups = embedding.group_representations(parsed_batch["input_ids"], features, mask)
    assert list(groups) == ["global", "recurrence", "local", "syntactic"]
    torch.testing.assert_close(embedding(parsed_batch["input_ids"], features, mask),
                               torch.cat(list(groups.values()), -1))  # Eq. (7)


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn"])
def test_a_padded_batch_gives_each_sentence_what_it_gets_alone(diverse_config, parsed_batch, cell):
    model = random_model(DiverseInputForConditionalGeneration,
                         diverse_config(feature_group_widths=FUSING_WIDTHS, recurrent_cell=cell))
    encoder = model.get_encoder()
    right = encoder(**{k: parsed_batch[k] for k in ("input_ids", "attention_mask", "pos_ids")}).last_hidden_state
    left_batch = left_padded(parsed_batch)
    left = encoder(**left_batch).last_hidden_state
    for index in range(3):
        alone = encoder(**sentence_alone(parsed_batch, index)).last_hidden_state[0]
        length = alone.shape[0]
        torch.testing.assert_close(right[index, :length], alone, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(left[index, -length:], alone, atol=1e-5, rtol=1e-4)


def test_a_global_group_alone_with_an_identity_projection_is_the_baseline(diverse_config, parsed_batch):
    config = diverse_config(feature_group_widths={"global": 32}, dropout=0.1)
    diverse = random_model(DiverseInputForConditionalGeneration, config)
    baseline = SrcFeatTransformerForConditionalGeneration(
        SrcFeatTransformerConfig(**{k: v for k, v in config.to_diff_dict().items() if k in
                                    SrcFeatTransformerConfig().to_dict()}))
    missing, unexpected = baseline.load_state_dict(diverse.state_dict(), strict=False)
    assert missing == [] and unexpected == ["model.encoder.embed_source.projections.global.weight"]
    with torch.no_grad():
        embedding_of(diverse).projections["global"].weight.copy_(torch.eye(32))
    batch = {k: parsed_batch[k] for k in ("input_ids", "attention_mask", "pos_ids")}
    labels = parsed_batch["input_ids"][:, :6]
    for mode in ("eval", "train"):
        getattr(diverse, mode)(), getattr(baseline, mode)()
        torch.manual_seed(0)
        expected = baseline(**batch, labels=labels).logits
        torch.manual_seed(0)
        torch.testing.assert_close(diverse(**batch, labels=labels).logits, expected)


def test_pos_tags_are_needed_only_by_the_syntactic_group(diverse_config, parsed_batch):
    without_pos = {k: parsed_batch[k] for k in ("input_ids", "attention_mask")}
    rec = random_model(DiverseInputForConditionalGeneration, diverse_config(diverse_variant="rec_diverse"))
    assert rec.get_encoder()(**without_pos).last_hidden_state.shape[-1] == 32
    syn = random_model(DiverseInputForConditionalGeneration, diverse_config(diverse_variant="syn_diverse"))
    with pytest.warns(UserWarning, match="no parse"):  # at inference: the feature's default
        syn.get_encoder()(**without_pos)
    with pytest.raises(ValueError, match="syntactic group .* needs `pos_ids`"):  # in training: an error
        syn.train().get_encoder()(**without_pos)


def test_eq_14_averages_the_cosine_over_head_pairs_and_tokens():
    # Two tokens, three heads of 2 dims; heads 0-1 form group a, head 2 group b.
    outputs = torch.tensor([[[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]],
                            [[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]]])
    groups = {"a": [0, 1], "b": [2]}
    literal = diversity_analysis.head_group_similarity(outputs, groups, include_same_head=True)
    half = 1 / math.sqrt(2)
    # token 1: cos(0,0)=1 cos(0,1)=half cos(1,1)=1 -> a,a = (1 + 2 half + 1)/4; token 2: all four are 1.
    assert literal["a"]["a"] == pytest.approx(((2 + 2 * half) / 4 + 1) / 2)
    # a,b: token 1: cos(0,2)=0, cos(1,2)=half; token 2: -1, -1.
    assert literal["a"]["b"] == pytest.approx((half / 2 + -1) / 2)
    assert literal["b"]["a"] == literal["a"]["b"] and literal["b"]["b"] == pytest.approx(1.0)
    # By default a head is not paired with itself: a,a is cos(0,1) alone, b (one head) has no pair.
    matrix = diversity_analysis.head_group_similarity(outputs, groups)
    assert matrix["a"]["a"] == pytest.approx((half + 1) / 2) and matrix["b"]["b"] is None
    assert matrix["a"]["b"] == literal["a"]["b"]
    assert diversity_analysis.average_similarity(matrix) == pytest.approx(
        (matrix["a"]["a"] + 2 * matrix["a"]["b"]) / 3), "the mean of the defined entries"


def test_the_average_of_table_iv_is_the_mean_of_its_sixteen_entries():
    table_iv = [[0.817, 0.415, 0.483, 0.765], [0.415, 0.853, 0.382, 0.612], [0.483, 0.382, 0.912, 0.717],
                [0.765, 0.612, 0.717, 0.932]]
    names = ["global", "rec", "loc", "syn"]
    matrix = {a: {b: table_iv[i][j] for j, b in enumerate(names)} for i, a in enumerate(names)}
    assert round(diversity_analysis.average_similarity(matrix), 3) == 0.641


class TestFusingDiverseEndToEnd(EndToEndFromRawText):
    @pytest.fixture(scope="class")
    @classmethod
    def trained(cls, feature_tokenizer, train_pairs):
        config = tiny_method_config(DiverseInputConfig, feature_tokenizer, diverse_variant="fusing_diverse",
                                    num_pos_tags=feature_tokenizer.feature_vocabularies.sizes()["num_pos_tags"])
        return train_from_raw_text(DiverseInputForConditionalGeneration, config, feature_tokenizer, train_pairs)

    def test_diversity_analysis_prints_the_table_4_matrix_of_the_trained_model(self, trained, feature_tokenizer,
                                                                               test_sentences, tmp_path, capsys):
        model, _ = trained
        model.save_pretrained(tmp_path)
        feature_tokenizer.save_pretrained(tmp_path)
        result = diversity_analysis.main([str(tmp_path), "--max_sentences", "8", "--output",
                                          str(tmp_path / "diversity.json")])
        groups = ["global", "recurrence", "local", "syntactic"]
        assert list(result["similarity"]) == groups and result["groups"] == {g: [i] for i, g in enumerate(groups)}
        assert all(result["similarity"][g][g] is None for g in groups), "one head per group: no distinct pair"
        off_diagonal = [result["similarity"][a][b] for a in groups for b in groups if a != b]
        assert all(-1 <= value < 1 for value in off_diagonal)
        assert result["average"] == pytest.approx(sum(off_diagonal) / len(off_diagonal))
        printed = capsys.readouterr().out
        assert "| group | global | recurrence | local | syntactic |" in printed and "| Average |" in printed
        assert (tmp_path / "diversity.json").exists()


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn"])
def test_every_recurrent_cell_gives_the_packed_bidirectional_nn_modules_states(cell):
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    from hf_srcfeat.modeling_diverse_input import RECURRENT_CELL_CLASSES, RecurrenceFeatures

    torch.manual_seed(0)
    recurrence = RecurrenceFeatures(6, cell)
    reference = RECURRENT_CELL_CLASSES[cell](6, 6, batch_first=True, bidirectional=True)
    reference.load_state_dict(recurrence.rnn.state_dict())  # the same parameter names: checkpoints load either way
    group, lengths = torch.randn(3, 7, 6), torch.tensor([7, 4, 1])
    mask = (torch.arange(7)[None] < lengths[:, None]).long()
    packed = pack_padded_sequence(group, lengths, batch_first=True, enforce_sorted=False)
    states, _ = pad_packed_sequence(reference(packed)[0], batch_first=True, total_length=7)
    expected = recurrence.projection(states) * mask[..., None]
    torch.testing.assert_close(recurrence(group, mask), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn"])
def test_the_compiled_recurrence_operator_gives_the_rnn_operators_states_and_gradients(cell):
    """Compiled, the recurrence group's RNN runs as an operator of its own: the RNN operator's states and gradients,
    as contiguous results that share no memory (checked at every call), of the shapes and strides its fake
    implementation gives the compiler."""
    from hf_srcfeat.modeling_diverse_input import (
        WEIGHT_NAMES,
        BidirectionalRecurrentWeights,
        compiled_recurrence,
        recurrence,
    )

    torch.manual_seed(0)
    rnn = BidirectionalRecurrentWeights(8, cell)
    weights = [getattr(rnn, f"{name}_l0") for name in WEIGHT_NAMES]
    inputs = torch.randn(3, 5, 8, requires_grad=True)
    expected = recurrence(inputs, weights, cell, True)
    states = compiled_recurrence(inputs, weights, cell, True)
    torch.testing.assert_close(states, expected)
    gradient = torch.randn_like(expected)
    expected_gradients = torch.autograd.grad(expected, [inputs, *weights], gradient)
    for got, wanted in zip(torch.autograd.grad(states, [inputs, *weights], gradient), expected_gradients, strict=True):
        torch.testing.assert_close(got, wanted)
    torch.library.opcheck(compiled_recurrence, (inputs.detach(), [weight.detach() for weight in weights], cell, True),
                          test_utils=("test_schema", "test_faketensor"))


def assert_one_inductor_graph_gives_eager_results(group: torch.nn.Module, lengths: tuple[int, ...]) -> None:
    """`group` compiled by inductor with dynamic sizes, on sentences of each of `lengths` (the second one padded):
    eager's states and gradients (inputs and parameters), and one compiled graph for all lengths."""
    compiled = torch.compile(group, backend="inductor", dynamic=True)
    torch._dynamo.reset()
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for length in lengths:
        vectors = torch.randn(2, length, 8, requires_grad=True)
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, -2:] = 0
        expected = group(vectors, mask)
        expected_gradients = torch.autograd.grad(expected.sum(), [vectors, *group.parameters()])
        states = compiled(vectors, mask)
        gradients = torch.autograd.grad(states.sum(), [vectors, *group.parameters()])
        torch.testing.assert_close(states, expected)
        for got, wanted in zip(gradients, expected_gradients, strict=True):
            torch.testing.assert_close(got, wanted)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before == 1


def test_the_recurrence_group_compiled_by_inductor_serves_every_sentence_length():
    from hf_srcfeat.modeling_diverse_input import RecurrenceFeatures

    torch.manual_seed(0)
    assert_one_inductor_graph_gives_eager_results(RecurrenceFeatures(8, "gru"), lengths=(5, 7))


def test_the_local_group_compiled_by_inductor_serves_every_sentence_length():
    """Compiled, the local group's convolution runs as a sum of shifted copies (inductor's convolution backward
    fixes the graph to one length): one graph for two sentence lengths, the convolution's states and gradients."""
    from hf_srcfeat.modeling_diverse_input import LocalFeatures

    torch.manual_seed(0)
    assert_one_inductor_graph_gives_eager_results(LocalFeatures(8, 5), lengths=(6, 9))
