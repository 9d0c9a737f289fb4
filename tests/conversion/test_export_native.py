"""``export_native_checkpoint`` and ``mlm-suite export-native``: a folder of transformers' own class (every family
and head mlm_suite converts, ModernBERT's included) goes through ``mlm-suite convert`` and ``mlm-suite export-native``
back to that class, which loads through the Auto classes without ``trust_remote_code``, with the native config and
weights (RoBERTa's unread position rows as zeros), so its logits and hidden states are the native model's; an
mlm_suite model of BERT's options, random or pretrained by the job, exports to ``Bert*``, one of ModernBERT's to
``ModernBert*``, with the logits mlm_suite computes, within 1e-5 at the real positions of a padded batch; the family is
the one asked for, else the one the folder was converted from, else the first that computes what the folder does;
what no family's class computes is refused in one line (exit status 2, nothing written), and a training setting the
class has no place for is left out with a printed line.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from transformers import AutoModel, AutoTokenizer, RobertaConfig, RobertaForMaskedLM

import mlm_suite
from mlm_suite import MlmSuiteModel, convert_checkpoint, export_native_checkpoint
from mlm_suite.errors import UsageError
from tests.conversion.test_families import native_model
from tests.helpers import (
    ARCHITECTURES,
    BERT_ARCHITECTURE,
    NATIVE_BERT,
    NATIVE_FAMILIES,
    NATIVE_HEADS,
    NATIVE_MODERNBERT,
    WORDS,
    assert_one_line_error,
    label_maps,
    make_documents,
    make_native_model,
    make_random_batch,
    make_tiny_config,
    native_batch,
    native_outputs,
    output_differences,
    pretrain_argv,
    printed_lines,
    run_cli,
    train_byte_level_bpe,
    write_text,
)

PREFIXES = {"bert": NATIVE_BERT[0]}
PREFIXES.update({family: prefix for family, (prefix, _, _) in {**NATIVE_FAMILIES, **NATIVE_MODERNBERT}.items()})
NAMES = {head: names for head, (_, _, names) in NATIVE_HEADS.items()}
NAMES["ForPreTraining"] = ("prediction_logits", "seq_relationship_logits")
NAMES["ForNextSentencePrediction"] = ("logits",)
CASES = [(family, head, {}) for family in PREFIXES for head in NATIVE_HEADS]
CASES += [("bert", "ForPreTraining", {}), ("bert", "ForNextSentencePrediction", {}), ("electra", "ForPreTraining", {})]
# ModernBERT's other settings: an untied decoder, biases, another activation, mean pooling, one attention type, dropouts
CASES += [
    ("modernbert", "ForMaskedLM", {"tie_word_embeddings": False}),
    ("modernbert", "ForMaskedLM", {"hidden_activation": "relu", "classifier_activation": "relu", "attention_bias": True,
                                   "mlp_bias": True, "norm_bias": True, "classifier_bias": True}),
    ("modernbert", "ForSequenceClassification", {"classifier_pooling": "mean", "classifier_activation": "relu"}),
    ("modernbert", "ForTokenClassification", {"layer_types": ["full_attention"] * 4}),
    ("modernbert", "Model", {"layer_types": ["sliding_attention"] * 4}),
    ("modernbert", "ForQuestionAnswering", {"embedding_dropout": 0.1, "attention_dropout": 0.2, "mlp_dropout": 0.3,
                                            "classifier_dropout": 0.4}),
]
AUTO_CLASSES = {
    "Model": "AutoModel",
    "ForMaskedLM": "AutoModelForMaskedLM",
    "ForPreTraining": "AutoModelForPreTraining",
    "ForNextSentencePrediction": "AutoModelForNextSentencePrediction",
    "ForSequenceClassification": "AutoModelForSequenceClassification",
    "ForTokenClassification": "AutoModelForTokenClassification",
    "ForQuestionAnswering": "AutoModelForQuestionAnswering",
}


def exported_head(family: str, head: str) -> str:
    """The class a converted ``<family><head>`` exports to: its own, but for ELECTRA's discriminator, whose
    replaced-token-detection head the conversion leaves out (its encoder is the bare ``ElectraModel``)."""
    return "Model" if (family, head) == ("electra", "ForPreTraining") else head


def load_native(folder, head: str):
    """The exported folder through transformers' Auto class for ``head``, with mlm_suite's classes out of reach:
    no ``trust_remote_code``, and a folder whose ``config.json`` is a native one."""
    config = json.loads((folder / "config.json").read_text())
    assert "auto_map" not in config and "converted_from" not in config and not list(folder.glob("*.py"))
    return getattr(transformers, AUTO_CLASSES[head]).from_pretrained(folder).eval()


def assert_same_outputs(ours, theirs, batch: dict, names: tuple[str, ...]) -> float:
    """The largest difference of the logits and every layer's hidden states at the real positions (eager attention
    on both): at most 1e-5."""
    for model in (ours, theirs):
        model.set_attn_implementation("eager")
    found = output_differences(native_outputs(ours, batch, names), native_outputs(theirs, batch, names), batch["attention_mask"].bool())
    hidden = [name for name in found if name.startswith("hidden_")]
    assert len(hidden) == theirs.config.num_hidden_layers + 1 and max(found.values()) <= 1e-5, found
    return max(found.values())


def config_fields(model) -> dict:
    """``model``'s configuration, less where it was loaded from and the class it names."""
    fields = model.config.to_dict()
    return {name: value for name, value in fields.items() if name not in ("_name_or_path", "architectures")}


