"""``convert_checkpoint`` on ModernBERT folders: random-weight fp32 folders saved by transformers' own classes (4
layers, full and sliding-window attention with a window shorter than the sequences, a RoPE base per layer type), every
head mlm_suite has a counterpart for, convert to models whose logits and every layer's hidden states equal
transformers' within 1e-5 at the real positions, padded and flattened, eager and SDPA; older configs
(``global_attn_every_n_layers``, ``global_rope_theta``) read as transformers reads them; labels and
``problem_type`` come along; what mlm_suite cannot express is refused in one line.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import ModernBertConfig

import mlm_suite
from mlm_suite import convert_checkpoint
from mlm_suite.conversion.modernbert import layer_types
from mlm_suite.data.flattening import flatten_batch
from mlm_suite.errors import UsageError
from tests.helpers import (
    NATIVE_HEADS,
    NATIVE_LENGTHS,
    assert_labels_and_loss_come_along,
    assert_one_line_error,
    converted_folder,
    make_native_model,
    native_batch,
    native_outputs,
    output_differences,
    run_cli,
)


def native_model(head: str, **overrides):
    """A random ``ModernBert<head>`` of the tiny settings, with that head's labels."""
    return make_native_model("modernbert", head, **{**NATIVE_HEADS[head][0], **overrides})


def assert_converted_outputs_equal(native, head: str, tmp_path, attention: str = "sdpa", **batch_options) -> dict:
    """Convert ``native``; its outputs on a padded batch and on the same sequences flattened are transformers' within
    1e-5 at the real positions. Returns the largest difference per layout."""
    destination, config = converted_folder(native, tmp_path)
    ours_class = NATIVE_HEADS[head][1]
    assert config["architectures"] == [ours_class] and config["model_type"] == "mlm_suite"
    ours = getattr(mlm_suite, ours_class).from_pretrained(destination).eval()
    native.set_attn_implementation(attention)
    ours.set_attn_implementation(attention)
    names = tuple(name for name in NATIVE_HEADS[head][2] if name != "pooler_output")  # ModernBertModel has none
    batch = native_batch(native.config.pad_token_id, **batch_options)
    real = batch["attention_mask"].bool()
    theirs = native_outputs(native, batch, names)
    assert len([name for name in theirs if name.startswith("hidden_")]) == 5  # the embeddings' and 4 layers'
    found = {"padded": output_differences(native_outputs(ours, batch, names), theirs, real)}
    if not batch_options:
        flat = flatten_batch(batch, masked_lm_positions=False)
        found["flattened"] = output_differences(native_outputs(ours, flat, names), theirs, real, flattened=True)
    for layout, differences in found.items():
        assert max(differences.values()) <= 1e-5, (layout, differences)
    return {layout: max(differences.values()) for layout, differences in found.items()}


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("head", list(NATIVE_HEADS))
def test_converted_outputs_equal_transformers_padded_and_flattened(head, attention, tmp_path):
    native = native_model(head)
    assert set(native.config.layer_types) == {"full_attention", "sliding_attention"}
    assert native.config.sliding_window < max(NATIVE_LENGTHS) - 1  # the window leaves tokens out
    assert_converted_outputs_equal(native, head, tmp_path, attention)


def test_the_converted_config_carries_the_layer_types_window_and_rope_bases(tmp_path):
    _, config = converted_folder(native_model("ForMaskedLM"), tmp_path)
    expected = {
        "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
        "local_attention": 4, "rope_theta": 1000.0, "local_rope_theta": 10.0, "norm_position": "pre",
        "position_embedding_type": "rotary", "ffn_type": "geglu", "use_bias": False, "type_vocab_size": 0,
        "first_attention_norm": False, "ffn_output_dropout": 0.0, "pooler_norm": True, "token_head_transform": True,
    }
    assert {name: config.get(name) for name in expected} == expected


def test_a_left_padded_batch_and_mean_pooling_equal_transformers(tmp_path):
    """ModernBERT's positions and windows count columns, as mlm_suite's (``positions_count: columns``) do; its mean
    pooling averages the real tokens."""
    assert_converted_outputs_equal(native_model("ForMaskedLM"), "ForMaskedLM", tmp_path / "left", left=True)
    native = native_model("ForSequenceClassification", classifier_pooling="mean")
    assert_converted_outputs_equal(native, "ForSequenceClassification", tmp_path / "mean")


def test_an_older_config_json_reads_as_transformers_reads_it(tmp_path):
    """``global_attn_every_n_layers`` and ``global_rope_theta``/``local_rope_theta`` (configs saved before
    transformers 5, as answerdotai/ModernBERT-base's): every n-th layer full from the first, the others sliding."""
    native = native_model("ForMaskedLM", global_attn_every_n_layers=3, layer_types=None,
                          rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 500.0},
                                           "sliding_attention": {"rope_type": "default", "rope_theta": 20.0}})
    native.save_pretrained(tmp_path / "native")
    path = tmp_path / "native" / "config.json"
    old = {name: value for name, value in json.loads(path.read_text()).items() if name not in ("layer_types", "rope_parameters")}
    path.write_text(json.dumps({**old, "global_rope_theta": 500.0, "local_rope_theta": 20.0}))
    destination = convert_checkpoint(tmp_path / "native", tmp_path / "ours")
    config = json.loads((destination / "config.json").read_text())
    assert config["layer_types"] == native.config.layer_types == ["full_attention", "sliding_attention",
                                                                   "sliding_attention", "full_attention"]
    assert (config["rope_theta"], config["local_rope_theta"]) == (500.0, 20.0)
    ours = mlm_suite.MlmSuiteForMaskedLM.from_pretrained(destination).eval()
    batch = native_batch(0)
    found = output_differences(native_outputs(ours, batch, ("logits",)), native_outputs(native, batch, ("logits",)),
                               batch["attention_mask"].bool())
    assert max(found.values()) <= 1e-5, found


