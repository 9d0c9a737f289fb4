"""The padding-free encoder: padded batches, packed rows and single sequences give the same
hidden states; attention never crosses sequences or documents; pads are zeros; bf16 stays
finite; eager and SDPA agree; the textbook attention arithmetic; the input/config errors.
"""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from tests.helpers import ARCHITECTURES, make_random_batch, make_tiny_config
from mlm_suite import (
    MlmSuiteConfig,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
)
from mlm_suite.model.modeling_mlm_suite import MlmSuiteFeedForward, MlmSuiteSelfAttention, SequenceLayout

VARIANTS = {
    "bert": {},
    "pre_norm": {"norm_position": "pre"},
    "rotary": {"position_embedding_type": "rotary"},
    "geglu": {"ffn_type": "geglu"},
    "no_bias": {"use_bias": False},
    "mean_pooling": {"classifier_pooling": "mean"},
    # The options of the other families (RoBERTa, ELECTRA, DistilBERT).
    "families": {"embedding_size": 16, "positions_count": "real_tokens", "classifier_activation": "gelu",
                 "attention_output_dropout": 0.0, "pooler_dropout": 0.1},
    # ModernBERT's: a sliding-window layer (2 tokens either side) and a full one, a RoPE base each, and the rest.
    "modernbert": ARCHITECTURES["modernbert"],
}


def build_model(seed: int = 0, attn: str = "sdpa", **overrides) -> MlmSuiteModel:
    torch.manual_seed(seed)
    config = make_tiny_config(**overrides)
    config._attn_implementation = attn
    model = MlmSuiteModel(config).eval()
    # Random LayerNorm/bias values too, so that no parameter sits at a special value (1 or 0).
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(0.1 * torch.randn_like(param))
    return model


def run(model, **inputs):
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True)


def assert_rows_match_alone(model, batch, atol=1e-5):
    """Each row of the padded batch equals that sequence run alone (no mask, no padding)."""
    padded = run(model, **batch)
    lengths = batch["attention_mask"].sum(1).tolist()
    for row, length in enumerate(lengths):
        alone_inputs = {k: v[row : row + 1, :length] for k, v in batch.items() if k != "attention_mask"}
        alone = run(model, **alone_inputs)
        assert len(alone.hidden_states) == len(padded.hidden_states)
        for layer, (p, a) in enumerate(zip(padded.hidden_states, alone.hidden_states)):
            torch.testing.assert_close(p[row, :length], a[0], atol=atol, rtol=0, msg=f"row {row} layer {layer}")
        torch.testing.assert_close(padded.last_hidden_state[row, :length], alone.last_hidden_state[0], atol=atol, rtol=0)
        torch.testing.assert_close(padded.pooler_output[row], alone.pooler_output[0], atol=atol, rtol=0)
    return padded


# ------------------------------------------------------------------------------------------------
# Padding
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_padded_batch_equals_each_sequence_alone(variant):
    model = build_model(**VARIANTS[variant])
    batch = make_random_batch(lengths=(7, 4, 9, 1), seq_len=11)
    padded = assert_rows_match_alone(model, batch)
    for h in padded.hidden_states:
        assert torch.isfinite(h).all()


def test_family_options_reach_config_json_only_when_set(tmp_path):
    """A config that sets none of them saves as before the options existed; one that sets them reloads them."""
    from mlm_suite.model.configuration_mlm_suite import FAMILY_OPTIONS

    MlmSuiteConfig().save_pretrained(tmp_path / "bert")
    assert not set(FAMILY_OPTIONS) & set(json.loads((tmp_path / "bert" / "config.json").read_text()))
    options = {"positions_count": "real_tokens", "embedding_size": 16, "attention_output_dropout": 0.0,
               "classifier_activation": "relu", "pooler_dropout": 0.2, "qa_dropout": 0.1,
               "layer_types": ["full_attention", "sliding_attention"] * 6, "local_attention": 8,
               "local_rope_theta": 500.0, "first_attention_norm": False, "ffn_inner_dropout": 0.1,
               "ffn_output_dropout": 0.0, "pooler_norm": True, "token_head_transform": True, "position_offset": 2}
    assert options.keys() == FAMILY_OPTIONS.keys()
    MlmSuiteConfig(norm_position="pre", **options).save_pretrained(tmp_path / "families")
    reloaded = MlmSuiteConfig.from_pretrained(tmp_path / "families")
    assert {name: getattr(reloaded, name) for name in options} == options