@pytest.mark.parametrize("family, head, overrides", CASES)
def test_a_converted_folder_exports_back_to_its_class_config_weights_and_outputs(
    family, head, overrides, tmp_path, capsys
):
    native = native_model(family, head, **overrides)
    native.save_pretrained(tmp_path / "native")
    status, _, err = run_cli(["convert", str(tmp_path / "native"), str(tmp_path / "ours")], capsys)
    assert status == 0, err
    converted = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert converted.get("converted_from") == (None if family == "bert" else family)  # BERT's conversion is unchanged
    head = exported_head(family, head)

    status, out, err = run_cli(["export-native", str(tmp_path / "ours"), str(tmp_path / "exported")], capsys)
    assert status == 0 and out.endswith(f"({PREFIXES[family]}{head})\n") and printed_lines(err) == [], err
    exported = load_native(tmp_path / "exported", head)
    assert type(exported).__name__ == PREFIXES[family] + head
    reference = native if type(native) is type(exported) else native.base_model
    assert config_fields(exported) == config_fields(reference)  # labels, problem_type, layer types, RoPE bases, ...
    theirs, ours = reference.state_dict(), exported.state_dict()
    assert ours.keys() == theirs.keys()
    for name, tensor in theirs.items():  # bit for bit, RoBERTa's position rows before its first position included
        assert torch.equal(ours[name], tensor), name
    names = NAMES[head] if reference is native else ()
    assert_same_outputs(exported, reference, native_batch(native.config.pad_token_id), names)


def test_a_roberta_converted_before_its_unread_position_rows_were_kept_exports_them_as_zeros(tmp_path, capsys):
    """A folder converted by an earlier mlm_suite holds the position table without RoBERTa's first ``pad_token_id + 1``
    rows (and no ``position_offset``): it exports with those rows as zeros, the outputs unchanged."""
    from safetensors.torch import load_file, save_file

    native = native_model("roberta", "ForMaskedLM")
    native.save_pretrained(tmp_path / "native")
    assert run_cli(["convert", str(tmp_path / "native"), str(tmp_path / "ours")], capsys)[0] == 0
    config_path, weights_path = tmp_path / "ours" / "config.json", tmp_path / "ours" / "model.safetensors"
    config = json.loads(config_path.read_text())
    unread = config.pop("position_offset")
    assert unread == native.config.pad_token_id + 1
    config_path.write_text(json.dumps(config))
    weights = load_file(weights_path)
    name = "encoder.embeddings.position_embeddings.weight"
    weights[name] = weights[name][unread:].contiguous()
    save_file(weights, weights_path, metadata={"format": "pt"})

    status, _, err = run_cli(["export-native", str(tmp_path / "ours"), str(tmp_path / "exported")], capsys)
    assert status == 0, err
    exported = load_native(tmp_path / "exported", "ForMaskedLM")
    table, original = exported.roberta.embeddings.position_embeddings.weight, native.roberta.embeddings.position_embeddings.weight
    assert not table[:unread].any() and torch.equal(table[unread:], original[unread:])
    assert_same_outputs(exported, native, native_batch(native.config.pad_token_id), NAMES["ForMaskedLM"])


