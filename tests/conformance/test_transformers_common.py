"""transformers' own ``ModelTesterMixin`` and ``ConfigTester`` run against every mlm_suite class.

This is how a model contributed to transformers is tested: a model tester builds small configs
and inputs, and the mixin's ~120 common tests (save/load round trips, weight init, tied weights,
attention/hidden-state outputs and their gradients, eager vs SDPA, gradient checkpointing,
resizing embeddings, ``return_dict=False``, dtype handling...) run over ``all_model_classes``.
The test files come from the transformers sdist matching the installed version (see
``transformers_sources``). Every skip is transformers' own (GPU-only, flash attention,
DeepSpeed, multi-GPU, a missing optional package, a feature the model does not declare).
"""

from __future__ import annotations

import inspect
import unittest
from unittest import mock

import torch
from transformers.models.auto import modeling_auto

from mlm_suite import (
    MlmSuiteConfig,
    MlmSuiteForMaskedLM,
    MlmSuiteForNextSentencePrediction,
    MlmSuiteForPairClassification,
    MlmSuiteForPreTraining,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
)
from tests.conformance.transformers_sources import load
from tests.helpers import ARCHITECTURES

modeling_common, configuration_common = load()
ids_tensor = modeling_common.ids_tensor
random_attention_mask = modeling_common.random_attention_mask

# A model contributed to transformers is listed in the Auto name mappings, which the mixin reads
# to tell a base model from a head and to build labels; ours are listed there for the tests only.
AUTO_NAME_MAPPINGS = {
    "MODEL_MAPPING_NAMES": MlmSuiteModel,
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": MlmSuiteForMaskedLM,
    "MODEL_FOR_PRETRAINING_MAPPING_NAMES": MlmSuiteForPreTraining,
    "MODEL_FOR_NEXT_SENTENCE_PREDICTION_MAPPING_NAMES": MlmSuiteForNextSentencePrediction,
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": MlmSuiteForSequenceClassification,
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": MlmSuiteForTokenClassification,
    "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES": MlmSuiteForQuestionAnswering,
}


class MlmSuiteModelTester:
    """Small configs and inputs, with the attribute names ``ModelTesterMixin`` reads."""

    def __init__(self, parent, batch_size=13, seq_length=7, is_training=True, **config_overrides):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.vocab_size = 99
        self.hidden_size = 32
        self.num_hidden_layers = 2
        self.num_attention_heads = 4
        self.intermediate_size = 37
        self.type_vocab_size = 2
        # Real tag names, as a fine-tuned model has: saving a token-classification head with transformers'
        # placeholders (LABEL_0...) warns, and the mixin saves every class many times.
        self.labels = ("O", "B-PER", "I-PER")
        self.num_labels = len(self.labels)
        self.type_sequence_label_size = 2
        self.config_overrides = config_overrides

    def get_config(self) -> MlmSuiteConfig:
        return MlmSuiteConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=512,
            type_vocab_size=self.type_vocab_size,
            id2label=dict(enumerate(self.labels)),
            label2id={label: index for index, label in enumerate(self.labels)},
            **self.config_overrides,
        )

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        attention_mask = random_attention_mask([self.batch_size, self.seq_length])
        token_type_ids = ids_tensor([self.batch_size, self.seq_length], self.type_vocab_size)
        return self.get_config(), input_ids, token_type_ids, attention_mask

    def prepare_config_and_inputs_for_common(self):
        config, input_ids, token_type_ids, attention_mask = self.prepare_config_and_inputs()
        inputs = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}
        return config, inputs

    def create_and_check_heads(self, config, input_ids, token_type_ids, attention_mask):
        """Every head returns the shapes BERT's heads return for the same inputs."""
        batch, seq = input_ids.shape
        inputs = dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
        expected = {
            MlmSuiteModel: ("last_hidden_state", (batch, seq, self.hidden_size)),
            MlmSuiteForMaskedLM: ("logits", (batch, seq, self.vocab_size)),
            MlmSuiteForPreTraining: ("seq_relationship_logits", (batch, 2)),
            MlmSuiteForNextSentencePrediction: ("logits", (batch, 2)),
            MlmSuiteForSequenceClassification: ("logits", (batch, self.num_labels)),
            MlmSuiteForPairClassification: ("logits", (batch, self.num_labels)),
            MlmSuiteForTokenClassification: ("logits", (batch, seq, self.num_labels)),
            MlmSuiteForQuestionAnswering: ("start_logits", (batch, seq)),
        }
        for model_class, (field, shape) in expected.items():
            model = model_class(config).eval()
            with torch.no_grad():
                output = model(**inputs)
            self.parent.assertEqual(tuple(getattr(output, field).shape), shape, model_class.__name__)