def test_narrow_embeddings_are_projected_and_the_mlm_head_maps_back_to_them():
    from mlm_suite import MlmSuiteForMaskedLM

    model = MlmSuiteForMaskedLM(make_tiny_config(embedding_size=16))
    assert model.encoder.embeddings.word_embeddings.weight.shape == (model.config.vocab_size, 16)
    assert model.encoder.embeddings.project.weight.shape == (32, 16)
    assert model.lm_head.dense.weight.shape == (16, 32) and model.lm_head.decoder.weight.shape == (model.config.vocab_size, 16)
    assert model.lm_head.decoder.weight is model.encoder.embeddings.word_embeddings.weight


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_padded_equals_alone_for_both_attention_paths(attn):
    model = build_model(attn=attn)
    assert_rows_match_alone(model, make_random_batch(lengths=(6, 3, 8), seed=1))


def test_pads_are_zero_in_every_layer():
    model = build_model(norm_position="pre")
    batch = make_random_batch(lengths=(5, 2, 8))
    out = run(model, **batch)
    pad = batch["attention_mask"] == 0
    assert pad.any()
    for h in out.hidden_states + (out.last_hidden_state,):
        assert torch.all(h[pad] == 0)
        assert torch.all(h[~pad].abs().sum(-1) > 0)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_fully_padded_row_gives_no_nan(pooling):
    model = build_model(classifier_pooling=pooling)
    batch = make_random_batch(lengths=(5, 0, 3))
    out = run(model, **batch)
    for h in out.hidden_states + (out.last_hidden_state, out.pooler_output):
        assert torch.isfinite(h).all()
    assert torch.all(out.last_hidden_state[1] == 0)
    alone = run(model, **{k: v[:1, :5] for k, v in batch.items() if k != "attention_mask"})
    torch.testing.assert_close(out.last_hidden_state[0, :5], alone.last_hidden_state[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_batch_of_only_padding(attn):
    model = build_model(attn=attn)
    ids = torch.zeros(2, 5, dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.zeros_like(ids), output_hidden_states=True, output_attentions=True)
    for h in out.hidden_states + (out.last_hidden_state,):
        assert h.shape == (2, 5, 32) and torch.all(h == 0)
    assert torch.isfinite(out.pooler_output).all()
    assert all(w.shape == (2, 4, 5, 5) and torch.all(w == 0) for w in out.attentions)


def test_eager_and_sdpa_agree():
    eager, sdpa = build_model(attn="eager"), build_model(attn="sdpa")
    sdpa.load_state_dict(eager.state_dict())
    batch = make_random_batch(lengths=(7, 3, 9))
    a, b = run(eager, **batch), run(sdpa, **batch)
    for x, y in zip(a.hidden_states, b.hidden_states):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.pooler_output, b.pooler_output, atol=1e-5, rtol=0)
    # also on a packed row
    ids, positions, _ = packed_inputs()
    a, b = run(eager, input_ids=ids, position_ids=positions, attention_mask=(ids > 0).long()), run(
        sdpa, input_ids=ids, position_ids=positions, attention_mask=(ids > 0).long()
    )
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, atol=1e-5, rtol=0)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_bf16_with_padding_is_finite(attn):
    model = build_model(attn=attn)
    batch = make_random_batch(lengths=(7, 2, 9, 0))
    reference = run(model, **batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = run(model, **batch)
    bf16 = run(model.to(torch.bfloat16), **batch)
    real = batch["attention_mask"].bool()
    for out in (autocast, bf16):
        for h in out.hidden_states + (out.last_hidden_state, out.pooler_output):
            assert torch.isfinite(h.float()).all()
        assert torch.all(out.last_hidden_state[~real] == 0)
        # bf16 has ~3 significant digits; LayerNorm outputs are O(1)
        diff = (out.last_hidden_state.float() - reference.last_hidden_state)[real].abs().max()
        assert diff < 0.15


# ------------------------------------------------------------------------------------------------
# Packing
# ------------------------------------------------------------------------------------------------
DOCS = [[5, 17, 23], [8, 41, 12, 66], [9, 30, 31, 32, 33]]


def packed_inputs():
    """Row 0 packs docs 0 and 1 then 2 pads; row 1 holds doc 2 then 4 pads."""
    ids = torch.tensor([DOCS[0] + DOCS[1] + [0, 0], DOCS[2] + [0] * 4])
    positions = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 0, 0], [0, 1, 2, 3, 4, 0, 0, 0, 0]])
    document_ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0, 0]])
    return ids, positions, document_ids