# mlm_suite's heads of BERT's options and the Auto class of the Bert* class each exports to
SCRATCH_HEADS = {
    "MlmSuiteModel": ("Model", ("last_hidden_state", "pooler_output")),
    "MlmSuiteForMaskedLM": ("ForMaskedLM", ("logits",)),
    "MlmSuiteForPreTraining": ("ForPreTraining", ("prediction_logits", "seq_relationship_logits")),
    "MlmSuiteForNextSentencePrediction": ("ForNextSentencePrediction", ("logits",)),
    "MlmSuiteForSequenceClassification": ("ForSequenceClassification", ("logits",)),
    "MlmSuiteForPairClassification": ("ForSequenceClassification", ("logits",)),
    "MlmSuiteForTokenClassification": ("ForTokenClassification", ("logits",)),
    "MlmSuiteForQuestionAnswering": ("ForQuestionAnswering", ("start_logits", "end_logits")),
}
# Those ModernBERT has (it has no token types, so no pair classifier, and no NSP head).
MODERNBERT_HEADS = ("MlmSuiteModel", "MlmSuiteForMaskedLM", "MlmSuiteForSequenceClassification",
                    "MlmSuiteForTokenClassification", "MlmSuiteForQuestionAnswering")


@pytest.mark.parametrize("ours_class", SCRATCH_HEADS)
def test_an_mlm_suite_model_of_bert_s_options_exports_to_bert(ours_class, tmp_path):
    """Post-norm, absolute positions, gelu, [CLS] pooling, two token types: every head exports to its Bert* class."""
    torch.manual_seed(0)
    ours = getattr(mlm_suite, ours_class)(make_tiny_config(**label_maps(["O", "B-PER", "I-PER"]))).eval()
    with torch.no_grad():  # LayerNorms and biases off 1 and 0, so that a mix-up would show
        for name, parameter in ours.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.add_(0.1 * torch.randn_like(parameter))
    ours.save_pretrained(tmp_path / "ours")
    head, names = SCRATCH_HEADS[ours_class]
    exported = load_native(export_native_checkpoint(tmp_path / "ours", tmp_path / "exported"), head)
    assert type(exported).__name__ == "Bert" + head
    assert_same_outputs(exported, ours, make_random_batch(), names)