class MlmSuiteModelTest(modeling_common.ModelTesterMixin, unittest.TestCase):
    all_model_classes = (
        MlmSuiteModel,
        MlmSuiteForMaskedLM,
        MlmSuiteForPreTraining,
        MlmSuiteForNextSentencePrediction,
        MlmSuiteForSequenceClassification,
        MlmSuiteForTokenClassification,
        MlmSuiteForQuestionAnswering,
    )
    pipeline_model_mapping = {
        "feature-extraction": MlmSuiteModel,
        "fill-mask": MlmSuiteForMaskedLM,
        "question-answering": MlmSuiteForQuestionAnswering,
        "text-classification": MlmSuiteForSequenceClassification,
        "token-classification": MlmSuiteForTokenClassification,
        "zero-shot": MlmSuiteForSequenceClassification,
    }

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for name, model_class in AUTO_NAME_MAPPINGS.items():
            patcher = mock.patch.dict(getattr(modeling_auto, name), {"mlm_suite": model_class.__name__})
            patcher.start()
            cls.addClassCleanup(patcher.stop)
        # One class per model type fits a mapping: the pair head gets a type (and a test class) of its own.
        patcher = mock.patch.dict(
            modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
            {"mlm_suite_pair": MlmSuiteForPairClassification.__name__},
        )
        patcher.start()
        cls.addClassCleanup(patcher.stop)

    def setUp(self):
        self.model_tester = MlmSuiteModelTester(self)
        self.config_tester = configuration_common.ConfigTester(self, config_class=MlmSuiteConfig, hidden_size=37)

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels and model_class is MlmSuiteForPreTraining:
            # As in BERT's test: the mixin gives a pretraining head no labels of its own.
            batch, seq = self.model_tester.batch_size, self.model_tester.seq_length
            zeros = dict(dtype=torch.long, device=modeling_common.torch_device)
            inputs_dict["labels"] = torch.zeros(batch, seq, **zeros)
            inputs_dict["next_sentence_label"] = torch.zeros(batch, **zeros)
        return inputs_dict

    def test_config(self):
        self.config_tester.run_common_tests()


class MlmSuitePairClassificationTest(MlmSuiteModelTest):
    """The pair head on its own: transformers' tests assume one sequence-classification class per model."""

    all_model_classes = (MlmSuiteForPairClassification,)
    pipeline_model_mapping = {"text-classification": MlmSuiteForPairClassification}


class MlmSuiteModernRecipeTest(MlmSuiteModelTest):
    """The same common tests for the pretraining recipe's architecture: pre-norm, rotary positions."""

    def setUp(self):
        self.model_tester = MlmSuiteModelTester(self, norm_position="pre", position_embedding_type="rotary")
        self.config_tester = configuration_common.ConfigTester(self, config_class=MlmSuiteConfig, hidden_size=37)


class MlmSuiteModernBertOptionsTest(MlmSuiteModelTest):
    """The same common tests with ModernBERT's options: a sliding-window layer whose window (2 tokens either side) is
    shorter than the inputs and a full one, a RoPE base each, no first attention norm, its gated MLP and heads."""

    def setUp(self):
        self.model_tester = MlmSuiteModelTester(self, **ARCHITECTURES["modernbert"])
        self.config_tester = configuration_common.ConfigTester(self, config_class=MlmSuiteConfig, hidden_size=37)


def test_every_head_returns_the_shapes_bert_returns():
    tester = MlmSuiteModelTester(unittest.TestCase())
    tester.create_and_check_heads(*tester.prepare_config_and_inputs())


def test_every_mark_of_transformers_tests_is_registered(pytestconfig):
    # Registered by tests/conformance/conftest.py; an unknown one warns at every run (an error under strict_markers).
    registered = {line.split(":")[0].split("(")[0].strip() for line in pytestconfig.getini("markers")}
    used = {mark.name for _, test in inspect.getmembers(MlmSuiteModelTest) for mark in getattr(test, "pytestmark", [])}
    assert {"flash_attn_test", "accelerate_tests", "torch_compile_test"} <= used
    assert used <= registered, f"unregistered marks: {sorted(used - registered)}"