DOC_SPANS = [(0, 0, 3), (0, 3, 7), (1, 0, 5)]  # (row, start, end) of each document


def assert_documents_match_alone(model, out, atol=1e-5):
    for doc, (row, start, end) in zip(DOCS, DOC_SPANS):
        alone = run(model, input_ids=torch.tensor([doc]))
        for layer, (p, a) in enumerate(zip(out.hidden_states, alone.hidden_states)):
            torch.testing.assert_close(p[row, start:end], a[0], atol=atol, rtol=0, msg=f"doc {doc} layer {layer}")


@pytest.mark.parametrize("variant", ["bert", "rotary", "pre_norm", "modernbert"])
def test_packed_rows_with_restarting_position_ids(variant):
    model = build_model(**VARIANTS[variant])
    ids, positions, _ = packed_inputs()
    out = run(model, input_ids=ids, attention_mask=(ids > 0).long(), position_ids=positions)
    assert_documents_match_alone(model, out)
    assert torch.all(out.last_hidden_state[ids == 0] == 0)


@pytest.mark.parametrize("variant", ["bert", "rotary", "modernbert"])
def test_packed_rows_with_document_ids(variant):
    model = build_model(**VARIANTS[variant])
    ids, _, document_ids = packed_inputs()
    out = run(model, input_ids=ids, attention_mask=(ids > 0).long(), document_ids=document_ids)
    assert_documents_match_alone(model, out)


def test_packing_without_positions_would_differ():
    """Sanity check of the packing test: without restarting positions the second document differs."""
    model = build_model()
    ids, _, _ = packed_inputs()
    out = run(model, input_ids=ids, attention_mask=(ids > 0).long())
    alone = run(model, input_ids=torch.tensor([DOCS[1]]))
    assert (out.last_hidden_state[0, 3:7] - alone.last_hidden_state[0]).abs().max() > 1e-3


# ------------------------------------------------------------------------------------------------
# Attention weights and hidden-state outputs
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_output_attentions_on_packed_padded_batch(attn):
    model = build_model(attn=attn)
    ids, positions, _ = packed_inputs()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=(ids > 0).long(), position_ids=positions, output_attentions=True)
    config = model.config
    assert len(out.attentions) == config.num_hidden_layers
    segment = torch.full(ids.shape, -1)
    for index, (row, start, end) in enumerate(DOC_SPANS):
        segment[row, start:end] = index
    real = segment >= 0
    same = (segment[:, :, None] == segment[:, None, :]) & real[:, :, None] & real[:, None, :]  # (b, q, k)
    for weights in out.attentions:
        assert weights.shape == (2, config.num_attention_heads, 9, 9)
        same_h = same[:, None].expand_as(weights)
        assert torch.all(weights[~same_h] == 0)  # pads, other documents, pad queries
        sums = weights.sum(-1)  # (b, h, q)
        real_q = real[:, None, :].expand_as(sums)
        torch.testing.assert_close(sums[real_q], torch.ones(int(real_q.sum())), atol=1e-5, rtol=0)
        assert torch.all(weights[same_h] > 0)


def test_output_attentions_dense_batch_sums_to_one():
    model = build_model()
    ids = torch.randint(1, 99, (2, 6))
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True)
    for weights in out.attentions:
        assert weights.shape == (2, 4, 6, 6)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 6), atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", ["bert", "pre_norm"])
def test_output_hidden_states_count(variant):
    model = build_model(**VARIANTS[variant], num_hidden_layers=3)
    batch = make_random_batch(lengths=(4, 6))
    out = run(model, **batch)
    assert len(out.hidden_states) == 3 + 1
    for h in out.hidden_states:
        assert h.shape == (2, 6, 32)
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)
    without = model(**batch)
    assert without.hidden_states is None and without.attentions is None