@pytest.mark.parametrize("ours_class", MODERNBERT_HEADS)
def test_an_mlm_suite_model_of_modernbert_s_options_exports_to_modernbert(ours_class, tmp_path, capsys):
    """Pre-norm, rotary, gated, bias-free, no token types, full and sliding-window layers with their own RoPE base:
    every head ModernBERT has exports to its ModernBert* class (no ``converted_from``: the options decide), whose
    logits and hidden states are mlm_suite's on a padded batch whose rows are longer than the window."""
    config = make_tiny_config(**ARCHITECTURES["modernbert"], type_vocab_size=0, **label_maps(["O", "B-PER", "I-PER"]))
    torch.manual_seed(0)
    model_class = getattr(mlm_suite, ours_class)
    ours = model_class(config, add_pooling_layer=False) if model_class is MlmSuiteModel else model_class(config)
    ours.eval()
    with torch.no_grad():  # LayerNorms off 1, so that a mix-up would show
        for name, parameter in ours.named_parameters():
            if "norm" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
    ours.save_pretrained(tmp_path / "ours")
    status, out, err = run_cli(["export-native", str(tmp_path / "ours"), str(tmp_path / "exported")], capsys)
    head, names = SCRATCH_HEADS[ours_class]
    assert status == 0 and out.endswith(f"(ModernBert{head})\n"), err
    exported = load_native(tmp_path / "exported", head)
    assert type(exported).__name__ == "ModernBert" + head
    assert (exported.config.layer_types, exported.config.sliding_window) == (config.layer_types, 2)
    assert {kind: settings["rope_theta"] for kind, settings in exported.config.rope_parameters.items()} == {
        "full_attention": config.rope_theta, "sliding_attention": config.local_rope_theta}
    batch = make_random_batch(pairs=False)
    assert batch["attention_mask"].sum(dim=1).max() > 2 * exported.config.sliding_window + 1  # a row the window cuts
    assert_same_outputs(exported, ours, batch, names)


def test_a_model_pretrained_by_the_job_exports_to_bert_with_its_tokenizer(tmp_path, capsys):
    corpus = write_text(tmp_path / "corpus.txt", make_documents(40))
    argv = pretrain_argv(tmp_path / "pretrained", corpus, *BERT_ARCHITECTURE)
    status, _, err = run_cli([str(part) for part in argv], capsys)
    assert status == 0, err
    status, out, _ = run_cli(["export-native", str(tmp_path / "pretrained"), str(tmp_path / "exported")], capsys)
    assert status == 0 and out == f"exported {tmp_path / 'pretrained'} -> {tmp_path / 'exported'} (BertForMaskedLM)\n"

    exported = load_native(tmp_path / "exported", "ForMaskedLM")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "exported")
    batch = tokenizer(["the film story was a dream", "music"], padding=True, return_tensors="pt")
    ours = mlm_suite.MlmSuiteForMaskedLM.from_pretrained(tmp_path / "pretrained").eval()
    assert_same_outputs(exported, ours, dict(batch), ("logits",))


