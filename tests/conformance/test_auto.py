"""Auto-class registration: after ``import mlm_suite`` the ``mlm_suite`` model type resolves to our
config and heads through every Auto class while ``bert`` still resolves to HF's BERT; saved
folders carry an ``auto_map`` for all Auto classes, the model code files and safetensors weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers
from transformers import AutoConfig, AutoModel, BertConfig

import mlm_suite
from tests.helpers import make_tiny_config
from mlm_suite.model import AUTO_CLASSES

AUTO_NAMES = [
    "AutoModel",
    "AutoModelForMaskedLM",
    "AutoModelForPreTraining",
    "AutoModelForNextSentencePrediction",
    "AutoModelForSequenceClassification",
    "AutoModelForTokenClassification",
    "AutoModelForQuestionAnswering",
]
CODE_FILES = ("configuration_mlm_suite.py", "modeling_mlm_suite.py", "crf.py")


def test_auto_classes_table_is_complete():
    assert sorted(AUTO_CLASSES) == sorted(AUTO_NAMES)


def test_auto_config_for_model():
    config = AutoConfig.for_model("mlm_suite", hidden_size=64, num_attention_heads=4, norm_position="pre")
    assert type(config) is mlm_suite.MlmSuiteConfig
    assert (config.hidden_size, config.num_attention_heads, config.norm_position) == (64, 4, "pre")


@pytest.mark.parametrize("auto_name", AUTO_NAMES)
def test_auto_model_from_config_gives_our_class(auto_name):
    model = getattr(transformers, auto_name).from_config(make_tiny_config(num_labels=3))
    assert type(model) is getattr(mlm_suite, AUTO_CLASSES[auto_name])
    assert type(model).__module__.startswith("mlm_suite.")


@pytest.mark.parametrize(
    "auto_name, bert_class",
    [
        ("AutoModel", "BertModel"),
        ("AutoModelForMaskedLM", "BertForMaskedLM"),
        ("AutoModelForPreTraining", "BertForPreTraining"),
        ("AutoModelForSequenceClassification", "BertForSequenceClassification"),
    ],
)
def test_bert_still_resolves_to_hf_bert(auto_name, bert_class):
    assert type(AutoConfig.for_model("bert")) is BertConfig
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    model = getattr(transformers, auto_name).from_config(config)
    assert type(model) is getattr(transformers, bert_class)


SAVED_HEADS = [
    ("MlmSuiteModel", {}),
    ("MlmSuiteForMaskedLM", {}),
    ("MlmSuiteForPreTraining", {}),
    ("MlmSuiteForNextSentencePrediction", {}),
    ("MlmSuiteForSequenceClassification", {"num_labels": 3}),
    ("MlmSuiteForPairClassification", {"num_labels": 3}),
    ("MlmSuiteForTokenClassification", {"id2label": {0: "O", 1: "B-PER", 2: "I-PER"}}),  # placeholder names warn
    ("MlmSuiteForQuestionAnswering", {}),
]


@pytest.mark.parametrize("class_name, overrides", SAVED_HEADS)
def test_saved_folder_has_auto_map_code_and_safetensors(class_name, overrides, tmp_path):
    model = getattr(mlm_suite, class_name)(make_tiny_config(**overrides))
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    auto_map = config["auto_map"]
    assert set(auto_map) == {"AutoConfig", *AUTO_NAMES}
    assert auto_map["AutoConfig"] == "configuration_mlm_suite.MlmSuiteConfig"
    expected = dict(AUTO_CLASSES)
    if class_name == "MlmSuiteForPairClassification":
        expected["AutoModelForSequenceClassification"] = class_name
    for auto_name, target in expected.items():
        assert auto_map[auto_name] == f"modeling_mlm_suite.{target}"
    assert config["model_type"] == "mlm_suite"
    assert config["architectures"] == [class_name]
    for filename in CODE_FILES:
        assert (tmp_path / filename).read_text() == (Path(mlm_suite.__file__).parent / "model" / filename).read_text()
    assert (tmp_path / "model.safetensors").exists()
    assert not list(tmp_path.glob("*.bin"))


def test_saving_a_pair_head_does_not_change_other_heads_auto_map(tmp_path):
    mlm_suite.MlmSuiteForPairClassification(make_tiny_config(num_labels=2)).save_pretrained(tmp_path / "pair")
    mlm_suite.MlmSuiteForSequenceClassification(make_tiny_config(num_labels=2)).save_pretrained(tmp_path / "seq")
    auto_map = json.loads((tmp_path / "seq" / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForSequenceClassification"] == "modeling_mlm_suite.MlmSuiteForSequenceClassification"


def test_config_round_trip_through_auto_config(tmp_path):
    config = make_tiny_config(norm_position="pre", ffn_type="geglu", use_crf=True, label_smoothing=0.1)
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is mlm_suite.MlmSuiteConfig
    for name in ("hidden_size", "norm_position", "ffn_type", "use_crf", "label_smoothing", "vocab_size"):
        assert getattr(loaded, name) == getattr(config, name)


def test_auto_model_from_pretrained_without_remote_code(tmp_path):
    model = mlm_suite.MlmSuiteForMaskedLM(make_tiny_config())
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert type(loaded) is mlm_suite.MlmSuiteForMaskedLM
    assert type(AutoModel.from_pretrained(tmp_path)) is mlm_suite.MlmSuiteModel
