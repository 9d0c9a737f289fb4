"""``convert_checkpoint`` on RoBERTa, XLM-RoBERTa, DistilBERT and ELECTRA folders: random-weight fp32 folders saved
by transformers' own classes, every head mlm_suite has a counterpart for, convert to models whose logits and every
layer's hidden states equal transformers' within 1e-5 at the real positions, on a padded batch and on the same
sequences flattened (the padding-free layout), with eager and SDPA attention; labels, ``problem_type`` and the
tokenizer come along; what mlm_suite cannot express is refused in one line, and what is left out on purpose is said.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from transformers import AutoTokenizer, RobertaConfig, RobertaForMaskedLM

import mlm_suite
from mlm_suite import MlmSuiteModel, convert_checkpoint
from mlm_suite.data.flattening import flatten_batch
from mlm_suite.errors import UsageError
from tests.helpers import (
    NATIVE_FAMILIES,
    NATIVE_HEADS,
    WORDS,
    assert_labels_and_loss_come_along,
    assert_one_line_error,
    converted_folder,
    make_native_model,
    native_batch,
    native_outputs,
    output_differences,
    printed_lines,
    run_cli,
    train_byte_level_bpe,
)

CASES = [(family, head) for family in NATIVE_FAMILIES for head in NATIVE_HEADS] + [("electra", "ForPreTraining")]


def native_model(family: str, head: str, **overrides):
    """A random model of transformers' class for ``family`` and ``head``, with that head's labels."""
    return make_native_model(family, head, **{**(NATIVE_HEADS[head][0] if head in NATIVE_HEADS else {}), **overrides})


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("family, head", CASES)
def test_converted_outputs_equal_transformers_padded_and_flattened(family, head, attention, tmp_path):
    native = native_model(family, head)
    destination, config = converted_folder(native, tmp_path)
    ours_class = "MlmSuiteModel" if head == "ForPreTraining" else NATIVE_HEADS[head][1]
    assert config["architectures"] == [ours_class] and config["model_type"] == "mlm_suite"
    pooler = {"add_pooling_layer": getattr(native, "pooler", None) is not None} if ours_class == "MlmSuiteModel" else {}
    ours = getattr(mlm_suite, ours_class).from_pretrained(destination, **pooler).eval()
    native.set_attn_implementation(attention)
    ours.set_attn_implementation(attention)
    names = NATIVE_HEADS[head][2] if head in NATIVE_HEADS else ()  # the discriminator: its encoder's hidden states

    batch = native_batch(native.config.pad_token_id)
    real = batch["attention_mask"].bool()
    theirs = native_outputs(native, batch, names)
    assert len([name for name in theirs if name.startswith("hidden_")]) == 3  # the embeddings' and 2 layers'
    padded = output_differences(native_outputs(ours, batch, names), theirs, real)
    flat_batch = flatten_batch(batch, masked_lm_positions=False)
    flattened = output_differences(native_outputs(ours, flat_batch, names), theirs, real, flattened=True)
    for layout, found in (("padded", padded), ("flattened", flattened)):
        assert max(found.values()) <= 1e-5, (layout, found)


@pytest.mark.parametrize("family", ["roberta", "xlm-roberta"])
def test_roberta_positions_count_real_tokens_in_a_left_native_batch(family, tmp_path):
    """RoBERTa numbers the non-pad tokens: a left-padded row starts at its first real token, as it does converted."""
    native = native_model(family, "ForMaskedLM")
    destination, config = converted_folder(native, tmp_path)
    assert (config["positions_count"], config["max_position_embeddings"]) == ("real_tokens", 40 - 2)
    ours = mlm_suite.MlmSuiteForMaskedLM.from_pretrained(destination).eval()
    batch = native_batch(native.config.pad_token_id, left=True)
    found = output_differences(native_outputs(ours, batch, ("logits",)), native_outputs(native, batch, ("logits",)), batch["attention_mask"].bool())
    assert max(found.values()) <= 1e-5, found


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_an_untied_head_converts_the_bias_its_forward_adds(family, tmp_path):
    """With ``tie_word_embeddings=False`` the head's bias and its decoder's bias are two weights (BERT's
    ``cls.predictions.bias`` and ``.decoder.bias``, RoBERTa's ``lm_head.bias`` and ``.decoder.bias``); the forward pass
    adds the decoder's."""
    native = native_model(family, "ForMaskedLM", tie_word_embeddings=False)
    head = native.cls.predictions if family == "bert" else native.lm_head
    with torch.no_grad():
        head.decoder.bias.normal_()
    assert not torch.equal(head.decoder.bias, head.bias)
    destination, _ = converted_folder(native, tmp_path)
    ours = mlm_suite.MlmSuiteForMaskedLM.from_pretrained(destination).eval()
    batch = native_batch(native.config.pad_token_id)
    found = output_differences(native_outputs(ours, batch, ("logits",)), native_outputs(native, batch, ("logits",)), batch["attention_mask"].bool())
    assert max(found.values()) <= 1e-5, found


@pytest.mark.parametrize("family", NATIVE_FAMILIES)
@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForTokenClassification"])
def test_labels_problem_type_and_loss_come_along(family, head, tmp_path):
    assert_labels_and_loss_come_along(native_model(family, head), head, tmp_path)


@pytest.mark.parametrize(
    "family, head, expected",
    [
        ("roberta", "ForSequenceClassification", {"classifier_activation": None, "pooler_dropout": 0.1, "type_vocab_size": 1}),
        ("electra", "ForSequenceClassification", {"classifier_activation": "gelu", "pooler_dropout": 0.1, "embedding_size": 16}),
        ("distilbert", "ForSequenceClassification", {"classifier_activation": "relu", "classifier_dropout": 0.2,
                                                     "attention_output_dropout": 0.0, "type_vocab_size": 0}),
        ("distilbert", "ForQuestionAnswering", {"qa_dropout": 0.1, "classifier_dropout": None}),
    ],
)
def test_each_family_s_dropouts_and_activations_are_carried(family, head, expected, tmp_path):
    """Dropout is off in the exactness tests; here the families' defaults: each lands where that family drops out
    (``config.json`` holds a family option only when it is not BERT's)."""
    prefix, config_class, settings = NATIVE_FAMILIES[family]
    sizes = {name: value for name, value in settings.items() if "dropout" not in name}  # the family's own dropouts
    torch.manual_seed(0)
    native = getattr(transformers, prefix + head)(getattr(transformers, config_class)(**sizes))
    _, config = converted_folder(native, tmp_path)
    assert {name: config.get(name) for name in expected} == expected


def test_electra_without_a_projection_converts_to_hidden_size_embeddings(tmp_path):
    native = native_model("electra", "ForMaskedLM", embedding_size=32)
    destination, config = converted_folder(native, tmp_path)
    assert "embedding_size" not in config
    ours = mlm_suite.MlmSuiteForMaskedLM.from_pretrained(destination).eval()
    assert not hasattr(ours.encoder.embeddings, "project")
    batch = native_batch(0)
    found = output_differences(native_outputs(ours, batch, ("logits",)), native_outputs(native, batch, ("logits",)), batch["attention_mask"].bool())
    assert max(found.values()) <= 1e-5, found


def test_electra_discriminator_head_is_left_out_with_a_line(tmp_path, capsys):
    native = native_model("electra", "ForPreTraining")
    converted_folder(native, tmp_path)
    lines = printed_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith(f"mlm_suite: converting {tmp_path / 'native'}: ELECTRA's "
                                                   "discriminator_predictions (discriminator_predictions.dense.bias")
    assert "replaced-token-detection head has no mlm_suite counterpart" in lines[0]


def test_a_roberta_pooler_beside_a_masked_lm_head_is_dropped_with_a_line(tmp_path, capsys):
    native = native_model("roberta", "ForMaskedLM")
    pooler = native_model("roberta", "Model").pooler
    state = {**native.state_dict(), **{f"roberta.pooler.{name}": t for name, t in pooler.state_dict().items()}}
    native.save_pretrained(tmp_path / "native", state_dict=state)
    destination = convert_checkpoint(tmp_path / "native", tmp_path / "ours")
    assert printed_lines(capsys.readouterr().err) == [
        f"mlm_suite: converting {tmp_path / 'native'}: RoBERTa's pooler (pooler.dense.bias, pooler.dense.weight) "
        "dropped: MlmSuiteForMaskedLM does not use one"
    ]
    assert json.loads((destination / "config.json").read_text())["architectures"] == ["MlmSuiteForMaskedLM"]


def test_byte_level_bpe_tokenizer_comes_along(tmp_path):
    """A RoBERTa folder with its byte-level BPE tokenizer: the converted folder tokenizes alike, ``<s>``/``</s>``
    around the text and no token type ids."""
    tokenizer = train_byte_level_bpe([" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))])
    settings = {**NATIVE_FAMILIES["roberta"][2], "vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    torch.manual_seed(0)
    native = RobertaForMaskedLM(RobertaConfig(**settings))
    native.save_pretrained(tmp_path / "native")
    tokenizer.save_pretrained(tmp_path / "native")
    destination = convert_checkpoint(tmp_path / "native", tmp_path / "ours")
    reloaded = AutoTokenizer.from_pretrained(destination)
    encoded = reloaded(["the film story", "music"], padding=True)
    assert encoded == tokenizer(["the film story", "music"], padding=True) and "token_type_ids" not in encoded
    assert reloaded.convert_ids_to_tokens(encoded["input_ids"][1])[:3] == ["<s>", "music", "</s>"]


@pytest.mark.parametrize(
    "family, head, overrides, message",
    [
        ("roberta", "ForMultipleChoice", {}, "RobertaForMultipleChoice cannot be converted: mlm_suite has no multiple-choice head"),
        ("xlm-roberta", "ForMultipleChoice", {}, "XLMRobertaForMultipleChoice cannot be converted"),
        ("distilbert", "ForMultipleChoice", {}, "DistilBertForMultipleChoice cannot be converted"),
        ("electra", "ForMultipleChoice", {}, "ElectraForMultipleChoice cannot be converted"),
        ("roberta", "ForCausalLM", {"is_decoder": True}, "decoder RoBERTa checkpoints (is_decoder / add_cross_attention)"),
        ("distilbert", "Model", {"sinusoidal_pos_embds": True}, "sinusoidal_pos_embds=True: DistilBERT keeps those positions fixed"),
        ("roberta", "ForMaskedLM", {"hidden_act": "relu"}, "hidden_act='relu': RoBERTa's MLM head applies gelu"),
        ("electra", "ForMaskedLM", {"hidden_act": "relu"}, "hidden_act='relu': ELECTRA's generator head applies gelu"),
        ("electra", "ForQuestionAnswering", {"num_labels": 3}, "qa_outputs.bias has shape (3,), but MlmSuiteForQuestionAnswering"),
    ],
)
def test_what_mlm_suite_cannot_express_is_refused_in_one_line(family, head, overrides, message, tmp_path):
    native = native_model(family, head, **overrides)
    native.save_pretrained(tmp_path / "native")
    with pytest.raises(UsageError) as error:
        convert_checkpoint(tmp_path / "native", tmp_path / "out")
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()


def test_cli_converts_every_family_and_refuses_with_exit_2(tmp_path, capsys):
    for family in NATIVE_FAMILIES:
        native_model(family, "ForMaskedLM").save_pretrained(tmp_path / family)
        status, out, _ = run_cli(["convert", str(tmp_path / family), str(tmp_path / f"{family}-ours")], capsys)
        assert status == 0 and out == f"converted {tmp_path / family} -> {tmp_path / f'{family}-ours'} " \
                                      "(MlmSuiteForMaskedLM, classifier_pooling=cls)\n"
    native_model("electra", "ForMultipleChoice").save_pretrained(tmp_path / "choice")
    status, out, err = run_cli(["convert", str(tmp_path / "choice"), str(tmp_path / "out")], capsys)
    assert status == 2 and out == ""
    assert_one_line_error(err, "convert", "ElectraForMultipleChoice cannot be converted")
    assert not (tmp_path / "out").exists()


def test_a_converted_folder_loads_with_the_auto_classes_as_its_head(tmp_path):
    native = native_model("electra", "ForPreTraining")
    destination, _ = converted_folder(native, tmp_path)
    assert type(transformers.AutoModel.from_pretrained(destination)) is MlmSuiteModel


# --------------------------------------------------------------------------------------------
# One list of families
# --------------------------------------------------------------------------------------------
def test_every_family_of_the_registry_is_tested_documented_and_named_in_the_help():
    """What names or counts the families reads the registry: the tests' tiny folders cover each one, the docs' table
    has a row for each family besides BERT, and the help texts list every name."""
    from pathlib import Path

    from mlm_suite.conversion import FAMILY_NAMES, REGISTRY
    from mlm_suite.jobs.common.commands import SUBCOMMANDS
    from tests.helpers import NATIVE_BERT, NATIVE_MODERNBERT

    tested = {"bert": NATIVE_BERT, **NATIVE_FAMILIES, **NATIVE_MODERNBERT}
    assert {family.model_types[0] for family in REGISTRY} == set(tested)
    table = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text(encoding="utf-8")
    section = table.split("## The other families at a glance", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == [family.name for family in REGISTRY[1:]]  # rows[0] is the header
    assert all(family.name in FAMILY_NAMES for family in REGISTRY) and FAMILY_NAMES in SUBCOMMANDS["convert"][1]


def test_a_family_without_transformers_classes_converts_in_and_not_out(tmp_path, monkeypatch, capsys):
    """A family whose code ships with its folders (``trust_remote_code``, as NeoBERT's or NomicBERT's) has no way
    back: registered without it, its folders convert, and export-native says it cannot write one."""
    import dataclasses

    from mlm_suite.conversion import FAMILIES
    from mlm_suite.conversion.roberta import ROBERTA

    remote = dataclasses.replace(ROBERTA, name="RemoteRoBERTa", model_types=("remote-roberta",), native_config=None,
                                 native_rename=None)
    assert not remote.exports
    monkeypatch.setitem(FAMILIES, "remote-roberta", remote)
    native = native_model("roberta", "ForMaskedLM")
    native.save_pretrained(tmp_path / "native")
    config_path = tmp_path / "native" / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "model_type": "remote-roberta"}))
    destination = convert_checkpoint(tmp_path / "native", tmp_path / "ours")
    assert json.loads((destination / "config.json").read_text())["converted_from"] == "remote-roberta"
    ours = mlm_suite.MlmSuiteForMaskedLM.from_pretrained(destination).eval()
    batch = native_batch(native.config.pad_token_id)
    found = output_differences(native_outputs(ours, batch, ("logits",)), native_outputs(native, batch, ("logits",)),
                               batch["attention_mask"].bool())
    assert max(found.values()) <= 1e-5, found
    status, _, err = run_cli(["export-native", str(destination), str(tmp_path / "exported")], capsys)
    assert status == 2 and "'remote-roberta', has no transformers class to write: export-native writes bert," in err
    assert not (tmp_path / "exported").exists()