def test_textbook_attention_arithmetic():
    """W_Q = W_K = W_V = I on e(The)=[1,0,0], e(cat)=[0,1,0], e(sat)=[0,0,1]: the "cat" query scores
    are q·k / sqrt(3) = [0, 1/sqrt(3), 0], so its weights are softmax of that."""
    config = MlmSuiteConfig(
        vocab_size=3, hidden_size=3, num_hidden_layers=1, num_attention_heads=1, intermediate_size=4
    )
    config._attn_implementation = "eager"
    attention = MlmSuiteSelfAttention(config).eval()
    with torch.no_grad():
        attention.qkv.weight.copy_(torch.cat([torch.eye(3)] * 3, dim=0))
        attention.qkv.bias.zero_()
        attention.out.weight.copy_(torch.eye(3))
        attention.out.bias.zero_()
    layout = SequenceLayout.from_inputs((1, 3), torch.device("cpu"))
    assert layout.token_index is None and layout.segment_index is None  # no pads, one segment per row
    embeddings = torch.eye(3)  # The, cat, sat
    with torch.no_grad():
        context, weights = attention(embeddings, layout, None, output_attentions=True)
    assert weights.shape == (1, 1, 3, 3)
    e = math.exp(1 / math.sqrt(3))
    expected_cat = torch.tensor([1 / (2 + e), e / (2 + e), 1 / (2 + e)])
    torch.testing.assert_close(expected_cat, torch.tensor([0.2645, 0.4711, 0.2645]), atol=1e-4, rtol=0)
    torch.testing.assert_close(weights[0, 0, 1], torch.tensor([0.2645, 0.4711, 0.2645]), atol=1e-4, rtol=0)
    torch.testing.assert_close(weights[0, 0, 0], torch.tensor([0.4711, 0.2645, 0.2645]), atol=1e-4, rtol=0)
    # with V = I and W_O = I the context of "cat" is its weight vector
    torch.testing.assert_close(context[1], weights[0, 0, 1], atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------------------
# ModernBERT's options: sliding-window layers, a RoPE base per layer type, its norms, dropouts and heads
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_a_sliding_window_layer_attends_within_its_window_only(packed):
    """``local_attention=4``: each query of a sliding-window layer sees the keys at most 2 positions away in its own
    sequence (or packed document); a full-attention layer sees the whole sequence."""
    model = build_model(attn="eager", **VARIANTS["modernbert"])  # layer 0 sliding, layer 1 full
    if packed:
        ids, positions, _ = packed_inputs()
        spans = DOC_SPANS
        inputs = {"input_ids": ids, "attention_mask": (ids > 0).long(), "position_ids": positions}
    else:
        inputs = make_random_batch(lengths=(9, 4, 7), pairs=False)
        spans = [(row, 0, length) for row, length in enumerate((9, 4, 7))]
    with torch.no_grad():
        sliding, full = model(**inputs, output_attentions=True).attentions
    same = torch.zeros(sliding.shape[0], sliding.shape[2], sliding.shape[3], dtype=torch.bool)
    for row, start, end in spans:
        same[row, start:end, start:end] = True
    columns = torch.arange(sliding.shape[2])
    near = (columns[:, None] - columns[None, :]).abs() <= 2
    for weights, visible in ((sliding, same & near), (full, same)):
        visible = visible[:, None].expand_as(weights)
        assert torch.all(weights[~visible] == 0) and torch.all(weights[visible] > 0)


def test_local_rope_theta_sets_the_rope_base_of_the_sliding_layers_only():
    batch = make_random_batch(lengths=(9, 4, 7), pairs=False)
    sliding = {**VARIANTS["modernbert"], "local_rope_theta": None}
    base = run(build_model(**sliding), **batch).last_hidden_state
    same_base = run(build_model(**{**sliding, "local_rope_theta": 10000.0}), **batch).last_hidden_state
    assert torch.equal(base, same_base)  # rope_theta's default: what leaving it unset gives
    other = run(build_model(**{**sliding, "local_rope_theta": 10.0}), **batch).last_hidden_state
    assert (other - base).abs().max() > 1e-5  # beyond float noise: base and same_base are equal bit for bit
    full = {**sliding, "layer_types": ["full_attention"] * 2}
    torch.testing.assert_close(run(build_model(**{**full, "local_rope_theta": 10.0}), **batch).last_hidden_state,
                               run(build_model(**full), **batch).last_hidden_state, atol=0, rtol=0)


def test_without_a_first_attention_norm_the_first_layer_reads_the_embeddings_as_they_are():
    model = build_model(**VARIANTS["modernbert"])
    names = set(model.state_dict())
    assert "layers.0.attention_norm.weight" not in names and "layers.1.attention_norm.weight" in names
    assert isinstance(model.layers[0].attention_norm, torch.nn.Identity)
    with pytest.raises(ValueError, match="first_attention_norm=False needs norm_position='pre'"):
        make_tiny_config(first_attention_norm=False)


def test_the_feed_forward_network_drops_out_inside_with_ffn_inner_dropout():
    """ModernBERT's MLP drops out the gated activations before its output projection (``ffn_inner_dropout``), and
    nothing after it (``ffn_output_dropout=0``, where BERT drops out with ``hidden_dropout_prob``)."""
    config = make_tiny_config(ffn_type="geglu", ffn_inner_dropout=0.5, ffn_output_dropout=0.0, hidden_dropout_prob=0.3)
    ffn = MlmSuiteFeedForward(config).train()
    hidden = torch.randn(5, 32)
    torch.manual_seed(0)
    got = ffn(hidden)
    gate, value = ffn.up(hidden).chunk(2, dim=-1)
    torch.manual_seed(0)
    torch.testing.assert_close(got, ffn.down(torch.nn.functional.dropout(ffn.activation(gate) * value, 0.5)))
    layer = MlmSuiteModel(config).layers[0]
    assert (layer.dropout.p, layer.attention_dropout.p) == (0.0, 0.3)


def test_pooler_norm_and_token_head_transform_give_modernbert_s_heads():
    """The pooler ends with a LayerNorm (``pooler_norm``); the token heads put dense, ``classifier_activation`` and
    LayerNorm before their classifier (``token_head_transform``)."""
    torch.manual_seed(0)
    batch = make_random_batch(lengths=(9, 4, 7), pairs=False)
    config = make_tiny_config(**VARIANTS["modernbert"], classifier_activation="relu", num_labels=3)
    classifier = MlmSuiteForSequenceClassification(config).eval()
    pooler = classifier.encoder.pooler
    with torch.no_grad():
        first = classifier.encoder(**batch).last_hidden_state[:, 0]
        expected = classifier.classifier(pooler.norm(torch.relu(pooler.dense(first))))
        torch.testing.assert_close(classifier(**batch).logits, expected)
    for head, output in ((MlmSuiteForTokenClassification, "classifier"), (MlmSuiteForQuestionAnswering, "qa_outputs")):
        model = head(config).eval()
        assert {"transform.dense.weight", "transform.norm.weight"} <= set(model.state_dict())
        with torch.no_grad():
            states = model.encoder(**batch).last_hidden_state
            logits = getattr(model, output)(model.transform.norm(torch.relu(model.transform.dense(states))))
            got = model(**batch)
        real = batch["attention_mask"].bool()
        if head is MlmSuiteForTokenClassification:
            torch.testing.assert_close(got.logits[real], logits[real])
        else:
            torch.testing.assert_close(got.start_logits[real], logits[..., 0][real])


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"layer_types": ["full_attention", "local"]}, "layer_types=['full_attention', 'local']: each entry must be"),
        ({"layer_types": ["full_attention"] * 3}, "layer_types has 3 entries for num_hidden_layers=2"),
        ({"layer_types": ["sliding_attention"] * 2}, "sliding_attention layers need local_attention, a whole number"),
        ({"layer_types": ["sliding_attention"] * 2, "local_attention": 1}, "of at least 2, got 1"),
    ],
)
def test_bad_layer_types_and_windows_are_named(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        MlmSuiteModel(make_tiny_config(**overrides))


def test_layer_types_that_stop_matching_the_layers_are_named_when_a_model_is_built():
    config = make_tiny_config(layer_types=["full_attention", "sliding_attention"], local_attention=4)
    config.num_hidden_layers = 3
    with pytest.raises(ValueError, match=re.escape("layer_types has 2 entries for num_hidden_layers=3")):
        MlmSuiteModel(config)


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------
def test_sequence_longer_than_max_positions():
    model = build_model()
    with pytest.raises(ValueError, match=r"65.*max_position_embeddings=64"):
        model(input_ids=torch.ones(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match=r"70.*max_position_embeddings=64"):
        model(input_ids=torch.ones(1, 3, dtype=torch.long), position_ids=torch.tensor([[0, 1, 70]]))
    model(input_ids=torch.ones(1, 64, dtype=torch.long))  # the limit itself is fine


def test_rotary_has_no_position_limit():
    model = build_model(position_embedding_type="rotary")
    out = model(input_ids=torch.ones(1, 70, dtype=torch.long))
    assert out.last_hidden_state.shape == (1, 70, 32)


def test_token_type_ids_out_of_range():
    model = build_model()
    ids = torch.ones(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"token type id 2 .*type_vocab_size=2"):
        model(input_ids=ids, token_type_ids=torch.tensor([[0, 1, 2, 0]]))
    with pytest.raises(ValueError, match=r"token type id -1 .*type_vocab_size=2"):
        model(input_ids=ids, token_type_ids=torch.tensor([[0, -1, 1, 0]]))


def test_hidden_size_not_divisible_by_heads_is_rejected_when_a_model_is_built():
    config = MlmSuiteConfig(hidden_size=30, num_attention_heads=4)  # accepted, as BertConfig accepts it
    with pytest.raises(ValueError, match=r"hidden_size \(30\).*num_attention_heads \(4\)"):
        MlmSuiteModel(config)
    with pytest.raises(ValueError, match=r"even head size, got 5"):
        MlmSuiteModel(MlmSuiteConfig(hidden_size=20, num_attention_heads=4, position_embedding_type="rotary"))


@pytest.mark.parametrize(
    "field, value, low",
    [("num_attention_heads", 0, 1), ("hidden_size", -64, 1), ("num_hidden_layers", 0, 1), ("intermediate_size", 0, 1),
     ("vocab_size", 0, 1), ("max_position_embeddings", -1, 1), ("type_vocab_size", -1, 0), ("hidden_size", 64.0, 1)],
)
def test_a_size_that_is_not_a_whole_number_from_its_minimum_is_named_when_a_model_is_built(field, value, low):
    """Not ZeroDivisionError or torch's negative-dimension RuntimeError: one line naming the field and its value
    (type_vocab_size 0 is a model without token types)."""
    config = make_tiny_config(**{field: value})
    with pytest.raises(ValueError, match=rf"^{field} must be a whole number of at least {low}, got {value}$"):
        MlmSuiteModel(config)


def test_bad_variant_names_are_rejected():
    with pytest.raises(ValueError, match="norm_position='middle'"):
        MlmSuiteConfig(norm_position="middle")
    with pytest.raises(ValueError, match="ids"):
        build_model()(input_ids=None)


def test_train_and_eval_set_every_module_and_skip_the_walk_when_nothing_changes(monkeypatch):
    """``model.train()``, which the Trainer calls before every step, sets no flag when every module already trains."""
    from mlm_suite import MlmSuiteForMaskedLM

    model = MlmSuiteForMaskedLM(make_tiny_config())
    modes = lambda: {module.training for module in model.modules()}  # noqa: E731
    assert model.eval() is model and modes() == {False}
    model.encoder.layers[1].attention.train()  # one submodule out of step: the next call walks again
    assert model.eval() is model and modes() == {False}
    assert model.train() is model and modes() == {True}

    walks = []
    module_train = torch.nn.Module.train
    monkeypatch.setattr(torch.nn.Module, "train", lambda module, mode=True: walks.append(module) or module_train(module, mode))
    assert model.train() is model and walks == [] and modes() == {True}
    model.lm_head.eval()
    model.train()
    assert modes() == {True} and model in walks
    with pytest.raises(ValueError, match="boolean"):
        model.train("yes")


def test_the_base_class_names_no_head_and_each_head_declares_its_auto_class():
    """``MlmSuitePreTrainedModel`` reads what a head declares (``auto_class_name``, ``check_before_save``) instead of
    switching on head classes defined after it; a saved folder's ``auto_map`` sends each Auto class to its class, and
    the class saved to its own (a pair head reloads as one)."""
    import ast
    import inspect

    from mlm_suite.model import AUTO_CLASSES, MlmSuiteForPairClassification, MlmSuiteForSentenceEmbedding, modeling_mlm_suite

    source = ast.parse(inspect.getsource(modeling_mlm_suite.MlmSuitePreTrainedModel))
    named = {node.id for node in ast.walk(source) if isinstance(node, ast.Name) and node.id.startswith("MlmSuite")}
    assert named <= {"MlmSuitePreTrainedModel", "MlmSuiteConfig"}, named
    assert set(AUTO_CLASSES) == {cls.auto_class_name for cls in map(modeling_mlm_suite.__dict__.get, AUTO_CLASSES.values())}
    assert MlmSuiteForPairClassification.auto_class_name == "AutoModelForSequenceClassification"
    assert MlmSuiteForSentenceEmbedding.auto_class_name is None


def test_the_heads_name_the_flattened_batch_inputs():
    """``cu_seq_lens_q`` and ``max_length_q`` are parameters of every forward (typed, documented), not ``**kwargs``."""
    import inspect

    from tests.helpers import ALL_HEADS

    for head in ALL_HEADS:
        parameters = inspect.signature(head.forward).parameters
        assert parameters["cu_seq_lens_q"].annotation and parameters["max_length_q"].default is None, head.__name__