def test_a_byte_level_bpe_tokenizer_comes_along(tmp_path):
    tokenizer = train_byte_level_bpe([" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))])
    settings = {**NATIVE_FAMILIES["roberta"][2], "vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    RobertaForMaskedLM(RobertaConfig(**settings)).save_pretrained(tmp_path / "native")
    tokenizer.save_pretrained(tmp_path / "native")
    convert_checkpoint(tmp_path / "native", tmp_path / "ours")
    export_native_checkpoint(tmp_path / "ours", tmp_path / "exported")
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "exported")
    assert reloaded(["the film story", "music"], padding=True) == tokenizer(["the film story", "music"], padding=True)


@pytest.mark.parametrize("family", ["roberta", "distilbert", "electra"])
def test_a_folder_that_names_no_family_goes_to_the_first_that_computes_it(family, tmp_path):
    """Without ``converted_from`` (a folder converted before it was written) the options decide: RoBERTa counts
    positions over the real tokens, DistilBERT has no token types and a ReLU pooler, ELECTRA a GELU one."""
    native = native_model(family, "ForSequenceClassification")
    native.save_pretrained(tmp_path / "native")
    config_file = convert_checkpoint(tmp_path / "native", tmp_path / "ours") / "config.json"
    config = json.loads(config_file.read_text())
    del config["converted_from"]
    config_file.write_text(json.dumps(config))
    export_native_checkpoint(tmp_path / "ours", tmp_path / "exported")
    exported = load_native(tmp_path / "exported", "ForSequenceClassification")
    assert type(exported).__name__ == PREFIXES[family] + "ForSequenceClassification"
    assert_same_outputs(exported, native, native_batch(native.config.pad_token_id), ("logits",))


def test_the_family_asked_for_wins(tmp_path, capsys):
    """ELECTRA's generator with embeddings as wide as its layers computes what BERT's masked LM does: it is tried
    first, and ``--family electra`` gives the ELECTRA class back, with the same logits."""
    native = native_model("electra", "ForMaskedLM", embedding_size=32)
    native.save_pretrained(tmp_path / "native")
    ours = tmp_path / "ours"
    config = json.loads((convert_checkpoint(tmp_path / "native", ours) / "config.json").read_text())
    del config["converted_from"]
    (ours / "config.json").write_text(json.dumps(config))
    batch = native_batch(native.config.pad_token_id)
    for family, expected in ((None, "BertForMaskedLM"), ("electra", "ElectraForMaskedLM")):
        destination = tmp_path / f"as-{family}"
        argv = ["export-native", str(ours), str(destination)] + (["--family", family] if family else [])
        status, out, _ = run_cli(argv, capsys)
        assert status == 0 and out.endswith(f"({expected})\n")
        exported = load_native(destination, "ForMaskedLM")
        assert type(exported).__name__ == expected
        assert_same_outputs(exported, native, batch, ("logits",))


def saved(folder, model_class: str, **options):
    """A random tiny mlm_suite ``model_class`` of ``options`` saved in ``folder``."""
    torch.manual_seed(0)
    config = make_tiny_config(**label_maps(["O", "B-PER", "I-PER"]), **options)
    getattr(mlm_suite, model_class)(config).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "model_class, options, family, fragments",
    [
        ("MlmSuiteForMaskedLM", {"norm_position": "pre", "position_embedding_type": "rotary"}, None,
         ["no transformers class computes what", "the closest, BertForMaskedLM, has no counterpart for norm_position='pre' "
          "(it has 'post'), position_embedding_type='rotary' (it has 'absolute')"]),
        ("MlmSuiteForMaskedLM", {"ffn_type": "geglu", "use_bias": False}, None, ["ffn_type='geglu'", "use_bias=False"]),
        ("MlmSuiteForTokenClassification", {"use_crf": True, "tagging_scheme": "BIO"}, None,
         ["BertForTokenClassification, has no counterpart for use_crf=True (it has False)"]),
        ("MlmSuiteForSequenceClassification", {"classifier_pooling": "mean"}, None,
         ["classifier_pooling='mean' (it has 'cls')"]),
        ("MlmSuiteForSentenceEmbedding", {}, None, ["holds an MlmSuiteForSentenceEmbedding: BERT, RoBERTa, XLM-RoBERTa, "
                                                     "DistilBERT, ELECTRA, ModernBERT have no such class"]),
        ("MlmSuiteForSequenceClassification", {}, "roberta",
         ["cannot be exported as RoBERTa (asked for): RobertaForSequenceClassification has no counterpart for "
          "positions_count='columns' (it has 'real_tokens')"]),
        ("MlmSuiteForSequenceClassification", {}, "distilbert",
         ["type_vocab_size=2 (it has 0), classifier_activation='tanh' (it has 'relu')"]),
        ("MlmSuiteForPreTraining", {}, "electra", ["ELECTRA has no counterpart for MlmSuiteForPreTraining"]),
        ("MlmSuiteModel", {"classifier_activation": "gelu"}, "electra",
         ["ElectraModel has no counterpart for the weights pooler.dense.bias, pooler.dense.weight"]),
        # ModernBERT's layout with what ModernBERT has no field for
        ("MlmSuiteForMaskedLM", ARCHITECTURES["modernbert"], "modernbert",
         ["cannot be exported as ModernBERT (asked for): ModernBertForMaskedLM has no counterpart for "
          "type_vocab_size=2 (it has 0)"]),
        ("MlmSuiteForTokenClassification", {**ARCHITECTURES["modernbert"], "type_vocab_size": 0, "use_crf": True}, None,
         ["the closest, ModernBertForTokenClassification, has no counterpart for use_crf=True (it has False)"]),
        ("MlmSuiteForSequenceClassification",
         {**ARCHITECTURES["modernbert"], "type_vocab_size": 0, "pooler_norm": False}, "modernbert",
         ["ModernBertForSequenceClassification has no counterpart for pooler_norm=False (it has True)"]),
        ("MlmSuiteForQuestionAnswering", {**ARCHITECTURES["modernbert"], "type_vocab_size": 0, "ffn_type": "gelu"},
         "modernbert", ["ModernBertForQuestionAnswering has no counterpart for ffn_type='gelu' (it has 'geglu')"]),
        ("MlmSuiteForPreTraining", {**ARCHITECTURES["modernbert"], "type_vocab_size": 0}, "modernbert",
         ["ModernBERT has no counterpart for MlmSuiteForPreTraining"]),
    ],
)  # fmt: skip
def test_what_no_class_computes_is_refused_in_one_line_and_nothing_is_written(
    model_class, options, family, fragments, tmp_path, capsys
):
    source = saved(tmp_path / "ours", model_class, **options)
    argv = ["export-native", str(source), str(tmp_path / "out")] + (["--family", family] if family else [])
    status, out, err = run_cli(argv, capsys)
    assert status == 2 and out == ""
    assert_one_line_error(err, "export-native", *fragments)
    assert not (tmp_path / "out").exists()


def test_a_training_setting_the_class_has_no_place_for_is_left_out_with_a_line(tmp_path, capsys):
    source = saved(tmp_path / "ours", "MlmSuiteForSequenceClassification", label_smoothing=0.1, pooler_dropout=0.2)
    export_native_checkpoint(source, tmp_path / "exported")
    assert printed_lines(capsys.readouterr().err) == [
        f"mlm_suite: exporting {source}: {option} left out (BertForSequenceClassification has 0.0): it changes "
        "training, not the outputs"
        for option in ("label_smoothing=0.1", "pooler_dropout=0.2")
    ]


def test_a_native_folder_and_a_used_output_folder_are_refused(tmp_path, capsys):
    native_model("bert", "ForMaskedLM").save_pretrained(tmp_path / "native")
    with pytest.raises(UsageError, match="holds a 'bert' model, not an mlm_suite one"):
        export_native_checkpoint(tmp_path / "native", tmp_path / "out")
    source = saved(tmp_path / "ours", "MlmSuiteForMaskedLM")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("an earlier run's")
    status, _, err = run_cli(["export-native", str(source), str(tmp_path / "used")], capsys)
    assert status == 2 and "--overwrite_output_dir" in err
    status, _, _ = run_cli(["export-native", str(source), str(tmp_path / "used"), "--overwrite_output_dir"], capsys)
    assert status == 0 and type(AutoModel.from_pretrained(tmp_path / "used")).__name__ == "BertModel"


def test_a_converted_modernbert_folder_with_an_option_modernbert_lacks_is_refused_in_one_line(tmp_path, capsys):
    """The family the folder was converted from is kept to: ModernBERT's positions count columns, so
    ``positions_count: real_tokens`` is refused, and no other family computes its sliding-window, pre-norm, gated
    layers."""
    native = make_native_model("modernbert", "ForMaskedLM")
    native.save_pretrained(tmp_path / "native")
    config_file = convert_checkpoint(tmp_path / "native", tmp_path / "converted") / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "positions_count": "real_tokens"}))
    status, out, err = run_cli(["export-native", str(tmp_path / "converted"), str(tmp_path / "out")], capsys)
    assert status == 2 and out == "" and not (tmp_path / "out").exists()
    assert_one_line_error(
        err, "export-native", "cannot be exported as ModernBERT (config.json's converted_from): ModernBertForMaskedLM "
        "has no counterpart for positions_count='real_tokens' (it has 'columns')",
    )
    status, _, err = run_cli(["export-native", str(tmp_path / "converted"), str(tmp_path / "out"), "--family", "bert"],
                             capsys)
    assert status == 2 and not (tmp_path / "out").exists() and "layer_types" in err