def test_layer_types_read_past_the_defaults_merged_under_the_folder_s_config():
    """The conversion reads ``config.json`` over ModernBertConfig's defaults, whose ``layer_types`` are those of 22
    layers: a 22-layer folder that says only ``global_attn_every_n_layers`` gets its own pattern, not the default."""
    defaults = ModernBertConfig().to_dict()
    assert layer_types({**defaults, "global_attn_every_n_layers": 2})[:3] == ["full_attention", "sliding_attention",
                                                                              "full_attention"]
    assert layer_types({**defaults, "num_hidden_layers": 2}) == ["full_attention", "sliding_attention"]
    own = ["sliding_attention", "full_attention"]
    assert layer_types({**defaults, "num_hidden_layers": 2, "layer_types": own, "global_attn_every_n_layers": 1}) == own


@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForTokenClassification"])
def test_labels_problem_type_and_loss_come_along(head, tmp_path):
    assert_labels_and_loss_come_along(native_model(head), head, tmp_path)


def test_the_masked_lm_training_loss_equals_transformers_sparse_one(tmp_path):
    """In training mode (dropout off) mlm_suite scores the labelled tokens only, as ModernBERT's sparse prediction
    does: the same loss, from the same logits."""
    native = native_model("ForMaskedLM", sparse_prediction=True)
    destination, _ = converted_folder(native, tmp_path)
    ours = mlm_suite.MlmSuiteForMaskedLM.from_pretrained(destination).train()
    batch = native_batch(0)
    chosen = (torch.rand(batch["input_ids"].shape, generator=torch.Generator().manual_seed(1)) < 0.4)
    labels = batch["input_ids"].masked_fill(~chosen | (batch["attention_mask"] == 0), -100)
    expected, got = native.train()(**batch, labels=labels), ours(**batch, labels=labels)
    assert got.logits.shape == expected.logits.shape == (int((labels != -100).sum()), 99)
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.loss, expected.loss, atol=1e-6, rtol=1e-6)


def test_dropouts_land_where_modernbert_drops_out(tmp_path):
    native = native_model("ForQuestionAnswering", embedding_dropout=0.1, attention_dropout=0.2, mlp_dropout=0.3,
                          classifier_dropout=0.4)
    _, config = converted_folder(native, tmp_path)
    expected = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.2, "attention_output_dropout": 0.2,
                "ffn_inner_dropout": 0.3, "ffn_output_dropout": 0.0, "classifier_dropout": 0.4, "qa_dropout": 0.4}
    assert {name: config.get(name) for name in expected} == expected


@pytest.mark.parametrize(
    "head, overrides, message",
    [
        ("ForMultipleChoice", {}, "ModernBertForMultipleChoice cannot be converted: mlm_suite has no multiple-choice head"),
        ("Model", {"attention_bias": True}, "attention_bias=True, mlp_bias=False, norm_bias=False, classifier_bias=False: "
                                            "mlm_suite's use_bias gives every linear layer and LayerNorm a bias or none"),
        ("Model", {"rope_parameters": {"full_attention": {"rope_type": "linear", "rope_theta": 10.0, "factor": 2.0},
                                       "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}}},
         "rope_parameters['full_attention'] has rope_type 'linear': mlm_suite's RoPE is the default type"),
        ("ForSequenceClassification", {"classifier_activation": "silu"}, "classifier_activation='silu': mlm_suite's heads"),
        ("ForMaskedLM", {"decoder_bias": False}, "decoder_bias=False: mlm_suite's MLM decoder has a bias"),
        ("ForMaskedLM", {"classifier_activation": "relu"},
         "classifier_activation='relu' differs from hidden_activation='gelu': ModernBERT's MLM head applies the first"),
        ("ForMaskedLM", {"sparse_prediction": True, "sparse_pred_ignore_index": -1},
         "sparse_pred_ignore_index=-1: mlm_suite ignores the labels -100"),
        ("ForQuestionAnswering", {"num_labels": 3}, "qa_outputs.bias has shape (3,), but MlmSuiteForQuestionAnswering"),
    ],
)
def test_what_mlm_suite_cannot_express_is_refused_in_one_line(head, overrides, message, tmp_path):
    make_native_model("modernbert", head, **overrides).save_pretrained(tmp_path / "native")
    with pytest.raises(UsageError) as error:
        convert_checkpoint(tmp_path / "native", tmp_path / "out")
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()


def test_cli_converts_and_refuses_with_exit_2(tmp_path, capsys):
    native_model("ForMaskedLM").save_pretrained(tmp_path / "native")
    status, out, _ = run_cli(["convert", str(tmp_path / "native"), str(tmp_path / "ours")], capsys)
    assert status == 0 and out == f"converted {tmp_path / 'native'} -> {tmp_path / 'ours'} " \
                                  "(MlmSuiteForMaskedLM, classifier_pooling=cls)\n"
    make_native_model("modernbert", "ForMultipleChoice").save_pretrained(tmp_path / "choice")
    status, out, err = run_cli(["convert", str(tmp_path / "choice"), str(tmp_path / "out")], capsys)
    assert status == 2 and out == ""
    assert_one_line_error(err, "convert", "ModernBertForMultipleChoice cannot be converted")
    assert not (tmp_path / "out").exists()
